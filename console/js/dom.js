// Small DOM helpers: every text goes in as text (textContent), never as markup.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// "12:00:01.234" from an event's ISO 8601 UTC time (shown in UTC, as the events carry it).
export function clock(iso) {
  return typeof iso === "string" && iso.length >= 23 ? iso.slice(11, 23) : "";
}

export function ms(value) {
  if (typeof value !== "number") return "";
  return value < 1000 ? `${value} ms` : `${(value / 1000).toFixed(2)} s`;
}

// Epoch milliseconds as the events' ISO 8601 UTC.
export function isoOf(epochMs) {
  return epochMs > 0 ? new Date(epochMs).toISOString() : "";
}

export function say(text, error = false) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.classList.toggle("error", error);
}

export function field(id, labelText, input) {
  input.id = id;
  return [h("label", { for: id }, labelText), input];
}
