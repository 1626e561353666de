"""Distributed coordination on torch.distributed (gloo on CPU): the adapters around
hicache.protocol's pure decisions.

Modules, one job each:
  topology      rank layout (global rank = stage * cp + cp_rank)
  comm          process groups, checked collectives ([step, -step, digest, -digest]), watchdog
  pp_sync       stage 0 MIN-reduces ready counts and sends them down the pipeline
  fault_slot    a rank's own failure at a cache check, shared so every rank stops there
  transfers     device<->host page copies on copy threads; ordered queues popped by agreement
  prefetch      storage loader + sync thread (MIN per ack on a dedicated group) + ordered acks
  gather        per-layer double-buffered gather of a CP-sharded prefix
  cache_model   replicated page tree with CP rotation bases (identical on every rank)
  model         the small seeded transformer `hicache run` serves
  engine        one rank's scheduler loop tying the above together
  worker/runner/launch  process entry, whole-run driver, process launcher
  gather_bench  per-layer gather cost with and without overlap
See docs/distributed.md.
"""
