"""The one action vocabulary: spec action = runtime event = trace record = test rule.

Each enum lists the actions of one TLA+ module in spec/. The spec defines an operator of
exactly this name (with parameters), the runtime emits an event of this name at the step
that performs it, traces record it, and stateful tests name their rules after it.
A test (tests/specs/test_vocabulary.py) checks that every name here is defined in its spec.
This module imports nothing heavy: the pure protocol layer depends on it.
"""
from __future__ import annotations

import enum


class HostTier(enum.StrEnum):
    """Device/host/storage slot lifecycle of one engine (spec/HostTier.tla)."""
    RequestMatch = "RequestMatch"            # a request matches its prefix; hit pages locked
    DeviceInsert = "DeviceInsert"            # computed pages enter the tree on device
    BackupStart = "BackupStart"              # device->host write: host slot IDLE->RESERVED
    BackupFinish = "BackupFinish"            # write done: RESERVED->SYNCED, node gains host copy
    LoadBackStart = "LoadBackStart"          # host->device load: SYNCED->PROTECTED (read-locked)
    LoadBackLayer = "LoadBackLayer"          # one layer of a load-back finished (per-layer event)
    LoadBackFinish = "LoadBackFinish"        # all layers done: PROTECTED->SYNCED, ack popped
    LoadBackFail = "LoadBackFail"            # its copy failed: PROTECTED->SYNCED, no device copy, ack popped
    DeviceEvict = "DeviceEvict"              # device copy dropped (write_back: backs up first)
    HostEvict = "HostEvict"                  # host copy dropped: SYNCED->IDLE
    StorageBackupStart = "StorageBackupStart"    # host->storage: SYNCED->BACKUP
    StorageBackupFinish = "StorageBackupFinish"  # BACKUP->SYNCED, node gains storage copy
    PrefetchStart = "PrefetchStart"          # storage->host: IDLE->RESERVED for fetched pages
    PrefetchFinish = "PrefetchFinish"        # fetched pages SYNCED and inserted (or freed on miss, or
                                             # an abandoned fetch's slots freed once its worker is done)
    RequestAbort = "RequestAbort"            # request gone: its in-flight slots are released
    RequestFinish = "RequestFinish"          # request done: its locks are released


class CPSharding(enum.StrEnum):
    """Context-parallel page placement and rotation (spec/CPSharding.tla)."""
    ChainAllocate = "ChainAllocate"          # a new chain starts on the least-full owner class
    ChainExtend = "ChainExtend"              # a cached prefix is extended, rotation kept
    InsertReject = "InsertReject"            # a splice of different rotations is declined
    PageEvict = "PageEvict"                  # a page's slot is freed on its owner rank
    OwnerBackup = "OwnerBackup"              # owner rank copies its page to host
    OwnerRestore = "OwnerRestore"            # owner rank restores to a possibly new address


class LayerPipeline(enum.StrEnum):
    """Per-layer restore -> gather -> attention with two scratch slots (spec/LayerPipeline.tla)."""
    RankRestoreLayer = "RankRestoreLayer"    # rank r finished restoring layer l
    GatherStart = "GatherStart"              # gather of layer l into slot l % 2 begins
    GatherFinish = "GatherFinish"            # slot l % 2 holds layer l on every rank
    AttentionStart = "AttentionStart"        # attention reads layer l from its slot
    AttentionFinish = "AttentionFinish"      # attention on layer l done; slot may be reused


class PPSync(enum.StrEnum):
    """Pipeline-stage agreement on ready transfers (spec/PPSync.tla)."""
    TransferIssue = "TransferIssue"          # every stage issues the next transfer, same order
    TransferComplete = "TransferComplete"    # transfer t completes on rank (s, r)
    LeaderAgree = "LeaderAgree"              # stage 0 MIN-reduces leading ready counts
    StageForward = "StageForward"            # stage s receives the count and forwards it
    StageApply = "StageApply"                # stage s waits for exactly those and applies them


class PrefixAgreement(enum.StrEnum):
    """Storage prefetch progress agreed across ranks and stages (spec/PrefixAgreement.tla)."""
    RankLoadBatch = "RankLoadBatch"          # rank r loads its next batch (may fail)
    RankPostAck = "RankPostAck"              # rank r posts one ack per batch, failures included
    PolicyDecide = "PolicyDecide"            # stage 0 decides terminate/continue; MAX spreads it
    SyncPublish = "SyncPublish"              # MIN of the acks is pushed to the ordered queue
    StageCacheCheck = "StageCacheCheck"      # stage s consumes the agreed acks at a cache check


class DraftState(enum.StrEnum):
    """Speculative-decoding dependent-state restore (spec/DraftState.tla)."""
    TransferLaunch = "TransferLaunch"        # a load-back of target + dependent pools is launched
    TargetCopyFinish = "TargetCopyFinish"    # the target KV copy finished
    DraftCopyFinish = "DraftCopyFinish"      # one dependent pool's copy finished
    CompletionFire = "CompletionFire"        # the transfer's completion event fires
    BufferRead = "BufferRead"                # a consumer reads a pool's buffer
    TransferRetire = "TransferRetire"        # a fired transfer no consumer reads any more frees its slot
    TransferAbort = "TransferAbort"          # a copying transfer whose copy failed frees its slot, never fires


class PDHandoff(enum.StrEnum):
    """Prefill-decode handoff of cached prefixes (spec/PDHandoff.tla). Each action is one
    engine's local step; messages: decode -> prefill ALLOC(i)/ABORT/DONE/CLOSED, prefill ->
    decode DATA(i)/ABORT (FIFO channels)."""
    PrefillLoadBack = "PrefillLoadBack"      # prefill moves a hit page one tier up (storage->host->device)
    PrefillSend = "PrefillSend"              # prefill takes ALLOC(i), sends DATA(i) of a loaded page
    PrefillAbort = "PrefillAbort"            # prefill aborts (own or on decode's ABORT): sends ABORT
    PrefillDrop = "PrefillDrop"              # an aborting prefill drops ALLOC/ABORT/DONE
    PrefillRelease = "PrefillRelease"        # DONE (or CLOSED after an abort): prefix unlocked
    DecodeAllocate = "DecodeAllocate"        # decode allocates page i's destination, sends ALLOC(i)
    DecodeReceive = "DecodeReceive"          # DATA(i) lands (an aborting decode then frees the page)
    DecodeRead = "DecodeRead"                # decode reads a landed page
    DecodeFinish = "DecodeFinish"            # every page read: the request runs, sends DONE
    DecodeAbort = "DecodeAbort"              # decode aborts: frees landed pages, keeps in-flight ones, ABORT
    DecodeClose = "DecodeClose"              # prefill's ABORT: decode frees everything, sends CLOSED


#: spec module name -> its action enum
SPECS: dict[str, type[enum.StrEnum]] = {
    "HostTier": HostTier,
    "CPSharding": CPSharding,
    "LayerPipeline": LayerPipeline,
    "PPSync": PPSync,
    "PrefixAgreement": PrefixAgreement,
    "DraftState": DraftState,
    "PDHandoff": PDHandoff,
}
