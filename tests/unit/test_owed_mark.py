"""The owed-think mark kept out of the deadline index (THINK_START = "stream"): the request rewrite."""

from __future__ import annotations

import copy

from flightdeck.adapters.dynamo.owed_mark import unindex_put, unindex_update


def test_a_write_that_marks_a_think_owed_removes_the_index_keys_instead_of_setting_them():
    update = {
        "UpdateExpression": "SET turn = :next, updated_at = :now, #owed = :owed, #shard = :shard, #due = :due, "
        "#ttl = :exp",
        "ConditionExpression": "turn = :turn",
        "ExpressionAttributeNames": {"#owed": "owed_think", "#shard": "due_shard", "#due": "due_at", "#ttl": "x"},
        "ExpressionAttributeValues": {":next": 1, ":now": 2, ":owed": 3, ":shard": 4, ":due": 5, ":exp": 6, ":turn": 7},
    }
    unindex_update(update)
    assert update["UpdateExpression"] == (
        "SET turn = :next, updated_at = :now, #owed = :owed, #ttl = :exp REMOVE #shard, #due"
    )
    assert ":shard" not in update["ExpressionAttributeValues"] and ":due" not in update["ExpressionAttributeValues"]


def test_a_remove_clause_is_extended_and_a_shared_value_is_kept():
    update = {
        "UpdateExpression": "SET #owed = turn, #shard = :s, other = if_not_exists(other, :s) REMOVE gone",
        "ExpressionAttributeNames": {"#owed": "owed_think", "#shard": "due_shard"},
        "ExpressionAttributeValues": {":s": 1},
    }
    unindex_update(update)
    assert update["UpdateExpression"] == "SET #owed = turn, other = if_not_exists(other, :s) REMOVE gone, #shard"
    assert update["ExpressionAttributeValues"] == {":s": 1}


def test_writes_that_do_not_mark_a_think_owed_are_left_alone():
    for expression in (
        "SET #due = :due, #shard = :shard",  # a recovery path putting the mark into the index
        "SET a = :a REMOVE #owed, #shard, #due",  # the think clearing its mark
        "SET #owed = :owed, other = :a",  # a mark already out of the index
    ):
        update = {
            "UpdateExpression": expression,
            "ExpressionAttributeNames": {"#owed": "owed_think", "#shard": "due_shard", "#due": "due_at"},
            "ExpressionAttributeValues": {":due": 1, ":shard": 2, ":owed": 3, ":a": 4},
        }
        before = copy.deepcopy(update)
        unindex_update(update)
        assert update == before


def test_a_new_session_put_with_a_mark_has_no_shard():
    put = {"Item": {"pk": {"S": "S#a"}, "owed_think": {"N": "1"}, "due_shard": {"S": "open#1"}, "due_at": {"N": "9"}}}
    unindex_put(put)
    assert put["Item"] == {"pk": {"S": "S#a"}, "owed_think": {"N": "1"}}
    turn = {"Item": {"pk": {"S": "S#a"}, "due_shard": {"S": "open#1"}}}  # no mark: an index entry of its own
    unindex_put(turn)
    assert "due_shard" in turn["Item"]
