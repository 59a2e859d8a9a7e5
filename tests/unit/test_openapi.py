import json
from pathlib import Path

from flightdeck.api.openapi import render

COMMITTED = Path(__file__).resolve().parents[2] / "openapi.json"


def test_committed_openapi_matches_the_code():
    assert COMMITTED.read_text() == render(), "openapi.json drifted: run `python -m flightdeck.api.openapi > openapi.json`"


def test_document_is_openapi_31_with_every_route():
    from flightdeck import topology

    doc = json.loads(COMMITTED.read_text())
    assert doc["openapi"].startswith("3.1")
    for route in topology.ROUTES:
        assert route.method.lower() in doc["paths"][route.path], route
