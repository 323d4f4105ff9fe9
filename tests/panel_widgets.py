"""Reading the %gpu_panel widget tree in tests: every widget, their HTML, the
sections opened as a user would, and the check that HTML is escaped."""

from __future__ import annotations

import pytest

ipywidgets = pytest.importorskip("ipywidgets")
HOSTILE = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
RAW_MARKERS = ("<img", "<script", 'onerror="')


def all_widgets(root):
    """Every widget reachable from root through children."""
    found = [root]
    for child in getattr(root, "children", ()) or ():
        found.extend(all_widgets(child))
    return found


def html_of(instance) -> str:
    return "\n".join(w.value for w in all_widgets(instance) if isinstance(w, ipywidgets.HTML))


def open_sections(instance, *names):
    """Press the section toggles (all by default), as a user would."""
    for name in names or tuple(instance.toggles):
        instance.toggles[name].value = True
    return instance


def assert_escaped(text: str) -> None:
    for marker in RAW_MARKERS:
        assert marker not in text, f"unescaped {marker!r} in panel HTML"
