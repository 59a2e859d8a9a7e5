"""The size limits agree (issue 36, defect 5): each follows from DynamoDB's item, and a delegate never sends an
answer its caller's defaults refuse (flightdeck.domain.limits)."""

from __future__ import annotations

import json

from flightdeck.domain import limits
from flightdeck.settings import Settings


def _default(name: str) -> int:
    return Settings.model_fields[name].default


def test_what_is_stored_whole_fits_one_item():
    assert limits.MAX_REPLY_BYTES < limits.ITEM_BYTES
    assert limits.MAX_CONTENT_BYTES < limits.ITEM_BYTES
    assert limits.MAX_ANSWER_BYTES <= limits.MAX_STORED_RESULT_BYTES < limits.ITEM_BYTES


def test_a_caller_that_keeps_the_defaults_takes_every_answer_a_delegate_sends():
    # An answer is a reply's text (or its question): the protocol's limit is the reply's, and the callers' default.
    assert limits.MAX_ANSWER_BYTES >= limits.MAX_REPLY_BYTES
    assert _default("max_result_bytes") == limits.MAX_ANSWER_BYTES
    # Its body, ASCII-only JSON: a 4-byte character goes as a 12-byte escaped pair, the worst of printable text.
    worst = json.dumps({"result": "😀" * (limits.MAX_ANSWER_BYTES // 4), "status": "success"}).encode()
    assert len(worst) <= limits.CALLBACK_BODY_BYTES <= _default("max_body_bytes")
