"""The sizes of what a think stores and what a delegate's answer may be, in one place.

Each follows from DynamoDB's item limit: a model reply, a tool result and a chat message are each stored
whole, in one item, never cut short. The callback protocol's answer limit follows from the reply's, so a
delegate never sends an answer that its caller's default refuses (MAX_RESULT_BYTES, docs/CONFIGURATION.md).
"""

from __future__ import annotations

# DynamoDB: one item's attribute names and values, in bytes.
ITEM_BYTES = 400 * 1024

# A model reply is stored once, in its iteration item, beside its keys and the think's times: past this many
# bytes (UTF-8, unescaped) it could not be, so the turn ends with an error answer instead.
MAX_REPLY_BYTES = 180_000

# The callback protocol's answer: the largest result a delegate sends (its final reply's text, or its question),
# which is no larger than the reply it comes from. The default of MAX_RESULT_BYTES, so a caller that keeps the
# default takes every answer; a delegate holds its answer to this before sending it (flightdeck.domain.delivery).
MAX_ANSWER_BYTES = MAX_REPLY_BYTES

# A tool result is stored whole, as raw UTF-8, in an item of its own: MAX_RESULT_BYTES may be set up to this.
MAX_STORED_RESULT_BYTES = 300_000

# A chat message is stored in one item, with room for its keys and reply route.
MAX_CONTENT_BYTES = 200_000

# A single answer's callback body: the answer as ASCII-only JSON (a 4-byte character goes as a 12-byte escaped
# pair) and its few other fields. MAX_BODY_BYTES's default takes it; a body past the caller's MAX_BODY_BYTES
# (an answer of control characters, 6 bytes each escaped) is refused, and recorded as too large when its token
# is good (flightdeck.api.callback_routes).
CALLBACK_BODY_BYTES = 3 * MAX_ANSWER_BYTES + 4_096
