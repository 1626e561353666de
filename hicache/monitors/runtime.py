"""The monitor: generated spec checks bound to runtime events through a refinement map.

A `Monitor` listens to an event bus (`fn(action, fields)`). On each event it maps the
runtime's state to the spec's variables (the refinement map), checks the named action on
(previous mapped state -> new mapped state) and the invariants on the new one, per mode:

  off     the monitor is not attached (nothing runs: the bus has no listener)
  sample  a seeded fraction of steps is checked, plus every invariant at each
          `cache_check()`: on an invariant-only from-scratch map the events to the next
          sampled one are drawn at once (geometric) and the ones between are only bound and
          recorded, except the map's `always_check` events (a DraftState retire: what it
          ends no later sample could see), checked whatever the draw, and those of its
          `trigger_events` its `trigger` names (HostTier: an eviction of a node something
          still holds, where a transient breach begins), checked whatever the draw and
          the budget; otherwise the
          decision for step k+1 is drawn at step k, so the pre-state of a sampled step is
          mapped only then. A drawn sample is checked while the monitor's checking time
          is within `sample_budget` of the time that passed (default 1%; None: always),
          credit for idle time kept for `budget_window` seconds at most, so a canary's
          cost stays bounded on any state size and comes in no burst after a quiet
          spell; one it lets go is counted
  strict  every step

A failure raises `ProtocolViolation` (action, args, failing conjunct and its spec location,
state diff, recent history) after writing the history as an ITF trace that `hicache
explain` reads. Invariant: `self.prev` is the mapped state after the last event whenever
the next step is to be checked (strict: always).
"""
from __future__ import annotations

import collections
import contextlib
import enum
import functools
import math
import operator
import os
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from hicache.monitors.fused_native import native_inc_all
from hicache.monitors.gate import Gate, LetGo, StrictStep
from hicache.monitors.maps.loops import variables_of as _variables_of    # (a delta's variables)
from hicache.monitors.rt import Failure, domain_is
from hicache.tla.values import Fcn


class Mode(enum.StrEnum):
    OFF = "off"
    SAMPLE = "sample"
    STRICT = "strict"


class CheckCause(enum.StrEnum):
    """Why a monitor checked the step it was at (`Monitor.cause`; a violation trace's
    `checked_because`, which `hicache explain` states): what a sample-mode catch owes to its
    draws, its map's always-checked events and trigger, or a cache check."""
    EVERY_STEP = "every step"                       # strict mode
    DRAW = "the seeded draw"                        # sample mode: a drawn step
    WEIGHTED_DRAW = "the seeded draw at its weight"  # ... an event of the map's sample_weights
    ALWAYS = "an always-checked event"              # ... of the map's always_check
    TRIGGER = "the map's trigger"                   # ... one of its trigger_events it named
    CACHE_CHECK = "a cache check"                   # every invariant, at a check point


#: the causes that are draws: such a check's cost estimates the next drawn sample's
_DRAWN = frozenset({CheckCause.DRAW, CheckCause.WEIGHTED_DRAW})


@dataclass(frozen=True, slots=True)
class VerifyConfig:
    """How a monitor checks; validated once."""
    mode: Mode = Mode.OFF
    sample_rate: float = 0.05     # sample mode: fraction of steps checked
    seed: int = 0                 # sample mode: the RNG seed (reproducible choices)
    # sample mode: the share of the time that passes a monitor spends checking before it
    # lets drawn samples go (None: every drawn sample is checked, whatever it costs; see
    # Monitor._afford). 1 %: a check costs the runtime about 1.7 times its own duration (it
    # evicts the runtime's code and data from the core's caches), and the events' path and
    # the final check cost ~3 % of the monitors bench's replay, so 1 % brings sample mode's
    # whole cost to issue 6's 1.05x, a point either side (docs/benchmarks.md, "Monitors");
    # 2 % read 1.05x-1.07x
    sample_budget: float | None = 0.01
    # ... over what span, in seconds: the credit a quiet spell earns is kept up to
    # sample_budget x budget_window (so it is spent in no long burst of checks later); a
    # fresh monitor's first sample, its cost unknown, waits for that much (Monitor._need)
    budget_window: float = 1.0
    history: int = 64             # events kept for the violation report and trace
    # where violation traces go: a str or os.PathLike (a pathlib.Path), kept as its str
    violation_dir: str = "hicache-violations"

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "mode", Mode(self.mode))
        except ValueError:
            raise ValueError(f"mode: {self.mode!r} is not one of off, sample, strict") from None
        from hicache.validate import int_at_least, integer, number_in
        object.__setattr__(self, "sample_rate", number_in("sample_rate", self.sample_rate, 0.0, 1.0))
        if self.sample_budget is not None:
            object.__setattr__(self, "sample_budget",
                               number_in("sample_budget", self.sample_budget, 0.0, 1.0, lo_open=True))
        object.__setattr__(self, "budget_window", number_in("budget_window", self.budget_window, 0.0, lo_open=True))
        integer("seed", self.seed)
        int_at_least("history", self.history, 2)      # a violation needs its pre-state
        # (normalized once: the trace writer, the pytest report header and equality between
        # configs see one str, whichever form the caller had)
        vdir = os.fspath(self.violation_dir) if isinstance(self.violation_dir, os.PathLike) else self.violation_dir
        if not isinstance(vdir, str) or not vdir.strip():
            raise ValueError(f"violation_dir: must be a directory path, got {self.violation_dir!r}")
        object.__setattr__(self, "violation_dir", vdir)

    @classmethod
    def from_env(cls, env=None, **given) -> "VerifyConfig":
        """HICACHE_VERIFY=off|sample|strict, HICACHE_VERIFY_RATE, HICACHE_VERIFY_SEED,
        HICACHE_VERIFY_BUDGET (a fraction in (0, 1], or `none`), HICACHE_VERIFY_BUDGET_WINDOW
        (seconds, > 0), HICACHE_VIOLATION_DIR. Each one unset, empty or blank is its field's
        default (HICACHE_VERIFY: off). A field in `given` (a flag, an argument in code) wins
        and its variable is not read: a bad value the caller overrides must not block it."""
        env = os.environ if env is None else env
        # (in field order, each variable's error naming it: the environment is the input here)
        fields = {name: read(env) for name, read in _ENV_READERS.items() if name not in given}
        return cls(**fields, **given)


def _default(field: str):
    return VerifyConfig.__dataclass_fields__[field].default


def _env_raw(env, name: str) -> str | None:
    """The variable's stripped value; None when unset, empty or blank (then the default, for
    every variable alike: `VAR= cmd` in a shell, or a CI template's empty slot, means unset)."""
    raw = env.get(name, "").strip()
    return raw or None


def _env_mode(env) -> Mode:
    raw = _env_raw(env, "HICACHE_VERIFY")
    try:
        return Mode((raw or "off").lower())
    except ValueError:
        raise ValueError(f"HICACHE_VERIFY: {raw.lower()!r} is not one of off, sample, strict") from None


def _env_rate(env) -> float:
    rate = _env_number(env, "HICACHE_VERIFY_RATE", "sample_rate", float, "a fraction in [0, 1]")
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"HICACHE_VERIFY_RATE: {rate!r} is not a fraction in [0, 1]")
    return rate


def _env_seed(env) -> int:
    return _env_number(env, "HICACHE_VERIFY_SEED", "seed", int, "an integer")


def _env_budget(env) -> float | None:
    """HICACHE_VERIFY_BUDGET: unset or empty, the default; `none`, no budget; else a
    fraction in (0, 1]."""
    raw = _env_raw(env, "HICACHE_VERIFY_BUDGET")
    if raw is None:
        return _default("sample_budget")
    if raw.lower() == "none":
        return None
    try:
        budget = float(raw)
    except ValueError:
        budget = math.nan
    if not (0.0 < budget <= 1.0):     # (NaN too: a word, or "nan")
        raise ValueError(f"HICACHE_VERIFY_BUDGET: {raw!r} is not a fraction in (0, 1] or none")
    return budget


def _env_window(env) -> float:
    window = _env_number(env, "HICACHE_VERIFY_BUDGET_WINDOW", "budget_window", float, "a number of seconds > 0")
    if not (0.0 < window < math.inf):     # (NaN too)
        raise ValueError(f"HICACHE_VERIFY_BUDGET_WINDOW: {window!r} is not a number of seconds > 0")
    return window


def _env_dir(env) -> str:
    # (set but empty: the default, as for every variable; not the current directory)
    return _env_raw(env, "HICACHE_VIOLATION_DIR") or _default("violation_dir")


def _env_number(env, name: str, field: str, kind, what: str):
    raw = _env_raw(env, name)
    if raw is None:
        return _default(field)
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"{name}: {env[name]!r} is not {what}") from None


#: VerifyConfig field -> its variable's reader (history has none)
_ENV_READERS = {"mode": _env_mode, "sample_rate": _env_rate, "seed": _env_seed,
                "sample_budget": _env_budget, "budget_window": _env_window, "violation_dir": _env_dir}


class RefinementMap(Protocol):
    """From a runtime's state to one spec's variables.

    `spec` is the generated module; `constants()` the raw constants of the current runtime
    configuration (may change as the runtime grows: the monitor caches `spec.constants`);
    `state()` the mapped state (dict variable -> value); `bind(action, fields)` the spec
    action steps this event performs: [(action, params)] (params None: the event is a
    compound of several spec steps, so only the invariants are checked after it); None to
    skip the event entirely (not part of this protocol). Optional: `always_check` (events
    sample mode checks whatever the draw), `sample_weights` (event -> w: sample mode on an
    invariant-only map draws it at w times the rate), `trigger_events` with
    `trigger(action, fields) -> bool` (one of those events it names is checked whatever the
    draw and the budget, on an invariant-only map), `spec_args()` (the spec's binding of the event
    just bound, where the map renames: recorded beside the event's fields),
    `state_constants_key(t)` with `state_constants(t)` (a from-scratch map: the constants of a
    state it mapped, read off that state instead of the runtime, and a key for them; equal keys
    mean equal constants, class for class: the process's monitors share one binding per key,
    `Monitor._constants_at(t)`).
    """
    spec: Any

    def constants(self) -> dict: ...

    def state(self) -> dict: ...

    def bind(self, action: str, fields: dict) -> list[tuple[str, tuple]] | None: ...


_COMPOUND: dict = {}

#: a vocabulary member -> its name as a plain str, made once: `str()` of a StrEnum member
#: copies it at every call, and each dict the copy is then looked up in hashes it again
_NAMES: dict = {}


def _name_of(action) -> str:
    """`str(action)`, kept in _NAMES for a vocabulary's members (a bounded set; a str, its
    own name, is not kept)."""
    name = str(action)
    if isinstance(action, enum.Enum):
        _NAMES[action] = name
    return name


#: constants bindings shared by every monitor of the process: (spec module, typed raw
#: constants) -> the binding `spec.constants` built. Keyed by the module object, not its
#: name: a module generated from an edited spec (the generator's tests make them) has the
#: same name. A binding is a pure function of those values and nothing writes one after it
#: is built, so a cache's monitors, a companion's, a cache check's reference binding and the
#: next cache's monitors share one; bounded (each holds materialized sets), the oldest
#: dropped first. Building HostTier's binding (its node, slot and request sets) cost ~50 us
#: warm and ~200 us inside a replay, three times in each sample-mode replay of the monitors
#: bench (two samples and the final check).
_BINDINGS: dict = {}
_BINDINGS_MAX = 64       # (as a monitor's own cache: a binding can hold sets of every host slot)
#: held to add or drop one (monitors on transfer threads build bindings too: the oldest
#: key's lookup must not see the dict change under it); a lookup needs no lock
_BINDINGS_LOCK = threading.Lock()
#: the value types a binding's key takes as they are (and frozensets of them)
_KEY_ATOMS = (int, str, bool, type(None))


#: bindings by a map's own key for the constants of a state it mapped (`state_constants_key`):
#: (spec module, key) -> the binding; bounded and locked as _BINDINGS. A fresh monitor's
#: first check (a sample-mode replay's every check) finds the binding here with one tuple
#: hashed, where the general key (`_binding_key`) reads and sorts every constant
#: (~17 us a monitor's check, cold, in the monitors bench's replay).
_STATE_BINDINGS: dict = {}


def _binding_key(spec, raw: dict) -> tuple | None:
    """`raw`'s key in _BINDINGS, or None (not shared) for a value of another type. Each
    value is keyed with its class, so 1 and TRUE (equal and of equal hash in Python) never
    share a binding: the ASSUMEs test the class."""
    items = []
    for k, v in raw.items():
        cls = v.__class__
        if cls in _KEY_ATOMS:
            items.append((k, cls, v))
        elif cls is frozenset:
            if any(x.__class__ not in _KEY_ATOMS for x in v):
                return None
            # (the element classes too: {1} and {TRUE} are equal sets)
            items.append((k, cls, frozenset([(x.__class__, x) for x in v])))
        else:
            return None
    items.sort(key=_first)
    return (spec, *items)


_UNKEYED = object()     # binding's `key` not given: computed there


def binding(spec, raw: dict, key=_UNKEYED) -> dict:
    """`spec.constants(raw)`, shared with every other monitor of the process that asked for
    the same constants (read it, never write it). `key`: `_binding_key(spec, raw)`, when the
    caller has it already (None: not shared)."""
    if key is _UNKEYED:
        key = _binding_key(spec, raw)
    if key is None:
        return spec.constants(raw)
    C = _BINDINGS.get(key)
    if C is None:
        C = kept(_BINDINGS, key, spec.constants(raw))
    return C


def kept(table: dict, key, value, most: int | None = None):
    """value kept in the process-wide `table` under key (the oldest dropped past `most`,
    _BINDINGS_MAX when None), or the value another thread kept there meanwhile: one value a key
    (a binding, a map's shared functions). A lookup needs no lock."""
    with _BINDINGS_LOCK:
        if len(table) >= (_BINDINGS_MAX if most is None else most):
            table.pop(next(iter(table)), None)
        return table.setdefault(key, value)


def compound_step(action) -> tuple:
    """What `bind` reports for an event a map checks as a compound of spec steps (the
    invariants only, after it): one shared value per action."""
    steps = _COMPOUND.get(action)
    if steps is None:
        steps = _COMPOUND[action] = ((str(action), None),)
    return steps


def compound_steps(actions) -> dict:
    """Each action's name -> its `compound_step`: a table a map's `bind` reads at every
    event instead of calling compound_step."""
    return {str(a): compound_step(a) for a in actions}


@dataclass(slots=True)
class Step:
    seq: int
    action: str
    args: dict
    state: dict | None        # mapped state after the event (None: not mapped, sample mode)
    delta: list | None = None  # incremental maps: the writes of this event, flat (undo rebuilds states)
    spec: str | None = None    # one spec step of an event that is several (its action)


class ProtocolViolation(AssertionError):
    """The runtime did something its spec does not allow."""

    def __init__(self, *, spec: str, action: str, args: dict, failure: Failure, kind: str,
                 diff: dict, history: list[Step], step: int, trace_path: str | None,
                 trace_error: str | None = None, checked_because: str | None = None):
        self.spec = spec
        self.action = action
        self.arguments = args      # (`args` is BaseException's)
        self.failure = failure
        self.conjunct = failure.text
        self.location = failure.location
        self.property = failure.property
        self.kind = kind                  # "action" | "invariant" | "digest"
        self.diff = diff
        self.history = history
        self.step = step
        self.trace_path = trace_path
        self.trace_error = trace_error    # why no trace was written (directory and OS error)
        self.checked_because = checked_because    # why the monitor checked this step (a CheckCause's text)
        super().__init__(self._message())

    def __reduce__(self):
        # keyword-only fields: rebuilt from them, so a violation raised in a worker process
        # (multiprocessing, a process pool) arrives as itself, not as an unpickling error
        return _rebuild_violation, (dict(spec=self.spec, action=self.action, args=self.arguments,
                                         failure=self.failure, kind=self.kind, diff=self.diff,
                                         history=self.history, step=self.step, trace_path=self.trace_path,
                                         trace_error=self.trace_error, checked_because=self.checked_because),)

    #: changed entries the message lists (the trace and `hicache explain` have them all)
    MESSAGE_CHANGES = 16

    def _message(self) -> str:
        from hicache.tla.values import changes
        lines = [f"{self.spec}: {self.kind} {self.property} violated at step {self.step} "
                 f"by {self.action}({', '.join(f'{k}={v!r}' for k, v in self.arguments.items() if k != 'seq')})",
                 f"  {self.failure.describe()}"]
        # what the step changed, per entry (`host[3]: 0 -> 2`): a whole function of a real
        # cache's pages would bury the one entry that matters
        changed = [item for var, (a, b) in sorted(self.diff.items()) for item in changes(var, a, b).items()]
        for name, (a, b) in changed[:self.MESSAGE_CHANGES]:
            lines.append(f"  {name}: {a} -> {b}")
        if len(changed) > self.MESSAGE_CHANGES:
            lines.append(f"  ... and {len(changed) - self.MESSAGE_CHANGES} more changed entries (in the trace)")
        tail = self.history[-8:]
        if tail:
            lines.append("  recent events: " + ", ".join(f"{h.seq}:{h.action}" for h in tail))
        if self.trace_path:
            lines.append(f"  trace: {self.trace_path} (hicache explain {self.trace_path})")
        else:
            lines.append(f"  trace: not written ({self.trace_error or 'no trace directory'})")
        return "\n".join(lines)


def _rebuild_violation(fields: dict) -> ProtocolViolation:
    return ProtocolViolation(**fields)


def write_trace_file(directory: str, stem: str, doc: dict) -> tuple[str | None, str | None]:
    """(path, None) once `doc` is written as a new trace under `directory`, or (None, what
    went wrong: the directory and the OS error) when it cannot be: the violation is raised
    either way, and says which."""
    from hicache.tla.itf import write_itf_new
    try:
        return write_itf_new(directory, stem, doc), None
    except OSError as e:
        return None, f"{directory}: {e.strerror or e}"


def state_diff(s: dict | None, t: dict) -> dict:
    if s is None:
        return {}
    return {k: (s.get(k), v) for k, v in t.items() if not k.startswith("_") and s.get(k) != v}


#: fused_over_all's answers: (spec module, invariant names, overridden names) -> it. A pure
#: function of those (read-only tuples of frozensets and str), asked by every monitor made
#: (~21k of the ~196k instructions a monitor's construction took, two monitors a bench replay);
#: bounded, as _BINDINGS (a generated module per edited spec in the generator's tests)
_FUSED: dict = {}


def fused_over_all(spec, invariants: dict, overrides: dict) -> tuple | None:
    """How a state mapped from scratch (a sampled step, a cache check) is checked by the
    generated one-pass fast path (`inc_all` over every element of every domain): (the
    invariants of `invariants` it decides, the incremental forms it skips, the domains, the
    (variable, Dom) pairs whose DOMAIN its element-wise `f \\in [Dom -> S]` conjuncts take
    as given); None when the spec has none. A form the map overrides is the map's own, and an
    invariant whose element-wise conjunct reads an expression (no variable to test) is left
    to the exact forms. (It reads only the names of `invariants` and `overrides`: answered
    from _FUSED for names asked before.)"""
    key = (spec, frozenset(invariants), frozenset(overrides))
    got = _FUSED.get(key, _FUSED)
    if got is _FUSED:
        got = _fused_over_all(spec, invariants, overrides)
        if len(_FUSED) >= _BINDINGS_MAX:
            _FUSED.clear()
        _FUSED[key] = got
    return got


def _fused_over_all(spec, invariants: dict, overrides: dict) -> tuple | None:
    inc_all = getattr(spec, "inc_all", None)
    given_of = getattr(spec, "FCN_DOMAINS", None)
    if inc_all is None or given_of is None:
        return None
    inc = spec.INCREMENTAL
    fused = frozenset(n for n in inc if n in invariants and n not in overrides and given_of.get(n) is not None)
    if not fused:
        return None
    given = tuple(dict.fromkeys(g for n in sorted(fused) for g in given_of[n]))
    return fused, frozenset(inc) - fused, incremental_domains(spec), given


def incremental_domains(spec) -> tuple:
    """Every domain an incremental form of `spec` is element-local in (what `inc_all` walks)."""
    return tuple(sorted({d for _, doms in spec.INCREMENTAL.values() for d in doms}))


def first_failure(spec, fast: tuple | None, C: dict, t: dict, invs: dict, inc_all=None) -> Failure | None:
    """The first of `invs` (name -> exact form) failing on state t, mapped from scratch,
    under constants C; None when all hold. `fast` (fused_over_all's) first: when t's
    functions have the domains its element-wise conjuncts take as given and the fast path
    holds, the invariants it covers hold and only the others run; otherwise every exact form
    runs, in order, so the failure named is the one they name. `inc_all`: the fast path's
    pass, native_inc_all(spec) when None."""
    rest = invs.values()
    if fast is not None:
        fused, skip, domains, given = fast
        if inc_all is None:
            inc_all = native_inc_all(spec)
        if fused <= invs.keys() and all(domain_is(t.get(v), C[d]) for v, d in given) \
                and inc_all(C, t, {d: C[d] for d in domains}, None, skip):
            rest = [inv for n, inv in invs.items() if n not in fused]
    for inv in rest:
        f = inv(C, t)
        if f is not None:
            return f
    return None


class Monitor:
    """Checks one protocol's events against its generated spec module."""

    def __init__(self, rmap: RefinementMap, cfg: VerifyConfig):
        self.rmap = rmap
        self.spec = rmap.spec
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        # (Steps; gap-counted sample mode's unsampled events and strict mode's steps on an
        # incremental map as tuples until read: `history`)
        self._history: collections.deque = collections.deque(maxlen=cfg.history)
        self._steps = 0              # events seen (`steps`; gap-counted sample mode: the gate's)
        self._checked = 0            # steps whose action was checked (`checked`; the native strict step's)
        self.cache_checks = 0        # cache checks run
        self._cache: dict = {}
        self._strict = cfg.mode is Mode.STRICT
        # sample mode's budget (see _afford): a bucket of checking seconds, filled at
        # sample_budget per second that passes, holding at most sample_budget x budget_window
        # (or one check's cost, when that is more: so a costly check is never shut out)
        self._budget = cfg.sample_budget if cfg.mode is Mode.SAMPLE else None
        self._window = cfg.budget_window
        # the bucket is updated from the scheduler thread (cache checks) and from transfer
        # threads (a DraftState monitor's events): read-modify-writes under this lock
        self._budget_lock = threading.Lock()
        self._credit = 0.0           # seconds of checking afforded now (< 0: a debt being repaid)
        self._filled = _clock()      # when the credit was last brought up to date
        self._born = self._filled    # when the monitor was made (`checking`: the time since)
        self._spent = 0.0            # seconds spent checking in all
        # what the last sampled check cost (the next one's estimate; None: none checked yet)
        self._last_cost: float | None = None
        # what the last cache check cost (None: none yet), the next one's estimate: a sample
        # is afforded only with that much credit left over after it (`_need`)
        self._cache_cost: float | None = None
        self._mapped = False         # whether the event being handled mapped a state (charged)
        self._skipped = 0            # drawn samples the budget let go here (`budget_skipped`)
        # a map may name what its constants depend on (cheaper than freezing them all), and
        # keep that key as an attribute its writes update (`synced_key`: read by C calls, no
        # frame of the map's, at every event)
        self._constants_key = functools.partial(getattr, rmap, "synced_key") if hasattr(rmap, "synced_key") \
            else getattr(rmap, "constants_key", None)
        # (the strict step reads `synced_key` off the map itself: no call at every event)
        self._synced_key = hasattr(rmap, "synced_key")
        # a from-scratch map's key for the constants of a state it mapped (None: none, or a
        # monitor class with constants of its own, which `_constants_at` then asks)
        self._state_key = getattr(rmap, "state_constants_key", None) \
            if type(self).constants is Monitor.constants else None
        self._check_next = self._strict or self._draw()
        # a map whose events are all compound steps (no action checks) never needs the
        # state before an event
        self.needs_prestate = bool(getattr(rmap, "needs_prestate", True))
        self.incremental = bool(getattr(rmap, "incremental", False))
        # sample mode on a from-scratch, invariant-only map: the unsampled events between
        # two sampled ones are counted down (a geometric gap drawn once per sample, the same
        # distribution as a per-event draw) and only bound and recorded, never mapped
        gap_counted = cfg.mode is Mode.SAMPLE and not self.needs_prestate and not self.incremental
        # (that sample mode's listener between samples, and the keeper of its counters: the
        # gate, monitors/gate.py, made below once the events it hands over are known; the
        # gap drawn here, where the seed's draws have always been made)
        gap = self._next_gap() if gap_counted else -1
        self._gate = None
        self._let_go = None          # the gate's let-go in C (LetGo), where it builds
        # cheap runtime checks (the worker watch: a dead worker would hang the next drain),
        # run at every checked event and at every drawn sample the budget lets go (made
        # before the gate: its let-go reads the list, which is appended to, never replaced)
        self.watch_hooks: list = []
        # events such a sample mode checks whatever the draw (the map's `always_check`: it
        # checks them on the state before the map lets their evidence go, which only an
        # invariant-only map defers; one with action checks would see it gone)
        self._always = frozenset(getattr(rmap, "always_check", ()))
        # ... and the events it draws at a weight times the rate, each on its own (the map's
        # `sample_weights`: where a breach of the protocol begins, an eviction taking what
        # another party holds, which a gap-counted sample would check no more often than a
        # request's match): event -> its probability; the gap counts the other events
        self._weighted: dict = {}
        # ... and the events a map's `trigger(action, fields)` may ask to check whatever the
        # draw and the budget (HostTier: an eviction of a node something still holds, where a
        # transient breach begins), drawn as weighted events when it does not (at the rate,
        # unless weighted)
        self._trigger = None
        self._trigger_on: frozenset = frozenset()
        self.triggered = 0           # events checked because the map's trigger asked
        if gap_counted:
            weights = dict(getattr(rmap, "sample_weights", {}))
            self._trigger_on = frozenset(getattr(rmap, "trigger_events", ()))
            if self._trigger_on:
                self._trigger = rmap.trigger
                for a in self._trigger_on:
                    weights.setdefault(a, 1)
            self._weighted = {a: min(1.0, cfg.sample_rate * w) for a, w in weights.items()}
            # the gate records the events between samples and draws the weighted ones; it
            # hands the monitor the drawn sample, the always-checked events and a weighted
            # one drawn or triggered
            # ... and holds the events it would only bind and record, binding them in a batch
            # before anything reads what binding changes, where the map says which of its
            # events bind to no step (`unbound_actions`; see gate.py)
            # ... and, under a budget, lets go itself a drawn sample the budget would let go
            # (its `closed_until`, kept by _afford and _charge): bound, counted and recorded
            # there, and only the let-go's own work (`_gate_let_go`) here
            # ... whose own part, with the C gate, is in C too (LetGo: `_gate_let_go` without
            # its frame; the gate calls it, and `budget_skipped` adds its count)
            budgeted = self._budget is not None
            let_go = None
            if budgeted:
                let_go = self._gate_let_go
                if LetGo is not None:
                    let_go = self._let_go = LetGo(self, self.rng.random, cfg.sample_rate, self.watch_hooks, _NAMES,
                                                  _name_of, CheckCause.DRAW, CheckCause.WEIGHTED_DRAW)
            # ... and, where the map's bind is pure (keeps nothing: the map reads its
            # bookkeeping off the runtime when it maps a state), neither holds nor binds them
            unbound = getattr(rmap, "unbound_actions", None)
            self._gate = Gate(rmap.bind, self._always, self._gated, self._history, weighted=self._weighted,
                              draw=self.rng.random, trigger=self._trigger, trigger_on=self._trigger_on,
                              weighed=self._weighed, unbound=unbound,
                              clock=_clock if budgeted else None, let_go=let_go,
                              pure=unbound is not None and getattr(rmap, "pure_bind", False) is True)
            self._gate.gap = gap
            if budgeted:
                self._close_gate()      # (no credit yet: closed until the first sample's is earned)
        if self._always and cfg.mode is Mode.SAMPLE and self.needs_prestate:
            raise ValueError(f"{type(rmap).__name__}: sample mode checks its always-checked events "
                             f"({', '.join(sorted(self._always))}) on an invariant-only map: build it "
                             f"without action checks (actions=False), as verified mode does")
        self._spec_args = getattr(rmap, "spec_args", None)
        self.sampled = cfg.mode is Mode.STRICT   # whether the event being handled is checked
        # ... and why the last checked one was (a trace records the violating check's): a
        # step checked by the draw is every step in strict mode (whose draw always checks)
        self._drawn_cause = CheckCause.EVERY_STEP if self._strict else CheckCause.DRAW
        self.cause: CheckCause | None = CheckCause.EVERY_STEP if self._strict else None
        # set by the first violation: the runtime's state is past what the spec allows, so
        # every later check would fail on it again (a teardown's close() raising a second
        # violation); the monitor reports one violation and then checks nothing more
        self.tripped = False
        # the monitors of one runtime (a cache's HostTier monitor, its draft set's DraftState
        # monitor, a sharded cache's CPSharding one: `link`): one violation trips them all,
        # since the operation it stopped left every one's state half done
        self.linked: list[Monitor] = [self]
        self.cache_check_hooks: list = []        # further checks a cache check runs (fn())
        self.companions: list = []               # monitors of other specs on the same runtime
        self.step_hooks: list = []               # ... and a checked event (fn(name, fields))
        self.sampled_by: Monitor | None = None   # a companion's leader (its samples are the leader's)
        self.prev: dict | None = self.rmap.state() if self._check_next and self.needs_prestate else None
        # a map's own forms of some invariants (read once: a map's property builds the dict)
        overridden = getattr(rmap, "invariant_overrides", {})
        self.invariants = dict(self.spec.INVARIANTS)
        self.invariants.update(overridden)
        # a map may check a subset of the spec's invariants (`checked_invariants`): those
        # its instance of the spec can break (CPSharding at CP = 1: the placement ones hold
        # by arithmetic in every state TypeOK allows, see maps/device_pages.py)
        only = getattr(rmap, "checked_invariants", None)
        if only is not None:
            self.invariants = {n: f for n, f in self.invariants.items() if n in only}
        # an invariant that reads no variable (READS empty: the constants alone, such as
        # placement arithmetic over every address) is checked again only when a constant it
        # reads (CONST_READS) changed value since it last held, not at every step
        reads_of = getattr(self.spec, "READS", {})
        const_reads = getattr(self.spec, "CONST_READS", {})
        # (not an invariant the map overrides: its own form may read state)
        # constant-level invariant -> the constants it reads, in a fixed order (its verdict key)
        self._const_level = {n: tuple(sorted(const_reads.get(n, self.spec.CONSTANTS))) for n in self.invariants
                             if not reads_of.get(n, True) and n not in overridden}
        self._const_held: dict[str, tuple] = {}   # invariant -> its constants' values when it held
        # incremental maps keep the mapped state themselves and report what changed;
        # invariants are then checked on the changed elements only (see _strict_step, _step_incremental);
        # the states of the history are rebuilt from the deltas on a failure
        if self.incremental:
            self.prev = None
            inc = getattr(self.spec, "INCREMENTAL", {})
            over = rmap.incremental_overrides
            reads = getattr(self.spec, "READS", {})
            every = frozenset(self.spec.VARIABLES)
            # (name, incremental form or None, full form, the variables the invariant reads)
            self._inc_checks = [(name, over.get(name) or (inc[name][0] if name in inc else None), full,
                                 reads.get(name, every))
                                for name, full in self.invariants.items()]
            self._checked_C = None       # the constants binding of the last checked step
            self._domains = incremental_domains(self.spec)
            self._guard = getattr(rmap, "guard", None)
            # a map's check of an event's effect on the state after it (`effect`, for the
            # actions in `effect_actions`: HostTier's frames and own-node writes in tree form)
            self._effect = getattr(rmap, "effect", None)
            self._effect_on = frozenset(getattr(rmap, "effect_actions", ())) if self._effect is not None \
                else frozenset()
            # ... narrowed by each sync where the map can tell (`effect_due`, read after the
            # sync: the actions whose effect check can find something in what it changed, a
            # subset of effect_actions; HostTier: a request's step that changed no node, most
            # of a run's events, calls no frame check, which would return None)
            self._effect_due = self._effect is not None and hasattr(rmap, "effect_due")
            # a map whose sync can tell that its dirty dict is already the checks' domains
            # under its own constants binding (`own_domains`, read after each sync: `domains`
            # would return the dict unchanged), the binding every check here is under
            self._own_domains = hasattr(rmap, "own_domains")
            # the state the checks read: a map whose `live()` is one dict for its life,
            # written in place (`live_in_place`), is asked once, not at every check
            self._live = rmap.live() if getattr(rmap, "live_in_place", False) else None
            self._presynced = True       # the map's state is the state before the next event
            # (the fast path skips what the map replaces and what it does not check)
            self._fused_skip = frozenset(over) | frozenset(n for n in inc if n not in self.invariants)
            fused = frozenset(n for n in inc if n not in self._fused_skip)
            # the generated one-pass fast path of every incremental form the map does not
            # replace; the forms it covers run only when it does not hold. None where every
            # form it has is the map's own or unchecked (a call that would decide nothing: the
            # device-page map's at CP = 1, on each event that moves a page)
            self._inc_all = native_inc_all(self.spec) if fused else None
            # what runs when the fused fast path holds: the checks it does not cover
            self._unfused_checks = [c for c in self._inc_checks if c[0] not in fused] \
                if self._inc_all is not None else self._inc_checks
            # ... and the variables any of them reads (a step that changed none of these,
            # most request events for HostTier, runs none of them: one test, not one each)
            self._unfused_reads = frozenset().union(*(c[3] for c in self._unfused_checks))
        # strict mode on an incremental map: the one-frame listener (_strict_step)
        self._fast = self._strict and self.incremental
        # a map that judges events of other threads (a loader's LoadBackLayer, no step) keeps
        # what it found in `breach`, reported on this monitor's next step or cache check
        self._breaches = self.incremental and hasattr(rmap, "breach")
        # ... and of a map that can tell, before syncing, that nothing its state is a function
        # of was written since its last sync (`quiet()`: the device-page map on the events
        # that move no device page, ~3 of every 4): the step's mapped state, its constants
        # and every verdict are the last step's, so when the step has nothing else to run
        # (no guard, no effect check, no breach to report, no hooks) it is only recorded
        self._quiet = rmap.quiet if self._fast and hasattr(rmap, "quiet") and self._guard is None \
            and not self._effect_on and not self._breaches else None
        self._scratch_fast = fused_over_all(self.spec, self.invariants, overridden)
        # its native form built now (once a process, fused_native), not at the first check
        # that takes it: there the build (tens of ms) would be charged to the budget as that
        # sample's cost, the next one's estimate, and a fresh process's monitor would then
        # check nothing for seconds; and kept, so a check does not ask again (each ask reads
        # the environment's HICACHE_NATIVE, ~2k instructions)
        self._scratch_inc = native_inc_all(self.spec) if self._scratch_fast is not None else None
        # strict mode's step in C (gate.py's StrictStep, whenever it builds): the listener the
        # bus is given, the keeper of the counters (`steps`, `checked`, `tripped` beside the
        # monitor's own); _strict_step defines what it does, and serves where it is None
        self._native = self._native_step() if self._fast and StrictStep is not None else None

    def _native_step(self):
        """Strict mode's native step over this monitor as it is now: it holds the step's
        parts fixed at construction (the quiet test, guard, effect check, the cache, the hook
        lists, which are appended to, never replaced, and the parts of _check_delta, which it
        runs itself under the last checked constants binding, where the class's is Monitor's);
        one made again after a part is replaced (a test's) takes the new part, and starts its
        counts from zero. Made once per monitor outside tests (at construction), and again
        only before a bus is given `listener`: a bus keeps the step it was given, which would
        go on taking the events while the monitor counted by the new one (what changes after
        that is read by reference or at each event: the hook lists, the map's `bind`, the
        history through its setter; test_monitor_listener.py)."""
        checks = (self._own_domains, self._live, self._inc_all, self._fused_skip, self._unfused_checks,
                  self._unfused_reads, self._inc_checks, _variables_of) \
            if type(self)._check_delta is Monitor._check_delta else None
        return StrictStep(self, self.rmap, _NAMES, _name_of, self._cache, self._history, quiet=self._quiet,
                          guard=self._guard, effect=self._effect, effect_on=self._effect_on,
                          effect_due=self._effect_due, breaches=self._breaches, synced_key=self._synced_key,
                          step_hooks=self.step_hooks, watch_hooks=self.watch_hooks, checks=checks)

    # ------------------------------------------------------------ helpers
    @property
    def history(self) -> collections.deque:
        """The recent steps. The events recorded on the hot paths are tuples, the cheapest
        record of an event, and each becomes its Step here, when something reads the history
        (a violation, a trace): gap-counted sample mode's unsampled event as (seq, action,
        args), strict mode's step on an incremental map as (seq, action, args, None, delta)."""
        self._flush()
        h = self._history
        if self._gate is not None or self._fast:     # (no other monitor records a tuple: read as kept)
            for i in range(len(h)):
                r = h[i]
                if r.__class__ is tuple:
                    h[i] = Step(*r) if len(r) == 5 else Step(*r, None)
        return h

    @history.setter
    def history(self, steps: collections.deque) -> None:
        self._flush()      # (the held events recorded where the steps before them are)
        self._history = steps
        if self._gate is not None:
            self._gate.history = steps
        if self._native is not None:
            self._native.history = steps

    @property
    def steps(self) -> int:
        """Events seen (those the map bound to this spec); gap-counted sample mode's gate
        counts them, and strict mode's native step."""
        self._flush()
        g = self._gate or self._native
        return self._steps if g is None else g.steps

    def _flush(self) -> None:
        """The events the gate holds bound, counted and recorded (gap-counted sample mode with
        deferred binding, gate.py): before anything reads the counters, the history or the
        map's bookkeeping that binding writes."""
        g = self._gate
        if g is not None and g.held:
            g.flush()

    @property
    def checked(self) -> int:
        """Steps whose action was checked (strict mode's native step counts them)."""
        n = self._native
        return self._checked if n is None else n.checked

    def _recorded(self, fields: dict) -> dict:
        """An event's arguments as the history keeps them (a copy: the bus hands one dict to
        every listener), with the spec's binding where the map renames (`spec_args`: the
        DraftState slot a runtime tid maps to), so a trace shows both."""
        args = dict(fields)
        if self._spec_args is not None:
            args.update(self._spec_args())
        return args

    def _draw(self) -> bool:
        """The seeded draw of the next step (made one step ahead: a map with action checks
        maps its pre-state now). Whatever the budget: the steps a run may check are the
        seed's; which of them it can afford is the machine's, asked at the step itself
        (`_affords`), once this step's cost has been charged. Asked here, a checked step's
        successor was afforded before the step's own cost was taken: checks came in pairs."""
        return self._strict or self.rng.random() < self.cfg.sample_rate

    def _affords(self, drawn: bool) -> bool:
        """Whether a step drawn one step ahead is checked: drawn, and (sample mode) afforded now."""
        return drawn and (self._budget is None or self._afford())

    def _need(self) -> float:
        """The credit a drawn sample needs: its estimated cost (the last drawn sample's;
        before any, the last cache check's) and the next cache check's (the last cache
        check's; before any, the sample's own: on a from-scratch map both map the state and
        check every invariant), which is kept in the bucket. Cache checks run whatever the
        budget (close() runs the last one): with the next one's cost kept, what a monitor
        spends checking over its life, its final check included, stays within the budget's
        share of that life. Without it, the final check came on top of a full share of
        samples: a 2 % budget spent ~3 % of a 45 ms replay's time.

        Before any check there is no estimate: the first sample then needs a full bucket,
        sample_budget x budget_window (the most credit the bucket holds: 10 ms after a
        second at the defaults), so the budget advances no credit it has not earned. Run
        on no credit, as it was, a fresh monitor's first sample came on top of the budget:
        on the monitors bench's ~45 ms replay a sample and the final check, ~0.55 ms, where
        1 % of the replay is ~0.45 ms; a process making short-lived caches paid one
        unbudgeted check for each."""
        c = self._cache_cost if self._last_cost is None else self._last_cost
        if c is None:
            return self._budget * self._window
        return c + (c if self._cache_cost is None else self._cache_cost)

    def _afford(self) -> bool:
        """Sample mode's budget: a drawn sample is checked only while the time this monitor
        has spent checking (sampled steps, cache checks), with the next cache check's
        estimated cost (`_need`), is at most `sample_budget` of the time that passed,
        counting no more than `budget_window` seconds of a quiet spell's credit; one let go
        is counted (`budget_skipped`). This bounds what a canary pays for checking whatever
        the state's size: a from-scratch check of a large tree costs more, so fewer are
        afforded; and after an idle hour it checks no more than after an idle second.
        Events that must be checked (a map's `always_check`) and cache checks run
        regardless, and count against it."""
        b = self._budget
        if b is None:
            return True
        with self._budget_lock:
            now = _clock()
            # the credit earned since the last look, kept up to the window's worth (or one
            # check's cost): credit is earned only by time passing, so over any span the
            # checking time is about sample_budget of it plus what the bucket held (never a
            # quiet hour's credit, spent later in a burst of checks)
            credit = self._credit + b * (now - self._filled)
            need = self._need()
            cap = max(b * self._window, need)
            self._credit, self._filled = (cap if credit > cap else credit), now
            # (with the sample's estimated cost and the next cache check's, so the budget is
            # kept, not overshot by one check; the first sample, whose cost is unknown, waits
            # for a full bucket)
            if self._credit >= need:
                return True
            self._skipped += 1
            self._close_gate()
            return False

    def _charge(self, cost: float) -> None:
        """Checking time spent (a sampled step, an always-checked event, a cache check):
        taken from the budget's credit, which may go below zero (the next samples wait
        until time passing has repaid it)."""
        with self._budget_lock:
            self._spent += cost
            self._credit -= cost
            self._close_gate()

    def _close_gate(self) -> None:
        """The gate's `closed_until` (under the budget's lock, after the bucket changed): the
        clock time at which the credit, filling at `sample_budget` a second, reaches what the
        next sample needs (`_need`), before which `_afford` would let a drawn sample go; -inf
        while it affords one now. Until the bucket changes again (only a check, the charge
        that follows it, or `_afford` change it) the gate's test, `clock() < closed_until`,
        is `_afford`'s, credit + b x (now - filled) < need, up to the rounding of that
        instant: the cap, max(b x window, need), is not below need, so it never decides one
        way where the other did not. A drawn sample the gate lets go updates
        nothing here; `_afford`, asked later, brings the bucket up to date at once, as
        the same steps taken one by one would have."""
        g = self._gate
        if g is None or self._budget is None:
            return
        deficit = self._need() - self._credit
        g.closed_until = self._filled + deficit / self._budget if deficit > 0 else -math.inf

    def _gate_let_go(self, action, fields: dict, weighted: bool) -> int | None:
        """A drawn sample the gate let go for the budget (its `closed_until`), bound, counted
        and recorded there: what `_drawn_sample` does with one `_afford` lets go besides
        those (counted, its cause set, the cheap runtime checks run at it), and, for the
        gap's sample (not `weighted`), the next gap, which `_sample_step` draws before it."""
        gap = None if weighted else self._next_gap()
        with self._budget_lock:      # (as _afford counts the ones it lets go)
            self._skipped += 1
        self.sampled = False
        self.cause = CheckCause.WEIGHTED_DRAW if weighted else CheckCause.DRAW
        if self.watch_hooks:
            name = _NAMES.get(action) or _name_of(action)
            for hook in self.watch_hooks:
                hook(name, fields)
        return gap

    def checking(self) -> tuple[float, float] | None:
        """(seconds this monitor spent checking, seconds since it was made) in sample mode
        under a budget: what the budget bounds (sampled steps, always-checked and triggered
        events, cache checks, a companion's checks run inside them), beside the time it is
        a share of. None with no budget, and for a companion (its checks are its leader's).
        Not the whole overhead: the events' path between checks and the attaching are not
        in it (docs/benchmarks.md, "Where the cost is")."""
        if self._budget is None or self.sampled_by is not None:
            return None
        with self._budget_lock:
            return self._spent, _clock() - self._born

    @property
    def budget_skipped(self) -> int:
        """Drawn samples this monitor let go because the budget was spent (its own and its
        gate's let-go's, `LetGo`)."""
        lg = self._let_go
        return self._skipped if lg is None else self._skipped + lg.count

    def let_go(self) -> int:
        """Drawn samples the budget let go (a companion's: its leader's, whose samples are
        the only ones it is checked at)."""
        return (self.sampled_by or self).budget_skipped

    def _next_gap(self) -> int:
        """Unsampled events before the next sampled one: P(gap = k) = (1-r)^k r."""
        r = self.cfg.sample_rate
        if r >= 1.0:
            return 0
        if r <= 0.0:
            return 1 << 62
        return int(math.log(1.0 - self.rng.random()) / math.log1p(-r))

    def _constants_at(self, t: dict) -> dict:
        """`constants()` at a state t the map has just mapped from scratch: the binding of
        that state's constants where the map reads them off it (`state_constants_key`)."""
        if self._state_key is None:
            return self.constants()
        key = (self.spec, self._state_key(t))
        C = _STATE_BINDINGS.get(key)
        if C is None:
            C = kept(_STATE_BINDINGS, key, binding(self.spec, self.rmap.state_constants(t)))
        return C

    def constants(self) -> dict:
        fast = self._constants_key
        if fast is not None:
            key = fast()
            C = self._cache.get(key)
            return C if C is not None else self._bound(key, self.rmap.constants(), _UNKEYED)
        raw = self.rmap.constants()
        # (a map with no constants key, sample mode's from-scratch ones: the process-wide
        # binding's key is this monitor's too, one key built a call, not two (~14 us a call
        # of a sample-mode replay's eight, each on a new monitor); a value no binding shares
        # is keyed by its frozen form)
        shared = _binding_key(self.spec, raw)
        key = shared if shared is not None else tuple(sorted((k, _freeze(v)) for k, v in raw.items()))
        C = self._cache.get(key)
        return C if C is not None else self._bound(key, raw, shared)

    def _bound(self, key, raw: dict, shared) -> dict:
        """The binding of `raw` (`shared`: its binding key, or _UNKEYED), kept under `key`."""
        if len(self._cache) >= 64:       # bounded: each binding holds materialized sets
            self._cache.pop(next(iter(self._cache)))
        C = self._cache[key] = binding(self.spec, raw, shared)
        return C

    # ------------------------------------------------------------ listener
    @property
    def listener(self):
        """What a bus calls at each event: strict mode on an incremental map (what verified
        mode attaches), the native step (gate.c's StrictStep) where it builds, else
        `_strict_step` itself, whose one frame is the whole step (the bus calls it at every
        event of a strict run); any other monitor, and one whose class
        wraps `__call__` (a lock around it, SequenceMonitor), its `__call__`. A bound method
        either way (called through vectorcall: an instance is called through its type's
        `__call__` slot, with an argument tuple built at every event)."""
        if self._fast and type(self).__call__ is Monitor.__call__:
            # (the native step only while the class's _strict_step is the one defined here:
            # instrumentation that wraps it, `listeners_wrapped`, and a subclass that overrides
            # it are given the bus's calls)
            if self._native is not None and type(self)._strict_step is _strict_step:
                return self._native
            return self._strict_step
        if self._gate is not None and type(self).__call__ is _monitor_call:
            # (gap-counted sample mode: the gate, which hands the monitor what it decides)
            return self._gate
        return self.__call__

    def __call__(self, action, fields: dict) -> None:
        if self._fast:
            # (the function, not the attribute: a bus given `listener` calls _strict_step
            # itself, and instrumentation that wraps both, `listeners_wrapped`, sees an event once)
            _strict_step(self, action, fields)
            return
        if self._gate is not None:
            self._gate(action, fields)
            return
        if self.tripped:
            return
        name = _NAMES.get(action) or _name_of(action)
        steps = self.rmap.bind(name, fields)
        if steps is None:
            return
        self._steps += 1
        if self._budget is None:
            self._step(name, fields, steps)
            return
        # sample mode on a map that is not gap-counted: a step that checked, or mapped the
        # pre-state of the next, is charged. (An unchecked one's recording is the dispatch
        # every event pays, as on a gap-counted map: charged, it kept a busy canary's bucket
        # in debt for good, so that nothing was ever checked.)
        t0 = _clock()
        self._mapped = False
        try:
            self._step(name, fields, steps)
        finally:
            if self.sampled or self._mapped:
                cost = _clock() - t0
                if self.sampled:
                    self._last_cost = cost
                self._charge(cost)

    def _gated(self, action, fields: dict, steps) -> None:
        """Gap-counted sample mode: an event the gate hands over (the gate records the
        others, bound and counted: an unsampled event, what a canary pays at nearly every
        event). `steps` None: the drawn sample (the gap ran out), not bound yet; else an
        always-checked event, bound by the gate: checked now, outside the draw (an event
        after which no sample could see what it ends, a retire dropping its transfer's
        record; the gap is not spent)."""
        if self.tripped:
            return
        gate = self._gate
        name = _NAMES.get(action) or _name_of(action)
        if steps is None:
            steps = self.rmap.bind(name, fields)
            if steps is None:
                return
            gate.steps += 1
            p = self._weighted.get(name)
            if p is not None:
                # (a weighted event is drawn on its own: the gap's sample is the next other event)
                self._weighted_step(name, fields, steps, p)
                return
            self._sample_step(name, fields, steps)
            return
        gate.steps += 1
        self.sampled = True
        self._checked_sample(name, fields, steps, CheckCause.ALWAYS)

    def _weighed(self, action, fields: dict, steps, triggered: bool) -> None:
        """A weighted event between samples that the gate drew (at its weight, with this
        monitor's seeded draw) or that the map's trigger named (`_weighted_step`'s two ways
        to a check, decided by the gate), bound by it: a triggered one checked whatever the
        budget, a drawn one as a drawn sample."""
        if self.tripped:
            return
        self._gate.steps += 1
        name = _NAMES.get(action) or _name_of(action)
        if triggered:
            self.triggered += 1
            self.sampled = True
            self._checked_sample(name, fields, steps, CheckCause.TRIGGER)
            return
        self._drawn_sample(name, fields, steps, CheckCause.WEIGHTED_DRAW)

    def _step(self, name: str, fields: dict, steps) -> None:
        """One event on an incremental or a from-scratch map, then the step hooks if it
        was checked."""
        if self.incremental:
            self._step_incremental(name, fields)
        else:
            self._step_full(name, fields, steps)
        if self.sampled:
            for hook in self.step_hooks:
                hook(name, fields)
            for hook in self.watch_hooks:
                hook(name, fields)

    def _step_full(self, name: str, fields: dict, steps) -> None:
        """One event on a from-scratch map (strict, or sample mode on a map with action
        checks, whose sampled step needs the state before it)."""
        check = self._affords(self._check_next)
        self._check_next = self._draw()
        self.sampled = check
        if check:
            self.cause = self._drawn_cause
        if not self.needs_prestate:
            # invariant-only map: a sampled step needs no pre-state, so unsampled steps map nothing
            if not check:
                self._history.append(Step(self._steps, name, dict(fields), None))
                return
            self._map_and_check(name, fields, steps)
            return
        if not check and not self._check_next:
            self._history.append(Step(self._steps, name, dict(fields), None))
            self.prev = None
            return
        t = self.rmap.state()
        self._mapped = True
        self._history.append(Step(self._steps, name, self._recorded(fields), t))
        if check:
            self._checked += 1
            self._check_step(name, fields, steps, self.prev, t)
        self.prev = t

    def _sample_step(self, name: str, fields: dict, steps) -> None:
        """A sampled event of sample mode: every invariant on the state after it, mapped
        from scratch (the map keeps nothing between samples)."""
        self._gate.gap = self._next_gap()
        self._drawn_sample(name, fields, steps, CheckCause.DRAW)

    def _drawn_sample(self, name: str, fields: dict, steps, cause: CheckCause) -> None:
        """A drawn sample: checked when the budget affords it (an always-checked event is
        checked whatever the budget, as between samples), else recorded and let go, the
        cheap runtime checks (`watch_hooks`) run all the same."""
        if name not in self._always and not self._afford():
            self.sampled = False
            self.cause = cause       # (the cheap runtime checks below still run at it)
            self._history.append(Step(self.steps, name, fields, None))
            for hook in self.watch_hooks:
                hook(name, fields)
            return
        self.sampled = True
        self._checked_sample(name, fields, steps, cause)

    def _weighted_step(self, name: str, fields: dict, steps, p: float) -> None:
        """An event of the map's `sample_weights` or `trigger_events` in gap-counted sample
        mode that the gate hands over unbound (the gap ran out at it; between samples the
        gate decides the same itself and calls `_weighed`): drawn on its own with probability
        p (the rate times its weight; the gap, which counts the other events, untouched), and
        then a drawn sample like any other. First the map's `trigger`, when it watches the
        event: one it names is checked whatever the draw and the budget (charged, as an
        always-checked event is), and the draw is still made, so the seed's draws stay the
        same whether or not anything triggers."""
        drawn = self.rng.random() < p
        if name in self._trigger_on and self._trigger(name, fields):
            self.triggered += 1
            self.sampled = True
            self._checked_sample(name, fields, steps, CheckCause.TRIGGER)
            return
        if drawn:
            self._drawn_sample(name, fields, steps, CheckCause.WEIGHTED_DRAW)
            return
        self.sampled = False
        self._history.append(Step(self.steps, name, fields, None))

    def _checked_sample(self, name: str, fields: dict, steps, cause: CheckCause) -> None:
        """A checked event of gap-counted sample mode (checked for `cause`), and the step
        hooks after it (the worker watch, a companion's check: `check_sampled`), all charged
        to the budget. Only a drawn sample's cost is the next one's estimate: an
        always-checked or triggered event may be much cheaper (a retire on a small state),
        and estimated by it the next sample would overdraw the bucket."""
        self.cause = cause
        t0 = _clock()
        try:
            self._map_and_check(name, fields, steps)
            for hook in self.step_hooks:
                hook(name, fields)
            for hook in self.watch_hooks:
                hook(name, fields)
        finally:
            cost = _clock() - t0
            if cause in _DRAWN:
                self._last_cost = cost
            self._charge(cost)

    def check_sampled(self, name: str, fields: dict, step: int) -> None:
        """Every invariant on the current mapped state, as the leader's step `step`, event
        `name` (a companion of sample mode gets no events of its own: it is checked at its
        leader's sampled steps, `step_hooks`, and numbers them as the leader does)."""
        if self.tripped:
            return
        self._checked += 1
        self.cause = self.sampled_by.cause if self.sampled_by is not None else CheckCause.DRAW
        t = self.rmap.state()
        self._history.append(Step(step, name, self._recorded(fields), t))
        prev, self.prev = self.prev, t
        C = self._constants_at(t)
        f = first_failure(self.spec, self._scratch_fast, C, t, self._invariants_for(C), self._scratch_inc)
        if f is not None:
            self.fail("invariant", name, fields, f, prev, t, step=step)

    def _map_and_check(self, name: str, fields: dict, steps) -> None:
        """A checked event on an invariant-only map: the state after it, mapped from scratch,
        recorded and checked; prev (the last mapped state: the pre-state in strict mode) is
        for the diff only."""
        t = self.rmap.state()
        self._history.append(Step(self.steps, name, self._recorded(fields), t))
        self._checked += 1
        prev, self.prev = self.prev, t
        self._check_step(name, fields, steps, prev, t)

    def _step_incremental(self, name: str, fields: dict) -> None:
        """One event on an incremental map in sample mode (strict mode's is `_strict_step`).
        A checked step brings the map's state up to date (`sync`: everything that changed
        since the last sync) and evaluates each invariant on the changed elements; an
        unchecked step only records the event, so a sampled check still covers every change
        since the last one."""
        if self._breaches and self.rmap.breach is not None:
            self._report_breach()
        check = self._affords(self._check_next)
        self._check_next = self._draw()
        self.sampled = check
        if not check:
            # an unchecked step only records the event: the map journals what changed and
            # brings its state up to date at the next checked step, whose delta and dirty
            # elements then cover every change since the last one
            self._history.append(Step(self._steps, name, dict(fields), None, None))
            self._presynced = False
            return
        self.cause = self._drawn_cause
        # a guard the event had to satisfy, on the map's state before it (an incremental map
        # syncs after): a compound step's invariants see only where it led. Only when the
        # last event was synced: after unchecked ones (sample mode) the map's state is older
        # than this event's pre-state
        guard = self._guard
        presynced = self._presynced
        broke = guard(name, fields) if guard is not None and presynced else None
        self._presynced = True
        delta, acc = self.rmap.sync()
        # (the bus hands each listener the one dict it built for this event, and no listener
        # writes it: kept as it is, as the unchecked steps of sample mode are)
        self._history.append(Step(self._steps, name, fields, None, delta))
        self._checked += 1
        if broke is not None:
            self.fail("action", name, fields, broke, None, None)
        C = self.constants()
        if delta or C is not self._checked_C:    # (else the state every invariant last held on)
            self._check_delta(name, fields, C, delta, acc)
        if presynced and name in (self.rmap.effect_due if self._effect_due else self._effect_on):
            # (what this sync changed is this event's alone only after a synced one)
            self._check_effect(name, fields)

    def _strict_step(self, action, fields: dict) -> None:
        """Strict mode on an incremental map: every event checked, no draw, no budget; the
        same steps as `_step` -> `_step_incremental` and the step hooks, in one frame (the
        listener of every event of a strict run, `listener`). The map's state is always the
        state before the event (no unchecked step leaves it behind), so the guard always
        runs. It defines what csrc/gate.c's StrictStep does (`_native`, the bus's listener
        whenever it builds), and serves where that is None."""
        native = self._native
        if native is not None:
            # (called as a method: `__call__`, or wrapped by `listeners_wrapped`; the counters
            # are the native step's)
            native(action, fields)
            return
        if self.tripped:
            return
        name = _NAMES.get(action) or _name_of(action)
        rmap = self.rmap
        steps = rmap.bind(name, fields)
        if steps is None:
            return
        self._steps += 1
        quiet = self._quiet
        if quiet is not None and self._checked_C is not None and quiet() and not self.step_hooks \
                and not self.watch_hooks:
            # (a quiet map's sync would return an empty delta: the step is recorded with it,
            # the constants binding the same, so _check_delta is not run; only after a first
            # check of the whole state) (a Step when the history is read, `history`)
            self._history.append((self._steps, name, fields, None, []))
            self._checked += 1
            return
        if self._breaches and rmap.breach is not None:
            self._report_breach()
        guard = self._guard
        broke = guard(name, fields) if guard is not None else None
        delta, acc = rmap.sync()
        self._history.append((self._steps, name, fields, None, delta))   # (a Step when read)
        self._checked += 1
        if broke is not None:
            self.fail("action", name, fields, broke, None, None)
        C = self._cache.get(rmap.synced_key) if self._synced_key else None
        if C is None:
            C = self.constants()
        if delta or C is not self._checked_C:    # (else the state every invariant last held on)
            self._check_delta(name, fields, C, delta, acc)
        if name in (rmap.effect_due if self._effect_due else self._effect_on):
            # (_check_effect, inline: this runs at every event of a strict run)
            broke = self._effect(name, fields)
            if broke is not None:
                self.fail("action", name, fields, broke, None, None)
        for hook in self.step_hooks:
            hook(name, fields)
        for hook in self.watch_hooks:
            hook(name, fields)

    def _check_effect(self, name: str, fields: dict) -> None:
        """The map's check of the event's effect (`effect`: HostTier's frame of the step and
        the node actions' writes to their own nodes), after the invariants: a change they
        name (a state no step may reach) is reported by its property; what is left is a
        legal state reached by a step the event's action does not take (another node
        changed, or its own not as the action writes it)."""
        broke = self._effect(name, fields)
        if broke is not None:
            self.fail("action", name, fields, broke, None, None)

    def _report_breach(self) -> None:
        """Raise the violation the map found on another thread (`breach`: action, fields,
        failure), before the event at hand is judged: the step it names comes before. The
        event is the trace's last step, with no change of the mapped state (no step: the
        map read nothing of the runtime for it)."""
        action, fields, failure = self.rmap.breach
        self.rmap.breach = None
        self._history.append(Step(self.steps, action, fields, None, []))
        self.fail("action", action, fields, failure, None, None)

    def _check_delta(self, name: str, fields: dict, C: dict, delta: list, acc: dict) -> None:
        """Each invariant on a synced step (the fused fast path first), under constants C.

        An invariant held on the last checked state; one whose variables did not change
        since (the delta names every variable written) still holds, and an element-local
        conjunct holds on every element the map does not report changed (`acc`, through its
        `domains`). A new constants binding (a domain grew) can change any element's
        predicate: then every element of every invariant is checked."""
        if C is not self._checked_C:
            self._checked_C = C
            D, changed = {d: C[d] for d in self._domains}, None
        else:
            rmap = self.rmap
            D = acc if self._own_domains and rmap.own_domains else rmap.domains(C, acc)
            changed = _variables_of(delta)
        s = self._live
        if s is None:
            s = self.rmap.live()
        if self._inc_all is None or self._inc_all(C, s, D, changed, self._fused_skip):
            # (the checks the fused pass does not cover: every one where there is none)
            checks = self._unfused_checks
            if changed is not None and changed.isdisjoint(self._unfused_reads):
                return
        else:
            checks = self._inc_checks
        for inv, inc, full, reads in checks:
            if changed is not None and changed.isdisjoint(reads):
                continue
            f = full(C, s) if inc is None else inc(C, s, D, changed)
            if f is not None:
                self.fail("invariant", name, fields, f, None, None)

    def _check_step(self, name, fields, steps, s, t) -> None:
        C = self._constants_at(t)
        if s is not None and len(steps) == 1:
            act, params = steps[0]
            entry = self.spec.ACTIONS.get(act)
            if entry is not None and params is not None:
                f = entry[0](C, s, t, *params)
                if f is not None:
                    self.fail("action", name, fields, f, s, t)
        f = first_failure(self.spec, self._scratch_fast, C, t, self._invariants_for(C), self._scratch_inc)
        if f is not None:
            self.fail("invariant", name, fields, f, s, t)

    def _invariants_for(self, C) -> dict:
        """The invariants to check on a state under binding C: a constant-level one only when
        the constants it reads have other values than when it last held (`fail` forgets
        every verdict kept)."""
        if not self._const_level:
            return self.invariants
        out = {}
        for name, inv in self.invariants.items():
            reads = self._const_level.get(name)
            if reads is not None:
                key = tuple(_freeze(C.get(k)) for k in reads)
                if self._const_held.get(name) == key:
                    continue
                self._const_held[name] = key
            out[name] = inv
        return out

    def cache_check(self, step: int | None = None) -> None:
        """Every invariant on the current mapped state (sample mode runs this at each cache
        check; strict mode already did at the last step). An incremental map is checked on
        its from-scratch reference state here, which also catches a change the incremental
        map did not see. The checked state is the trace's last state, as a step named
        `cache_check` (a violation found here is explained on the state it was found in).
        `step`: the step it is numbered as (a companion's: its leader's), this monitor's
        count of events when None."""
        if self.tripped:
            return
        self._flush()      # (the map's bookkeeping up to this moment: every event bound)
        self.cache_checks += 1
        # (the cause of a violation found here; the steps after it are checked for their own)
        before, self.cause = self.cause, CheckCause.CACHE_CHECK
        t0 = _clock()
        try:
            self._cache_check(self.steps if step is None else step)
        finally:
            cost = _clock() - t0
            self._cache_cost = cost      # (the next one's estimate, kept in the bucket: `_need`)
            self._charge(cost)
            self.cause = before

    def _cache_check(self, at: int) -> None:
        if self.incremental:
            if self._breaches and self.rmap.breach is not None:
                self._report_breach()
            self._sync_pending()
            t = self.rmap.reference_state()
            C = binding(self.spec, self.rmap.reference_constants())
            # the reference numbers pages in DFS preorder, the history's states in the
            # map's positions: a failure's trace holds the checked state alone (a diff
            # across the two numberings would be a renaming, not what changed)
            history, prev = [Step(at, CACHE_CHECK, {}, t)], None
        else:
            t = self.rmap.state()
            C = self._constants_at(t)
            self._history.append(Step(at, CACHE_CHECK, {}, t))
            history, prev = None, self.prev
        f = first_failure(self.spec, self._scratch_fast, C, t, self._invariants_for(C), self._scratch_inc)
        if f is not None:
            self.fail("invariant", CACHE_CHECK, {}, f, prev, t, history, step=at)
        for hook in self.cache_check_hooks:
            hook()
        if self._check_next:
            self.prev = t

    def fail(self, kind, name, fields, failure: Failure, s, t, history: list | None = None,
             step: int | None = None) -> None:
        """Write the trace and raise the violation (`history`: the steps of the trace, the
        monitor's recent history when None; `step`: the step it names, this monitor's
        count of events when None)."""
        self._const_held.clear()
        for m in self.linked:
            m.tripped = True
            if m._gate is not None:
                m._gate.tripped = True      # (its events ignored at the gate from now on)
            if m._native is not None:
                m._native.tripped = True
            # (an incremental map journals the runtime's writes for its next sync: none comes)
            stop = getattr(m.rmap, "stop", None)
            if stop is not None:
                stop()
        self.history    # (every record a Step: _rebuild_states writes their states)
        if self.incremental and t is None:
            self._rebuild_states()
            mapped = [h.state for h in self._history if h.state is not None]
            t = mapped[-1] if mapped else None
            s = mapped[-2] if len(mapped) > 1 else None
        steps = list(self.history) if history is None else history
        fields = self._recorded(fields)     # (the spec's binding beside the event's fields)
        path, error = self.write_trace(kind, name, fields, failure, steps)
        raise ProtocolViolation(spec=self.spec.SPEC, action=name, args=fields, failure=failure,
                                kind=kind, diff=state_diff(s, t), history=steps,
                                step=self.steps if step is None else step, trace_path=path,
                                trace_error=error, checked_because=self._checked_because())

    def _checked_because(self) -> str | None:
        """Why the violating step was checked, as the violation and its trace record it."""
        return None if self.cause is None else str(self.cause)

    def _sync_pending(self) -> None:
        """Bring an incremental map up to date outside a checked step (sample mode): the
        changes go to the last event's delta, so the rebuilt history stays exact. (A tuple
        record is strict mode's, of a synced step: `history`.)"""
        last = self._history[-1] if self._history else None
        if last is not None and last.__class__ is not tuple and last.delta is None:
            last.delta, _ = self.rmap.sync()
        self._presynced = True

    def _rebuild_states(self) -> None:
        """Fill each history step's mapped state from the current state and the deltas."""
        t = self.rmap.state()
        for h in reversed(self._history):
            if h.delta is None:          # not synced (sample mode): its changes are in the next delta
                continue
            h.state = t
            t = undo(t, h.delta)

    def write_trace(self, kind, name, fields, failure: Failure, history: list) -> tuple[str | None, str | None]:
        """The mapped states of `history` as an ITF trace (the states sample mode did not map
        are left out; each state's #meta names the event and its arguments): (path, None),
        or (None, why it could not be written)."""
        try:
            return self._write_trace(kind, name, fields, failure, history)
        except (TypeError, ValueError) as e:
            # a value ITF cannot encode (a runtime type in a mapped state): the violation is
            # raised all the same, and says why there is no trace
            return None, f"not encodable as ITF: {e}"

    def _write_trace(self, kind, name, fields, failure: Failure, history: list) -> tuple[str | None, str | None]:
        from hicache.tla.itf import encode
        states = []
        for h in history:
            if h.state is None:
                continue
            rec = {"#meta": {"index": len(states), "step": h.seq, "action": h.spec or h.action,
                             "args": {k: _jsonable(v) for k, v in h.args.items()}}}
            if h.spec is not None:       # a spec step of runtime event h.action
                rec["#meta"]["event"] = str(h.action)
            for v in self.spec.VARIABLES:
                if v in h.state:
                    rec[v] = encode(h.state[v])
            states.append(rec)
        try:
            constants = {k: encode(_freeze(v)) for k, v in sorted(self.rmap.constants().items())}
        except (TypeError, ValueError):     # a constant ITF cannot encode: record none
            constants = None
        doc = {"#meta": {"format": "ITF", "source": self.spec.SPEC, "module": self.spec.MODULE,
                         "violation": {"kind": kind, "property": failure.property, "index": failure.index,
                                       "conjunct": failure.text, "location": failure.location,
                                       "error": failure.error, "action": name,
                                       # why the monitor checked this step (CheckCause)
                                       "checked_because": self._checked_because(),
                                       "args": {k: _jsonable(v) for k, v in fields.items()}},
                         # the model the checks used (explain evaluates and searches with it)
                         "constants": constants,
                         "config": {"mode": str(self.cfg.mode), "seed": self.cfg.seed,
                                    "sample_rate": self.cfg.sample_rate,
                                    "sample_budget": self.cfg.sample_budget,
                                    "budget_window": self.cfg.budget_window,
                                    "budget_skipped": self.let_go(), "history": self.cfg.history,
                                    # (sample mode under a budget: its checking and lifetime so far)
                                    **checking_fields(self.checking()),
                                    # the events drawn apart and their probability (sample_weights)
                                    "sample_probabilities": dict(self._weighted),
                                    # ... the events the map's trigger may ask to check whatever
                                    # the draw, and the checks it asked for
                                    "sample_triggers": sorted(self._trigger_on), "triggered": self.triggered,
                                    # False: every event is a compound step (invariants only)
                                    "action_checks": bool(getattr(self.rmap, "needs_prestate", True))}},
               "vars": list(self.spec.VARIABLES), "states": states}
        # (named by the failing step: the last of the history, a companion's by its leader)
        at = history[-1].seq if history else self.steps
        return write_trace_file(self.cfg.violation_dir, f"{self.spec.MODULE}-step{at}", doc)


def checking_fields(checking: tuple[float, float] | None) -> dict:
    """`Monitor.checking` as a report's and a trace's fields: checking_s and alive_s (seconds),
    none when it is None."""
    if checking is None:
        return {}
    spent, alive = checking
    return {"checking_s": spent, "alive_s": alive}


#: strict mode's one-frame listener, as Monitor defines it (`__call__` delegates to it)
_strict_step = Monitor._strict_step
_monitor_call = Monitor.__call__      # (unwrapped: `listener` gives a bus the gate only then)

#: the methods a bus calls a monitor through (`Monitor.listener`)
LISTENERS = ("__call__", "_strict_step")


@contextlib.contextmanager
def listeners_wrapped(wrap):
    """Inside, each method a bus calls a monitor through replaced by `wrap(method)` (the
    bench's floor and strict profile, the instruction and opcode scripts: each event is
    seen once, by the one a bus was given). Monitors attached inside get the wrapped ones;
    the methods are restored on leaving."""
    kept = {name: vars(Monitor)[name] for name in LISTENERS}
    for name, fn in kept.items():
        setattr(Monitor, name, wrap(fn))
    try:
        yield
    finally:
        for name, fn in kept.items():
            setattr(Monitor, name, fn)


def link(*monitors: Monitor) -> None:
    """Make `monitors` (and those already linked to each) trip together (Monitor.linked)."""
    group: list[Monitor] = []
    for m in monitors:
        for x in m.linked:
            if x not in group:
                group.append(x)
    for m in group:
        m.linked = group


MISSING = object()     # in a delta: the key was not in the function's domain before

_first = operator.itemgetter(0)    # (a pair's first item: a binding key's constant name)

_clock = time.perf_counter        # the budget's clock: wall time, as the overhead it bounds

#: the step a cache check records (no spec action: every invariant on the state it found)
CACHE_CHECK = "cache_check"


def snapshot(s: dict) -> dict:
    """A copy of a mapped state whose functions are independent of the live ones."""
    return {k: Fcn(dict(v.d)) if type(v) is Fcn else v for k, v in s.items()}


def delta_entries(delta: list) -> list[tuple]:
    """A delta's writes as (variable, key or None, old value) triples. A delta is flat, three
    items a write in the order made (incmap.c's `record`, the maps' `extend`): no tuple of
    its own per entry, as thousands of them a replay live as long as their step's history."""
    return list(zip(delta[0::3], delta[1::3], delta[2::3]))


def undo(s: dict, delta: list) -> dict:
    """The state before `delta` (flat: variable, key or None, old value, for each write in
    turn; `delta_entries`) was applied to state `s`, as a new snapshot (key None: the whole
    variable's old value)."""
    out = snapshot(s)
    for var, key, old in reversed(delta_entries(delta)):
        if key is None:
            if old is MISSING:
                out.pop(var, None)
            else:
                out[var] = old
            continue
        d = out[var].d
        if old is MISSING:
            d.pop(key, None)
        else:
            d[key] = old
    return out


def _freeze(v):
    if isinstance(v, (set, frozenset)):
        return frozenset(v)
    if isinstance(v, list):
        return tuple(v)
    return v


def _jsonable(v):
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return repr(v)
