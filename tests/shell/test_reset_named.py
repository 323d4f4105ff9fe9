"""`%gpu_reset NAME` that frees less than NAME holds says why: the other names still holding
that memory (a view, an alias, a list), with the bytes that stay; weakrefs to the storage
prove the bytes stay, and that deleting the holders named frees them."""

from __future__ import annotations

import gc
import weakref

import pytest
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")

from colab_gpu_guard.reset import apply as reset  # noqa: E402
from colab_gpu_guard.units import format_bytes  # noqa: E402

MIB = 2**20


def notebook() -> tuple[dict, weakref.ref]:
    big = torch.zeros(1024, 1024)  # 4 MiB
    storage = weakref.ref(big.untyped_storage())
    return {"big": big, "view": big[:10], "keep": [big], "other": torch.ones(3)}, storage


def test_a_named_variable_whose_memory_others_hold_says_who():
    namespace, storage = notebook()
    dry = reset.gpu_reset("big", namespace=namespace, dry_run=True)
    assert dry.estimated_bytes == 0
    note = "`big`: 4 MiB of its memory would stay: still held by `view`, `keep`"
    assert any(text.startswith(note) for text in dry.notes), dry.notes
    done = reset.gpu_reset("big", namespace=namespace)
    assert "big" not in namespace and storage() is not None  # the 4 MiB did stay
    assert done.released_bytes == 0
    stays = [text for text in done.notes if text.startswith("`big`:")]
    assert stays == [
        "`big`: 4 MiB of its memory stays: still held by `view`, `keep` (they keep it "
        "alive: delete them too to free it)"
    ]
    assert "stays" in str(done)
    done = reset.gpu_reset("view", "keep", namespace=namespace)  # the fix the note names
    gc.collect()
    assert storage() is None and done.released_bytes == 4 * MIB
    assert not [text for text in done.notes if "of its memory" in text]


def test_no_note_when_every_holder_is_dropped_or_none_is_left():
    namespace, storage = notebook()
    done = reset.gpu_reset("big", "view", "keep", namespace=namespace)
    assert storage() is None and done.released_bytes == 4 * MIB
    assert not [text for text in done.notes if "of its memory" in text]
    done = reset.gpu_reset("other", namespace=namespace)
    assert not [text for text in done.notes if "of its memory" in text]


def test_memory_an_unseen_alias_keeps_is_not_reported_freed():
    """The scan reaches the notebook's variables, not a module's globals: there a detached
    alias keeps the memory after the named tensor is gone. The storage's weakref, not the
    tensor's, says whether it was freed, and the report says where the bytes went."""
    import types

    hidden = types.ModuleType("cgg_hidden_cache")
    namespace, storage = notebook()
    del namespace["view"], namespace["keep"]
    hidden.cache = namespace["big"].detach()  # shares big's storage; no name reaches it
    tensor = weakref.ref(namespace["big"])
    done = reset.gpu_reset("big", namespace=namespace)
    assert tensor() is None and storage() is not None  # the tensor went, its memory stayed
    assert done.estimated_bytes == 4 * MIB and done.released_bytes == 0
    assert (
        "4 MiB expected to be freed is still in use: something outside the notebook's "
        "variables holds it"
    ) in " ".join(done.notes)
    assert "freed: 0 B of tensors, of 4 MiB expected" in str(done)
    del hidden.cache  # the holder the note points at
    gc.collect()
    assert storage() is None


def test_the_output_history_is_not_named_as_a_holder_a_plain_reset_drops(ip, run_cell):
    run_cell("import torch\nheld = torch.zeros(512, 1024)")
    run_cell("held")  # Out[n] holds it too; a reset drops the output history anyway
    storage = weakref.ref(ip.user_ns["held"].untyped_storage())
    with capture_output() as captured:
        ip.run_line_magic("gpu_reset", "held")
    gc.collect()
    assert storage() is None
    assert "of its memory" not in captured.stdout
    assert f"freed: {format_bytes(2 * MIB)}" in captured.stdout


def test_a_view_named_in_the_magic(ip, run_cell):
    run_cell("import torch\nbase = torch.zeros(1024, 1024)\nrow = base[0]")
    with capture_output() as captured:
        ip.run_line_magic("gpu_reset", "base")
    assert "`base`: 4 MiB of its memory stays: still held by `row`" in captured.stdout
    # and the still-held list says why a 4 KiB row keeps 4 MiB
    assert "view: uses 4 KiB of the 4 MiB it keeps alive (keep row.clone()" in captured.stdout
    ip.user_ns.pop("row", None)


def test_views_over_the_same_bytes_are_said_to_use_them_once(ip, run_cell):
    """`%gpu_status` in a real shell: three views of a deleted tensor, two over the same
    rows and one half over them, use 150,000 of its 1,000,000 floats (586 KiB), not the
    1.14 MiB their sizes add up to; a column slice and its transpose 100,000 (391 KiB)."""
    run_cell(
        "import torch\nbase = torch.zeros(1_000_000)\na = base[:100_000]\n"
        "b = base[:100_000].view(1000, 100)\nc = base[50_000:150_000]\ndel base\n"
        "cols = torch.zeros(1000, 1000)[:, :100]\ncols_t = cols.T"
    )
    with capture_output() as captured:
        ip.run_cell("%gpu_status", store_history=False)
    text = "".join(output.data["text/plain"] for output in captured.outputs)
    html = "".join(output.data["text/html"] for output in captured.outputs)
    assert "view: these names use 586 KiB of the 3.81 MiB they keep alive" in text, text
    assert "view: these names use 391 KiB of the 3.81 MiB they keep alive" in text, text
    assert "these names use 586 KiB of the 3.81 MiB" in html
    assert "these names use 391 KiB of the 3.81 MiB" in html
    for name in ("a", "b", "c", "cols", "cols_t"):
        ip.user_ns.pop(name, None)


def test_traceback_frames_counted_are_function_frames(ip, run_cell):
    """A cell's own module-level frame keeps the notebook's namespace: clearing it frees
    nothing, so it is not counted as a traceback frame dropped."""
    run_cell("raise ValueError('at the top level')")
    report = reset.gpu_reset(shell=ip, dry_run=True)
    assert report.dropped["exceptions"] == 1 and report.dropped["traceback frames"] == 0
    run_cell("def fails():\n    local = 1\n    raise ValueError(local)\nfails()")
    report = reset.gpu_reset(shell=ip, dry_run=True)
    assert report.dropped["traceback frames"] == 1
    done = reset.gpu_reset(shell=ip)
    assert done.dropped["traceback frames"] == 1 and "1 traceback frame" in str(done)
    ip.user_ns.pop("fails", None)


def test_a_frame_the_oom_advisor_cleared_is_not_counted_again(ip, run_cell):
    """After an out-of-memory error the advisor clears the failed call's frames itself;
    `%gpu_reset` then drops the exception but clears no frame that still held anything."""
    run_cell(
        "import torch\n"
        "def step():\n"
        "    activations = torch.zeros(256, 1024)\n"
        "    raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB.')"
    )
    with capture_output():
        run_cell("step()")
    report = reset.gpu_reset(shell=ip, dry_run=True)
    assert report.dropped["exceptions"] == 1 and report.dropped["traceback frames"] == 0
    done = reset.gpu_reset(shell=ip)
    assert done.dropped["traceback frames"] == 0 and "traceback frame" not in str(done)
    ip.user_ns.pop("step", None)


def test_storage_proofs_past_the_limit_go_to_the_biggest_blocks():
    """A weakref per storage costs about a microsecond: past the limit only the biggest
    blocks get one, and a proof says whether that storage lives on."""
    from colab_gpu_guard.leftovers import dropping
    from colab_gpu_guard.leftovers.scan import scan

    small = [torch.zeros(n) for n in (1, 2, 3)]
    big, bigger = torch.zeros(1000), torch.zeros(2000)
    namespace = {"small": small, "big": big, "bigger": bigger, "view": bigger[:5]}
    found = scan(namespace=namespace, keep_refs=True)
    every = dropping.storage_proofs(found)
    assert len(every) == 5 and None not in every.values()  # the view shares bigger's block
    two = dropping.storage_proofs(found, limit=2)
    sizes = dict(zip(found.walker.found.keys, found.walker.found.storage_nbytes))
    assert sorted(sizes[key] for key in two) == [4000, 8000]
    assert dropping.storage_proofs(found, keys=set()) == {}
    assert dropping.alive(two) == set(two)
    del namespace["big"], big
    gc.collect()
    assert len(dropping.alive(two)) == 1  # big's storage is gone, bigger's lives


def test_a_tensor_only_a_reference_cycle_held_shows_as_host_memory_freed(ip, run_cell):
    """A 20 MB CPU tensor in a reference cycle no name reaches: the scan cannot see it, so
    no array is counted released, but gc.collect() frees it and the report shows host
    memory in use falling by it (malloc's figure; skipped where glibc's is missing)."""
    from colab_gpu_guard import host_memory
    from colab_gpu_guard.reset.apply import gpu_reset

    if host_memory.MallocInUse().read() is None:
        pytest.skip("needs glibc's mallinfo2")
    torch = pytest.importorskip("torch")
    gc.disable()
    try:
        node: dict = {"tensor": torch.ones(5_000_000)}
        node["self"] = node
        alive = weakref.ref(node["tensor"])
        del node
        report = gpu_reset(shell=ip, namespace=ip.user_ns)
    finally:
        gc.enable()
    assert alive() is None
    fell = report.host_in_use_before - report.host_in_use_after
    assert fell >= 5_000_000 * 4 - 2**20, (report.host_in_use_before, report.host_in_use_after)
    assert f"host memory allocated: {format_bytes(report.host_in_use_before)} -> " in str(report)


def test_a_reset_that_drops_nothing_does_not_also_say_it_freed_nothing():
    """'dropped: nothing' says it: no 'freed: 0 B of tensors' line under it (text and
    HTML); a reset that dropped a name and freed nothing still says how much it freed."""
    namespace, _storage = notebook()
    nothing = reset.gpu_reset(namespace=namespace)
    assert nothing.dropped_counts() == [] and nothing.released_bytes == 0
    assert "dropped: nothing" in str(nothing)
    assert "freed" not in str(nothing) and "freed" not in nothing._repr_html_()
    dry = reset.gpu_reset(namespace=namespace, dry_run=True)
    assert "would drop: nothing" in str(dry) and "would free" not in str(dry)
    named = reset.gpu_reset("big", namespace=namespace)  # `view` and `keep` still hold it
    assert "freed: 0 B of tensors" in str(named)
    assert "freed: 0 B of tensors" in named._repr_html_()
