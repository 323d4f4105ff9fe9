"""``gpu_reset``: release what a notebook keeps alive behind the user's back, then report
what was freed and what is still held, by name. `plan` decides what a reset would drop,
free and keep (a dry run is the plan, printed), `apply` carries it out, `report` says it."""

from .apply import gpu_reset
from .report import DeviceRelease, ReleaseReport

__all__ = ["DeviceRelease", "ReleaseReport", "gpu_reset"]
