import array

import numpy as np
import pytest
import torch

from hicache.runtime import hashing
from hicache.runtime.radix import RadixTree, encode
from hicache.storage import keys as storage_keys

PS = 2


def key(*tokens):
    return encode(list(tokens), PS)


def tree():
    return RadixTree(PS, hashing.namespace_seed("m"))


def test_encode_accepts_every_token_container_and_drops_the_partial_page():
    want = np.array([5, 6, 7, 8], dtype="<i8").tobytes()
    for toks in ([5, 6, 7, 8, 9], array.array("q", [5, 6, 7, 8, 9]),
                 np.array([5, 6, 7, 8, 9]), torch.tensor([5, 6, 7, 8, 9])):
        assert encode(toks, PS) == want


def test_match_insert_split():
    t = tree()
    node, dup = t.insert(key(1, 2, 3, 4, 5, 6), [10, 11, 12])
    assert dup == 0 and node.n == 3 and node.device == [10, 11, 12]
    m = t.match(key(1, 2, 3, 4, 9, 9))
    assert (m.device_pages, m.host_pages) == (2, 0)
    assert m.node.n == 2 and m.node.device == [10, 11]         # split at the divergence
    assert [c.device for c in m.node.children.values()] == [[12]]
    node, dup = t.insert(key(1, 2, 3, 4, 9, 9, 7, 7), [10, 11, 20, 21])
    assert dup == 2 and node.device == [20, 21]
    assert t.device_pages_of(node) == [10, 11, 20, 21]
    assert t.match(key(1, 2, 7, 7)).device_pages == 1           # split inside a page run
    assert t.match(key(9, 9)).device_pages == 0
    assert t.match(key(1, 3)).device_pages == 0                 # first page differs in token 2
    t.check()
    assert t.device_pages == 5


def test_lru_evicts_least_recent_unlocked_leaves_first():
    t = tree()
    a, _ = t.insert(key(1, 1, 2, 2), [0, 1])
    b, _ = t.insert(key(1, 1, 3, 3), [0, 2])
    c, _ = t.insert(key(4, 4), [3])
    t.match(key(1, 1, 2, 2))         # a is now the most recent
    t.lock(c)
    order = []
    while (v := t.pop_device_victim()) is not None:
        order.append(v)
        if v.children:                # never: victims are device leaves
            pytest.fail("victim with children")
        t.delete(v)
    shared = t.root.children[key(1, 1)] if key(1, 1) in t.root.children else None
    assert order[0] is b and order[1] is a     # b older than a; c locked
    assert shared is None and order[2].key == key(1, 1)   # then the parent, once a leaf
    assert list(t.root.children.values()) == [c]
    t.unlock(c)
    assert t.pop_device_victim() is c


def test_lock_protects_the_whole_path():
    t = tree()
    leaf, _ = t.insert(key(1, 1, 2, 2), [0, 1])
    m = t.match(key(1, 1, 5, 5))      # splits: upper node (1,1) shared
    t.lock(leaf)
    assert t.pop_device_victim() is None
    t.unlock(leaf)
    assert t.pop_device_victim() is leaf
    assert m.node.lock_ref == 0


def test_hashes_are_lazy_and_equal_the_storage_key_derivation():
    t = tree()
    toks = [3, 1, 4, 1, 5, 9]
    node, _ = t.insert(key(*toks), [0, 1, 2])
    t.match(key(*toks))
    assert node.hashes is None                     # never computed on the match path
    seed = storage_keys.namespace_hash("m")
    assert seed == t.seed
    assert t.hashes_to(node) == storage_keys.chain(seed, toks, PS)
    m = t.match(key(3, 1, 4, 1, 7, 7))             # split keeps each page's digest
    assert m.node.hashes == storage_keys.chain(seed, toks, PS)[:2]
    assert node.hashes == storage_keys.chain(seed, toks, PS)[2:]
    assert t.path_hash(m.node) == storage_keys.chain(seed, toks, PS)[1]
    assert t.path_hash(t.root) == seed


def test_million_token_prompt_is_one_node():
    ps = 64
    t = RadixTree(ps, b"s")
    toks = np.arange(1_000_000, dtype=np.int64)
    k = encode(toks, ps)
    node, dup = t.insert(k, list(range(len(k) // (8 * ps))))
    m = t.match(k)
    assert dup == 0 and m.node is node and m.device_pages == 1_000_000 // ps
