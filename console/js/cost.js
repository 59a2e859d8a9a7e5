// What tokens cost, as the API priced them (the timeline's `cost_usd`, `price` and `model`:
// flightdeck.domain.model_prices): the model's list price, an estimate, not a bill.

export function dollars(usd) {
  return `$${usd.toFixed(usd >= 1 ? 2 : usd >= 0.01 ? 4 : 6)}`;
}

function basis(events) {
  const prices = new Set(events.map((e) => `${e.model}, ${e.price.region} prices of ${e.price.recorded}`));
  return `list-price estimate: ${[...prices].join("; ")}`;
}

// Events with tokens (thinks; or one answer's turn, one idle's session): their dollars summed, labelled.
export function costOf(events) {
  const priced = events.filter((e) => typeof e.cost_usd === "number" && e.price);
  const unpriced = [...new Set(events.filter((e) => !priced.includes(e) && e.model).map((e) => e.model))];
  const none = unpriced.length ? `no list price for ${unpriced.join(", ")}` : "";
  if (!priced.length) return none;
  const total = priced.reduce((sum, e) => sum + e.cost_usd, 0);
  return `${dollars(total)} (${basis(priced)}${none ? `; ${none}` : ""})`;
}
