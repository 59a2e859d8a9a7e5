"""Request bodies parsed as JSON that is safe to hand on, or refused with a reason a client can act on.

The standard parser does the parsing; this adds the bounds it lacks, because a hostile body
would otherwise surface as a RecursionError or a ValueError (a 500) somewhere downstream:

* depth: at most MAX_DEPTH nested arrays/objects (no payload here needs more; DynamoDB's own
  limit is 32), so nothing later recurses without bound;
* width: at most MAX_MEMBERS members in one object and MAX_ITEMS items in one array, so a body
  of 40,000 unknown or wrongly typed members cannot make validation build 40,000 errors (a
  second of CPU); arrays get more room, for data such as vectors;
* numbers: finite floats only, no NaN/Infinity literals (not JSON), integers within Python's
  digit limit (a longer one is refused, not parsed);
* text: `lone_surrogate_at` finds a string (or key) that is not valid Unicode, such as
  "\\ud800", which could never be encoded as UTF-8 to store or send.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_DEPTH = 32
MAX_MEMBERS = 1_000
MAX_ITEMS = 10_000


class JsonRefused(ValueError):
    """A body that is not JSON we accept. reason: malformed | too_deep | too_wide | bad_number."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason, self.message = reason, message


def _no_constant(name: str) -> Any:
    raise JsonRefused("bad_number", f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonRefused("bad_number", f"number {text[:20]}{'...' if len(text) > 20 else ''} is out of range")
    return value


def _shape_problem(value: Any) -> JsonRefused | None:
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            return JsonRefused("too_deep", f"JSON nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, dict) and len(node) > MAX_MEMBERS:
            return JsonRefused("too_wide", f"an object has more than {MAX_MEMBERS} members")
        if len(node) > MAX_ITEMS:
            return JsonRefused("too_wide", f"an array has more than {MAX_ITEMS} items")
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return None


def loads(text: str | bytes) -> Any:
    """The parsed body; raises JsonRefused."""
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except JsonRefused:
        raise
    except RecursionError:
        raise JsonRefused("too_deep", f"JSON nested deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise JsonRefused("malformed", f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except UnicodeDecodeError:
        raise JsonRefused("malformed", "the body is not UTF-8") from None
    except ValueError as exc:
        # int() beyond sys.get_int_max_str_digits(): refused before any conversion work.
        raise JsonRefused("bad_number", f"a number is too long ({str(exc).split(':')[0]})") from None
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    # Fewer brackets than MAX_DEPTH cannot nest deeper, fewer commas than MAX_MEMBERS cannot be wider:
    # most bodies skip the walk (str.count runs in C).
    if isinstance(value, (dict, list)) and (
        text.count("[") + text.count("{") > MAX_DEPTH or text.count(",") >= MAX_MEMBERS
    ):
        problem = _shape_problem(value)
        if problem is not None:
            raise problem
    return value


def is_unicode(text: str) -> bool:
    """False for a string holding a lone surrogate (it cannot be encoded as UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def lone_surrogate_at(value: Any) -> tuple[str | int, ...] | None:
    """The path of the first string or key that is not valid Unicode, or None when all are."""
    try:
        # One pass in C for the common case: everything encodes.
        json.dumps(value, ensure_ascii=False).encode("utf-8")
        return None
    except UnicodeEncodeError:
        pass
    except (TypeError, ValueError, RecursionError):
        pass  # not plain JSON data: walk it
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            if not is_unicode(node):
                return path
        elif isinstance(node, dict):
            for key, child in node.items():
                if isinstance(key, str) and not is_unicode(key):
                    return (*path, key.encode("ascii", "backslashreplace").decode("ascii"))  # printable
                stack.append((child, (*path, key)))
        elif isinstance(node, list):
            stack.extend((child, (*path, index)) for index, child in enumerate(node))
    return None


def dotted(path: tuple[str | int, ...]) -> str:
    return ".".join(map(str, path)) or "body"
