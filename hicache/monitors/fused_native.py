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
interval's own test inlined; a constant frozenset of the ints lo..hi, which each `in` of a
loop keeps from call to call, tested by its bounds: `contains_at`), a call is a call), and
returns a copy of `inc_all` in which the loop is one call:

    if not _native_loop_0(it(D['Nodes']), (<every other name the loop reads>)):
        raise FastPathFailed()

The C function returns True when the predicate is true of every element, False when it is
false of one or raises an `Exception` (the fast path only decides "holds"; whatever it
cannot decide the exact forms decide, as in Python). A loop with anything else stays Python.
`native_inc_all` first tries the whole function in C (fused_whole.py, which uses this
module's translation of expressions and loops); these loops alone serve where that does not
translate.
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
_ARITH = {ast.Add: "PyNumber_Add", ast.Sub: "PyNumber_Subtract", ast.Mult: "PyNumber_Multiply"}
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
    ranges: int = 0
    # with `resolve`, the outer names the predicate calls with one argument, in their order:
    # the caller hands each one's dict after the names (`reader_dict`), at L[len(outer) + j]
    resolve: bool = False
    readers: list[str] = field(default_factory=list)

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

    def load_name(self, name: str, dst: str, out: list[str]) -> None:
        """C that leaves a new reference to `name`'s value in `dst`: the element, a shared
        read, or one of the names the loop is handed (`L`)."""
        if name == self.element:
            src = "e"
        elif name in self.shared:
            src = f"s{self.shared[name]}"
        else:
            src = f"L[{self.outer_at(name)}]"
        out.append(f"{dst} = {src}; Py_INCREF({dst});")

    def borrowed(self, name: str) -> str | None:
        """The C expression of `name`'s value where a use may borrow it (no reference taken
        or released): the element, a shared read and the names the loop is handed are held
        by the predicate's caller, or by the predicate itself from its first statements on,
        for as long as it runs."""
        if name == self.element:
            return "e"
        if name in self.shared:
            return f"s{self.shared[name]}"
        return f"L[{self.outer_at(name)}]"

    def borrowed_at(self, name: str, out: list[str]) -> str | None:
        """`borrowed`, where an operand reads `name`: the scope may append to `out` the C that
        makes the use valid (fused_whole's test that a global is bound)."""
        return self.borrowed(name)

    def reader_at(self, name: str) -> str | None:
        """With `resolve`, where the predicate calls the outer name `name` with one argument: the
        C of the dict the caller resolved it to, or NULL (`L[@R<j>]`, numbered after the outer
        names once they are all known, `_translate`); else None."""
        if not self.resolve or name == self.element or name in self.shared:
            return None
        if name not in self.readers:
            self.readers.append(name)
        return f"L[@R{self.readers.index(name)}]"

    def int_var(self) -> str:
        self.ints += 1
        return f"t{self.ints - 1}"

    def read_site(self) -> int | None:
        """The index of a new cache of a `fast_ap(x)` call (fused_whole's `reader`), or None:
        an element loop makes no readers (they are hoisted out of it)."""
        return None

    def reads_no_ap(self) -> bool:
        """Whether a `no_ap(x)` call may be fused_whole's `no_reader`: not in an element loop
        (its readers are hoisted out of it)."""
        return False

    def member_site(self) -> int | None:
        """The index of a new cache of a `'name' in skip` test (fused_whole's `member_at`), or
        None: an element loop tests no invariant's skip."""
        return None

    def item_site(self) -> int | None:
        """The index of a new cache of a `C['name']` read (fused_whole's `item_at`), or None:
        an element loop reads no constant by name (they are hoisted out of it)."""
        return None

    def entry_site(self) -> int | None:
        """The index of a new cache of the entry a `x['name']` read found (fused_whole's
        `str_item_at`), or None: an element loop reads no dict by name (its reads are hoisted)."""
        return None

    def range_site(self) -> str | None:
        """The name of a new cache of an `x in r` test (`contains_at`, a `RangeSite` the
        predicate declares), or None where the scope keeps none: an element loop tests each
        element's values against the same hoisted constant sets (`C['$h12']`, 0..NSlots)."""
        self.ranges += 1
        return f"rs{self.ranges - 1}"


# ------------------------------------------------------------------------------ the translation

def _held_constant(v) -> bool:
    """Whether constant v is one the module's `K` holds: None, a bool, a str, an int within
    62 bits (a larger one keeps its loop Python)."""
    return v is None or type(v) in (bool, str) or (type(v) is int and -2**62 < v < 2**62)


def _operand(loop: _Loop, node: ast.expr, out: list[str]) -> tuple[str, bool]:
    """(a C expression of node's value, whether it is a new reference its user releases): a
    name the scope lets a use borrow (`borrowed`) or a constant (the module's `K`, held for
    its life) is used where it is, no reference counted; anything else is a new temporary
    (`_value`). What an operation only reads takes operands; what keeps a value (a BoolOp's
    or IfExp's result, a tuple's item) takes `_value`'s new references."""
    if isinstance(node, ast.Name):
        src = loop.borrowed_at(node.id, out)
        if src is not None:
            return src, False
    if isinstance(node, ast.Constant) and _held_constant(node.value):
        return f"K[{loop.const_at(node.value)}]", False
    return _value(loop, node, out), True


def _release(*operands: tuple[str, bool]) -> str:
    """The C that releases the new references among `operands` (a borrowed one is left)."""
    return " ".join(f"Py_CLEAR({x});" for x, owned in operands if owned)


def _method_call(loop: _Loop, node: ast.Call, dst: str, out: list[str]) -> str:
    """`obj.name(args)` into dst, as Python calls a method (its LOAD_METHOD: the type's function
    called with obj first, no bound method made, unless obj's own attribute shadows it):
    PyObject_VectorcallMethod. (The fast paths test `V.isdisjoint(...)` per conjunct: a bound
    method allocated and freed at each, before.) The attribute is looked up after the
    arguments are evaluated, not before: the fast path's arguments read and call nothing
    that acts, and either one's Exception makes the pass not hold. `a.isdisjoint(b)` on two
    exact sets is set.isdisjoint's test in C (set_disjoint), no method looked up."""
    obj = _operand(loop, node.func.value, out)
    args = [_operand(loop, a, out) for a in node.args]
    argv = f"{dst}_argv"
    call = [f"{{ PyObject *{argv}[] = {{{', '.join(a for a, _ in (obj, *args))}}};",
            f"  {dst} = PyObject_VectorcallMethod(K[{loop.const_at(node.func.attr)}], {argv}, {len(args) + 1}, "
            f"NULL); }}"]
    if node.func.attr == "isdisjoint" and len(args) == 1:
        # (two exact sets: set.isdisjoint's own test, no method looked up nor called)
        t = loop.int_var()
        out.append(f"{t} = set_disjoint({obj[0]}, {args[0][0]});")
        out.append(f"if ({t} == -2) {{")
        out.extend(call)
        out.append(f"}} else {{ {dst} = {t} < 0 ? NULL : Py_NewRef({t} ? Py_True : Py_False); }}")
    else:
        out.extend(call)
    out.append(_release(obj, *args))
    out.append(f"if ({dst} == NULL) goto done;")
    return dst


def _value(loop: _Loop, node: ast.expr, out: list[str]) -> str:
    """C statements appended to `out` that leave a new reference to node's value in the
    returned temporary (every error: `goto done`, where every temporary is released)."""
    dst = loop.temp()
    if isinstance(node, ast.Name):
        loop.load_name(node.id, dst, out)
        return dst
    if isinstance(node, ast.Constant):
        if _held_constant(node.value):
            out.append(f"{dst} = K[{loop.const_at(node.value)}]; Py_INCREF({dst});")
            return dst
        raise Untranslatable(f"constant {node.value!r}")
    if isinstance(node, ast.Call):
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args) or len(node.args) > 4:
            raise Untranslatable("call with keywords, starred or over 4 arguments")
        if isinstance(node.func, ast.Attribute) and node.func.attr != "__class__":
            return _method_call(loop, node, dst, out)
        fn = _operand(loop, node.func, out)
        args = [_operand(loop, a, out) for a in node.args]
        site = loop.read_site() if isinstance(node.func, ast.Name) and node.func.id == "fast_ap" else None
        if len(args) == 1 and site is not None:
            # (a variable's reader made at every step: the last one this site made, while valid)
            out.append(f"{dst} = reader({fn[0]}, {args[0][0]}, &read_sites[{site}]);")
        elif len(args) == 1 and isinstance(node.func, ast.Name) and node.func.id == "no_ap" and loop.reads_no_ap():
            # (the reader of a variable no running conjunct reads: rt's no_ap's one answer)
            out.append(f"{dst} = no_reader({fn[0]}, {args[0][0]});")
        elif len(args) == 1 and isinstance(node.func, ast.Name) and (d := loop.reader_at(node.func.id)) is not None:
            # (a function value's reader handed to the loop: the dict it reads, resolved once
            # per loop, or NULL and call1)
            out.append(f"{dst} = call1_dict({fn[0]}, {d}, {args[0][0]});")
        elif len(args) == 1:
            # (a one-argument call: most are a function value's reader, call1's dict lookup)
            out.append(f"{dst} = call1({fn[0]}, {args[0][0]});")
        else:
            argv = f"{dst}_argv"            # (the call's argument array, named after its result)
            out.append(f"{{ PyObject *{argv}[] = {{{', '.join(a for a, _ in args) or 'NULL'}}};")
            out.append(f"  {dst} = PyObject_Vectorcall({fn[0]}, {argv}, {len(args)}, NULL); }}")
        out.append(_release(fn, *args))
        out.append(f"if ({dst} == NULL) goto done;")
        return dst
    if isinstance(node, ast.Attribute) and node.attr == "__class__":
        obj = _operand(loop, node.value, out)
        out.append(f"{dst} = class_of({obj[0]}); {_release(obj)}")
        out.append(f"if ({dst} == NULL) goto done;")
        return dst
    if isinstance(node, ast.Attribute):
        obj = _operand(loop, node.value, out)
        out.append(f"{dst} = PyObject_GetAttr({obj[0]}, K[{loop.const_at(node.attr)}]); {_release(obj)}")
        out.append(f"if ({dst} == NULL) goto done;")
        return dst
    if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Slice):
        obj = _operand(loop, node.value, out)
        key = _operand(loop, node.slice, out)
        site = loop.item_site() if isinstance(node.value, ast.Name) and node.value.id == "C" \
            and isinstance(node.slice, ast.Constant) and type(node.slice.value) is str else None
        entry = loop.entry_site() if site is None and isinstance(node.slice, ast.Constant) \
            and type(node.slice.value) is str else None
        if site is not None:
            # (a constant read at every step: the last value this site read, while valid)
            out.append(f"{dst} = item_at({obj[0]}, {key[0]}, &item_sites[{site}]); {_release(obj, key)}")
        elif entry is not None:
            # (a state's or domain's value read by name at every step: at the entry it was last)
            out.append(f"{dst} = str_item_at({obj[0]}, {key[0]}, &entry_sites[{entry}]); {_release(obj, key)}")
        else:
            out.append(f"{dst} = getitem({obj[0]}, {key[0]}); {_release(obj, key)}")
        out.append(f"if ({dst} == NULL) goto done;")
        return dst
    if isinstance(node, ast.BoolOp):
        # (its value, as Python's: the first operand that decides it, else the last)
        t = loop.int_var()
        first = _value(loop, node.values[0], out)
        out.append(f"{dst} = {first}; {first} = NULL;")
        for v in node.values[1:]:
            out.append(f"{t} = truth({dst}); if ({t} < 0) goto done;")
            out.append(f"if ({t if isinstance(node.op, ast.And) else '!' + t}) {{ Py_CLEAR({dst});")
            nxt = _value(loop, v, out)
            out.append(f"{dst} = {nxt}; {nxt} = NULL;")
        out.append("}" * (len(node.values) - 1))
        return dst
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP:
        # (a rich comparison's value is whatever the operands' method returns)
        left = _operand(loop, node.left, out)
        right = _operand(loop, node.comparators[0], out)
        out.append(f"{dst} = PyObject_RichCompare({left[0]}, {right[0]}, {_CMP[type(node.ops[0])]});")
        out.append(_release(left, right))
        out.append(f"if ({dst} == NULL) goto done;")
        return dst
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _operand(loop, node.operand, out)
        out.append(f"{dst} = PyNumber_Negative({v[0]}); {_release(v)}")
        out.append(f"if ({dst} == NULL) goto done;")
        return dst
    if isinstance(node, ast.Compare) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
        # (`is`, `in` and `not` make a bool)
        t = loop.int_var()
        _truth(loop, node, out, t)
        out.append(f"{dst} = Py_NewRef({t} ? Py_True : Py_False);")
        return dst
    if isinstance(node, ast.IfExp):
        t = loop.int_var()
        _truth(loop, node.test, out, t)
        out.append(f"if ({t}) {{")
        a = _value(loop, node.body, out)
        out.append(f"{dst} = {a}; {a} = NULL; }} else {{")
        b = _value(loop, node.orelse, out)
        out.append(f"{dst} = {b}; {b} = NULL; }}")
        return dst
    if isinstance(node, ast.Tuple) and not any(isinstance(x, ast.Starred) for x in node.elts):
        items = [_value(loop, x, out) for x in node.elts]
        out.append(f"{dst} = PyTuple_New({len(items)}); if ({dst} == NULL) goto done;")
        for i, x in enumerate(items):
            out.append(f"PyTuple_SET_ITEM({dst}, {i}, {x}); {x} = NULL;")
        return dst
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
        left = _operand(loop, node.left, out)
        right = _operand(loop, node.right, out)
        out.append(f"{dst} = {_ARITH[type(node.op)]}({left[0]}, {right[0]}); {_release(left, right)}")
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
        if not isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) and type(op) not in _CMP:
            raise Untranslatable(type(op).__name__)
        if isinstance(op, (ast.Is, ast.IsNot)) and _class_test(loop, node):
            # (`x.__class__ is c`, c read where it is: no type held nor released)
            xo = _operand(loop, node.left.value, out)
            c = _operand(loop, node.comparators[0], out)[0]
            out.append(f"{dst} = class_is({xo[0]}, {c}); {_release(xo)}")
            out.append(f"if ({dst} < 0) goto done;")
            if isinstance(op, ast.IsNot):
                out.append(f"{dst} = !{dst};")
            return
        lo = _operand(loop, node.left, out)
        ro = _operand(loop, node.comparators[0], out)
        left, right = lo[0], ro[0]
        if isinstance(op, (ast.Is, ast.IsNot)):
            out.append(f"{dst} = ({left} {'==' if isinstance(op, ast.Is) else '!='} {right});")
        elif isinstance(op, (ast.In, ast.NotIn)) and (site := _member_site(loop, node)) is not None:
            # (an invariant's name in skip, tested at every step)
            out.append(f"{dst} = member_at({right}, {left}, &member_sites[{site}]);")
        elif isinstance(op, (ast.In, ast.NotIn)) and (rs := loop.range_site()) is not None:
            # (an element's value in a constant set, tested at every element)
            out.append(f"{dst} = contains_at({right}, {left}, &{rs});")
        elif isinstance(op, (ast.In, ast.NotIn)):
            out.append(f"{dst} = contains({right}, {left});")
        else:
            out.append(f"{dst} = compare_truth({left}, {right}, {_CMP[type(op)]});")
        out.append(_release(lo, ro))
        out.append(f"if ({dst} < 0) goto done;")
        if isinstance(op, ast.NotIn):
            out.append(f"{dst} = !{dst};")
        return
    v = _operand(loop, node, out)
    out.append(f"{dst} = truth({v[0]}); {_release(v)}")
    out.append(f"if ({dst} < 0) goto done;")


def _class_test(loop: _Loop, node: ast.Compare) -> bool:
    """Whether node compares `x.__class__` with a name or constant used where it is (borrowed
    or the module's `K`: reading it runs nothing, so it may be read before x's class is)."""
    right = node.comparators[0]
    if not (isinstance(node.left, ast.Attribute) and node.left.attr == "__class__"):
        return False
    if isinstance(right, ast.Name):
        return loop.borrowed(right.id) is not None
    return isinstance(right, ast.Constant) and _held_constant(right.value)


def _member_site(loop: _Loop, node: ast.Compare) -> int | None:
    """The cache of `'name' in skip` (a str constant's membership in the pass's `skip`, which
    is the same set at every step, unlike the changed variables V: fused_whole's `member_at`)
    where the scope keeps one, else None."""
    right = node.comparators[0]
    if isinstance(node.left, ast.Constant) and type(node.left.value) is str and isinstance(right, ast.Name) \
            and right.id == "skip":
        return loop.member_site()
    return None


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


def _translate(loop: _Loop, reads: list[ast.Assign], pred: ast.expr, entry: bool = True) -> str:
    """The C functions `pred_<index>` of one element loop's predicate and, with `entry`,
    `loop_<index>` that runs it over the elements (a Python-callable function)."""
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
    ranges = [f"static RangeSite {', '.join(f'rs{i}' for i in range(loop.ranges))};"] if loop.ranges else []
    # (the readers' dicts follow the outer names, now all numbered)
    for j in reversed(range(len(loop.readers))):
        body = [x.replace(f"L[@R{j}]", f"L[{len(loop.outer) + j}]") for x in body]
    return "\n".join([
        f"static int pred_{loop.index}(PyObject *e, PyObject *const *L) {{",
        *("    " + x for x in ranges),
        "    int ok = 0;",
        *("    " + x for x in decl + ints + body),
        # (the predicate's end reached, every temporary is NULL again, released where its
        # value was used, and only the shared reads are held: released alone; the other
        # exit, `done`, is taken where an operation failed)
        *(f"    Py_DECREF({o});" for o in shared),
        "    return ok ? 1 : 0;",
        "done:",
        *("    " + x for x in release),
        "    return PyErr_Occurred() ? -1 : ok;",
        "}",
        "",
        *([f"static PyObject *loop_{loop.index}(PyObject *self, PyObject *const *a, Py_ssize_t n) {{",
           f"    return run_loop(a, n, {len(loop.outer)}, pred_{loop.index});",
           "}",
           ""] if entry else []),
    ])


_PRELUDE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
/* a dict's entries, as 3.11 lays them out (its keys object: the kind, the entries in
 * insertion order, each a key and its value, a deleted one's key NULL): read where an entry
 * can be guessed (`int_entry`, fused_whole's `str_item_at`), each guess checked against the
 * entry's key, so a wrong one only costs the lookup it did not save */
#define Py_BUILD_CORE
#include <internal/pycore_dict.h>
#undef Py_BUILD_CORE
#define HICACHE_DICT_ENTRIES 1
#endif

static PyObject *K[%(nconst)d];

#if PY_VERSION_HEX < 0x030C0000 && !defined(Py_REF_DEBUG)
/* Py_DECREF as the headers define it in a release build before 3.12 (no immortal objects),
 * always inlined: a pass's function is large enough that the compiler calls it otherwise, and
 * the pass releases ~70 temporaries a step and several per dirty element */
static Py_ALWAYS_INLINE inline void decref_inlined(PyObject *o) {
    if (--o->ob_refcnt == 0)
        _Py_Dealloc(o);
}
#undef Py_DECREF
#define Py_DECREF(op) decref_inlined(_PyObject_CAST(op))
#endif

/* x.__class__: its type for the types no instance overrides it on, else the attribute
 * (inlined: the fast paths test `x.__class__ is bool` at every dirty element) */
static Py_ALWAYS_INLINE inline PyObject *class_of(PyObject *x) {
    PyTypeObject *t = Py_TYPE(x);
    if (%(plain)s || x == Py_None) {
        Py_INCREF(t);
        return (PyObject *)t;
    }
    return PyObject_GetAttrString(x, "__class__");
}

/* class_is for an x whose type is none of int, bool and str (not inlined) */
static int class_is_other(PyObject *x, PyObject *c) {
    PyTypeObject *t = Py_TYPE(x);
    if (%(plain)s || x == Py_None)
        return (PyObject *)t == c;
    PyObject *k = PyObject_GetAttrString(x, "__class__");
    if (k == NULL)
        return -1;
    int is = k == c;
    Py_DECREF(k);
    return is;
}

/* whether x.__class__ is c (-1: an error, raised), as class_of reads it, with no reference
 * taken nor released where it is x's type (inlined: `x.__class__ is bool` and `is int` are
 * tested per dirty element and variable). The three types the fast paths' values have are
 * tested here, the other plain types apart: the compiler evaluates a chain of comparisons
 * this short without branches, and it did so for all nine and None (~30 instructions a
 * test, ~22k tests a kv_bytes replay's strict steps) */
static Py_ALWAYS_INLINE inline int class_is(PyObject *x, PyObject *c) {
    PyTypeObject *t = Py_TYPE(x);
    if (t == &PyLong_Type || t == &PyBool_Type || t == &PyUnicode_Type)
        return (PyObject *)t == c;
    return class_is_other(x, c);
}

/* *v = the value of x, an exact int, and 1 when it fits 64 bits, else 0 (no error: x is an
 * int). An int of at most one digit (|x| < 2**30, every position, length and bound the fast
 * paths compare) is read off its digit before 3.12 (its layout then); any other through the
 * API, which reads it so too (inlined: the fast paths compare ints at every dirty element) */
static Py_ALWAYS_INLINE inline int int64_of(PyObject *x, long long *v) {
#if PY_VERSION_HEX < 0x030C0000
    Py_ssize_t n = Py_SIZE(x);
    if (-1 <= n && n <= 1) {
        *v = (long long)n * (long long)((PyLongObject *)x)->ob_digit[0];
        return 1;
    }
#endif
    int overflow;
    *v = PyLong_AsLongLongAndOverflow(x, &overflow);
    return !overflow;
}

/* hicache.tla.values.Interval (a TLA+ interval a..b), and where it keeps lo and hi (its
 * __slots__: member descriptors' offsets, -1 if not) */
static PyObject *interval_type, *str_lo, *str_hi;
static Py_ssize_t off_lo = -1, off_hi = -1;

/* 1 with *lo and *hi its bounds when r is exactly an Interval whose slots hold ints within
 * 2**62 (so that hi - lo + 1 and hi + 1 fit 64 bits), else 0: the caller then asks Python */
static int interval_bounds(PyObject *r, long long *lo, long long *hi) {
    if (interval_type == NULL || (PyObject *)Py_TYPE(r) != interval_type || off_lo < 0 || off_hi < 0)
        return 0;
    PyObject *a = *(PyObject **)((char *)r + off_lo), *b = *(PyObject **)((char *)r + off_hi);
    const long long lim = 1LL << 62;
    return a != NULL && b != NULL && PyLong_CheckExact(a) && PyLong_CheckExact(b) && int64_of(a, lo)
        && int64_of(b, hi) && -lim < *lo && *lo < lim && -lim < *hi && *hi < lim;
}

/* the truth of x, not a bool nor None, as PyObject_IsTrue decides it; an Interval's (its
 * __len__, LazySet's: card(), which is max(0, hi - lo + 1)) read off its bounds, no Python
 * call: the pass tests `if D['Reqs']:` at every step, an interval when every request is to be
 * checked */
static int truth_of_other(PyObject *x) {
    long long lo, hi;
    if (interval_bounds(x, &lo, &hi))
        return lo <= hi;
    return PyObject_IsTrue(x);
}

/* the truth of x as Python decides it (PyObject_IsTrue, which tests these three first),
 * with no call for a bool or None: the fast paths test a bool flag per conjunct and element
 * (inlined even in a pass's large function, where the compiler would call it) */
static Py_ALWAYS_INLINE inline int truth(PyObject *x) {
    if (x == Py_True)
        return 1;
    if (x == Py_False || x == Py_None)
        return 0;
    return truth_of_other(x);
}

/* the KeyError(x) of a missing key, unless the lookup raised (NULL either way) */
static PyObject *missing_key(PyObject *x) {
    if (!PyErr_Occurred()) {
        PyObject *key = PyTuple_Pack(1, x);     /* (KeyError(x), a tuple key kept whole) */
        if (key != NULL) {
            PyErr_SetObject(PyExc_KeyError, key);
            Py_DECREF(key);
        }
    }
    return NULL;
}

/* The value of the exact dict d at x, an exact int of one digit whose value is i, read off
 * d's entry number i where that entry is live and its key is exactly an int equal to x (no
 * error: NULL where it is not, the caller then looks x up). A dict's keys are unique, so the
 * one live entry whose key equals x holds d[x], wherever it is; and an exact int equals x
 * exactly when it has x's value, which asks no Python code. A map's function of positions
 * (`dict.fromkeys(range(cap))`, grown in order, written in place, never deleted from) keeps
 * position i in entry i: its read is one test, not a probe of the hash table (inlined: the
 * pass reads each dirty element's values by their position, ~4.5 reads a dirty page). */
static Py_ALWAYS_INLINE inline PyObject *int_entry(PyObject *d, PyObject *x, Py_ssize_t i) {
#ifdef HICACHE_DICT_ENTRIES
    PyDictObject *mp = (PyDictObject *)d;
    PyDictKeysObject *dk = mp->ma_keys;
    if (mp->ma_values == NULL && dk->dk_kind == DICT_KEYS_GENERAL && 0 <= i && i < dk->dk_nentries) {
        PyDictKeyEntry *ep = &DK_ENTRIES(dk)[i];
        PyObject *k = ep->me_key;
        /* (a one-digit int: its size -1, 0 or 1 and its digit say its value; a zero's digit is
         * not read, the small ints, zero among them, being one object each) */
        if (k == x || (k != NULL && PyLong_CheckExact(k) && Py_SIZE(k) == Py_SIZE(x) && Py_SIZE(x) != 0
                       && ((PyLongObject *)k)->ob_digit[0] == ((PyLongObject *)x)->ob_digit[0]))
            return ep->me_value;
    }
#else
    (void)d; (void)x; (void)i;
#endif
    return NULL;
}

/* d[x] for an exact dict d (a new reference), as its subscript decides it: an exact dict asks
 * no `__missing__`; KeyError(x) when x is missing, TypeError when x is unhashable. An int of
 * at most one digit is read off the entry its value numbers where that entry holds it
 * (int_entry), else looked up by the hash Python gives it (its value, but -1's is -2), not
 * computed by a call (inlined: the pass reads each dirty element's values by their position,
 * a lookup each) */
static Py_ALWAYS_INLINE inline PyObject *dict_item(PyObject *d, PyObject *x) {
    PyObject *v;
#if PY_VERSION_HEX < 0x030C0000
    Py_ssize_t n;
    if (PyLong_CheckExact(x) && -1 <= (n = Py_SIZE(x)) && n <= 1) {
        Py_hash_t h = (Py_hash_t)n * (Py_hash_t)((PyLongObject *)x)->ob_digit[0];
        v = int_entry(d, x, h);
        if (v == NULL)
            v = _PyDict_GetItem_KnownHash(d, x, h == -1 ? -2 : h);
    } else
#endif
        v = PyDict_GetItemWithError(d, x);
    if (v != NULL)
        return Py_NewRef(v);
    return missing_key(x);
}

/* o[x] as Python decides it (PyObject_GetItem), with no dispatch through the type's mapping
 * slots when o is an exact dict (the pass reads C[...], s[...] and D[...] at every step:
 * inlined), nor when o is an exact tuple and x an exact int of one digit indexing it from
 * its start (its item: the set-up reads `_R_inv_<I>[0]` per conjunct at every step) */
static Py_ALWAYS_INLINE inline PyObject *getitem(PyObject *o, PyObject *x) {
    if (PyDict_CheckExact(o))
        return dict_item(o, x);
#if PY_VERSION_HEX < 0x030C0000
    if (PyTuple_CheckExact(o) && PyLong_CheckExact(x) && 0 <= Py_SIZE(x) && Py_SIZE(x) <= 1) {
        Py_ssize_t i = Py_SIZE(x) == 0 ? 0 : (Py_ssize_t)((PyLongObject *)x)->ob_digit[0];
        if (i < PyTuple_GET_SIZE(o))
            return Py_NewRef(PyTuple_GET_ITEM(o, i));
    }
#endif
    return PyObject_GetItem(o, x);
}

#if PY_VERSION_HEX < 0x030D0000
/* the key of the used entry of the set s at *pos or after it (borrowed), *pos then past it;
 * NULL after the last: _PySet_NextEntry's walk, inlined (the pass walks each step's dirty
 * elements, a call each before). The table and its mask are read anew at each call, as
 * there: a predicate's Python code may have resized it. */
static Py_ALWAYS_INLINE inline PyObject *set_next(PyObject *s, Py_ssize_t *pos) {
    PySetObject *so = (PySetObject *)s;
    Py_ssize_t i = *pos, mask = so->mask;
    setentry *table = so->table;
    while (i <= mask && (table[i].key == NULL || table[i].key == _PySet_Dummy))
        i++;
    *pos = i + 1;
    return i <= mask ? table[i].key : NULL;
}
#endif

/* `x in s` for s exactly a set or frozenset and x exactly a str whose hash is computed or an
 * int of one digit (whose hash is its value, but -1's is -2), decided at the first slot of
 * s's table that x's hash probes: 1 where that slot holds x itself, 0 where it is unused (a
 * lookup stops at the first unused slot of its probe, and an add puts its key at or before
 * it; a removed key leaves a dummy, not an unused slot, which only a rebuild of the table
 * clears, and a rebuild adds every key anew), -1 where the slot cannot tell: another key or
 * a dummy there (PySet_Contains then decides). The pass tests a variable's name in the
 * changed variables V ~12 times a step, and a name is the one interned str both sides use
 * (inlined). */
static Py_ALWAYS_INLINE inline int set_first_probe(PyObject *s, PyObject *x) {
    Py_hash_t h;
    if (PyUnicode_CheckExact(x)) {
        if ((h = ((PyASCIIObject *)x)->hash) == -1)
            return -1;
    } else {
#if PY_VERSION_HEX < 0x030C0000
        /* (an int of at most one digit: its hash is its value, -1 hashing as -2) */
        Py_ssize_t n = Py_SIZE(x);
        if (n < -1 || n > 1)
            return -1;
        h = (Py_hash_t)n * (Py_hash_t)((PyLongObject *)x)->ob_digit[0];
        if (h == -1)
            h = -2;
#else
        return -1;     /* (3.12's int layout differs: the caller's full test decides) */
#endif
    }
    PySetObject *so = (PySetObject *)s;
    PyObject *k = so->table[(size_t)h & (size_t)so->mask].key;
    return k == x ? 1 : k == NULL ? 0 : -1;
}

/* `a.isdisjoint(b)`'s truth where a and b are both exactly set or frozenset, as set.isdisjoint
 * decides it (the smaller one's elements, the receiver's on a tie, looked up in the other);
 * -2 for anything else, which then calls the method (the fast paths test
 * `V.isdisjoint(<an invariant's reads>)` per invariant and domain at every step) */
static int set_disjoint(PyObject *a, PyObject *b) {
#if PY_VERSION_HEX >= 0x030D0000
    (void)a; (void)b;
    return -2;      /* (no _PySet_NextEntry outside the interpreter's own build from 3.13) */
#else
    if (!PyAnySet_CheckExact(a) || !PyAnySet_CheckExact(b))
        return -2;
    if (a == b)
        return PySet_GET_SIZE(a) == 0;
    if (PySet_GET_SIZE(a) > PySet_GET_SIZE(b)) {
        PyObject *t = a;
        a = b;
        b = t;
    }
    Py_ssize_t pos = 0;
    PyObject *key;
    while ((key = set_next(a, &pos)) != NULL) {
        int in = PyLong_CheckExact(key) || PyUnicode_CheckExact(key) ? set_first_probe(b, key) : -1;
        if (in < 0) {
            Py_INCREF(key);
            in = PySet_Contains(b, key);
            Py_DECREF(key);
        }
        if (in != 0)
            return in < 0 ? -1 : 0;
    }
    return 1;
#endif
}

/* `x in r` as Python decides it (PySequence_Contains), with no Python call when r is a TLA+
 * interval a..b, exactly hicache.tla.values.Interval (a subclass may decide otherwise): its
 * `contains` is `type(v) is int and self.lo <= v <= self.hi`, read in that order here (the
 * fast paths test `hits[n] \in 0..2` at every dirty page: a Python call each, before) */
static int contains_other(PyObject *r, PyObject *x) {
    if (interval_type == NULL || (PyObject *)Py_TYPE(r) != interval_type)
        return PySequence_Contains(r, x);
    if (!PyLong_CheckExact(x))
        return 0;
    if (off_lo >= 0 && off_hi >= 0) {
        /* (bounds and value that are ints of 64 bits, read off the slots: compared here; a
         * slot unset or anything else is read by attribute below, as Python reads it) */
        PyObject *a = *(PyObject **)((char *)r + off_lo), *b = *(PyObject **)((char *)r + off_hi);
        if (a != NULL && b != NULL && PyLong_CheckExact(a) && PyLong_CheckExact(b)) {
            long long la, lv, lb;
            if (int64_of(a, &la) && int64_of(x, &lv) && int64_of(b, &lb))
                return la <= lv && lv <= lb;
        }
    }
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

/* `x in r` as contains_other decides it, with the set's own test called directly where r is
 * exactly a set or frozenset and x exactly an int or str (whose hash cannot fail: a set's
 * `in` retries an unhashable set key as a frozenset, which PySet_Contains does not) (inlined:
 * the fast paths test `'dev' in V` per variable at every step, and membership of an element's
 * values at every dirty element) */
static Py_ALWAYS_INLINE inline int contains(PyObject *r, PyObject *x) {
    if (PyAnySet_CheckExact(r) && (PyLong_CheckExact(x) || PyUnicode_CheckExact(x))) {
        int in = set_first_probe(r, x);
        return in >= 0 ? in : PySet_Contains(r, x);
    }
    return contains_other(r, x);
}

/* An `x in r` test's cache in an element loop (`contains_at`): the exact frozenset it last
 * tested (held, so no other object takes its address), and whether its elements are exactly
 * the ints lo..hi, each an exact int of 64 bits */
typedef struct {
    PyObject *set;
    int range;
    long long lo, hi;
} RangeSite;

/* whether the exact frozenset s holds exactly the ints lo..hi (with *lo and *hi), each an
 * exact int of 64 bits; 0 from 3.13 (no _PySet_NextEntry) */
static int int_range_of(PyObject *s, long long *lo, long long *hi) {
#if PY_VERSION_HEX >= 0x030D0000
    (void)s; (void)lo; (void)hi;
    return 0;
#else
    Py_ssize_t pos = 0, n = PySet_GET_SIZE(s);
    PyObject *key;
    Py_hash_t hash;
    long long v;
    if (n == 0)
        return 0;
    *lo = LLONG_MAX;
    *hi = LLONG_MIN;
    while (_PySet_NextEntry(s, &pos, &key, &hash)) {
        if (!PyLong_CheckExact(key) || !int64_of(key, &v))
            return 0;
        *lo = v < *lo ? v : *lo;
        *hi = v > *hi ? v : *hi;
    }
    /* (n distinct ints within lo..hi are all of them when there are hi - lo + 1; the
     * difference taken unsigned, exact up to 2**64 - 1) */
    return (unsigned long long)*hi - (unsigned long long)*lo == (unsigned long long)(n - 1);
#endif
}

/* `x in r` as contains decides it, r an exact frozenset (which does not change) first met at
 * this site: kept, with whether it is an interval of ints */
static int contains_learn(PyObject *r, PyObject *x, RangeSite *site) {
    long long lo = 0, hi = -1;
    int range = int_range_of(r, &lo, &hi);
    PyObject *old = site->set;
    site->set = Py_NewRef(r);
    site->range = range;
    site->lo = lo;
    site->hi = hi;
    Py_XDECREF(old);
    return contains(r, x);
}

/* `x in r` as contains decides it. Where r is the frozenset the site kept and holds exactly
 * the ints lo..hi, an exact int x of 64 bits is in it when lo <= x <= hi: such an x equals
 * an element only if it is that int (no hash nor comparison of another type is asked). The
 * fast paths test a node's slot and request numbers in C['$h12'] (0..NSlots) and C['$h14']
 * at every dirty page (inlined). */
static Py_ALWAYS_INLINE inline int contains_at(PyObject *r, PyObject *x, RangeSite *site) {
    long long v;
    if (r != site->set)
        return PyFrozenSet_CheckExact(r) ? contains_learn(r, x, site) : contains(r, x);
    if (site->range && PyLong_CheckExact(x) && int64_of(x, &v))
        return site->lo <= v && v <= site->hi;
    return contains(r, x);
}

/* f(x), a call of one argument, as Python makes it, with no call when f is exactly a dict's
 * own `__getitem__` bound to an exact dict (what rt.fast_ap reads a function value by:
 * `f.d.__getitem__`, one call per variable an element's conjuncts read): that dict's lookup,
 * KeyError when x is missing (on an exact dict, `d[x]` asks no `__missing__`), TypeError when
 * x is unhashable, as the call raises them; with no call either when f is an empty exact
 * dict's own `get` (rt.no_ap's reader) and x an exact int or str (None), or a pass's reader of
 * a sequence (SeqAt) and x an int in its 1..n (the element). Any other callable (a subclass's
 * method, a Python function) is called, and SeqAt's reader on any other x. */
static PyCFunction dict_getitem, dict_get;    /* the C functions of `{}.__getitem__`, `{}.get` */
/* the type of a sequence's reader made by a pass's `reader` site (fused_whole's SeqAt: its seq,
 * and the reader `real` rt's fast_ap `maker` makes of it, which decides any call but an index
 * in 1..n: made at the first such call, NULL until then), or NULL where there is none (a
 * module of element loops alone) */
static PyTypeObject *seq_at_type;
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *seq, *real, *maker;
} SeqAt;

/* r's reader of its seq, maker(seq), made at its first use (borrowed: r holds it), NULL on an
 * error. rt's fast_ap makes of a tuple a reader of it and does nothing else: made later, it
 * reads alike (a pass reads a sequence by index in 1..n, and a changed one is read anew at
 * every step: ~250 instructions a step for a reader no call used) */
static PyObject *seq_at_real(SeqAt *r) {
    if (r->real == NULL) {
        PyObject *argv[] = {r->seq};
        r->real = PyObject_Vectorcall(r->maker, argv, 1, NULL);
    }
    return r->real;
}

static Py_ALWAYS_INLINE inline PyObject *call1(PyObject *f, PyObject *x) {
    PyObject *argv[] = {x};
    PyTypeObject *t = Py_TYPE(f);
    if (t == &PyCFunction_Type && !(((PyCFunctionObject *)f)->m_ml->ml_flags & METH_STATIC)) {
        /* (exactly a builtin method, bound: a subclass's is called below, alike) */
        PyObject *d = ((PyCFunctionObject *)f)->m_self;
        PyCFunction fn = ((PyCFunctionObject *)f)->m_ml->ml_meth;
        if (d != NULL && PyDict_CheckExact(d)) {
            if (fn == dict_getitem)
                return dict_item(d, x);
            /* (rt.no_ap's reader, an empty dict's get: None for a key whose hash cannot fail) */
            if (fn == dict_get && PyDict_GET_SIZE(d) == 0 && (PyLong_CheckExact(x) || PyUnicode_CheckExact(x)))
                return Py_NewRef(Py_None);
        }
    } else if (t == seq_at_type) {
        /* (a sequence read at an int in 1..n: its element, as seq_at reads it; else its reader
         * decides, and raises) */
        PyObject *seq = ((SeqAt *)f)->seq;
        long long i;
        if (PyLong_CheckExact(x) && int64_of(x, &i) && 1 <= i && i <= PyTuple_GET_SIZE(seq))
            return Py_NewRef(PyTuple_GET_ITEM(seq, i - 1));
        PyObject *real = seq_at_real((SeqAt *)f);
        return real == NULL ? NULL : PyObject_Vectorcall(real, argv, 1, NULL);
    }
    return PyObject_Vectorcall(f, argv, 1, NULL);
}

/* the exact dict whose own `__getitem__` f is (exactly a builtin method bound to it, as call1
 * tests), else NULL: what call1 reads a call of f by, decided once per element loop for each
 * reader the loop calls (borrowed: f holds it, and a builtin method's self never changes;
 * the caller holds f for the loop) */
static PyObject *reader_dict(PyObject *f) {
    if (Py_TYPE(f) == &PyCFunction_Type && !(((PyCFunctionObject *)f)->m_ml->ml_flags & METH_STATIC)) {
        PyObject *d = ((PyCFunctionObject *)f)->m_self;
        if (d != NULL && PyDict_CheckExact(d) && ((PyCFunctionObject *)f)->m_ml->ml_meth == dict_getitem)
            return d;
    }
    return NULL;
}

/* f(x) as call1 makes it, d being reader_dict(f): that dict's lookup where it is one (the pass
 * reads ~7 values a dirty page, each by a reader so resolved; inlined) */
static Py_ALWAYS_INLINE inline PyObject *call1_dict(PyObject *f, PyObject *d, PyObject *x) {
    return d != NULL ? dict_item(d, x) : call1(f, x);
}

/* the truth of `a <op> b` as Python decides it (PyObject_RichCompare, then its truth), with
 * neither call when both are exactly int of 64 bits (their order) or both exactly str and
 * the test is == or != (their equality); -1 on an error (raised) (inlined: its test is a
 * constant at each use, and the fast paths compare at every dirty element) */
static Py_ALWAYS_INLINE inline int compare_truth(PyObject *a, PyObject *b, int op) {
    if (PyLong_CheckExact(a) && PyLong_CheckExact(b)) {
        long long x, y;
        if (int64_of(a, &x) && int64_of(b, &y)) {
            switch (op) {
            case Py_EQ: return x == y;
            case Py_NE: return x != y;
            case Py_LT: return x < y;
            case Py_LE: return x <= y;
            case Py_GT: return x > y;
            case Py_GE: return x >= y;
            }
        }
    } else if ((op == Py_EQ || op == Py_NE) && PyUnicode_CheckExact(a) && PyUnicode_CheckExact(b)) {
        int eq = a == b || PyUnicode_Compare(a, b) == 0;
        if (!PyErr_Occurred())
            return op == Py_EQ ? eq : !eq;
        return -1;
    }
    PyObject *r = PyObject_RichCompare(a, b, op);
    if (r == NULL)
        return -1;
    int t = truth(r);
    Py_DECREF(r);
    return t;
}

/* the offset of type t's own slot `name` (an object member of its __slots__), -1 if it has none */
static Py_ssize_t slot_offset(PyObject *t, PyObject *name) {
    PyObject *d = PyDict_GetItemWithError(((PyTypeObject *)t)->tp_dict, name);
    if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type))
        return -1;
    PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
    return m->type == T_OBJECT_EX && !(m->flags & READONLY) ? m->offset : -1;
}

static int configure(void) {
    PyObject *probe = PyDict_New(), *getitem = NULL, *get = NULL;
    if (probe != NULL) {
        getitem = PyObject_GetAttrString(probe, "__getitem__");
        get = PyObject_GetAttrString(probe, "get");
    }
    if (getitem != NULL && PyCFunction_Check(getitem))
        dict_getitem = PyCFunction_GET_FUNCTION(getitem);
    if (get != NULL && PyCFunction_Check(get))
        dict_get = PyCFunction_GET_FUNCTION(get);
    Py_XDECREF(getitem);
    Py_XDECREF(get);
    Py_XDECREF(probe);
    if (dict_getitem == NULL || dict_get == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "a dict's __getitem__ or get is not a C function here");
        return -1;
    }
    PyObject *values = PyImport_ImportModule("hicache.tla.values");
    if (values == NULL)
        return -1;
    interval_type = PyObject_GetAttrString(values, "Interval");
    Py_DECREF(values);
    str_lo = PyUnicode_InternFromString("lo");
    str_hi = PyUnicode_InternFromString("hi");
    if (interval_type == NULL || str_lo == NULL || str_hi == NULL)
        return -1;
    off_lo = slot_offset(interval_type, str_lo);
    off_hi = slot_offset(interval_type, str_hi);
    return PyErr_Occurred() ? -1 : 0;
}

/* the name's (interned) constant, NULL passed on */
static PyObject *interned(PyObject *s) {
    if (s != NULL)
        PyUnicode_InternInPlace(&s);
    return s;
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
    # (interned: a name or key the module also holds is then the same object, found by identity)
    return f'interned(PyUnicode_DecodeUTF8("{lit}", {len(raw)}, "strict"))'


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


def _with_native_loops(gen: types.ModuleType, fn, got):
    """`fn` rewritten to call the C loops of its translation `got` (`translate(fn)`)."""
    csrc, tree, loops = got
    mod = _build(_module_name(fn), csrc)
    ns = dict(vars(gen))
    for lp in loops:
        ns[f"_native_loop_{lp.index}"] = getattr(mod, f"loop_{lp.index}")
    exec(compile(tree, inspect.getsourcefile(fn) or "<inc_all>", "exec"), ns)
    out = ns[fn.__name__]
    out.__doc__ = (fn.__doc__ or "") + " (element loops native: hicache.monitors.fused_native)"
    return out


def loops_native(gen: types.ModuleType):
    """`gen.inc_all` with only its element loops in C (what serves when the function does not
    compile whole), or None when none translates; built on each call (tests)."""
    got = translate(gen.inc_all)
    return None if got is None else _with_native_loops(gen, gen.inc_all, got)


def native_inc_all(gen: types.ModuleType):
    """`gen.inc_all` compiled whole to C (fused_whole.py), else with its translatable element
    loops in C (see the module docstring), or `gen.inc_all` itself when neither translates,
    the build fails (one warning) or native code is off. Decided once per function and
    process (a function put in its place, a wrapper that counts its calls say, is translated
    on its own: not of the generated shape and with no loops, it serves itself)."""
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
            # the whole function in C (fused_whole.py) where it translates, else its loops
            from hicache.monitors import fused_whole
            whole = fused_whole.build(gen, fn, _build)
            got = translate(fn) if whole is None else None
            if whole is not None:
                out = whole
            elif got is not None:
                out = _with_native_loops(gen, fn, got)
        except (buildcache.BuildFailed, ImportError, OSError) as exc:
            _reasons[key] = str(exc)
            warnings.warn(f"hicache.monitors: {key}.inc_all's native form is unavailable ({exc}); "
                          "the generated Python serves (same checks, slower strict mode)", RuntimeWarning,
                          stacklevel=2)
        _done[fn] = out
        return out
