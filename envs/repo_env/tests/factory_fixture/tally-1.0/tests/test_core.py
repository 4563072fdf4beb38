import pytest

from tally import clamp, mean, running_total, window


def test_clamp_inside():
    assert clamp(5) == 5


def test_clamp_below():
    assert clamp(-3) == 0


def test_clamp_above():
    assert clamp(12, 0, 10) == 10


def test_clamp_edges():
    assert clamp(0) == 0
    assert clamp(10) == 10


def test_clamp_bad_range():
    with pytest.raises(ValueError):
        clamp(1, 5, 2)


def test_mean():
    assert mean([1, 2, 3, 6]) == 3


def test_mean_one():
    assert mean([4]) == 4


def test_mean_empty():
    with pytest.raises(ValueError):
        mean([])


def test_running_total():
    assert running_total([1, 2, 3]) == [1, 3, 6]


def test_running_total_start():
    assert running_total([1, 1], start=10) == [11, 12]


def test_window_pairs():
    assert window([1, 2, 3]) == [(1, 2), (2, 3)]


def test_window_triples():
    assert window("abcd", 3) == [("a", "b", "c"), ("b", "c", "d")]


def test_window_too_short():
    assert window([1], 2) == []


def test_window_bad_size():
    with pytest.raises(ValueError):
        window([1, 2], 0)
