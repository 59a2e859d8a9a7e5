"""strict_json: the bounds the standard parser lacks, and where text is not valid Unicode."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flightdeck.api import strict_json
from flightdeck.api.strict_json import MAX_DEPTH, MAX_ITEMS, MAX_MEMBERS, JsonRefused, lone_surrogate_at


@pytest.mark.parametrize(
    "text,reason",
    [
        ("{", "malformed"),
        ("", "malformed"),
        ('{"a": 1} x', "malformed"),
        ("[" * 50_000 + "]" * 50_000, "too_deep"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "too_deep"),
        ('{"a":' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1), "too_deep"),
        (json.dumps({str(i): i for i in range(MAX_MEMBERS + 1)}), "too_wide"),
        (json.dumps([[0] * (MAX_ITEMS + 1)]), "too_wide"),
        ("9" * 5_000, "bad_number"),
        ("[1e999]", "bad_number"),
        ("[NaN]", "bad_number"),
        ('{"a": -Infinity}', "bad_number"),
        (b'{"a": "\xff"}', "malformed"),
    ],
)
def test_refused_with_a_reason(text, reason):
    with pytest.raises(JsonRefused) as caught:
        strict_json.loads(text)
    assert caught.value.reason == reason and caught.value.message


@pytest.mark.parametrize(
    "text",
    [
        "[" * MAX_DEPTH + "]" * MAX_DEPTH,
        json.dumps({str(i): i for i in range(MAX_MEMBERS)}),
        json.dumps([0] * MAX_ITEMS),
        json.dumps({"text": "a, b, " * 5_000}),  # many commas in a string: walked, and fine
        "9" * 4_000,
        "[1e300, -0.0, 1.5]",
    ],
)
def test_within_bounds_is_parsed_as_the_standard_parser_would(text):
    assert strict_json.loads(text) == json.loads(text)


def test_lone_surrogates_are_found_with_their_path_pairs_are_fine():
    assert lone_surrogate_at(json.loads('{"a": ["x", "\\ud83d\\ude00"]}')) is None
    assert lone_surrogate_at(json.loads('{"a": ["x", {"b": "y \\ud800"}]}')) == ("a", 1, "b")
    assert lone_surrogate_at(json.loads('{"a": {"\\udfff": 1}}')) == ("a", "\\udfff")
    assert lone_surrogate_at("\ud83d") == ()
    assert strict_json.dotted(("a", 1, "b")) == "a.1.b" and strict_json.dotted(()) == "body"


TEXT = st.text(st.characters(categories=["L", "Nd", "P", "Cs"]), max_size=6)  # Cs: surrogates, lone ones too


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | TEXT,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
        max_leaves=30,
    )
)
def test_any_json_value_round_trips_and_every_lone_surrogate_is_found(value):
    assert strict_json.loads(json.dumps(value)) == value
    has_surrogate = any(0xD800 <= ord(c) <= 0xDFFF for c in json.dumps(value, ensure_ascii=False))
    assert (lone_surrogate_at(value) is not None) == has_surrogate
