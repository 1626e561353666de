import itertools

import pytest

from hicache.protocol.cp_alloc import ShardedPageAllocator
from hicache.protocol.cp_layout import CPLayout, chain_owner_class, choose_rotation_base, rotation_compatible


@pytest.mark.parametrize("n,ps", list(itertools.product(range(1, 5), range(1, 5))))
def test_owner_local_is_a_bijection_and_matches_page_formulas(n, ps):
    lay = CPLayout(cp_size=n, page_size=ps)
    seen = set()
    for loc in range(n * ps * 6):
        owner, local = lay.owner(loc), lay.local_index(loc)
        assert 0 <= owner < n
        assert (owner, local) not in seen
        seen.add((owner, local))
        assert lay.global_loc(owner, local) == loc
        page = loc // ps
        assert owner == lay.page_owner(page) == page % n
        assert local == lay.local_page(page) * ps + loc % ps
        assert lay.logical_page(owner, lay.local_page(page)) == page
    # each owner's local indices are dense: 0..6*ps-1
    for r in range(n):
        assert sorted(l for o, l in seen if o == r) == list(range(6 * ps))


def test_reference_example_values():
    lay = CPLayout(cp_size=4, page_size=2)
    # loc 11: page 5 -> rank 1, local page 1, local index 1*2 + 1 = 3
    assert (lay.owner(11), lay.local_index(11)) == (1, 3)
    assert (lay.page_owner(5), lay.local_page(5)) == (1, 1)


@pytest.mark.parametrize("field,kwargs", [("cp_size", dict(cp_size=0, page_size=1)),
                                          ("page_size", dict(cp_size=1, page_size=0)),
                                          ("cp_size", dict(cp_size=2.5, page_size=1)),
                                          ("page_size", dict(cp_size=1, page_size=float("nan"))),
                                          ("cp_size", dict(cp_size=True, page_size=1))])
def test_layout_validation_names_field(field, kwargs):
    with pytest.raises(ValueError, match=field):
        CPLayout(**kwargs)


def test_rotation_helpers():
    assert [chain_owner_class(3, p, 4) for p in range(5)] == [3, 0, 1, 2, 3]
    assert choose_rotation_base([2, 5, 5, 1]) == 1
    assert rotation_compatible(None, 3, 4)
    assert rotation_compatible(1, 5, 4)
    assert not rotation_compatible(1, 2, 4)


def test_allocator_keeps_rotation_and_is_all_or_nothing():
    lay = CPLayout(cp_size=3, page_size=4)
    alloc = ShardedPageAllocator(lay, pages_per_rank=2)
    assert alloc.new_chain_base() == 0
    chain = alloc.alloc_chain(0, 0, 2)
    assert [lay.page_owner(p) for p in chain] == [0, 1]
    assert alloc.free_per_class() == [1, 1, 2]
    assert alloc.new_chain_base() == 2          # least-full class
    ext = alloc.alloc_chain(0, 2, 2)            # extension keeps base 0: classes 2, 0
    assert [lay.page_owner(p) for p in ext] == [2, 0]
    before = alloc.free_per_class()
    assert alloc.alloc_chain(0, 0, 3) is None   # class 0 exhausted: nothing taken
    assert alloc.free_per_class() == before


def test_restore_keeps_owner_even_when_address_changes():
    lay = CPLayout(cp_size=2, page_size=2)
    alloc = ShardedPageAllocator(lay, pages_per_rank=3)
    first = alloc.alloc_chain(1, 0, 1)[0]       # position 0 of base 1 -> owner 1
    other = alloc.alloc_chain(1, 0, 1)[0]
    alloc.free(first)
    blocker = alloc.alloc_chain(1, 0, 1)[0]     # takes the freed address
    restored = alloc.alloc_chain(1, 0, 1)[0]    # "restore" of the evicted page
    assert lay.page_owner(restored) == lay.page_owner(first) == 1
    assert restored != first and blocker == first and other != restored


def test_double_free_fails_loudly():
    alloc = ShardedPageAllocator(CPLayout(cp_size=2, page_size=1), pages_per_rank=1)
    p = alloc.alloc_chain(0, 0, 1)[0]
    alloc.free(p)
    with pytest.raises(RuntimeError, match="double free"):
        alloc.free(p)
