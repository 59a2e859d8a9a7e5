"""Whole numbers read from text others wrote (a page token, a header, a stored key, a CLI argument).

`str.isdigit()` (and `isdecimal`, `isnumeric`) admits "²" and other scripts' digits: `int()` refuses the
first (a ValueError where a 4xx was meant) and takes the second ("٣" is 3); `int()` alone also takes
" 1", "+1", "-1" and "1_0", and refuses more than 4,300 digits. Every such read goes through
parse_nonneg_int (tests/unit/test_numerals.py keeps the string methods out of the package).
"""

from __future__ import annotations

# 18 digits stay below 2**63: what DynamoDB, JSON clients and slices take exactly.
MAX_DIGITS = 18


def parse_nonneg_int(value: object, max_digits: int = MAX_DIGITS) -> int | None:
    """The number `value` spells in 1 to max_digits ASCII digits (0-9, nothing else), or `value` itself
    when it is already an int of at most that many digits (a JSON number: not a bool, a float, Infinity);
    None otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value if 0 <= value < 10**max_digits else None
    if not isinstance(value, str) or not 0 < len(value) <= max_digits or not (value.isascii() and value.isdigit()):
        return None
    return int(value)
