// One task across agents: a lane for the session at this agent, and a lane for each delegate session
// (read through this agent: GET /api/sessions/{id}/delegations/{call}/events). The session's own events
// arrive live (its events stream); a delegate's lane is re-read every second while it works.

import { ApiError, call, events, snapshot } from "./api.js";
import { clock, h, ms, say } from "./dom.js";

const LANE_POLL_MS = 1000;
const RESULTS = new Set(["callback_accepted", "timeout", "dispatch_failed", "canceled", "tool_result"]);
const TITLES = {
  message: "message", thinking: "think", delegating: "delegating", tool_call: "tool call",
  callback_accepted: "answered", timeout: "timed out", dispatch_failed: "dispatch failed", canceled: "canceled",
  tool_result: "tool result", progress: "progress", answer: "answer", question: "question", idle: "idle",
};

export function renderTimeline(main, context, sessionId) {
  const lanes = new Map(); // lane key -> {list, note, seen: event id -> drawn card, writing}
  const pollers = new Map(); // delegate session -> poller state
  let stream = null, closed = false, idle = false;

  const badge = h("span", { class: "badge busy", id: "session-status" }, "…");
  const cancel = h("button", { type: "button", class: "danger", id: "cancel", onclick: cancelSession }, "Cancel");
  const followUp = h("input", { type: "text", id: "follow-up", placeholder: "a follow-up message" });
  const answer = h("input", { type: "text", id: "answer", placeholder: "your answer" });
  const question = h("p", { id: "question-text" });
  const asked = h("form", { class: "question", id: "question-form", hidden: true, onsubmit: (e) => submit(e, answer) },
    question, h("label", { for: "answer" }, "Your answer"), answer, h("button", { type: "submit" }, "Answer"));
  const grid = h("div", { class: "lanes", id: "lanes" });
  main.replaceChildren(
    h("h2", {}, "Session ", h("span", { class: "mono" }, sessionId), " ", badge),
    h("div", { class: "actions" },
      asked,
      h("form", { onsubmit: (e) => submit(e, followUp) },
        h("label", { for: "follow-up" }, "Follow-up"), followUp, h("button", { type: "submit" }, "Send")),
      h("div", { class: "row" }, cancel, h("a", { href: "#/sessions" }, "All sessions"))),
    grid);

  function lane(key, title, detail) {
    if (!lanes.has(key)) {
      const list = h("ol", { "aria-label": `${title} steps` });
      const note = h("p", { class: "muted note" });
      const section = h("section", { class: "lane", dataset: { lane: key, agent: title }, "aria-label": `${title} lane` },
        h("h3", {}, title, " ", h("span", { class: "muted mono" }, detail)), note, list);
      grid.append(section);
      lanes.set(key, { list, note, seen: new Map(), writing: null });
    }
    return lanes.get(key);
  }

  function step(into, event, agentName) {
    if (event.kind === "text_delta") return writing(into, event);
    const shown = JSON.stringify(event);
    const before = into.seen.get(event.id);
    if (before && before.shown === shown) return; // a replay of what is drawn
    if (event.kind === "answer" && into.writing) {
      into.writing.remove();
      into.writing = null;
    }
    const facts = [];
    if (typeof event.duration_ms === "number") facts.push(`took ${ms(event.duration_ms)}`);
    if (typeof event.tokens_in === "number") {
      facts.push(`tokens ${event.tokens_in} in / ${event.tokens_out} out`
        + ` / ${event.tokens_cache_read ?? 0} cache read / ${event.tokens_cache_write ?? 0} cache write`);
    }
    // The answer's: its turn's (one task); idle's: the whole session's.
    if (event.tokens) facts.push(`${event.kind === "idle" ? "session" : "task"} ${tokens(event.tokens)}`);
    if (typeof event.latency_ms === "number") facts.push(`latency ${ms(event.latency_ms)}`);
    if (event.trace_id) facts.push(`trace ${event.trace_id}`);
    const item = h("li", {
      class: `step k-${event.kind}`,
      dataset: { kind: event.kind, at: event.at || "", latency: event.latency_ms ?? "", agent: agentName },
    },
      h("div", { class: "head" },
        h("span", { class: "kind" }, describe(event)),
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

  function onEvent(event) {
    step(lane("self", context.agent, sessionId), event, context.agent);
    if (event.kind === "delegating" && event.protocol === "flightdeck" && event.peer_session_id) {
      const key = event.peer_session_id;
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
      for (const poller of pollers.values()) if (poller.callId === event.tool_use_id || poller.current === event.tool_use_id) poller.answered = true;
    }
    if (event.kind === "question") {
      question.textContent = `The agent asks: ${event.text}`;
      asked.hidden = false;
    }
    if (event.kind === "idle") {
      idle = true;
      badge.textContent = "idle";
      badge.className = "badge idle";
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
          into.note.textContent = "";
          for (const frame of frames) step(into, frame.data, poller.agent);
          const last = frames.at(-1)?.data;
          if (last?.kind === "idle" && (poller.answered || idle)) poller.done = true;
        } catch (error) {
          if (!(error instanceof ApiError) || error.status !== 404) throw error;
          poller.misses += 1; // its session may not be made yet
          if (poller.answered || idle || poller.misses > 30) {
            into.note.textContent = "Its own session cannot be read with this token: only its answer shows.";
            poller.done = true;
          }
        }
        if (!poller.done) await new Promise((r) => setTimeout(r, LANE_POLL_MS));
      }
    } catch (error) {
      into.note.textContent = `Not read: ${error.message}`;
    } finally {
      poller.running = false;
    }
  }

  async function follow() {
    if (stream) stream.abort();
    const controller = (stream = new AbortController());
    idle = false;
    badge.textContent = "busy";
    badge.className = "badge busy";
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
      badge.textContent = "canceled";
      badge.className = "badge canceled";
    } catch (error) {
      say(error.code === "session_idle" ? "Nothing to cancel: the session is idle" : `Cancel: ${error.message}`, error.code !== "session_idle");
    }
  }

  follow();
  return () => {
    closed = true;
    if (stream) stream.abort();
  };
}

function describe(e) {
  const title = TITLES[e.kind] || e.kind;
  if (e.kind === "thinking") return `think ${e.think ?? ""}`;
  if (e.kind === "delegating") return `delegating to ${e.agent}`;
  if (RESULTS.has(e.kind) && e.agent) return `${e.agent} ${title}`;
  if (e.kind === "tool_call") return `running ${e.tool}`;
  return title;
}

function tokens(t) {
  return `tokens ${t.input} in / ${t.output} out / ${t.cache_read} cache read / ${t.cache_write} cache write`
    + ` (${t.thinks} think(s))`;
}

function text(e) {
  if (e.kind === "delegating") return e.task || "";
  if (e.kind === "idle") return `${e.turn} message(s), ${e.iteration} think(s)`;
  if (e.question) return `asks: ${e.question}`;
  return e.text || "";
}
