"""`cells.cycles.unreachable`: garbage told as the collector tells it, without collecting
(weakrefs prove that a collection then frees exactly what it called unreachable)."""

from __future__ import annotations

import gc
import weakref

import pytest

from colab_gpu_guard.cells.cycles import dying_with, unreachable


class Node:
    pass


@pytest.fixture(autouse=True)
def no_collection(monkeypatch):
    from colab_gpu_guard.cells import cycles

    # its time budget is for a notebook: a loaded machine must not make it give up here
    monkeypatch.setattr(cycles, "BUDGET_S", 60.0)
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


def test_what_dies_with_an_unreachable_object_is_what_a_collection_frees():
    """A cycle holding two buffers, one of which a list outside also holds: the reading
    names only the one a collection frees with it (weakrefs prove it), and nothing for an
    object something reaches."""
    array = pytest.importorskip("array")
    first, second = Node(), Node()
    first.other, second.other = second, first
    first.own = Node()  # objects the cycle alone holds, one level down
    first.own.buffer = array.array("d", range(1000))
    second.shared = Node()
    kept = [second.shared]
    ref = weakref.ref(first)
    dies = weakref.ref(first.own)
    stays = weakref.ref(second.shared)
    del first, second
    found = dying_with(ref, lambda item: type(item) is Node)
    assert found is not None
    names = {id(item) for item in found}
    assert id(dies()) in names and id(stays()) not in names
    assert len(found) == 3  # the two of the cycle, and the one it alone holds
    del found, names
    assert dying_with(weakref.ref(kept[0]), lambda item: True) is None
    gc.collect()
    assert ref() is None and dies() is None and stays() is kept[0]
