"""The generated fused fast path (`inc_all`) compiled to C whole: its set-up as well as its
element loops.

fused_native.py compiles a fused pass's element loops and leaves the rest of the function
Python. That rest is the set-up, run at every strict step before any loop: an `_k`/`_u` flag
per invariant and conjunct (`'dev' in V`, `V.isdisjoint(...)`), a reader per variable
(`fast_ap(s['dev'])` or `no_ap(...)`), the constants the loops read (`C['$h12']`), and the
argument tuple of each loop: ~220 bytecodes on a HostTier request event and ~460 on an
event that moves a node, the most of any Python function of a strict step. (Counted, that
interpreter work was ~1M of the fused pass's ~27.5M instructions a kv_bytes replay: the
loops' operations are the rest, which fused_native's `compare_truth` and `contains` make
cheaper.) Here the whole function becomes one C callable, a `FusedPass` object that holds
the module's globals:

  * each statement of the `try` body is translated: `x = <expr>`, `if`, `raise
    FastPathFailed()` (the pass does not hold: False), `return True`, and an element loop,
    whose predicate is compiled as fused_native compiles it and called per element with the
    names it reads in an array (no tuple);
  * the function's names are C slots; a name it never assigns is looked up once, when the
    pass is made, in its module's namespace (a copy, which nothing writes afterwards), then
    builtins, as Python looks it up (a name bound nowhere: the NameError raised at its use
    makes the pass not hold, as in Python);
  * a statement that cannot be translated (a lambda, a generator expression, an int past 63
    bits) runs as Python: a function of the names it reads, defined beside `inc_all` in a
    copy of its module's namespace and called from C. It may assign only names nothing else
    reads (the loops' own), else the function is not compiled whole;
  * any `Exception` the Python would have raised makes the result False, as the function's
    `except Exception: return False` does; any other (a KeyboardInterrupt) propagates;
  * what the set-up recomputes at every step from what does not change between steps keeps
    its last answer at its site, reused while the site can tell it is still the answer: a
    constant `C['name']` (while C is the same dict at the same version, `item_at`), an
    invariant's `'name' in skip` (the same frozenset of str, `member_at`), a variable's
    reader `fast_ap(s['name'])` (the same tuple, or an Fcn with the same dict, `reader`).
    (Made and looked up anew, they were ~3.6M of the ~31M instructions a kv_bytes replay
    spends in HostTier's _check_delta.)

A local read before it is assigned makes the result False (Python's UnboundLocalError, also
an Exception). The arguments are the Python function's: (C, s, D, V=None, skip=frozenset()),
positional. `native_inc_all` (fused_native.py) tries this first, then the loops alone, then
the Python; tests/monitors/test_monitor_differential.py checks what serves against the
generated Python on every spec's reachable, mutated and crossed states.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
import types
from dataclasses import dataclass, field

from hicache.monitors.fused_native import (_PLAIN_TYPES, _PRELUDE, Untranslatable, _c_const, _element_loop, _Loop,
                                           _translate, _truth, _value)

#: the generated function's parameters, in order, and the defaults of the last two
PARAMS = ("C", "s", "D", "V", "skip")


@dataclass
class _Scope(_Loop):
    """The function's own statements: its names are the slots `F` (parameters first), or
    globals, resolved when the pass is made (`globals`: their order in the pass object `P`)."""
    slots: dict[str, int] = field(default_factory=dict)
    globals: list[str] = field(default_factory=list)
    # (how many caches of each kind the translation numbered: `reader`'s, `item_at`'s, `member_at`'s)
    sites: int = 0
    items: int = 0
    members: int = 0
    entries: int = 0
    # the slots bound wherever the statement being translated runs: the parameters, and each
    # name a statement before it assigned in its block or an enclosing one (or in both
    # branches of an `if` before it), `_Whole.statement`
    bound: set[str] = field(default_factory=lambda: set(PARAMS))

    def read_site(self) -> int:
        self.sites += 1
        return self.sites - 1

    def reads_no_ap(self) -> bool:
        return True

    def item_site(self) -> int:
        self.items += 1
        return self.items - 1

    def entry_site(self) -> int:
        self.entries += 1
        return self.entries - 1

    def member_site(self) -> int:
        self.members += 1
        return self.members - 1

    def range_site(self) -> None:
        """None: the set-up tests names in V, which changes at every step (a loop's own
        predicate keeps its sites)."""
        return None

    def borrowed(self, name: str) -> str | None:
        """A slot bound wherever this use runs (`bound`): its own `F[i]`, used where it is, no
        reference counted nor test of its binding. Only a statement's last act assigns a slot
        (`Py_XSETREF`, after its expression's value is made), and Python code an expression
        calls cannot reach the C's slots: so while an expression runs, each slot holds the
        value it held when the expression began, and its reference. (Read into a new
        reference each, with its test, the set-up's ~100 reads a node event were ~10
        instructions each.) Else None: a global, or a slot that may be unbound here, is read
        into a new reference (`load_name`), which checks that it is bound."""
        i = self.slots.get(name)
        return f"F[{i}]" if i is not None and name in self.bound else None

    def borrowed_at(self, name: str, out: list[str]) -> str | None:
        """`borrowed`, and a global's value where it is, in the pass's tuple of them (held by
        the pass, which its caller holds for the call), after the test that it is bound (a
        NameError where it is not, as `global_at`): no call nor reference counted (the set-up
        reads ~14 globals a step, `fast_ap`, `no_ap`, `it`, ...)."""
        got = self.borrowed(name)
        if got is not None or name in self.slots:
            return got
        if name not in self.globals:
            self.globals.append(name)
        j = self.globals.index(name)
        out.append(f"if (PyTuple_GET_ITEM(P->values, {j}) == P->missing) {{ global_missing(P, {j}); goto done; }}")
        return f"PyTuple_GET_ITEM(P->values, {j})"

    def load_name(self, name: str, dst: str, out: list[str]) -> None:
        i = self.slots.get(name)
        if i is None:
            if name not in self.globals:
                self.globals.append(name)
            out.append(f"{dst} = global_at(P, {self.globals.index(name)}); if ({dst} == NULL) goto done;")
        elif name in self.bound:
            out.append(f"{dst} = F[{i}]; Py_INCREF({dst});")
        else:
            out.append(f"if (F[{i}] == NULL) goto unbound;")
            out.append(f"{dst} = F[{i}]; Py_INCREF({dst});")

    def unbound_test(self, name: str) -> list[str]:
        """The C that takes `unbound` where slot `name` is not bound: none where it is."""
        return [] if name in self.bound else [f"if (F[{self.slots[name]}] == NULL) goto unbound;"]


def _stored(node: ast.AST) -> set[str]:
    """The names a statement binds in its function (not in a lambda's or a comprehension's
    own scope)."""
    out: set[str] = set()

    def visit(n: ast.AST) -> None:
        if isinstance(n, (ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)):
            return
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        for c in ast.iter_child_nodes(n):
            visit(c)
    visit(node)
    return out


def _loaded(node: ast.AST) -> set[str]:
    """Every name a statement reads (a lambda's free names included)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _own_names(st: ast.stmt) -> set[str]:
    """The names a loop statement assigns before it reads them: its target, then the names
    its body's leading plain assignments bind (each read after its binding, in every
    iteration). What such a name held before the loop is never read by it."""
    if not isinstance(st, ast.For):
        return set()
    own = _stored(st.target)
    binds = _stored(st) - own
    for b in st.body:
        if not (isinstance(b, ast.Assign) and len(b.targets) == 1 and isinstance(b.targets[0], ast.Name)):
            break
        if not _loaded(b.value).isdisjoint(binds - own):
            break
        own.add(b.targets[0].id)
    return own


def _read_outside(stmts: list[ast.stmt], name: str, skip: ast.stmt) -> bool:
    """Whether a statement other than `skip` reads `name` where its value could come from
    another statement: anywhere but inside a loop that binds it before reading it."""
    for st in stmts:
        if st is skip:
            continue
        if isinstance(st, ast.For) and name in _own_names(st):
            # (its `else`, run after the loop, and its iterable, before it, are outside it)
            if name in _loaded(st.iter) or _read_outside(st.orelse, name, skip):
                return True
            continue
        if isinstance(st, (ast.If, ast.For, ast.While, ast.Try, ast.With)):
            heads = [st.test] if isinstance(st, (ast.If, ast.While)) else [st.iter] if isinstance(st, ast.For) else []
            if any(name in _loaded(h) for h in heads):
                return True
            inner = [*getattr(st, "body", []), *getattr(st, "orelse", []), *getattr(st, "finalbody", []),
                     *[b for h in getattr(st, "handlers", []) for b in h.body]]
            if _read_outside(inner, name, skip):
                return True
            continue
        if name in _loaded(st):
            return True
    return False


def _body_of(fn: types.FunctionType) -> list[ast.stmt]:
    """The statements of the generated function's `try`, checked to have its shape:
    `def inc_all(C, s, D, V=None, skip=frozenset()): ["doc"] try: ... except Exception:
    return False`."""
    src = textwrap.dedent(inspect.getsource(fn))
    tree = ast.parse(src)
    fdef = tree.body[0]
    if not isinstance(fdef, ast.FunctionDef) or [a.arg for a in fdef.args.args] != list(PARAMS) \
            or fdef.args.vararg or fdef.args.kwarg or fdef.args.kwonlyargs or fdef.decorator_list:
        raise Untranslatable("not a fused pass's signature")
    d = fdef.args.defaults
    if not (len(d) == 2 and isinstance(d[0], ast.Constant) and d[0].value is None
            and ast.unparse(d[1]) == "frozenset()"):
        raise Untranslatable("not a fused pass's defaults")
    body = fdef.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if not (len(body) == 1 and isinstance(body[0], ast.Try)):
        raise Untranslatable("not one try statement")
    t = body[0]
    if t.orelse or t.finalbody or len(t.handlers) != 1:
        raise Untranslatable("not a plain try")
    h = t.handlers[0]
    if not (isinstance(h.type, ast.Name) and h.type.id == "Exception" and h.name is None and len(h.body) == 1
            and isinstance(h.body[0], ast.Return) and isinstance(h.body[0].value, ast.Constant)
            and h.body[0].value.value is False):
        raise Untranslatable("not `except Exception: return False`")
    last = t.body[-1] if t.body else None
    if not (isinstance(last, ast.Return) and isinstance(last.value, ast.Constant) and last.value.value is True):
        raise Untranslatable("a body that does not end in `return True`")
    return t.body


def _is_fail(node: ast.stmt) -> bool:
    return (isinstance(node, ast.Raise) and node.cause is None and isinstance(node.exc, ast.Call)
            and isinstance(node.exc.func, ast.Name) and node.exc.func.id == "FastPathFailed"
            and not node.exc.args and not node.exc.keywords)


class _Whole:
    """One translation: the function's C body, its loops' predicates, its Python escapes."""

    def __init__(self, body: list[ast.stmt]):
        self.body = body
        self.consts: list = []
        self.scope = _Scope(-1, "", consts=self.consts)
        names = list(PARAMS)
        for st in body:
            for n in sorted(_stored(st)):
                if n not in names:
                    names.append(n)
        self.scope.slots = {n: i for i, n in enumerate(names)}
        self.loops: list[_Loop] = []
        self.preds: list[str] = []
        self.escapes: list[ast.FunctionDef] = []
        # the temporaries declared: the most any statement holds at once (`statement`)
        self.temps = 0
        self.ints = 0

    def statements(self, stmts: list[ast.stmt], out: list[str]) -> None:
        for st in stmts:
            self.statement(st, out)

    def statement(self, st: ast.stmt, out: list[str]) -> None:
        """`st`'s C. Its temporaries are numbered from the first one its enclosing statement
        had not taken when `st` began, so the statements of one list reuse the same ones:
        each expression releases every temporary it took (Py_CLEAR) before its statement
        ends, unless it jumps to `done`, which releases whatever is held; so every temporary
        is NULL again where the next statement begins. (Numbered apart, a HostTier pass
        declared ~400, each set NULL at entry and tested at exit at every call: ~250
        instructions a call.)"""
        sc = self.scope
        temps, ints = sc.temps, sc.ints
        mark, bound = len(out), set(sc.bound)
        try:
            self._translated(st, out)
        except Untranslatable:
            # (the temporaries and constants it took stay declared, unused; an escaped
            # statement binds no slot)
            del out[mark:]
            sc.bound = bound
            self._escape(st, out)
        self.temps, self.ints = max(self.temps, sc.temps), max(self.ints, sc.ints)
        sc.temps, sc.ints = temps, ints

    def _translated(self, st: ast.stmt, out: list[str]) -> None:
        sc = self.scope
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            v = _value(sc, st.value, out)
            out.append(f"Py_XSETREF(F[{sc.slots[st.targets[0].id]}], {v}); {v} = NULL;")
            sc.bound.add(st.targets[0].id)
        elif isinstance(st, ast.If):
            t = sc.int_var()
            _truth(sc, st.test, out, t)
            before = set(sc.bound)
            out.append(f"if ({t}) {{")
            self.statements(st.body, out)
            after_body, sc.bound = sc.bound, before
            out.append("} else {")
            self.statements(st.orelse, out)
            out.append("}")
            # (bound after it: what both branches bound)
            sc.bound = after_body & sc.bound
        elif _is_fail(st):
            # (a statement's start, where every temporary is NULL: none to release)
            out.append("goto fail;")
        elif isinstance(st, ast.Return) and isinstance(st.value, ast.Constant) and st.value.value is True:
            out.append("ok = 1; goto out;")
        elif isinstance(st, ast.For) and _element_loop(st) is not None:
            self._loop(st, out)
        else:
            raise Untranslatable(type(st).__name__)

    def _loop(self, st: ast.For, out: list[str]) -> None:
        element, dom, reads, pred = _element_loop(st)
        loop = _Loop(len(self.loops), element, consts=self.consts, resolve=True)
        c = _translate(loop, reads, pred, entry=False)      # (Untranslatable: escaped whole)
        self.loops.append(loop)
        self.preds.append(c)
        sc = self.scope
        # the names its predicate reads, in its order: the function's slots (their references
        # are held by F for the call) or globals (borrowed from the pass, `borrowed_at`), each
        # else (a slot maybe unbound) a new reference, released after
        held, refs = [], []

        def name_ref(name: str) -> str:
            got = sc.borrowed_at(name, out)
            if got is None:
                got = sc.temp()
                sc.load_name(name, got, out)
                held.append(got)
            return got
        it_fn = name_ref("it")
        dom_v = name_ref("D")
        key = sc.temp()
        out.append(f"{key} = str_item_at({dom_v}, K[{sc.const_at(dom)}], &entry_sites[{sc.entry_site()}]);")
        out.append(f"if ({key} == NULL) goto done;")
        for name in loop.outer:
            i = sc.slots.get(name)
            if i is not None:
                out.extend(sc.unbound_test(name))
                refs.append(f"F[{i}]")
            else:
                refs.append(name_ref(name))
        # (after them, the dict each reader the predicate calls reads, resolved for the loop:
        # borrowed from the reader, which the slot or temporary above holds throughout)
        refs += [f"reader_dict({refs[loop.outer.index(name)]})" for name in loop.readers]
        r = sc.int_var()
        out.append(f"{{ PyObject *L_{loop.index}[] = {{{', '.join(refs) or 'NULL'}}};")
        out.append(f"  {r} = each({it_fn}, {key}, L_{loop.index}, pred_{loop.index}); }}")
        for t in (key, *held):
            out.append(f"Py_CLEAR({t});")
        out.append(f"if ({r} < 0) goto done;")
        out.append(f"if ({r} == 0) goto fail;")

    def _escape(self, st: ast.stmt, out: list[str]) -> None:
        """`st` as a Python function of the function's names it reads, called from C. What
        it assigns stays in that function: so it may assign only names no other statement
        reads (but a loop that binds them before reading them), and read one of them only
        after binding it (a loop's element and leading assignments)."""
        if any(isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom, ast.Await, ast.Global, ast.Nonlocal))
               for n in ast.walk(st)):
            raise Untranslatable("an escaped statement that returns or rebinds a scope")
        stored, loaded = _stored(st), _loaded(st)
        if not (loaded & stored) <= _own_names(st):
            raise Untranslatable(f"an escaped statement reads {sorted(loaded & stored)} it may not have bound")
        for n in sorted(stored):
            if _read_outside(self.body, n, st):
                raise Untranslatable(f"an escaped statement assigns {n}, read elsewhere")
        sc = self.scope
        args = sorted(n for n in loaded - stored if n in sc.slots)
        k = len(self.escapes)
        fdef = ast.FunctionDef(name=f"_hicache_escape_{k}",
                               args=ast.arguments(posonlyargs=[], args=[ast.arg(a) for a in args], vararg=None,
                                                  kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
                               body=[st], decorator_list=[], returns=None, type_comment=None)
        self.escapes.append(ast.fix_missing_locations(fdef))
        refs = []
        for a in args:
            out.extend(sc.unbound_test(a))
            refs.append(f"F[{sc.slots[a]}]")
        r = sc.temp()
        out.append(f"{{ PyObject *A_{k}[] = {{{', '.join(refs) or 'NULL'}}};")
        out.append(f"  {r} = PyObject_Vectorcall(PyTuple_GET_ITEM(P->escapes, {k}), A_{k}, {len(args)}, NULL); }}")
        out.append(f"if ({r} == NULL) goto done;")
        out.append(f"Py_CLEAR({r});")

    def source(self, name: str) -> str:
        out: list[str] = []
        self.statements(self.body, out)
        sc = self.scope
        temps = [f"v{i}" for i in range(self.temps)]
        decl = [f"PyObject {', '.join('*' + t + ' = NULL' for t in temps)};"] if temps else []
        ints = [f"int {', '.join(f't{i} = 0' for i in range(self.ints))};"] if self.ints else []
        nslots = len(sc.slots)
        plain = " || ".join(f"t == &{t}" for t in _PLAIN_TYPES)
        fn = "\n".join([
            "static PyObject *pass_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {",
            "    FusedPass *P = (FusedPass *)self;",
            "    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);",
            "    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames)) {",
            '        PyErr_SetString(PyExc_TypeError, "a native fused pass takes its arguments by position");',
            "        return NULL;",
            "    }",
            "    if (nargs < 3 || nargs > 5) {",
            '        PyErr_Format(PyExc_TypeError, "inc_all takes from 3 to 5 positional arguments (%zd given)", nargs);',
            "        return NULL;",
            "    }",
            f"    PyObject *F[{nslots}] = {{NULL}};",
            "    int ok = 0;",
            *("    " + x for x in decl + ints),
            "    for (Py_ssize_t i = 0; i < nargs; i++) F[i] = Py_NewRef(args[i]);",
            "    if (nargs < 4) F[3] = Py_NewRef(Py_None);",
            "    if (nargs < 5) F[4] = Py_NewRef(empty_frozenset);",
            *("    " + x for x in out),
            # (only where a read may find its slot unbound: a pass whose every read is of a
            # bound name has no such exit, and an unused label is a compiler warning)
            *(["unbound:         /* a local read before it was assigned: UnboundLocalError */",
               "    ok = 0;",
               "    goto done;"] if any("goto unbound" in x for x in out) else []),
            # (`goto fail` and the success's `goto out` are taken at a statement's start, where
            # every temporary is NULL (`statement`): their releases are skipped, ~25 calls a
            # step; an error's `goto done`, in an expression, releases what it holds)
            "fail:",
            "    ok = 0;",
            "    goto out;",
            "done:",
            *(f"    Py_XDECREF({t});" for t in temps),
            "out:",
            f"    for (int i = 0; i < {nslots}; i++) Py_XDECREF(F[i]);",
            "    if (PyErr_Occurred()) {",
            "        if (!PyErr_ExceptionMatches(PyExc_Exception))",
            "            return NULL;",
            "        PyErr_Clear();",
            "        ok = 0;",
            "    }",
            "    return PyBool_FromLong(ok);",
            "}",
        ])
        inits = "\n".join(f"    if ((K[{i}] = {_c_const(c)}) == NULL) return NULL;" for i, c in enumerate(self.consts))
        return "\n".join([
            _PRELUDE % {"nconst": max(1, len(self.consts)), "plain": plain},
            f"#define N_GLOBALS {len(sc.globals)}",
            f"#define N_SITES {max(1, sc.sites)}",
            f"#define N_ITEMS {max(1, sc.items)}",
            f"#define N_MEMBERS {max(1, sc.members)}",
            f"#define N_ENTRIES {max(1, sc.entries)}",
            _PASS_TYPE,
            *self.preds,
            fn,
            _MODULE % {"name": name, "inits": inits},
        ])


#: the pass object: the values of the globals it reads and its escapes, called by vectorcall; and
#: the element loop it runs for each translated `for`
_PASS_TYPE = r"""
#include <stddef.h>

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *values, *names, *missing, *escapes;
} FusedPass;

static PyObject *empty_frozenset, *iter_values;

/* the NameError, an Exception, of a read of global j, which nothing bound (NULL) */
static PyObject *global_missing(FusedPass *P, Py_ssize_t j) {
    PyErr_Format(PyExc_NameError, "name '%U' is not defined", PyTuple_GET_ITEM(P->names, j));
    return NULL;
}

/* global j's value (a new reference), resolved when the pass was made; a NameError, an
 * Exception, when nothing bound it */
static PyObject *global_at(FusedPass *P, Py_ssize_t j) {
    PyObject *v = PyTuple_GET_ITEM(P->values, j);
    if (v == P->missing)
        return global_missing(P, j);
    return Py_NewRef(v);
}

/* every int of lo..hi satisfies pred: 1; one does not: 0; an error: -1 (raised) */
static int each_of_range(long long lo, long long hi, PyObject *const *L,
                         int (*pred)(PyObject *, PyObject *const *)) {
    int ok = 1;
    for (long long i = lo; ok == 1 && i <= hi; i++) {
        PyObject *e = PyLong_FromLongLong(i);
        if (e == NULL)
            return -1;
        ok = pred(e, L);
        Py_DECREF(e);
    }
    return ok < 0 ? -1 : ok;
}

#if PY_VERSION_HEX < 0x030D0000
/* every element of the exact set or frozenset dom satisfies pred: 1; one does not: 0; an
 * error: -1 (raised). Walked as its iterator walks it (its table, in order: set_next),
 * with no iterator made, and as the iterator refuses to go on, RuntimeError where its size
 * changed since the walk began (at each next element, and after the last) */
static int each_of_set(PyObject *dom, PyObject *const *L, int (*pred)(PyObject *, PyObject *const *)) {
    Py_ssize_t pos = 0, used = PySet_GET_SIZE(dom);
    PyObject *key;
    int ok = 1;
    Py_INCREF(dom);
    while (ok == 1) {
        if (PySet_GET_SIZE(dom) != used) {
            PyErr_SetString(PyExc_RuntimeError, "Set changed size during iteration");
            ok = -1;
            break;
        }
        if ((key = set_next(dom, &pos)) == NULL)
            break;
        Py_INCREF(key);
        ok = pred(key, L);
        Py_DECREF(key);
    }
    Py_DECREF(dom);
    return ok < 0 ? -1 : ok;
}
#endif

/* every element of it(dom) satisfies pred: 1; one does not: 0; an error: -1 (raised). The
 * call of `it` is skipped where it is the values' own iter_values on an exact set, which it
 * returns as it is, or on an Interval lo..hi, of which it returns range(lo, hi + 1): its ints,
 * in order, made here (the pass walks the interval of every request when `len` changed) */
static int each(PyObject *it, PyObject *dom, PyObject *const *L, int (*pred)(PyObject *, PyObject *const *)) {
    PyObject *seq;
    long long lo, hi;
    if (it == iter_values && interval_bounds(dom, &lo, &hi))
        return each_of_range(lo, hi, L, pred);
    if (it == iter_values && (PyFrozenSet_CheckExact(dom) || Py_IS_TYPE(dom, &PySet_Type))) {
#if PY_VERSION_HEX < 0x030D0000
        return each_of_set(dom, L, pred);
#else
        seq = Py_NewRef(dom);       /* (no _PySet_NextEntry outside the interpreter's build) */
#endif
    } else {
        PyObject *argv[] = {dom};
        seq = PyObject_Vectorcall(it, argv, 1, NULL);
        if (seq == NULL)
            return -1;
    }
    PyObject *iter = PyObject_GetIter(seq), *e;
    Py_DECREF(seq);
    if (iter == NULL)
        return -1;
    int ok = 1;
    while (ok == 1 && (e = PyIter_Next(iter)) != NULL) {
        ok = pred(e, L);
        Py_DECREF(e);
    }
    Py_DECREF(iter);
    if (PyErr_Occurred())
        return -1;
    return ok == 1;
}

/* A sequence's reader as a pass's `reader` site hands it on: rt's fast_ap's reader `real` of the
 * tuple seq (`seq_at_real`), which call1 reads an index in 1..n of directly (as the reader reads
 * it) and calls for anything else; called itself, the reader decides. (A pass reads a
 * sequence, `slot` or a request's row, at every dirty element: a call through vectorcall
 * each, before.) */
static PyObject *seq_at_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    PyObject *real = seq_at_real((SeqAt *)self);
    return real == NULL ? NULL : PyObject_Vectorcall(real, args, nargsf, kwnames);
}

static void seq_at_dealloc(PyObject *self) {
    Py_XDECREF(((SeqAt *)self)->seq);
    Py_XDECREF(((SeqAt *)self)->real);
    Py_XDECREF(((SeqAt *)self)->maker);
    Py_TYPE(self)->tp_free(self);
}

static PyTypeObject SeqAtType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hicache.SeqAt",
    .tp_basicsize = sizeof(SeqAt),
    .tp_dealloc = seq_at_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(SeqAt, vectorcall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "a fused pass's reader of one sequence (hicache.monitors.fused_whole)",
};

/* a SeqAt of seq (an exact tuple) whose reader `maker` makes at its first use, or NULL on an
 * error. Where `old`, the SeqAt the site kept, is held by the site alone (its one reference:
 * nothing else can read it), old itself, now of seq (a new reference): no reader is freed and
 * made anew each time a changed sequence is read (a request's row, `slot`, at most steps) */
static PyObject *seq_at_new(PyObject *seq, PyObject *maker, PyObject *old) {
    if (old != NULL && Py_TYPE(old) == &SeqAtType && Py_REFCNT(old) == 1) {
        SeqAt *r = (SeqAt *)old;
        PyObject *os = r->seq, *oreal = r->real, *om = r->maker;
        r->seq = Py_NewRef(seq);
        r->real = NULL;
        r->maker = Py_NewRef(maker);
        Py_INCREF(old);
        /* (released last: their deallocation may run code, which finds r whole) */
        Py_XDECREF(os);
        Py_XDECREF(oreal);
        Py_XDECREF(om);
        return old;
    }
    SeqAt *r = PyObject_New(SeqAt, &SeqAtType);
    if (r == NULL)
        return NULL;
    r->vectorcall = seq_at_call;
    r->seq = Py_NewRef(seq);
    r->real = NULL;
    r->maker = Py_NewRef(maker);
    return (PyObject *)r;
}

/* A `fast_ap(x)` call's cache (one per call in the pass, `reader`): the value x it last read
 * (an exact tuple, or exactly an Fcn with its dict d), and the reader rt's fast_ap made of it */
typedef struct {
    PyObject *x, *d, *r;
} ReadSite;

static ReadSite read_sites[N_SITES];
static PyObject *rt_fast_ap, *fcn_type;
/* rt's no_ap and what it returns for any value, rt._NO_READ (rt configures the C no_ap with
 * it, and the Python one returns it), held for the module's life */
static PyObject *rt_no_ap, *rt_no_read;
static Py_ssize_t off_fcn_d = -1;       /* where an Fcn keeps its dict (its slot `d`), -1 if not */

/* x's dict when x is exactly an Fcn (borrowed), else NULL */
static PyObject *fcn_dict(PyObject *x) {
    if (off_fcn_d < 0 || (PyObject *)Py_TYPE(x) != fcn_type)
        return NULL;
    return *(PyObject **)((char *)x + off_fcn_d);
}

/* f(x) where the pass calls `fast_ap(x)` at every step, once per variable it reads: when f is
 * rt's fast_ap and x is the value the site read last, the reader made then. rt's fast_ap makes
 * of an exact tuple a reader of that tuple (immutable), and of exactly an Fcn its dict's
 * `__getitem__`: so the reader made of the same tuple, or of an Fcn holding the same dict,
 * reads alike (the pass only calls it, through call1), and none is made nor freed again. A
 * tuple's reader is handed on as a SeqAt over it (call1 then reads the tuple itself), which
 * makes rt's fast_ap's reader only if a call needs it (`seq_at_real`). The site holds what it
 * keeps (no other object can take their addresses). */
static PyObject *reader(PyObject *f, PyObject *x, ReadSite *site) {
    PyObject *d = fcn_dict(x);
    int plain = f == rt_fast_ap && (PyTuple_CheckExact(x) || d != NULL);
    if (plain && site->r != NULL && site->x == x && site->d == d)
        return Py_NewRef(site->r);
    PyObject *r = plain && d == NULL ? seq_at_new(x, f, site->r) : call1(f, x);
    if (r != NULL && plain) {
        PyObject *ox = site->x, *od = site->d, *orr = site->r;
        site->x = Py_NewRef(x);
        site->d = Py_XNewRef(d);
        site->r = Py_NewRef(r);
        Py_XDECREF(ox);
        Py_XDECREF(od);
        Py_XDECREF(orr);
    }
    return r;
}

/* f(x) where the pass calls `no_ap(x)` at every step, once per variable its running conjuncts
 * do not read (~7 a step): rt_no_read where f is rt_no_ap, which returns it for any x and does
 * nothing else (a call through vectorcall each, before); any other f is called. rt_no_ap is
 * NULL (no f is it) unless no_reader_configure found rt's no_ap to be the native loops' one */
static Py_ALWAYS_INLINE inline PyObject *no_reader(PyObject *f, PyObject *x) {
    if (f == rt_no_ap)
        return Py_NewRef(rt_no_read);
    return call1(f, x);
}

/* rt_no_ap and rt_no_read set where rt's no_ap is the native loops' no_ap (hicache.monitors.
 * native's module, which rt configured with the value it returns: configure_readers takes that
 * value once per process, so every call returns this one), the value asked of it once here;
 * else left NULL (any other no_ap, a Python one whose answer a rebinding could change, is
 * called at each read). 0, or -1 on an error */
static int no_reader_configure(PyObject *rt) {
    PyObject *f = PyObject_GetAttrString(rt, "no_ap");
    PyObject *native = f == NULL ? NULL : PyImport_ImportModule("hicache.monitors.native");
    PyObject *mod = native == NULL ? NULL : PyObject_CallMethod(native, "module", NULL);
    PyObject *own = mod == NULL || mod == Py_None ? NULL : PyObject_GetAttrString(mod, "no_ap");
    int rc = f == NULL || native == NULL || mod == NULL || (mod != Py_None && own == NULL) ? -1 : 0;
    if (rc == 0 && own != NULL && f == own) {
        rt_no_read = PyObject_CallOneArg(f, Py_None);
        if (rt_no_read == NULL)
            rc = -1;
        else
            rt_no_ap = Py_NewRef(f);
    }
    Py_XDECREF(own);
    Py_XDECREF(mod);
    Py_XDECREF(native);
    Py_XDECREF(f);
    return rc;
}

/* A `C['name']` read's cache (one per such read in the pass, `item_at`): the exact dict it
 * last read, the dict's version then, and the value read */
typedef struct {
    PyObject *d, *v;
    uint64_t version;
} ItemSite;

static ItemSite item_sites[N_ITEMS];

/* o[key] (key a str constant), as getitem reads it. Where o is an exact dict whose version
 * tag (which every change of a dict renews: PEP 509) is the one the site read it at, the
 * value read then: the pass reads the constants binding C by name at every step, and C does
 * not change while its binding holds (the state s and the domains D do: not cached). Before
 * 3.12 only (the tag is deprecated from 3.12: a read each time there). */
static PyObject *item_at(PyObject *o, PyObject *key, ItemSite *site) {
#if PY_VERSION_HEX < 0x030C0000
    if (PyDict_CheckExact(o)) {
        uint64_t version = ((PyDictObject *)o)->ma_version_tag;
        if (site->d == o && site->version == version && site->v != NULL)
            return Py_NewRef(site->v);
        PyObject *v = dict_item(o, key);
        /* (kept only if the read changed nothing: a str key's lookup runs no Python code) */
        if (v != NULL && ((PyDictObject *)o)->ma_version_tag == version) {
            PyObject *od = site->d, *ov = site->v;
            site->d = Py_NewRef(o);
            site->v = Py_NewRef(v);
            site->version = version;
            Py_XDECREF(od);
            Py_XDECREF(ov);
        }
        return v;
    }
#endif
    return getitem(o, key);
}

/* A `x['name']` read's cache (one per such read in the pass of the state, the domains or
 * any dict but the constants binding, `str_item_at`): the number of the entry where the
 * last read found the key, in the dict's order of insertion */
typedef struct {
    Py_ssize_t ix;
} EntrySite;

static EntrySite entry_sites[N_ENTRIES];

/* o[key] (key an interned str constant), as getitem reads it, looked up, with the number of
 * key's entry kept at the site where o is an exact dict of str keys (a hint only) */
static PyObject *str_item_find(PyObject *o, PyObject *key, EntrySite *site) {
    PyObject *v = getitem(o, key);
#ifdef HICACHE_DICT_ENTRIES
    if (v != NULL && PyDict_CheckExact(o)) {
        /* (the lookup of a str in a dict of str keys runs no Python code: read anew anyway) */
        PyDictKeysObject *dk = ((PyDictObject *)o)->ma_keys;
        if (((PyDictObject *)o)->ma_values == NULL && dk->dk_kind == DICT_KEYS_UNICODE) {
            PyDictUnicodeEntry *ep = DK_UNICODE_ENTRIES(dk);
            for (Py_ssize_t i = 0; i < dk->dk_nentries; i++)
                if (ep[i].me_key == key) {
                    site->ix = i;
                    break;
                }
        }
    }
#else
    (void)site;
#endif
    return v;
}

/* o[key] (key an interned str constant), as getitem reads it. Where o is an exact dict of str
 * keys whose entry number site->ix is live and holds key itself, that entry's value: a
 * dict's keys are unique, so the live entry whose key is key holds o[key], wherever it is
 * (a wrong hint costs the lookup it did not save). The state s, whose variables are written
 * in place of their entries, and the dirty domains D keep each key at its entry from step
 * to step; the pass reads ~15 of them by name at every step, a hash probe and a call each
 * before (inlined). */
static Py_ALWAYS_INLINE inline PyObject *str_item_at(PyObject *o, PyObject *key, EntrySite *site) {
#ifdef HICACHE_DICT_ENTRIES
    if (PyDict_CheckExact(o)) {
        PyDictKeysObject *dk = ((PyDictObject *)o)->ma_keys;
        Py_ssize_t i = site->ix;
        if (((PyDictObject *)o)->ma_values == NULL && dk->dk_kind == DICT_KEYS_UNICODE && i < dk->dk_nentries) {
            PyDictUnicodeEntry *ep = &DK_UNICODE_ENTRIES(dk)[i];
            if (ep->me_key == key && ep->me_value != NULL)
                return Py_NewRef(ep->me_value);
        }
    }
#endif
    return str_item_find(o, key, site);
}

/* A `'name' in skip` test's cache (one per such test in the pass, `member_at`): the
 * frozenset of str it last tested, and the answer */
typedef struct {
    PyObject *set;
    int in;
} MemberSite;

static MemberSite member_sites[N_MEMBERS];

/* whether every element of the exact frozenset s is an exact str (so that a str's membership
 * in it is decided by hash and string equality alone); 0 from 3.13 (no _PySet_NextEntry) */
static int only_str(PyObject *s) {
#if PY_VERSION_HEX >= 0x030D0000
    (void)s;
    return 0;
#else
    Py_ssize_t pos = 0;
    PyObject *key;
    Py_hash_t hash;
    while (_PySet_NextEntry(s, &pos, &key, &hash))
        if (!PyUnicode_CheckExact(key))
            return 0;
    return 1;
#endif
}

/* `key in r` (key a str constant), as contains decides it. Where r is the exact frozenset of
 * str the site tested last, the answer then: a frozenset does not change, and such a test
 * runs no code of its elements (the pass tests `'<invariant>' not in skip` per invariant at
 * every step, and skip is the monitor's one frozenset). The site holds the set it keeps. */
static int member_at(PyObject *r, PyObject *key, MemberSite *site) {
    if (!PyFrozenSet_CheckExact(r) || !PyUnicode_CheckExact(key))
        return contains(r, key);
    if (site->set == r)
        return site->in;
    int in = contains(r, key);
    if (in >= 0 && only_str(r)) {
        PyObject *old = site->set;
        site->set = Py_NewRef(r);
        site->in = in;
        Py_XDECREF(old);
    }
    return in;
}

static void pass_dealloc(PyObject *self) {
    FusedPass *P = (FusedPass *)self;
    Py_XDECREF(P->values);
    Py_XDECREF(P->names);
    Py_XDECREF(P->missing);
    Py_XDECREF(P->escapes);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *pass_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames);

static PyTypeObject FusedPassType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hicache.FusedPass",
    .tp_basicsize = sizeof(FusedPass),
    .tp_dealloc = pass_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(FusedPass, vectorcall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "a generated fused pass (inc_all) compiled whole (hicache.monitors.fused_whole)",
};

/* make(values, names, missing, escapes): the pass over the values of the globals it reads
 * (`missing` where nothing bound one), in the order the translation numbered them */
static PyObject *make(PyObject *mod, PyObject *args) {
    PyObject *values, *names, *missing, *esc;
    if (!PyArg_ParseTuple(args, "O!O!OO!", &PyTuple_Type, &values, &PyTuple_Type, &names, &missing,
                          &PyTuple_Type, &esc))
        return NULL;
    if (PyTuple_GET_SIZE(values) != PyTuple_GET_SIZE(names) || PyTuple_GET_SIZE(values) != N_GLOBALS) {
        PyErr_SetString(PyExc_ValueError, "make: one value and one name for each global the pass reads");
        return NULL;
    }
    FusedPass *P = PyObject_New(FusedPass, &FusedPassType);
    if (P == NULL)
        return NULL;
    P->vectorcall = pass_call;
    P->values = Py_NewRef(values);
    P->names = Py_NewRef(names);
    P->missing = Py_NewRef(missing);
    P->escapes = Py_NewRef(esc);
    return (PyObject *)P;
}
"""

_MODULE = r"""
static PyMethodDef methods[] = {
    {"make", (PyCFunction)make, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "%(name)s", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_%(name)s(void) {
%(inits)s
    if (configure() < 0) return NULL;
    if (PyType_Ready(&FusedPassType) < 0 || PyType_Ready(&SeqAtType) < 0) return NULL;
    seq_at_type = &SeqAtType;
    if ((empty_frozenset = PyFrozenSet_New(NULL)) == NULL) return NULL;
    PyObject *values = PyImport_ImportModule("hicache.tla.values");
    if (values == NULL) return NULL;
    iter_values = PyObject_GetAttrString(values, "iter_values");
    Py_DECREF(values);
    if (iter_values == NULL) return NULL;
    PyObject *rt = PyImport_ImportModule("hicache.monitors.rt");
    if (rt == NULL) return NULL;
    rt_fast_ap = PyObject_GetAttrString(rt, "fast_ap");
    fcn_type = rt_fast_ap == NULL ? NULL : PyObject_GetAttrString(rt, "Fcn");
    if (rt_fast_ap == NULL || fcn_type == NULL || no_reader_configure(rt) < 0) {
        Py_DECREF(rt);
        return NULL;
    }
    Py_DECREF(rt);
    if (PyType_Check(fcn_type)) {
        PyObject *name_d = PyUnicode_InternFromString("d");
        if (name_d == NULL) return NULL;
        off_fcn_d = slot_offset(fcn_type, name_d);
        Py_DECREF(name_d);
        if (PyErr_Occurred()) return NULL;
    }
    return PyModule_Create(&module);
}
"""


def module_name(fn: types.FunctionType) -> str:
    return "_hicache_fusedfn_" + fn.__module__.rsplit(".", 1)[-1]


def translate(fn: types.FunctionType) -> tuple[str, list[ast.FunctionDef]] | None:
    """(C source, the escaped statements' Python functions) of a generated fused pass
    compiled whole, or None when it is not of the generated shape or a statement can be
    neither translated nor escaped."""
    got = _compile(fn)
    return None if got is None else got[:2]


def _compile(fn: types.FunctionType) -> tuple[str, list[ast.FunctionDef], list[str]] | None:
    """`translate`'s, and the names of the globals the C reads, in its numbering."""
    try:
        w = _Whole(_body_of(fn))
        csrc = w.source(module_name(fn))
        return csrc, w.escapes, w.scope.globals
    except (OSError, TypeError, SyntaxError, Untranslatable):
        return None


def build(gen: types.ModuleType, fn: types.FunctionType, build_module) -> object | None:
    """The compiled pass for `gen`'s `fn` (`build_module(name, csrc)` builds and loads the
    extension), or None when it does not translate. The escapes are defined in a copy of
    `gen`'s namespace, as fused_native's rewritten function is."""
    got = _compile(fn)
    if got is None:
        return None
    csrc, escapes, names = got
    mod = build_module(module_name(fn), csrc)
    ns = dict(vars(gen))
    tree = ast.Module(body=list(escapes), type_ignores=[])
    # (line numbers of the file the function is in: a traceback through an escape points there)
    ast.increment_lineno(tree, fn.__code__.co_firstlineno - 1)
    exec(compile(ast.fix_missing_locations(tree), inspect.getsourcefile(fn) or "<inc_all>", "exec"), ns)
    funcs = tuple(ns[e.name] for e in escapes)
    builtins = ns.get("__builtins__", __builtins__)
    if isinstance(builtins, types.ModuleType):
        builtins = vars(builtins)
    # (each global the pass reads, resolved once: the namespace is this pass's own copy)
    missing = object()
    values = tuple(ns[n] if n in ns else builtins.get(n, missing) for n in names)
    return mod.make(values, tuple(names), missing, funcs)
