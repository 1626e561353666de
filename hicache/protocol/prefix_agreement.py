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

from hicache.validate import integral_in, number_in


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
        # (a NaN pages gave a NaN budget, and `elapsed >= NaN` is never true: no timeout ever)
        pages = integral_in("pages", pages, 0)
        page_size = integral_in("page_size", page_size, 1)
        return self.base_s + pages * (page_size / 1024) * self.per_ki_token_s


@dataclass(frozen=True, slots=True, kw_only=True)
class StopInput:
    """What stage 0 knows about one in-flight prefetch at a cache check."""
    elapsed_s: float
    pages: int
    page_size: int
    budget: TimeoutBudget

    def __post_init__(self) -> None:
        # Checked once here, not in the policies: a NaN elapsed or page count made the TIMEOUT
        # comparison false forever, so the policy silently never fired.
        number_in("elapsed_s", self.elapsed_s, 0.0)
        integral_in("pages", self.pages, 0)
        integral_in("page_size", self.page_size, 1)
        if not isinstance(self.budget, TimeoutBudget):
            raise ValueError(f"budget: must be a TimeoutBudget, got {self.budget!r}")


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
    total_pages = integral_in("total_pages", total_pages, 0)
    batch_pages = integral_in("batch_pages", batch_pages, 1)
    full, rest = divmod(total_pages, batch_pages)
    return (batch_pages,) * full + ((rest,) if rest else ())


def _check_plan(plan: Sequence[int]) -> None:
    """A plan as batch_plan makes it: batch sizes >= 1. A 0-page batch would count as fully
    loaded and let the prefix run on past it (agreed_prefix((2, 0, 2), [2, 0, 2]) was 4)."""
    for i, size in enumerate(plan):
        if type(size) is not int or size < 1:
            integral_in(f"plan[{i}]", size, 1)


def rank_acks(plan: Sequence[int], loaded: Sequence[int | None]) -> list[int]:
    """The acks a rank posts: one per batch of `plan`, whatever happened.

    loaded[i] is how many leading pages of batch i the rank loaded, or None if it never tried
    (terminated). Once a batch is short or skipped, every later ack is 0: later pages cannot
    extend a prefix with a hole in it.
    """
    _check_plan(plan)
    if len(loaded) != len(plan):
        raise ValueError(f"loaded has {len(loaded)} entries, plan has {len(plan)} batches")
    acks, broken = [], False
    for i, (size, got) in enumerate(zip(plan, loaded)):
        if got is not None and (type(got) is not int or not 0 <= got <= size):
            got = integral_in(f"loaded[{i}]", got, 0, int(size))
        ack = 0 if broken or got is None else got
        broken = broken or ack < size
        acks.append(ack)
    return acks


def agree_ack(acks: Sequence[int]) -> int:
    """The published ack of one batch: MIN across ranks (what the collective computes)."""
    if not acks:
        raise ValueError("acks: no acks to agree on")
    # (min() over a NaN answers by position: the same acks in another order differ)
    for i, ack in enumerate(acks):
        if type(ack) is not int or ack < 0:
            integral_in(f"acks[{i}]", ack, 0)
    return int(min(acks))


def agreed_prefix(plan: Sequence[int], published: Sequence[int]) -> int:
    """Pages of the prefix every rank loaded, from the published acks consumed so far."""
    _check_plan(plan)
    if len(published) > len(plan):
        raise ValueError(f"published: {len(published)} acks for a plan of {len(plan)} batches")
    total = 0
    for i, (size, ack) in enumerate(zip(plan, published)):
        if type(ack) is not int or not 0 <= ack <= size:
            ack = integral_in(f"published[{i}]", ack, 0, int(size))
        total += ack
        if ack < size:
            break
    return total
