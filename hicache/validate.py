"""Field checks of the frozen config records, one wording everywhere: the error names the
field and the value it got (`cp: must be an integer >= 1, got 2.0`).

Pure: no torch. `bool` is refused where an integer is due (True would pass as 1), and NaN
and the infinities wherever a number is due (every comparison with NaN is False, so a plain
range test lets it through).
"""
from __future__ import annotations

import math


def integer(name: str, value) -> int:
    """`value` as any int (a seed, say); no bool."""
    if type(value) is not int:
        raise ValueError(f"{name}: must be an integer, got {value!r}")
    return value


def int_at_least(name: str, value, lo: int) -> int:
    """`value` as a count or size: an int (no bool) >= lo."""
    if type(value) is not int or value < lo:
        raise ValueError(f"{name}: must be an integer >= {lo}, got {value!r}")
    return value


def number_in(name: str, value, lo: float, hi: float = math.inf, *, lo_open: bool = False) -> float:
    """`value` as a finite number in [lo, hi] ((lo, hi] when lo_open); no bool."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and \
        (value > lo if lo_open else value >= lo) and value <= hi
    if not ok:
        lower = f"> {lo:g}" if lo_open else f">= {lo:g}"
        span = f"a finite number {lower}" if hi == math.inf else f"a number in {'(' if lo_open else '['}{lo:g}, {hi:g}]"
        raise ValueError(f"{name}: must be {span}, got {value!r}")
    return float(value)
