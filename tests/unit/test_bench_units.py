"""DynamoDB item sizes and request units as the benchmark computes them, and the stats helpers."""

from __future__ import annotations

import math

import pytest

from flightdeck.bench.dynamo_units import item_size, read_units, value_size, write_units
from flightdeck.bench.stats import percentile, ratio, summary


def test_strings_and_names_count_their_utf8_bytes():
    assert item_size({"pk": {"S": "S#abc"}}) == 2 + 5
    assert item_size({"é": {"S": "ü"}}) == 2 + 2


def test_numbers_take_about_a_byte_per_two_significant_digits_plus_one():
    assert value_size({"N": "1"}) == 2
    assert value_size({"N": "12"}) == 2
    assert value_size({"N": "123"}) == 3
    assert value_size({"N": "1795981767145"}) == 8
    assert value_size({"N": "1000000"}) == 2  # trailing zeros are not significant
    assert value_size({"N": "-0.5"}) == 2


def test_sets_lists_maps_and_scalars():
    assert value_size({"SS": ["ab", "c"]}) == 3
    assert value_size({"BOOL": True}) == 1 and value_size({"NULL": True}) == 1
    assert value_size({"L": [{"S": "ab"}]}) == 3 + 1 + 2
    assert value_size({"M": {"k": {"S": "ab"}}}) == 3 + 1 + 1 + 2
    assert value_size({"B": b"\x00\x01"}) == 2
    with pytest.raises(ValueError):
        value_size({"X": "?"})


def test_no_item_has_no_size():
    assert item_size(None) == 0 and item_size({}) == 0


def test_write_units_are_per_started_kb_and_double_in_a_transaction():
    assert write_units(0) == 1
    assert write_units(1024) == 1
    assert write_units(1025) == 2
    assert write_units(300, transactional=True) == 2
    assert write_units(3 * 1024, transactional=True) == 6


def test_read_units_are_per_started_4kb_halved_when_eventually_consistent():
    assert read_units(0, consistent=True) == 1.0
    assert read_units(4096, consistent=True) == 1.0
    assert read_units(4097, consistent=True) == 2.0
    assert read_units(100, consistent=False) == 0.5
    assert read_units(8192, consistent=False) == 1.0
    assert read_units(100, consistent=True, transactional=True) == 2.0


def test_percentiles_interpolate_between_ranks():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 95) == 5.0
    assert percentile([0, 10], 95) == pytest.approx(9.5)
    assert math.isnan(percentile([], 50))
    assert summary([3, 1, 2]) == {"n": 3, "p50": 2.0, "p95": pytest.approx(2.9), "max": 3, "min": 1}
    assert ratio(1, 0) == math.inf and ratio(6, 3) == 2
