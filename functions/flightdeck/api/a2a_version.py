"""The A2A version a request speaks: its A2A-Version header, else its query parameter (A2A v1.0, section 3.2.6).

Read by POST /a2a (flightdeck.api.a2a_routes: which method table and error shape) and by the agent card
(flightdeck.api.card_routes: which card); no import beyond the standard library and the
domain's numerals (the card's cold start).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flightdeck.domain.numerals import parse_nonneg_int

VERSION_HEADER = "a2a-version"
V03, V10 = "0.3", "1.0"


def wire_version(asked: str) -> str | None:
    """The version an A2A-Version value names: "0.3", "1.0", or None for one this endpoint does not serve.
    Empty means 0.3 (the spec's default); a patch or a later minor of 1 is 1.0, as a2a-sdk compares them."""
    text = asked.strip()
    if not text:
        return V03
    major, _, rest = text.partition(".")
    minor = rest.partition(".")[0] or "0"
    numbers = parse_nonneg_int(major), parse_nonneg_int(minor)
    if numbers[0] is None or numbers[1] is None:
        return None
    if numbers[0] == 1:
        return V10
    return V03 if numbers == (0, 3) else None


def version_asked(headers: Mapping[str, Any] | None, query: Mapping[str, Any] | None) -> str:
    """The request's A2A-Version: its header, else its query parameter, else "" (header names are
    case-insensitive, a query parameter's name is not)."""
    for name, value in (headers or {}).items():
        if name.lower() == VERSION_HEADER and isinstance(value, str):
            return value
    value = (query or {}).get("A2A-Version")
    return value if isinstance(value, str) else ""
