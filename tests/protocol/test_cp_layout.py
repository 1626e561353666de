import itertools
import threading

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


# --- bad input is refused by name (QA sweep: floats, NaN and bools gave wrong answers) -----
NAN, INF = float("nan"), float("inf")
LAY = CPLayout(cp_size=3, page_size=4)


@pytest.mark.parametrize("call,field,got", [
    (lambda: LAY.owner(5.5), "loc", "5.5"), (lambda: LAY.owner(NAN), "loc", "nan"),
    (lambda: LAY.owner(INF), "loc", "inf"), (lambda: LAY.owner(5.0), "loc", "5.0"),
    (lambda: LAY.owner("5"), "loc", "'5'"), (lambda: LAY.owner(-1), "loc", "-1"),
    (lambda: LAY.local_index(5.5), "loc", "5.5"), (lambda: LAY.local_index(True), "loc", "True"),
    (lambda: LAY.page_owner(True), "page", "True"), (lambda: LAY.page_owner(NAN), "page", "nan"),
    (lambda: LAY.local_page(2.5), "page", "2.5"),
    (lambda: LAY.global_loc(True, 0), "owner", "True"), (lambda: LAY.global_loc(3, 0), "owner", "3"),
    (lambda: LAY.global_loc(0, NAN), "local_index", "nan"),
    (lambda: LAY.logical_page(1.0, 0), "owner", "1.0"), (lambda: LAY.logical_page(0, 2.5), "local_page", "2.5"),
])
def test_layout_methods_refuse_non_integers_by_name(call, field, got):
    with pytest.raises(ValueError, match=rf"^{field}: must be an integer .*, got {got}$"):
        call()


def test_layout_methods_take_numpy_integers_and_answer_ints():
    np = pytest.importorskip("numpy")
    lay = CPLayout(cp_size=4, page_size=2)
    for kind in (np.int64, np.int32, np.uint64):
        assert (lay.owner(kind(11)), lay.local_index(kind(11))) == (1, 3)
        assert (lay.page_owner(kind(5)), lay.local_page(kind(5))) == (1, 1)
        assert lay.global_loc(kind(1), kind(3)) == 11 and lay.logical_page(kind(1), kind(1)) == 5
        assert type(lay.owner(kind(11))) is int and type(lay.logical_page(kind(1), kind(1))) is int
    with pytest.raises(ValueError, match="^page: "):
        lay.page_owner(np.bool_(True))
    with pytest.raises(ValueError, match="^loc: "):
        lay.owner(np.float64(5.0))


@pytest.mark.parametrize("call,field", [
    (lambda: chain_owner_class(0, 1, -3), "cp_size"), (lambda: chain_owner_class(0, 1, 0), "cp_size"),
    (lambda: chain_owner_class(0.5, 1, 3), "rotation_base"), (lambda: chain_owner_class(NAN, 1, 3), "rotation_base"),
    (lambda: chain_owner_class(0, -1, 3), "position"), (lambda: chain_owner_class(0, True, 3), "position"),
    (lambda: rotation_compatible(1, 1.0, 3), "child_base"), (lambda: rotation_compatible(1.0, 1, 3), "parent_base"),
    (lambda: rotation_compatible(1, NAN, 3), "child_base"), (lambda: rotation_compatible(None, 1, 0), "cp_size"),
    (lambda: choose_rotation_base([NAN, 1]), r"free_per_class\[0\]"),
    (lambda: choose_rotation_base([1, NAN]), r"free_per_class\[1\]"),
    (lambda: choose_rotation_base([True, 1]), r"free_per_class\[0\]"),
    (lambda: choose_rotation_base([]), "free_per_class"),
])
def test_rotation_helpers_refuse_bad_input_by_name(call, field):
    with pytest.raises(ValueError, match=rf"^{field}: "):
        call()


def test_rotation_helpers_take_numpy_integers():
    np = pytest.importorskip("numpy")
    assert chain_owner_class(np.int64(3), np.int64(1), np.int64(4)) == 0
    assert rotation_compatible(np.int64(1), np.int64(5), 4)
    assert choose_rotation_base(list(np.array([2, 5, 5, 1]))) == 1
    assert chain_owner_class(-1, 0, 3) == 2          # bases compare modulo cp_size, any sign


@pytest.mark.parametrize("make,field", [
    (lambda lay: ShardedPageAllocator(lay, True), "pages_per_rank"),
    (lambda lay: ShardedPageAllocator(lay, 2.0), "pages_per_rank"),
    (lambda lay: ShardedPageAllocator(lay, NAN), "pages_per_rank"),
    (lambda lay: ShardedPageAllocator(lay, 0), "pages_per_rank"),
    (lambda lay: ShardedPageAllocator(None, 2), "layout"),
])
def test_allocator_construction_refuses_bad_input_by_name(make, field):
    with pytest.raises(ValueError, match=rf"^{field}: "):
        make(CPLayout(cp_size=3, page_size=4))


@pytest.mark.parametrize("args,field", [((0, 0, True), "count"), ((0, 0, 2.0), "count"), ((0, 0, NAN), "count"),
                                        ((0, 0, -1), "count"), ((0.5, 0, 1), "rotation_base"),
                                        ((0, -1, 1), "start_position"), ((0, 1.5, 1), "start_position")])
def test_alloc_chain_refuses_bad_input_and_takes_nothing(args, field):
    alloc = ShardedPageAllocator(CPLayout(cp_size=3, page_size=4), 2)
    with pytest.raises(ValueError, match=rf"^{field}: "):
        alloc.alloc_chain(*args)
    assert alloc.free_per_class() == [2, 2, 2] and alloc.allocated() == frozenset()


def test_alloc_chain_huge_count_is_a_shortage_not_a_hang():
    alloc = ShardedPageAllocator(CPLayout(cp_size=3, page_size=4), 2)
    # in a daemon thread so that a regression (counting per position) fails instead of hanging
    got = []
    worker = threading.Thread(target=lambda: got.append(alloc.alloc_chain(0, 0, 10 ** 18)), daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive() and got == [None]
    assert alloc.alloc_chain(2, 5, 7) is None          # one past capacity
    assert alloc.free_per_class() == [2, 2, 2]
    pages = alloc.alloc_chain(2, 5, 6)                  # exactly capacity, odd start
    assert [p % 3 for p in pages] == [(2 + 5 + i) % 3 for i in range(6)]
    assert alloc.free_per_class() == [0, 0, 0]


def test_alloc_chain_takes_numpy_integers():
    np = pytest.importorskip("numpy")
    alloc = ShardedPageAllocator(CPLayout(cp_size=3, page_size=4), np.int64(2))
    pages = alloc.alloc_chain(np.int64(1), np.int64(0), np.int64(2))
    assert pages == [1, 2] and all(type(p) is int for p in pages)
    alloc.free(np.int64(1))
    assert alloc.allocated() == frozenset({2})


def test_free_refuses_bool_and_float_before_touching_state():
    alloc = ShardedPageAllocator(CPLayout(cp_size=2, page_size=1), pages_per_rank=2)
    alloc.alloc_chain(1, 0, 1)                          # page 1 (True == 1.0 == 1 in a set)
    for bad in (True, 1.0):
        with pytest.raises(ValueError, match="^page: "):
            alloc.free(bad)
    assert alloc.allocated() == frozenset({1}) and alloc.free_per_class() == [2, 1]
