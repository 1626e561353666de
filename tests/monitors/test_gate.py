"""Sample mode's gate (hicache/monitors/gate.py): the C gate and its Python twin decide the
same on the same events: what is recorded and counted, what goes to the monitor, bound or
not, how a weighted event is drawn (once, before its trigger), and what a tripped gate
ignores; errors leave the counters as they were."""
from __future__ import annotations

import collections

import pytest

from hicache.monitors import gate as G

KINDS = [pytest.param(G.PyGate, id="python")]
if G.EXTENSION.module() is not None:
    KINDS.append(pytest.param(G.EXTENSION.module().Gate, id="native"))


class _Spy:
    """A binder (None for action "other", else a tuple naming the action) and a slow path
    that keep what they were called with."""

    def __init__(self):
        self.bound, self.slow = [], []

    def bind(self, action, fields):
        self.bound.append(action)
        return None if action == "other" else (("step", action),)

    def take(self, action, fields, bound):
        self.slow.append((action, fields.get("i"), bound))


def _gate(kind, special=("always",), maxlen=4):
    spy = _Spy()
    g = kind(spy.bind, frozenset(special), spy.take, collections.deque(maxlen=maxlen))
    return g, spy


class _Weighing(_Spy):
    """A spy with a scripted draw and trigger, logging the order of their calls."""

    def __init__(self, draws, triggers):
        super().__init__()
        self.draws, self.triggers, self.log, self.weighed = list(draws), list(triggers), [], []

    def draw(self):
        self.log.append("draw")
        return self.draws.pop(0)

    def trigger(self, action, fields):
        self.log.append(("trigger", action))
        return self.triggers.pop(0)

    def weigh(self, action, fields, bound, triggered):
        self.weighed.append((action, fields.get("i"), bound, triggered))


def _weighted_gate(kind, draws, triggers, unbound=None, maxlen=None):
    """A gate with a special ("always"), two weighted events ("w", "t": "t" asked of the
    trigger) and scripted draws and trigger answers; holding none (unbound None) or those of
    `unbound`'s contract (deferred binding). Its gap: 10."""
    spy = _Weighing(draws, triggers)
    g = kind(spy.bind, frozenset({"always"}), spy.take, collections.deque(maxlen=maxlen), weighted={"w": 0.5, "t": 0.5},
             draw=spy.draw, trigger=spy.trigger, trigger_on=frozenset({"t"}), weighed=spy.weigh, unbound=unbound)
    g.gap = 10
    return g, spy


@pytest.mark.parametrize("kind", KINDS)
def test_between_samples_events_are_bound_counted_and_recorded(kind):
    g, spy = _gate(kind)
    g.gap = 3
    events = [("a", {"i": 0}), ("other", {"i": 1}), ("b", {"i": 2}), ("c", {"i": 3})]
    for action, fields in events:
        assert g(action, fields) is None
    assert spy.bound == ["a", "other", "b", "c"] and spy.slow == []
    # ("other" bound to nothing: not this spec's event, neither counted nor recorded)
    assert g.steps == 3 and g.gap == 0
    assert list(g.history) == [(1, "a", events[0][1]), (2, "b", events[2][1]), (3, "c", events[3][1])]
    assert g.history[0][2] is events[0][1]          # (the bus's dict itself: copied only if checked)


@pytest.mark.parametrize("kind", KINDS)
def test_the_drawn_sample_and_the_special_events_go_to_the_monitor(kind):
    g, spy = _gate(kind)
    g.gap = 0
    g("a", {"i": 0})                                # the gap ran out: unbound, to the monitor
    assert spy.bound == [] and spy.slow == [("a", 0, None)] and g.steps == 0 and g.gap == 0
    g.gap = 5
    g("always", {"i": 1})                           # special: bound, then to the monitor, uncounted
    assert spy.bound == ["always"] and spy.slow[-1] == ("always", 1, (("step", "always"),))
    assert g.steps == 0 and g.gap == 5 and len(g.history) == 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_weighted_event_is_drawn_once_then_triggered_drawn_or_recorded(kind):
    g, spy = _weighted_gate(kind, draws=[0.9, 0.1, 0.9, 0.1, 0.9], triggers=[True, False, False])
    for i, action in enumerate(["w", "w", "t", "t", "t"]):
        g(action, {"i": i})
    # one draw per weighted event, before its trigger, which is asked about "t" only
    assert spy.log == ["draw", "draw", "draw", ("trigger", "t"), "draw", ("trigger", "t"), "draw", ("trigger", "t")]
    assert spy.weighed == [("w", 1, (("step", "w"),), False),     # drawn (0.1 < 0.5)
                           ("t", 2, (("step", "t"),), True),      # triggered, whatever the draw
                           ("t", 3, (("step", "t"),), False)]     # drawn, not triggered
    # the undrawn, untriggered ones recorded and counted, the gap untouched (it counts the others)
    assert [r[:2] for r in g.history] == [(1, "w"), (2, "t")] and g.steps == 2 and g.gap == 10
    assert spy.slow == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_weighted_event_at_the_end_of_the_gap_goes_to_the_monitor_unbound(kind):
    g, spy = _weighted_gate(kind, draws=[], triggers=[])
    g.gap = 0
    g("w", {"i": 0})
    assert spy.slow == [("w", 0, None)] and spy.log == [] and spy.bound == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_failing_draw_or_trigger_passes_through_and_leaves_the_counters(kind):
    for draws, triggers, action, match in (([], [], "w", "pop"), ([0.9], [], "t", "pop")):
        g, spy = _weighted_gate(kind, draws=draws, triggers=triggers)
        with pytest.raises(IndexError, match=match):
            g(action, {})
        assert g.steps == 0 and g.gap == 10 and len(g.history) == 0 and spy.weighed == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_tripped_gate_ignores_events(kind):
    g, spy = _gate(kind)
    g.gap = 5
    g.tripped = True
    g("a", {})
    g.gap = 0
    g("b", {})
    assert spy.bound == spy.slow == [] and g.steps == 0 and len(g.history) == 0


@pytest.mark.parametrize("kind", KINDS)
def test_the_history_is_bounded_and_can_be_replaced(kind):
    g, _ = _gate(kind, maxlen=2)
    g.gap = 10
    for i in range(3):
        g("a", {"i": i})
    assert [r[0] for r in g.history] == [2, 3]
    fresh = collections.deque(maxlen=8)
    g.history = fresh
    g("a", {"i": 3})
    assert g.history is fresh and list(fresh) == [(4, "a", {"i": 3})] and g.steps == 4 and g.gap == 6


@pytest.mark.parametrize("kind", KINDS)
def test_errors_pass_through_and_leave_the_counters(kind):
    def bad_bind(action, fields):
        raise KeyError("bind")

    class Full:
        def append(self, rec):
            raise OverflowError("full")
    g = kind(bad_bind, frozenset(), lambda *a: None, collections.deque())
    g.gap = 2
    with pytest.raises(KeyError, match="bind"):
        g("a", {})
    assert g.steps == 0 and g.gap == 2
    g = kind(lambda a, f: (), frozenset(), lambda *a: None, Full())
    g.gap = 2
    with pytest.raises(OverflowError, match="full"):
        g("a", {})
    assert g.steps == 0 and g.gap == 2


@pytest.mark.parametrize("kind", KINDS)
def test_construction_is_validated(kind):
    ok = lambda *a: None        # noqa: E731
    with pytest.raises(TypeError, match="callable"):
        kind(None, frozenset(), ok, collections.deque())
    with pytest.raises(TypeError):
        kind(ok, {"a"}, ok, collections.deque())       # (a set, not a frozenset)
    with pytest.raises(AttributeError):
        kind(ok, frozenset(), ok, object())             # (no append)
    with pytest.raises(TypeError, match="draw and weighed"):
        kind(ok, frozenset(), ok, collections.deque(), weighted={"w": 0.5})
    with pytest.raises(TypeError, match="trigger"):
        kind(ok, frozenset(), ok, collections.deque(), trigger=1)
    with pytest.raises(TypeError):
        kind(ok, frozenset(), ok, collections.deque(), trigger_on={"t"})    # (a set, not a frozenset)


def test_the_native_gate_loads_where_an_extension_builds():
    from hicache import buildcache
    if not buildcache.can_build_extensions() or buildcache.disabled():
        pytest.skip("no C compiler or Python headers here, or HICACHE_NATIVE=0: the Python gate serves")
    assert G.Gate is G.EXTENSION.module().Gate and G.EXTENSION.unavailable_reason() == ""


# ------------------------------------------------------------ deferred binding (`unbound`)
def _holding_gate(kind, unbound=frozenset({"other"}), maxlen=128, draws=(), triggers=()):
    return _weighted_gate(kind, draws, triggers, unbound=unbound, maxlen=maxlen)


@pytest.mark.parametrize("kind", KINDS)
def test_held_events_are_counted_at_once_and_bound_in_order_before_the_next_event_not_held(kind):
    g, spy = _holding_gate(kind)
    g.gap = 5
    a, b = {"i": 0}, {"i": 1}
    g("a", a)
    g("b", b)
    # held: the gap counts them now (the sample's place is the same), nothing bound or recorded yet
    assert spy.bound == [] and g.held == 2 and g.gap == 3 and g.steps == 0 and len(g.history) == 0
    g("always", {"i": 2})       # special: the held ones bound first, in order, then it
    assert spy.bound == ["a", "b", "always"] and g.held == 0 and g.steps == 2 and g.gap == 3
    assert list(g.history) == [(1, "a", a), (2, "b", b)]
    assert spy.slow == [("always", 2, (("step", "always"),))]
    g("c", {"i": 3})
    g("other", {"i": 4})        # unbound: never held, bound at once to nothing, nothing flushed
    assert spy.bound == ["a", "b", "always", "other"] and g.held == 1 and g.steps == 2 and g.gap == 2
    g("d", {"i": 5})
    g.gap = 0                   # (as if the gap ran out at d: the next event is the sample)
    g("e", {"i": 6})
    assert spy.bound[-2:] == ["c", "d"] and spy.slow[-1] == ("e", 6, None) and g.steps == 4


@pytest.mark.parametrize("kind", KINDS)
def test_flush_binds_the_held_events_and_a_full_hold_flushes_itself(kind):
    g, spy = _holding_gate(kind)
    g.gap = 1000
    n = G.DEFER_CAP + 6
    for i in range(n):
        g("a", {"i": i})
    assert len(spy.bound) == G.DEFER_CAP and g.held == 6 and g.steps == G.DEFER_CAP and g.gap == 1000 - n
    g.flush()
    assert len(spy.bound) == n and g.held == 0 and g.steps == n
    assert [r[0] for r in g.history] == list(range(1, n + 1)) and [r[2]["i"] for r in g.history] == list(range(n))
    g.flush()       # (nothing held: nothing done)
    assert len(spy.bound) == n and g.steps == n


@pytest.mark.parametrize("kind", KINDS)
def test_a_held_event_bound_to_nothing_after_all_is_uncounted(kind):
    """A map that breaks its contract (binds to None an event it did not name unbound): the
    event is uncounted at the flush, the gap given back, as if it had not been held."""
    g, spy = _holding_gate(kind, unbound=frozenset())
    g.gap = 4
    g("a", {})
    g("other", {})       # (held: the map did not say it may bind to nothing)
    g("b", {})
    assert g.gap == 1
    g.flush()
    assert spy.bound == ["a", "other", "b"] and g.steps == 2 and g.gap == 2
    assert [r[1] for r in g.history] == ["a", "b"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_unbound_event_bound_to_a_step_after_all_is_bound_before_the_held_ones(kind):
    """A map that breaks its contract the other way (binds to a step an event it named
    unbound): that event, bound first, then flushes the held ones and goes on as any other;
    at a sample the monitor is handed it unbound (and binds it again)."""
    bound = []

    def bind(action, fields):
        bound.append(action)
        return ("step",)
    took = []
    g = kind(bind, frozenset(), lambda a, f, b: took.append((a, b)), collections.deque(),
             unbound=frozenset({"loose"}))
    g.gap = 5
    g("a", {})
    g("loose", {})
    assert bound == ["loose", "a"] and [r[1] for r in g.history] == ["a", "loose"] and g.gap == 3
    g("b", {})
    g.gap = 0
    g("loose", {})
    assert bound == ["loose", "a", "loose", "b"] and took == [("loose", None)] and g.held == 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_binder_error_at_a_flush_is_raised_once_the_rest_are_bound(kind):
    bound = []

    def bind(action, fields):
        bound.append(action)
        if action == "bad":
            raise KeyError("bind")
        return ()
    g = kind(bind, frozenset(), lambda *a: None, collections.deque(), unbound=frozenset())
    g.gap = 10
    for action in ("a", "bad", "b", "bad", "c"):
        g(action, {})
    with pytest.raises(KeyError, match="bind"):
        g.flush()
    assert bound == ["a", "bad", "b", "bad", "c"] and g.held == 0
    assert [r[1] for r in g.history] == ["a", "b", "c"] and g.steps == 3


@pytest.mark.parametrize("kind", KINDS)
def test_a_tripped_gate_releases_its_held_events_unbound(kind):
    g, spy = _holding_gate(kind)
    g.gap = 5
    g("a", {})
    g.tripped = True
    g.flush()
    g("always", {})
    assert spy.bound == spy.slow == [] and g.held == 0 and g.steps == 0 and len(g.history) == 0


class _Budget:
    """A scripted budget: the clock a gate reads and the monitor's let-go, which answers a
    gap's sample with the next gap of `gaps`."""

    def __init__(self, gaps=()):
        self.now, self.gaps, self.let = 0.0, iter(gaps), []

    def clock(self):
        return self.now

    def let_go(self, action, fields, weighted):
        self.let.append((action, fields.get("i"), weighted))
        return None if weighted else next(self.gaps)


def _drive_both(kind, seed: int, n: int = 400, budgeted: bool = False, pure: bool = False) -> None:
    """A seeded stream of events through a holding gate and the same gate holding nothing,
    each with the same scripted draws and a slow path that draws the next gap: the same gap
    after every event, and at random points (the holding gate flushed there) the same binds
    in the same order, the same records, counts, slow and weighed calls. `budgeted`: both
    also read one scripted clock against the same `closed_until`, moved at random before
    each event, and let go the same samples. `pure`: the first gate's binder is pure
    (`pure=True`): it decides the same, and binds an event between samples never (the
    binder is asked only about the immediate actions and the samples; a weighted one only
    when the draw or the trigger hands it on)."""
    import random
    rng = random.Random(seed)
    actions = ["a", "b", "other", "always", "w", "t"]
    events = [(rng.choice(actions), {"i": i}) for i in range(n)]
    draws = [rng.random() for _ in range(n)]
    triggers = [rng.random() < 0.2 for _ in range(n)]
    gaps = [rng.randrange(0, 12 if not budgeted else 6) for _ in range(2 * n)]    # (a let-go takes one too)
    checkpoints = {rng.randrange(n) for _ in range(n // 20)} | {n - 1}
    closes = [rng.choice([float("-inf"), 5.0, 15.0]) if budgeted else float("-inf") for _ in range(n)]
    gates = []
    for unbound in (frozenset({"other"}), None):
        spy, nxt, box, budget = _Weighing(draws, triggers), iter(gaps), [], _Budget()
        budget.now = 10.0
        budget.gaps = nxt

        def take(action, fields, bound, spy=spy, nxt=nxt, box=box):
            spy.slow.append((action, fields.get("i"), bound))
            if bound is None:           # (the drawn sample: the monitor binds it, counts it, draws anew,
                (g,) = box              # as Monitor._gated does; one bound to nothing it lets go)
                if spy.bind(action, fields) is not None:
                    g.steps += 1
                    g.gap = next(nxt)
        clocked = dict(clock=budget.clock, let_go=budget.let_go) if budgeted else {}
        if pure and unbound is not None:
            clocked["pure"] = True
        g = kind(spy.bind, frozenset({"always"}), take, collections.deque(maxlen=128), weighted={"w": 0.5, "t": 0.5},
                 draw=spy.draw, trigger=spy.trigger, trigger_on=frozenset({"t"}), weighed=spy.weigh, unbound=unbound,
                 **clocked)
        box.append(g)
        g.gap = 3
        gates.append((g, spy, budget))
    (held, hspy, hb), (plain, pspy, pb) = gates
    assert plain.unbound is None and held.unbound == frozenset({"other"})
    for i, (action, fields) in enumerate(events):
        for g, _, _ in gates:
            g.closed_until = closes[i]
            g(action, fields)
        assert held.gap == plain.gap, (seed, i)
        assert plain.held == 0
        if i in checkpoints:
            held.flush()
            # (an event bound to nothing, "other", is bound at its publish by both: the holding
            # gate binds it before the events it holds, which it changes nothing for)
            if pure:
                # (a plain action bound only as a sample: by the monitor, or by the gate
                # letting it go)
                plain_actions = ("a", "b")
                sampled = sum(1 for x in hspy.slow if x[0] in plain_actions and x[2] is None)
                let = sum(1 for x in hb.let if x[0] in plain_actions and not x[2])
                assert sum(1 for a in hspy.bound if a in plain_actions) == sampled + let, (seed, i)
                # (... and a weighted one only when handed on: to weighed, bound, or as the
                # gap's sample, to the monitor, which binds it)
                weighted_actions = ("w", "t")
                handed = sum(1 for x in hspy.weighed if x[2] is not None) + \
                    sum(1 for x in hspy.slow if x[0] in weighted_actions and x[2] is None)
                assert sum(1 for a in hspy.bound if a in weighted_actions) == handed, (seed, i)
                assert held.held == 0
            else:
                assert [a for a in hspy.bound if a != "other"] == [a for a in pspy.bound if a != "other"], (seed, i)
            assert hspy.bound.count("other") == pspy.bound.count("other")
            # (... and at a sample the holding gate lets it go itself, where the other hands it
            # to the monitor, which binds it to nothing and lets it go)
            assert [x for x in hspy.slow if x[0] != "other"] == [x for x in pspy.slow if x[0] != "other"]
            assert (hspy.weighed, hspy.log, hb.let) == (pspy.weighed, pspy.log, pb.let)
            assert (held.steps, list(held.history)) == (plain.steps, list(plain.history)), (seed, i)
    assert pspy.slow and pspy.weighed and held.steps > 100 and len(held.history) == 128
    assert bool(hb.let) == budgeted
    if pure:        # (the weighted events the pure gate recorded without binding them)
        assert sum(1 for a in hspy.bound if a in ("w", "t")) < sum(1 for a in pspy.bound if a in ("w", "t"))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(6))
def test_a_holding_gate_decides_as_one_that_holds_nothing(kind, seed):
    _drive_both(kind, seed)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(6))
def test_a_budgeted_holding_gate_lets_go_as_one_that_holds_nothing(kind, seed):
    _drive_both(kind, seed, budgeted=True)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("budgeted", [False, True], ids=["free", "budgeted"])
@pytest.mark.parametrize("seed", range(4))
def test_a_pure_gate_decides_as_one_that_binds_every_event(kind, budgeted, seed):
    _drive_both(kind, seed, budgeted=budgeted, pure=True)


@pytest.mark.parametrize("kind", KINDS)
def test_a_pure_gate_records_an_event_between_samples_without_binding_it(kind):
    spy = _Spy()
    g = kind(spy.bind, frozenset({"always"}), spy.take, collections.deque(maxlen=8), unbound=frozenset({"other"}),
             pure=True)
    assert g.pure is True
    g.gap = 3
    events = [("a", {"i": 0}), ("other", {"i": 1}), ("b", {"i": 2}), ("always", {"i": 3}), ("c", {"i": 4}),
              ("d", {"i": 5})]
    for action, fields in events:
        g(action, fields)
    # ("other" asked, bound to nothing: uncounted; "always" bound and handed on; the fourth
    # plain event is the sample, handed on unbound)
    assert spy.bound == ["other", "always"] and g.held == 0
    assert spy.slow == [("always", 3, (("step", "always"),)), ("d", 5, None)]
    assert g.steps == 3 and g.gap == 0
    assert list(g.history) == [(1, "a", events[0][1]), (2, "b", events[2][1]), (3, "c", events[4][1])]


@pytest.mark.parametrize("kind", KINDS)
def test_pure_is_validated(kind):
    ok = lambda *a: None        # noqa: E731
    with pytest.raises(TypeError, match="pure"):
        kind(ok, frozenset(), ok, collections.deque(), pure=True)             # (no unbound: no contract)
    with pytest.raises(TypeError, match="pure"):
        kind(ok, frozenset(), ok, collections.deque(), unbound=frozenset(), pure=1)
    assert kind(ok, frozenset(), ok, collections.deque()).pure is False


@pytest.mark.parametrize("kind", KINDS)
def test_unbound_is_validated(kind):
    ok = lambda *a: None        # noqa: E731
    with pytest.raises(TypeError, match="unbound"):
        kind(ok, frozenset(), ok, collections.deque(), unbound={"a"})      # (a set, not a frozenset)
    g = kind(ok, frozenset(), ok, collections.deque())
    assert g.unbound is None and g.held == 0


def _budgeted_gate(kind, draws=(), triggers=(), unbound=frozenset({"other"}), gaps=()):
    spy = _Weighing(draws, triggers)
    budget = _Budget(gaps)
    g = kind(spy.bind, frozenset({"always"}), spy.take, collections.deque(), weighted={"w": 0.5, "t": 0.5},
             draw=spy.draw, trigger=spy.trigger, trigger_on=frozenset({"t"}), weighed=spy.weigh, unbound=unbound,
             clock=budget.clock, let_go=budget.let_go)
    return g, spy, budget


@pytest.mark.parametrize("holding", [True, False], ids=["holding", "plain"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_drawn_sample_before_closed_until_is_let_go_by_the_gate(kind, holding):
    """While the clock reads before `closed_until`, the gap's sample of a plain action is
    bound, counted and recorded by the gate and handed to `let_go`, whose answer is the next
    gap; a drawn weighted event likewise (no gap); a triggered one, a special one and a
    sample from `closed_until` on go to the monitor as before."""
    g, spy, budget = _budgeted_gate(kind, draws=[0.1, 0.9, 0.1], triggers=[True], gaps=[2],
                                    unbound=frozenset({"other"}) if holding else None)
    assert g.closed_until == float("-inf") and g.clock == budget.clock and g.let_go == budget.let_go
    g.closed_until = 10.0
    g.gap = 0
    g("a", {"i": 0})                    # the gap's sample, let go: bound, recorded, the next gap
    assert budget.let == [("a", 0, False)] and spy.slow == [] and spy.bound == ["a"]
    assert g.steps == 1 and g.gap == 2 and list(g.history) == [(1, "a", {"i": 0})]
    g("w", {"i": 1})                    # drawn (0.1), let go: recorded, the gap untouched
    g("t", {"i": 2})                    # triggered: the monitor's whatever the budget
    assert budget.let[-1] == ("w", 1, True) and spy.weighed == [("t", 2, (("step", "t"),), True)]
    assert g.steps == 2 and g.gap == 2
    g.gap = 0
    g("always", {"i": 3})               # special at the gap's end: the monitor's
    assert spy.slow == [("always", 3, None)]
    budget.now = 10.0                   # from closed_until on: the monitor's as before
    g("b", {"i": 4})
    g.gap = 5
    g("w", {"i": 5})                    # drawn (0.1)
    assert spy.slow[-1] == ("b", 4, None) and spy.weighed[-1] == ("w", 5, (("step", "w"),), False)
    assert len(budget.let) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_a_let_go_error_passes_through_with_the_event_recorded(kind):
    g, spy, budget = _budgeted_gate(kind, gaps=[])
    g.closed_until = 1.0
    g.gap = 0
    with pytest.raises(StopIteration):      # (the scripted gaps ran out)
        g("a", {"i": 0})
    assert g.steps == 1 and g.gap == 0 and budget.let == [("a", 0, False)]


@pytest.mark.parametrize("kind", KINDS)
def test_clock_and_let_go_come_together(kind):
    ok = lambda *a: None        # noqa: E731
    with pytest.raises(TypeError, match="clock and let_go"):
        kind(ok, frozenset(), ok, collections.deque(), clock=ok)
    with pytest.raises(TypeError, match="clock and let_go"):
        kind(ok, frozenset(), ok, collections.deque(), clock=1, let_go=ok)
    g = kind(ok, frozenset(), ok, collections.deque())
    assert g.clock is None and g.let_go is None and g.closed_until == float("-inf")


def test_the_two_gates_let_go_alike():
    """The C gate and the Python one on the same budgeted stream: the same let-gos, records
    and calls."""
    if G.EXTENSION.module() is None:
        pytest.skip("the C gate is not built here")
    import random
    outs = []
    for kind in (G.PyGate, G.EXTENSION.module().Gate):
        rng = random.Random(7)
        g, spy, budget = _budgeted_gate(kind, draws=[rng.random() for _ in range(800)],
                                        triggers=[rng.random() < 0.2 for _ in range(800)],
                                        gaps=[rng.randrange(0, 6) for _ in range(800)])
        budget.now = 10.0
        for i in range(400):
            g.closed_until = rng.choice([float("-inf"), 5.0, 15.0])
            g.gap = g.gap if g.gap > 0 or rng.random() < 0.5 else rng.randrange(0, 4)
            g(rng.choice(["a", "b", "other", "always", "w", "t"]), {"i": i})
        g.flush()
        outs.append((budget.let, spy.bound, spy.slow, spy.weighed, spy.log, g.steps, g.gap, list(g.history)))
    assert outs[0] == outs[1] and outs[0][0]


# ---------------------------------------------------------------- the monitor's let-go in C
class _Owner:
    """What a LetGo writes: the monitor's `sampled` and `cause`."""
    sampled, cause = True, None


@pytest.mark.skipif(G.LetGo is None, reason="the gate extension is not built here")
@pytest.mark.parametrize("rate", [0.05, 0.3, 1.0, 0.0])
def test_letgo_draws_the_gaps_and_runs_the_hooks_as_the_monitors_let_go(tmp_path, rate):
    """LetGo, the gate's let-go in C, against `Monitor._gate_let_go`, which defines it: from
    the same seed, the same next gaps (a gap's sample) or None (a weighted one), the same
    count, `sampled` False and the draw's cause, and each watch hook called with the event's
    name (through `name_of` for an action the names lack) and fields, in order."""
    import random

    from hicache.monitors.maps.host_tier import HostTierMap
    from hicache.monitors.runtime import _NAMES, CheckCause, Monitor, VerifyConfig, _name_of
    from hicache.monitors.workload import WorkloadConfig, make_cache, plan
    cache = make_cache(WorkloadConfig(), plan(0, WorkloadConfig(requests=1))[0])
    try:
        mon = Monitor(HostTierMap(cache), VerifyConfig(mode="sample", sample_rate=rate, seed=7, sample_budget=0.5,
                                                       violation_dir=str(tmp_path)))
    finally:
        cache.close()
    seen_py, seen_c = [], []
    mon.watch_hooks[:] = [lambda name, fields: seen_py.append((name, fields["i"], mon.sampled, mon.cause))]
    owner = _Owner()
    hooks = [lambda name, fields: seen_c.append((name, fields["i"], owner.sampled, owner.cause))]
    rng = random.Random(7)
    lg = G.LetGo(owner, rng.random, rate, hooks, _NAMES, _name_of, CheckCause.DRAW, CheckCause.WEIGHTED_DRAW)
    mon.rng = random.Random(7)
    actions = ["RequestMatch", "DeviceEvict", "BackupStart", "HostEvict", "RequestFinish"]
    for i in range(200):
        action, weighted = actions[i % len(actions)], i % 3 == 0
        mon.sampled = owner.sampled = True
        assert lg(action, {"i": i}, weighted) == mon._gate_let_go(action, {"i": i}, weighted)
        if i == 100:
            hooks.append(lambda name, fields: seen_c.append(("second", fields["i"], None, None)))
            mon.watch_hooks.append(lambda name, fields: seen_py.append(("second", fields["i"], None, None)))
    assert lg.count == mon._skipped == 200 and lg.rate == rate
    assert seen_c == seen_py and len(seen_c) == 200 + 99
    assert {c for *_, c in seen_c} == {CheckCause.DRAW, CheckCause.WEIGHTED_DRAW, None}


@pytest.mark.skipif(G.LetGo is None, reason="the gate extension is not built here")
def test_letgo_counts_before_a_hook_error_passes_through_and_is_validated():
    from hicache.monitors.runtime import _NAMES, CheckCause, _name_of

    def failing(name, fields):
        raise RuntimeError("the watch's violation")
    owner = _Owner()
    lg = G.LetGo(owner, lambda: 0.5, 0.05, [failing], _NAMES, _name_of, CheckCause.DRAW, CheckCause.WEIGHTED_DRAW)
    with pytest.raises(RuntimeError, match="the watch's violation"):
        lg("RequestMatch", {}, False)
    assert lg.count == 1 and owner.sampled is False and owner.cause is CheckCause.DRAW
    with pytest.raises(TypeError, match="3 positional"):
        lg("RequestMatch", {})
    with pytest.raises(ValueError, match="rate"):
        G.LetGo(owner, lambda: 0.5, 1.5, [], _NAMES, _name_of, CheckCause.DRAW, CheckCause.WEIGHTED_DRAW)
    with pytest.raises(TypeError, match="callable"):
        G.LetGo(owner, None, 0.5, [], _NAMES, _name_of, CheckCause.DRAW, CheckCause.WEIGHTED_DRAW)
    with pytest.raises(TypeError):
        G.LetGo(owner, lambda: 0.5, 0.5, (), _NAMES, _name_of, CheckCause.DRAW, CheckCause.WEIGHTED_DRAW)


class _Named(str):
    """An action as a str subclass, as the runtime's vocabulary members are (compared by value
    with the gate's plain-str sets)."""


def _stream_through(kind, seed: int, fresh: bool) -> tuple:
    """A seeded stream of events (plain, special, weighted, triggered, bound to nothing)
    through a pure gate with scripted draws, trigger answers and next gaps; the actions are
    the same str-subclass objects at every event (`fresh` False: as the runtime publishes its
    vocabulary's members) or a new object equal by value at each (more than the gate keeps
    kinds of); what it recorded, counted, drew, asked and handed on."""
    import random
    rng = random.Random(seed)
    names = ["a", "b", "always", "w", "t", "other"]
    members = {a: _Named(a) for a in names}
    n = 300
    draws = [rng.random() for _ in range(n)]
    triggers = [rng.random() < 0.2 for _ in range(n)]
    gaps = iter([rng.randrange(0, 9) for _ in range(n)])
    spy, box = _Weighing(draws, triggers), []

    def take(action, fields, bound):
        spy.slow.append((str(action), fields["i"], bound))
        if bound is None:
            (g,) = box
            g.steps += 1
            g.gap = next(gaps)
    g = kind(spy.bind, frozenset({"always"}), take, collections.deque(maxlen=64), weighted={"w": 0.5, "t": 0.3},
             draw=spy.draw, trigger=spy.trigger, trigger_on=frozenset({"t"}), weighed=spy.weigh,
             unbound=frozenset({"other"}), pure=True)
    box.append(g)
    g.gap = 2
    for i in range(n):
        name = rng.choice(names)
        action = _Named(name) if fresh else members[name]
        assert (action is members[name]) != fresh
        g(action, {"i": i})
    return ([(s, str(a), f["i"]) for s, a, f in g.history], g.steps, g.gap, spy.log, spy.weighed, spy.slow,
            spy.bound)


@pytest.mark.parametrize("seed", range(4))
def test_the_gate_decides_the_same_whether_an_action_is_one_object_or_a_new_one_each_event(seed):
    """The C gate keeps the kind of each action object it has seen (special, weighted and its
    probability, unbound, asked of the trigger), up to 16, and looks up the rest at each
    event: the runtime's actions, the same members every time, and actions made anew at each
    event (past the 16 kept) are decided the same, and as the Python twin decides them."""
    got = {(k.values[0].__name__, fresh): _stream_through(k.values[0], seed, fresh)
           for k in KINDS for fresh in (False, True)}
    first = next(iter(got.values()))
    assert first[1] > 50 and first[4] and first[5]        # (recorded, handed on, sampled)
    assert all(v == first for v in got.values())


@pytest.mark.parametrize("kind", KINDS)
def test_the_gates_weights_are_a_read_only_copy(kind):
    weights = {"w": 0.5}
    g, _ = _weighted_gate(kind, draws=[], triggers=[])
    assert dict(g.weighted) == {"w": 0.5, "t": 0.5}
    with pytest.raises(TypeError):
        g.weighted["w"] = 1.0
    g2 = kind(lambda a, f: (), frozenset(), lambda *a: None, collections.deque(), weighted=weights,
              draw=lambda: 0.0, weighed=lambda *a: None)
    weights["w"] = 0.0           # (the caller's dict changed afterwards: the gate's copy is not)
    assert dict(g2.weighted) == {"w": 0.5}
