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
    naming the thread and its error; the pp_sync vector carries a flag, so the other ranks of
    its stage and the stages after it stop at the same cache check, naming that rank."""
