"""How sizes are written in every report and view."""

from __future__ import annotations

from typing import Optional

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(value: Optional[float], digits: int = 2, none: str = "n/a") -> str:
    """1536 -> '1.50 KiB' (or '1.5 KiB' with digits=1); None -> `none`."""
    if value is None:
        return none
    sign = "-" if value < 0 else ""
    amount = float(abs(value))
    for unit in _UNITS:
        if amount < 1024 or unit == _UNITS[-1]:
            if unit == "B":
                return f"{sign}{int(amount)} B"
            return f"{sign}{amount:.{digits}f} {unit}"
        amount /= 1024
    raise AssertionError("unreachable")
