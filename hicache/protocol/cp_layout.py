"""Context-parallel page placement: owner rank and local address by arithmetic only.

Token slot `loc`, page size `ps`, `n` CP ranks (REFERENCE.md):
    owner(loc)       = (loc mod (n*ps)) div ps
    local_index(loc) = (loc div (n*ps))*ps + loc mod ps
so logical page p = loc div ps lives on rank p mod n at local page p div n. There is no
per-page table; every rank computes the same answer from the logical ID alone.
Pure: no torch, no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass

from hicache.validate import int_at_least


@dataclass(frozen=True, slots=True, kw_only=True)
class CPLayout:
    """Invariant: cp_size >= 1, page_size >= 1."""
    cp_size: int
    page_size: int

    def __post_init__(self) -> None:
        # (integers: a float size gave float owners, NaN passed every range test)
        int_at_least("cp_size", self.cp_size, 1)
        int_at_least("page_size", self.page_size, 1)

    # --- token-slot granularity ------------------------------------------------------
    def owner(self, loc: int) -> int:
        self._check_nonneg("loc", loc)
        return (loc % (self.cp_size * self.page_size)) // self.page_size

    def local_index(self, loc: int) -> int:
        self._check_nonneg("loc", loc)
        n_ps = self.cp_size * self.page_size
        return (loc // n_ps) * self.page_size + loc % self.page_size

    def global_loc(self, owner: int, local_index: int) -> int:
        """Inverse of (owner, local_index): the bijection's other direction."""
        self._check_rank(owner)
        self._check_nonneg("local_index", local_index)
        ps = self.page_size
        return ((local_index // ps) * self.cp_size + owner) * ps + local_index % ps

    # --- page granularity ------------------------------------------------------------
    def page_owner(self, page: int) -> int:
        self._check_nonneg("page", page)
        return page % self.cp_size

    def local_page(self, page: int) -> int:
        self._check_nonneg("page", page)
        return page // self.cp_size

    def logical_page(self, owner: int, local_page: int) -> int:
        self._check_rank(owner)
        self._check_nonneg("local_page", local_page)
        return local_page * self.cp_size + owner

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.cp_size:
            raise ValueError(f"owner rank {rank} outside [0, {self.cp_size})")

    @staticmethod
    def _check_nonneg(name: str, value: int) -> None:
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


def chain_owner_class(rotation_base: int, position: int, cp_size: int) -> int:
    """Owner class of a chain's page at `position`: (rotation_base + position) mod cp_size."""
    return (rotation_base + position) % cp_size


def choose_rotation_base(free_per_class: list[int]) -> int:
    """A new chain starts on the least-full owner class: most free pages, lowest index on ties."""
    if not free_per_class:
        raise ValueError("free_per_class is empty")
    best = max(free_per_class)
    return free_per_class.index(best)


def rotation_compatible(parent_base: int | None, child_base: int, cp_size: int) -> bool:
    """May a chain with base `child_base` hang below a chain with base `parent_base`?

    Rotations are compared modulo cp_size; the root (parent_base None) accepts any base.
    A splice of different rotations would break owner(position) = (base + position) mod N,
    so the tree declines it.
    """
    return parent_base is None or parent_base % cp_size == child_base % cp_size
