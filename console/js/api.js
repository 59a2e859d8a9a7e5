// The public API of the agent this page came from (same origin: no CORS). The user's token is kept in
// sessionStorage only: it goes when the tab closes.

const KEY = "flightdeck.user-token";
// The API is beside the console's directory (the page's <base>): deployed, under the stage
// (/prod/console/ -> /prod/api/...); locally at the root.
export const BASE = new URL("..", document.baseURI).pathname.replace(/\/$/, "");

export function token() {
  return sessionStorage.getItem(KEY) || "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(KEY, value);
  else sessionStorage.removeItem(KEY);
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(`${status} ${code}: ${message}`);
    this.status = status;
    this.code = code;
  }
}

function headers(extra = {}) {
  const t = token();
  return { ...(t ? { Authorization: `Bearer ${t}` } : {}), ...extra };
}

async function refusal(response) {
  let code = "http_error", message = response.statusText;
  try {
    const body = await response.json();
    code = body?.error?.code || code;
    message = body?.error?.message || message;
  } catch { /* not JSON: the status says it */ }
  return new ApiError(response.status, code, message);
}

export async function call(method, path, body) {
  const response = await fetch(BASE + path, {
    method,
    headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) throw await refusal(response);
  return response.json();
}

// Server-Sent Events over fetch (EventSource cannot send the Authorization header): yields
// {id, event, data} with data parsed as JSON, until the server ends the stream or `signal` aborts.
export async function* events(path, signal) {
  const response = await fetch(BASE + path, { headers: headers({ Accept: "text/event-stream" }), signal });
  if (!response.ok) throw await refusal(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
      const frame = parseFrame(block);
      if (frame) yield frame;
    }
  }
}

export function parseFrame(block) {
  const frame = { id: "", event: "message", data: "" };
  const data = [];
  for (const line of block.split(/\r?\n/)) {
    if (!line || line.startsWith(":")) continue;
    const at = line.indexOf(":");
    const name = at < 0 ? line : line.slice(0, at);
    const value = at < 0 ? "" : line.slice(at + 1).replace(/^ /, "");
    if (name === "data") data.push(value);
    else if (name === "id") frame.id = value;
    else if (name === "event") frame.event = value;
  }
  if (!data.length) return null;
  try {
    frame.data = JSON.parse(data.join("\n"));
  } catch {
    return null;
  }
  return frame;
}

// A whole timeline as it stands (a replay, one response).
export async function snapshot(path) {
  const out = [];
  for await (const frame of events(path)) out.push(frame);
  return out;
}
