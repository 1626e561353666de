"""A rank entry that gathers a CP-sharded prefix together with its dependent pools and
reports what each rank received (tests/draft/test_cp_gather.py).

Every rank stamps its own pages of the target pool and of each dependent pool with a digest
of (pool, logical page, layer), runs one `PrefixGather` per case (the consumer loop of a
forward pass: acquire/release per layer, then `dependent(role)` per pool), and compares
every gathered page with the stamp of the page it should be. A strict DraftState monitor
(`hicache.monitors.maps.draft_state`) may watch the gather's ledger; a violation is reported
with its kind, property, action and conjunct. Launch with
`hicache.dist.launch.launch(gather_deps_rank, cp, payload)`.
"""
from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch

from hicache.protocol.cp_layout import CPLayout

from .comm import Comm
from .topology import Topology


def stamp(tag: str, page: int, layer: int, nbytes: int) -> torch.Tensor:
    """The bytes page `page`, layer `layer` of pool `tag` holds."""
    seed = hashlib.sha256(f"{tag}/{page}/{layer}".encode()).digest()
    reps = -(-nbytes // len(seed))
    return torch.from_numpy(np.frombuffer(seed * reps, dtype=np.uint8)[:nbytes].copy())


def _pool(tag: str, layers: int, local_pages: int, page_shape: tuple, dtype: torch.dtype,
          layout: CPLayout, me: int) -> torch.Tensor:
    """This rank's pool, its local page j holding the stamps of logical page (me, j)."""
    t = torch.zeros(layers, local_pages, *page_shape, dtype=dtype)
    raw = t.view(layers, local_pages, -1).view(torch.uint8)
    for layer in range(layers):
        for j in range(local_pages):
            raw[layer, j] = stamp(tag, layout.logical_page(me, j), layer, raw.shape[2])
    return t


def _wrong(tag: str, got: torch.Tensor, pages: list[int], first_layer: int = 0) -> list[tuple[int, int]]:
    """(layer, page) of every gathered page ([layers, pages, ...], the first being
    `first_layer`) whose bytes are not that page's stamp."""
    nl = got.shape[0]
    raw = got.reshape(nl, len(pages), -1).view(torch.uint8)
    return [(first_layer + i, p) for i in range(nl) for k, p in enumerate(pages)
            if not torch.equal(raw[i, k], stamp(tag, p, first_layer + i, raw.shape[2]))]


def _page_shape(c) -> tuple:
    return (c.kv, c.page_size, c.heads, c.head_dim)


def gather_deps_rank(rank: int, world: int, port: int, payload: dict[str, Any]) -> list[dict]:
    from hicache.monitors.maps.draft_state import DraftStateMap
    from hicache.monitors.runtime import Monitor, ProtocolViolation, VerifyConfig
    from hicache.runtime.draft import DependentSet
    from hicache.runtime.events import EventBus, Recorder

    from . import gather as G
    comm = Comm(rank, world, port, payload.get("timeout_s", 30.0))
    out = []
    try:
        comm.build_groups(Topology(cp=world, pp=1, rank=rank))
        layout_me = comm.topo.cp_rank
        for case in payload["cases"]:
            G.FAULTS.skip_dependent_gather = bool(case.get("fault"))
            dcfg = case["draft"]
            tcfg = dcfg.target
            layout = CPLayout(cp_size=world, page_size=tcfg.page_size)
            local = case["local_pages"]
            dtype = getattr(torch, tcfg.dtype)
            target = _pool("target", tcfg.layers, local, _page_shape(tcfg), dtype, layout, layout_me)
            pools = {}
            for spec in dcfg.pools:
                pc = dcfg.pool_config(spec)
                pools[spec.role] = _pool(spec.role.value, pc.layers, local, _page_shape(pc),
                                         getattr(torch, pc.dtype), layout, layout_me)
            deps = DependentSet(dcfg, EventBus())       # the ledger and bus only: no cache here
            rec = Recorder()
            deps.bus.subscribe(rec)
            mon = None
            if case.get("monitor"):
                mon = Monitor(DraftStateMap(deps, actions=case.get("actions", True)),
                              VerifyConfig(mode="strict", violation_dir=payload["violation_dir"]))
                deps.bus.subscribe(mon)
            pages = list(case["pages"])
            g = G.PrefixGather(comm, layout, target, pages, lambda layer: True, overlap=case["overlap"],
                               timeout_s=payload.get("timeout_s", 30.0), stats=G.GatherStats(),
                               deps=deps, dep_pools=pools)
            res: dict[str, Any] = {"violation": None, "wrong": {}, "selected": {}}
            try:
                g.start()
                for layer in range(tcfg.layers):
                    buf = g.acquire(layer)
                    bad = _wrong("target", buf.unsqueeze(0), pages, layer)
                    if bad:
                        res["wrong"].setdefault("target", []).extend(bad)
                    g.release(layer)
                for spec in dcfg.pools:
                    sel = deps.pages_of(spec.role, pages)
                    res["selected"][spec.role.value] = sel
                    bad = _wrong(spec.role.value, g.dependent(spec.role), sel)
                    if bad:
                        res["wrong"][spec.role.value] = bad
                g.close()
            except ProtocolViolation as exc:
                res["violation"] = {"kind": exc.kind, "property": exc.property, "action": exc.action,
                                    "conjunct": exc.conjunct, "location": exc.location, "step": exc.step,
                                    "trace": exc.trace_path}
                try:
                    g.close()
                except ProtocolViolation:
                    pass
            res["events"] = [(str(e.action), e.args.get("p")) for e in rec.events]
            res["checked"] = (mon.checked, mon.steps) if mon is not None else None
            out.append(res)
        G.FAULTS.skip_dependent_gather = False
        comm.barrier("gather_deps_done")
    finally:
        comm.close()
    return out
