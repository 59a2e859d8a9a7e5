"""The crash-point explorer's scenarios of the doors added after the engine (test_crash_points.py says how it
works): a skill call answered by its handler and one by the model, MCP tools/call and tasks/update on /mcp,
A2A v1.0 SendMessage and SubscribeToTask. A file of its own, so that pytest-xdist's loadfile runs it beside
the others; test_crash_points_stream.py runs them again with the stream as the owed-think starter."""

from __future__ import annotations

import pytest

from tests.integration.test_crash_points import explore_scenario, explorer  # noqa: F401 - the module's fixture
from tests.support.explorer.catalogue import CATALOGUE, DOORS

NEW_DOORS = [s for s in CATALOGUE if s.id in DOORS]


@pytest.mark.parametrize("scenario", NEW_DOORS, ids=[s.id for s in NEW_DOORS])
def test_every_crash_point_of_a_later_door_recovers(explorer, scenario, record_property, request):  # noqa: F811
    explore_scenario(explorer, scenario, record_property, request)
