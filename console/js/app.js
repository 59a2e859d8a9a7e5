// The console: a client of this agent's public API only (docs/CONSOLE.md). Views by URL hash:
// #/sessions, #/session/<id>, #/inspector.

import { call, setToken, token } from "./api.js";
import { h, say } from "./dom.js";
import { renderInspector } from "./inspector.js";
import { renderSessions } from "./sessions.js";
import { renderTimeline } from "./timeline.js";

const context = { agent: "", agents: {} };
let dispose = () => {};

async function start() {
  const tokenInput = document.getElementById("token");
  tokenInput.value = token();
  document.getElementById("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    setToken(tokenInput.value.trim());
    say(token() ? "Token kept for this browser tab" : "No token");
    route();
  });
  document.getElementById("forget-token").addEventListener("click", () => {
    setToken("");
    tokenInput.value = "";
    say("Token forgotten");
    route();
  });
  try {
    context.agent = (await call("GET", "/health")).agent;
  } catch {
    context.agent = "this agent";
  }
  // Locally every agent of the deployment file is listed (agents.json); deployed, this agent alone.
  try {
    const listed = await fetch("agents.json");
    if (listed.ok) context.agents = await listed.json();
  } catch { /* deployed: no list */ }
  const picker = document.getElementById("agent-picker");
  const names = Object.keys(context.agents).length ? Object.keys(context.agents) : [context.agent];
  picker.replaceChildren(...names.map((name) => h("option", { value: name, selected: name === context.agent }, name)));
  picker.addEventListener("change", () => {
    const url = context.agents[picker.value];
    if (url) location.href = `${url}/console/`;
  });
  window.addEventListener("hashchange", route);
  route();
}

function route() {
  dispose();
  const main = document.getElementById("main");
  const hash = location.hash || "#/sessions";
  const view = hash.startsWith("#/inspector") ? "inspector" : "sessions";
  for (const link of document.querySelectorAll("nav a")) {
    if (link.dataset.view === view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (!token()) {
    // The first visit: where the token comes from, before anything is asked of the API (no 401 to show).
    say("Enter your user token above (kept only for this browser tab)");
    main.replaceChildren(firstVisit());
    return;
  }
  const session = hash.match(/^#\/session\/(.+)$/);
  if (session) dispose = renderTimeline(main, context, decodeURIComponent(session[1])) || (() => {});
  else if (view === "inspector") dispose = renderInspector(main) || (() => {});
  else dispose = renderSessions(main, context) || (() => {});
}

function firstVisit() {
  const agent = context.agent;
  return h("section", { id: "first-visit", class: "first-visit" },
    h("h2", {}, "A user token opens this console"),
    h("p", {}, `Everything the console shows comes from ${agent}'s API, read with a user token: a peer token that ${agent} knows, kept in this tab only.`),
    h("ul", {},
      h("li", {}, "Locally: the ", h("code", {}, "user"), " peer of ", h("code", {}, `[agents.${agent}.peers]`),
        " in the deployment file (", h("code", {}, "fdp_user_…"), "), as the README's curl lines use it."),
      h("li", {}, "Deployed: ", h("code", {}, `flightdeck peers add --agent ${agent} user`), " prints one (docs/PEERS.md).")),
    h("p", {}, "Enter it in ", h("strong", {}, "User token"), " and press Enter."));
}

start();
