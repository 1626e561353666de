"""Rank layout: global rank = stage * cp + cp_rank. Pure arithmetic."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Topology:
    """Invariant: 0 <= rank < cp * pp."""
    cp: int
    pp: int
    rank: int

    def __post_init__(self) -> None:
        if self.cp < 1 or self.pp < 1:
            raise ValueError(f"cp and pp must be >= 1, got cp={self.cp} pp={self.pp}")
        if not 0 <= self.rank < self.world:
            raise ValueError(f"rank {self.rank} outside world of {self.world}")

    @property
    def world(self) -> int:
        return self.cp * self.pp

    @property
    def stage(self) -> int:
        return self.rank // self.cp

    @property
    def cp_rank(self) -> int:
        return self.rank % self.cp

    def global_rank(self, stage: int, cp_rank: int) -> int:
        return stage * self.cp + cp_rank

    def stage_ranks(self, stage: int) -> list[int]:
        return [self.global_rank(stage, c) for c in range(self.cp)]

    @property
    def prev_rank(self) -> int | None:
        return None if self.stage == 0 else self.global_rank(self.stage - 1, self.cp_rank)

    @property
    def next_rank(self) -> int | None:
        return None if self.stage == self.pp - 1 else self.global_rank(self.stage + 1, self.cp_rank)
