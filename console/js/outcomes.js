// What became of a session's last turn, as the API names it (flightdeck.domain.session_outcome), in words.

import { h } from "./dom.js";

export const OUTCOMES = {
  working: "working",
  completed: "completed",
  timed_out: "timed out",
  canceled: "canceled",
  failed: "failed",
  input_required: "waiting for input",
  refused: "refused", // a delegation never handed over (a lane's, not a session's)
};

export function outcomeBadge(outcome) {
  return h("span", { class: `badge ${outcome}`, dataset: { outcome } }, OUTCOMES[outcome] || outcome);
}
