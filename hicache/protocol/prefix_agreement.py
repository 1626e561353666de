"""Storage prefix agreement: what each rank acks, what is published, what a stage may use.

Decisions only; the loader/sync threads live in hicache.dist.prefetch.
- A rank loads a prefetch in batches and posts exactly one ack per batch -- the number of
  pages of that batch it loaded -- also after a failure or a termination (then 0), so every
  rank posts the same number of acks (REFERENCE.md bug 5).
- A sync thread MIN-reduces each ack across ranks and pushes the result to an ordered queue.
- The agreed prefix of a request is the leading run of fully loaded batches plus the loaded
  part of the first short batch; nothing after a short batch counts.
- Stop policies are decided once by stage 0 (MAX-reduced verdict) and dispatched by table.
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hicache.validate import number_in


class StopPolicy(enum.StrEnum):
    BEST_EFFORT = "best_effort"      # terminate at the first cache check
    WAIT_COMPLETE = "wait_complete"  # never terminate early
    TIMEOUT = "timeout"              # terminate once the budget for the request's pages is spent


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeoutBudget:
    """budget(pages) = base_s + pages * (page_size / 1024) * per_ki_token_s. Invariant: all >= 0."""
    base_s: float = 0.05
    per_ki_token_s: float = 0.05

    def __post_init__(self) -> None:
        for name in ("base_s", "per_ki_token_s"):
            number_in(name, getattr(self, name), 0.0)

    def seconds(self, pages: int, page_size: int) -> float:
        if pages < 0 or page_size < 1:
            raise ValueError(f"pages must be >= 0 and page_size >= 1, got {pages}, {page_size}")
        return self.base_s + pages * (page_size / 1024) * self.per_ki_token_s


@dataclass(frozen=True, slots=True, kw_only=True)
class StopInput:
    """What stage 0 knows about one in-flight prefetch at a cache check."""
    elapsed_s: float
    pages: int
    page_size: int
    budget: TimeoutBudget


_DECIDE: dict[StopPolicy, Callable[[StopInput], bool]] = {
    StopPolicy.BEST_EFFORT: lambda x: True,
    StopPolicy.WAIT_COMPLETE: lambda x: False,
    StopPolicy.TIMEOUT: lambda x: x.elapsed_s >= x.budget.seconds(x.pages, x.page_size),
}


def decide_terminate(policy: StopPolicy, inp: StopInput) -> bool:
    """Stage 0's vote to terminate a prefetch now. The votes are MAX-reduced (any => all)."""
    decide = _DECIDE.get(policy)
    if decide is None:
        raise ValueError(f"policy: {policy!r} is not one of {', '.join(p.value for p in StopPolicy)}")
    return decide(inp)


def batch_plan(total_pages: int, batch_pages: int) -> tuple[int, ...]:
    """Sizes of the batches a prefetch of `total_pages` is loaded in (same on every rank)."""
    if total_pages < 0:
        raise ValueError(f"total_pages must be >= 0, got {total_pages}")
    if batch_pages < 1:
        raise ValueError(f"batch_pages must be >= 1, got {batch_pages}")
    full, rest = divmod(total_pages, batch_pages)
    return (batch_pages,) * full + ((rest,) if rest else ())


def rank_acks(plan: Sequence[int], loaded: Sequence[int | None]) -> list[int]:
    """The acks a rank posts: one per batch of `plan`, whatever happened.

    loaded[i] is how many leading pages of batch i the rank loaded, or None if it never tried
    (terminated). Once a batch is short or skipped, every later ack is 0: later pages cannot
    extend a prefix with a hole in it.
    """
    if len(loaded) != len(plan):
        raise ValueError(f"loaded has {len(loaded)} entries, plan has {len(plan)} batches")
    acks, broken = [], False
    for size, got in zip(plan, loaded):
        if got is not None and not 0 <= got <= size:
            raise ValueError(f"loaded {got} pages of a batch of {size}")
        ack = 0 if broken or got is None else got
        broken = broken or ack < size
        acks.append(ack)
    return acks


def agree_ack(acks: Sequence[int]) -> int:
    """The published ack of one batch: MIN across ranks (what the collective computes)."""
    if not acks:
        raise ValueError("no acks to agree on")
    return min(acks)


def agreed_prefix(plan: Sequence[int], published: Sequence[int]) -> int:
    """Pages of the prefix every rank loaded, from the published acks consumed so far."""
    if len(published) > len(plan):
        raise ValueError(f"{len(published)} acks for a plan of {len(plan)} batches")
    total = 0
    for size, ack in zip(plan, published):
        if not 0 <= ack <= size:
            raise ValueError(f"published ack {ack} outside [0, {size}]")
        total += ack
        if ack < size:
            break
    return total
