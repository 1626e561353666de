"""Chained page keys: the definition, extension, namespaces, topology suffixes, purity."""
from __future__ import annotations

import hashlib
import struct
import subprocess
import sys

import numpy as np
import pytest

from hicache.storage.keys import (KEY_PATTERN, KeyDerivation, Topology, chain, check_key,
                                  key_of, namespace_hash)


def reference_chain(model: str, tokens: list[int], page_size: int) -> list[str]:
    """The REFERENCE.md definition, written out independently."""
    h = hashlib.sha256(f"hicache\x00{model}\x00".encode()).digest()
    out = []
    for p in range(len(tokens) // page_size):
        page = tokens[p * page_size:(p + 1) * page_size]
        h = hashlib.sha256(h + struct.pack(f"<{page_size}I", *page)).digest()
        out.append(h.hex())
    return out


def test_keys_follow_the_chained_definition():
    tokens = [5, 0, 2**32 - 1, 17, 9, 9, 9, 1, 3, 70000]
    kd = KeyDerivation(model="llama", page_size=3)
    assert kd.keys(tokens) == reference_chain("llama", tokens, 3)
    assert len(kd.keys(tokens)) == 3                  # the partial 4th page gets no key
    assert kd.keys(tokens[:2]) == []


def test_extension_from_a_parent_equals_hashing_from_the_root():
    kd = KeyDerivation(model="m", page_size=4)
    tokens = list(range(100, 124))
    hashes = kd.page_hashes(tokens)
    assert kd.keys(tokens[8:], parent=hashes[1]) == kd.keys(tokens)[2:]
    assert [kd.key_of(h) for h in hashes] == kd.keys(tokens)


def test_a_page_key_depends_on_its_whole_prefix():
    kd = KeyDerivation(model="m", page_size=2)
    a = kd.keys([1, 2, 3, 4])
    b = kd.keys([9, 2, 3, 4])
    assert a[1] != b[1]                                # same page tokens, different prefix


def test_input_encodings_agree():
    kd = KeyDerivation(model="m", page_size=4)
    ref = kd.keys(list(range(12)))
    for arr in (np.arange(12, dtype=np.int64), np.arange(12, dtype=np.int32),
                np.arange(12, dtype="<u4"), np.arange(12, dtype=">u4"), range(12)):
        assert kd.keys(arr) == ref


@pytest.mark.parametrize("bad", [[-1, 0], [2**32, 0], [0.5, 1.0], [[1, 2], [3, 4]]])
def test_bad_tokens_are_rejected(bad):
    with pytest.raises(ValueError, match="tokens"):
        KeyDerivation(model="m", page_size=2).keys(bad)


def test_namespaces_separate_models_salts_and_adapters():
    spaces = {namespace_hash("a"), namespace_hash("b"), namespace_hash("a", salt="s"),
              namespace_hash("a", lora="l"), namespace_hash("a", salt="l"),
              namespace_hash("a", salt="s", lora="l")}
    assert len(spaces) == 6
    assert namespace_hash("a", lora=None) == namespace_hash("a", lora="")
    with pytest.raises(ValueError, match="model"):
        namespace_hash("a\x00b")
    with pytest.raises(ValueError, match="model"):
        namespace_hash("")
    kd1, kd2 = KeyDerivation(model="a", page_size=2), KeyDerivation(model="a", page_size=2, lora="x")
    assert set(kd1.keys([1, 2])).isdisjoint(kd2.keys([1, 2]))


def test_topology_suffixes():
    assert Topology().suffix == ""
    assert Topology(tp_rank=1, tp_size=2).suffix == ".tp1-2"
    assert Topology(tp_rank=0, tp_size=4, pp_rank=1, pp_size=2, pool="draft").suffix == ".tp0-4.pp1-2.draft"
    h = namespace_hash("m")
    assert key_of(h) == h.hex()
    assert key_of(h, Topology(tp_rank=1, tp_size=2)) == h.hex() + ".tp1-2"
    kd = KeyDerivation(model="m", page_size=2, topology=Topology(pp_rank=1, pp_size=2))
    keys = kd.keys([1, 2, 3, 4])
    assert all(k.endswith(".pp1-2") and check_key(k) == k for k in keys)
    assert all(KEY_PATTERN.fullmatch(k) for k in keys)
    for kwargs, field in (({"tp_rank": 2, "tp_size": 2}, "tp_rank"), ({"pp_size": 0}, "pp_size"),
                          ({"pool": "a.b"}, "pool")):
        with pytest.raises(ValueError, match=field):
            Topology(**kwargs)


def test_config_is_validated():
    with pytest.raises(ValueError, match="page_size"):
        KeyDerivation(model="m", page_size=0)
    with pytest.raises(ValueError, match="parent"):
        chain(b"short", [1], 1)


def test_same_digests_as_the_runtime_hashing():
    """One derivation (REFERENCE.md bug 14): the runtime's chain gives the same digests."""
    hashing = pytest.importorskip("hicache.runtime.hashing")
    tokens = np.arange(40, dtype="<i8") * 7919
    kd = KeyDerivation(model="qwen", page_size=8, salt="s1")
    theirs = hashing.chain_hashes(hashing.namespace_seed("qwen", "s1"), tokens.tobytes(), 8)
    assert theirs == kd.page_hashes(tokens)
    assert [hashing.storage_key(h) for h in theirs] == kd.keys(tokens)


def test_keys_module_imports_no_torch():
    code = "import sys, hicache.storage.keys, hicache.storage.envelope; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
