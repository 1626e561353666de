import random

import pytest

from hicache.runtime.allocator import (TRANSITIONS, HostSlots, HostSlotState as S, PageAllocator,
                                       SlotStateError)


def test_page_allocator_is_a_stack():
    a = PageAllocator(4)
    assert a.alloc(2) == [0, 1]
    assert a.alloc(3) is None          # expected shortage: None, nothing taken
    assert a.free == 2
    a.release([1])
    assert a.alloc(2) == [1, 2]
    assert a.alloc(0) == []
    assert a.free_set() == {3}


def test_page_allocator_free_count_follows_the_free_list():
    # (`free` is a count alloc and release keep, read by the monitors at every event: it
    # must stay the free list's size through any sequence, an iterator released included)
    rng = random.Random(0)
    a, held = PageAllocator(16), []
    for _ in range(500):
        if held and rng.random() < 0.5:
            k = rng.randint(1, len(held))
            back, held = held[:k], held[k:]
            a.release(iter(back) if rng.random() < 0.3 else back)
        else:
            got = a.alloc(rng.randint(-1, 6))
            held += got or []
        assert a.free == len(a.free_set()) == 16 - len(held)


def test_host_slot_lifecycle():
    h = HostSlots(3)
    s = h.reserve(2)
    assert s == [0, 1] and h.all_in(s, S.RESERVED) and h.free == 1
    h.move(s, S.RESERVED, S.SYNCED)
    h.move(s, S.SYNCED, S.PROTECTED)
    h.move(s, S.PROTECTED, S.SYNCED)
    h.move(s, S.SYNCED, S.BACKUP)
    h.move(s, S.BACKUP, S.SYNCED)
    h.move(s, S.SYNCED, S.IDLE)
    assert h.free == 3 and h.all_in([0, 1, 2], S.IDLE)


@pytest.mark.parametrize("src", list(S))
@pytest.mark.parametrize("dst", list(S))
def test_only_listed_edges_are_legal(src, dst):
    h = HostSlots(1)
    if (src, dst) not in TRANSITIONS:
        with pytest.raises(SlotStateError, match=f"{src.name}->{dst.name}"):
            h.move([0], src, dst)


def test_guard_checks_the_current_state():
    h = HostSlots(2)
    s = h.reserve(1)
    with pytest.raises(SlotStateError, match=r"SYNCED->PROTECTED on slots \[\(0, 'RESERVED'\)\]"):
        h.move(s, S.SYNCED, S.PROTECTED)      # a load of a slot still being written
    assert h.all_in(s, S.RESERVED)            # a failed transition changes nothing
