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
