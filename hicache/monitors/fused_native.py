"""The generated fused fast path (`inc_all`) with its per-element loops compiled to C.

A generated module's `inc_all` walks each domain's dirty elements in a loop of the shape
codegen._fast_path writes:

    for e_Nodes in it(D['Nodes']):
        _e0 = _a5(e_Nodes)               # reads of the element used more than once
        if not (<predicate over e_Nodes, _e0, ... and hoisted locals>):
            raise FastPathFailed()

In strict mode that loop is a fifth of the monitors' instructions: ~80 bytecodes per dirty
page. `native_inc_all(module)` translates each such loop whose predicate uses only what this
module can translate (and/or/not, conditional expressions, comparisons, `in`, calls,
`.__class__`, names and constants) into a C function with the same evaluation order and
short-circuits, over the same Python objects through the C API (so each operation means what
it means in Python: `==` is `PyObject_RichCompare`, `in` is `PySequence_Contains` (a TLA+
interval's own test inlined), a call is a call), and returns a copy of `inc_all` in which the
loop is one call:

    if not _native_loop_0(it(D['Nodes']), (<every other name the loop reads>)):
        raise FastPathFailed()

The C function returns True when the predicate is true of every element, False when it is
false of one or raises an `Exception` (the fast path only decides "holds"; whatever it
cannot decide the exact forms decide, as in Python). A loop with anything else stays Python.
The C source is generated at first use from the committed generated module, compiled and
cached like the other native code (hicache/buildcache.py); when it cannot be built, or with
`HICACHE_NATIVE=0`, `inc_all` itself serves. tests/monitors/test_monitor_differential.py
checks the two agree on every spec's reachable, mutated and crossed (TRUE for 1) states.
"""
from __future__ import annotations

import ast
import inspect
import os
import textwrap
import threading
import types
import warnings
from dataclasses import dataclass, field

from hicache import buildcache

#: a type whose instances' `__class__` is their type (no instance can override it)
_PLAIN_TYPES = ("PyLong_Type", "PyBool_Type", "PyUnicode_Type", "PyTuple_Type", "PyFrozenSet_Type",
                "PySet_Type", "PyDict_Type", "PyFloat_Type", "PyList_Type")
_CMP = {ast.Eq: "Py_EQ", ast.NotEq: "Py_NE", ast.Lt: "Py_LT", ast.LtE: "Py_LE", ast.Gt: "Py_GT", ast.GtE: "Py_GE"}


class Untranslatable(Exception):
    """A construct this translator does not handle: the loop stays Python."""


@dataclass
class _Loop:
    """One element loop being translated: its element name, the names it reads from the
    enclosing function (passed in, in this order), its shared reads, the C it becomes."""
    index: int
    element: str
    outer: list[str] = field(default_factory=list)
    shared: dict[str, int] = field(default_factory=dict)
    consts: list = field(default_factory=list)
    temps: int = 0
    ints: int = 0

    def outer_at(self, name: str) -> int:
        if name not in self.outer:
            self.outer.append(name)
        return self.outer.index(name)

    def const_at(self, value) -> int:
        for i, c in enumerate(self.consts):
            if type(c) is type(value) and c == value:
                return i
        self.consts.append(value)
        return len(self.consts) - 1

    def temp(self) -> str:
        self.temps += 1
        return f"v{self.temps - 1}"

    def int_var(self) -> str:
        self.ints += 1
        return f"t{self.ints - 1}"


# ------------------------------------------------------------------------------ the translation

def _value(loop: _Loop, node: ast.expr, out: list[str]) -> str:
    """C statements appended to `out` that leave a new reference to node's value in the
    returned temporary (every error: `goto done`, where every temporary is released)."""
    dst = loop.temp()
    if isinstance(node, ast.Name):
        if node.id == loop.element:
            src = "e"
        elif node.id in loop.shared:
            src = f"s{loop.shared[node.id]}"
        else:
            src = f"L[{loop.outer_at(node.id)}]"
        out.append(f"{dst} = {src}; Py_INCREF({dst});")
        return dst
    if isinstance(node, ast.Constant):
        v = node.value
        if v is None or type(v) in (bool, str) or (type(v) is int and -2**62 < v < 2**62):
            out.append(f"{dst} = K[{loop.const_at(node.value)}]; Py_INCREF({dst});")
            return dst
        raise Untranslatable(f"constant {node.value!r}")
    if isinstance(node, ast.Call):
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args) or len(node.args) > 4:
            raise Untranslatable("call with keywords, starred or over 4 arguments")
        fn = _value(loop, node.func, out)
        args = [_value(loop, a, out) for a in node.args]
        if len(args) == 1:
            # (a one-argument call: most are a function value's reader, call1's dict lookup)
            out.append(f"{dst} = call1({fn}, {args[0]});")
        else:
            argv = f"{dst}_argv"            # (the call's argument array, named after its result)
            out.append(f"{{ PyObject *{argv}[] = {{{', '.join(args) or 'NULL'}}};")
            out.append(f"  {dst} = PyObject_Vectorcall({fn}, {argv}, {len(args)}, NULL); }}")
        for t in (fn, *args):
            out.append(f"Py_CLEAR({t});")
        out.append(f"if ({dst} == NULL) goto done;")
        return dst
    if isinstance(node, ast.Attribute) and node.attr == "__class__":
        obj = _value(loop, node.value, out)
        out.append(f"{dst} = class_of({obj}); Py_CLEAR({obj});")
        out.append(f"if ({dst} == NULL) goto done;")
        return dst
    raise Untranslatable(type(node).__name__)


def _truth(loop: _Loop, node: ast.expr, out: list[str], dst: str) -> None:
    """C statements appended to `out` that set the int `dst` to node's truth (0 or 1)."""
    if isinstance(node, ast.BoolOp):
        # (Python: `a and b` is b when a is true, else a; its truth is a's, then b's)
        test = "" if isinstance(node.op, ast.And) else "!"
        _truth(loop, node.values[0], out, dst)
        depth = 0
        for v in node.values[1:]:
            out.append(f"if ({test}{dst}) {{")
            _truth(loop, v, out, dst)
            depth += 1
        out.append("}" * depth)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        _truth(loop, node.operand, out, dst)
        out.append(f"{dst} = !{dst};")
        return
    if isinstance(node, ast.IfExp):
        t = loop.int_var()
        _truth(loop, node.test, out, t)
        out.append(f"if ({t}) {{")
        _truth(loop, node.body, out, dst)
        out.append("} else {")
        _truth(loop, node.orelse, out, dst)
        out.append("}")
        return
    if isinstance(node, ast.Compare):
        if len(node.ops) != 1:
            raise Untranslatable("chained comparison")
        op = node.ops[0]
        left = _value(loop, node.left, out)
        right = _value(loop, node.comparators[0], out)
        if isinstance(op, (ast.Is, ast.IsNot)):
            out.append(f"{dst} = ({left} {'==' if isinstance(op, ast.Is) else '!='} {right});")
        elif isinstance(op, (ast.In, ast.NotIn)):
            out.append(f"{dst} = contains({right}, {left});")
        elif type(op) in _CMP:
            c = loop.temp()
            out.append(f"{c} = PyObject_RichCompare({left}, {right}, {_CMP[type(op)]});")
            out.append(f"Py_CLEAR({left}); Py_CLEAR({right});")
            out.append(f"if ({c} == NULL) goto done;")
            out.append(f"{dst} = PyObject_IsTrue({c}); Py_CLEAR({c});")
            out.append(f"if ({dst} < 0) goto done;")
            return
        else:
            raise Untranslatable(type(op).__name__)
        out.append(f"Py_CLEAR({left}); Py_CLEAR({right});")
        out.append(f"if ({dst} < 0) goto done;")
        if isinstance(op, ast.NotIn):
            out.append(f"{dst} = !{dst};")
        return
    v = _value(loop, node, out)
    out.append(f"{dst} = PyObject_IsTrue({v}); Py_CLEAR({v});")
    out.append(f"if ({dst} < 0) goto done;")


def _element_loop(node: ast.stmt) -> tuple[str, str, list[ast.Assign], ast.expr] | None:
    """(element name, domain, shared reads, predicate) of a loop of codegen._fast_path's
    shape, else None."""
    if not (isinstance(node, ast.For) and isinstance(node.target, ast.Name) and not node.orelse):
        return None
    it = node.iter
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "it" and len(it.args) == 1
            and isinstance(it.args[0], ast.Subscript) and isinstance(it.args[0].value, ast.Name)
            and it.args[0].value.id == "D" and isinstance(it.args[0].slice, ast.Constant)):
        return None
    *reads, last = node.body
    if not all(isinstance(r, ast.Assign) and len(r.targets) == 1 and isinstance(r.targets[0], ast.Name)
               for r in reads):
        return None
    if not (isinstance(last, ast.If) and not last.orelse and len(last.body) == 1
            and isinstance(last.test, ast.UnaryOp) and isinstance(last.test.op, ast.Not)
            and isinstance(last.body[0], ast.Raise) and isinstance(last.body[0].exc, ast.Call)
            and isinstance(last.body[0].exc.func, ast.Name) and last.body[0].exc.func.id == "FastPathFailed"):
        return None
    return node.target.id, it.args[0].slice.value, reads, last.test.operand


def _translate(loop: _Loop, reads: list[ast.Assign], pred: ast.expr) -> str:
    """The C function `loop_<index>` of one element loop."""
    body: list[str] = []
    for i, r in enumerate(reads):
        v = _value(loop, r.value, body)
        body.append(f"s{i} = {v}; {v} = NULL;")
        loop.shared[r.targets[0].id] = i
    _truth(loop, pred, body, "ok")
    shared = [f"s{i}" for i in range(len(reads))]
    temps = [f"v{i}" for i in range(loop.temps)]
    objs = shared + temps
    decl = [f"PyObject {', '.join('*' + o + ' = NULL' for o in objs)};"] if objs else []
    ints = [f"int {', '.join(f't{i} = 0' for i in range(loop.ints))};"] if loop.ints else []
    release = [f"Py_XDECREF({o});" for o in objs]
    return "\n".join([
        f"static int pred_{loop.index}(PyObject *e, PyObject *const *L) {{",
        "    int ok = 0;",
        *("    " + x for x in decl + ints + body),
        "    if (ok) ok = 1;",
        "done:",
        *("    " + x for x in release),
        "    return PyErr_Occurred() ? -1 : ok;",
        "}",
        "",
        f"static PyObject *loop_{loop.index}(PyObject *self, PyObject *const *a, Py_ssize_t n) {{",
        f"    return run_loop(a, n, {len(loop.outer)}, pred_{loop.index});",
        "}",
        "",
    ])


_PRELUDE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *K[%(nconst)d];

/* x.__class__: its type for the types no instance overrides it on, else the attribute */
static PyObject *class_of(PyObject *x) {
    PyTypeObject *t = Py_TYPE(x);
    if (%(plain)s || x == Py_None) {
        Py_INCREF(t);
        return (PyObject *)t;
    }
    return PyObject_GetAttrString(x, "__class__");
}

/* `x in r` as Python decides it (PySequence_Contains), with no Python call when r is a TLA+
 * interval a..b, exactly hicache.tla.values.Interval (a subclass may decide otherwise): its
 * `contains` is `type(v) is int and self.lo <= v <= self.hi`, read in that order here (the
 * fast paths test `hits[n] \in 0..2` at every dirty page: a Python call each, before) */
static PyObject *interval_type, *str_lo, *str_hi;

static int contains(PyObject *r, PyObject *x) {
    if (interval_type == NULL || (PyObject *)Py_TYPE(r) != interval_type)
        return PySequence_Contains(r, x);
    if (!PyLong_CheckExact(x))
        return 0;
    PyObject *lo = PyObject_GetAttr(r, str_lo);
    int ok = lo == NULL ? -1 : PyObject_RichCompareBool(lo, x, Py_LE);
    Py_XDECREF(lo);
    if (ok <= 0)
        return ok;
    PyObject *hi = PyObject_GetAttr(r, str_hi);
    ok = hi == NULL ? -1 : PyObject_RichCompareBool(x, hi, Py_LE);
    Py_XDECREF(hi);
    return ok;
}

/* f(x), a call of one argument, as Python makes it, with no call when f is exactly a dict's
 * own `__getitem__` bound to an exact dict (what rt.fast_ap reads a function value by:
 * `f.d.__getitem__`, one call per variable an element's conjuncts read): that dict's lookup,
 * KeyError when x is missing (on an exact dict, `d[x]` asks no `__missing__`), TypeError when
 * x is unhashable, as the call raises them. Any other callable (a sequence's reader, a
 * subclass's method, a Python function) is called. */
static PyCFunction dict_getitem;    /* the C function of `{}.__getitem__`, read at configure */

static PyObject *call1(PyObject *f, PyObject *x) {
    if (PyCFunction_Check(f) && PyCFunction_GET_FUNCTION(f) == dict_getitem &&
            PyCFunction_GET_SELF(f) != NULL && PyDict_CheckExact(PyCFunction_GET_SELF(f))) {
        PyObject *v = PyDict_GetItemWithError(PyCFunction_GET_SELF(f), x);
        if (v != NULL)
            return Py_NewRef(v);
        if (!PyErr_Occurred()) {
            PyObject *key = PyTuple_Pack(1, x);     /* (KeyError(x), a tuple key kept whole) */
            if (key != NULL) {
                PyErr_SetObject(PyExc_KeyError, key);
                Py_DECREF(key);
            }
        }
        return NULL;
    }
    PyObject *argv[] = {x};
    return PyObject_Vectorcall(f, argv, 1, NULL);
}

static int configure(void) {
    PyObject *probe = PyDict_New(), *getitem = NULL;
    if (probe != NULL)
        getitem = PyObject_GetAttrString(probe, "__getitem__");
    if (getitem != NULL && PyCFunction_Check(getitem))
        dict_getitem = PyCFunction_GET_FUNCTION(getitem);
    Py_XDECREF(getitem);
    Py_XDECREF(probe);
    if (dict_getitem == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "a dict's __getitem__ is not a C function here");
        return -1;
    }
    PyObject *values = PyImport_ImportModule("hicache.tla.values");
    if (values == NULL)
        return -1;
    interval_type = PyObject_GetAttrString(values, "Interval");
    Py_DECREF(values);
    str_lo = PyUnicode_InternFromString("lo");
    str_hi = PyUnicode_InternFromString("hi");
    return interval_type == NULL || str_lo == NULL || str_hi == NULL ? -1 : 0;
}

/* every element of the iterable a[0] satisfies pred, the loop's other names in the tuple
 * a[1]: True; one does not, or raises an Exception: False (any other exception propagates) */
static PyObject *run_loop(PyObject *const *a, Py_ssize_t n, Py_ssize_t nouter,
                          int (*pred)(PyObject *, PyObject *const *)) {
    if (n != 2 || !PyTuple_Check(a[1]) || PyTuple_GET_SIZE(a[1]) != nouter) {
        PyErr_SetString(PyExc_TypeError, "a native loop takes (elements, tuple of its names)");
        return NULL;
    }
    PyObject *const *L = &PyTuple_GET_ITEM(a[1], 0);
    PyObject *it = PyObject_GetIter(a[0]), *e;
    int ok = it != NULL;
    while (ok && (e = PyIter_Next(it)) != NULL) {
        ok = pred(e, L) == 1;
        Py_DECREF(e);
    }
    Py_XDECREF(it);
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return NULL;
        PyErr_Clear();
        ok = 0;
    }
    if (ok)
        Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}
"""


def _c_const(v) -> str:
    """C that makes the constant v (None, a bool, an int of 63 bits, a str) as a new reference."""
    if v is None:
        return "Py_NewRef(Py_None)"
    if v is True or v is False:
        return f"Py_NewRef(Py_{v})"
    if type(v) is int:
        return f"PyLong_FromLongLong({v}LL)"
    raw = v.encode("utf-8")
    # (each byte in octal: any character, NUL and quotes included, survives the C literal)
    lit = "".join(f"\\{b:03o}" for b in raw)
    return f'PyUnicode_DecodeUTF8("{lit}", {len(raw)}, "strict")'


def translate(fn: types.FunctionType) -> tuple[str, ast.Module, list[_Loop]] | None:
    """(C source, the function's rewritten module AST, translated loops) for a generated
    fused fast path, or None when none of its loops can be translated."""
    try:
        src = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(src)
    except (OSError, TypeError, SyntaxError):
        return None         # (no source to read: a function built at run time, not generated)
    loops: list[_Loop] = []
    funcs: list[str] = []

    class Rewrite(ast.NodeTransformer):
        def visit_For(self, node):
            shape = _element_loop(node)
            if shape is None:
                return self.generic_visit(node)
            element, dom, reads, pred = shape
            loop = _Loop(len(loops), element)
            try:
                c = _translate(loop, reads, pred)
            except Untranslatable:
                return node
            loops.append(loop)
            funcs.append(c)
            call = ast.Call(ast.Name(f"_native_loop_{loop.index}", ast.Load()),
                            [node.iter, ast.Tuple([ast.Name(n, ast.Load()) for n in loop.outer], ast.Load())], [])
            raise_ = ast.Raise(ast.Call(ast.Name("FastPathFailed", ast.Load()), [], []), None)
            new = ast.If(ast.UnaryOp(ast.Not(), call), [raise_], [])
            return ast.fix_missing_locations(ast.copy_location(new, node))

    tree = Rewrite().visit(tree)
    # (line numbers of the file the function is in: a traceback through it points there)
    ast.increment_lineno(tree, fn.__code__.co_firstlineno - 1)
    if not loops:
        return None
    consts = [c for loop in loops for c in loop.consts]
    # (each loop numbered its constants from 0: shifted into one table)
    base, shifted = 0, []
    for loop, fsrc in zip(loops, funcs):
        for i in reversed(range(len(loop.consts))):
            fsrc = fsrc.replace(f"K[{i}]", f"K[{base + i}]")
        shifted.append(fsrc)
        base += len(loop.consts)
    plain = " || ".join(f"t == &{t}" for t in _PLAIN_TYPES)
    name = _module_name(fn)
    parts = [_PRELUDE % {"nconst": max(1, len(consts)), "plain": plain}, *shifted]
    methods = "\n".join(f'    {{"loop_{lp.index}", (PyCFunction)(void (*)(void))loop_{lp.index}, METH_FASTCALL, NULL}},'
                        for lp in loops)
    inits = "\n".join(f"    if ((K[{i}] = {_c_const(c)}) == NULL) return NULL;" for i, c in enumerate(consts))
    parts.append(f"""static PyMethodDef methods[] = {{
{methods}
    {{NULL, NULL, 0, NULL}},
}};

static struct PyModuleDef module = {{PyModuleDef_HEAD_INIT, "{name}", NULL, -1, methods, NULL, NULL, NULL, NULL}};

PyMODINIT_FUNC PyInit_{name}(void) {{
{inits}
    if (configure() < 0) return NULL;
    return PyModule_Create(&module);
}}
""")
    return "\n".join(parts), tree, loops


def _module_name(fn) -> str:
    return "_hicache_fused_" + fn.__module__.rsplit(".", 1)[-1]


# ------------------------------------------------------------------------------ build and load

_lock = threading.Lock()
_done: dict = {}                     # generated inc_all -> what serves for it
_reasons: dict[str, str] = {}


def _build(name: str, csrc: str) -> types.ModuleType:
    path = buildcache.extension_path(name.lstrip("_"), csrc.encode())
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        # (this process's own copy of the source, beside the library; cc needs the .c suffix)
        src = path.with_name(f".{name}.{os.getpid()}.c")
        src.write_text(csrc)
        try:
            buildcache.build_extension(path, src)
        finally:
            src.unlink(missing_ok=True)
    return buildcache.load_extension(name, path)


def native_inc_all(gen: types.ModuleType):
    """`gen.inc_all` with its translatable element loops in C (see the module docstring), or
    `gen.inc_all` itself when it has none, the build fails (one warning) or native code is
    off. Decided once per function and process (a function put in its place, a wrapper that
    counts its calls say, is translated on its own: it has no loops, so it serves itself)."""
    fn = getattr(gen, "inc_all", None)
    if fn is None or buildcache.disabled():
        return fn
    got = _done.get(fn)      # (decided: no lock, first_failure asks at every from-scratch check)
    if got is not None:
        return got
    key = gen.__name__
    with _lock:
        if fn in _done:
            return _done[fn]
        out = fn
        try:
            got = translate(fn)
            if got is not None:
                csrc, tree, loops = got
                mod = _build(_module_name(fn), csrc)
                ns = dict(vars(gen))
                for lp in loops:
                    ns[f"_native_loop_{lp.index}"] = getattr(mod, f"loop_{lp.index}")
                exec(compile(tree, inspect.getsourcefile(fn) or "<inc_all>", "exec"), ns)
                out = ns[fn.__name__]
                out.__doc__ = (fn.__doc__ or "") + " (element loops native: hicache.monitors.fused_native)"
        except (buildcache.BuildFailed, ImportError, OSError) as exc:
            _reasons[key] = str(exc)
            warnings.warn(f"hicache.monitors: {key}.inc_all's native loops are unavailable ({exc}); "
                          "the generated Python serves (same checks, slower strict mode)", RuntimeWarning,
                          stacklevel=2)
        _done[fn] = out
        return out
