"""The A2A side of skills with contracts (flightdeck.domain.a2a.contracts): a task's answer as parts, and a
peer's parts as our result text."""

from __future__ import annotations

import json

import pytest

from flightdeck.domain.a2a.contracts import answer_parts, answer_text, call_of
from flightdeck.domain.a2a.wire import A2AError, Artifact

SCHEMA = {"output_schema": {"type": "object", "required": ["n"]}}


def test_an_answer_without_a_schema_is_its_text_as_before():
    assert answer_parts('{"n": 1}', None) == [{"kind": "text", "text": '{"n": 1}'}]
    assert answer_parts("x", {"skill": "s"}) == [{"kind": "text", "text": "x"}]  # a call with no output schema


def test_a_matching_answer_is_a_data_part_beside_its_text():
    assert answer_parts('{"n": 1}', SCHEMA) == [
        {"kind": "data", "data": {"n": 1}},
        {"kind": "text", "text": '{"n": 1}'},
    ]


def test_a_matching_answer_that_is_no_object_is_its_text_alone():
    # A2A's data part holds an object: a list that matches stays text (its JSON).
    assert answer_parts("[1, 2]", {"output_schema": {"type": "array"}}) == [{"kind": "text", "text": "[1, 2]"}]


def test_a_mismatch_is_the_text_and_a_marked_data_part():
    [raw, marked] = answer_parts('{"m": 1}', SCHEMA)
    assert raw == {"kind": "text", "text": '{"m": 1}'}
    assert marked["data"]["schema_mismatch"] is True and marked["data"]["raw"] == '{"m": 1}'
    assert any("required" in e for e in marked["data"]["errors"])


def test_a_peer_s_data_is_our_result_as_json_plain_or_as_wire_models():
    parts = [{"kind": "text", "text": "three"}, {"kind": "data", "data": {"n": 3}}]
    assert json.loads(answer_text(parts)) == {"n": 3}
    assert json.loads(answer_text(Artifact.model_validate({"artifactId": "a", "parts": parts}).parts)) == {"n": 3}


def test_an_empty_data_part_or_none_leaves_the_text_the_answer():
    assert answer_text([{"kind": "text", "text": "t"}, {"kind": "data", "data": {}}]) is None
    assert answer_text([{"kind": "text", "text": "t"}]) is None


def test_a_peer_s_marked_mismatch_gives_its_raw_text_to_be_held_to_our_schema():
    marked = {"schema_mismatch": True, "errors": ["x"], "raw": "about three", "schema_version": "1"}
    assert answer_text([{"kind": "text", "text": "about three"}, {"kind": "data", "data": marked}]) == "about three"


@pytest.mark.parametrize(
    "parts, call",
    [
        ([{"kind": "data", "data": {"skill": "s", "arguments": {"a": 1}}}], ("s", {"a": 1})),
        ([{"kind": "data", "data": {"skill": "s"}}], ("s", {})),
        ([{"kind": "text", "text": "hello"}, {"kind": "text", "text": 'skill:s {"a": 2}'}], ("s", {"a": 2})),
        ([{"kind": "data", "data": {"skill": "s", "other": 1}}], None),  # data, not a call
        ([{"kind": "data", "data": {"skill": 7}}], None),
    ],
)
def test_the_call_a_message_makes(parts, call):
    from flightdeck.domain.a2a.wire import Message

    found = call_of(Message.model_validate({"role": "user", "messageId": "m", "parts": parts}).parts)
    assert (found.call.skill, found.call.arguments) == call if call else found is None


def test_a_skill_id_of_no_allowed_length_is_invalid_params_not_a_crash():
    from flightdeck.domain.a2a.wire import Message

    message = Message.model_validate(
        {"role": "user", "messageId": "m", "parts": [{"kind": "data", "data": {"skill": ""}}]}
    )
    with pytest.raises(A2AError) as refused:
        call_of(message.parts)
    assert refused.value.code == -32602 and "message.parts.0: skill" in refused.value.message
