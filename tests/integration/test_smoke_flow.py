"""One orchestrator turn in-process: chat -> think -> seed + dispatch -> callback -> next think."""

from tests.support.harness import new_session_id


def test_chat_turn_callback_and_final_answer(orchestrator):
    a = orchestrator
    sid = new_session_id()
    status, _, body = a.api("chat_post", body={"session_id": sid, "content": "@worker add two and two"})
    assert status == 202, body
    assert body["session_id"] == sid
    a.run_queue("turns")
    dispatches = a.bodies("dispatch")
    assert len(dispatches) == 1
    d = dispatches[0]
    assert d["task"] == "add two and two"
    token = a.token(sid, d["turn"], d["tool_use_id"])
    status, _, body = a.api("tool_response", RESULT="four", TOKEN=token)
    assert status == 202, body
    assert body == {"status": "accepted", "completed_turn": True}
    a.run_queue("turns")
    status, _, session = a.api("session_get", SESSION_ID=sid)
    assert status == 200
    assert session["status"] == "idle"
    final = session["messages"][-1]
    assert final["role"] == "assistant"
    assert "four" in final["content"][0]["text"]
