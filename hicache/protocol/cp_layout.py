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

from hicache.validate import int_at_least, integral_in


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
    # Each method runs per token or page on hot paths, so the common case (a plain int in
    # range) is one inline test; integral_in handles numpy ints and words the error. Without
    # the type test a float or NaN slot gave a float or NaN owner and bool passed as 0/1.
    def owner(self, loc: int) -> int:
        if type(loc) is not int or loc < 0:
            loc = integral_in("loc", loc, 0)
        return (loc % (self.cp_size * self.page_size)) // self.page_size

    def local_index(self, loc: int) -> int:
        if type(loc) is not int or loc < 0:
            loc = integral_in("loc", loc, 0)
        n_ps = self.cp_size * self.page_size
        return (loc // n_ps) * self.page_size + loc % self.page_size

    def global_loc(self, owner: int, local_index: int) -> int:
        """Inverse of (owner, local_index): the bijection's other direction."""
        if type(owner) is not int or not 0 <= owner < self.cp_size:
            owner = integral_in("owner", owner, 0, self.cp_size - 1)
        if type(local_index) is not int or local_index < 0:
            local_index = integral_in("local_index", local_index, 0)
        ps = self.page_size
        return ((local_index // ps) * self.cp_size + owner) * ps + local_index % ps

    # --- page granularity ------------------------------------------------------------
    def page_owner(self, page: int) -> int:
        if type(page) is not int or page < 0:
            page = integral_in("page", page, 0)
        return page % self.cp_size

    def local_page(self, page: int) -> int:
        if type(page) is not int or page < 0:
            page = integral_in("page", page, 0)
        return page // self.cp_size

    def logical_page(self, owner: int, local_page: int) -> int:
        if type(owner) is not int or not 0 <= owner < self.cp_size:
            owner = integral_in("owner", owner, 0, self.cp_size - 1)
        if type(local_page) is not int or local_page < 0:
            local_page = integral_in("local_page", local_page, 0)
        return local_page * self.cp_size + owner


def chain_owner_class(rotation_base: int, position: int, cp_size: int) -> int:
    """Owner class of a chain's page at `position`: (rotation_base + position) mod cp_size.

    rotation_base may be any integer (bases are compared modulo cp_size); position >= 0;
    cp_size >= 1 (0 divided by zero, a negative size gave a negative class)."""
    # per chain page on the replay's hot path: one combined test for the all-int case
    if type(rotation_base) is int and type(position) is int and type(cp_size) is int \
            and position >= 0 and cp_size >= 1:
        return (rotation_base + position) % cp_size
    cp_size = integral_in("cp_size", cp_size, 1)
    rotation_base = integral_in("rotation_base", rotation_base)
    position = integral_in("position", position, 0)
    return (rotation_base + position) % cp_size


def choose_rotation_base(free_per_class: list[int]) -> int:
    """A new chain starts on the least-full owner class: most free pages, lowest index on ties."""
    if not free_per_class:
        raise ValueError("free_per_class: is empty")
    # every entry checked: max() over a NaN answers by position, so ranks could disagree
    for i, free in enumerate(free_per_class):
        if type(free) is not int or free < 0:
            integral_in(f"free_per_class[{i}]", free, 0)
    best = max(free_per_class)
    return free_per_class.index(best)


def rotation_compatible(parent_base: int | None, child_base: int, cp_size: int) -> bool:
    """May a chain with base `child_base` hang below a chain with base `parent_base`?

    Rotations are compared modulo cp_size; the root (parent_base None) accepts any base.
    A splice of different rotations would break owner(position) = (base + position) mod N,
    so the tree declines it.
    """
    # (a float base compared equal to an int one, 1.0 == 1, so a wrong-typed base passed)
    if type(cp_size) is not int or cp_size < 1:
        cp_size = integral_in("cp_size", cp_size, 1)
    if type(child_base) is not int:
        child_base = integral_in("child_base", child_base)
    if parent_base is None:
        return True
    if type(parent_base) is not int:
        parent_base = integral_in("parent_base", parent_base)
    return parent_base % cp_size == child_base % cp_size
