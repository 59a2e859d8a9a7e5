"""The live relay without AWS (flightdeck.domain.live): a think's writes on a fake clock, what a stream
relays of them, and what stays true whatever happens: the stored answer is the text in the end."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flightdeck.domain import live
from flightdeck.domain.agent import AgentDefinition, ModelConfig
from flightdeck.domain.model import ModelError, ModelReply, TextDelta, word_chunks
from flightdeck.domain.records import Iteration, LiveText, Session
from flightdeck.domain.scripted_model import ScriptedModel

AGENT = AgentDefinition(name="talker")
TASK = [{"role": "user", "content": [{"text": "tell me about the tides of the northern sea in a few words"}]}]


class Clock:
    def __init__(self):
        self.ms = 1_000_000

    def now_ms(self) -> int:
        return self.ms

    def sleep(self, seconds: float) -> None:
        self.ms += round(seconds * 1000)


class FakeLive:
    def __init__(self, clock: Clock, fail: bool = False):
        self.clock, self.fail = clock, fail
        self.calls: list[tuple] = []

    def watch(self, session_id, until_ms):
        self.calls.append(("watch", session_id, until_ms))

    def put_text(self, session_id, text: LiveText, ttl_ms):
        if self.fail:
            raise RuntimeError("throttled")
        self.calls.append(("put", self.clock.ms, text))

    def clear_text(self, session_id, turn, attempt):
        self.calls.append(("clear", turn, attempt))


def _deps(clock: Clock, port: FakeLive | None, interval_ms: int = 200):
    return SimpleNamespace(settings=SimpleNamespace(stream_poll_interval_ms=interval_ms), clock=clock, live=port)


def _session(watched_until_ms=0, status="busy", turn=1, live_text=None, iteration=None) -> Session:
    return Session("s1", status, turn, TASK, watched_until_ms=watched_until_ms, live=live_text, iteration=iteration)


def test_nobody_watching_means_no_relay_and_no_request():
    clock = Clock()
    port = FakeLive(clock)
    assert live.relay_for(_deps(clock, port), _session(), 1) is None
    assert live.relay_for(_deps(clock, port), _session(watched_until_ms=clock.ms - 1), 1) is None  # expired mark
    assert live.relay_for(_deps(clock, None), _session(watched_until_ms=clock.ms + 5000), 1) is None
    assert port.calls == []


def test_a_watched_think_writes_its_text_at_most_once_per_interval_then_deletes_it():
    clock = Clock()
    port = FakeLive(clock)
    model = ScriptedModel(ModelConfig(think_delay_ms=2000), AGENT, sleep=clock.sleep)
    relay = live.relay_for(_deps(clock, port, interval_ms=200), _session(watched_until_ms=clock.ms + 60_000), 3)
    started = clock.ms
    reply = relay.think(model, system="", messages=TASK, tools=[])
    assert reply == ScriptedModel(ModelConfig(), AGENT).converse(system="", messages=TASK, tools=[])
    puts = [c for c in port.calls if c[0] == "put"]
    assert port.calls[-1] == ("clear", 1, 3) and len(port.calls) == len(puts) + 1
    times = [c[1] for c in puts]
    # The first after one interval, then at most one per interval: 2 s of think, 200 ms apart.
    assert times[0] - started >= 200 and all(b - a >= 200 for a, b in zip(times, times[1:]))
    assert 5 <= len(puts) <= 10
    texts = [c[2].text for c in puts]
    assert all(reply.text.startswith(t) for t in texts) and all(len(a) < len(b) for a, b in zip(texts, texts[1:]))
    assert {(c[2].turn, c[2].attempt) for c in puts} == {(1, 3)}


def test_a_think_within_one_interval_writes_nothing():
    clock = Clock()
    port = FakeLive(clock)
    relay = live.relay_for(_deps(clock, port, interval_ms=1000), _session(watched_until_ms=clock.ms + 60_000), 1)
    relay.think(
        ScriptedModel(ModelConfig(think_delay_ms=500), AGENT, sleep=clock.sleep), system="", messages=TASK, tools=[]
    )
    assert port.calls == []


def test_a_model_that_cannot_stream_answers_at_once():
    clock = Clock()
    reply = ModelReply(stop_reason="end_turn", message={"role": "assistant", "content": [{"text": "hi"}]})
    model = SimpleNamespace(converse=lambda **_: reply)
    relay = live.relay_for(_deps(clock, FakeLive(clock)), _session(watched_until_ms=clock.ms + 60_000), 1)
    assert relay.think(model, system="", messages=TASK, tools=[]) is reply


def test_a_failed_write_ends_the_relay_not_the_think():
    clock = Clock()
    port = FakeLive(clock, fail=True)
    relay = live.relay_for(_deps(clock, port, interval_ms=100), _session(watched_until_ms=clock.ms + 60_000), 1)
    reply = relay.think(
        ScriptedModel(ModelConfig(think_delay_ms=1000), AGENT, sleep=clock.sleep), system="", messages=TASK, tools=[]
    )
    assert reply.text.startswith("[talker]") and port.calls == []  # nothing written, nothing to delete


def test_a_model_error_mid_stream_still_deletes_the_text_and_is_the_think_s_error():
    clock = Clock()
    port = FakeLive(clock)

    class Breaks:
        def converse_stream(self, **_):
            for word in ("one ", "two ", "three "):
                clock.sleep(0.3)
                yield TextDelta(word)
            raise ModelError("stream broke")

    relay = live.relay_for(_deps(clock, port, interval_ms=200), _session(watched_until_ms=clock.ms + 60_000), 1)
    with pytest.raises(ModelError):
        relay.think(Breaks(), system="", messages=TASK, tools=[])
    assert [c[0] for c in port.calls] == ["put", "put", "put", "clear"]


def test_past_its_size_bound_the_text_is_no_longer_written():
    clock = Clock()
    port = FakeLive(clock)
    big = "x" * (live.LIVE_MAX_BYTES // 2)

    class Long:
        def converse_stream(self, **_):
            for _ in range(4):
                clock.sleep(1)
                yield TextDelta(big)
            yield ModelReply(stop_reason="end_turn", message={"role": "assistant", "content": [{"text": big * 4}]})

    relay = live.relay_for(_deps(clock, port, interval_ms=100), _session(watched_until_ms=clock.ms + 60_000), 1)
    assert relay.think(Long(), system="", messages=TASK, tools=[]).text == big * 4
    assert [len(c[2].text) for c in port.calls if c[0] == "put"] == [len(big), 2 * len(big)]


# --- the watch mark -------------------------------------------------------------------------------------


def test_a_stream_marks_a_busy_session_and_marks_it_again_only_at_half_time():
    clock = Clock()
    port = FakeLive(clock)
    deps = _deps(clock, port)
    live.keep_watching(deps, _session(status="idle"))
    assert port.calls == []  # nothing will think there
    live.keep_watching(deps, _session())
    assert port.calls == [("watch", "s1", clock.ms + live.WATCH_MS)]
    live.keep_watching(deps, _session(watched_until_ms=clock.ms + live.WATCH_MS // 2 + 1))
    assert len(port.calls) == 1
    live.keep_watching(deps, _session(watched_until_ms=clock.ms + live.WATCH_MS // 2 - 1))
    assert len(port.calls) == 2
    live.start_watching(deps, "s2")
    assert port.calls[-1] == ("watch", "s2", clock.ms + live.WATCH_MS)


# --- what a stream relays -------------------------------------------------------------------------------


def test_the_live_text_counts_only_for_the_think_under_way():
    text = LiveText(2, 1, "so far")
    assert live.live_text(_session(turn=2, live_text=text)) == text
    assert live.live_text(_session(turn=3, live_text=text)) is None  # an older think's
    assert live.live_text(_session(turn=2, live_text=text, status="idle")) is None
    stored = Iteration(
        "s1", 2, {"stop_reason": "end_turn", "message": {"role": "assistant", "content": [{"text": "so far, all"}]}}
    )
    assert live.live_text(_session(turn=2, live_text=text, iteration=stored)) is None  # the reply is in
    assert live.stored_text(_session(turn=2, iteration=stored), 2) == "so far, all"
    assert live.stored_text(_session(turn=2, iteration=stored), 1) is None


def test_a_follower_sends_what_is_new_and_starts_over_for_another_attempt():
    f = live.TextFollower()
    assert f.rest("anything") is None  # nothing relayed: the whole answer goes out
    assert f.next_piece(LiveText(1, 1, "")) is None
    assert f.next_piece(LiveText(1, 1, "Hello")) == ("Hello", 0)
    assert f.next_piece(LiveText(1, 1, "Hello")) is None
    assert f.next_piece(LiveText(1, 1, "Hello wor")) == (" wor", 5)
    assert f.next_piece(LiveText(1, 2, "Hi")) == ("Hi", 0)  # retried: starts over
    assert f.rest("Hi there") == " there" and f.rest("Hi") == ""
    assert f.rest("Hello world") is None  # not what was relayed: replaced whole
    assert f.rest("Hi there", turn=3) is None


@given(st.text(min_size=1), st.lists(st.integers(min_value=0, max_value=50), max_size=8))
def test_what_is_relayed_then_the_rest_is_the_answer(answer, cuts):
    f = live.TextFollower()
    pieces = []
    for cut in sorted(cuts):
        got = f.next_piece(LiveText(1, 1, answer[:cut]))
        if got:
            assert got[1] == sum(len(p) for p in pieces)
            pieces.append(got[0])
    rest = f.rest(answer)
    assert "".join(pieces) + (rest if rest is not None else "") == answer if pieces else rest is None


def test_the_local_model_spreads_its_delay_over_its_words():
    clock = Clock()
    model = ScriptedModel(ModelConfig(think_delay_ms=1000), AGENT, sleep=clock.sleep)
    started, seen = clock.ms, []
    for item in model.converse_stream(system="", messages=TASK, tools=[]):
        seen.append((clock.ms - started, item))
    deltas = [(t, i.text) for t, i in seen if isinstance(i, TextDelta)]
    reply = seen[-1][1]
    assert "".join(t for _, t in deltas) == reply.text and [t for _, t in deltas] == word_chunks(reply.text)
    times = [t for t, _ in deltas]
    assert times == sorted(times) and times[0] > 0 and 990 <= times[-1] <= 1010  # the whole delay, spread


# --- how an A2A stream ends after what it relayed --------------------------------------------------------

from flightdeck.domain.a2a import stream as a2a_stream  # noqa: E402
from flightdeck.domain.a2a.ports import TaskRecord  # noqa: E402

ANSWER = "The tide turns twice a day, pulled by the moon."


def _done(answer: str = ANSWER) -> TaskRecord:
    return TaskRecord("s1", "k1", "completed", 1, {}, 0, 0, end_turn=2, answer=answer)


def _artifact(events) -> str:
    """The answer artifact as a client assembles it: append adds, append false starts it again."""
    text = ""
    for e in events:
        if e["kind"] == "artifact-update":
            piece = e["artifact"]["parts"][0]["text"]
            text = text + piece if e["append"] else piece
    return text


def test_an_a2a_stream_ends_with_the_rest_of_the_answer_it_relayed():
    f = live.TextFollower()
    f.next_piece(LiveText(2, 1, "The tide turns"))
    events = a2a_stream.ending(_done(), f)
    chunks = [e for e in events if e["kind"] == "artifact-update"]
    assert all(c["append"] for c in chunks) and chunks[-1]["lastChunk"] and not any(c["lastChunk"] for c in chunks[:-1])
    assert "The tide turns" + "".join(c["artifact"]["parts"][0]["text"] for c in chunks) == ANSWER
    assert events[-1]["kind"] == "status-update" and events[-1]["final"]


def test_nothing_left_is_one_empty_last_chunk():
    f = live.TextFollower()
    f.next_piece(LiveText(2, 1, ANSWER))
    chunks = [e for e in a2a_stream.ending(_done(), f) if e["kind"] == "artifact-update"]
    assert [(c["artifact"]["parts"][0]["text"], c["append"], c["lastChunk"]) for c in chunks] == [("", True, True)]


def test_what_another_think_said_is_replaced_by_the_answer():
    f = live.TextFollower()
    f.next_piece(LiveText(1, 1, "Delegating 1 task(s) to @worker."))  # a think that called tools
    relayed = [a2a_stream.artifact_chunk(_done(), "Delegating 1 task(s) to @worker.", append=False, last=False)]
    events = relayed + a2a_stream.ending(_done(), f)
    chunks = [e for e in events if e["kind"] == "artifact-update"]
    assert [c["append"] for c in chunks[1:]] == [False] + [True] * (len(chunks) - 2)
    assert _artifact(events) == ANSWER
    # Attached after the think: the whole answer, word by word; failed: no answer at all.
    assert _artifact(a2a_stream.ending(_done())) == ANSWER
    failed = TaskRecord("s1", "k1", "failed", 1, {}, 0, 0, answer="")
    assert [e["kind"] for e in a2a_stream.ending(failed, f)] == ["status-update"]
