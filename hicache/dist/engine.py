"""The per-rank engine: serves a request stream with CP page sharding and PP stages.

Every decision that changes shared state (the tree, the allocators, the queues, the
prefetch table) is made from values all ranks agreed on, so those structures stay
identical on every rank; only byte copies are rank-local (the owner copies its pages).
One scheduler step:
  1. cache check: pp_sync agrees on counts of leading ready loads, backups and published
     prefetch acks, plus stage 0's stop verdict; every rank pops exactly those (StageApply /
     StageCacheCheck), waiting for each popped transfer, and applies them in order;
  2. (verify) a world all-gather of digests proves the ranks identical after the check;
  3. finished prefetches insert their agreed prefix; new requests are admitted (the storage
     hit length is MIN-reduced); up to max_batch ready requests are computed.
"""
from __future__ import annotations

import dataclasses
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from hicache.protocol.cp_layout import CPLayout, chain_owner_class
from hicache.protocol.digest import digest_of
from hicache.protocol.events import NULL_LISTENER, Listener
from hicache.protocol.prefix_agreement import StopInput, agreed_prefix, batch_plan, decide_terminate
from hicache.protocol.vocabulary import CPSharding, PPSync, PrefixAgreement
from hicache.storage.base import StorageBackend
from hicache.storage.counters import Count
from hicache.storage.keys import KeyDerivation, namespace_hash
from hicache.storage.keys import Topology as KeyTopology
from hicache.storage.safe import SafeConfig, SafeStorage

from .cache_model import Node, ReplicatedTree
from .comm import Comm
from .config import RunConfig, Verify
from . import fault_slot
from .errors import DistStepError
from .gather import GatherStats, PrefixGather
from .model import ModelConfig, TinyModel
from .pp_sync import pp_sync
from .prefetch import PrefetchJob, PrefetchWorker
from .transfers import CopyEngine, PageCopy, Transfer, TransferKind, TransferQueue

if TYPE_CHECKING:          # (worker imports this module)
    from .worker import Faults


@dataclass(frozen=True, slots=True)
class SeededBugs:
    """Deliberate faults for tests that show the verification catches them (off in real runs)."""
    no_wait: bool = False          # pop agreed transfers without waiting for them to finish
    corrupt_pages: bool = False    # damage every page this rank writes (wrong bytes reach readers)
    local_counts: bool = False     # apply this rank's own ready counts, not the agreed MIN (bug 5)


#: in-flight storage prefetches at most (each has a stop-vote slot in the pp_sync vector)
MAX_PREFETCHES = 2
MODEL_NAME = "hicache-tiny"


def storage_namespace(model: ModelConfig, dtype: torch.dtype) -> bytes:
    """The namespace that seeds every page key (tree identity and storage key): the model,
    every field of its config (its weights are a function of them, the seed included), and
    the format of a stored page's bytes (dtype; layers x heads x head_dim; the element
    order of a host row). Equal keys must mean equal bytes: a storage directory reused by
    a run of another model, or of other page bytes, then misses instead of serving that
    run's KV as this one's. (The PP stage is the key's topology suffix; the page size is in
    the chain itself, each step hashing one page of tokens. The `layout` setting changes no
    stored byte: the engine does not read it, and a stored page is a contiguous copy of the
    host row in the order above.)"""
    ident = "/".join(f"{k}={v}" for k, v in sorted(dataclasses.asdict(model).items()))
    fmt = (f"kv/{str(dtype).removeprefix('torch.')}/layers={model.layers}/heads={model.heads}/"
           f"head_dim={model.head_dim}/row=[layer,k|v,token,head,dim]")
    return namespace_hash(f"{MODEL_NAME}/{ident}", page_format=fmt)


def cp_query_rows(cp_rank: int, m: int, cp: int) -> range:
    """The rows of a request's m new tokens whose attention CP rank `cp_rank` computes:
    cp_rank, cp_rank + cp, ... Empty when m <= cp_rank (a request shorter than the CP group):
    that rank still takes part in every collective of the request, with an empty share, so
    the collectives line up across ranks. The shares of ranks 0..cp-1 partition range(m)."""
    if not (0 <= cp_rank < cp and m >= 0):
        raise ValueError(f"need 0 <= cp_rank < cp and m >= 0, got cp_rank={cp_rank}, cp={cp}, m={m}")
    return range(cp_rank, m, cp)


@dataclass(slots=True, eq=False)
class Request:
    rid: int
    tokens: list[int]
    pages: list[tuple[int, ...]]
    keys: list[str]                   # chained page hashes (tree identity)
    locked: list[Node] = field(default_factory=list)
    storage_keys: set[str] = field(default_factory=set)   # pages its prefetch brought in
    kv: dict[tuple[int, int], torch.Tensor] | None = None # (page j, layer) -> KV computed, until insert

    @property
    def reusable(self) -> int:
        """Pages a cache hit may cover: at least the last token is always computed (logits)."""
        if not self.pages:
            return 0
        return (len(self.tokens) - 1) // len(self.pages[0])


@dataclass(slots=True, eq=False)
class PrefetchRecord:
    """Replicated: identical on every rank except `issued_at` and `job` (local)."""
    req: Request
    start: int                        # chain position of the first prefetched page
    base: int
    parent: Node
    host_pages: list[int]
    plan: tuple[int, ...]
    published: list[int] = field(default_factory=list)
    terminated: bool = False
    issued_at: float = 0.0
    job: PrefetchJob | None = None


@dataclass(slots=True)
class Tally:
    device_tokens: int = 0
    host_tokens: int = 0
    storage_tokens: int = 0
    computed_tokens: int = 0
    input_tokens: int = 0


class Engine:
    def __init__(self, cfg: RunConfig, comm: Comm, store: StorageBackend, load_store: StorageBackend | None = None,
                 *, listener: Listener = NULL_LISTENER, bugs: SeededBugs = SeededBugs(), verify=None) -> None:
        """`verify`: the spec monitors' `VerifyConfig` (None: off); the engine's listener
        carries the other protocols' monitors, each prefix gather its own LayerPipeline one."""
        self.bugs = bugs
        self.verify = verify
        self.cfg, self.comm, self.store, self.listener = cfg, comm, store, listener
        self.topo = comm.topo
        self.layout = CPLayout(cp_size=cfg.cp, page_size=cfg.page_size)
        self.model = TinyModel(cfg.model)
        m = cfg.model
        self.stage_layers = m.layers // cfg.pp
        self.layer0 = self.topo.stage * self.stage_layers
        page_shape = (2, cfg.page_size, m.heads, m.head_dim)
        self.device_pool = torch.zeros(self.stage_layers, cfg.device_pages_per_rank, *page_shape)
        self.host_pool = torch.zeros(self.stage_layers, cfg.host_pages_per_rank, *page_shape)
        self.tree = ReplicatedTree(self.layout, cfg.device_pages_per_rank, cfg.host_pages_per_rank, listener)
        # Page keys. KeyDerivation has no page-format field, and none is needed here: its own
        # `namespace` (the model family only) seeds no chain of this engine. Every key it
        # uses comes from `page_keys` (chained from `self.namespace`: every model field and
        # the page format, from the host pool's actual dtype) and reaches storage only as
        # `_storage_key` (that key plus the PP stage suffix): the exists of an admission, the
        # reads of a prefetch (PrefetchJob.keys) and the write-through of a backup all take
        # tree keys through it. So engines of two page formats sharing a store never share a
        # key (tests/dist/test_storage_namespace.py). This KeyDerivation contributes only the
        # page size (how many tokens each chain step hashes) and the topology suffix; never
        # call its keys()/page_hashes() without parent=self.namespace.
        self.keys = KeyDerivation(model=MODEL_NAME, page_size=cfg.page_size,
                                  topology=KeyTopology(pp_rank=self.topo.stage, pp_size=cfg.pp))
        self.namespace = storage_namespace(m, self.host_pool.dtype)
        self.copies = CopyEngine(self.topo.rank, cfg.seed, max_delay_s=cfg.transfer_delay_s, listener=listener)
        self.loads = TransferQueue(TransferKind.LOAD)
        self.backups = TransferQueue(TransferKind.BACKUP)
        # Storage calls run between collectives (exists at admission, a check's write-through)
        # or gate every rank's prefetch sync (the loader's reads): each is bounded by its own
        # timeout, well under the collective one, and one past it is a counted miss (or a
        # failed write), so a slow backend never reads as a dead peer. Separate guards: the
        # loader's lingering calls do not use up the main thread's.
        bound = SafeConfig(timeout_s=cfg.storage_timeout_s)
        self.store = SafeStorage(store, bound)
        self.load_store = SafeStorage(load_store or store, bound)
        self.prefetch = PrefetchWorker(comm, self.load_store, self.host_pool, listener=listener)
        self.records: deque[PrefetchRecord] = deque()
        self.pending: deque[Request] = deque()
        self.ready: deque[Request] = deque()
        self.done = 0
        self.total = 0
        self.next_tid = 0
        self.checks = 0
        self.fault_check: int | None = None     # first cache check a seeded bug changed
        self.agreement_checks = 0
        self.violations: list[str] = []
        self.tally = Tally()
        self.gather_stats = GatherStats()
        self.pipeline_checks = {"steps": 0, "checked": 0}    # the gathers' LayerPipeline monitors
        # (page key, layer) -> every version of that page's KV written in this run. A page
        # recomputed after eviction may differ in the last bits from its stored copy (other
        # matmul shapes), so a gathered page must equal one written version exactly.
        # Filled only under verify=strict, the one level whose check reads it: it keeps a
        # clone of every page ever created (never pruned: a page that left the tree may come
        # back from storage, and which pages storage still holds is not known here).
        self.ledger: dict[tuple[str, int], list[torch.Tensor]] = {}
        self.storage_write_failures = 0
        self.applied = {"loads": 0, "backups": 0, "acks": 0}
        self.prefetches = 0
        self.terminated = 0
        self.empty_shares = 0        # requests of which this rank attended no row (m <= cp_rank)
        self.started_at = self._moved_at = time.monotonic()    # (serve restarts both)

    # --- helpers ------------------------------------------------------------------------
    def _owner_me(self, page: int) -> bool:
        return self.layout.page_owner(page) == self.topo.cp_rank

    def _local(self, page: int) -> int:
        return self.layout.local_page(page)

    def page_keys(self, tokens: list[int]) -> list[str]:
        """Tree keys of the whole pages of `tokens`, chained from the storage namespace: the one
        place this engine derives keys (see __init__)."""
        return [h.hex() for h in self.keys.page_hashes(tokens, parent=self.namespace)]

    def _storage_key(self, key: str) -> str:
        """The backend key of a tree key (exists, get and set all use this one)."""
        return key + self.keys.topology.suffix

    def _strict(self) -> bool:
        return self.cfg.verify == Verify.STRICT

    def _sampled(self, n: int) -> bool:
        return self.cfg.verify == Verify.STRICT or (self.cfg.verify == Verify.SAMPLE and n % 4 == 0)

    def digest(self) -> int:
        recs = [(r.req.rid, r.start, r.base, tuple(r.host_pages), tuple(r.published), r.terminated)
                for r in self.records]
        return digest_of((self.tree.digest(), tuple(self.loads.ids()), tuple(self.backups.ids()), tuple(recs),
                          tuple(r.rid for r in self.pending), tuple(r.rid for r in self.ready), self.done))

    def _issue(self, kind: TransferKind, copies: list[PageCopy], tag: object) -> Transfer:
        t = Transfer(self.next_tid, kind, self.stage_layers, copies, tag)
        self.next_tid += 1
        (self.loads if kind is TransferKind.LOAD else self.backups).push(t)
        self.copies.submit(t)
        self.listener(PPSync.TransferIssue, {"rank": self.topo.rank, "tid": t.tid, "kind": str(kind)})
        return t

    # --- the loop -----------------------------------------------------------------------
    def serve(self, workload: list[list[int]], faults: Faults | None = None) -> None:
        ps = self.cfg.page_size
        for rid, toks in enumerate(workload):
            full = len(toks) // ps
            pages = [tuple(toks[i * ps:(i + 1) * ps]) for i in range(full)]
            self.pending.append(Request(rid, toks, pages, self.page_keys(toks)))
        self.total = len(workload)
        # When the replicated state last changed. Every wait the loop makes is bounded by
        # timeout_s, so no change for longer is a fault (say a loader stuck in a listener):
        # the cache check then stops every rank with LocalTimeout naming what was awaited,
        # where each idle pass's successful pp_sync would otherwise count as progress for
        # the launcher's watchdog, for ever.
        self.started_at = self._moved_at = time.monotonic()
        while not self._finished():
            if faults is not None:
                faults.maybe_fire(self.topo.rank, self.checks, self)
            progressed = self.cache_check()
            progressed |= self._complete_prefetches()
            progressed |= self._admit()
            progressed |= self._compute()
            if progressed:
                self._moved_at = time.monotonic()
            else:
                self._idle_wait()
        self.prefetch.close(self.cfg.timeout_s)
        self.copies.close()

    def _finished(self) -> bool:
        # Replicated values only: every rank leaves the loop at the same step.
        return (self.done == self.total and not self.records and not self.pending and not self.ready
                and len(self.loads) == 0 and len(self.backups) == 0)

    def _idle_wait(self) -> None:
        """Nothing moved: wait (bounded) for the next local completion instead of spinning."""
        for q in (self.loads, self.backups):
            head = q.head()
            if head is not None:
                head.done.wait(0.005)
                return
        self.prefetch.wait_published(0.005)

    def _waiting_for(self) -> str:
        """What the loop waits for (the stall error's detail)."""
        parts = [f"the storage prefetch of request {r.req.rid} ({len(r.published)} of {len(r.plan)} batches "
                 f"published{', terminated' if r.terminated else ''})" for r in self.records]
        for q in (self.loads, self.backups):
            if len(q):
                parts.append(f"{len(q)} {q.kind} transfer(s) from transfer {q.head().tid} on")
        if self.ready:
            parts.append(f"device pages for request {self.ready[0].rid} ({len(self.ready)} ready)")
        return "; ".join(parts) or f"nothing ({self.done} of {self.total} requests done)"

    # --- 1. cache check -----------------------------------------------------------------
    def cache_check(self) -> bool:
        self.checks += 1
        step = f"cache_check#{self.checks}"
        # Stage 0 decides the stop policy for every in-flight prefetch (one vote slot each);
        # the MAX-reduced verdicts travel with the counts, so every stage applies the same ones.
        live = [r for r in self.records if not r.terminated]
        votes = [0] * MAX_PREFETCHES
        if self.topo.stage == 0:
            for i, rec in enumerate(live):
                inp = StopInput(elapsed_s=time.monotonic() - rec.issued_at, pages=len(rec.host_pages),
                                page_size=self.cfg.page_size, budget=self.cfg.budget)
                votes[i] = int(decide_terminate(self.cfg.policy, inp))
        # What failed on this rank since the last check (a copy thread, a prefetch thread, or
        # nothing moved for timeout_s), read once: this reading goes in the fault slot and is
        # what this rank raises below. The slot rides in the same vector (no extra round trip
        # with one stage; with more, `fault_slot.share` first reduces it over the world, since
        # the vector only goes down), so every rank, of every stage, stops at this very check,
        # naming the origin. (A failure raised here, before the exchange, would leave its
        # peers a PeerFailure on a closed connection instead.)
        world = self.topo.world
        me = self.topo.rank
        n_published, prefetch_error = self.prefetch.snapshot()
        copy_error = self.copies.failures[0][1] if self.copies.failures else None
        stalled = time.monotonic() - self._moved_at > self.cfg.timeout_s
        own = self._own_fault(copy_error, prefetch_error, stalled)
        counts = [self.loads.leading_ready(), self.backups.leading_ready(), 0 if prefetch_error else n_published,
                  fault_slot.encode(own, me, world)]
        if self.topo.pp > 1:
            # (after the counts were read: the share waits for the later stages, and ready
            # counts read after that wait would make stage 0 apply more per check than it
            # did without the share, changing the run's timing-dependent cache hits)
            counts[3] = fault_slot.share(self.comm, counts[3])
        out = pp_sync(self.comm, self.digest(), counts, votes, self.listener)
        n_load, n_backup, n_acks, fault = out.counts
        # this rank's own, first: its report names the thread and the error
        if own in (fault_slot.FaultKind.COPY_VIOLATION, fault_slot.FaultKind.COPY):
            self.copies.raise_failures(step)
        if own in (fault_slot.FaultKind.PREFETCH_VIOLATION, fault_slot.FaultKind.PREFETCH):
            self.prefetch.raise_if_failed(step)
        shared = fault_slot.decode(fault, world)
        if shared is not None:
            raise fault_slot.error(step, me, *shared, timeout_s=self.cfg.timeout_s, waiting=self._waiting_for(),
                                   context=self.prefetch.loader_state())
        if self.bugs.local_counts:
            # reference bug 5: this stage pops what it sees ready, not what every rank agreed
            n_load, n_backup = counts[0], counts[1]
            if (n_load, n_backup) != tuple(out.counts[:2]) and self.fault_check is None:
                self.fault_check = self.checks
        for rec, verdict in zip(live, out.votes):
            if verdict:
                rec.terminated = True
                self.terminated += 1
                rec.job.terminate.set()
                self.listener(PrefixAgreement.PolicyDecide, {"rank": self.topo.rank, "rid": rec.req.rid,
                                                            "terminate": True})
        wait = not self.bugs.no_wait
        for t in self.loads.pop(n_load, step, self.topo.rank, self.cfg.timeout_s, wait=wait):
            self._apply_load(t)
        writes: list[tuple[str, torch.Tensor]] = []
        for t in self.backups.pop(n_backup, step, self.topo.rank, self.cfg.timeout_s, wait=wait):
            self._apply_backup(t, writes)
        self._write_through(writes)
        for ack in self.prefetch.pop(n_acks, step, self.cfg.timeout_s):
            self._apply_ack(ack)
        applied = {"rank": self.topo.rank, "counts": [n_load, n_backup, n_acks], "check": self.checks}
        if self.bugs.local_counts:      # where the seeded fault first fired (the bug zoo reads it)
            applied["fault_check"] = self.fault_check
        self.listener(PPSync.StageApply, applied)
        if self._sampled(self.checks):
            digests = self.comm.all_gather_world_digest("verify_digest", self.digest())
            if len(set(digests)) == 1:
                self.agreement_checks += 1
            else:
                self.violations.append(f"{step}: tree/in-flight digests differ across ranks: "
                                       + ", ".join(f"{d & 0xffff:04x}" for d in digests))
        return bool(n_load or n_backup or n_acks or any(out.votes))

    @staticmethod
    def _own_fault(copy_error: BaseException | None, prefetch_error: BaseException | None,
                   stalled: bool) -> fault_slot.FaultKind | None:
        """The most important of this rank's faults (a monitor's violation is an AssertionError)."""
        K = fault_slot.FaultKind
        kinds = []
        if copy_error is not None:
            kinds.append(K.COPY_VIOLATION if isinstance(copy_error, AssertionError) else K.COPY)
        if prefetch_error is not None:
            kinds.append(K.PREFETCH_VIOLATION if isinstance(prefetch_error, AssertionError) else K.PREFETCH)
        if stalled:
            kinds.append(K.STALL)
        return min(kinds, default=None)

    def _check_applied(self, t: Transfer) -> None:
        if not t.done.is_set() or not t.bytes_match():
            self.violations.append(f"rank {self.topo.rank}: {t.kind} transfer {t.tid} applied before it completed")

    def _apply_load(self, t: Transfer) -> None:
        self._check_applied(t)
        for node in t.tag:
            node.loading = None
        self.applied["loads"] += 1

    def _apply_backup(self, t: Transfer, writes: list[tuple[str, torch.Tensor]]) -> None:
        self._check_applied(t)
        nodes: list[Node] = t.tag
        for node in nodes:
            node.backing_up = False
            self.listener(CPSharding.OwnerBackup, {"rank": self.topo.rank, "key": node.key,
                                                  "owner": self.layout.page_owner(node.host_page)})
        # Storage backup of the owner's pages (write-through, `_write_through`). A copy, never
        # a view of the host row: a write that outlives its timeout lands later, when the row
        # may hold another page.
        for n in nodes:
            if self._owner_me(n.host_page):
                row = self.host_pool[:, self._local(n.host_page)]
                writes.append((self._storage_key(n.key),
                               row.clone(memory_format=torch.contiguous_format).view(torch.uint8).reshape(-1)))
        self.applied["backups"] += 1

    def _write_through(self, writes: list[tuple[str, torch.Tensor]]) -> None:
        """One storage call for the backups a cache check applied (one bounded wait between
        two collectives, however many backups); a failed write is just a miss later."""
        if not writes:
            return
        try:
            stored = self.store.batch_set([k for k, _ in writes], [v for _, v in writes])
            self.storage_write_failures += sum(1 for s in stored if not s)
        except Exception:
            self.storage_write_failures += len(writes)

    def _apply_ack(self, ack) -> None:
        rec = next((r for r in self.records if r.req.rid == ack.rid), None)
        if rec is None or ack.batch != len(rec.published):
            raise RuntimeError(f"rank {self.topo.rank}: published ack {ack} out of order")
        rec.published.append(ack.pages)
        self.applied["acks"] += 1

    # --- 2. prefetch completion ----------------------------------------------------------
    def _complete_prefetches(self) -> bool:
        moved = False
        while self.records and len(self.records[0].published) == len(self.records[0].plan):
            rec = self.records.popleft()
            k = agreed_prefix(rec.plan, rec.published)
            req = rec.req
            self.listener(PrefixAgreement.StageCacheCheck, {"rank": self.topo.rank, "rid": req.rid, "pages": k})
            for page in rec.host_pages[k:]:
                self.tree.host.free(page)
            if k:
                nodes = self.tree.insert(rec.parent, rec.start, req.pages[rec.start:rec.start + k],
                                         req.keys[rec.start:rec.start + k], rec.base, host_pages=rec.host_pages[:k])
                req.storage_keys = {n.key for n in nodes}
            self._unlock(req)
            self.ready.append(req)
            moved = True
        return moved

    # --- 3. admission ----------------------------------------------------------------------
    def _admit(self) -> bool:
        admitted = False
        while self.pending and len(self.records) < MAX_PREFETCHES and len(self.ready) < self.cfg.max_batch:
            self._admit_one()
            admitted = True
        return admitted

    def _admit_one(self) -> None:
        req = self.pending.popleft()
        path = self.tree.match(req.pages[:req.reusable])
        self._lock(req, path)
        start = len(path)
        base = path[-1].base if path else self.tree.device.new_chain_base()
        rest = list(range(start, req.reusable))
        # Storage hit length: this rank checks the pages it would own; MIN over every rank.
        mine = [p for p in rest if chain_owner_class(base, p, self.cfg.cp) == self.topo.cp_rank]
        local_hit = self._storage_exists([self._storage_key(req.keys[p]) for p in mine])
        # leading positions present as far as this rank knows: up to its first missing page
        lead = len(rest) if local_hit >= len(mine) else mine[local_hit] - start
        out = self.comm.checked_min("storage_query", None, self.digest(), [lead])
        hit = out.counts[0]
        host_pages = []
        for p in range(start, start + hit):
            page = self.tree.alloc_host(base, p)
            if page is None:
                break
            host_pages.append(page)
        if not host_pages:
            self.ready.append(req)
            return
        parent = path[-1] if path else self.tree.root
        rec = PrefetchRecord(req, start, base, parent, host_pages,
                             batch_plan(len(host_pages), self.cfg.prefetch_batch_pages), issued_at=time.monotonic())
        rows = [self._local(h) if self._owner_me(h) else None for h in host_pages]
        rec.job = PrefetchJob(req.rid, rec.plan, [self._storage_key(req.keys[start + i]) for i in range(len(host_pages))],
                              rows)
        self.records.append(rec)
        self.prefetches += 1
        self.prefetch.submit(rec.job)

    def _storage_exists(self, keys: list[str]) -> int:
        if not keys:
            return 0
        try:
            n = self.store.batch_exists(keys)
        except Exception:   # a backend error is a miss (bug 14), never a dead step
            return 0
        return n if isinstance(n, int) else 0

    def _lock(self, req: Request, nodes: list[Node]) -> None:
        for n in nodes:
            n.lock += 1
        req.locked.extend(nodes)
        self.tree.touch(nodes)

    def _unlock(self, req: Request) -> None:
        for n in req.locked:
            n.lock -= 1
        req.locked.clear()

    # --- 4. compute ------------------------------------------------------------------------
    def _compute(self) -> bool:
        batch, plans = [], []
        while self.ready and len(batch) < self.cfg.max_batch:
            req = self.ready.popleft()
            plan = self._plan(req)
            if plan is None:       # deferred: retried after the next cache check, same on every rank
                self.ready.appendleft(req)
                break
            batch.append(req)
            plans.append(plan)
        for req, plan in zip(batch, plans):     # all allocations happened before any insert
            self._forward(req, *plan)
        for req, plan in zip(batch, plans):
            self._insert(req, *plan)
            self._unlock(req)
            self.done += 1
        return bool(batch)

    def _plan(self, req: Request):
        """Match, allocate the rest of the chain in one all-or-nothing call, issue the
        load-back of the host run. None: the device is full of pages whose backups or loads
        are still in flight, so the request waits for a cache check instead of going uncached."""
        ps = self.cfg.page_size
        path = self.tree.match(req.pages[:req.reusable])
        self._lock(req, path)
        dev = 0
        while dev < len(path) and path[dev].device_page is not None:
            dev += 1
        host_run: list[Node] = []
        for node in path[dev:]:
            if node.host_page is None or node.backing_up:
                break
            host_run.append(node)
        # One chain, one rotation: every node of a path shares its base (inserts reject others).
        if path:
            base = path[0].base
            self.listener(CPSharding.ChainExtend, {"rid": req.rid, "base": base, "start": dev})
        else:
            base = self.tree.device.new_chain_base()
            self.listener(CPSharding.ChainAllocate, {"rid": req.rid, "base": base})
        total = len(req.pages) - dev
        pages = self.tree.alloc_device(base, dev, total) if total else []
        if pages is None:
            if len(self.backups) or len(self.loads):
                self._unlock(req)
                return None
            host_run = []                        # serve the rest uncached
        loaded = host_run
        for node, page in zip(loaded, pages or ()):
            node.device_page = page
        if loaded:
            copies = [PageCopy(self.host_pool, self._local(n.host_page), self.device_pool, self._local(n.device_page))
                      for n in loaded if self._owner_me(n.device_page)]
            t = self._issue(TransferKind.LOAD, copies, loaded)
            for n in loaded:
                n.loading = t
                self.listener(CPSharding.OwnerRestore, {"rank": self.topo.rank, "key": n.key,
                                                       "owner": self.layout.page_owner(n.device_page)})
        c = dev + len(loaded)
        n_storage = sum(1 for n in loaded if n.key in req.storage_keys)
        self.tally.device_tokens += dev * ps
        self.tally.storage_tokens += n_storage * ps
        self.tally.host_tokens += (len(loaded) - n_storage) * ps
        self.tally.computed_tokens += len(req.tokens) - c * ps
        self.tally.input_tokens += len(req.tokens)
        new_pages = None if pages is None else pages[len(loaded):]
        return path[:c], base, new_pages

    def _forward(self, req: Request, prefix: list[Node], base: int, new_pages: list[int] | None) -> None:
        cfg, ps, topo = self.cfg, self.cfg.page_size, self.topo
        c = len(prefix)
        new = req.tokens[c * ps:]
        m = len(new)
        d = cfg.model.hidden
        if topo.stage == 0:
            h = self.model.embed_tokens(new, c * ps)
        else:
            h = torch.empty(m, d)
            self.comm.recv_vec(f"pp_hidden[{req.rid}]", h, src=topo.prev_rank)
        waits = {id(n.loading): n.loading for n in prefix if n.loading is not None}
        gather = None
        if c:
            def restored(layer: int) -> bool:
                ok = all(t.layer_done[layer].wait(cfg.timeout_s) for t in waits.values())
                for t in waits.values():
                    if t.error is not None:     # the restore's bytes are not there
                        raise DistStepError(f"restore[{layer}]", topo.rank,
                                            f"load transfer {t.tid} failed on its copy thread: {t.error!r}")
                return ok
            gather = PrefixGather(self.comm, self.layout, self.device_pool, [n.device_page for n in prefix],
                                  restored, overlap=cfg.overlap, timeout_s=cfg.timeout_s, stats=self.gather_stats,
                                  listener=self.listener, verify=self.verify)
            gather.start()
        q_pos = torch.arange(c * ps, c * ps + m)
        # (not torch.arange(cp_rank, m, cp): it raises for a rank past the last row, cp_rank > m)
        mine = torch.tensor(cp_query_rows(topo.cp_rank, m, cfg.cp), dtype=torch.long)
        width = len(cp_query_rows(0, m, cfg.cp))     # the largest share: rank 0's
        self.empty_shares += not len(mine)
        req_kv = {}
        for l in range(self.stage_layers):
            g = self.layer0 + l
            q, k, v = self.model.qkv(g, h)
            for j in range(len(req.pages) - c):
                kv = torch.stack([k[j * ps:(j + 1) * ps], v[j * ps:(j + 1) * ps]])
                req_kv[(j, g)] = kv
                if new_pages and self._owner_me(new_pages[j]):
                    self.device_pool[l, self._local(new_pages[j])] = kv
            if c:
                buf = gather.acquire(l)
                if self._strict():
                    for i, node in enumerate(prefix):
                        if not any(torch.equal(buf[i], w) for w in self.ledger.get((node.key, g), ())):
                            self.violations.append(f"rank {topo.rank}: gathered bytes of page {node.key[:8]} "
                                                   f"layer {g} differ from the KV written for those tokens")
                keys_ = torch.cat([buf[:, 0].reshape(c * ps, *k.shape[1:]), k])
                vals_ = torch.cat([buf[:, 1].reshape(c * ps, *v.shape[1:]), v])
            else:
                keys_, vals_ = k, v
            part = self.model.attend(q[mine], keys_, vals_, q_pos[mine])
            if c:
                gather.release(l)
            attn = self._cp_assemble(part, m, width, f"cp_attn[{req.rid},{g}]")
            h = self.model.finish_layer(g, h, attn)
        if gather is not None:
            gather.close()
            if gather.monitor is not None:
                self.pipeline_checks["steps"] += gather.monitor.steps
                self.pipeline_checks["checked"] += gather.monitor.checked
        if topo.next_rank is not None:
            self.comm.send_vec(f"pp_hidden[{req.rid}]", h.contiguous(), dst=topo.next_rank)
        elif self._sampled(req.rid):
            ref, _ = self.model.reference(req.tokens)
            got = self.model.logits(h)
            if not torch.allclose(got, ref[c * ps:], atol=1e-4, rtol=1e-4):
                err = (got - ref[c * ps:]).abs().max().item()
                self.violations.append(f"rank {topo.rank}: request {req.rid} logits differ from a full recompute "
                                       f"by {err:.2e} (cached prefix {c} pages)")
        req.kv = req_kv

    def _cp_assemble(self, part: torch.Tensor, m: int, width: int, label: str) -> torch.Tensor:
        """All-gather each CP rank's attention rows (`cp_query_rows`) into [m, d]. Every
        rank sends `width` rows (its share, zero-padded; an empty share is all padding)."""
        cp = self.cfg.cp
        if cp == 1:
            return part
        send = torch.zeros(width, part.shape[1])
        send[:part.shape[0]] = part
        rows = [torch.empty_like(send) for _ in range(cp)]
        self.comm.run_step(label, lambda: dist.all_gather(rows, send, group=self.comm.cp_group))
        out = torch.empty(m, part.shape[1])
        for r in range(cp):
            n = len(cp_query_rows(r, m, cp))
            out[r::cp] = rows[r][:n]
        return out

    def _insert(self, req: Request, prefix: list[Node], base: int, new_pages: list[int] | None) -> None:
        c = len(prefix)
        kv, req.kv = req.kv, None
        if not new_pages:
            return
        parent = prefix[-1] if prefix else self.tree.root
        nodes = self.tree.insert(parent, c, req.pages[c:], req.keys[c:], base, device_pages=new_pages)
        created = [(j, n) for j, n in enumerate(nodes) if n.device_page == new_pages[j] and n.host_page is None
                   and not n.backing_up]
        if self.bugs.corrupt_pages:
            for _, n in created:
                if self._owner_me(n.device_page):
                    self.device_pool[:, self._local(n.device_page)] += 1.0
        backed = []
        strict = self._strict()
        for j, n in created:
            if strict:          # only the strict check reads the ledger (see __init__)
                for g in range(self.layer0, self.layer0 + self.stage_layers):
                    versions = self.ledger.setdefault((n.key, g), [])
                    if not any(torch.equal(kv[(j, g)], w) for w in versions):
                        versions.append(kv[(j, g)].clone())
            page = self.tree.alloc_host(n.base, n.position)
            if page is None:
                continue
            n.host_page, n.backing_up = page, True
            backed.append(n)
        if backed:
            copies = [PageCopy(self.device_pool, self._local(n.device_page), self.host_pool, self._local(n.host_page))
                      for n in backed if self._owner_me(n.device_page)]
            self._issue(TransferKind.BACKUP, copies, backed)

    def report(self) -> dict:
        t = dataclasses.asdict(self.tally)
        return {
            "rank": self.topo.rank, "stage": self.topo.stage, "cp_rank": self.topo.cp_rank,
            "requests": self.done, "cache_checks": self.checks, "agreement_checks": self.agreement_checks,
            "violations": self.violations, "tally": t, "applied": dict(self.applied),
            "rejected_inserts": self.tree.rejected_inserts, "evicted_device": self.tree.evicted_device,
            "evicted_host": self.tree.evicted_host, "gather": self.gather_stats.as_dict(),
            "prefetches": self.prefetches, "terminated_prefetches": self.terminated,
            "prefetch_loaded_pages": self.prefetch.loaded_pages, "prefetch_failed_batches": self.prefetch.failed_batches,
            "storage_write_failures": self.storage_write_failures,
            # storage calls past their own bound (each a miss or a failed write)
            "storage_timeouts": self.store.counters[Count.CALL_TIMEOUT] + self.load_store.counters[Count.CALL_TIMEOUT],
            "final_digest": self.digest(),
            "fault_check": self.fault_check, "empty_shares": self.empty_shares,
        }
