// One task across agents: a lane for the session at this agent, and a lane for each delegate session
// (read through this agent: GET /api/sessions/{id}/delegations/{call}/events). The session's own events
// arrive live (its events stream); a delegate's lane is re-read every second while it works. Above the lanes,
// the same events as a waterfall on one time axis (waterfall.js).

import { ApiError, call, events, snapshot } from "./api.js";
import { costOf } from "./cost.js";
import { clock, h, ms, say } from "./dom.js";
import { OUTCOMES, outcomeBadge } from "./outcomes.js";
import { waterfall } from "./waterfall.js";

const LANE_POLL_MS = 1000;
const RESULTS = new Set(["callback_accepted", "timeout", "dispatch_failed", "canceled", "tool_result"]);
const TITLES = {
  message: "message", thinking: "think", delegating: "delegating", tool_call: "tool call",
  callback_accepted: "answered", timeout: "timed out", dispatch_failed: "dispatch failed", canceled: "canceled",
  tool_result: "tool result", progress: "progress", answer: "answer", question: "question", idle: "idle",
};

export function renderTimeline(main, context, sessionId) {
  const lanes = new Map(); // lane key -> {list, note, seen: event id -> drawn card, writing, events, agent}
  const pollers = new Map(); // delegate session -> poller state
  const callLane = new Map(); // a delegation's tool_use_id -> its delegate's lane key
  let stream = null, closed = false, idle = false, redraw = 0;

  const badge = h("span", { class: "badge working", id: "session-status" }, "…");
  const cancel = h("button", { type: "button", class: "danger", id: "cancel", onclick: cancelSession }, "Cancel");
  const followUp = h("input", { type: "text", id: "follow-up", placeholder: "a follow-up message" });
  const answer = h("input", { type: "text", id: "answer", placeholder: "your answer" });
  const question = h("p", { id: "question-text" });
  const asked = h("form", { class: "question", id: "question-form", hidden: true, onsubmit: (e) => submit(e, answer) },
    question, h("label", { for: "answer" }, "Your answer"), answer, h("button", { type: "submit" }, "Answer"));
  const grid = h("div", { class: "lanes", id: "lanes" });
  const chart = h("div", { id: "waterfall-box" });
  main.replaceChildren(
    h("h2", {}, "Session ", h("span", { class: "mono" }, sessionId), " ", badge),
    h("div", { class: "actions" },
      asked,
      h("form", { onsubmit: (e) => submit(e, followUp) },
        h("label", { for: "follow-up" }, "Follow-up"), followUp, h("button", { type: "submit" }, "Send")),
      h("div", { class: "row" }, cancel, h("a", { href: "#/sessions" }, "All sessions"))),
    h("h3", {}, "Waterfall"),
    chart,
    h("h3", {}, "Steps, a lane per session"),
    grid);
  const ticker = setInterval(() => { if (!idle && !document.hidden) draw(); }, 1000);

  // The waterfall, redrawn once a frame at most, from every lane's events.
  function draw() {
    if (redraw) return;
    redraw = requestAnimationFrame(() => {
      redraw = 0;
      const rows = [...lanes.entries()].map(([key, l]) => ({ key, agent: l.agent, outcome: l.outcome, events: [...l.events.values()] }));
      chart.replaceChildren(waterfall(rows, callLane, idle ? 0 : Date.now()));
    });
  }

  function lane(key, title, detail) {
    if (!lanes.has(key)) {
      const list = h("ol", { "aria-label": `${title} steps` });
      const note = h("p", { class: "muted note" });
      const status = h("span", { class: "lane-outcome" });
      const section = h("section", { class: "lane", dataset: { lane: key, agent: title }, "aria-label": `${title} lane` },
        h("h3", {}, title, " ", h("span", { class: "muted mono" }, detail), " ", status), note, list);
      grid.append(section);
      lanes.set(key, { list, note, status, seen: new Map(), writing: null, events: new Map(), agent: title, outcome: "" });
    }
    return lanes.get(key);
  }

  function step(into, event, agentName) {
    if (event.kind === "text_delta") return writing(into, event);
    const shown = JSON.stringify(event);
    const before = into.seen.get(event.id);
    if (before && before.shown === shown) return; // a replay of what is drawn
    const previous = [...into.events.values()].filter((e) => e.kind !== "idle").at(-1);
    into.events.set(event.id, event);
    if (event.kind === "idle" && event.outcome) setOutcome(into, event.outcome);
    draw();
    if (event.kind === "answer" && into.writing) {
      into.writing.remove();
      into.writing = null;
    }
    const facts = [];
    if (typeof event.duration_ms === "number") facts.push(`took ${ms(event.duration_ms)}`);
    if (typeof event.tokens_in === "number") {
      facts.push(`tokens ${event.tokens_in} in / ${event.tokens_out} out`
        + ` / ${event.tokens_cache_read ?? 0} cache read / ${event.tokens_cache_write ?? 0} cache write`);
      if (costOf([event])) facts.push(`cost ${costOf([event])}`);
    }
    // The answer's: its turn's (one task); idle's: the whole session's.
    const whose = event.kind === "idle" ? "session" : "task";
    if (event.tokens) facts.push(`${whose} ${tokens(event.tokens)}`);
    if (event.tokens && costOf([event])) facts.push(`${whose} cost ${costOf([event])}`);
    if (typeof event.latency_ms === "number") facts.push(`latency ${ms(event.latency_ms)}`);
    if (event.trace_id) facts.push(`trace ${event.trace_id}`);
    const item = h("li", {
      class: `step k-${event.kind}`,
      dataset: { kind: event.kind, at: event.at || "", latency: event.latency_ms ?? "", agent: agentName },
    },
      h("div", { class: "head" },
        h("span", { class: "kind" }, describe(event, previous)),
        h("time", { class: "when", datetime: event.at || "" }, clock(event.at))),
      text(event) ? h("p", { class: "text" }, text(event)) : null,
      facts.length ? h("p", { class: "facts" }, facts.join(" · ")) : null,
      h("details", {}, h("summary", {}, "Payload"), h("pre", { class: "mono payload" }, JSON.stringify(event, null, 2))));
    // Drawn once; redrawn in place when it changed (a think's duration and tokens come once its reply is stored).
    if (before) before.item.replaceWith(item);
    else into.list.append(item);
    into.seen.set(event.id, { shown, item });
  }

  // The answer as the model writes it (text_delta: `text` at `offset` of think `iteration`).
  function writing(into, event) {
    if (!into.writing) {
      into.writing = h("li", { class: "step k-answer writing", dataset: { kind: "writing" } },
        h("div", { class: "head" }, h("span", { class: "kind" }, "answer (writing…)")), h("p", { class: "text", "aria-live": "polite" }));
      into.list.append(into.writing);
    }
    const out = into.writing.querySelector(".text");
    out.textContent = out.textContent.slice(0, event.offset) + event.text;
  }

  function setOutcome(into, outcome) {
    into.outcome = OUTCOMES[outcome] || outcome;
    into.status.replaceChildren(outcomeBadge(outcome));
  }

  function onEvent(event) {
    step(lane("self", context.agent, sessionId), event, context.agent);
    if (event.kind === "delegating" && event.protocol === "flightdeck" && event.peer_session_id) {
      const key = event.peer_session_id;
      callLane.set(event.tool_use_id, key);
      if (!pollers.has(key)) {
        pollers.set(key, { callId: event.tool_use_id, agent: event.agent, done: false, misses: 0 });
        lane(key, event.agent, `session ${key.slice(0, 8)}`);
      }
      const poller = pollers.get(key);
      poller.done = false;
      poller.answered = false;
      poller.current = event.tool_use_id; // a continuation (context_id) reads the same session
      poll(key);
    }
    if (RESULTS.has(event.kind)) {
      for (const [key, poller] of pollers) {
        if (poller.callId !== event.tool_use_id && poller.current !== event.tool_use_id) continue;
        poller.answered = true;
        if (event.kind === "dispatch_failed" && !lanes.get(key).events.size) {
          // Never handed to the delegate: it made no session, there is nothing to read.
          poller.refused = poller.done = true;
          const into = lanes.get(key);
          into.note.textContent = `Refused: the task was never handed to ${poller.agent}, so it has no session. ${event.text || ""}`.trim();
          into.agent = `${poller.agent} (refused)`;
          setOutcome(into, "refused");
        }
      }
    }
    if (event.kind === "question") {
      question.textContent = `The agent asks: ${event.text}`;
      asked.hidden = false;
    }
    if (event.kind === "idle") {
      idle = true;
      const outcome = event.outcome || "completed";
      badge.textContent = OUTCOMES[outcome] || outcome;
      badge.className = `badge ${outcome}`;
      draw();
    } else if (event.kind === "message") {
      asked.hidden = true;
    }
  }

  async function poll(key) {
    const poller = pollers.get(key);
    if (closed || poller.running) return;
    poller.running = true;
    const into = lanes.get(key);
    try {
      while (!closed && !poller.done) {
        try {
          const path = `/api/sessions/${encodeURIComponent(sessionId)}/delegations/${encodeURIComponent(poller.callId)}/events?agent=${encodeURIComponent(poller.agent)}`;
          const frames = await snapshot(path);
          if (poller.refused) break;
          into.note.textContent = "";
          for (const frame of frames) step(into, frame.data, poller.agent);
          const last = frames.at(-1)?.data;
          if (last?.kind === "idle" && (poller.answered || idle)) poller.done = true;
        } catch (error) {
          if (!(error instanceof ApiError) || error.status !== 404) throw error;
          poller.misses += 1; // its session may not be made yet
          if (poller.refused) break;
          if (poller.answered || idle || poller.misses > 30) {
            into.note.textContent = "Its own session cannot be read with this token: only its answer shows.";
            poller.done = true;
          }
        }
        if (!poller.done) await new Promise((r) => setTimeout(r, LANE_POLL_MS));
      }
    } catch (error) {
      if (!poller.refused) into.note.textContent = `Not read: ${error.message}`;
    } finally {
      poller.running = false;
    }
  }

  async function follow() {
    if (stream) stream.abort();
    const controller = (stream = new AbortController());
    idle = false;
    badge.textContent = OUTCOMES.working;
    badge.className = "badge working";
    try {
      const path = `/api/sessions/${encodeURIComponent(sessionId)}/events`;
      for await (const frame of events(path, controller.signal)) onEvent(frame.data);
      // Live, a think is drawn as it starts; its duration and tokens come with the replay, read once the
      // stream ends (the session idle): the steps that changed are redrawn in place.
      if (!controller.signal.aborted) for (const frame of await snapshot(`${path}?follow=false`)) onEvent(frame.data);
    } catch (error) {
      if (!controller.signal.aborted) say(`Timeline: ${error.message}`, true);
    }
  }

  async function submit(event, input) {
    event.preventDefault();
    const content = input.value.trim();
    if (!content) return;
    try {
      const sent = await call("POST", "/api/chat", { session_id: sessionId, content });
      input.value = "";
      asked.hidden = true;
      say(`Sent (${sent.status}${sent.position ? `, position ${sent.position}` : ""})`);
      if (idle) follow(); // the stream ended with the last turn: follow the new one
    } catch (error) {
      say(`Not sent: ${error.message}`, true);
    }
  }

  async function cancelSession() {
    try {
      const done = await call("POST", `/api/sessions/${encodeURIComponent(sessionId)}/cancel`, {});
      say(`Canceled at think ${done.iteration}`);
      badge.textContent = OUTCOMES.canceled;
      badge.className = "badge canceled";
    } catch (error) {
      say(error.code === "session_idle" ? "Nothing to cancel: the session is idle" : `Cancel: ${error.message}`, error.code !== "session_idle");
    }
  }

  follow();
  return () => {
    closed = true;
    clearInterval(ticker);
    if (stream) stream.abort();
  };
}

// previous: the lane's event before it, idle aside (a message after a question is its answer).
function describe(e, previous) {
  const title = TITLES[e.kind] || e.kind;
  if (e.kind === "thinking") return `think ${e.think ?? ""}`;
  if (e.kind === "message" && previous?.kind === "question") return "the answer to its question";
  if (e.kind === "question") return "asks for input";
  if (e.kind === "delegating" && e.context_id) return `answering ${e.agent}'s question`;
  if (e.kind === "delegating" && e.skill) return `calling ${e.agent}'s skill ${e.skill}`;
  if (e.kind === "delegating") return `delegating to ${e.agent}`;
  if (e.kind === "callback_accepted" && e.question) return `${e.agent} asks a question`;
  if (e.kind === "callback_accepted" && e.status === "error") return `${e.agent} failed`;
  if (e.kind === "dispatch_failed") return `${e.agent} refused`;
  if (RESULTS.has(e.kind) && e.agent) return `${e.agent} ${title}`;
  if (e.kind === "tool_call") return `running ${e.tool}`;
  return title;
}

function tokens(t) {
  return `tokens ${t.input} in / ${t.output} out / ${t.cache_read} cache read / ${t.cache_write} cache write`
    + ` (${t.thinks} think(s))`;
}

function text(e) {
  if (e.kind === "delegating" && e.skill) return e.arguments || "{}";
  if (e.kind === "delegating") return e.task || "";
  if (e.kind === "idle") return `${OUTCOMES[e.outcome] || "idle"}: ${e.turn} message(s), ${e.iteration} think(s)`;
  if (e.question) return `asks: ${e.question}`;
  return e.text || "";
}
