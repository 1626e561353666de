"""The constants bindings monitors share (`runtime.binding`): one build per distinct typed
set of constants in the process, never one binding for constants Python calls equal but
the spec does not (1 and TRUE)."""
from __future__ import annotations

import pytest

from hicache.monitors import runtime
from hicache.monitors.generated import host_tier


def _raw(**over) -> dict:
    raw = {"NNodes": 7, "NSlots": 3, "NLayers": 2, "NReqs": 2, "Policies": frozenset({"write_through"}),
           "BugEvictDuringLoad": False, "BugAbortLeak": False}
    raw.update(over)
    return raw


@pytest.fixture
def counted(monkeypatch):
    """host_tier.constants, counting its calls (the builds `binding` asks for)."""
    builds = []
    real = host_tier.constants

    def counting(raw):
        builds.append(dict(raw))
        return real(raw)
    monkeypatch.setattr(host_tier, "constants", counting)
    monkeypatch.setattr(runtime, "_BINDINGS", {})
    return builds


def test_equal_constants_are_built_once_and_shared(counted):
    a = runtime.binding(host_tier, _raw())
    b = runtime.binding(host_tier, dict(reversed(list(_raw().items()))))    # (another order)
    assert a is b and len(counted) == 1
    assert a["Nodes"] == frozenset(range(7)) and a["HSlots"] == frozenset(range(1, 4)) and a["NoSlot"] == 0
    d = runtime.binding(host_tier, _raw(NNodes=8))
    assert d is not a and d["Nodes"] == frozenset(range(8)) and len(counted) == 2
    assert runtime.binding(host_tier, _raw()) is a and len(counted) == 2


def test_one_and_true_never_share_a_binding(counted):
    """FALSE passes HostTier's ASSUME `BugEvictDuringLoad \\in BOOLEAN`; 0, equal to it in
    Python, must still fail it, not get FALSE's binding."""
    runtime.binding(host_tier, _raw())
    with pytest.raises(ValueError, match="ASSUME"):
        runtime.binding(host_tier, _raw(BugEvictDuringLoad=0))
    # ... nor inside a set: {1} and {TRUE} are equal frozensets
    assert runtime._binding_key(host_tier, _raw(Policies=frozenset({1}))) != \
        runtime._binding_key(host_tier, _raw(Policies=frozenset({True})))


def test_constants_of_other_types_are_built_each_time(counted):
    raw = _raw(NLayers=2.0)                     # (a float: not a key type, never shared)
    assert runtime._binding_key(host_tier, raw) is None
    assert runtime._binding_key(host_tier, _raw(Policies={"write_through"})) is None     # (a set)
    with pytest.raises(ValueError):
        runtime.binding(host_tier, raw)         # (Positive(2.0) fails: 2.0 \notin Nat)
    with pytest.raises(ValueError):
        runtime.binding(host_tier, raw)
    assert len(counted) == 2 and runtime._BINDINGS == {}


def test_the_shared_bindings_are_bounded(counted, monkeypatch):
    monkeypatch.setattr(runtime, "_BINDINGS_MAX", 4)
    for n in range(1, 11):
        runtime.binding(host_tier, _raw(NNodes=n))
    assert len(runtime._BINDINGS) == 4 and len(counted) == 10
    # the newest are kept, the oldest went first
    runtime.binding(host_tier, _raw(NNodes=10))
    runtime.binding(host_tier, _raw(NNodes=1))
    assert len(counted) == 11



def test_a_module_of_the_same_name_gets_its_own_binding(counted):
    """A module generated from an edited spec has the spec's name but other definitions."""
    import types
    other = types.ModuleType(host_tier.__name__)
    other.MODULE, other.constants = host_tier.MODULE, lambda raw: {"edited": True, **raw}
    a = runtime.binding(host_tier, _raw())
    b = runtime.binding(other, _raw())
    assert b is not a and b["edited"] and "edited" not in a


def test_a_known_key_is_not_built_again_and_none_is_never_shared(counted):
    key = runtime._binding_key(host_tier, _raw())
    a = runtime.binding(host_tier, _raw(), key)
    assert runtime.binding(host_tier, _raw()) is a and len(counted) == 1
    # (None: the caller found the constants unshareable; built each time, kept nowhere)
    b = runtime.binding(host_tier, _raw(), None)
    assert b is not a and b == a and len(counted) == 2 and len(runtime._BINDINGS) == 1


class _GivenConstants:
    """A map whose constants are what a test sets (`raw`), with no constants key: a monitor
    keys its own bindings by the constants themselves, as on sample mode's from-scratch maps."""
    spec = host_tier
    needs_prestate = False

    def __init__(self, cache):
        from hicache.monitors.maps.host_tier import HostTierMap
        self._map = HostTierMap(cache)
        self.raw = _raw()

    def __getattr__(self, name):
        return getattr(self._map, name)

    def constants(self) -> dict:
        return dict(self.raw)


def test_a_monitors_own_bindings_tell_false_from_zero(counted, tmp_path):
    """The monitor's own cache of bindings (what each of its checks asks first) is keyed as
    the shared ones are: constants equal in Python but not in the spec (FALSE and 0, {TRUE}
    and {1}) get their own binding, so the ASSUME a changed constant breaks is evaluated, not
    skipped by a hit on the binding of the value it equals."""
    from hicache.monitors.workload import WorkloadConfig, make_cache, plan
    policy, _ = plan(1, WorkloadConfig(requests=4))
    cache = make_cache(WorkloadConfig(requests=4), policy)
    try:
        rmap = _GivenConstants(cache)
        mon = runtime.Monitor(rmap, runtime.VerifyConfig(mode="sample", sample_budget=None,
                                                         violation_dir=str(tmp_path)))
        assert not hasattr(rmap, "constants_key") and mon._constants_key is None
        a = mon.constants()
        assert mon.constants() is a and len(counted) == 1
        rmap.raw = _raw(BugEvictDuringLoad=0)
        with pytest.raises(ValueError, match="ASSUME"):
            mon.constants()
        rmap.raw = _raw(NNodes=9)
        assert mon.constants()["Nodes"] == frozenset(range(9)) and len(counted) == 3
        rmap.raw = _raw()
        assert mon.constants() is a and len(counted) == 3
    finally:
        cache.close()


def test_the_cp_maps_constants_key_names_what_their_constants_depend_on():
    """CPReplayMap's `constants_key` (the from-scratch map's, which sample mode's monitor keys
    its bindings by, and the incremental map's): over a replay whose chains and rows grow,
    states whose key is equal have equal constants, and the key changed whenever they did."""
    from hicache.monitors.maps.device_pages import DevicePagesMap
    from hicache.monitors.workload import WorkloadConfig, make_cache, plan, run_workload
    policy, reqs = plan(3, WorkloadConfig(requests=40))
    cache = make_cache(WorkloadConfig(requests=40), policy)
    rmap = DevicePagesMap(cache)
    seen: dict = {}
    keys = []

    def look(action, fields):
        rmap.state()            # (the rows, and the capacities the constants read, brought up to date)
        key, C = rmap.constants_key(), rmap.constants()
        assert seen.setdefault(key, C) == C, (action, key)
        keys.append(key)
    cache.bus.subscribe(look)
    try:
        run_workload(cache, reqs)
    finally:
        cache.close()
    # (the replay grew the chains past their first capacity: keys changed)
    assert len(set(keys)) >= 2, keys
    # each capacity the constants read moves the key on its own (a replay grows MaxLen
    # with the chains, so each is moved here alone)
    for attr in ("n_chains", "max_len"):
        key, C = rmap.constants_key(), rmap.constants()
        setattr(rmap, attr, getattr(rmap, attr) * 2)
        assert rmap.constants() != C and rmap.constants_key() != key, attr
