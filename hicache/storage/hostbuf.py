"""Byte views of host tensors for the backends: read and write pages in place, no staging."""
from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch


def check_page(t: torch.Tensor, what: str = "value") -> torch.Tensor:
    """`t` if it is a CPU uint8 tensor, else ValueError (the interface moves raw page bytes)."""
    if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8 or t.device.type != "cpu":
        got = f"{t.dtype} on {t.device}" if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"{what}: expected a CPU uint8 tensor, got {got}")
    return t


def byte_view(t: torch.Tensor) -> memoryview:
    """The bytes of a CPU uint8 tensor, in place when it is contiguous (else one copy)."""
    return memoryview(check_page(t).reshape(-1).contiguous().numpy())


def row_nbytes(buf: torch.Tensor) -> int:
    """Bytes in one row `buf[i]` of a uint8 host buffer (every row has the same size)."""
    return buf[0].numel() if buf.dim() and buf.shape[0] else 0


def check_rows(keys: Sequence[str], buf: torch.Tensor, rows: Sequence[int], what: str) -> None:
    check_page(buf, what)
    if len(keys) != len(rows):
        raise ValueError(f"rows: {len(rows)} rows for {len(keys)} keys")
    n = buf.shape[0] if buf.dim() else 0
    seen: set[int] = set()
    for r in rows:
        if not isinstance(r, numbers.Integral) or isinstance(r, bool):
            raise ValueError(f"rows: row {r!r} is not an integer")
        if not 0 <= r < n:
            raise ValueError(f"rows: row {r} outside {what} with {n} rows")
        if r in seen:     # two pages into one row: one of them is lost, both reported read
            raise ValueError(f"rows: row {r} given twice")
        seen.add(r)


class RowTarget:
    """Where a page read for `dst[row]` lands: the row itself when contiguous, else a scratch
    tensor copied into the row only by `commit` (so a failed read leaves the row untouched)."""
    __slots__ = ("row", "flat", "_scatter")

    def __init__(self, dst: torch.Tensor, row: int) -> None:
        self.row = dst[row]
        if self.row.is_contiguous():
            self.flat = self.row.view(-1)
            self._scatter = False
        else:
            self.flat = torch.empty(self.row.numel(), dtype=torch.uint8)
            self._scatter = True

    @property
    def nbytes(self) -> int:
        return self.flat.numel()

    def view(self) -> memoryview:
        return memoryview(self.flat.numpy())

    def commit(self) -> None:
        if self._scatter:
            self.row.copy_(self.flat.view(self.row.shape))
