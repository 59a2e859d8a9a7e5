import json
from pathlib import Path

from flightdeck.api.openapi import render

COMMITTED = Path(__file__).resolve().parents[2] / "openapi.json"


def test_committed_openapi_matches_the_code():
    assert COMMITTED.read_text() == render(), (
        "openapi.json drifted: run `python -m flightdeck.api.openapi > openapi.json`"
    )


def test_document_is_openapi_31_with_every_route():
    from flightdeck import topology

    doc = json.loads(COMMITTED.read_text())
    assert doc["openapi"].startswith("3.1")
    for route in topology.ROUTES:
        assert route.method.lower() in doc["paths"][route.path], route


def test_the_served_document_is_the_committed_one_shipped_in_the_package():
    from importlib import resources

    packaged = resources.files("flightdeck.api").joinpath("openapi.json")
    assert COMMITTED.is_symlink() and COMMITTED.resolve() == Path(str(packaged)).resolve()
    assert packaged.read_text() == render()


def test_the_first_hour_routes_are_documented():
    doc = json.loads(COMMITTED.read_text())
    assert doc["paths"]["/health"]["get"]["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Health"
    }
    listing = doc["paths"]["/api/sessions"]["get"]
    assert {p["name"] for p in listing["parameters"]} == {"limit", "cursor"}
    assert listing["security"] == [{"peerToken": []}] and "400" in listing["responses"]
    accepted = doc["components"]["schemas"]["ChatAccepted"]["properties"]
    assert {"turn", "iteration"} <= set(accepted) and "user messages" in accepted["turn"]["description"]
