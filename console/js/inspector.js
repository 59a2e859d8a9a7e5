// Inspector: open an A2A agent by its card URL (relayed by this agent, to URLs its ALLOWED_HOST_MAPPING
// allows: GET /api/inspector/card), see and validate its card, and chat with it in the version the card
// offers (POST /api/inspector/rpc), with every JSON-RPC request and answer shown raw.

import { call } from "./api.js";
import { h, say } from "./dom.js";

const TERMINAL = new Set(["completed", "failed", "canceled", "rejected", "input-required",
  "TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED", "TASK_STATE_INPUT_REQUIRED"]);

export function renderInspector(main) {
  let opened = null, nextId = 1, contextId = null;
  const url = h("input", { type: "url", id: "card-url", placeholder: "http://host:port/.well-known/agent-card.json" });
  const verdict = h("div", { id: "card-verdict" });
  const card = h("pre", { class: "mono", id: "card-json" });
  const agentToken = h("input", { type: "password", id: "agent-token", autocomplete: "off" });
  const message = h("input", { type: "text", id: "inspector-message" });
  const transcript = h("ol", { id: "transcript", "aria-label": "Conversation" });
  const raw = h("div", { id: "raw-rpc" });
  const chat = h("section", { id: "inspector-chat", hidden: true },
    h("h3", {}, "Chat"),
    h("form", { class: "row actions", onsubmit: send },
      h("label", { for: "agent-token" }, "Token for that agent (optional)"), agentToken,
      h("label", { for: "inspector-message" }, "Message"), message, h("button", { type: "submit" }, "Send")),
    transcript,
    h("details", { id: "raw-details" }, h("summary", {}, "Raw JSON-RPC"), raw));

  main.replaceChildren(
    h("h2", {}, "Inspector"),
    h("form", { class: "row", onsubmit: open },
      h("label", { for: "card-url" }, "Agent card URL"), url, h("button", { type: "submit" }, "Open")),
    verdict,
    h("details", { id: "card-details" }, h("summary", {}, "Agent card"), card),
    chat);

  async function open(event) {
    event.preventDefault();
    try {
      opened = await call("GET", `/api/inspector/card?url=${encodeURIComponent(url.value.trim())}`);
    } catch (error) {
      say(`Card: ${error.message}`, true);
      return;
    }
    contextId = null;
    transcript.replaceChildren();
    raw.replaceChildren();
    card.textContent = JSON.stringify(opened.card, null, 2);
    const problems = opened.problems.length
      ? h("ul", { class: "problems" }, ...opened.problems.map((p) => h("li", {}, p)))
      : h("p", { class: "ok" }, "The card is valid.");
    const talk = opened.version
      ? `Talks A2A v${opened.version} at ${opened.rpc_url}` + (opened.rpc_allowed ? "" : " (not allowed: outside ALLOWED_HOST_MAPPING)")
      : "Offers no JSON-RPC interface this inspector speaks.";
    verdict.replaceChildren(h("h3", {}, opened.card.name || "(no name)"), problems, h("p", { id: "card-version" }, talk));
    chat.hidden = !(opened.version && opened.rpc_allowed);
    say(`Opened ${opened.url}`);
  }

  async function rpc(method, params) {
    const request = { jsonrpc: "2.0", id: nextId++, method, params };
    const body = { url: opened.rpc_url, version: opened.version, request };
    if (agentToken.value) body.token = agentToken.value;
    raw.append(h("p", { class: "muted" }, `→ ${method}`), h("pre", { class: "mono" }, JSON.stringify(request, null, 2)));
    const reply = await call("POST", "/api/inspector/rpc", body);
    raw.append(h("p", { class: "muted" }, `← HTTP ${reply.status}`), h("pre", { class: "mono" }, JSON.stringify(reply.body, null, 2)));
    return reply;
  }

  async function send(event) {
    event.preventDefault();
    const text = message.value.trim();
    if (!text || !opened) return;
    message.value = "";
    transcript.append(h("li", { class: "you" }, h("strong", {}, "You: "), text));
    const v1 = opened.version === "1.0";
    const id = crypto.randomUUID();
    const msg = v1
      ? { messageId: id, role: "ROLE_USER", parts: [{ text }], ...(contextId ? { contextId } : {}) }
      : { kind: "message", messageId: id, role: "user", parts: [{ kind: "text", text }], ...(contextId ? { contextId } : {}) };
    try {
      let reply = await rpc(v1 ? "SendMessage" : "message/send", { message: msg });
      let task = taskOf(reply.body, v1);
      for (let i = 0; task && !TERMINAL.has(stateOf(task)) && i < 20; i++) {
        await new Promise((r) => setTimeout(r, 500));
        reply = await rpc(v1 ? "GetTask" : "tasks/get", { id: task.id });
        task = taskOf(reply.body, v1) || task;
      }
      const said = reply.body?.error ? `error ${reply.body.error.code}: ${reply.body.error.message}` : answerOf(reply.body, task);
      if (task?.contextId) contextId = task.contextId;
      transcript.append(h("li", { class: "agent" }, h("strong", {}, `${opened.card.name || "agent"}: `),
        h("span", { class: "reply" }, said || `(HTTP ${reply.status}, state ${stateOf(task) || "none"})`)));
    } catch (error) {
      say(`Inspector: ${error.message}`, true);
    }
  }
}

function taskOf(body, v1) {
  const result = body?.result;
  if (!result) return null;
  if (v1) return result.task || (result.id && result.status ? result : null);
  return result.kind === "task" ? result : null;
}

function stateOf(task) {
  return task?.status?.state || "";
}

function textOf(parts) {
  return (parts || []).map((p) => p.text || "").filter(Boolean).join(" ");
}

function answerOf(body, task) {
  const result = body?.result || {};
  const message = result.message || (result.kind === "message" ? result : null);
  if (message) return textOf(message.parts);
  const artifacts = (task?.artifacts || []).map((a) => textOf(a.parts)).filter(Boolean);
  return artifacts.join("\n") || textOf(task?.status?.message?.parts);
}
