"""The cache runtime of one engine (one rank): real KV bytes, real threads, real storage.

Modules, one job each:
  config     frozen, validated CacheConfig; policy enums (write, prefetch stop, host layout)
  hashing    chained SHA-256 page hashes (the one storage key derivation)
  radix      page-granular radix tree: match/insert/split, locks, LRU victim heaps
  allocator  O(1) free lists; host slot state machine with guarded transitions
  pools      device and host KV pools (raw bytes; layer_first / page_first / page_first_direct)
  copy       page copies between pools (through hicache.kernels)
  transfer   background worker threads with ordered ack queues; per-layer load ops
  cache      HiCache: tiers, write policies, load-back, storage prefetch/backup, stop policies
  events     EventBus: HostTier protocol events, free when nobody listens
  metrics    counters per tier; Prometheus export when prometheus_client is installed
"""
