"""The cold start goal (issue 31): each handler's import against its kind's library floor, in `import boto3`s."""

from __future__ import annotations

import pytest

from flightdeck import topology
from flightdeck.bench import coldstart, report


def test_the_goal_is_the_excess_over_the_handlers_own_floor_in_boto3s():
    # boto3 100 ms; floors 120 / 180 / 190 ms; the goal is floor + 0.3 x 100 ms.
    goal = coldstart.import_goal(
        {"web": 0.205, "queue": 0.240, "timer": 0.149},
        {"every handler": 0.120, "HTTP handlers": 0.180, "SQS handlers": 0.190},
        0.100,
        {"web": "HTTP handlers", "queue": "SQS handlers", "timer": "every handler"},
    )
    assert goal["web"] == {
        "floor": "HTTP handlers",
        "floor_ratio_to_boto3": 1.8,
        "excess_over_floor": 0.25,
        "within_goal": True,
    }
    assert goal["queue"]["excess_over_floor"] == 0.5 and not goal["queue"]["within_goal"]
    assert goal["timer"]["floor_ratio_to_boto3"] == 1.2 and goal["timer"]["excess_over_floor"] == pytest.approx(0.29)
    assert goal["timer"]["within_goal"]
    # At the limit it is within; a stricter allowance turns the same figures into a miss.
    at_limit = coldstart.import_goal({"h": 0.150}, {"every handler": 0.120}, 0.100, {"h": "every handler"})
    assert at_limit["h"]["within_goal"]
    strict = coldstart.import_goal({"h": 0.150}, {"every handler": 0.120}, 0.100, {"h": "every handler"}, 0.2)
    assert not strict["h"]["within_goal"]
    # Below its floor (it imports less than the kind prescribes): a negative excess, within.
    below = coldstart.import_goal({"h": 0.160}, {"HTTP handlers": 0.180}, 0.100, {"h": "HTTP handlers"})
    assert below["h"]["excess_over_floor"] == -0.2 and below["h"]["within_goal"]


def test_every_handler_has_the_floor_of_what_it_imports_at_init():
    kinds = {h: coldstart.floor_kind(h) for h in topology.HANDLERS}
    assert set(kinds.values()) <= set(coldstart.LIBRARY_FLOORS)
    assert {h for h, k in kinds.items() if k == "HTTP handlers"} == {r.handler for r in topology.ROUTES}
    # The queue workers and the stream consumer report partial batch failures with the batch utility.
    assert {h for h, k in kinds.items() if k == "SQS handlers"} == {
        "dispatch_worker",
        "delivery_worker",
        "deadline_timer",
        topology.OWED_THINKS_HANDLER,
    }
    # Invoked asynchronously (the turn worker, whose queue only carries delayed retries), scheduled, or the authorizer.
    assert {h for h, k in kinds.items() if k == "every handler"} == {
        "turn_worker",
        topology.SWEEPER_HANDLER,
        topology.PEER_AUTHORIZER_HANDLER,
    }


def test_the_table_shows_each_handler_against_its_goal():
    handlers = {
        "a2a": {
            "import_ms": 280.0,
            "ratio_to_boto3": 2.8,
            "floor": "HTTP handlers",
            "floor_ratio_to_boto3": 1.8,
            "excess_over_floor": 1.0,
            "within_goal": False,
        },
        "sweeper": {
            "import_ms": 140.0,
            "ratio_to_boto3": 1.4,
            "floor": "every handler",
            "floor_ratio_to_boto3": 1.2,
            "excess_over_floor": 0.2,
            "within_goal": True,
        },
    }
    cs = {
        "python": "3.11.7",
        "repeats": 5,
        "boto3_import_ms": 100.0,
        "boto3_samples": 20,
        "handlers": handlers,
        "ratio_range": [1.4, 2.8],
        "library_floor": {"every handler": {"modules": ["boto3"], "import_ms": 120.0, "ratio_to_boto3": 1.2}},
        "goal": {"excess_over_floor_max": 0.3, "within": 1, "missed": ["a2a"]},
        "slowest": "a2a",
        "slowest_breakdown_ms": [["flightdeck", 90.0]],
    }
    rows = report.cold_start_rows(cs)
    assert rows[0][:2] == ["Cold start proxy: handler import / import boto3", "1.40x - 2.80x"]
    (goal,) = [r for r in rows if r[0].startswith("... goal")]
    assert goal[1] == "1/2 within"
    assert "a2a 2.80x, HTTP handlers 1.80x, excess +1.00x (over)" in goal[2]
    assert "sweeper 1.40x, every handler 1.20x, excess +0.20x" in goal[2] and "0.20x (over)" not in goal[2]
    # A result from before the goal existed still renders, without the goal's row.
    old = {k: v for k, v in cs.items() if k != "goal"}
    assert not [r for r in report.cold_start_rows(old) if r[0].startswith("... goal")]


def test_the_table_shows_what_tracing_adds_to_each_function():
    tracing_on = {
        "modules": ["flightdeck.bench.tracing_on"],
        "handlers": {
            "a2a": {"import_ms": 30.5, "ratio_to_boto3": 0.3},
            "turn_worker": {"import_ms": 34.0, "ratio_to_boto3": 0.34, "no_pyc_import_ms": 128.0},
        },
        "range_ms": [30.5, 34.0],
    }
    cs = {
        "python": "3.11.7",
        "repeats": 3,
        "boto3_import_ms": 100.0,
        "boto3_samples": 6,
        "handlers": {"a2a": {"import_ms": 280.0, "ratio_to_boto3": 2.8}},
        "ratio_range": [2.8, 2.8],
        "library_floor": {},
        "slowest": "a2a",
        "slowest_breakdown_ms": [["flightdeck", 90.0]],
        "tracing_on": tracing_on,
    }
    [row] = [r for r in report.cold_start_rows(cs) if r[0].startswith("... tracing on")]
    assert row[1] == "30.5 - 34 ms: a2a 30.5 ms, turn_worker 34 ms (128 ms without caches)"
