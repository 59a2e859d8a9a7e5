"""The crash-point explorer's A2A v0.3 scenarios (test_crash_points.py says how it works): a file of their own,
so that pytest-xdist's loadfile runs them beside the others."""

from __future__ import annotations

import pytest

from tests.integration.test_crash_points import explore_scenario, explorer  # noqa: F401 - the module's fixture
from tests.support.explorer.catalogue import CATALOGUE, DOORS

A2A = [s for s in CATALOGUE if s.id.startswith("a2a-") and s.id not in DOORS]


@pytest.mark.parametrize("scenario", A2A, ids=[s.id for s in A2A])
def test_every_a2a_crash_point_recovers_and_the_invariants_hold(explorer, scenario, record_property, request):  # noqa: F811
    explore_scenario(explorer, scenario, record_property, request)
