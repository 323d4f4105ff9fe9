"""The "to free it" line of %gpu_reset: the command it prints, run as printed in the real
IPython shell, frees what the line says it frees (weakrefs to the storages prove it, and
the reset's own released bytes match the figure); names sharing memory are never split
across the cut; the variables left out are counted, with the bytes they hold."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

from colab_gpu_guard.leftovers.records import Leftover  # noqa: E402
from colab_gpu_guard.leftovers.root_refs import RootRef  # noqa: E402
from colab_gpu_guard.reset import apply as reset  # noqa: E402
from colab_gpu_guard.reset.free_hint import NAMES_WIDTH, free_sets  # noqa: E402
from colab_gpu_guard.units import format_bytes, jargon_in  # noqa: E402

HINT = re.compile(
    r"to free (?:(?P<amount>.+?) of )?(?:it|that too): %gpu_reset (?P<names>[\w ]+) \("
)


def printed(ip, capsys, line: str) -> str:
    capsys.readouterr()
    ip.run_line_magic("gpu_reset", line)
    return capsys.readouterr().out


def hint_of(text: str) -> re.Match:
    lines = [line for line in text.splitlines() if line.strip().startswith("to free")]
    assert len(lines) == 1, text
    found = HINT.search(lines[0])
    assert found is not None, lines[0]
    return found


def run_ok(run_cell, source: str) -> None:
    result = run_cell(source)
    assert result.error_in_exec is None, result.error_in_exec


def test_the_command_names_every_holder_of_an_array_and_frees_it(shell, run_cell, capsys):
    """The walkthrough's case: `big` held by a dict, a list (twice), a view, a closure and
    an iterator, beside four other tensors; a fixed cut at 5 names left `l` out, and `l`
    kept big's 3.81 MiB alive."""
    run_ok(
        run_cell, "big = torch.zeros(1000, 1000); refs['big'] = weakref.ref(big.untyped_storage())"
    )
    run_ok(run_cell, "d = {'k': big}; l = [big, big]; saved = big.view(-1)")
    run_ok(run_cell, "def mk(t):\n    return lambda: t\nfn = mk(big); it = iter([big])")
    for index, size in enumerate((300, 200, 100, 50)):
        run_ok(
            run_cell,
            f"other{index} = torch.zeros({size}, {size}); "
            f"refs['other{index}'] = weakref.ref(other{index}.untyped_storage())",
        )
    dry = printed(shell, capsys, "--dry-run")
    assert jargon_in(dry) == [], dry
    hint = hint_of(dry)
    names = hint["names"].split()
    for holder in ("big", "d", "l", "saved", "fn", "it"):
        assert holder in names, dry
    assert "more variable" not in dry and "listed above" not in dry, dry
    refs = shell.user_ns["refs"]
    done = printed(shell, capsys, hint["names"])  # the command, as printed
    assert all(ref() is None for ref in refs.values()), done
    assert not [name for name in names if name in shell.user_ns]
    assert "to free" not in done, done


def test_names_left_out_are_counted_and_the_command_frees_what_it_says(
    shell, run_cell, capsys, monkeypatch
):
    """More variables than a line holds: the command frees the figure it prints (its
    weakrefs, and the reset's released bytes), the rest are counted with their bytes, and
    -v names them all."""
    names = [f"tensor_number_{index:02d}" for index in range(12)]
    for index, name in enumerate(names):
        run_ok(
            run_cell,
            f"{name} = torch.zeros({1000 * (12 - index)}); "
            f"refs['{name}'] = weakref.ref({name}.untyped_storage())",
        )
    made: list = []
    real = reset.gpu_reset
    monkeypatch.setattr(reset, "gpu_reset", lambda *a, **k: made.append(real(*a, **k)) or made[-1])
    dry = printed(shell, capsys, "--dry-run")
    hint = hint_of(dry)
    shown = hint["names"].split()
    assert 1 <= len(shown) < len(names) and len(hint["names"]) <= NAMES_WIDTH, dry
    left = [name for name in names if name not in shown]
    rest = sum(4000 * (12 - names.index(name)) for name in left)
    assert f"; {len(left)} more variables hold {format_bytes(rest)} (" in dry, dry
    assert "listed above" not in dry and jargon_in(dry) == [], dry
    verbose = printed(shell, capsys, "--dry-run -v")
    assert sorted(hint_of(verbose)["names"].split()) == sorted(names), verbose
    refs = shell.user_ns["refs"]
    printed(shell, capsys, hint["names"])
    report = made[-1]
    freed = [name for name in names if refs[name]() is None]
    assert freed == shown
    assert hint["amount"] == format_bytes(report.released_bytes), (dry, report.released_bytes)
    assert report.released_bytes == sum(4000 * (12 - names.index(name)) for name in shown)


def test_names_sharing_memory_are_never_split_even_past_the_width(shell, run_cell, capsys):
    """A set of names sharing one array, longer than the line's width, is named whole:
    half of it would free nothing."""
    aliases = [f"alias_of_the_big_tensor_{index}" for index in range(4)]
    run_ok(
        run_cell,
        "shared_big = torch.zeros(100_000); refs['s'] = weakref.ref(shared_big.untyped_storage())",
    )
    run_ok(run_cell, "; ".join(f"{name} = [shared_big]" for name in aliases))
    run_ok(run_cell, "small_one = torch.zeros(10)")
    dry = printed(shell, capsys, "--dry-run")
    hint = hint_of(dry)
    assert set(hint["names"].split()) == {"shared_big", *aliases}, dry
    assert "; 1 more variable holds 40 B (" in dry, dry
    printed(shell, capsys, hint["names"])
    assert shell.user_ns["refs"]["s"]() is None


def test_memory_something_else_keeps_is_not_promised():
    """A block a module's global also holds: deleting the variables does not free it, so
    it neither counts nor joins the names that share it."""
    variable = RootRef("model", "user variable", "variable")
    other = RootRef("w", "user variable", "variable")
    cache = RootRef("nbutils._cache", "module global", "module global")

    def entry(storage: int, nbytes: int, root: RootRef, *shared: RootRef) -> Leftover:
        return Leftover(
            root.name,
            "user variable",
            (1,),
            "float32",
            "cpu",
            nbytes,
            storage,
            root=root,
            shared_roots=shared,
        )

    items = [entry(1, 800, variable, cache, other), entry(2, 100, variable), entry(3, 50, other)]
    sets = free_sets(items, None)
    assert [(group.names, group.nbytes) for group in sets] == [(("model",), 100), (("w",), 50)]
