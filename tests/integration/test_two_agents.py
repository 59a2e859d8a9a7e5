"""Two (and more) agents, each its own processes, handlers, tables and queues on moto, over loopback HTTP.

The whole pipeline of ARCHITECTURE §1 (docs/ARCHITECTURE.md): chat -> think -> dispatch -> the peer thinks -> delivery ->
callback -> aggregation -> next think, plus timeouts, dispatch failures and a callback
endpoint that is down for a while.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path

import boto3
import pytest
import requests

from flightdeck.local.stack import LocalStack
from tests.support.harness import aggregation_fields
from tests.support.proxy import FlakyProxy

pytestmark = pytest.mark.slow

TIMEOUT_MS = 6000
# The sleeper delegate's own timeout_ms (per-delegation timeouts): shorter than the orchestrator's default.
SLEEPER_TIMEOUT_MS = 4000
# How long the callback endpoint stays down: long enough for the delivery worker to retry several times
# (its backoff delays are drawn up to 2, 4, 8, 16 s ...). What ends retrying is time (REPLY_RETRY_MAX_MS,
# 180 s here) or the delivery queue's maxReceiveCount (20): 15 s reaches neither, as 60 s did not.
# FLIGHTDECK_TEST_DOWN_FOR_S=60 (or more) for a longer outage.
DOWN_FOR_S = float(__import__("os").environ.get("FLIGHTDECK_TEST_DOWN_FOR_S", "15"))
# LOCAL ONLY test tokens: who may call whom (each agent's [peers]; the caller's own token for an agent
# of this file is taken from there).
USER_TOKEN = "fdp_user_test-only-user-token-0123456789abcdef"
ORCHESTRATOR_TOKEN = "fdp_orchestrator_test-only-orchestrator-token-0123456789"
PATIENT_TOKEN = "fdp_patient_test-only-patient-token-0123456789abcdef"
# The intruder claims to be the orchestrator, with a secret of its own making.
FORGED_TOKEN = "fdp_orchestrator_forged-by-the-intruder-0123456789abcdef"
CONFIG = f"""
[defaults]
TOOL_AGG_PUNCTUATE_INTERVAL_MS = 1000
REPLY_RETRY_MAX_MS = 180000

[agents.orchestrator]
allow = ["worker", "sleeper", "slowpoke"]
allowed_hosts = {{ ghost = "http://127.0.0.1:9" }}
callback_secret = "test-only-orchestrator-secret-0123456789abcdef"
env = {{ ASYNC_TOOL_TIMEOUT_MS = "{TIMEOUT_MS}", DISPATCH_MAX_ATTEMPTS = "2" }}
[[agents.orchestrator.delegates]]
agent = "worker"
[[agents.orchestrator.delegates]]
agent = "sleeper"
timeout_ms = {SLEEPER_TIMEOUT_MS}
[[agents.orchestrator.delegates]]
agent = "ghost"
[[agents.orchestrator.delegates]]
agent = "slowpoke"
[agents.orchestrator.peers]
user = "{USER_TOKEN}"

# Waits long for its delegations; the tests reach it through a proxy they can take down.
[agents.patient]
allow = ["worker"]
callback_secret = "test-only-patient-secret-0123456789abcdef0123"
env = {{ ASYNC_TOOL_TIMEOUT_MS = "240000" }}
[[agents.patient.delegates]]
agent = "worker"
[agents.patient.peers]
user = "{USER_TOKEN}"

[agents.worker]
allow = ["orchestrator", "patient", "intruder"]
callback_secret = "test-only-worker-secret-0123456789abcdef01234"
[agents.worker.peers]
orchestrator = "{ORCHESTRATOR_TOKEN}"
patient = "{PATIENT_TOKEN}"

# Delegates to the worker, which does not list it among its peers.
[agents.intruder]
allow = ["worker"]
callback_secret = "test-only-intruder-secret-0123456789abcdef012"
peer_tokens = {{ worker = "{FORGED_TOKEN}" }}
[[agents.intruder.delegates]]
agent = "worker"
[agents.intruder.peers]
user = "{USER_TOKEN}"

[agents.sleeper]
allow = ["orchestrator"]
callback_secret = "test-only-sleeper-secret-0123456789abcdef0123"
[agents.sleeper.peers]
orchestrator = "{ORCHESTRATOR_TOKEN}"
[agents.sleeper.model]
think_delay_ms = {TIMEOUT_MS + 3000}

[agents.slowpoke]
allow = ["orchestrator"]
callback_secret = "test-only-slowpoke-secret-0123456789abcdef012"
[agents.slowpoke.peers]
orchestrator = "{ORCHESTRATOR_TOKEN}"
[agents.slowpoke.model]
think_delay_ms = 2000     # answers while the orchestrator restarts: delivery retries until it is back
"""


class Records:
    def __init__(self):
        self.items: list[tuple[str, dict]] = []
        self.lock = threading.Lock()

    def __call__(self, agent, record):
        with self.lock:
            self.items.append((agent, record))

    def find(self, agent=None, **match):
        with self.lock:
            return [
                r
                for a, r in self.items
                if (agent is None or a == agent) and all(r.get(k) == v for k, v in match.items())
            ]


@pytest.fixture(scope="module")
def proxy():
    p = FlakyProxy()
    yield p
    p.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, proxy):
    path = Path(tmp_path_factory.mktemp("two-agents")) / "agents.toml"
    path.write_text(CONFIG)
    records = Records()
    # Every agent reaches `patient` through the proxy, so a test can take it "down".
    # DEBUG: the tests read the agents' timeline lines, routine steps included (tests/conftest.py
    # quiets logs to WARNING).
    local = LocalStack(
        path, url_overrides={"patient": proxy.url}, relay=None, extra_env={"POWERTOOLS_LOG_LEVEL": "DEBUG"}
    )
    local.add_listener(records)
    with local:
        proxy.target = local.urls["patient"]
        local.records = records
        yield local


AS_USER = {"Authorization": f"Bearer {USER_TOKEN}"}


def chat(stack, content, agent="orchestrator"):
    resp = requests.post(f"{stack.urls[agent]}/api/chat", json={"content": content}, headers=AS_USER, timeout=10)
    assert resp.status_code == 202, resp.text
    return resp.json()["session_id"]


def wait_idle(stack, sid, agent="orchestrator", timeout_s=30.0, headers=AS_USER):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        session = requests.get(f"{stack.urls[agent]}/api/sessions/{sid}", headers=headers, timeout=10).json()
        if session["status"] == "idle":
            return session
        time.sleep(0.1)
    raise AssertionError(f"session {sid} not idle after {timeout_s}s: {session}")


def tool_results(session):
    return [b["toolResult"] for m in session["messages"] for b in m["content"] if "toolResult" in b]


def final_text(session):
    return session["messages"][-1]["content"][0]["text"]


def table_item(stack, agent, pk, sk):
    ddb = boto3.client(
        "dynamodb",
        endpoint_url=stack.moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
    )
    item = ddb.get_item(TableName=f"{agent}-state", Key={"pk": {"S": pk}, "sk": {"S": sk}})["Item"]
    return {k: list(v.values())[0] for k, v in item.items()}


def test_delegation_round_trip(stack):
    sid = chat(stack, "@worker summarise the launch plan")
    session = wait_idle(stack, sid)
    [result] = tool_results(session)
    assert result["status"] == "success"
    assert "summarise the launch plan" in result["content"][0]["text"]
    assert result["content"][0]["text"].startswith("[worker]")
    assert result["content"][0]["text"] in final_text(session)  # quoted verbatim in the final answer


def test_one_trace_follows_the_delegation_across_both_agents(stack):
    sid = chat(stack, "@worker trace me")
    wait_idle(stack, sid)
    [dispatched] = stack.records.find("orchestrator", timeline="dispatched", session_id=sid)
    trace_id = dispatched["traceparent"].split("-")[1]
    worker_lines = [r for r in stack.records.find("worker") if r.get("trace_id") == trace_id]
    assert {r.get("timeline") for r in worker_lines} >= {"chat_received", "answer_ready"}
    assert stack.records.find("orchestrator", timeline="callback_accepted", session_id=sid, trace_id=trace_id)


def test_two_mentions_are_two_parallel_delegations_in_one_turn(stack):
    sid = chat(stack, "@worker first task @worker second task")
    session = wait_idle(stack, sid)
    uses = [b for b in session["messages"][1]["content"] if "toolUse" in b]
    assert len(uses) == 2
    results = tool_results(session)
    assert len(results) == 2 and all(r["status"] == "success" for r in results)
    assert len(session["messages"]) == 4  # task, two tool uses, two results, one answer
    assert "2 of 2 delegations answered" in final_text(session)


def test_a_worker_that_never_answers_times_out_at_its_own_deadline_and_is_told_to_stop(stack):
    sid = chat(stack, "@sleeper ponder the universe")
    session = wait_idle(stack, sid, timeout_s=SLEEPER_TIMEOUT_MS / 1000 + 10)
    [result] = tool_results(session)
    assert json.loads(result["content"][0]["text"]) == {"status": "error", "reason": "timeout"}
    agg = aggregation_fields(table_item(stack, "orchestrator", f"S#{sid}", "META"), 1)
    # The delegate's own timeout_ms, not the orchestrator's ASYNC_TOOL_TIMEOUT_MS.
    assert abs(int(agg["deadline_ms"]) - int(agg["created_at"]) - SLEEPER_TIMEOUT_MS) < 1000
    tool_use_id = session["messages"][1]["content"][-1]["toolUse"]["toolUseId"]
    res = table_item(stack, "orchestrator", f"S#{sid}", f"RESULT#000001#{tool_use_id}")
    lateness_ms = int(res["recorded_at"]) - int(agg["deadline_ms"])
    assert 0 <= lateness_ms <= 2000, lateness_ms
    assert "timeout" in final_text(session)
    # The orchestrator stopped waiting, so the sleeper is told to stop: its session ends canceled...
    [dispatched] = stack.records.find("orchestrator", timeline="dispatched", session_id=sid)
    peer_sid = dispatched["peer_session_id"]
    wait_for(
        lambda: stack.records.find("orchestrator", timeline="delegation_canceled", session_id=sid),
        10,
        "the sleeper was never told to stop",
    )
    assert stack.records.find("sleeper", timeline="session_canceled", session_id=peer_sid)
    as_orchestrator = {"Authorization": f"Bearer {ORCHESTRATOR_TOKEN}"}
    closed = wait_idle(stack, peer_sid, agent="sleeper", timeout_s=10, headers=as_orchestrator)
    assert "canceled" in closed["messages"][-1]["content"][0]["text"]
    # ...its think, under way when the cancel came, cannot store its reply, and nothing is delivered.
    wait_for(
        lambda: stack.records.find(
            "sleeper", session_id=peer_sid, message="the session moved on while the model thought; ignoring"
        ),
        TIMEOUT_MS / 1000 + 10,
        "the sleeper's think never ended",
    )
    assert not stack.records.find("sleeper", timeline="answer_ready", session_id=peer_sid)
    assert not stack.records.find("sleeper", audit=True, operation="delivery", session_id=peer_sid)
    assert not stack.records.find("orchestrator", timeline="callback_late", session_id=sid)
    assert tool_results(wait_idle(stack, sid)) == [result]


def test_an_unreachable_worker_is_dispatch_failed_without_waiting_for_the_timeout(stack):
    started = time.monotonic()
    sid = chat(stack, "@ghost are you there")
    session = wait_idle(stack, sid)
    elapsed = time.monotonic() - started
    [result] = tool_results(session)
    detail = json.loads(result["content"][0]["text"])
    assert detail["reason"] == "dispatch_failed" and "unreachable" in detail["detail"]
    assert elapsed < TIMEOUT_MS / 1000 + 1.5 and not stack.records.find(
        "orchestrator", timeline="timeout_synthesized", session_id=sid
    )


def wait_for(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_worker_killed_mid_task_ends_in_a_timeout_and_the_turn_completes(stack):
    sid = chat(stack, "@sleeper you will not finish")
    wait_for(lambda: stack.records.find("sleeper", timeline="turn_started"), 10, "the sleeper never started")
    # Its think starts in another sandbox than the one accepting the task: the acceptance may still
    # be on its way back to the orchestrator. Killed mid-task means after it arrived.
    wait_for(lambda: stack.records.find("orchestrator", timeline="dispatched", session_id=sid), 10, "not dispatched")
    stack.stop_agent("sleeper")
    try:
        session = wait_idle(stack, sid, timeout_s=TIMEOUT_MS / 1000 + 10)
    finally:
        stack.start_agent("sleeper")
    [result] = tool_results(session)
    assert json.loads(result["content"][0]["text"])["reason"] == "timeout"
    assert "timeout" in final_text(session)


def test_tokens_minted_before_a_secret_rotation_still_deliver(stack):
    # Warm the slowpoke's gateway (authorizer) and API function first: their cold imports on a
    # loaded 2-core machine would otherwise eat into the orchestrator's 6 s deadline.
    requests.get(
        f"{stack.urls['slowpoke']}/api/sessions/warm-up",
        timeout=10,
        headers={"Authorization": f"Bearer {ORCHESTRATOR_TOKEN}"},
    )
    sid = chat(stack, "@slowpoke answer across the rotation")
    wait_for(lambda: stack.records.find("orchestrator", timeline="dispatched", session_id=sid), 10, "not dispatched")
    stack.rotate_secret("orchestrator", "test-only-rotated-orchestrator-secret-9876543210")
    session = wait_idle(stack, sid, timeout_s=TIMEOUT_MS / 1000 + 10)
    [result] = tool_results(session)
    assert result["status"] == "success", result  # signed with the old key, verified after the rotation
    after = wait_idle(stack, chat(stack, "@worker signed with the new key"))
    assert tool_results(after)[0]["status"] == "success"


def test_callback_endpoint_down_for_a_while_then_back_delivers_once(stack, proxy):
    proxy.down = True
    try:
        sid = chat(stack, "@worker deliver me eventually", agent="patient")
        wait_for(
            lambda: any(p.startswith("/api/tools/response") for p in proxy.refused),
            15,
            "no delivery attempt reached the proxy",
        )
        time.sleep(DOWN_FOR_S)
    finally:
        proxy.down = False
    session = wait_idle(stack, sid, agent="patient", timeout_s=DOWN_FOR_S + 60)
    [result] = tool_results(session)
    assert result["status"] == "success" and "deliver me eventually" in result["content"][0]["text"]
    assert len(stack.records.find("patient", timeline="callback_accepted", session_id=sid)) == 1
    assert not stack.records.find("patient", timeline="callback_duplicate", session_id=sid)
    assert len(proxy.refused) >= 2  # it was retried while down


# --- peer authentication and the audit log ------------------------------------------------------


def test_the_worker_refuses_a_dispatch_without_the_orchestrators_token(stack):
    # Nothing but a bearer token gets a task in: not even a well-formed reply descriptor.
    body = {"content": "work for free", "reply": {"callbackService": "orchestrator", "bearerToken": "x" * 40}}
    bare = requests.post(f"{stack.urls['worker']}/api/chat", json=body, timeout=10)
    assert bare.status_code == 401 and bare.headers["WWW-Authenticate"].startswith('Bearer realm="flightdeck"')
    forged = requests.post(
        f"{stack.urls['worker']}/api/chat", json=body, timeout=10, headers={"Authorization": f"Bearer {FORGED_TOKEN}"}
    )
    assert forged.status_code == 403 and forged.json()["error"]["code"] == "forbidden"
    # A real dispatch from an agent the worker does not know (it presents a forged orchestrator token).
    sid = chat(stack, "@worker hand over the launch plan", agent="intruder")
    session = wait_idle(stack, sid, agent="intruder")
    [result] = tool_results(session)
    detail = json.loads(result["content"][0]["text"])
    assert detail["reason"] == "dispatch_failed" and "HTTP 403 from worker" in detail["detail"], detail
    [dispatch] = stack.records.find("intruder", audit=True, operation="dispatch", session_id=sid)
    assert dispatch["outcome"] == "http_403"
    [refused] = stack.records.find("worker", audit=True, payload_sha256=dispatch["payload_sha256"])
    assert (refused["outcome"], refused["peer"], refused["claimed_peer"]) == ("forbidden", "", "orchestrator")
    assert not [
        r
        for r in stack.records.find("worker", timeline="chat_received")
        if "hand over the launch plan" in json.dumps(r)
    ]


def test_one_round_trip_is_one_audit_line_per_call_on_each_side(stack):
    body = json.dumps({"content": "@worker audit this round trip"}).encode()
    resp = requests.post(
        f"{stack.urls['orchestrator']}/api/chat",
        data=body,
        timeout=10,
        headers={**AS_USER, "Content-Type": "application/json"},
    )
    assert resp.status_code == 202
    sid = resp.json()["session_id"]
    wait_idle(stack, sid)

    def audited(agent, sha256):
        lines = stack.records.find(agent, audit=True, payload_sha256=sha256)
        assert all(line.get("timestamp") for line in lines)
        return lines

    # 1. the user's task, into the orchestrator
    [ingest] = audited("orchestrator", hashlib.sha256(body).hexdigest())
    assert (ingest["direction"], ingest["operation"], ingest["peer"], ingest["outcome"]) == (
        "inbound",
        "chat",
        "user",
        "accepted",
    )
    # 2. the dispatch, out of the orchestrator and into the worker: the same bytes on both sides
    [dispatch] = stack.records.find("orchestrator", audit=True, operation="dispatch", session_id=sid)
    assert (dispatch["direction"], dispatch["peer"], dispatch["outcome"]) == ("outbound", "worker", "http_202")
    assert audited("orchestrator", dispatch["payload_sha256"]) == [dispatch]
    [received] = audited("worker", dispatch["payload_sha256"])
    assert (received["direction"], received["operation"], received["peer"], received["outcome"]) == (
        "inbound",
        "chat",
        "orchestrator",
        "accepted",
    )
    # 3. the answer, out of the worker and into the orchestrator's callback endpoint
    [dispatched] = stack.records.find("orchestrator", timeline="dispatched", session_id=sid)
    [delivery] = stack.records.find(
        "worker", audit=True, direction="outbound", session_id=dispatched["peer_session_id"]
    )
    assert (delivery["operation"], delivery["peer"], delivery["outcome"]) == ("delivery", "orchestrator", "http_202")
    assert audited("worker", delivery["payload_sha256"]) == [delivery]
    [callback] = audited("orchestrator", delivery["payload_sha256"])
    assert (callback["direction"], callback["operation"], callback["peer"], callback["outcome"]) == (
        "inbound",
        "tool_response",
        "worker",
        "accepted",
    )


# --- input-required across two agents (flightdeck.domain.asking) ----------------------------------------


def _worker_session(stack, sid):
    resp = requests.get(
        f"{stack.urls['worker']}/api/sessions/{sid}",
        timeout=10,
        headers={"Authorization": f"Bearer {ORCHESTRATOR_TOKEN}"},
    )
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_the_worker_asks_the_orchestrator_answers_in_its_context_and_the_worker_finishes(stack):
    sid = chat(stack, "@worker ?ask which year? summarise the plan ?answer 2024")
    session = wait_idle(stack, sid)
    first, answered = tool_results(session)
    asked = json.loads(first["content"][0]["text"])
    first_call = session["messages"][1]["content"][-1]["toolUse"]
    from flightdeck.domain.dispatch import peer_session_id

    context = peer_session_id("orchestrator", sid, first_call["toolUseId"])
    assert (first["status"], asked) == (
        "success",
        {"status": "input_required", "question": "which year?", "context_id": context},
    )
    [again] = [b["toolUse"] for b in session["messages"][3]["content"] if "toolUse" in b]
    assert again["input"] == {"task": "2024", "context_id": context}
    told = '[worker] Task: "summarise the plan" (asked "which year?", told "2024")'
    assert answered["status"] == "success" and answered["content"][0]["text"].startswith(told)
    assert told in final_text(session) and session["question"] is None
    # The worker's one session holds the whole exchange: task, question, answer, answer.
    worker = _worker_session(stack, context)
    assert [m["role"] for m in worker["messages"]] == ["user", "assistant", "user", "assistant"]
    assert (worker["status"], worker["turn"], worker["question"]) == ("idle", 2, None)
    assert len(stack.records.find("worker", timeline="answer_ready", session_id=context)) == 2


def test_without_an_answer_the_question_goes_up_to_the_user_and_back_down(stack):
    sid = chat(stack, "@worker ?ask which year? summarise the plan")
    session = wait_idle(stack, sid)
    assert session["question"] == "worker asks: which year?"
    resp = requests.post(
        f"{stack.urls['orchestrator']}/api/chat",
        json={"session_id": sid, "content": "1999"},
        headers=AS_USER,
        timeout=10,
    )
    assert resp.status_code == 202
    wait_for(lambda: len(wait_idle(stack, sid)["messages"]) > len(session["messages"]) + 2, 30, "no answer")
    session = wait_idle(stack, sid)
    assert 'told "1999"' in final_text(session) and session["question"] is None


def test_only_the_peer_that_owns_a_worker_session_can_continue_it(stack):
    sid = chat(stack, "@worker ?ask which year? summarise")
    session = wait_idle(stack, sid)
    context = json.loads(tool_results(session)[0]["content"][0]["text"])["context_id"]
    body = {
        "session_id": context,
        "content": "2024",
        "continue_session": True,
        "reply": {"callbackService": "patient", "bearerToken": "x" * 40},
    }
    stolen = requests.post(
        f"{stack.urls['worker']}/api/chat", json=body, timeout=10, headers={"Authorization": f"Bearer {PATIENT_TOKEN}"}
    )
    assert stolen.status_code == 404 and stolen.json()["error"]["code"] == "session_not_found"
    unknown = requests.post(
        f"{stack.urls['worker']}/api/chat",
        json={**body, "session_id": "s-never-was"},
        timeout=10,
        headers={"Authorization": f"Bearer {ORCHESTRATOR_TOKEN}"},
    )
    assert unknown.status_code == 404 and "to continue" in unknown.json()["error"]["message"]
    assert _worker_session(stack, context)["question"] == "which year?"  # untouched
