"""`flightdeck local demo`: delegations on a local stack, shown as a timeline.

The demo talks to the first agent of the file that delegates to other agents of the file,
and by default gives it one task for each of them at once, so every delegate is exercised.
The timeline is drawn from the agents' own event streams (GET /api/sessions/{id}/events, as
any client would read them): the delegator's session, and each delegate's session of a task
it was given (its id derived as the delegator derives it, read with the delegator's token for
that peer). Every event becomes one line with the seconds elapsed since the task was sent.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from flightdeck import config_file
from flightdeck.config_models import DeploymentFile
from flightdeck.domain.asking import parse_input_required
from flightdeck.domain.peers import new_token as new_peer_token
from flightdeck.domain.records import peer_session_id
from flightdeck.domain.timeline import TimelineEvent, describe
from flightdeck.local.net import direct_opener

SCENARIOS = ("delegate", "parallel", "timeout", "ask", "skills", "tools")
# The tools scenario: an MCP server's tool the delegator calls (examples/mcp-tools.toml, its default file).
TOOLS_SCENARIO_CONFIG = config_file.DEFAULT_CONFIG.parent / "mcp-tools.toml"
TOOLS_SCENARIO_TOOL = "notes__search"
# The skills scenario (docs/SKILLS.md): the delegate's skill the demo calls through the tool its card gives.
SKILLS_SCENARIO_SKILL = "summarise"
SKILLS_SCENARIO_SCHEMA = '{"pages": "number", "issues": "string[]"}'
DEFAULT_SCENARIO = "parallel"
# How long the demo waits for the final answer after sending the task.
ANSWER_BOUND_S = 60.0
POLL_INTERVAL_S = 0.25
# The timeout scenario: the orchestrator gives up long before the worker answers.
TIMEOUT_SCENARIO_WAIT_MS = 3000
TIMEOUT_SCENARIO_THINK_MS = 8000
# The user the demo calls the delegator as: its token is the delegator's [agents.NAME.users] entry.
DEMO_PEER = "user"
# The event streams read the state this often (flightdeck.domain.streaming): a lively timeline.
DEMO_ENV = {"STREAM_POLL_INTERVAL_MS": "200"}
# A delegate's session exists once the dispatch reached it: its stream is asked for until then.
DELEGATE_SESSION_WAIT_S = 10.0
PREVIEW_CHARS = 100
NUMBERS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


class DemoError(RuntimeError):
    pass


@dataclass(frozen=True)
class Plan:
    """Who the demo talks to and what it asks."""

    delegator: str
    # The agents of the file the delegator delegates to, in its file order.
    delegates: tuple[str, ...]
    task: str
    # The bearer token the demo presents (the delegator's `user` peer); "" if the file has none.
    token: str = ""
    # The task is the user's own (--message): it need not delegate at all.
    custom: bool = False

    @property
    def delegate(self) -> str:
        """The delegate of the one-task scenarios."""
        return self.delegates[0]


def delegates_in_file(deployment: DeploymentFile, agent: str) -> tuple[str, ...]:
    """The agents of the file `agent` delegates to over the flightdeck protocol, each once."""
    spec = deployment.agents[agent]
    found = [d.agent for d in spec.delegates if d.protocol == "flightdeck" and d.peer_service in deployment.agents]
    return tuple(dict.fromkeys(found))


def check_demo(deployment: DeploymentFile, path: str | Path) -> None:
    """What `flightdeck local demo` needs of the file beyond `check`: an agent that delegates to another of the
    file, and a `user` peer on it (the demo calls it as that peer), unless its INBOUND_AUTH is off.
    ConfigFileError naming the key and the fix; before anything starts."""
    delegator = next((name for name in deployment.agents if delegates_in_file(deployment, name)), None)
    if delegator is None:
        raise config_file.ConfigFileError.of(
            path,
            [
                config_file.Problem(
                    "[agents]",
                    "no agent delegates to another agent of this file: the demo has nothing to show",
                    'give one agent a [[agents.NAME.delegates]] section with agent = "<another agent of the file>" '
                    "(see examples/two-agents.toml)",
                )
            ],
        )
    spec = deployment.agents[delegator]
    if DEMO_PEER in spec.callers() or deployment.environment(delegator).get("INBOUND_AUTH", "required") == "off":
        return
    peers_key = config_file.toml_key(("agents", delegator, "users"))
    raise config_file.ConfigFileError.of(
        path,
        [
            config_file.Problem(
                f"{peers_key}.{DEMO_PEER}",
                f'is missing: the demo sends its task to {delegator} as the user "{DEMO_PEER}", which {delegator} '
                "would refuse (401)",
                f'add {DEMO_PEER} = "{new_peer_token(DEMO_PEER)}" under {peers_key} (LOCAL ONLY; any '
                f"fdp_{DEMO_PEER}_<32+ characters>)",
            )
        ],
    )


def plan(deployment: DeploymentFile, scenario: str, message: str | None = None) -> Plan:
    delegator = next((name for name in deployment.agents if delegates_in_file(deployment, name)), None)
    if delegator is None:
        raise DemoError(
            "no agent in the deployment file delegates to another agent of the file: nothing to demonstrate"
        )
    delegates = delegates_in_file(deployment, delegator)
    first = delegates[0]
    if len(delegates) == 1:
        parallel = f"@{first} task one @{first} task two"
    else:
        parallel = " ".join(f"@{name} task {NUMBERS[i % len(NUMBERS)]}" for i, name in enumerate(delegates))
    tasks = {
        "delegate": f"@{first} explain in one sentence why asynchronous delegation helps",
        "parallel": parallel,
        "timeout": f"@{first} take your time with this one",
        # The delegate asks (input-required); the delegator answers in its context (the local model's
        # ?ask and ?answer markers, flightdeck.domain.scripted_model).
        "ask": f"@{first} ?ask which quarter? check the figures of the report ?answer the third quarter",
        # A structured call through the tool the delegate's card gives; a free-text task with a response
        # schema the delegate honours; and one it answers in prose (!prose), marked schema_mismatch.
        "skills": f'@{first}:{SKILLS_SCENARIO_SKILL} {{"text": "Asynchronous delegation frees the caller while '
        f'the delegate works."}} @{first} review the launch plan => {SKILLS_SCENARIO_SCHEMA} '
        f"@{first} review it again !prose => {SKILLS_SCENARIO_SCHEMA}",
        # A tool of the delegator's MCP server (the local model's !<server>__<tool> marker).
        "tools": f"!{TOOLS_SCENARIO_TOOL} owl",
    }
    token = deployment.agents[delegator].callers().get(DEMO_PEER, ("", ()))[0]
    if message is not None:
        return Plan(delegator, delegates, message, token, custom=True)
    return Plan(delegator, delegates, tasks[scenario], token)


def timeout_variant(deployment: DeploymentFile, chosen: Plan) -> DeploymentFile:
    """The deployment with a delegator that stops waiting long before its delegate answers."""
    variant = deployment.model_copy(deep=True)
    variant.agents[chosen.delegator].env["ASYNC_TOOL_TIMEOUT_MS"] = str(TIMEOUT_SCENARIO_WAIT_MS)
    for delegate in variant.agents[chosen.delegator].delegates:
        if delegate.agent == chosen.delegate:
            delegate.timeout_ms = None  # its own timeout would outlast the scenario's wait
    variant.agents[chosen.delegate].model.think_delay_ms = TIMEOUT_SCENARIO_THINK_MS
    return variant


# --- writing a deployment file --------------------------------------------------------------


def _toml_key(key: str) -> str:
    return _toml_string(key)


def _toml_string(text: str) -> str:
    # JSON string escapes are valid TOML basic-string escapes; DEL must be escaped in TOML only.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007F")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _toml_table(path: list[str], table: dict[str, Any], lines: list[str]) -> None:
    values = {k: v for k, v in table.items() if not isinstance(v, dict)}
    subtables = {k: v for k, v in table.items() if isinstance(v, dict)}
    if path and (values or not subtables):
        lines.append("")
        lines.append("[" + ".".join(_toml_key(p) for p in path) + "]")
    lines.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in values.items())
    for key, sub in subtables.items():
        _toml_table([*path, key], sub, lines)


def deployment_toml(deployment: DeploymentFile) -> str:
    lines = ["# Written by `flightdeck local demo`."]
    _toml_table([], deployment.model_dump(mode="json", exclude_none=True), lines)
    return "\n".join(lines) + "\n"


def write_deployment(deployment: DeploymentFile, directory: Path) -> Path:
    path = directory / "deployment.toml"
    path.write_text(deployment_toml(deployment), encoding="utf-8")
    if config_file.load(path) != deployment:  # the file must say exactly what we meant
        raise DemoError(f"{path} does not read back as the intended deployment")
    return path


# --- the timeline -------------------------------------------------------------------------


def event_line(event: dict[str, Any]) -> str:
    """One line for a person: what a session event says (flightdeck.domain.timeline)."""
    kind = str(event.get("kind", ""))

    def preview(text: Any) -> str:
        flat = " ".join(str(text).split())
        return flat if len(flat) <= PREVIEW_CHARS else flat[: PREVIEW_CHARS - 1] + "…"

    if kind == "message":
        return f"message: {preview(event.get('text', ''))}"
    if kind == "text_delta":
        return f"writing: …{preview(event.get('text', ''))}"
    if kind == "answer":
        return f"answer: {preview(event.get('text', ''))}"
    if kind == "idle":
        return "idle"
    data = {k: v for k, v in event.items() if k not in ("id", "kind", "session_id")}
    return describe(TimelineEvent(str(event.get("id", "")), kind, data))


class Timeline:
    """Prints session events as they arrive (called from the stream readers' threads)."""

    def __init__(self, out: TextIO, agent_width: int = 12):
        self.out = out
        self.agent_width = agent_width
        self.started_at: float | None = None
        self.events: list[tuple[str, dict[str, Any]]] = []  # (agent, event)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    def start(self) -> None:
        with self._lock:
            self.started_at = time.monotonic()

    def on_event(self, agent: str, event: dict[str, Any]) -> None:
        with self._lock:
            if self.started_at is None:
                return  # before the task was sent
            elapsed = time.monotonic() - self.started_at
            self.events.append((agent, event))
            self.out.write(self.format(elapsed, agent, event) + "\n")
            self.out.flush()
            self._changed.notify_all()

    def format(self, elapsed: float, agent: str, event: dict[str, Any]) -> str:
        return f"  +{elapsed:.2f}s  {agent:<{self.agent_width}}  {event_line(event)}"

    def agents_with(self, kind: str) -> set[str]:
        """The agents that sent an event of this kind so far."""
        with self._lock:
            return {agent for agent, e in self.events if e.get("kind") == kind}

    def wait_for(self, agent: str, kind: str, timeout_s: float) -> bool:
        """Until `agent` has sent an event of this kind."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not any(a == agent and e.get("kind") == kind for a, e in self.events):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True


def sse_events(response: Any) -> Any:
    """The JSON data of each event of a text/event-stream response, as it arrives (comments skipped)."""
    data: list[str] = []
    for raw in response:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            yield json.loads("\n".join(data))
            data = []


class Follower:
    """Reads the event streams of one task: the delegator's session and the sessions it delegates to."""

    def __init__(self, timeline: Timeline, deployment: DeploymentFile, urls: dict[str, str], delegator: str):
        self.timeline, self.deployment, self.urls, self.delegator = timeline, deployment, urls, delegator
        self.threads: list[threading.Thread] = []
        self.errors: list[str] = []

    def follow(self, agent: str, session_id: str, token: str, wait_s: float = 0.0) -> None:
        thread = threading.Thread(
            target=self._read, args=(agent, session_id, token, wait_s), daemon=True, name=f"demo-events-{agent}"
        )
        self.threads.append(thread)
        thread.start()

    def _read(self, agent: str, session_id: str, token: str, wait_s: float) -> None:
        url = f"{self.urls[agent]}/api/sessions/{session_id}/events"
        headers = {"Accept": "text/event-stream", **({"Authorization": f"Bearer {token}"} if token else {})}
        deadline = time.monotonic() + wait_s
        while True:
            try:
                with direct_opener.open(
                    urllib.request.Request(url, headers=headers), timeout=ANSWER_BOUND_S
                ) as response:
                    for event in sse_events(response):
                        self.timeline.on_event(agent, event)
                        if agent == self.delegator and event.get("kind") == "delegating":
                            self._delegate(session_id, event)
                return
            except urllib.error.HTTPError as exc:
                if exc.code == 404 and time.monotonic() < deadline:
                    time.sleep(0.1)  # the dispatch has not reached the delegate yet
                    continue
                self.errors.append(f"GET {url} answered {exc.code}")
                return
            except (OSError, ValueError) as exc:
                self.errors.append(f"GET {url} failed: {exc}")
                return

    def _delegate(self, session_id: str, event: dict[str, Any]) -> None:
        name = str(event.get("agent", ""))
        delegate = next((d for d in self.deployment.agents[self.delegator].delegates if d.agent == name), None)
        if delegate is None or delegate.protocol != "flightdeck" or delegate.peer_service not in self.urls:
            return  # not an agent of the file
        # The session the delegate keeps for this task, owned by the delegator: read with the delegator's token.
        token = self.deployment.outbound_tokens(self.delegator).get(delegate.peer_service, "")
        # A delegation that continues the delegate's session (answering its question) names it.
        context = event.get("context_id")
        self.follow(
            delegate.peer_service,
            context
            if isinstance(context, str) and context
            else peer_session_id(self.delegator, session_id, str(event.get("tool_use_id", ""))),
            token,
            wait_s=DELEGATE_SESSION_WAIT_S,
        )

    def join(self, timeout_s: float) -> bool:
        """Until every stream ended (each ends when its session is idle); False if one is still open."""
        deadline = time.monotonic() + timeout_s
        while True:
            alive = [t for t in self.threads if t.is_alive()]
            if not alive:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            alive[0].join(remaining)


# --- talking to an agent ------------------------------------------------------------------


def http_json(method: str, url: str, body: Any = None, timeout_s: float = 10.0, token: str = "") -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with direct_opener.open(request, timeout=timeout_s) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode("utf-8", errors="replace")


def final_answer(session: Any) -> str | None:
    """The final assistant text of an idle session, or None while it is still working."""
    if not isinstance(session, dict) or session.get("status") != "idle":
        return None
    messages = session.get("messages") or []
    if not messages or messages[-1].get("role") != "assistant":
        return None
    blocks = messages[-1].get("content") or []
    if any("toolUse" in b for b in blocks):
        return None
    text = "".join(b.get("text", "") for b in blocks if isinstance(b, dict))
    return text or None


def send_task(base_url: str, content: str, token: str = "") -> str:
    status, body = http_json("POST", base_url + "/api/chat", {"content": content}, token=token)
    if status in (401, 403):
        raise DemoError(
            f"POST {base_url}/api/chat answered {status}: {body}; the demo calls as user "
            f'{DEMO_PEER!r}: give the delegator a [agents.NAME.users] {DEMO_PEER} = "fdp_{DEMO_PEER}_..." entry'
        )
    if not 200 <= status < 300 or not isinstance(body, dict) or not body.get("session_id"):
        raise DemoError(f"POST {base_url}/api/chat answered {status}: {body}")
    return str(body["session_id"])


def tool_results(session: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        b["toolResult"]
        for m in session.get("messages", [])
        for b in m.get("content", [])
        if isinstance(b, dict) and "toolResult" in b
    ]


def tools_answered(session: dict[str, Any]) -> set[str]:
    """Names of the tools (ask_<agent>) whose calls in the session got a successful result."""
    names = {
        b["toolUse"].get("toolUseId"): b["toolUse"].get("name")
        for m in session.get("messages", [])
        for b in m.get("content", [])
        if isinstance(b, dict) and isinstance(b.get("toolUse"), dict)
    }
    return {str(names.get(r.get("toolUseId"))) for r in tool_results(session) if r.get("status") == "success"}


def check_outcome(scenario: str, session: dict[str, Any], expected_tools: tuple[str, ...] = ()) -> None:
    """The demo succeeds only if the delegation did what its scenario shows (expected_tools: each answered)."""
    results = tool_results(session)
    if not results:
        raise DemoError("the final answer came without any delegated result")
    texts = [" ".join(c.get("text", "") for c in r.get("content", [])) for r in results]
    if scenario == "timeout":
        if not any('"timeout"' in t for t in texts):
            raise DemoError(f"expected a synthesized timeout result, got: {texts}")
    elif any(r.get("status") != "success" for r in results):
        raise DemoError(f"a delegation failed: {texts}")
    if scenario == "ask" and not any(parse_input_required(t) for t in texts):
        raise DemoError(f"expected the delegate to ask a question first, got: {texts}")
    if scenario == "skills":
        _check_skills(session, texts)
    missing = [t for t in expected_tools if t not in tools_answered(session)] if scenario != "timeout" else []
    if missing:
        raise DemoError(f"no answer through {', '.join(missing)}: {texts}")


def _check_skills(session: dict[str, Any], texts: list[str]) -> None:
    """The skills scenario shows a structured call answered as JSON, a response schema honoured, and a
    mismatch marked (what the delegator's model read: the final answer quotes it)."""
    structured = [t for t in texts if _json_object(t) is not None]
    if len(structured) < 2:
        raise DemoError(f"expected JSON answers to the structured call and the response schema, got: {texts}")
    answer = final_answer(session) or ""
    if "schema_mismatch" not in answer:
        raise DemoError(f"expected the prose answer to be marked schema_mismatch, got: {answer[:500]}")


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def wait_for_session(base_url: str, session_id: str, bound_s: float, token: str = "") -> tuple[str, dict[str, Any]]:
    """The final answer and the session it ends, once the session is idle with one."""
    deadline = time.monotonic() + bound_s
    last: Any = None
    while time.monotonic() < deadline:
        status, last = http_json("GET", f"{base_url}/api/sessions/{session_id}", token=token)
        if status == 200:
            answer = final_answer(last)
            if answer is not None:
                return answer, last
        time.sleep(POLL_INTERVAL_S)
    state = last.get("status") if isinstance(last, dict) else last
    raise DemoError(f"no final answer within {bound_s:.0f} s (session {session_id}, last state: {state})")


def wait_for_answer(base_url: str, session_id: str, bound_s: float, scenario: str = "", token: str = "") -> str:
    answer, session = wait_for_session(base_url, session_id, bound_s, token)
    if scenario:
        check_outcome(scenario, session)
    return answer


# --- the whole demo -----------------------------------------------------------------------


def run(
    deployment: DeploymentFile,
    scenario: str,
    *,
    out: TextIO,
    logs: TextIO | None,
    log_dir: Path | None = None,
    message: str | None = None,
    answer_bound_s: float = ANSWER_BOUND_S,
) -> str:
    """Start the stack, send the task, show the timeline, return the final answer.

    logs: where the agents' JSON lines are relayed (None: nowhere); log_dir: a file per agent.
    message: the user's own task instead of the scenario's (then nothing is required of its delegations).
    Raises DemoError (and the stack's StackError) on failure.
    """
    from flightdeck.local.stack import LocalStack  # the stack pulls in boto3; keep --help fast

    chosen = plan(deployment, scenario, message)
    with tempfile.TemporaryDirectory(prefix="flightdeck-demo-") as scratch:
        config: DeploymentFile | Path = deployment
        if scenario == "timeout":
            config = write_deployment(timeout_variant(deployment, chosen), Path(scratch))
        timeline = Timeline(out, agent_width=max(12, *(len(n) for n in deployment.agents)))
        with LocalStack(config, relay=logs, log_dir=log_dir, extra_env=DEMO_ENV) as stack:
            out.write(f"Flightdeck demo, scenario {scenario!r}\n" if not chosen.custom else "Flightdeck demo\n")
            for name, url in stack.urls.items():
                out.write(f"  {name:<{timeline.agent_width}}  {url}\n")
            out.write(f"\nsending to {chosen.delegator}: {chosen.task!r}\n\n")
            out.flush()
            timeline.start()
            base_url = stack.urls[chosen.delegator]
            session_id = send_task(base_url, chosen.task, chosen.token)
            streams = Follower(timeline, deployment, dict(stack.urls), chosen.delegator)
            streams.follow(chosen.delegator, session_id, chosen.token)
            answer, session = wait_for_session(base_url, session_id, answer_bound_s, chosen.token)
            tools = {d.agent: d.name for d in deployment.agents[chosen.delegator].delegates}
            if not chosen.custom:
                expected = (
                    tuple(tools[a] for a in chosen.delegates) if scenario == "parallel" else (tools[chosen.delegate],)
                )
                if scenario == "skills":
                    expected += (f"{chosen.delegate}__{SKILLS_SCENARIO_SKILL}",)
                if scenario == "tools":
                    expected = (TOOLS_SCENARIO_TOOL,)
                check_outcome(scenario, session, expected)
            if scenario == "timeout" and not timeline.wait_for(chosen.delegate, "idle", 0):
                out.write(f"  (waiting for {chosen.delegate} to stop...)\n")
                out.flush()
            # Each stream ends when its session is idle: the delegator's at its answer, the timed-out
            # delegate's (the timeout scenario) when the orchestrator's cancel has closed it.
            streams.join(TIMEOUT_SCENARIO_THINK_MS / 1000 + 10 if scenario == "timeout" else 10.0)
            if streams.errors:
                raise DemoError("an event stream failed: " + "; ".join(streams.errors))
        answered = sorted(agent for agent, tool in tools.items() if tool in tools_answered(session))
        out.write(
            f"\nfinal answer from {chosen.delegator}"
            + (f" (answered by {', '.join(answered)})" if answered else "")
            + ":\n"
        )
        out.write("".join(f"  {line}\n" for line in answer.splitlines() or [""]))
        out.flush()
        return answer
