"""Why the card a client gets without A2A-Version cannot be both v1.0's strict AgentCard and one a2a-sdk 0.3
reads (docs/A2A.md, the card; the TCK 1.0's CARD-STRUCT-001 fetches it so): v0.3's AgentCard requires `url`,
and v1.0's has no such field, so a strict v1.0 parser refuses a card that has it. Shown with both SDKs' own
parsers on our v1.0 card, as served, and the same card with `url` added: each parser refuses what the other
needs. Through the real handlers on moto; the 1.x parser in its own venv."""

from __future__ import annotations

import json
import subprocess

import pydantic
from a2a import types as sdk03

from tests.support import a2a1

# protobuf's ParseDict, as a2a-sdk 1.x reads a card strictly (the TCK's JSON schema says the same:
# additionalProperties false): "ok", or the error's text.
PARSE = """
import json, sys
from google.protobuf import json_format
from a2a.types import a2a_pb2 as pb
out = []
for card in json.load(sys.stdin):
    try:
        json_format.ParseDict(card, pb.AgentCard())
        out.append("ok")
    except json_format.ParseError as exc:
        out.append(str(exc))
print(json.dumps(out))
"""


def _v03_error(card: dict) -> str:
    try:
        sdk03.AgentCard.model_validate(card)
    except pydantic.ValidationError as exc:
        return str(exc)
    return "ok"


def test_no_one_card_is_both_v1s_strict_agent_card_and_a_v03_card(orchestrator):
    status, _, v1_card = orchestrator.api("agent_card_get", headers={"A2A-Version": "1.0"})
    assert status == 200
    with_url = {**v1_card, "url": v1_card["supportedInterfaces"][0]["url"]}
    parsed = subprocess.run(
        [a2a1.python(), "-c", PARSE], input=json.dumps([v1_card, with_url]), capture_output=True, text=True
    )
    assert parsed.returncode == 0, parsed.stderr[-3000:]
    strict_v1, strict_with_url = json.loads(parsed.stdout)
    assert strict_v1 == "ok" and "url" in strict_with_url  # v1.0: `url` is no field of AgentCard
    assert "url" in _v03_error(v1_card) and "Field required" in _v03_error(v1_card)  # v0.3: `url` is required
    assert _v03_error(with_url) == "ok"
