"""The event bus's two dispatch cores, csrc/eventbus.c's BusCore and the PyBusCore that
defines it (hicache/runtime/events.py), on the same uses: events numbered in order and only
when someone listens, each listener called in order with the bus's dict, an exception passed
to the emitter with the lock let go, a subscription made inside a listener seen from the next
event on, and events from several threads serialized (no two listeners' calls overlap, the
numbers strictly increase)."""
import signal
import threading

import pytest

from hicache import buildcache
from hicache.runtime import events

BOUND_S = 10.0


def _cores():
    cores = [pytest.param(events.PyBusCore, id="python")]
    native = events.EXTENSION.module()
    cores.append(pytest.param(native.BusCore if native is not None else None, id="native"))
    return cores


@pytest.fixture(params=_cores())
def bus(request):
    core = request.param
    if core is None:
        pytest.skip(f"the native bus is unavailable: {events.EXTENSION.unavailable_reason()}")
    cls = type("Bus", (core,), {"__slots__": (), "subscribe": events.EventBus.subscribe,
                                "emit": events.EventBus.emit})
    return cls()


def test_the_bus_serving_is_the_native_one_where_it_can_be_built():
    """Where a compiler and the Python headers are present (CI's machines), the C dispatch
    must load and be EventBus's base: a build broken there would only show as a slower
    verified mode."""
    if not buildcache.can_build_extensions() or buildcache.disabled():
        pytest.skip("no compiler or no Python headers here, or HICACHE_NATIVE=0")
    native = events.EXTENSION.module()
    assert native is not None, events.EXTENSION.unavailable_reason()
    assert events.BusCore is native.BusCore and issubclass(events.EventBus, native.BusCore)


def test_a_bus_takes_no_arguments(bus):
    with pytest.raises(TypeError):
        type(bus)(1)
    with pytest.raises(TypeError):
        type(bus)(listeners=[])


def test_events_are_numbered_only_when_someone_listens(bus):
    fields = {"node": 1}
    assert bus.publish("A", fields) is None
    assert bus.seq == 0 and "seq" not in fields
    seen = []
    detach = bus.subscribe(lambda a, f: seen.append((a, f)))
    second = []
    bus.subscribe(lambda a, f: second.append((a, f["seq"])))
    bus.publish("A", fields)
    bus.emit("B", node=2)
    assert [(a, dict(f)) for a, f in seen] == [("A", {"node": 1, "seq": 1}), ("B", {"node": 2, "seq": 2})]
    assert seen[0][1] is fields          # (the bus takes the caller's dict over, as publish says)
    assert second == [("A", 1), ("B", 2)] and bus.seq == 2
    detach()
    bus.emit("C")
    assert len(seen) == 2 and second[-1] == ("C", 3)


class Boom(Exception):
    pass


def test_a_listener_that_raises_stops_the_event_and_frees_the_lock(bus):
    calls = []

    def boom(a, f):
        calls.append(("boom", f["seq"]))
        if a == "bad":
            raise Boom(a)
    bus.subscribe(boom)
    bus.subscribe(lambda a, f: calls.append(("after", f["seq"])))
    with pytest.raises(Boom):
        bus.publish("bad", {})
    # (the next event, from another thread: a lock still held would leave it waiting)
    t = threading.Thread(target=bus.publish, args=("ok", {}), daemon=True)
    t.start()
    t.join(BOUND_S)
    assert not t.is_alive(), "the bus kept its lock after a listener raised"
    assert calls == [("boom", 1), ("boom", 2), ("after", 2)]


def test_a_subscription_inside_a_listener_counts_from_the_next_event(bus):
    late = []

    def first(a, f):
        if a == "A":
            bus.subscribe(lambda a2, f2: late.append(a2))
    bus.subscribe(first)
    bus.publish("A", {})
    bus.publish("B", {})
    assert late == ["B"]


def test_listeners_of_any_iterable_are_called_in_order(bus):
    seen = []
    bus.listeners = (lambda a, f: seen.append(1), lambda a, f: seen.append(2))
    bus.publish("A", {})
    assert seen == [1, 2] and bus.seq == 1


def test_events_from_threads_are_serialized(bus):
    """Four threads publish 500 events each: no two listener calls overlap, every number is
    taken once and each thread sees its own events' numbers increase."""
    inside = [0]
    overlaps = []
    seen: dict = {}

    def listener(a, f):
        inside[0] += 1
        if inside[0] != 1:
            overlaps.append(f["seq"])
        seen.setdefault(a, []).append(f["seq"])
        inside[0] -= 1
    bus.subscribe(listener)
    threads = [threading.Thread(target=lambda k=k: [bus.publish(k, {}) for _ in range(500)], daemon=True)
               for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND_S)
    assert not any(t.is_alive() for t in threads)
    assert overlaps == []
    numbers = sorted(n for ns in seen.values() for n in ns)
    assert numbers == list(range(1, 2001)) and bus.seq == 2000
    assert all(ns == sorted(ns) for ns in seen.values())


class Interrupted(Exception):
    pass


def test_a_wait_for_the_bus_is_interruptible(bus):
    """An event waiting for the bus while another thread's listener holds it can be
    interrupted by a signal (Ctrl-C on a stuck listener), as threading.Lock's wait can: the
    handler's exception reaches the emitter while the other event still holds the bus, and
    the bus serves the next event once that one is done."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals are handled on the main thread")
    held, release, raised = threading.Event(), threading.Event(), threading.Event()

    def slow(a, f):
        if a == "slow":
            held.set()
            release.wait(BOUND_S)
    bus.subscribe(slow)
    other = threading.Thread(target=bus.publish, args=("slow", {}), daemon=True)
    other.start()
    assert held.wait(BOUND_S)
    fired = []

    def handler(signum, frame):
        if not fired:           # (once: the resends below arrive after it too)
            fired.append(signum)
            raise Interrupted()
    main = threading.main_thread()

    def interrupt():
        # (resent until the emitter has the exception: a signal that lands before the wait
        # starts is handled before it, and the next one ends the wait; bounded)
        for _ in range(int(BOUND_S / 0.05)):
            if raised.wait(0.05):
                return
            signal.pthread_kill(main.ident, signal.SIGUSR1)
    previous = signal.signal(signal.SIGUSR1, handler)
    sender = threading.Thread(target=interrupt, daemon=True)
    try:
        sender.start()
        with pytest.raises(Interrupted):
            bus.publish("blocked", {})
        raised.set()
        assert other.is_alive(), "the emitter waited for the other event to finish"
    finally:
        raised.set()
        release.set()
        sender.join(BOUND_S)
        signal.signal(signal.SIGUSR1, previous)
    other.join(BOUND_S)
    assert not other.is_alive()
    seen = []
    bus.subscribe(lambda a, f: seen.append((a, f["seq"])))
    bus.publish("after", {})
    assert seen == [("after", bus.seq)]
