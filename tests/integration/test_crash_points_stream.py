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
from tests.support.explorer.catalogue import CATALOGUE, DOORS
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


# The engine's scenarios, and the later doors' that start thinks through the engine's writers (skills, the MCP
# server); the A2A ones run with the writer as the starter only, as before.
STREAMED = CORE + [s for s in CATALOGUE if s.id in DOORS and not s.id.startswith("a2a-")]


@pytest.mark.parametrize("scenario", STREAMED, ids=[s.id for s in STREAMED])
def test_every_crash_point_recovers_with_the_stream_as_the_think_starter(explorer, scenario, record_property, request):
    explore_scenario(explorer, scenario, record_property, request)
