"""The thinks phase's arithmetic (flightdeck.bench.think_load): concurrency from invocation spans, a think's
wait from its writer's line to its own, the paper figure from the measured batch."""

from __future__ import annotations

from flightdeck.bench import think_load
from flightdeck.bench.prices import load as load_prices


def _line(event: str, sid: str, turn: int, at: str) -> dict:
    return {"timeline": event, "session_id": sid, "turn": turn, "timestamp": f"2026-12-04 10:00:{at}+0000"}


def test_peak_counts_the_spans_open_at_one_moment():
    assert think_load.peak([]) == 0
    assert think_load.peak(iter([(0, 2), (1, 3), (2.5, 4), (5, 6)])) == 2  # a generator, read once
    assert think_load.peak([(0, 1), (1, 2)]) == 1  # one ends as the next starts
    assert think_load.peak([(0, 10)] * 10) == 10


def test_a_think_s_wait_runs_from_its_writer_s_line_to_its_own_first_line():
    records = [
        ("orch", _line("chat_received", "s-1", 1, "00,000")),
        ("orch", _line("turn_started", "s-1", 1, "00,040")),
        ("orch", _line("turn_complete", "s-1", 1, "03,000")),  # the completer starts turn 2
        ("orch", _line("thinking", "s-1", 2, "03,500")),
        ("orch", _line("thinking", "s-1", 2, "09,000")),  # a second run of it: the first counts
        ("critic", _line("chat_received", "s-1", 1, "01,000")),  # the same session id on another agent
        ("critic", _line("turn_started", "s-1", 1, "01,100")),
        ("orch", _line("turn_started", "s-2", 1, "00,010")),  # no writer's line seen: not counted
    ]
    start = records[0][1]
    window = think_load.parse_timestamp(start["timestamp"])
    lags = think_load.think_lags_ms(records, window, window + 60)
    assert sorted(round(x) for x in lags) == [40, 100, 500]


def test_the_turn_workers_figures_divide_by_thinks_not_invocations():
    invocations = [
        {"n": 10, "ms": 1200.0, "t": 101.2},  # a batch of ten
        {"n": 1, "ms": 1000.0, "t": 101.0},  # a lone think, invoked
    ]
    got = think_load.figures(invocations, load_prices())
    assert (got["thinks"], got["invocations"], got["peak_concurrency"]) == (11, 2, 2)
    assert got["invocations_per_think"] == round(2 / 11, 3) and got["function_s_per_think"] == 0.2
    assert got["mean_batch"] == 5.5 and got["turn_worker_usd_per_1m_thinks"] > 0


def test_the_paper_figure_is_a_thousand_executions_over_three_thinks_of_the_latency_times_the_batch():
    figure = think_load.paper(mean_batch=6.0)
    assert figure["one_per_function"] == {"latency_1s": 333.3, "latency_5s": 66.7}
    assert figure["shared"] == {"latency_1s": 2000.0, "latency_5s": 400.0}
