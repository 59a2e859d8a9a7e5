"""The crash-point explorer with THINK_START = "stream": the table's stream starts every owed think.

The same catalogue and invariants as test_crash_points.py, with the agent's owed thinks started by the
owed-think starter (flightdeck.handlers.owed_thinks) from moto's stream, not by their writers: a crash after
each committed step of every path (the writes that commit a mark, the starter's invoke, its hand-over to the
sweep, the turn worker's own steps), and the starter's failed batches handed over again, leave no session
stuck. FLIGHTDECK_EXPLORER=nightly runs several seeds, as there.
"""

from __future__ import annotations

import gc

import pytest
from moto import mock_aws

from flightdeck import wiring
from tests.conftest import MOTO_CONFIG
from tests.integration.test_crash_points import CORE, explore_scenario
from tests.support.explorer.explore import Explorer
from tests.support.invokes import RECORDER


@pytest.fixture(scope="module")
def explorer():
    patch = pytest.MonkeyPatch()
    RECORDER.clear()
    gc.collect()
    gc.freeze()
    with mock_aws(config=MOTO_CONFIG):
        yield Explorer(patch, think_start="stream")
    gc.unfreeze()
    patch.undo()
    wiring.reset()
    RECORDER.clear()


@pytest.mark.parametrize("scenario", CORE, ids=[s.id for s in CORE])
def test_every_crash_point_recovers_with_the_stream_as_the_think_starter(explorer, scenario, record_property, request):
    explore_scenario(explorer, scenario, record_property, request)
