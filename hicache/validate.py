"""Field checks of the frozen config records, one wording everywhere: the error names the
field and the value it got (`cp: must be an integer >= 1, got 2.0`).

Pure: no torch. `bool` is refused where an integer is due (True would pass as 1), and NaN
and the infinities wherever a number is due (every comparison with NaN is False, so a plain
range test lets it through).
"""
from __future__ import annotations

import math

#: the largest value an int64 tensor element (or a numpy int64) holds
INT64_MAX = (1 << 63) - 1
import numbers


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


def integral_in(name: str, value, lo: int | None = None, hi: int | None = None) -> int:
    """`value` as a plain int in [lo, hi] (either bound optional, both inclusive).

    Unlike `integer`/`int_at_least` this takes numpy integers too (numbers.Integral, no bool):
    page numbers and counts reach the protocol modules from numpy arrays. The result is an int,
    so later arithmetic stays exact. Hot paths test `type(x) is int` and the range inline and
    call this only off the common case."""
    ok = type(value) is int or (isinstance(value, numbers.Integral) and not isinstance(value, bool))
    if ok:
        as_int = int(value)
        ok = (lo is None or as_int >= lo) and (hi is None or as_int <= hi)
    if not ok:
        span = ("" if lo is None and hi is None else f" >= {lo}" if hi is None
                else f" <= {hi}" if lo is None else f" in [{lo}, {hi}]")
        raise ValueError(f"{name}: must be an integer{span}, got {value!r}")
    return as_int
