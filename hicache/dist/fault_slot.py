"""The fault slot: a rank's own failure, seen at a cache check, stops every rank at that check.

At each cache check a rank reads what failed on it since the last one: a copy thread (a
transfer that failed, or a monitor's violation raised there), one of its storage prefetch
threads (the same two), or its serve loop (nothing moved for timeout_s). It encodes the
most important of these as one integer, `kind * world + rank` (`FaultKind`, in priority
order), or `none_code(world)` when nothing failed; the MIN over all ranks then names the
most important kind and the lowest rank that has it.

That integer rides in the pp_sync vector, and stage 0's MIN over its CP group goes down
the pipeline. The vector never goes *up*, so with pp > 1 a stage s > 0 fault would stay
on its own stage (its peers used to see it only as a PeerFailure, its process gone):
`share` first MIN-reduces the slot over the whole world, on the main thread's default
group, and stage 0 puts that result in its vector. Every rank, of every stage, then stops
at the same check: the origin raises its own error (thread and detail), each other rank
an error naming the origin rank and what failed there (`error`).
"""
from __future__ import annotations

import enum

from .comm import Comm
from .errors import DistStepError, LocalTimeout, PeerFault, PrefetchFailure

STEP = "fault_slot"


class FaultKind(enum.IntEnum):
    """What failed on a rank, most important first (the MIN picks the lowest value)."""
    COPY_VIOLATION = 0        # a monitor's violation (AssertionError) raised on a copy thread
    PREFETCH_VIOLATION = 1    # the same on a storage prefetch thread
    COPY = 2                  # a copy thread failed (a transfer, or a listener after it)
    PREFETCH = 3              # a storage prefetch thread (loader or sync) failed
    STALL = 4                 # nothing moved in the serve loop for timeout_s


_WHAT = {
    FaultKind.COPY_VIOLATION: "a monitor's check failed (a protocol violation) on a copy thread of rank {r}",
    FaultKind.PREFETCH_VIOLATION: ("a monitor's check failed (a protocol violation) on a storage prefetch "
                                   "thread of rank {r}"),
    FaultKind.COPY: "a transfer of rank {r} failed on its copy thread",
    FaultKind.PREFETCH: "the storage prefetch of rank {r} failed",
}


def none_code(world: int) -> int:
    """The slot of a rank where nothing failed (above every fault's code)."""
    return len(FaultKind) * world


def encode(kind: FaultKind | None, rank: int, world: int) -> int:
    if kind is None:
        return none_code(world)
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not in a world of {world}")
    return int(kind) * world + rank


def decode(code: int, world: int) -> tuple[FaultKind, int] | None:
    """(kind, rank) of a (reduced) slot; None when no rank reported a fault."""
    if code == none_code(world):
        return None
    if not 0 <= code < none_code(world):
        raise ValueError(f"fault slot {code} is not a fault code of a world of {world}")
    kind, rank = divmod(code, world)
    return FaultKind(kind), rank


def share(comm: Comm, code: int) -> int:
    """MIN of every rank's slot over the world (pp > 1: the pp_sync vector only goes down).
    Every rank calls it at every cache check, right before its pp_sync. It carries the step
    pair but no state digest: a divergence is still diagnosed by the pp_sync right after,
    where its messages name the stage and the upstream rank."""
    return comm.checked_min(STEP, None, 0, [code]).counts[0]


def error(step: str, me: int, kind: FaultKind, origin: int, *, timeout_s: float, waiting: str,
          context: str) -> DistStepError:
    """The error rank `me` raises for the fault the slot names at this check: another rank's
    failure (that rank raises its own), or a stall (on every rank: the loop state is
    replicated, so what `me` waits for is what every rank waits for). `waiting`: what this
    rank's loop waits for; `context`: where this rank's prefetch loader is (a stall's or a
    prefetch failure's detail)."""
    if kind is FaultKind.STALL:
        return LocalTimeout(step, me, f"nothing moved for {timeout_s:g} s (rank {origin}'s clock), "
                            f"waiting for {waiting}; {context}")
    detail = f"{_WHAT[kind].format(r=origin)} (that rank reports its error); every rank stops at this check"
    if kind is FaultKind.PREFETCH:
        return PrefetchFailure(step, me, f"{detail}; {context}")
    return PeerFault(step, me, detail)
