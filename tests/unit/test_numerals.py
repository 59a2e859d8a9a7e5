"""Whole numbers from others' text (issue 36, defect 4): one helper, ASCII digits only, and no string method
that admits other digits (`isdigit`, `isdecimal`, `isnumeric`) anywhere else in the package."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from flightdeck.domain import resume
from flightdeck.domain.numerals import parse_nonneg_int

PACKAGE = Path(__file__).resolve().parents[2] / "functions" / "flightdeck"
HELPER = PACKAGE / "domain" / "numerals.py"
# The string methods that admit "²", "٣" and the like; int() of what they pass fails or reads another script.
_UNICODE_DIGIT_TESTS = re.compile(r"\.is(digit|decimal|numeric)\(")

# Text a client may send where a number is meant, none of which is one this server writes.
NOT_NUMBERS = ["²", "٣", "-1", " 1", "1 ", "+1", "1e3", "1_0", "1.0", "0x1", "", "9" * 19, "9" * 5000, "1\n"]


def test_no_module_but_the_helper_asks_a_string_whether_it_is_digits():
    offenders = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != HELPER
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if _UNICODE_DIGIT_TESTS.search(line)
    ]
    assert offenders == [], "use flightdeck.domain.numerals.parse_nonneg_int"


def test_the_guard_would_see_one():
    assert _UNICODE_DIGIT_TESTS.search("if token.isdigit():") and _UNICODE_DIGIT_TESTS.search("s.isnumeric()")


@pytest.mark.parametrize("text", NOT_NUMBERS)
def test_only_ascii_digits_are_a_number(text):
    assert parse_nonneg_int(text) is None


@pytest.mark.parametrize("value", [True, False, -1, 1.0, float("inf"), float("nan"), None, [1], 10**18])
def test_a_json_value_is_a_number_only_as_a_whole_int_in_range(value):
    assert parse_nonneg_int(value) is None


def test_numbers_it_reads():
    assert parse_nonneg_int("0") == 0 and parse_nonneg_int("042") == 42 and parse_nonneg_int("9" * 18) == 10**18 - 1
    assert parse_nonneg_int(7) == 7 and parse_nonneg_int("9" * 20, 20) == 10**20 - 1


@pytest.mark.parametrize("t", ["[Infinity, 0, 0]", '["²", 0, 0]', '["٣", 0, 0]', "[-1, 0, 0]", "[1e400, 0, 0]"])
def test_a_stream_cursor_with_a_position_this_server_never_wrote_is_no_cursor(t):
    # Infinity was an OverflowError (no ValueError): a Last-Event-ID that failed the request.
    forged = resume.PREFIX + base64.urlsafe_b64encode(f'{{"a": "x", "t": {t}}}'.encode()).decode()
    assert resume.decode(forged) is None


def test_a_stream_cursor_this_server_wrote_reads_back():
    for cursor in (resume.Cursor(a="x", t=(3, 1, 120), e=40), resume.Cursor(a="*", s="completed", e=-1, f=True)):
        assert resume.decode(cursor.encode()) == cursor  # e=-1: the answer sent whole (a2a.stream.ANSWERED)
