// A task's waterfall on one time axis (docs/CONSOLE.md): a row per agent session, its thinks, waits and
// waits for input as bars placed by their times; each call it made a row beneath it, from its dispatch to its
// result, and the delegate's own session right under the delegation that started it (the bar links to it).
// The task's total duration and its critical path (what the end waited on) are drawn with it.

import { costOf } from "./cost.js";
import { h, ms } from "./dom.js";

const RESULTS = new Set(["callback_accepted", "timeout", "dispatch_failed", "canceled", "tool_result"]);
// What became of a call, as its bar and label say.
const CALL_OUTCOME = { timeout: "timed out", dispatch_failed: "refused", canceled: "canceled" };

const time = (iso) => (typeof iso === "string" && iso ? Date.parse(iso) : NaN);

function callOutcome(result) {
  if (!result) return "working";
  if (CALL_OUTCOME[result.kind]) return CALL_OUTCOME[result.kind];
  if (result.question) return "asked";
  return result.status === "error" ? "failed" : "answered";
}

function tokens(e) {
  if (typeof e.tokens_in !== "number") return "";
  const cache = typeof e.tokens_cache_read === "number" ? `, cache ${e.tokens_cache_read} read / ${e.tokens_cache_write ?? 0} written` : "";
  return `${e.tokens_in} in / ${e.tokens_out} out tokens${cache}`;
}

// A session's bars: thinks, waits on its calls, waits for input; and its calls. `end`: where what is under way ends.
function spansOf(events, end) {
  const timed = events.filter((e) => !Number.isNaN(time(e.at)));
  const results = new Map(timed.filter((e) => RESULTS.has(e.kind)).map((e) => [e.tool_use_id, e]));
  const bars = [], calls = [];
  timed.forEach((e, i) => {
    const start = time(e.at);
    if (e.kind === "thinking") {
      const next = timed.slice(i + 1).find((n) => time(n.at) >= start);
      const stop = typeof e.duration_ms === "number" ? start + e.duration_ms : next ? time(next.at) : end;
      const facts = [ms(stop - start), tokens(e), typeof e.tokens_in === "number" ? costOf([e]) : ""].filter(Boolean).join(" · ");
      bars.push({ kind: "think", start, end: stop, label: `think ${e.think ?? ""}`, title: `think ${e.think ?? ""}: ${facts}`, event: e });
    } else if (e.kind === "delegating" || e.kind === "tool_call") {
      const result = results.get(e.tool_use_id);
      const stop = result ? time(result.at) : end;
      const outcome = callOutcome(result);
      const what = e.kind === "tool_call" ? e.tool : e.skill ? `${e.agent}:${e.skill}` : e.agent;
      calls.push({ kind: "call", start, end: stop, outcome, label: `${what}: ${outcome}`, title: `${what}: ${outcome} after ${ms(stop - start)}`, event: e });
    } else if (e.kind === "question") {
      const answer = timed.slice(i + 1).find((n) => n.kind === "message");
      const stop = answer ? time(answer.at) : end;
      bars.push({ kind: "input", start, end: stop, label: "waiting for input", title: `waiting for input: ${ms(stop - start)}`, event: e });
    }
  });
  // A wait: from the calls a think handed out (one dispatch time) to the last of their results.
  const groups = new Map();
  for (const c of calls) groups.set(c.start, [...(groups.get(c.start) || []), c]);
  for (const [start, group] of groups) {
    const stop = Math.max(...group.map((c) => c.end));
    const slowest = group.reduce((a, b) => (b.end > a.end ? b : a));
    bars.push({ kind: "wait", start, end: stop, label: `waits on ${group.length}`, title: `waits on ${group.length} call(s): ${ms(stop - start)}`, slowest });
  }
  return { bars, calls };
}

// rows: [{key, agent, events, outcome}] (this agent's session first); callLane: tool_use_id -> delegate row key;
// now: epoch ms while the task works (bars under way end there), else 0.
export function waterfall(rows, callLane, now) {
  const byKey = new Map(rows.map((r) => [r.key, r]));
  const all = rows.flatMap((r) => r.events).map((e) => time(e.at)).filter((t) => !Number.isNaN(t));
  if (!all.length) return h("p", { class: "muted" }, "No times yet.");
  const t0 = Math.min(...all);
  let t1 = Math.max(...all, now || 0);
  const spans = new Map(rows.map((r) => [r.key, spansOf(r.events, t1)]));
  for (const { bars, calls } of spans.values()) for (const b of [...bars, ...calls]) t1 = Math.max(t1, b.end);
  const span = Math.max(1, t1 - t0);
  const critical = criticalPath(rows[0].key, spans, callLane);

  function bar(b, target) {
    const left = ((b.start - t0) / span) * 100;
    const width = (Math.max(0, b.end - b.start) / span) * 100;
    const attrs = {
      class: `wf-bar k-${b.kind}${b.outcome ? ` o-${b.outcome.replace(" ", "-")}` : ""}${critical.bars.has(b) ? " critical" : ""}`,
      title: b.title,
      dataset: { kind: b.kind, start: b.start - t0, end: b.end - t0, outcome: b.outcome || "", target: target || "" },
    };
    // Placed through the CSSOM: the page's CSP refuses style attributes.
    const position = (el) => Object.assign(el.style, { left: `${left.toFixed(3)}%`, width: `${width.toFixed(3)}%` }) && el;
    if (!target) return position(h("span", attrs, b.label));
    return position(h("a", {
      ...attrs, href: location.hash, "aria-label": `${b.title}: go to its session`,
      onclick: (event) => {
        event.preventDefault();
        const row = document.querySelector(`.wf-row[data-row="${CSS.escape(target)}"]`);
        row?.scrollIntoView({ block: "nearest" });
        row?.focus();
      },
    }, b.label));
  }

  function row(key, label, detail, bars, classes) {
    return h("div", { class: `wf-row ${classes}`, dataset: { row: key }, tabindex: -1, role: "listitem" },
      h("div", { class: "wf-label" }, h("span", { class: "wf-name" }, label), detail ? h("span", { class: "muted" }, ` ${detail}`) : null),
      h("div", { class: "wf-track" }, ...bars));
  }

  const out = [], placed = new Set();
  function place(key, depth) {
    if (placed.has(key) || depth > 3) return;
    placed.add(key);
    const r = byKey.get(key);
    const { bars, calls } = spans.get(key);
    out.push(row(key, r.agent, r.outcome || "", bars.map((b) => bar(b)), `session depth-${depth}`));
    for (const c of calls) {
      const target = callLane.get(c.event.tool_use_id);
      const name = c.event.kind === "tool_call" ? `runs ${c.event.tool}` : c.event.context_id ? `answers ${c.event.agent}` : `→ ${c.event.agent}`;
      out.push(row(`${key}/${c.event.tool_use_id}`, name, "", [bar(c, byKey.has(target) ? target : "")], `call depth-${depth}`));
      if (target && byKey.has(target)) place(target, depth + 1);
    }
  }
  place(rows[0].key, 0);
  for (const r of rows) place(r.key, 1); // a lane no call of these events started (none expected)

  const thinks = rows.flatMap((r) => r.events).filter((e) => e.kind === "thinking");
  const used = thinks.filter((e) => typeof e.tokens_in === "number");
  const sum = (f) => used.reduce((n, e) => n + (e[f] || 0), 0);
  return h("section", { class: "waterfall", id: "waterfall", "aria-label": "Waterfall" },
    h("p", { class: "wf-summary" },
      h("span", { id: "wf-total", dataset: { ms: span } }, `Total ${ms(span)}`),
      " · ", h("span", { id: "wf-tokens" }, used.length
        ? `${sum("tokens_in")} in / ${sum("tokens_out")} out tokens over ${used.length} think(s), every agent`
        : "tokens not known yet"),
      used.length && costOf(used) ? [" · ", h("span", { id: "wf-cost" }, `cost ${costOf(used)}`)] : null),
    h("p", { class: "wf-critical", id: "wf-critical" }, `Critical path: ${critical.steps.join(" → ")}`),
    h("div", { class: "wf-axis", "aria-hidden": "true" },
      h("span", {}, "0"), h("span", {}, ms(Math.round(span / 2))), h("span", {}, ms(span))),
    h("div", { class: "wf-rows", role: "list" }, ...out));
}

// What the task's end waited on: every think of this session, and at each wait the call answered last,
// through that delegate's own session when it has a row.
function criticalPath(key, spans, callLane, depth = 0) {
  const found = { bars: new Set(), steps: [] };
  const s = spans.get(key);
  if (!s || depth > 3) return found;
  const ordered = [...s.bars].sort((a, b) => a.start - b.start);
  for (const b of ordered) {
    if (b.kind === "think" || b.kind === "input") {
      found.bars.add(b);
      found.steps.push(`${b.label} (${ms(b.end - b.start)})`);
    } else if (b.kind === "wait") {
      const c = b.slowest;
      found.bars.add(c);
      const target = callLane.get(c.event.tool_use_id);
      const inner = target ? criticalPath(target, spans, callLane, depth + 1) : null;
      found.steps.push(`${c.event.agent || c.event.tool} ${c.outcome} (${ms(c.end - c.start)})`);
      if (inner) for (const x of inner.bars) found.bars.add(x);
    }
  }
  return found;
}
