"""What a leftovers scan found, as name -> bytes (a shared block under each name that
shares it), and the check that names hold so many float32 elements."""

from __future__ import annotations


def names_and_sizes(items) -> dict[str, int]:
    found = {}
    for item in items:
        found[item.name] = item.nbytes
        for other in item.shared_with:
            found.setdefault(other, item.nbytes)
    return found


def assert_float32_sizes(found: dict[str, int], expected: dict[str, int]) -> None:
    """Each expected name is found, holding that many float32 elements."""
    for name, elements in expected.items():
        assert found.get(name) == elements * 4, (name, sorted(found))
