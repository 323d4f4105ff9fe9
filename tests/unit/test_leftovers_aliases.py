"""An alias (a second root meeting a container another root walked first) is recorded only
for a container that reaches an array or a holder not looked into: those reaching none
change no name or figure, and every alias costs the listing a pass over its rows."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from colab_gpu_guard.leftovers import find_leftovers, scan  # noqa: E402


def test_only_containers_reaching_an_array_make_aliases():
    empty, plain, held = [], {"a": 1, "b": [2, 3]}, [torch.ones(3)]
    namespace = {"e1": empty, "e2": empty, "p1": plain, "p2": plain, "h1": held, "h2": held}
    walker = scan(namespace=namespace).walker
    assert [(root[1], first[1]) for root, _path, first, *_rest in walker.aliases] == [("h2", "h1")]
    assert {id(empty), id(plain)} <= walker.empty and id(held) not in walker.empty
    found = find_leftovers(namespace=namespace)
    assert [item.name for item in found] == ["h1[0]"]
    shares = {group.name: group.shares for group in found.groups()}
    assert set(shares) == {"h1", "h2"} and [share.owner for share in shares["h2"]] == ["h1"]
