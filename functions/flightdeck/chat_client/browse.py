"""`flightdeck sessions list|show|cancel`: the caller's sessions at one of our agents, from the public API.

list: GET /api/sessions, one page (`--cursor` the next). show: a replay of one session's timeline
(GET /api/sessions/{id}/events?follow=false) with each step's time and latency, and under each delegation
the delegate's own timeline where it is readable: the delegate's URL given (`--peer AGENT=URL`) and a token
that owns its session there (the delegator's, from `--config FILE`; else the same token). A delegate whose
session cannot be read shows its answer only. cancel: POST /api/sessions/{id}/cancel.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import requests

from flightdeck.chat_client import TOKEN_ENV
from flightdeck.chat_client.session_view import base_url, describe_result
from flightdeck.chat_client.sse import ServerEvent, read_events
from flightdeck.chat_client.transport import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, Problem, preview, send, server_message

# How deep the delegates' lanes go (a delegate's delegate...): a cycle of agents ends here.
MAX_DEPTH = 3
RESULT_KINDS = frozenset({"callback_accepted", "timeout", "dispatch_failed", "canceled", "tool_result"})


class Browser:
    def __init__(self, url: str, token: str | None, http: requests.Session, peers: dict[str, str], config: Any = None):
        self.url, self.token, self.http = base_url(url), token, http
        self.peers, self.config = peers, config
        self.lines: list[str] = []

    def _refused(self, response: requests.Response, what: str) -> Problem:
        return Problem(f"{what}: HTTP {response.status_code} ({server_message(response)})")

    def list_page(self, limit: int, cursor: str | None) -> str | None:
        query = f"limit={limit}" + (f"&cursor={quote(cursor, safe='')}" if cursor else "")
        response = send(self.http, "GET", f"{self.url}/api/sessions?{query}", token=self.token)
        if response.status_code != 200:
            raise self._refused(response, f"GET {self.url}/api/sessions")
        page = response.json()
        rows = [("SESSION", "STATUS", "STARTED", "UPDATED")]
        for s in page.get("sessions", []):
            rows.append(
                (str(s.get("session_id")), str(s.get("status")), _when(s.get("created_at")), _when(s.get("updated_at")))
            )
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        self.lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        cursor = page.get("next_cursor")
        if cursor:
            self.lines.append(f"more: flightdeck sessions list {self.url} --cursor {cursor}")
        return str(cursor) if cursor else None

    def events(self, url: str, session_id: str, token: str | None) -> list[dict[str, Any]] | None:
        """The session's timeline as it stands; None where it cannot be read (another owner, no route)."""
        path = f"{url}/api/sessions/{quote(session_id, safe='')}/events?follow=false"
        response = send(self.http, "GET", path, token=token, headers={"Accept": "text/event-stream"})
        if response.status_code != 200:
            if url == self.url:
                raise self._refused(response, f"session {session_id}")
            return None
        out = []
        for item in read_events(response.iter_content(chunk_size=None)):
            if isinstance(item, ServerEvent):
                try:
                    event = json.loads(item.data)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    out.append(event)
        return out

    def show(self, session_id: str) -> None:
        events = self.events(self.url, session_id, self.token)
        assert events is not None
        agent = self._agent_name(self.url)
        self.lines.append(f"session {session_id}" + (f" at {agent}" if agent else ""))
        self._draw(events, agent, depth=0)

    def _agent_name(self, url: str) -> str:
        try:
            body = send(self.http, "GET", f"{url}/health", token=None).json()
        except (Problem, ValueError):
            return ""
        return str(body.get("agent", "")) if isinstance(body, dict) else ""

    def _lane(self, delegator: str, event: dict[str, Any]) -> tuple[str, str | None] | None:
        """Where the delegate's session of this delegation is read: its URL and a token; None: not readable."""
        agent, peer_session = str(event.get("agent", "")), event.get("peer_session_id")
        url = self.peers.get(agent)
        if not url or not isinstance(peer_session, str):
            return None
        token = self.token
        if self.config is not None and delegator in self.config.agents:
            spec = self.config.agents[delegator]
            delegate = next((d for d in spec.delegates if d.agent == agent), None)
            service = delegate.peer_service if delegate is not None else agent
            token = self.config.outbound_tokens(delegator).get(service, token)
        return base_url(url), token

    def _draw(self, events: list[dict[str, Any]], agent: str, depth: int) -> None:
        pad = "  " * depth + ("│ " if depth else "")
        for event in events:
            kind = str(event.get("kind", ""))
            line = _describe(kind, event)
            if line is None:
                continue
            latency = event.get("latency_ms")
            took = f"+{_ms(latency)}" if isinstance(latency, int) else ""
            self.lines.append(f"{_clock(event.get('at'))} {took:>9}  {pad}{line}")
            if kind == "delegating" and depth < MAX_DEPTH:
                lane = self._lane(agent, event)
                peer_events = self.events(lane[0], str(event["peer_session_id"]), lane[1]) if lane else None
                if peer_events is None:
                    continue  # its answer (the result event) is all that shows
                self.lines.append(f"{'':22}{pad}  ┌ {event.get('agent')}: session {event.get('peer_session_id')}")
                self._draw(peer_events, str(event.get("agent", "")), depth + 1)

    def cancel(self, session_id: str) -> int:
        path = f"{self.url}/api/sessions/{quote(session_id, safe='')}/cancel"
        response = send(self.http, "POST", path, token=self.token, body={})
        if response.status_code == 409:
            self.lines.append(f"session {session_id} is idle: nothing to cancel")
            return EXIT_OK
        if response.status_code != 200:
            raise self._refused(response, f"cancel {session_id}")
        self.lines.append(f"session {session_id} canceled (think iteration {response.json().get('iteration')})")
        return EXIT_OK


def _describe(kind: str, e: dict[str, Any]) -> str | None:
    """One line of a replayed event (None: not drawn)."""
    if kind == "message":
        return f"message: {preview(str(e.get('text', '')))}"
    if kind == "thinking":
        if "duration_ms" in e:
            cached = f", {e.get('tokens_cache_read', 0)} cache read / {e.get('tokens_cache_write', 0)} cache write"
            cost = f", {_cost(e)}" if _cost(e) else ""
            return f"think {e.get('think')} ({_ms(e['duration_ms'])}, tokens {e.get('tokens_in')} in / {e.get('tokens_out')} out{cached}{cost})"
        return f"think {e.get('think')}"
    if kind == "delegating":
        trace = f", trace {e['trace_id']}" if e.get("trace_id") else ""
        return f"  delegating to {e.get('agent')}: {preview(str(e.get('task', '')))}{trace}"
    if kind == "tool_call":
        return f"  running {e.get('tool')}"
    if kind in RESULT_KINDS:
        who = str(e.get("agent") or e.get("tool") or "a tool")
        return "  " + describe_result(who, {"status": e.get("status"), "content": [{"text": str(e.get("text", ""))}]})
    if kind == "progress":
        return f"  {e.get('text', '')}"
    if kind == "answer":
        return f"answer: {preview(str(e.get('text', '')), 200)}" + _tokens(e, "this task")
    if kind == "question":
        return f"question: {preview(str(e.get('text', '')), 200)}"
    if kind == "idle":
        outcome = f", {str(e['outcome']).replace('_', ' ')}" if e.get("outcome") else ""
        return f"idle{outcome} ({e.get('turn')} message(s), {e.get('iteration')} think iteration(s))" + _tokens(
            e, "the session"
        )
    return None


def _tokens(event: dict[str, Any], what: str) -> str:
    """The model's tokens of a turn or session (the answer's, the idle event's) and their cost, on lines of their
    own."""
    tokens = event.get("tokens")
    if not isinstance(tokens, dict):
        return ""
    cost = f"\n{'':24}cost, {what}: {_cost(event)}" if _cost(event) else ""
    return (
        f"\n{'':24}tokens, {what}: {tokens.get('input', 0)} in, {tokens.get('output', 0)} out, "
        f"{tokens.get('cache_read', 0)} cache read, {tokens.get('cache_write', 0)} cache write "
        f"({tokens.get('thinks', 0)} think(s))"
    ) + cost


def _cost(event: dict[str, Any]) -> str:
    """The tokens' cost as the API priced it: the model's list price (docs/TOKENS.md), or why there is none."""
    price, usd = event.get("price"), event.get("cost_usd")
    if isinstance(usd, (int, float)) and isinstance(price, dict):
        where = f"{price.get('region')} prices of {price.get('recorded')}"
        return f"${usd:.6f} list-price estimate ({event.get('model')}, {where})"
    return f"no list price for {event['model']}" if event.get("model") else ""


def _ms(value: Any) -> str:
    ms = int(value)
    return f"{ms} ms" if ms < 1000 else f"{ms / 1000:.2f} s"


def _clock(at: Any) -> str:
    """The time of day of an ISO 8601 timestamp (12:00:01.234), padded where there is none."""
    return at[11:23] if isinstance(at, str) and len(at) >= 23 else " " * 12


def _when(ms: Any) -> str:
    """Epoch ms as the events' ISO 8601 UTC (flightdeck.domain.timeline.iso_ms)."""
    if not isinstance(ms, int) or ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _peers(values: list[str]) -> dict[str, str]:
    peers = {}
    for value in values:
        name, sep, url = value.partition("=")
        if not sep or not name or not url:
            raise Problem(f"--peer {value!r}: give AGENT=URL", code=EXIT_USAGE)
        peers[name] = url
    return peers


def run(args: argparse.Namespace) -> int:
    from flightdeck.chat_client.transport import Console

    console = Console()
    http = requests.Session()
    try:
        config = None
        if getattr(args, "config", None):
            from flightdeck import config_file

            try:
                config = config_file.load(args.config)
            except config_file.ConfigFileError as exc:
                raise Problem(str(exc), code=EXIT_USAGE) from None
        token = args.token or os.environ.get(TOKEN_ENV) or None
        browser = Browser(args.url, token, http, _peers(getattr(args, "peer", None) or []), config)
        status = EXIT_OK
        if args.action == "list":
            browser.list_page(args.limit, args.cursor)
        elif args.action == "show":
            browser.show(args.id)
        else:
            status = browser.cancel(args.id)
        for line in browser.lines:
            print(line)
        return status
    except Problem as problem:
        console.error(problem.message)
        return problem.code or EXIT_FAILURE
    finally:
        http.close()


def add_sessions_command(commands: Any) -> None:
    sub = commands.add_parser(
        "sessions",
        help="the caller's sessions at one of our agents: list, show (a replay with times), cancel",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = sub.add_subparsers(dest="action", required=True, metavar="{list,show,cancel}")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("url", metavar="URL", help="the agent's base URL")
        p.add_argument("--token", metavar="T", help=f"bearer token (default: ${TOKEN_ENV})")
        p.set_defaults(run=run)

    listing = actions.add_parser("list", help="one page of the caller's sessions, newest first")
    common(listing)
    listing.add_argument("--limit", type=int, default=20, help="sessions per page (1-100, default 20)")
    listing.add_argument("--cursor", metavar="C", help="the page after this cursor (the last page printed it)")
    show = actions.add_parser("show", help="replay a session's timeline with times, latencies and delegates' lanes")
    common(show)
    show.add_argument("id", metavar="ID")
    show.add_argument(
        "--peer",
        action="append",
        metavar="AGENT=URL",
        help="a delegate's base URL, to draw its own session as a lane (repeatable)",
    )
    show.add_argument(
        "--config", metavar="FILE", help="the deployment file: the delegator's tokens read the delegates' sessions"
    )
    cancel = actions.add_parser("cancel", help="cancel a busy session (POST /api/sessions/{id}/cancel)")
    common(cancel)
    cancel.add_argument("id", metavar="ID")
