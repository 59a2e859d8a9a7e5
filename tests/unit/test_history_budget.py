"""The history budget (issue 37): a think's input kept under N tokens by leaving out the oldest turns, with a note."""

from __future__ import annotations

from flightdeck.domain.history_budget import elision_note, within_budget
from flightdeck.domain.prompt_cache import estimate_tokens
from tests.fakes.model import answer
from tests.fakes.world import delegating_agent, world


def user(text: str) -> dict:
    return {"role": "user", "content": [{"text": text}]}


def said(text: str) -> dict:
    return {"role": "assistant", "content": [{"text": text}]}


def delegated(tool_use_id: str) -> list[dict]:
    use = {"toolUse": {"toolUseId": tool_use_id, "name": "ask_worker", "input": {"task": "x"}}}
    result = {"toolResult": {"toolUseId": tool_use_id, "content": [{"text": "done"}], "status": "success"}}
    return [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]


# Three turns of about 100 tokens each (a text is its own bytes / 4, in its message's JSON).
TURNS = [
    [user("a" * 200), *delegated("t1"), said("b" * 150)],
    [user("c" * 200), said("d" * 150)],
    [user("e" * 200)],
]
MESSAGES = [m for turn in TURNS for m in turn]


def tokens(messages: list[dict]) -> int:
    return sum(estimate_tokens(m) for m in messages)


def test_off_or_within_the_budget_the_history_is_whole():
    assert within_budget("sys", [], MESSAGES, 0) == MESSAGES
    assert within_budget("sys", [], MESSAGES, 10_000) == MESSAGES


def test_over_the_budget_the_oldest_whole_turns_go_and_the_model_is_told():
    budget = estimate_tokens("sys") + tokens(MESSAGES) - 1  # one token too many: the first turn goes
    kept = within_budget("sys", [], MESSAGES, budget)
    first = TURNS[1][0]
    assert kept == [{**first, "content": [{"text": elision_note(1)}, *first["content"]]}, *MESSAGES[5:]]
    # Its tool call went with its result: no toolResult is left without the call it answers.
    assert not any("toolResult" in b or "toolUse" in b for m in kept for b in m["content"])
    assert estimate_tokens("sys") + tokens(kept) <= budget


def test_the_turn_under_way_stays_whatever_its_size():
    kept = within_budget("sys", [], MESSAGES, 1)
    assert kept == [{**TURNS[2][0], "content": [{"text": elision_note(2)}, *TURNS[2][0]["content"]]}]


def test_a_think_sends_the_model_the_history_within_the_agents_budget():
    # Given an agent with a budget, and a session two turns long
    agent = delegating_agent()
    agent = agent.model_copy(update={"model": agent.model.model_copy(update={"history_budget_tokens": 150})})
    w = world(agent)
    w.model.says(answer("x" * 400), answer("short"))
    sid = w.message("y" * 400).session_id
    w.think(sid, 1)
    w.message("the second question", session_id=sid)
    w.think(sid, 2)
    # Then the second think was sent its own turn only, told the first was left out
    heard = w.model.heard[-1].messages
    assert heard == [{"role": "user", "content": [{"text": elision_note(1)}, {"text": "the second question"}]}]
    # ...and the session keeps the whole history
    assert len(w.session(sid).messages) == 4
