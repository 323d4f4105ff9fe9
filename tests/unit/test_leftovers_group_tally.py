"""Grouping a big list per run of one root (leftovers/tally.py) gives the groups a plain,
entry-by-entry grouping gives, whatever the runs: one root, roots interleaved by size,
lists of pairs, shared blocks, autograd graphs, ``_``/``__``/``_N`` beside ``Out[N]``,
roots that own no block; worked per run where runs are few, per block where they are many.
"""

from __future__ import annotations

import random
from operator import is_not

import pytest

torch = pytest.importorskip("torch")

from colab_gpu_guard.leftovers import find_leftovers  # noqa: E402
from colab_gpu_guard.leftovers.groups import ENTRIES_SHOWN, Blocks, group_leftovers  # noqa: E402
from colab_gpu_guard.leftovers.root_refs import RootRef  # noqa: E402
from colab_gpu_guard.leftovers.tally import (  # noqa: E402
    BLOCKS_PER_RUN,
    RootTally,
    root_labels,
    run_starts,
    tally_roots,
)
from colab_gpu_guard.reset import apply as reset  # noqa: E402
from colab_gpu_guard.units import OUTPUT_HISTORY, USER_VARIABLE  # noqa: E402


def reference_groups(entries, per_group):
    """The groups of `entries` (one per block, biggest first), worked entry by entry from
    each entry's own group record: (name, holder, hidden, count, nbytes, devices, shares,
    graph bytes, entry names)."""
    groups: dict[str, dict] = {}
    kinds: dict[str, str] = {}
    place: dict[int, int] = {}  # id(entry) -> its place in its group
    for entry in entries:
        root = entry.root.name
        kinds.setdefault(root, entry.root.kind)
        group = groups.setdefault(
            root, {"holder": entry.holder, "entries": [], "devices": [], "graph": 0}
        )
        place[id(entry)] = len(group["entries"])
        group["entries"].append(entry)
        if entry.device not in group["devices"]:
            group["devices"].append(entry.device)
        group["graph"] += entry.graph_nbytes
    shares: dict[str, dict[str, int]] = {}
    unnamed: set[str] = set()  # sharers some listed row does not name ("also: b")
    shown = ENTRIES_SHOWN if per_group is None else min(per_group, ENTRIES_SHOWN)
    for entry in entries:
        owner = entry.root.name
        on_row = place[id(entry)] < shown
        beside_out = any(ref.source == "out" for ref in entry.shared_roots)
        for ref in entry.shared_roots:
            other = ref.name
            if other == owner:
                continue
            if (
                other not in groups
                and ref.kind == OUTPUT_HISTORY
                and (entry.holder == OUTPUT_HISTORY or (beside_out and ref.source != "out"))
            ):
                continue  # `_`, `__`, `_N` beside Out[N]: the entry's row names them
            shares.setdefault(other, {}).setdefault(owner, 0)
            shares[other][owner] += 1
            if not on_row or not any(
                name == other or name.startswith((f"{other}[", f"{other}."))
                for name in entry.shared_with
            ):
                unnamed.add(other)
            if other not in groups:
                kinds.setdefault(other, ref.kind)
                groups[other] = {
                    "holder": ref.holder,
                    "entries": [],
                    "devices": [],
                    "graph": 0,
                }
    rows = []
    for name, group in groups.items():
        if not group["entries"] and name not in unnamed:
            continue  # every row it shares names it
        hidden = kinds[name] != "user variable" or group["graph"] > 0
        listed = group["entries"] if per_group is None else group["entries"][:per_group]
        rows.append(
            (
                name,
                group["holder"],
                hidden,
                len(group["entries"]),
                sum(entry.nbytes for entry in group["entries"]),
                tuple(group["devices"]),
                tuple(shares.get(name, {}).items()),
                group["graph"],
                tuple(entry.name for entry in listed),
            )
        )
    # memory holders first (hidden ones first), each biggest first; names that only share
    # (no block of their own) last
    rows.sort(key=lambda row: (not row[3] and bool(row[6]), not row[2], -row[4]))
    return rows


def groups_key(groups):
    return [
        (
            g.name,
            g.holder,
            g.hidden,
            g.count,
            g.nbytes,
            g.devices,
            tuple((share.owner, share.count) for share in g.shares),
            g.graph_nbytes,
            tuple(entry.name for entry in g.entries),
        )
        for g in groups
    ]


def assert_groups_like_reference(found):
    entries = list(found)
    for per_group in (None, 0, 1, 3):
        expected = reference_groups(entries, per_group)
        assert groups_key(found.groups(per_group)) == expected
        assert groups_key(group_leftovers(entries, per_group)) == expected


def test_one_big_list_is_one_run_and_groups_like_the_reference():
    namespace = {"many": [torch.zeros(2) for _ in range(5000)], "t": torch.ones(3)}
    found = find_leftovers(namespace=namespace)
    roots = found.columns().roots
    assert run_starts(roots) == [0, 1]  # t, then one run of 5,000
    assert_groups_like_reference(found)
    (many,) = [group for group in found.groups() if group.name == "many"]
    assert (many.count, many.nbytes, len(many.entries)) == (5000, 40_000, 3)


def test_roots_interleaved_by_size_group_like_the_reference():
    """Odd and even sizes interleave when sorted biggest first: every block its own run
    (worked per block); sizes drawn from three make a few long runs (worked per run)."""
    rng = random.Random(0)
    interleaved = {
        "odd": [torch.zeros(n) for n in range(1, 400, 2)],
        "even": [torch.zeros(n) for n in range(2, 401, 2)],
    }
    runs = {name: [torch.zeros(rng.choice([1, 2, 3])) for _ in range(500)] for name in ("a", "b")}
    pairs = {"pairs": [(torch.zeros(4), torch.ones(4)) for _ in range(300)]}
    for namespace, per_run in ((interleaved, False), (runs, True), (pairs, True)):
        found = find_leftovers(namespace=namespace)
        assert (run_starts(found.columns().roots) is not None) == per_run
        assert_groups_like_reference(found)


def test_a_notebook_with_shared_blocks_graphs_and_output_history(ip, run_cell):
    """Blocks several names reach, autograd graphs, Out[N] with `_`, `__`, `_N` beside it,
    a traceback, and roots that own no block, beside a big list: the reference's groups."""
    from IPython.utils.capture import capture_output

    reset.gpu_reset(shell=ip)
    names = ("big", "a", "b", "shared", "w", "losses", "kept", "fail")
    try:
        with capture_output():
            run_cell(
                "import random, torch\nrandom.seed(1)\n"
                "big = [torch.zeros(2) for _ in range(3000)]\n"
                "a = [torch.zeros(random.choice([1, 2, 3])) for _ in range(300)]\n"
                "b = [torch.zeros(random.choice([1, 2, 3])) for _ in range(300)]\n"
                "shared = {'x': big[:5], 'y': a[0], 'v': big[7][:1]}\n"
                "w = torch.ones(3, requires_grad=True)\n"
                "losses = [(w * k).sum() for k in range(20)]"
            )
            run_cell("torch.full((50,), 1.0)")
            number = ip.execution_count - 1
            run_cell("torch.full((60,), 1.0)")
            run_cell(f"kept = [Out[{number}]]")
            run_cell(
                "def fail():\n    local = [torch.zeros(5) for _ in range(40)]\n"
                "    raise ValueError(local[0])\nfail()"
            )
        found = find_leftovers()
        groups = found.groups()
        # kept ranks first: Out[N], __ and _N, the same output, are named in kept's entry
        # row ("also: Out[N], __, _N"), not as groups of their own
        assert groups.named(f"Out[{number}]") is None
        assert groups.named("__") is None and groups.named(f"_{number}") is None
        assert {f"Out[{number}]", "__", f"_{number}"} <= set(
            next(iter(groups.named("kept").entries)).shared_with
        )
        assert groups.named(f"Out[{number + 1}]").count == 1
        assert groups.named("_") is None  # beside Out[N + 1]: its row names it
        # owns no block: the row of the one it shares names it ("also: <exception ...>.args[0]")
        assert groups.named("<exception ValueError>") is None
        assert any("<exception ValueError>.args[0]" in entry.shared_with for entry in found)
        assert groups.named("losses").graph_nbytes > 0
        assert_groups_like_reference(found)
    finally:
        reset.gpu_reset(*names, shell=ip)


def test_root_labels_are_each_paths_root():
    """Per run of one parent node where the parents come in runs, per path where they do
    not: each path's group is that of its top node (its label and holder)."""
    rng = random.Random(2)
    tops = {label: (None, 0, label) for label in ("many", "Out[3]", "<b>", "a.b", "x")}
    holders = {"Out[3]": OUTPUT_HISTORY}
    lists = [(tops[label], 3, index) for label in tops for index in range(4)]
    nested = [(parent, 3, index) for parent in lists for index in range(3)]

    def paths_in(shape: str) -> list[tuple]:
        if shape == "runs":
            return [(p, 3, i) for p in rng.sample(lists + nested, 12) for i in range(50)]
        if shape == "interleaved":
            return [(rng.choice(lists + nested), 3, i) for i in range(600)]
        return [(rng.choice(lists), 3, i) for i in range(200)] + [
            (None, 0, rng.choice(list(tops))) for _ in range(100)
        ]

    def top(path: tuple) -> str:
        while path[0] is not None:
            path = path[0]
        return path[2]

    for shape, per_run in (("runs", True), ("interleaved", False), ("roots", False)):
        paths = paths_in(shape)
        held = [holders.get(top(path), USER_VARIABLE) for path in paths]
        parents = [path[0] for path in paths]
        assert (run_starts(parents, is_not) is not None) == per_run
        groups = {
            (label, holder): RootRef(f"group of {label}", holder, "test")
            for label in tops
            for holder in (USER_VARIABLE, OUTPUT_HISTORY)
        }
        expected = [f"group of {top(path)}" for path in paths]
        assert root_labels(iter(paths), held, groups) == expected


def test_root_labels_lift_a_list_of_pairs_to_its_list(monkeypatch):
    """`pairs[i][0]`: every pair is its own parent node, but the pairs' parent is one list:
    the column is lifted a level and worked per run, with each path's root unchanged."""
    from colab_gpu_guard.leftovers import tally

    tops = {label: (None, 0, label) for label in ("pairs", "batches", "x")}
    pairs = [(tops["pairs"], 3, index) for index in range(300)]
    batches = [((tops["batches"], 3, index), 4, "'x'") for index in range(200)]
    paths = [(pair, 3, item) for pair in pairs for item in range(2)]
    paths += [(batch, 3, 0) for batch in batches]  # batches[i]['x'][0]: two levels up
    paths += [(None, 0, "x")]
    held = [USER_VARIABLE] * len(paths)
    assert run_starts([path[0] for path in paths], is_not) is None  # no runs of parents

    def per_path(*args):
        raise AssertionError("worked per path")

    monkeypatch.setattr(tally, "_labels_per_path", per_path)
    groups = {(label, USER_VARIABLE): RootRef(label, USER_VARIABLE, "variable") for label in tops}
    assert root_labels(paths, held, groups) == ["pairs"] * 600 + ["batches"] * 200 + ["x"]


def reference_tally(roots, sizes, holders, devices, wanted):
    tally: dict[str, RootTally] = {}
    for position, root in enumerate(roots):
        row = tally.setdefault(root, RootTally(holders[position]))
        row.count += 1
        row.nbytes += sizes[position]
        row.devices[devices[position]] = None
        if wanted is None or len(row.positions) < wanted:
            row.positions.append(position)
    return tally


@pytest.mark.parametrize("run", [1, 2, BLOCKS_PER_RUN, 40, 5000])
def test_tally_roots_per_run_and_per_block(run):
    """Runs of `run` blocks of one root (shorter than BLOCKS_PER_RUN: worked per block),
    roots met again later, two devices, holders differing within a root."""
    rng = random.Random(run)
    roots, devices = [], []
    while len(roots) < 5000:
        root = rng.choice(["many", "Out[3]", "_", "<exception E>", "x"])
        roots += [root] * run
        devices += [rng.choice(["cpu", "cuda:0"]) if rng.random() < 0.3 else "cpu"] * run
    roots, devices = roots[:5000], devices[:5000]
    sizes = [rng.choice([0, 8, 4096]) for _ in roots]
    holders = [rng.choice([USER_VARIABLE, OUTPUT_HISTORY]) for _ in roots]
    assert (run_starts(roots) is not None) == (run >= BLOCKS_PER_RUN)
    for wanted in (None, 0, 1, 3, 10**6):
        expected = reference_tally(roots, sizes, holders, devices, wanted)
        got = tally_roots(Blocks(sizes, holders, devices, roots), wanted)
        assert list(got.items()) == list(expected.items())
        assert [list(row.devices) for row in got.values()] == [
            list(row.devices) for row in expected.values()
        ]


def test_run_starts():
    assert run_starts([]) == []
    assert run_starts(["a"] * 100) == [0]
    assert run_starts(["a"] * 50 + ["b"] * 50) == [0, 50]
    assert run_starts(["a", "b"] * 50) is None  # 100 runs in 100 blocks
    assert run_starts(["a"] * 8 + ["b"] * 8) == [0, 8]
    one, other = tuple([None, 0, "x"]), tuple([None, 0, "x"])  # equal, not the same node
    assert one == other and one is not other
    assert run_starts([one] * 20 + [other] * 20, is_not) == [0, 20]
    assert run_starts([one] * 40, is_not) == [0]


def test_entries_per_group_must_be_a_whole_number_or_none():
    found = find_leftovers(namespace={"t": torch.ones(3)})
    for bad in (-1, 2.5, "3"):
        with pytest.raises(ValueError, match="entries_per_group must be a whole number"):
            found.groups(bad)
    assert [group.count for group in found.groups(0)] == [1]
