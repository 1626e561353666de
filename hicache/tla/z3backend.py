"""Discharge TLA+ THEOREMs with Z3: one result per theorem.

The goal is translated by hicache.tla.z3translate. Its leading \\A become free constants
and the antecedents of its => hypotheses, so a counterexample names the theorem's own
variables. Checks, within one timeout per theorem:
  1. every well-definedness side condition (divisors positive, arguments in their
     function's domain, CASE covered) is valid given the ASSUMEs: else the theorem is
     reported as a located counterexample to well-definedness, never proved around;
  2. Not(goal) is unsatisfiable given the ASSUMEs and hypotheses: proved; satisfiable:
     counterexample with the model; neither in time: unknown.
A proof whose hypotheses are contradictory is flagged as vacuous. A --config whose values
violate the ASSUMEs would make every proof vacuous: it is refused up front (ConfigRejected).

A theorem `H => G` whose H pins constants to literals (`NStages \\in 1..8`, `NRanks = 2`)
is split into one such check per assignment, with those constants fixed (constant ranges
are then expanded); it is proved iff every case is.
"""
from __future__ import annotations

import concurrent.futures
import multiprocessing
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import z3

from hicache.tla.compiler import Compiler, Model, OpDef
from hicache.tla.errors import ConfigError, EvalError, Loc, TlaError
from hicache.tla.loader import Loader, Module, node_loc
from hicache.tla.z3arith import Poly
from hicache.tla.z3translate import Ctx, FuncV, SetV, Translator, Unsupported

#: seconds per theorem unless the caller says otherwise
DEFAULT_TIMEOUT_S = 30.0
#: the longest timeout taken: Z3 counts milliseconds in an unsigned 32-bit int (49 days)
MAX_TIMEOUT_S = 1e6
#: budget of the check that the --config values satisfy the ASSUMEs
ASSUME_CHECK_S = 2.0


class ConfigRejected(Exception):
    """The --config does not fit a spec (syntax, a name assigned twice or not declared, a
    value the prover cannot take, a violated ASSUME): an error of the invocation, reported
    once with its location, not a result of each theorem."""

    def __init__(self, error: TlaError):
        super().__init__(str(error))
        self.error = error


@dataclass(slots=True)
class ProveConfig:
    """The CONSTANTS of a .cfg as the prover takes them: values and where each is assigned."""
    values: dict[str, bool | int]
    sites: dict[str, Loc]


def load_prove_config(path: Path) -> ProveConfig:
    """Parse a .cfg for `hicache prove`; ConfigRejected, located in the .cfg, when it does
    not parse (a constant assigned twice included), or gives a value other than an integer
    or boolean."""
    from hicache.tla.cfg import load_cfg
    from hicache.tla.values import fmt
    try:
        cfg = load_cfg(path)
    except ConfigError as e:
        raise ConfigRejected(e) from None
    sites = {name: cfg.constant_locs[name] for name in cfg.constants}
    for name, v in cfg.constants.items():
        if not isinstance(v, (bool, int)):
            raise ConfigRejected(ConfigError(
                f"{name} = {fmt(v)}: hicache prove takes integer and boolean constant values only", sites[name]))
    return ProveConfig(dict(cfg.constants), sites)


def _name(node) -> str:
    return type(node).__name__


class Status(str, Enum):
    PROVED = "proved"
    COUNTEREXAMPLE = "counterexample"
    UNKNOWN = "unknown"
    UNSUPPORTED = "unsupported"
    ERROR = "error"


@dataclass(slots=True)
class TheoremResult:
    name: str
    module: str
    status: Status
    seconds: float
    detail: str
    location: str = ""

    @property
    def proved(self) -> bool:
        return self.status is Status.PROVED

    def as_json(self) -> dict:
        return {"name": self.name, "module": self.module, "proved": self.proved,
                "seconds": round(self.seconds, 4), "status": self.status.value,
                "detail": self.detail, "location": self.location}


class Prover:
    """Proves the THEOREMs of one root module."""

    def __init__(self, path: Path, *, timeout_s: float = DEFAULT_TIMEOUT_S, cfg_path: Path | None = None,
                 search_dirs: list[Path] | None = None, jobs: int = 1):
        """Raises TlaError when the spec does not load, ConfigRejected when `cfg_path`
        does not fit it, ValueError for a timeout Z3 cannot take or `jobs` < 1. `jobs`:
        processes proving the cases of one theorem at once (see `prove`)."""
        if not (0 < timeout_s <= MAX_TIMEOUT_S):      # (also false for NaN)
            raise ValueError(f"timeout_s must be in (0, {MAX_TIMEOUT_S:g}] seconds, got {timeout_s}")
        if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
            raise ValueError(f"jobs must be an integer >= 1, got {jobs!r}")
        self.path = Path(path)
        self.timeout_s = timeout_s
        self.jobs = jobs
        # what a worker process needs to load the same Prover (`_case_in_worker`)
        self._spec_args = (str(self.path), timeout_s, str(cfg_path) if cfg_path else None,
                           tuple(str(d) for d in search_dirs or ()))
        self.loader = Loader([self.path.parent, *(search_dirs or [])])
        self.root = self.loader.load_file(self.path)
        cfg = load_prove_config(cfg_path) if cfg_path else None
        self.constants = cfg.values if cfg else {}
        # (Model rejects a THEOREM name defined twice, or named like an operator, as SANY does)
        self.model = Model(self.loader, self.root, self.constants)
        Compiler(self.model).resolve_every_definition()     # an unknown name, as SANY refuses it
        if cfg is not None:
            self._check_config(cfg)

    def _check_config(self, cfg: ProveConfig) -> None:
        """Every name the .cfg assigns is a constant of the spec (or a definition it
        overrides, as TLC allows), and the values satisfy the ASSUMEs: a typo there would
        otherwise be ignored, or make every proof vacuous (all green)."""
        entries = self.model.root_scope.entries
        for name, loc in cfg.sites.items():
            e = entries.get(name)
            if not (isinstance(e, tuple) and e and e[0] == "const"):
                raise ConfigRejected(ConfigError(
                    f"{name} is assigned a value, but it is not a CONSTANT of module {self.root.name}", loc))
        self._check_assumes(cfg)

    def _check_assumes(self, cfg: ProveConfig) -> None:
        """Raise ConfigRejected, located at the ASSUME, when the .cfg values contradict it
        (or the ASSUMEs together) although the spec's ASSUMEs alone are consistent; the
        last case is the spec's own, which the vacuity note of each proof reports."""
        if not self.model.assumes:
            return
        given, lemmas = self._assume_formulas(self.constants)
        if not self._refuted(lemmas + [f for f in given if f is not None]):
            return
        free, free_lemmas = self._assume_formulas({})
        for (expr, actx), f, g in zip(self.model.assumes, given, free):
            own_fault = g is not None and self._refuted(free_lemmas + [g])    # false whatever the values
            if f is not None and not own_fault and self._refuted(lemmas + [f]):
                raise ConfigRejected(EvalError("ASSUME is violated by the --config values "
                                               + self._values_text(cfg, expr, actx), node_loc(actx.module.file, expr)))
        if self._refuted(free_lemmas + [g for g in free if g is not None]):
            return
        expr, actx = self.model.assumes[0]
        raise ConfigRejected(EvalError("the ASSUMEs together are violated by the --config values "
                                       + self._values_text(cfg, None, None), node_loc(actx.module.file, expr)))

    def _assume_formulas(self, constants: dict) -> tuple[list, list]:
        """Each ASSUME as a Z3 formula with `constants` fixed (None where it does not
        translate, as in the proofs: left out), and the arithmetic lemmas they need."""
        tr = Translator(self.model, constants)
        out: list = []
        for expr, actx in self.model.assumes:
            try:
                out.append(tr.formula(expr, Ctx({}, actx.module, actx.scope)))
            except (Unsupported, TlaError, RecursionError):
                out.append(None)
        return out, list(tr.top_lemmas)

    def _refuted(self, formulas: list) -> bool:
        """The formulas are shown unsatisfiable within a short budget (unknown: not refuted)."""
        s = self._solver(formulas, time.monotonic() + min(self.timeout_s, ASSUME_CHECK_S), STRATEGIES[0])
        return s is not None and s.check() == z3.unsat

    def _values_text(self, cfg: ProveConfig, expr, actx) -> str:
        """`S = 0 (file.cfg:2:5)` for the .cfg constants that the first conjunct of the
        ASSUME they refute mentions (all of them when expr is None or that is unclear)."""
        names = list(cfg.values)
        for conj in _conj_nodes(expr) if expr is not None else []:
            ctx = Ctx({}, actx.module, actx.scope)
            fixed, free = Translator(self.model, self.constants), Translator(self.model, {})
            try:
                f = fixed.formula(conj, ctx)
                free.formula(conj, ctx)     # (its free constants are the names the conjunct mentions)
            except (Unsupported, TlaError, RecursionError):
                continue
            if self._refuted(fixed.top_lemmas + [f]):
                names = [n for n in cfg.values if n in free.free] or names
                break
        return ", ".join(f"{n} = {_lit(cfg.values[n])} ({cfg.sites[n]})" for n in names)

    def theorems(self) -> list[tuple[str, Any, Module]]:
        """The root module's own theorems (an EXTENDed module proves its own)."""
        return [t for t in self.model.theorems if t[2] is self.root]

    def prove_all(self) -> list[TheoremResult]:
        return [self.prove(name, goal, mod) for name, goal, mod in self.theorems()]

    def prove(self, name: str, goal, mod: Module) -> TheoremResult:
        """One theorem; split into one obligation per value of the constants its hypothesis
        pins to literals (`C = 3`, `C \\in 1..8`), each proved with those values fixed."""
        cases = self._constant_cases(goal, mod)
        if not cases:
            return self._prove_case(name, goal, mod, self.constants)
        t0 = time.monotonic()
        label = name or f"<unnamed at {node_loc(mod.file, goal)}>"
        varying = [k for k in cases[0] if len({repr(c[k]) for c in cases}) > 1]
        fixed = ", ".join(f"{k} = {_lit(v)}" for k, v in cases[0].items() if k not in varying)
        per_case: list[str] = []
        results = self._case_results(name, goal, mod, cases)
        try:
            for assign, r in zip(cases, results):
                what = ", ".join(f"{k} = {_lit(assign[k])}" for k in varying) or fixed
                if not r.proved:
                    return TheoremResult(label, mod.name, r.status, time.monotonic() - t0,
                                         f"case {what}: {r.detail}", r.location)
                note = " (vacuous)" if "vacuous" in r.detail else ""
                per_case.append(f"{what}: {r.seconds:.2f} s{note}")
        finally:
            results.close()     # (a worker pool's cases not started are dropped at once)
        n = f"{len(cases)} case" + ("" if len(cases) == 1 else "s")
        return TheoremResult(label, mod.name, Status.PROVED, time.monotonic() - t0,
                             f"Q.E.D. in {n}" + (f" with {fixed}" if varying and fixed else "")
                             + f" ({'; '.join(per_case)})", str(node_loc(mod.file, goal)))

    def _case_results(self, name: str, goal, mod: Module, cases: list[dict]):
        """Each case's result, in the cases' order (the caller stops at the first one not
        proved). With `jobs` > 1 the cases are proved by that many processes at once, the
        last cases first (pipeline sizes grow along them, and the largest take longest:
        PrefixAgreementCore's NStages = 8 is 50 s of its 133), so the longest is not left
        to run alone at the end; Z3 runs one thread a solver. A worker loads the spec
        again (a parsed module does not cross processes) and proves the theorem the same
        way, by its position among the root module's theorems."""
        if self.jobs == 1 or len(cases) == 1:
            for assign in cases:
                yield self._prove_case(name, goal, mod, {**self.constants, **assign})
            return
        index = next(i for i, t in enumerate(self.theorems()) if t[1] is goal)
        # spawn, not fork: a forked child would inherit Z3's state mid-use
        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(min(self.jobs, len(cases)), mp_context=ctx) as pool:
            futures = {}
            for k in reversed(range(len(cases))):
                futures[k] = pool.submit(_case_in_worker, self._spec_args, index,
                                         {**self.constants, **cases[k]})
            try:
                for k in range(len(cases)):
                    yield futures[k].result()
            finally:
                # (the caller stopped at a case not proved: the ones not started are dropped,
                # the running ones end within their timeout)
                pool.shutdown(wait=True, cancel_futures=True)

    def _constant_cases(self, goal, mod: Module) -> list[dict]:
        """Assignments of the constants that the goal's antecedent (`H => ...`, H a
        conjunction) pins with `C = literal` or `C \\in lo..hi` (literal bounds); [] if none.

        The antecedent stays in the goal, so each case is the theorem with those constants
        fixed, and together the cases are the theorem."""
        node = goal
        while _name(node) == "Parentheses":
            node = node.expression
        if not (_name(node) == "OperatorApplication" and node.operator == "=>"):
            return []
        choices: dict[str, list] = {}
        for conj in _conj_nodes(node.arguments[0]):
            if _name(conj) != "OperatorApplication" or conj.operator not in ("=", "\\in") \
                    or len(conj.arguments or []) != 2:
                continue
            lhs, rhs = conj.arguments
            if _name(lhs) != "OperatorApplication" or lhs.arguments:
                continue
            e = self.model.root_scope.entries.get(lhs.operator)
            if not (isinstance(e, tuple) and e and e[0] == "const") or lhs.operator in self.constants:
                continue
            vals = _literal_values(rhs, conj.operator)
            if vals is not None and lhs.operator not in choices:
                choices[lhs.operator] = vals
        if not choices:
            return []
        cases: list[dict] = [{}]
        for k, vals in choices.items():
            cases = [{**c, k: v} for c in cases for v in vals]
        if len(cases) > MAX_CASES:
            return []
        return cases

    def _prove_case(self, name: str, goal, mod: Module, constants: dict) -> TheoremResult:
        t0 = time.monotonic()
        label = name or f"<unnamed at {node_loc(mod.file, goal)}>"
        tr = Translator(self.model, constants)
        try:
            background, hyps, g = self._translate(tr, goal, mod)
        except Unsupported as e:
            return TheoremResult(label, mod.name, Status.UNSUPPORTED, time.monotonic() - t0,
                                 f"{e.loc}: unsupported: {e.message}" if e.loc else f"unsupported: {e.message}",
                                 str(e.loc or ""))
        except TlaError as e:
            return TheoremResult(label, mod.name, Status.ERROR, time.monotonic() - t0, str(e), str(e.loc or ""))
        except RecursionError:
            return TheoremResult(label, mod.name, Status.UNSUPPORTED, time.monotonic() - t0,
                                 "unsupported: expression nests too deeply to inline", "")
        deadline = t0 + self.timeout_s
        status, detail = self._check_sides(tr, background, deadline)
        if status is None:
            status, detail = self._check_goal(tr, background + hyps, g, deadline)
        return TheoremResult(label, mod.name, status, time.monotonic() - t0, detail,
                             str(node_loc(mod.file, goal)))

    # ------------------------------------------------------------ translation
    def _translate(self, tr: Translator, goal, mod: Module):
        """(background, hypotheses, goal): background = ASSUMEs and arithmetic lemmas;
        hypotheses = the stripped bound ranges and antecedents (side conditions carry
        their own path, so they are checked against the background only)."""
        background: list = []
        for expr, actx in self.model.assumes:
            saved = list(tr.sides)
            try:
                background.append(tr.formula(expr, Ctx({}, actx.module, actx.scope)))
            except Unsupported:
                pass      # an ASSUME we cannot express only weakens the hypotheses
            tr.sides = saved
        hyps: list = []
        g = self._strip(tr, goal, Ctx({}, mod, self.model.root_scope), hyps)
        return background + tr.top_lemmas, hyps, g

    def _strip(self, tr: Translator, node, ctx: Ctx, hyps: list):
        """Turn leading \\A into free constants and => antecedents into hypotheses.

        The counterexample then names the theorem's own variables; Z3 sees the negation
        of the remaining body only.
        """
        k = _name(node)
        if k == "Parentheses":
            return self._strip(tr, node.expression, ctx, hyps)
        if k == "Quantification" and node.quantifier in ("\\A", "\\forall"):
            binds = tr.bounds(node.declarations, ctx)
            if any(s is not None and s.elem_sort not in ("int", "bool") for _, s in binds):
                return tr.formula(node, ctx)      # finite sets of tuples: expanded, not stripped
            for name, s in binds:
                sort = tr.bound_sort(s, node, ctx)
                label = name if name not in tr.free else f"{name}_{len(tr.free)}"
                c = z3.Bool(label, tr.zc) if sort == "bool" else z3.Int(label, tr.zc)
                tr.free[label] = c
                val = c if sort == "bool" else tr.arith.opaque(c)
                ctx = ctx.with_env(**{name: val})
                if s is not None:
                    mem = s.member(val, ctx)
                    hyps.append(mem)
                    ctx = ctx.assume(mem)
            return self._strip(tr, node.predicate, ctx, hyps)
        if k == "OperatorApplication" and node.operator == "=>":
            if tr.asserts_type_invariant(node.arguments[0], ctx):
                tr.typed_state = True
            a = tr.formula(node.arguments[0], ctx)
            hyps.append(a)
            return self._strip(tr, node.arguments[1], ctx.assume(a), hyps)
        if k == "Let":
            for d in node.definitions:
                params = [p.operator if hasattr(p, "operator") else str(p) for p in (d.arity or [])]
                if d.function:
                    raise tr.unsupported("LET function definition", d, ctx)
                ctx = ctx.with_env(**{d.name: ("op", params, d.definiens, ctx, d)})
            return self._strip(tr, node.expression, ctx, hyps)
        if k == "OperatorApplication" and not node.arguments and node.operator not in ctx.env:
            d = ctx.scope.entries.get(node.operator)
            if isinstance(d, OpDef) and not d.params and not d.is_fn and not d.is_instance:
                return self._strip(tr, d.body, Ctx({}, d.module, d.scope, path=ctx.path), hyps)
        return tr.formula(node, ctx)

    # ------------------------------------------------------------ solving
    @staticmethod
    def _solver(formulas, deadline: float, options: dict) -> z3.Solver | None:
        """A solver over `formulas` copied into a context of its own.

        Z3's search depends on the terms its context already holds; a fresh copy per
        check keeps each answer a function of that check alone (not of the checks or
        theorems before it), which also keeps the runs reproducible.
        """
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        fresh = z3.Context()
        s = z3.Solver(ctx=fresh)
        s.set("timeout", max(1, int(left * 1000)))
        for k, v in options.items():
            s.set(k, v)
        s.add(*[f.translate(fresh) for f in formulas])
        return s

    def _decide(self, formulas, deadline: float, strategies: tuple[dict, ...] = ()):
        """(sat | unsat | unknown, the solver that answered or None when out of time,
        the options of the strategy that answered).

        Two strategies in turn: Z3's default (E-matching; good at proofs) within a
        resource budget, so the hand-over point does not depend on machine load, then
        model-based quantifier instantiation alone (good at finding counterexamples of
        quantified invariants) for the time left.
        """
        last = None
        for options in strategies or STRATEGIES:
            s = self._solver(formulas, deadline, options)
            if s is None:
                break
            last = s
            r = s.check()
            if r != z3.unknown:
                return r, s, options
        return z3.unknown, last, {}

    def _check_sides(self, tr: Translator, background, deadline):
        sides, seen = [], set()
        for sc in tr.sides:
            key = sc.formula.get_id()
            if key not in seen:
                seen.add(key)
                sides.append(sc)
        if not sides:
            return None, ""
        r, s, _ = self._decide(background + [z3.Not(z3.And(*[sc.formula for sc in sides]))], deadline)
        if r == z3.unsat:
            return None, ""
        for sc in sides:       # locate the failing condition
            formulas = background + [z3.Not(sc.formula)]
            r1, s1, how = self._decide(formulas, deadline)
            if r1 == z3.sat:
                model = self._small_model(tr, formulas, s1, how)
                return Status.COUNTEREXAMPLE, (f"{sc.loc}: not well-defined: {sc.what} fails for "
                                               f"{self._model_text(tr, model)}")
            if r1 == z3.unknown:
                return Status.UNKNOWN, f"{sc.loc}: cannot show {sc.what} ({_why(s1, self.timeout_s)})"
        return Status.UNKNOWN, f"well-definedness: {_why(s, self.timeout_s)}"

    def _check_goal(self, tr: Translator, hyps, g, deadline):
        formulas = hyps + [z3.Not(g)]
        r, s, how = self._decide(formulas, deadline)
        if r == z3.unsat:
            return Status.PROVED, "Q.E.D." + self._vacuity_note(hyps, deadline)
        if r == z3.sat:
            return Status.COUNTEREXAMPLE, "counterexample: " + self._model_text(
                tr, self._small_model(tr, formulas, s, how))
        return Status.UNKNOWN, _why(s, self.timeout_s)

    def _vacuity_note(self, hyps, deadline) -> str:
        """A proof from contradictory hypotheses is valid but says nothing: flag it.

        Finding a model of quantified hypotheses can be as hard as the proof, so this
        check gets a small budget and stays silent when it runs out.
        """
        s = self._solver(hyps, min(deadline, time.monotonic() + VACUITY_S), STRATEGIES[0])
        if s is not None and s.check() == z3.unsat:
            return " (vacuous: the ASSUMEs and antecedents are contradictory)"
        return ""

    def _small_model(self, tr: Translator, formulas, s: z3.Solver, how: dict) -> z3.ModelRef:
        """The model of sat `formulas`, preferring one whose integers are small (readable).

        Only narrows the search: any model found is still a counterexample.
        """
        ints = [v for v in tr.free.values() if isinstance(v, z3.ArithRef)]
        if ints:
            r, small, _ = self._decide(formulas + [z3.And(v >= -SMALL_INT, v <= SMALL_INT) for v in ints],
                                       time.monotonic() + SMALL_MODEL_S, (how,))
            if r == z3.sat:
                return small.model()
        return s.model()

    @staticmethod
    def _model_text(tr: Translator, m: z3.ModelRef) -> str:
        parts = []
        for name, v in tr.free.items():
            if isinstance(v, FuncV):
                parts.append(f"{name} = {_fn_text(m, v, tr)}")
            elif isinstance(v, SetV):
                parts.append(f"{name} = {_set_text(m, v, tr)}")
            else:
                parts.append(f"{name} = {m.eval(v.translate(m.ctx), model_completion=True)}")
        return ", ".join(parts) if parts else "(no free variables)"


def _lit(v) -> str:
    return ("TRUE" if v else "FALSE") if isinstance(v, bool) else str(v)


def _conj_nodes(node) -> list:
    k = _name(node)
    if k == "Parentheses":
        return _conj_nodes(node.expression)
    if k == "VerticalList" and node.operator == "/\\":
        return [c for it in node.arguments for c in _conj_nodes(it.expression)]
    if k == "OperatorApplication" and node.operator == "/\\":
        return [c for a in node.arguments for c in _conj_nodes(a)]
    return [node]


def _int_literal(node) -> int | None:
    while _name(node) == "Parentheses":
        node = node.expression
    if _name(node) == "IntegralNumeral":
        return int(node.value)
    return None


def _literal_values(rhs, op: str) -> list | None:
    """The values `C = rhs` / `C \\in rhs` allows when rhs is a literal (or a literal range)."""
    while _name(rhs) == "Parentheses":
        rhs = rhs.expression
    if op == "=":
        if _name(rhs) == "BooleanLiteral":
            return [rhs.value == "TRUE"]
        n = _int_literal(rhs)
        return None if n is None else [n]
    if _name(rhs) == "OperatorApplication" and rhs.operator == ".." and len(rhs.arguments) == 2:
        lo, hi = (_int_literal(a) for a in rhs.arguments)
        if lo is not None and hi is not None and hi - lo < MAX_CASES:
            return list(range(lo, hi + 1))
    return None


def _why(s: z3.Solver | None, timeout_s: float) -> str:
    why = s.reason_unknown() if s is not None else "timeout"
    if "timeout" in why or "canceled" in why:
        return f"timeout after {timeout_s:g} s"
    return f"z3 gave up: {why}"


#: solver options tried in turn on each check (see Prover._decide)
STRATEGIES: tuple[dict, ...] = ({"rlimit": 3_000_000}, {"smt.ematching": False})
#: a theorem pinning its constants is split into at most this many cases (else proved whole)
MAX_CASES = 64
#: budget of the check that the hypotheses of a proved theorem are satisfiable
VACUITY_S = 2.0
#: counterexamples: first try integers within +-SMALL_INT, for at most SMALL_MODEL_S
SMALL_INT = 16
SMALL_MODEL_S = 2.0
#: a printed function shows at most this many entries
SHOW_ENTRIES = 12


def _fn_text(m: z3.ModelRef, f: FuncV, tr: Translator) -> str:
    """A state function in TLC's `(0 :> a @@ 1 :> b)` form over its domain in the model."""
    def val(x):
        z = tr.arith.to_z3(x) if isinstance(x, Poly) else x
        return m.eval(z.translate(m.ctx), model_completion=True)

    dom, keys = f.domain, None
    if dom.kind == "interval":
        lo, hi = val(dom.lo), val(dom.hi)
        if z3.is_int_value(lo) and z3.is_int_value(hi):
            keys = list(range(lo.as_long(), max(lo.as_long(), hi.as_long() + 1)))
    elif f.hint is not None:      # a membership domain: show the TypeOK candidates it holds
        cands = tr.candidates(f.hint)
        if cands is not None:
            keys = [k.const_value() for k in cands
                    if z3.is_true(val(dom.member(k, None)))]
    if keys is None:
        return f"<function over {dom.text}>"
    if not keys:
        return "<<>>"
    items = []
    for i in keys[:SHOW_ENTRIES]:
        v = f.app(Poly.const(i), None)
        text = _fn_text(m, v, tr) if isinstance(v, FuncV) else _set_text(m, v, tr) if isinstance(v, SetV) \
            else str(val(v))
        items.append(f"{i} :> " + text)
    more = f" @@ ... ({len(keys)} entries)" if len(keys) > SHOW_ENTRIES else ""
    return "(" + " @@ ".join(items) + more + ")"


def _set_text(m: z3.ModelRef, s: SetV, tr: Translator) -> str:
    """A set-valued state component as `{1, 3}`: its members among the TypeOK base, plus
    `...` when the model puts some element outside the base in it."""
    cands = tr.candidates(s.hint) if s.hint is not None else None
    if cands is None or s.arr is None:
        return f"<set {s.text}>"
    a = s.arr.translate(m.ctx)
    members = [k.const_value() for k in cands
               if z3.is_true(m.eval(z3.Select(a, k.const_value()), model_completion=True))]
    return "{" + ", ".join(map(str, members)) + "}"


#: a worker process's Provers, by what it was asked to load (its tasks reuse them)
_WORKER_PROVERS: dict[tuple, "Prover"] = {}


def _case_in_worker(spec_args: tuple, index: int, constants: dict) -> TheoremResult:
    """One case of the root module's index-th theorem, in a worker process (Prover.jobs)."""
    prover = _WORKER_PROVERS.get(spec_args)
    if prover is None:
        path, timeout_s, cfg_path, dirs = spec_args
        prover = _WORKER_PROVERS[spec_args] = Prover(Path(path), timeout_s=timeout_s,
                                                     cfg_path=Path(cfg_path) if cfg_path else None,
                                                     search_dirs=[Path(d) for d in dirs])
    name, goal, mod = prover.theorems()[index]
    return prover._prove_case(name, goal, mod, constants)


def prove_files(paths: list[Path], *, timeout_s: float = DEFAULT_TIMEOUT_S,
                cfg_path: Path | None = None, jobs: int = 1) -> list[TheoremResult]:
    """Every THEOREM of every file; a file that does not load gives one error result.
    `jobs`: processes proving one theorem's cases at once.

    Raises ConfigRejected when `cfg_path` does not fit one of the files: every file is
    loaded (and the .cfg checked against it) before any proof starts."""
    loaded: list[Prover | TheoremResult] = []
    for p in paths:
        try:
            loaded.append(Prover(Path(p), timeout_s=timeout_s, cfg_path=cfg_path, jobs=jobs))
        except TlaError as e:
            loaded.append(TheoremResult(f"<{Path(p).name}>", Path(p).stem, Status.ERROR, 0.0, str(e),
                                        str(e.loc or "")))
    out: list[TheoremResult] = []
    for x in loaded:
        out.extend(x.prove_all() if isinstance(x, Prover) else [x])
    return out
