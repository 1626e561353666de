"""Errors of the distributed layer. Each names the step and the rank where it happened."""
from __future__ import annotations


class DistStepError(RuntimeError):
    """A collective-bearing step failed on this rank."""

    def __init__(self, step: str, rank: int, detail: str) -> None:
        super().__init__(f"rank {rank}: step {step!r}: {detail}")
        self.step, self.rank, self.detail = step, rank, detail


class DivergenceError(DistStepError):
    """Ranks disagree on a value that must be identical (step identity, tree digest, config)."""


class PeerFailure(DistStepError):
    """A peer died or stalled: the collective raised or timed out."""


class LocalTimeout(DistStepError):
    """A local wait (transfer finish, published ack) exceeded its bound."""


class PrefetchFailure(DistStepError):
    """A rank's storage prefetch thread (loader or sync) failed. The failing rank raises it
    naming the thread and its error; its fault slot (`fault_slot`) reaches every rank, of
    every stage, at that cache check, so each other rank stops there too, naming that rank."""


class PeerFault(DistStepError):
    """Another rank reported a failure of its own through the fault slot at this cache check
    (a copy thread's failure, a monitor's violation on one of its threads): this rank stops
    at the same check, naming that rank and what failed there; that rank raises the error."""
