"""Who holds which array, by the name a user would type to reach it: ``find_leftovers()``
walks what a notebook keeps alive, names each array's block of memory once, and groups the
blocks by holder. The design, module by module: docs/leftovers.md."""

from __future__ import annotations

from ..units import HOLDERS
from .found import Ref
from .groups import LeftoverGroup, LeftoverGroups
from .html import leftovers_html
from .leftover_list import LeftoverList
from .naming import MAX_SHARED_NAMES
from .records import DeviceGap, Leftover
from .scan import DEFAULT_BUDGET_S, Group, Scan, find_leftovers, group_refs, scan
from .walker import DEFAULT_MAX_DEPTH

__all__ = [
    "DEFAULT_BUDGET_S",
    "DEFAULT_MAX_DEPTH",
    "HOLDERS",
    "MAX_SHARED_NAMES",
    "DeviceGap",
    "Group",
    "Leftover",
    "LeftoverGroup",
    "LeftoverGroups",
    "LeftoverList",
    "Ref",
    "Scan",
    "find_leftovers",
    "group_refs",
    "leftovers_html",
    "scan",
]
