"""Every optional part missing x every magic: with ipywidgets, psutil, NumPy, torch or
nvidia-ml-py not installed, each magic answers (a report, or one line naming what is
missing and how to get it) and never shows a traceback. Each part is made unimportable in a
fresh IPython shell, before anything imports it: every import finder is wrapped so that
none finds it, as when it is not installed (`find_spec` gives None, `import` raises
ModuleNotFoundError)."""

from __future__ import annotations

import functools

import pytest

from tests.child import run_python

MARK = "MISSING-PARTS:"

MAGICS = (
    "%gpu_status",
    "%gpu_status --json",
    "%gpu_history",
    "%gpu_reset --dry-run",
    "%gpu_reset",
    "%seed_all 1",
    "%seed_all 1 --deterministic",
    "%repro",
    "%gpu_advice",
    "%gpu_panel",
    "%gpu_panel --close",
)

SCRIPT = """
import contextlib, importlib.abc, io, json, sys
class NotInstalled(importlib.abc.MetaPathFinder):
    # every finder wrapped: for the parts none finds anything, as when not installed
    def __init__(self, finder):
        self.finder = finder
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in {parts!r}:
            return None
        return self.finder.find_spec(fullname, path, target)
    def invalidate_caches(self):
        getattr(self.finder, "invalidate_caches", lambda: None)()
    def find_distributions(self, *args, **kwargs):  # importlib.metadata asks finders too
        return getattr(self.finder, "find_distributions", lambda *a, **k: ())(*args, **kwargs)
sys.meta_path[:] = [NotInstalled(f) if hasattr(f, "find_spec") else f for f in sys.meta_path]
from IPython.testing.globalipapp import start_ipython
ip = start_ipython()
results = {{}}
for magic in {magics!r}:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        result = ip.run_cell(magic, store_history=True)
    error = result.error_in_exec or result.error_before_exec
    results[magic] = dict(
        out=out.getvalue(), err=err.getvalue(),
        error=None if error is None else f"{{type(error).__name__}}: {{error}}",
    )
import importlib.util
results["blocked"] = [importlib.util.find_spec(name) is None for name in {parts!r}]
print()  # IPython 7 writes a terminal title first, without a newline
print({mark!r} + json.dumps(results))
"""


@functools.cache  # one fresh shell per missing part (8 s each), read by every test of it
def run_without(*parts: str) -> dict:
    code = SCRIPT.format(
        parts=list(parts), magics=["%load_ext colab_gpu_guard", *MAGICS], mark=MARK
    )
    return run_python(code, marker=MARK, timeout=240)


@pytest.mark.parametrize("part", ["ipywidgets", "psutil", "numpy", "torch", "pynvml"])
def test_every_magic_answers_without(part):
    results = run_without(part)
    assert results["blocked"] == [True]  # the part really was out of reach
    assert results["%load_ext colab_gpu_guard"]["error"] is None, results
    for magic in MAGICS:
        answer = results[magic]
        text = answer["out"] + answer["err"]
        assert "Traceback" not in text, (part, magic, text)
        assert answer["error"] is None, (part, magic, answer)
        assert text.strip(), (part, magic, "said nothing")


def test_without_ipywidgets_the_panel_names_what_is_missing_in_one_line():
    results = run_without("ipywidgets")
    first = results["%gpu_panel"]["out"].strip().splitlines()[0]
    assert "ipywidgets" in first and "pip install ipywidgets" in first, first


def test_without_psutil_the_status_names_psutil():
    text = results_text(run_without("psutil"), "%gpu_status")
    assert "psutil" in text, text


def results_text(results: dict, magic: str) -> str:
    return results[magic]["out"] + results[magic]["err"]
