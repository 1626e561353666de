"""The fault slot's encoding: the MIN over ranks names the most important fault kind, then the
lowest rank that has it; no fault is above every fault (so one fault anywhere wins the MIN)."""
import itertools

import pytest

from hicache.dist.fault_slot import FaultKind, decode, encode, none_code


@pytest.mark.parametrize("world", [1, 2, 4, 6])
def test_every_kind_and_rank_round_trips_and_none_is_above_all(world):
    codes = set()
    for kind, rank in itertools.product(FaultKind, range(world)):
        code = encode(kind, rank, world)
        assert decode(code, world) == (kind, rank) and code < none_code(world)
        codes.add(code)
    assert len(codes) == len(FaultKind) * world
    assert encode(None, 0, world) == none_code(world) and decode(none_code(world), world) is None


def test_the_min_names_the_most_important_kind_then_the_lowest_rank():
    world = 4
    # rank 0 stalled, rank 3's prefetch thread failed, rank 2's copy thread failed
    slots = [encode(FaultKind.STALL, 0, world), encode(None, 1, world), encode(FaultKind.COPY, 2, world),
             encode(FaultKind.PREFETCH, 3, world)]
    assert decode(min(slots), world) == (FaultKind.COPY, 2)
    slots[3] = encode(FaultKind.PREFETCH_VIOLATION, 3, world)
    assert decode(min(slots), world) == (FaultKind.PREFETCH_VIOLATION, 3)
    assert decode(min(encode(FaultKind.PREFETCH, r, world) for r in (3, 1, 2)), world) == (FaultKind.PREFETCH, 1)


@pytest.mark.parametrize("code", [-1, 4 * len(FaultKind) + 1])
def test_a_code_outside_the_slot_is_refused(code):
    with pytest.raises(ValueError, match="is not a fault code"):
        decode(code, 4)


def test_a_rank_outside_the_world_is_refused():
    with pytest.raises(ValueError, match="rank 4 is not in a world of 4"):
        encode(FaultKind.COPY, 4, 4)
