"""`cells.cycles.unreachable`: garbage told as the collector tells it, without collecting
(weakrefs prove that a collection then frees exactly what it called unreachable)."""

from __future__ import annotations

import gc
import weakref

import pytest

from colab_gpu_guard.cells.cycles import unreachable


class Node:
    pass


@pytest.fixture(autouse=True)
def no_collection():
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def pair() -> weakref.ref:
    first, second = Node(), Node()
    first.other, second.other = second, first
    return weakref.ref(first)


def test_a_cycle_nothing_reaches_is_unreachable_and_a_collection_frees_it():
    ref = pair()
    assert unreachable(ref) and ref() is not None  # told, not collected
    assert unreachable(ref)  # asking again leaves nothing behind that would reach it
    gc.collect()
    assert ref() is None


def test_a_cycle_a_variable_a_list_or_a_frame_reaches_is_not():
    ref = pair()
    held = [ref()]
    assert not unreachable(ref)
    held.clear()
    local = ref()
    assert not unreachable(ref)  # this frame's local
    del local
    assert unreachable(ref)
    plain = Node()
    assert not unreachable(weakref.ref(plain))  # no cycle: this frame holds it
    gc.collect()
    assert ref() is None
