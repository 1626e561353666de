/* Sample mode's gate (hicache/monitors/gate.py's PyGate, which defines it, in C): the listener
 * a gap-counted sample-mode monitor gives its bus. Between two samples an event is only bound
 * (the map follows requests through events), counted and recorded; that is what a canary pays
 * at nearly every event, and in Python it is a frame of ~40 opcodes around the binder's call.
 * Here the same operations without the frame; every other event goes to the monitor's Python
 * (`slow`), which decides everything that is decided.
 *
 * An event, `gate(action, fields)`:
 *   - tripped: nothing (the monitor reported a violation and checks nothing more);
 *   - gap <= 0 (this event is the drawn sample): slow(action, fields, None), unbound;
 *   - else bound = bind(action, fields); None: not this spec's event, nothing more;
 *   - an action in `special` (the map's always-checked events): slow(action, fields, bound),
 *     uncounted (the monitor counts it);
 *   - an action of `weighted` (action -> p: drawn each on its own, the gap untouched): the
 *     draw, draw() < p, made first and once; then, for an action of `trigger_on`, the map's
 *     trigger(action, fields); triggered: weighed(action, fields, bound, True), else drawn:
 *     weighed(action, fields, bound, False), both uncounted; else it is recorded as below,
 *     the gap untouched;
 *   - else steps += 1, gap -= 1, and (steps, action, fields) appended to `history`.
 *
 * Invariants: `steps` counts the bound events the gate recorded plus those the monitor counted
 * (its Python updates the gate's counters itself); `gap` is never decremented below 0 here (an
 * event at gap 0 goes to `slow`, which draws the next gap); each weighted event takes exactly
 * one draw, before its trigger, as the monitor's own path takes it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#define ABI_VERSION 2

typedef struct {
    PyObject_HEAD
    Py_ssize_t steps;
    long long gap;
    char tripped;
    PyObject *bind;       /* bind(action, fields) -> the spec steps, or None */
    PyObject *special;    /* a frozenset of the actions the monitor decides */
    PyObject *slow;       /* slow(action, fields, bound or None) */
    PyObject *history;    /* a deque (maxlen: the monitor's history) */
    PyObject *append;     /* history.append */
    PyObject *weighted;   /* a dict: action -> its probability (a float) */
    PyObject *draw;       /* draw() -> a float in [0, 1) (the monitor's seeded RNG) */
    PyObject *trigger;    /* trigger(action, fields) -> truth, or None */
    PyObject *trigger_on; /* a frozenset of the actions the trigger is asked about */
    PyObject *weighed;    /* weighed(action, fields, bound, triggered) */
    vectorcallfunc vectorcall;
} Gate;

static PyObject *gate_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Gate *g = (Gate *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_Format(PyExc_TypeError, "gate(action, fields) takes 2 positional arguments (%zd given)", n);
        return NULL;
    }
    if (g->tripped)
        Py_RETURN_NONE;
    if (g->slow == NULL) {      /* (cleared by the collector: refused, not called through NULL) */
        PyErr_SetString(PyExc_RuntimeError, "Gate: cleared");
        return NULL;
    }
    PyObject *argv[3] = {args[0], args[1], Py_None};
    if (g->gap <= 0)
        return PyObject_Vectorcall(g->slow, argv, 3, NULL);
    PyObject *bound = PyObject_Vectorcall(g->bind, argv, 2, NULL);
    if (bound == NULL || bound == Py_None)
        return bound;
    int special = PySet_Contains(g->special, args[0]);
    if (special != 0) {
        PyObject *r = NULL;
        if (special > 0) {
            argv[2] = bound;
            r = PyObject_Vectorcall(g->slow, argv, 3, NULL);
        }
        Py_DECREF(bound);
        return r;
    }
    PyObject *p = PyDict_GetItemWithError(g->weighted, args[0]);     /* (borrowed) */
    if (p == NULL && PyErr_Occurred()) {
        Py_DECREF(bound);
        return NULL;
    }
    int weighted = p != NULL;
    if (weighted) {
        /* (the draw first, whatever the trigger says: the seed's draws are the same whether
         * or not anything triggers) */
        Py_INCREF(p);
        PyObject *u = PyObject_CallNoArgs(g->draw);
        int drawn = -1;
        if (u != NULL) {
            PyObject *lt = PyObject_RichCompare(u, p, Py_LT);
            Py_DECREF(u);
            if (lt != NULL) {
                drawn = PyObject_IsTrue(lt);
                Py_DECREF(lt);
            }
        }
        Py_DECREF(p);
        int triggered = 0;
        if (drawn >= 0 && g->trigger != Py_None) {
            triggered = PySet_Contains(g->trigger_on, args[0]);
            if (triggered > 0) {
                PyObject *t = PyObject_Vectorcall(g->trigger, argv, 2, NULL);
                triggered = t == NULL ? -1 : PyObject_IsTrue(t);
                Py_XDECREF(t);
            }
        }
        if (drawn < 0 || triggered < 0) {
            Py_DECREF(bound);
            return NULL;
        }
        if (triggered || drawn) {
            PyObject *wargv[4] = {args[0], args[1], bound, triggered ? Py_True : Py_False};
            PyObject *r = PyObject_Vectorcall(g->weighed, wargv, 4, NULL);
            Py_DECREF(bound);
            return r;
        }
    }
    Py_DECREF(bound);
    PyObject *seq = PyLong_FromSsize_t(g->steps + 1);
    if (seq == NULL)
        return NULL;
    PyObject *rec = PyTuple_New(3);
    if (rec == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    PyTuple_SET_ITEM(rec, 0, seq);
    PyTuple_SET_ITEM(rec, 1, Py_NewRef(args[0]));
    PyTuple_SET_ITEM(rec, 2, Py_NewRef(args[1]));
    /* (counted once recorded: a failed append leaves the counters as they were) */
    PyObject *r = PyObject_Vectorcall(g->append, &rec, 1, NULL);
    Py_DECREF(rec);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    g->steps++;
    if (!weighted)
        g->gap--;       /* (the gap counts the events that are not drawn on their own) */
    Py_RETURN_NONE;
}

static PyObject *gate_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"bind", "special", "slow", "history", "weighted", "draw", "trigger", "trigger_on",
                         "weighed", NULL};
    PyObject *bind, *special, *slow, *history, *weighted = NULL, *draw = Py_None, *trigger = Py_None,
             *trigger_on = NULL, *weighed = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!OO|O!OOO!O:Gate", kw, &bind, &PyFrozenSet_Type, &special, &slow,
                                     &history, &PyDict_Type, &weighted, &draw, &trigger, &PyFrozenSet_Type,
                                     &trigger_on, &weighed))
        return NULL;
    if (!PyCallable_Check(bind) || !PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "Gate: bind and slow must be callable");
        return NULL;
    }
    int any_weighted = weighted != NULL && PyDict_GET_SIZE(weighted) > 0;
    if (any_weighted && (!PyCallable_Check(draw) || !PyCallable_Check(weighed))) {
        PyErr_SetString(PyExc_TypeError, "Gate: weighted events need draw and weighed callables");
        return NULL;
    }
    if (trigger != Py_None && !PyCallable_Check(trigger)) {
        PyErr_SetString(PyExc_TypeError, "Gate: trigger must be callable or None");
        return NULL;
    }
    PyObject *append = PyObject_GetAttrString(history, "append");
    if (append == NULL)
        return NULL;
    Gate *g = (Gate *)type->tp_alloc(type, 0);
    if (g == NULL) {
        Py_DECREF(append);
        return NULL;
    }
    g->weighted = weighted != NULL ? PyDict_Copy(weighted) : PyDict_New();
    g->trigger_on = trigger_on != NULL ? Py_NewRef(trigger_on) : PyFrozenSet_New(NULL);
    if (g->weighted == NULL || g->trigger_on == NULL) {
        Py_DECREF(append);
        Py_DECREF(g);
        return NULL;
    }
    g->draw = Py_NewRef(draw);
    g->trigger = Py_NewRef(trigger);
    g->weighed = Py_NewRef(weighed);
    g->bind = Py_NewRef(bind);
    g->special = Py_NewRef(special);
    g->slow = Py_NewRef(slow);
    g->history = Py_NewRef(history);
    g->append = append;
    g->vectorcall = gate_call;
    return (PyObject *)g;
}

static int gate_traverse(PyObject *self, visitproc visit, void *arg) {
    Gate *g = (Gate *)self;
    Py_VISIT(g->bind);
    Py_VISIT(g->special);
    Py_VISIT(g->slow);
    Py_VISIT(g->history);
    Py_VISIT(g->append);
    Py_VISIT(g->weighted);
    Py_VISIT(g->draw);
    Py_VISIT(g->trigger);
    Py_VISIT(g->trigger_on);
    Py_VISIT(g->weighed);
    return 0;
}

static int gate_clear(PyObject *self) {
    Gate *g = (Gate *)self;
    Py_CLEAR(g->bind);
    Py_CLEAR(g->special);
    Py_CLEAR(g->slow);
    Py_CLEAR(g->history);
    Py_CLEAR(g->append);
    Py_CLEAR(g->weighted);
    Py_CLEAR(g->draw);
    Py_CLEAR(g->trigger);
    Py_CLEAR(g->trigger_on);
    Py_CLEAR(g->weighed);
    return 0;
}

static void gate_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    gate_clear(self);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *gate_get_history(PyObject *self, void *unused) {
    Gate *g = (Gate *)self;
    if (g->history == NULL) {
        PyErr_SetString(PyExc_AttributeError, "history");
        return NULL;
    }
    return Py_NewRef(g->history);
}

static int gate_set_history(PyObject *self, PyObject *value, void *unused) {
    Gate *g = (Gate *)self;
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "Gate: history cannot be deleted");
        return -1;
    }
    PyObject *append = PyObject_GetAttrString(value, "append");
    if (append == NULL)
        return -1;
    Py_XSETREF(g->append, append);
    Py_XSETREF(g->history, Py_NewRef(value));
    return 0;
}

static PyMemberDef gate_members[] = {
    {"steps", T_PYSSIZET, offsetof(Gate, steps), 0, "bound events counted"},
    {"gap", T_LONGLONG, offsetof(Gate, gap), 0, "events to record before the next sample"},
    {"tripped", T_BOOL, offsetof(Gate, tripped), 0, "the monitor reported a violation: events are ignored"},
    {"bind", T_OBJECT, offsetof(Gate, bind), READONLY, "the map's binder"},
    {"special", T_OBJECT, offsetof(Gate, special), READONLY, "the actions the monitor decides"},
    {"slow", T_OBJECT, offsetof(Gate, slow), READONLY, "the monitor's path: slow(action, fields, bound)"},
    {"weighted", T_OBJECT, offsetof(Gate, weighted), READONLY, "action -> probability (a copy)"},
    {"draw", T_OBJECT, offsetof(Gate, draw), READONLY, "the seeded draw"},
    {"trigger", T_OBJECT, offsetof(Gate, trigger), READONLY, "the map's trigger, or None"},
    {"trigger_on", T_OBJECT, offsetof(Gate, trigger_on), READONLY, "the actions the trigger is asked about"},
    {"weighed", T_OBJECT, offsetof(Gate, weighed), READONLY, "weighed(action, fields, bound, triggered)"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef gate_getset[] = {
    {"history", gate_get_history, gate_set_history, "the deque unsampled events are recorded in", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject GateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_hicache_gate.Gate",
    .tp_basicsize = sizeof(Gate),
    .tp_dealloc = gate_dealloc,
    .tp_traverse = gate_traverse,
    .tp_clear = gate_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Gate, vectorcall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = gate_new,
    .tp_members = gate_members,
    .tp_getset = gate_getset,
    .tp_doc = "sample mode's listener between samples (monitors.gate.PyGate in C)",
};

static PyObject *abi(PyObject *self, PyObject *unused) {
    return PyLong_FromLong(ABI_VERSION);
}

static PyMethodDef methods[] = {
    {"abi", abi, METH_NOARGS, "the module's ABI version"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hicache_gate", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__hicache_gate(void) {
    if (PyType_Ready(&GateType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Gate", (PyObject *)&GateType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
