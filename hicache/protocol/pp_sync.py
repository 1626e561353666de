"""pp_sync: pipeline stages agree on how many ready transfers to apply, in the same order.

Decisions only; the adapter (hicache.dist.pp_sync) runs the collectives.
At a cache check every rank of stage 0 contributes the number of *leading* ready transfers of
each queue; a MIN over stage 0's group gives counts that are ready on every rank of stage 0.
The counts travel down the pipeline; every stage pops exactly those, waiting for each popped
transfer to finish locally before it updates its cache records.

The reduced tensor (one MIN all-reduce) is laid out as
    [step, -step, digest, -digest, counts..., -votes...]
counts are MIN-reduced; votes are MAX-reduced through negation (min(-v) = -max v).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hicache.validate import INT64_MAX, int_at_least, integral_in

from .digest import pair, pair_agrees

#: a count placeholder that never lowers a MIN (counts are refused above it)
COUNT_PLACEHOLDER = (1 << 62)
HEADER = 4
# the sync vector travels as an int64 tensor (INT64_MAX); x and -x of a pair must both fit


def leading_ready(ready: Sequence[bool]) -> int:
    """Number of transfers at the front of a queue that are ready (stops at the first not ready)."""
    n = 0
    for flag in ready:
        if not flag:
            break
        n += 1
    return n


@dataclass(frozen=True, slots=True)
class SyncLayout:
    """How many count and vote fields a sync vector carries. Invariant: both >= 0."""
    n_counts: int
    n_votes: int

    def __post_init__(self) -> None:
        # (integers: 2.5 or NaN passed the old range test and gave a fractional width)
        int_at_least("n_counts", self.n_counts, 0)
        int_at_least("n_votes", self.n_votes, 0)

    @property
    def width(self) -> int:
        return HEADER + self.n_counts + self.n_votes

    def encode(self, step: int, digest: int, counts: Sequence[int], votes: Sequence[int]) -> list[int]:
        if len(counts) != self.n_counts:
            raise ValueError(f"counts has {len(counts)} fields, layout wants {self.n_counts}")
        if len(votes) != self.n_votes:
            raise ValueError(f"votes has {len(votes)} fields, layout wants {self.n_votes}")
        # Every field is checked before it reaches the int64 tensor: a float or NaN would be
        # cast (or MIN-compared by position: min over a NaN depends on the order, so ranks
        # could disagree silently) and a value past int64 fails in torch without a name.
        step = integral_in("step", step, -INT64_MAX, INT64_MAX)
        digest = integral_in("digest", digest, -INT64_MAX, INT64_MAX)
        counts = [c if type(c) is int and 0 <= c <= COUNT_PLACEHOLDER
                  else integral_in(f"counts[{i}]", c, 0, COUNT_PLACEHOLDER) for i, c in enumerate(counts)]
        votes = [v if type(v) is int and 0 <= v <= INT64_MAX
                 else integral_in(f"votes[{i}]", v, 0, INT64_MAX) for i, v in enumerate(votes)]
        return [*pair(step), *pair(digest), *counts, *(-v for v in votes)]

    def decode(self, reduced: Sequence[int]) -> "SyncOutcome":
        if len(reduced) != self.width:
            raise ValueError(f"reduced vector has {len(reduced)} fields, layout wants {self.width}")
        # (int() truncated 1.5 to 1 silently; the collective only ever yields integers)
        red = [x if type(x) is int else integral_in(f"reduced[{i}]", x) for i, x in enumerate(reduced)]
        counts = tuple(red[HEADER:HEADER + self.n_counts])
        votes = tuple(-v for v in red[HEADER + self.n_counts:])
        return SyncOutcome(
            step_agreed=pair_agrees(red[0], red[1]),
            digest_agreed=pair_agrees(red[2], red[3]),
            step=red[0], digest=red[2], counts=counts, votes=votes)


@dataclass(frozen=True, slots=True)
class SyncOutcome:
    """What a MIN-reduced sync vector says. `step`/`digest` are meaningful only when agreed."""
    step_agreed: bool
    digest_agreed: bool
    step: int
    digest: int
    counts: tuple[int, ...]
    votes: tuple[int, ...]


def min_reduce(vectors: Sequence[Sequence[int]]) -> list[int]:
    """The reduction the collective performs, for pure tests and simulations."""
    if not vectors:
        raise ValueError("vectors: no vectors to reduce")
    width = len(vectors[0])
    for r, vec in enumerate(vectors):
        if len(vec) != width:
            raise ValueError(f"vectors[{r}]: has {len(vec)} fields, vectors[0] has {width}")
        # (min() over a NaN answers by position: the same inputs in another order differ)
        for i, x in enumerate(vec):
            if type(x) is not int:
                integral_in(f"vectors[{r}][{i}]", x)
    return [min(col) for col in zip(*vectors)]


def pop_plan(agreed: int, queue_len: int) -> int:
    """How many to pop locally: exactly the agreed count. A stage whose queue is shorter than
    the agreed count has not even issued those transfers -- a broken invariant, not a wait."""
    # (a NaN or 1.5 count was handed back as the number to pop)
    if type(agreed) is not int or agreed < 0:
        agreed = integral_in("agreed", agreed, 0)
    if type(queue_len) is not int or queue_len < 0:
        queue_len = integral_in("queue_len", queue_len, 0)
    if agreed > queue_len:
        raise RuntimeError(f"agreed to pop {agreed} transfers but only {queue_len} were issued here: "
                           "stages issued different transfers")
    return agreed
