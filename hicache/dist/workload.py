"""Deterministic request streams with shared prefixes (same on every rank from the seed)."""
from __future__ import annotations

import random

FAMILIES = 6


def make_workload(n: int, page_size: int, vocab: int, seed: int, max_len: int) -> list[list[int]]:
    """n requests over a few prefix families of 2-4 pages. The first requests visit the
    families in turn, twice (the second visit of a family finds it on device or, once the
    small device pool has moved on, on host or in storage); later requests pick families at
    random. Each request adds a short random tail, so lengths need not be page multiples.
    Requests 0 and 1 share family 0 and are admitted together: their chains race."""
    rng = random.Random(seed)
    families = [[rng.randrange(vocab) for _ in range(rng.randint(2, 4) * page_size)] for _ in range(FAMILIES)]
    order = [0] + [i % FAMILIES for i in range(2 * FAMILIES)]
    out = []
    for i in range(n):
        fam = families[order[i]] if i < len(order) else families[rng.randrange(FAMILIES)]
        cut = rng.randint(max(page_size, len(fam) - page_size), len(fam))
        tail = [rng.randrange(vocab) for _ in range(rng.randint(1, page_size + page_size // 2))]
        out.append((fam[:cut] + tail)[:max_len])
    return out
