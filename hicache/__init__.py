"""hicache: formally specified coordination for hierarchical KV caches.

Layers (the import graph points one way):
  hicache.tla       TLA+ toolkit (parser front end, evaluator, checker, Z3); imports no runtime.
  hicache.protocol  pure protocol decisions; imports no torch.
  hicache.runtime   the cache (pools, radix tree, tiers, transfer threads).
  hicache.storage   storage backends (file, Mooncake) behind one interface.
  hicache.dist      torch.distributed adapters around the pure decisions.
  hicache.monitors  runtime monitors generated from spec/.
  hicache.kernels   page-copy kernels (Triton on GPU, torch fallback on CPU).
"""
from pathlib import Path

__version__ = "0.1.0"

#: The checkout root (spec/, models_checked/ live there); valid for editable installs.
REPO_ROOT = Path(__file__).resolve().parent.parent
