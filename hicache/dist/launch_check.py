"""A rank entry that exercises the launcher itself (its tests launch it): the rank works in
steps, reporting progress after each, then may stop reporting (a hang the collectives'
own bounds would not see). `launch(paced_rank, world, PacedWork(...))`."""
from __future__ import annotations

import threading
from dataclasses import dataclass

from .launch import report_progress


@dataclass(frozen=True, slots=True)
class PacedWork:
    steps: int            # steps of work, each followed by report_progress()
    step_s: float         # how long one step works (emulated: a wait, not synchronization)
    stall_s: float = 0.0  # then: how long the rank hangs without reporting


def paced_rank(rank: int, world: int, port: int, work: PacedWork) -> int:
    idle = threading.Event()          # never set: waited on with a timeout to emulate work
    for _ in range(work.steps):
        idle.wait(work.step_s)
        report_progress()
    idle.wait(work.stall_s)
    return rank


def failing_rank(rank: int, world: int, port: int, depth: int) -> int:
    """Raises `depth` calls below the rank's entry: the launcher's report must still show
    the line that raised."""
    def down(n: int) -> int:
        if n == 0:
            raise ValueError(f"raised {depth} calls down on rank {rank}")
        return down(n - 1)
    return down(depth)
