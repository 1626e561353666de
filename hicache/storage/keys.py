"""Storage keys: chained SHA-256 page hashes, the one derivation for exists/get/set.

    h_{-1} = SHA256("hicache" \\0 model \\0 salt [\\0 "lora:" lora])      (the namespace)
    h_i    = SHA256(h_{i-1} || tokens of page i as little-endian u32)

A page's key names its whole prefix, so equal keys mean equal token prefixes under the same
namespace: a backend may deduplicate, and a reader never mixes pages of two prefixes.
Only whole pages get keys; a partial trailing page is never stored.
A backend key is `hex(h_i)` plus an optional topology suffix (tensor/pipeline rank, dependent
pool), because ranks of a sharded engine store different bytes for the same page.
REFERENCE.md bug 14: `batch_exists` once used other keys than `batch_get`/`batch_set`; every
caller derives keys through `KeyDerivation.keys` (or `page_hashes` + `key_of`) and nothing else.
For (model, salt) without LoRA the digests equal `hicache.runtime.hashing` (a test pins this).
Pure: hashlib and numpy only, no torch.
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Sequence

import numpy as np

_U32_MAX = 0xFFFF_FFFF
DIGEST_BYTES = 32
#: Characters a backend key may use: safe as a file name and as a Mooncake key.
KEY_PATTERN = re.compile(r"[0-9A-Za-z][0-9A-Za-z_.\-]{0,199}")


def namespace_hash(model: str, *, salt: str = "", lora: str | None = None, page_format: str = "") -> bytes:
    """Digest that seeds every chain of this namespace (model, salt, LoRA adapter, and the
    format of the page bytes: engines whose pages hold other bytes for the same tokens, say
    another dtype or KV geometry, must not share keys, or one reads the other's pages as
    its own: equal keys mean equal bytes)."""
    parts = ["hicache", model, salt]
    for name, value in (("model", model), ("salt", salt), ("lora", lora or ""), ("page_format", page_format)):
        if "\x00" in value:
            raise ValueError(f"{name}: must not contain NUL (it separates namespace fields)")
    if not model:
        raise ValueError("model: must be non-empty")
    if lora:
        parts.append(f"lora:{lora}")
    if page_format:
        parts.append(f"format:{page_format}")
    return hashlib.sha256("\x00".join(parts).encode()).digest()


def _page_bytes(tokens: Sequence[int] | np.ndarray) -> bytes:
    """Token ids as little-endian u32 bytes; ValueError if an id does not fit."""
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise ValueError(f"tokens: expected a 1-D sequence, got shape {arr.shape}")
    if arr.dtype == np.dtype("<u4"):
        return arr.tobytes()
    if arr.size == 0:
        return b""
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"tokens: expected integer ids, got dtype {arr.dtype}")
    if int(arr.min()) < 0 or int(arr.max()) > _U32_MAX:
        raise ValueError("tokens: ids must lie in [0, 2**32)")
    return arr.astype("<u4").tobytes()


def chain(parent: bytes, tokens: Sequence[int] | np.ndarray, page_size: int) -> list[bytes]:
    """Digests of the whole pages of `tokens`, continuing the chain after `parent`.

    `parent` is the namespace hash for a chain from the root, or the digest of the page just
    before `tokens` when extending a cached prefix. Trailing tokens short of a page are ignored.
    """
    if page_size <= 0:
        raise ValueError(f"page_size: must be positive, got {page_size}")
    if len(parent) != DIGEST_BYTES:
        raise ValueError(f"parent: expected a {DIGEST_BYTES}-byte digest, got {len(parent)} bytes")
    raw = memoryview(_page_bytes(tokens))
    step = page_size * 4
    whole = len(raw) - len(raw) % step
    sha = hashlib.sha256
    out: list[bytes] = []
    h = parent
    for off in range(0, whole, step):
        d = sha(h)
        d.update(raw[off:off + step])
        h = d.digest()
        out.append(h)
    return out


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Topology:
    """Which shard of a page's bytes this rank stores. Single-rank values add no suffix.

    Context parallelism adds nothing: a CP page lives whole on its owner rank, so its bytes do
    not depend on the CP size, and engines of different CP sizes share storage pages.
    """
    tp_rank: int = 0
    tp_size: int = 1
    pp_rank: int = 0
    pp_size: int = 1
    pool: str = ""   # a dependent pool ("draft", "indexer", ...); "" is the target KV

    def __post_init__(self) -> None:
        for rank, size in (("tp_rank", "tp_size"), ("pp_rank", "pp_size")):
            r, s = getattr(self, rank), getattr(self, size)
            if s < 1:
                raise ValueError(f"{size}: must be >= 1, got {s}")
            if not 0 <= r < s:
                raise ValueError(f"{rank}: must lie in [0, {size}={s}), got {r}")
        if self.pool and not re.fullmatch(r"[0-9A-Za-z]+", self.pool):
            raise ValueError(f"pool: must be alphanumeric, got {self.pool!r}")

    @property
    def suffix(self) -> str:
        parts = []
        if self.tp_size > 1:
            parts.append(f"tp{self.tp_rank}-{self.tp_size}")
        if self.pp_size > 1:
            parts.append(f"pp{self.pp_rank}-{self.pp_size}")
        if self.pool:
            parts.append(self.pool)
        return "".join("." + p for p in parts)


def key_of(digest: bytes, topology: Topology | None = None) -> str:
    """Backend key of one page digest (hex, plus the topology suffix)."""
    return digest.hex() + (topology.suffix if topology is not None else "")


def check_key(key: str) -> str:
    """`key` if it is a well-formed backend key, else ValueError (caller misuse)."""
    if not isinstance(key, str) or KEY_PATTERN.fullmatch(key) is None:
        raise ValueError(f"key: {key!r} is not a storage key (expected {KEY_PATTERN.pattern})")
    return key


def check_keys(keys: Sequence[str]) -> Sequence[str]:
    """`keys` if it is a batch of well-formed keys, each once, else ValueError (caller
    misuse): a bare str would be taken character by character, and a key twice in one read
    is served once by a backend that reads each object once (Mooncake answered the second
    copy with zeros, which then failed verification and removed the good page)."""
    if isinstance(keys, (str, bytes)):
        raise ValueError(f"keys: a sequence of keys, got one {type(keys).__name__} {keys[:24]!r}")
    first: dict[str, int] = {}
    for i, key in enumerate(keys):
        j = first.setdefault(check_key(key), i)
        if j != i:
            raise ValueError(f"keys: {key[:24]!r}... at positions {j} and {i} (each key once per batch)")
    return keys


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class KeyDerivation:
    """The key function of one engine rank: namespace, page size and topology, fixed once."""
    model: str
    page_size: int
    salt: str = ""
    lora: str | None = None
    topology: Topology = Topology()
    namespace: bytes = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.page_size <= 0:
            raise ValueError(f"page_size: must be positive, got {self.page_size}")
        object.__setattr__(self, "namespace",
                           namespace_hash(self.model, salt=self.salt, lora=self.lora))

    def page_hashes(self, tokens: Sequence[int] | np.ndarray, parent: bytes | None = None) -> list[bytes]:
        """Chained digests of the whole pages of `tokens` (after `parent`, else from the root)."""
        return chain(self.namespace if parent is None else parent, tokens, self.page_size)

    def keys(self, tokens: Sequence[int] | np.ndarray, parent: bytes | None = None) -> list[str]:
        """Backend keys of the whole pages of `tokens`: what exists, get and set all use."""
        suffix = self.topology.suffix
        return [h.hex() + suffix for h in self.page_hashes(tokens, parent)]

    def key_of(self, digest: bytes) -> str:
        return key_of(digest, self.topology)
