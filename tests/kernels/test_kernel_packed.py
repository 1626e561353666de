"""Packed target+draft transfer equals two separate transfers; sidecar indices derive by policy."""
import pytest
import torch

from hicache.kernels import dispatch, packed
from hicache.kernels.layout import Layout
from hicache.kernels.packed import Direction, HitPolicy, IndexSource, SidecarSpec, sidecar_pages
from kernel_testlib import host_shape, naive_transfer, random_bits, random_pages, same_bits

RUN = {"triton": packed.transfer_packed_triton, "torch": packed.transfer_packed_torch,
       "native": packed.transfer_packed_native}


@pytest.mark.parametrize("host_layout", list(Layout), ids=str)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float8_e4m3fn], ids=str)
def test_packed_backup_and_load_back(copy_impl, gen, host_layout, dtype):
    c, lt, ld, h, d, ps, dev_pages, host_pages, n = 2, 3, 1, 3, 5, 16, 5, 6, 3
    target = random_bits((c, lt, dev_pages * ps, h, d), dtype, gen)
    draft = random_bits((c, ld, dev_pages * ps, h, d), dtype, gen)
    host = random_bits(host_shape(host_layout, c, lt + ld, host_pages, ps, h, d), dtype, gen)
    dev_ids, host_ids = random_pages(n, dev_pages, gen), random_pages(n, host_pages, gen)

    # Expected: the draft's layers are the host pool's tail layers.
    combined = torch.cat([target, draft], dim=1)
    expected_host = naive_transfer(combined, Layout.LAYER_FIRST, host, host_layout, dev_ids, host_ids, ps,
                                   range(lt + ld))
    RUN[copy_impl](target, draft, host, dev_ids, host_ids, direction=Direction.TO_HOST, page_size=ps,
              host_layout=host_layout)
    assert same_bits(host, expected_host)

    load_ids = random_pages(n, dev_pages, gen)
    expected_dev = naive_transfer(host, host_layout, combined, Layout.LAYER_FIRST, host_ids, load_ids, ps,
                                  range(lt + ld))
    RUN[copy_impl](target, draft, host, load_ids, host_ids, direction="to_device", page_size=ps,
              host_layout=host_layout)
    assert same_bits(target, expected_dev[:, :lt]) and same_bits(draft, expected_dev[:, lt:])


def test_packed_is_one_plan_with_two_segments():
    target, draft = torch.zeros(2, 3, 8, 2, 4), torch.zeros(2, 2, 8, 2, 4)
    host = torch.zeros(2, 5, 16, 2, 4)
    plan = packed.plan_packed(target, draft, host, torch.tensor([1]), torch.tensor([3]),
                              direction=Direction.TO_HOST, page_size=4)
    assert [(s.layers, s.src_layer0, s.dst_layer0) for s in plan.segments] == [(3, 0, 0), (2, 0, 3)]


@pytest.mark.parametrize("case,msg", [
    ("draft-row", "sidecar"), ("draft-slots", "sidecar"), ("host-layers", "layers"),
    ("dtype", "dtypes differ"), ("duplicate", "duplicate"),
])
def test_incompatible_packing_raises(copy_impl, case, msg):
    target, draft = torch.zeros(2, 3, 8, 2, 4), torch.zeros(2, 1, 8, 2, 4)
    host = torch.zeros(2, 4, 16, 2, 4)
    dev_ids, host_ids = torch.tensor([0, 1]), torch.tensor([2, 3])
    if case == "draft-row":
        draft = torch.zeros(2, 1, 8, 1, 4)
    elif case == "draft-slots":
        draft = torch.zeros(2, 1, 12, 2, 4)
    elif case == "host-layers":
        host = torch.zeros(2, 3, 16, 2, 4)
    elif case == "dtype":
        draft = draft.half()
    elif case == "duplicate":
        host_ids = torch.tensor([2, 2])
    with pytest.raises(ValueError, match=msg):
        RUN[copy_impl](target, draft, host, dev_ids, host_ids, direction="to_host", page_size=4)


def test_sidecar_all_pages_maps_through_the_index_map():
    spec = SidecarSpec(name="draft_indexer", source=IndexSource.TARGET_KV)
    index_map = torch.tensor([7, -1, 5, 0, 2])
    assert sidecar_pages(spec, torch.tensor([4, 0, 3]), index_map).tolist() == [2, 7, 0]
    assert sidecar_pages(spec, torch.tensor([4, 0, 3]), None).tolist() == [4, 0, 3]


def test_sidecar_trailing_pages_keep_only_the_end_of_the_prefix():
    spec = SidecarSpec(name="recurrent_state", source=IndexSource.STATE,
                       hit_policy=HitPolicy.TRAILING_PAGES, trailing=2)
    assert sidecar_pages(spec, torch.tensor([6, 2, 9, 4]), None).tolist() == [9, 4]
    assert sidecar_pages(spec, torch.tensor([6]), None).tolist() == [6]
    # A page before the trailing window may lack a sidecar page; only selected pages must map.
    index_map = torch.full((10,), -1, dtype=torch.int64)
    index_map[9], index_map[4] = 1, 0
    assert sidecar_pages(spec, torch.tensor([6, 2, 9, 4]), index_map).tolist() == [1, 0]


@pytest.mark.parametrize("pages,msg", [(torch.tensor([1]), "no draft_indexer page"),
                                        (torch.tensor([5]), "out of range")])
def test_sidecar_unmapped_or_out_of_map_raises(pages, msg):
    spec = SidecarSpec(name="draft_indexer")
    with pytest.raises(ValueError, match=msg):
        sidecar_pages(spec, pages, torch.tensor([7, -1, 5, 0, 2]))


def test_sidecar_spec_is_validated_once():
    with pytest.raises(ValueError, match="trailing"):
        SidecarSpec(name="swa", hit_policy="trailing_pages", trailing=0)
    with pytest.raises(ValueError):
        SidecarSpec(name="swa", hit_policy="newest")


def test_sidecar_transfer_moves_derived_pages(copy_impl, gen):
    dispatch.set_backend(copy_impl)
    try:
        # A draft indexer pool: its own shape and dtype (fp8 rows [1, 12]), pages mapped from target KV.
        ps = 4
        device = random_bits((1, 2, 6 * ps, 1, 12), torch.float8_e4m3fn, gen)
        host = random_bits((1, 2, 5 * ps, 1, 12), torch.float8_e4m3fn, gen)
        spec = SidecarSpec(name="draft_indexer")
        dev_map = torch.tensor([3, 5, 0, 1, 2, 4, -1, -1])       # target page -> indexer page
        target_dev_pages, target_host_pages = torch.tensor([0, 4, 1]), torch.tensor([2, 0, 4])
        expected = naive_transfer(device, Layout.LAYER_FIRST, host, Layout.LAYER_FIRST,
                                  dev_map[target_dev_pages], target_host_pages, ps, range(2))
        got = dispatch.transfer_sidecar(spec, device, host, target_dev_pages, target_host_pages, page_size=ps,
                                        src_map=dev_map)
        assert got.tolist() == [2, 0, 4]
        assert same_bits(host, expected)
    finally:
        dispatch.set_backend(None)


@pytest.mark.parametrize("host_layout", [Layout.LAYER_FIRST, Layout.PAGE_FIRST], ids=str)
def test_per_layer_packed_load_moves_draft_with_the_last_target_layer(copy_impl, gen, host_layout):
    c, lt, ld, h, d, ps, pages = 2, 3, 2, 1, 6, 4, 5
    target = random_bits((c, lt, pages * ps, h, d), torch.bfloat16, gen)
    draft = random_bits((c, ld, pages * ps, h, d), torch.bfloat16, gen)
    host = random_bits(host_shape(host_layout, c, lt + ld, pages, ps, h, d), torch.bfloat16, gen)
    dev_ids, host_ids = torch.tensor([3, 0]), torch.tensor([1, 4])
    before_target, before_draft = target.clone(), draft.clone()
    combined = torch.cat([target, draft], dim=1)
    expected = naive_transfer(host, host_layout, combined, Layout.LAYER_FIRST, host_ids, dev_ids, ps,
                              range(lt + ld))
    for layer in range(lt - 1):
        RUN[copy_impl](target, draft, host, dev_ids, host_ids, direction="to_device", page_size=ps,
                  host_layout=host_layout, layer=layer)
        assert same_bits(draft, before_draft)                       # draft waits for the last layer
        assert same_bits(target[:, layer], expected[:, layer])
        assert same_bits(target[:, layer + 1:], before_target[:, layer + 1:])
    RUN[copy_impl](target, draft, host, dev_ids, host_ids, direction="to_device", page_size=ps,
              host_layout=host_layout, layer=lt - 1)
    assert same_bits(target, expected[:, :lt]) and same_bits(draft, expected[:, lt:])
    plan = packed.plan_packed(target, draft, host, dev_ids, host_ids, direction="to_device", page_size=ps,
                              host_layout=host_layout, layer=lt - 1)
    assert len(plan.segments) == 2                                   # one launch covers both
    with pytest.raises(ValueError, match="layer 3 out of range"):
        RUN[copy_impl](target, draft, host, dev_ids, host_ids, direction="to_device", page_size=ps,
                  host_layout=host_layout, layer=lt)
