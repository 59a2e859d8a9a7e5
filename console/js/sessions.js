// Sessions: the caller's sessions at this agent (GET /api/sessions: 3 DynamoDB requests a page), newest
// first, a page at a time (5 to 100), refreshed live; a filter over the page; a new message starts a session.
// An idle session's outcome is its view's (GET /api/sessions/{id}), read once for each time it went idle.

import { call } from "./api.js";
import { clock, h, isoOf, say } from "./dom.js";
import { OUTCOMES, outcomeBadge } from "./outcomes.js";

const SIZES = [5, 20, 50, 100];
const COLUMNS = ["First message", "Outcome", "Agent", "Started", "Last update", "Turns", "Delegations"];
const REFRESH_MS = 2000;

export function renderSessions(main, context) {
  const cursors = [null]; // the cursor of each page seen so far (null: the first)
  let page = 0, rows = [], next = null, timer = null, asked = 0;
  const outcomes = new Map(); // session id -> {updated_at, outcome} of its view, read once it went idle

  const filter = h("input", { type: "search", id: "filter", placeholder: "text, id or agent" });
  const status = h("select", { id: "status-filter" },
    h("option", { value: "" }, "any"),
    ...Object.entries(OUTCOMES).filter(([k]) => k !== "refused").map(([value, text]) => h("option", { value }, text)));
  const body = h("tbody");
  const prev = h("button", { type: "button", class: "secondary", id: "prev-page", onclick: () => go(page - 1) }, "Previous page");
  const more = h("button", { type: "button", class: "secondary", id: "next-page", onclick: () => go(page + 1) }, "Next page");
  const where = h("span", { class: "muted", id: "page-label" });
  const size = h("select", { id: "page-size" }, ...SIZES.map((n) => h("option", { value: n, selected: n === 20 }, n)));
  const message = h("textarea", { id: "new-message", rows: 2, placeholder: "a message" });

  const form = h("form", { class: "row actions", onsubmit: send },
    h("label", { for: "new-message" }, "New message"), message, h("button", { type: "submit" }, "Send"));
  main.replaceChildren(
    h("h2", {}, `Sessions at ${context.agent}`),
    form,
    h("div", { class: "row" },
      h("label", { for: "filter" }, "Filter"), filter,
      h("label", { for: "status-filter" }, "Outcome"), status,
      h("label", { for: "page-size" }, "Per page"), size,
      prev, more, where),
    h("table", { id: "sessions" },
      h("caption", { class: "muted" }, "Newest first; refreshed every 2 s"),
      h("thead", {}, h("tr", {},
        ...COLUMNS.map((t) => h("th", { scope: "col" }, t)))),
      body));
  filter.addEventListener("input", draw);
  size.addEventListener("change", () => {
    cursors.length = 1; // a cursor belongs to its page size's listing: start over
    go(0);
  });
  status.addEventListener("change", draw);
  message.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) form.requestSubmit();
  });

  async function send(event) {
    event.preventDefault();
    const content = message.value.trim();
    if (!content) return;
    try {
      const started = await call("POST", "/api/chat", { content });
      location.hash = `#/session/${encodeURIComponent(started.session_id)}`;
    } catch (error) {
      say(`Not sent: ${error.message}`, true);
    }
  }

  async function load() {
    const cursor = cursors[page];
    const query = `limit=${size.value}` + (cursor ? `&cursor=${encodeURIComponent(cursor)}` : "");
    const mine = ++asked; // only the latest request draws: a refresh under way must not undo a page change
    try {
      const listing = await call("GET", `/api/sessions?${query}`);
      if (mine !== asked) return;
      rows = listing.sessions;
      next = listing.next_cursor;
      cursors[page + 1] = next;
      // The team's own agents: a message's @-mentions.
      const team = listing.delegates || [];
      message.placeholder = team.length ? `@${team[0]} list three owls` : "ask anything (this agent delegates to no one)";
      draw();
      for (const s of rows) if (s.status === "idle" && outcomes.get(s.session_id)?.updated_at !== s.updated_at) readOutcome(s);
    } catch (error) {
      say(`Sessions: ${error.message}`, true);
    }
  }

  async function readOutcome(s) {
    outcomes.set(s.session_id, { updated_at: s.updated_at, outcome: "" });
    try {
      const view = await call("GET", `/api/sessions/${encodeURIComponent(s.session_id)}`);
      outcomes.set(s.session_id, { updated_at: s.updated_at, outcome: view.outcome });
      draw();
    } catch {
      outcomes.delete(s.session_id); // read again at the next refresh
    }
  }

  function outcomeOf(s) {
    if (s.status === "busy") return "working";
    if (s.status === "canceled") return "canceled";
    return outcomes.get(s.session_id)?.outcome || "";
  }

  function draw() {
    const text = filter.value.trim().toLowerCase();
    const shown = rows.filter((s) =>
      (!status.value || outcomeOf(s) === status.value) &&
      (!text || [s.first_message, s.session_id, s.agent].some((v) => String(v).toLowerCase().includes(text))));
    // data-label: the column's name, shown beside each cell on a narrow screen (style.css).
    const cell = (i, attrs, ...children) => h("td", { ...attrs, dataset: { label: COLUMNS[i] } }, ...children);
    body.replaceChildren(...shown.map((s) => h("tr", { dataset: { session: s.session_id } },
      cell(0, {}, h("a", { href: `#/session/${encodeURIComponent(s.session_id)}` }, s.first_message || s.session_id)),
      cell(1, {}, outcomeOf(s) ? outcomeBadge(outcomeOf(s)) : h("span", { class: "muted" }, "…")),
      cell(2, {}, s.agent),
      cell(3, { class: "mono" }, when(s.created_at)),
      cell(4, { class: "mono" }, when(s.updated_at)),
      cell(5, { class: "num" }, s.turns),
      cell(6, { class: "num" }, s.delegations))));
    if (!shown.length) body.append(h("tr", {}, h("td", { colspan: 7, class: "muted" }, rows.length ? "Nothing matches the filter" : "No sessions yet")));
    prev.disabled = page === 0;
    more.disabled = !next;
    where.textContent = `page ${page + 1}`;
  }

  function go(to) {
    page = Math.max(0, to);
    load();
  }

  load();
  timer = setInterval(() => { if (!document.hidden) load(); }, REFRESH_MS);
  return () => clearInterval(timer);
}

function when(epochMs) {
  const iso = isoOf(epochMs);
  return iso ? `${iso.slice(0, 10)} ${clock(iso)}` : "-";
}
