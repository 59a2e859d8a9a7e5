"""The crash-point explorer with THINK_GATHERING = "shared": every think gathered on the thinks queue.

The catalogue's batch scenario (two sessions' thinks in one invocation, crashed before, inside and between
them) and a few core paths, with every owed think started through the thinks queue and each batch run by
the turn worker: a crash after each committed step (a writer's send to the queue, each think's own steps),
the batch handed back after its visibility timeout, a failed think's record a minute on, the sweep's
re-send of what is still owed, leave no session stuck and no think asked twice once its reply is stored.
FLIGHTDECK_EXPLORER=nightly runs several seeds, as there.
"""

from __future__ import annotations

import gc

import pytest
from moto import mock_aws

from flightdeck import wiring
from tests.conftest import MOTO_CONFIG
from tests.integration.test_crash_points import CORE, explore_scenario
from tests.support.explorer.catalogue import BATCHED
from tests.support.explorer.explore import Explorer
from tests.support.invokes import RECORDER

SCENARIOS = [*BATCHED, *(s for s in CORE if s.id in ("two-delegations", "follow-up-while-busy", "mcp-inline-call"))]


@pytest.fixture(scope="module")
def explorer():
    patch = pytest.MonkeyPatch()
    RECORDER.clear()
    gc.collect()
    gc.freeze()
    with mock_aws(config=MOTO_CONFIG):
        yield Explorer(patch, think_gathering="shared")
    gc.unfreeze()
    patch.undo()
    wiring.reset()
    RECORDER.clear()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_every_crash_point_recovers_with_thinks_gathered_in_batches(explorer, scenario, record_property, request):
    explore_scenario(explorer, scenario, record_property, request)
