"""Stateful test of the replicated tree: random inserts, backups, restores and evictions under
pool pressure, with the tree's invariants checked after every step (Hypothesis)."""
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from hicache.dist.cache_model import ReplicatedTree
from hicache.protocol.cp_layout import CPLayout, chain_owner_class

N = 3


class TreeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.layout = CPLayout(cp_size=N, page_size=1)
        self.tree = ReplicatedTree(self.layout, device_pages_per_rank=3, host_pages_per_rank=4)
        self.serial = 0

    def _key(self, tokens):
        return "k" + "-".join(map(str, tokens))

    @rule(path=st.lists(st.integers(0, 2), min_size=1, max_size=4), base=st.integers(0, N - 1))
    def insert_chain(self, path, base):
        pages = [(t,) for t in path]
        prefix = self.tree.match(pages)
        start = len(prefix)
        # Extending keeps the prefix's base (as the engine does); a new chain takes any base,
        # which exercises the rejection of a splice of another rotation.
        if prefix and prefix[-1].device_page is None:
            return                                    # the engine restores before extending
        chain_base = base
        keys = [self._key(path[:i + 1]) for i in range(len(path))]
        if start == len(path):
            return
        for n in prefix:                              # the engine locks the matched path
            n.lock += 1
        got = self.tree.alloc_device(chain_base, start, len(path) - start)
        for n in prefix:
            n.lock -= 1
        if got is None:
            return
        parent = prefix[-1] if prefix else self.tree.root
        self.tree.insert(parent, start, pages[start:], keys[start:], chain_base, device_pages=got)

    @rule(data=st.data())
    def backup(self, data):
        cands = [n for n in self.tree.nodes() if n.device_page is not None and n.host_page is None]
        if not cands:
            return
        n = data.draw(st.sampled_from(sorted(cands, key=lambda n: n.key)))
        page = self.tree.alloc_host(n.base, n.position)
        if page is None:
            return
        if n.key in {m.key for m in self.tree.nodes()}:
            n.host_page = page
        else:                                         # host eviction removed n itself
            self.tree.host.free(page)

    @rule(data=st.data())
    def restore(self, data):
        cands = [n for n in self.tree.nodes() if n.device_page is None
                 and (n.parent is self.tree.root or n.parent.device_page is not None)]
        if not cands:
            return
        n = data.draw(st.sampled_from(sorted(cands, key=lambda n: n.key)))
        path, m = [], n
        while m is not self.tree.root:                # the engine locks the whole matched path
            path.append(m)
            m = m.parent
        for m in path:
            m.lock += 1
        got = self.tree.alloc_device(n.base, n.position, 1)
        for m in path:
            m.lock -= 1
        if got is not None:
            n.device_page = got[0]

    @invariant()
    def every_node_has_a_copy_and_keeps_its_rotation(self):
        for n in self.tree.nodes():
            assert n.device_page is not None or n.host_page is not None
            owner = chain_owner_class(n.base, n.position, N)
            for page in (n.device_page, n.host_page):
                if page is not None:
                    assert self.layout.page_owner(page) == owner
            if n.parent is not self.tree.root:
                assert n.parent.base % N == n.base % N          # no splice of rotations
                if n.device_page is not None:
                    assert n.parent.device_page is not None     # device set is prefix-closed

    @invariant()
    def allocators_match_the_tree(self):
        nodes = self.tree.nodes()
        assert self.tree.device.allocated() == {n.device_page for n in nodes if n.device_page is not None}
        assert self.tree.host.allocated() == {n.host_page for n in nodes if n.host_page is not None}


TestTree = TreeMachine.TestCase
TestTree.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
