"""Hostile shapes, not schema-valid variations (those are test_fuzz_api.py's): every body endpoint, through
the real handlers on moto, gets bodies too deep, too wide, with huge strings and numbers, wrong types at
every level, lone surrogates, invalid UTF-8 and truncated JSON. Whatever comes in: no 5xx, no JSON-RPC
internal error, and a refused request changes nothing. The outcomes are counted and printed.
"""

from __future__ import annotations

import base64
import collections
import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.test_api_callbacks import start_turn
from tests.support.harness import load_event

EXAMPLES = 120
SENTINEL = "__hostile__"
OUTCOMES: collections.Counter[str] = collections.Counter()

TEMPLATES: dict[str, tuple[str, Any]] = {
    "chat": (
        "chat_post",
        {"session_id": "fz-1", "content": "hello", "reply": {"callbackService": "worker", "bearerToken": "t" * 20}},
    ),
    "tool_response": ("tool_response", {"result": "an answer"}),
    "tool_responses": ("tool_responses_batch", {"items": [{"token": "TOKEN", "result": "r", "traceparent": ""}]}),
    "a2a_send": (
        "a2a_message_send",
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "message/send",
            "params": {
                "message": {
                    "kind": "message",
                    "role": "user",
                    "messageId": "m",
                    "contextId": "fz-ctx",
                    "parts": [{"kind": "text", "text": "hi"}, {"kind": "data", "data": {"k": [1]}}],
                    "metadata": {"a": "b"},
                }
            },
        },
    ),
    "a2a_get": (
        "a2a_message_send",
        {"jsonrpc": "2.0", "id": "g", "method": "tasks/get", "params": {"id": "x~y", "historyLength": 1}},
    ),
    "a2a_push": (
        "a2a_push",
        {
            "kind": "task",
            "id": "peer-task",
            "contextId": "c",
            "status": {"state": "completed"},
            "artifacts": [{"artifactId": "a", "parts": [{"kind": "text", "text": "done"}]}],
        },
    ),
}


def _paths(value: Any, path: tuple = ()) -> list[tuple]:
    out = [path]
    if isinstance(value, dict):
        for key, child in value.items():
            out += _paths(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            out += _paths(child, (*path, index))
    return out


def _replace(body: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    body = copy.deepcopy(body)
    node = body
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = new
    return body


def _with_raw(body: Any, path: tuple, raw: str) -> str:
    """The body as JSON text with `raw` (any text, valid JSON or not) where `path` was."""
    return json.dumps(_replace(body, path, SENTINEL)).replace(json.dumps(SENTINEL), raw, 1)


WRONG_TYPES = st.sampled_from([None, True, False, 0, -1, 2**63, 1.5, "", "x", [], {}, [1, "a"], {"a": {"b": []}}])
DEEP = st.builds(
    lambda n, opener: (opener * n) + "1" + ("]" if opener == "[" else "}") * n,
    st.sampled_from([33, 200, 999, 20_000]),
    st.sampled_from(["[", '{"a":']),
)
HUGE_NUMBERS = st.sampled_from(
    [
        "9" * 4301,
        "-" + "1" * 100_000,
        "1e999999",
        "-1e999999",
        "NaN",
        "Infinity",
        "-Infinity",
        "1" + "0" * 4300 + ".5",
        "0." + "0" * 100_000 + "1",
    ]
)


@st.composite
def hostile(draw) -> tuple[str, str, str | bytes]:
    """(target, kind, body): body is text, or bytes that are sent base64-encoded (invalid UTF-8)."""
    target = draw(st.sampled_from(sorted(TEMPLATES)))
    template = TEMPLATES[target][1]
    path = draw(st.sampled_from(_paths(template)))
    kind = draw(
        st.sampled_from(
            [
                "deep",
                "wide_list",
                "wide_object",
                "huge_string",
                "huge_number",
                "wrong_type",
                "surrogate",
                "surrogate_key",
                "invalid_utf8",
                "truncated",
            ]
        )
    )
    if kind == "deep":
        return target, kind, _with_raw(template, path, draw(DEEP))
    if kind == "wide_list":
        return (
            target,
            kind,
            json.dumps(_replace(template, path, [draw(WRONG_TYPES)] * draw(st.sampled_from([1000, 60_000])))),
        )
    if kind == "wide_object":
        n = draw(st.sampled_from([1000, 40_000]))
        return target, kind, json.dumps(_replace(template, path, {f"k{i}": i for i in range(n)}))
    if kind == "huge_string":
        # Over every documented limit. (Within the limits, 90,000 "é" of chat content overflows the
        # 400 KB session item and answers 503: issue 12 defect 3, the state layer's to fix.)
        text = draw(st.sampled_from(["x", "é", "\U0001f600", "\\"])) * draw(st.sampled_from([100_001, 300_000]))
        return target, kind, json.dumps(_replace(template, path, text), ensure_ascii=False)
    if kind == "huge_number":
        return target, kind, _with_raw(template, path, draw(HUGE_NUMBERS))
    if kind == "wrong_type":
        return target, kind, json.dumps(_replace(template, path, draw(WRONG_TYPES)))
    if kind == "surrogate":
        lone = draw(st.sampled_from(["\ud800", "\udfff", "x\udc80", "\ud83d"]))  # the last: half of an emoji
        return target, kind, json.dumps(_replace(template, path, lone))
    if kind == "surrogate_key":
        return target, kind, json.dumps(_replace(template, path, {"\ud800": "v"}))
    if kind == "invalid_utf8":
        text = json.dumps(template).encode()
        at = draw(st.integers(0, len(text)))
        bad = draw(st.sampled_from([b"\xff", b"\xed\xa0\x80", b"\xc3", b"\xf4\x90\x80\x80"]))
        return target, kind, text[:at] + bad + text[at:]
    text = json.dumps(template)
    return target, kind, text[: draw(st.integers(0, len(text) - 1))]


def _state(agent) -> list[str]:
    return sorted(json.dumps(i, sort_keys=True) for i in agent.table_items())


@pytest.fixture
def callback_token(orchestrator):
    sid, turn, [tid] = start_turn(orchestrator)
    return orchestrator.token(sid, turn, tid)


@pytest.fixture
def known(orchestrator, callback_token):
    """The table as the last request left it: one scan per request, after it (moto scans are not free)."""
    return {"state": _state(orchestrator)}


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)
@given(case=hostile())
def test_hostile_bodies_never_get_a_5xx_and_refusals_change_nothing(orchestrator, callback_token, known, case):
    target, kind, body = case
    event_name, _ = TEMPLATES[target]
    event = load_event(f"api/{event_name}.json", TOKEN=callback_token)
    if isinstance(body, bytes):
        event.update(body=base64.b64encode(body).decode(), isBase64Encoded=True)
    else:
        event["body"] = body.replace('"TOKEN"', json.dumps(callback_token))
    if target in ("chat", "a2a_send", "a2a_get"):
        event["headers"].update(orchestrator.auth_headers())
    status, _, answer = orchestrator.call(event)
    assert status < 500, (target, kind, status, answer)
    if target.startswith("a2a_") and target != "a2a_push":
        assert status == 200 and isinstance(answer, dict), (target, kind, answer)
        code = answer.get("error", {}).get("code")
        assert code != -32603, (target, kind, answer)  # an internal error: bad input must not reach one
        refused, outcome = code is not None, f"rpc {code}" if code else "rpc result"
    else:
        # An answer too large to keep (a push's, a callback's, with a good token) is a 413 that records an error
        # result, so the turn goes on (by design).
        too_large_kept = status == 413 and target in ("a2a_push", "tool_response")
        refused, outcome = status >= 400 and not too_large_kept, str(status)
        if isinstance(answer, dict) and isinstance(answer.get("results"), list):
            refused = all(r["http_status"] >= 400 and r["status"] != "too_large" for r in answer["results"])
            outcome += " [" + ",".join(sorted({r["status"] for r in answer["results"]})) + "]"
    after, expected = _state(orchestrator), known["state"]
    known["state"] = after  # first, so that one failure does not spill into the next example
    if refused:
        assert after == expected, (target, kind, answer)
    OUTCOMES[f"{target:14} {kind:12} -> {outcome}"] += 1


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    total = sum(OUTCOMES.values())
    print(f"\nhostile-shapes fuzz: {total} requests, 0 answered 5xx; outcomes:")
    for line, n in sorted(OUTCOMES.items()):
        print(f"  {n:4}  {line}")
    assert total >= EXAMPLES
