/* Sample mode's gate (hicache/monitors/gate.py's PyGate, which defines it, in C): the listener
 * a gap-counted sample-mode monitor gives its bus. Between two samples an event is only bound
 * (the map follows requests through events), counted and recorded; that is what a canary pays
 * at nearly every event, and in Python it is a frame of ~40 opcodes around the binder's call.
 * Here the same operations without the frame; every other event goes to the monitor's Python
 * (`slow`), which decides everything that is decided.
 *
 * An event, `gate(action, fields)`:
 *   - tripped: nothing (the monitor reported a violation and checks nothing more);
 *   - gap <= 0 (this event is the drawn sample): slow(action, fields, None), unbound (or let go
 *     here while the budget is closed: "Letting go" below);
 *   - else bound = bind(action, fields); None: not this spec's event, nothing more;
 *   - an action in `special` (the map's always-checked events): slow(action, fields, bound),
 *     uncounted (the monitor counts it);
 *   - an action of `weighted` (action -> p: drawn each on its own, the gap untouched): the
 *     draw, draw() < p, made first and once; then, for an action of `trigger_on`, the map's
 *     trigger(action, fields); triggered: weighed(action, fields, bound, True), else drawn:
 *     weighed(action, fields, bound, False) (or let go here, as above), both uncounted; else
 *     it is recorded as below, the gap untouched;
 *   - else steps += 1, gap -= 1, and (steps, action, fields) appended to `history`.
 *
 * Deferred binding (`unbound` given: the map's `unbound_actions`, the actions its bind may map to
 * no step; it maps every other one to a step): an event at gap > 0 whose action is none of
 * special, weighted or unbound is only held (gap -= 1) and bound, counted and recorded later, in
 * order, by `flush`: before the gate's next event that is not held (an event of `unbound` is
 * bound first, and flushes nothing when it binds to nothing), when DEFER_CAP are held, and
 * when the monitor calls it (before it reads its counters, history or map). What such an event
 * costs at its publish is then two stores, not the binder's call and a history record: run at
 * the event, those paths' code and data are cold, the runtime's own work having evicted them
 * since the last event (on the monitors bench's kv_bytes replay, sample mode at rate 0 read
 * ~1.045x off with the gate and ~1.02x with a listener that does nothing, 120 interleaved
 * rounds; what holding takes off: docs/benchmarks.md, "Monitors"); run in a batch, warm. Nothing is decided differently: the same binds in the same
 * order (but for the events bound to nothing, which change nothing), the same counts, records
 * and draws, as long as the map keeps its contract: `bind` maps exactly the actions of `unbound`
 * to no step, and changes nothing then. (Broken, a held event bound to None is uncounted at the
 * flush, gap += 1, so the sample may come an event later; an `unbound` event bound to a step is
 * bound before the held ones, and at a sample bound again by the monitor.) An error of the
 * binder is raised at the flush, after the rest of the batch is bound.
 *
 * A pure binder (`pure`, only with `unbound`: the map's bind maps an event to its step and
 * keeps nothing, the map reading its bookkeeping off the runtime when it maps a state): such an
 * event at gap > 0 is neither held nor bound: steps += 1, gap -= 1 and the record, at once; and
 * a weighted event is bound only when the draw or the trigger hands it on.
 *
 * Letting go (`clock` and `let_go` given: sample mode under a budget): the monitor keeps
 * `closed_until`, the clock time from which its budget affords the next sample (-inf while it
 * affords one now; Monitor._close_gate, at each change of its bucket). A drawn sample the
 * budget would let go, the gap's sample of an action neither special, weighted nor unbound or
 * a drawn (not triggered) weighted event, is let go here while clock() < closed_until: bound,
 * counted and recorded as an unsampled event, then let_go(action, fields, weighted), the
 * monitor's count, cause and cheap runtime checks, which answers a gap's sample with the next
 * gap. The same decision as the monitor's own (`_afford`, which then decides the rest), with
 * one frame where the monitor's path took five (~42 such samples of the ~46 drawn on the
 * monitors bench's kv_bytes replay at the defaults, 2 % budget).
 *
 * Invariants: `steps` counts the bound events the gate recorded plus those the monitor counted
 * (its Python updates the gate's counters itself), not the held ones; `gap` is never
 * decremented below 0 here (an event at gap 0 goes to `slow`, which draws the next gap, after
 * the held ones are flushed); each weighted event takes exactly one draw, before its trigger, as
 * the monitor's own path takes it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>

#define ABI_VERSION 9

/* events held at most before a flush (deferred binding) */
#define DEFER_CAP 64

/* actions whose kind the gate keeps (gate_kind) */
#define KINDS 16
/* an action's kind, bits: in special, in weighted (its probability kept), in unbound, in
 * immediate (any of the three, with unbound given), in trigger_on */
#define K_SPECIAL 1
#define K_WEIGHTED 2
#define K_UNBOUND 4
#define K_IMMEDIATE 8
#define K_TRIGGER 16

typedef struct {
    PyObject_HEAD
    Py_ssize_t steps;
    long long gap;
    char tripped;
    /* The kinds of the actions seen, by identity (gate_kind): the runtime publishes the same
     * vocabulary members at every event, so an action's kind is one pointer compare in the
     * gate's own lines, not up to six hash lookups, each a set's or dict's table and its key
     * string (a str, the action a str subclass: compared by value), cold at an event between
     * samples (~100 ns apiece in the monitors bench's replay; an eviction, weighted, paid ~1 us
     * more than an unweighted event). Strong references; the sets are frozensets and the
     * weighted dict the gate's own copy, read-only outside (`weighted` is a mapping proxy), so
     * a kind once found never changes. */
    int nkinds;
    PyObject *kind_action[KINDS];
    PyObject *kind_p[KINDS];      /* weighted: its probability (else NULL) */
    unsigned char kind_bits[KINDS];
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
    PyObject *unbound;    /* a frozenset (deferred binding: see above), or NULL: none held */
    char pure;            /* the binder is pure: an event to be held is recorded at once, unbound */
    PyObject *immediate;  /* special | weighted's actions | unbound: never held (NULL with unbound) */
    PyObject *clock;      /* clock() -> seconds, the budget's clock, or None: no sample let go here */
    PyObject *let_go;     /* let_go(action, fields, weighted) -> the next gap (a gap's sample) or None */
    double closed_until;  /* the budget's: a drawn sample before this clock time is let go */
    Py_ssize_t held;      /* events held: (action, fields) pairs in hold, strong references */
    char flushing;        /* a flush runs (a second, from another thread, leaves it the batch) */
    PyObject *hold[2 * DEFER_CAP];
    vectorcallfunc vectorcall;
} Gate;

/* An action's kind: its K_ bits, and for a weighted one its probability (*p, borrowed: the
 * gate keeps it), from the gate's kept kinds, or found by the sets' and dict's lookups and kept
 * (up to KINDS actions; past that each is looked up, the same answer). 0, or -1 with an error */
static int gate_kind(Gate *g, PyObject *action, int *bits, PyObject **p) {
    for (int i = 0; i < g->nkinds; i++) {
        if (g->kind_action[i] == action) {
            *bits = g->kind_bits[i];
            *p = g->kind_p[i];
            return 0;
        }
    }
    int b = 0, r;
    if ((r = PySet_Contains(g->special, action)) < 0)
        return -1;
    if (r)
        b |= K_SPECIAL;
    PyObject *w = PyDict_GetItemWithError(g->weighted, action);       /* (borrowed) */
    if (w == NULL && PyErr_Occurred())
        return -1;
    if (w != NULL)
        b |= K_WEIGHTED;
    if (g->unbound != NULL) {
        if ((r = PySet_Contains(g->unbound, action)) < 0)
            return -1;
        if (r)
            b |= K_UNBOUND;
        if (b)
            b |= K_IMMEDIATE;
    }
    if ((r = PySet_Contains(g->trigger_on, action)) < 0)
        return -1;
    if (r)
        b |= K_TRIGGER;
    if (g->nkinds < KINDS) {
        int i = g->nkinds++;
        g->kind_action[i] = Py_NewRef(action);
        g->kind_p[i] = Py_XNewRef(w);
        g->kind_bits[i] = (unsigned char)b;
    }
    *bits = b;
    *p = w;
    return 0;
}

/* (steps + 1, action, fields) appended to the history, then steps += 1 (counted once recorded:
 * a failed append leaves the counters as they were); 0, or -1 with an error set */
static int gate_append(Gate *g, PyObject *action, PyObject *fields) {
    PyObject *seq = PyLong_FromSsize_t(g->steps + 1);
    if (seq == NULL)
        return -1;
    PyObject *rec = PyTuple_New(3);
    if (rec == NULL) {
        Py_DECREF(seq);
        return -1;
    }
    PyTuple_SET_ITEM(rec, 0, seq);
    PyTuple_SET_ITEM(rec, 1, Py_NewRef(action));
    PyTuple_SET_ITEM(rec, 2, Py_NewRef(fields));
    PyObject *r = PyObject_Vectorcall(g->append, &rec, 1, NULL);
    Py_DECREF(rec);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    g->steps++;
    return 0;
}

/* A held event bound, counted and recorded as gate_call's last case does it: 0, or -1 with an
 * error set */
static int gate_record(Gate *g, PyObject *action, PyObject *fields) {
    PyObject *argv[2] = {action, fields};
    PyObject *bound = PyObject_Vectorcall(g->bind, argv, 2, NULL);
    if (bound == NULL)
        return -1;
    int none = bound == Py_None;
    Py_DECREF(bound);
    if (none) {
        g->gap++;       /* (uncounted after all: see above) */
        return 0;
    }
    return gate_append(g, action, fields);
}

/* The held events bound, counted and recorded, in order (none while the gate is tripped: then
 * they are released). The batch is taken first, so an event held meanwhile waits for the next
 * flush, and a flush begun while one runs (another thread's, the first having called into
 * Python) returns at once. An error of one event is raised once the rest are bound (the first
 * error, the others' dropped). 0, or -1 with an error set. */
static int gate_flush(Gate *g) {
    if (g->flushing || g->held == 0)
        return 0;
    g->flushing = 1;
    Py_ssize_t n = g->held;
    PyObject *batch[2 * DEFER_CAP];
    memcpy(batch, g->hold, sizeof(PyObject *) * 2 * n);
    g->held = 0;
    PyObject *et = NULL, *ev = NULL, *tb = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!g->tripped && g->bind != NULL && gate_record(g, batch[2 * i], batch[2 * i + 1]) < 0) {
            if (et == NULL)
                PyErr_Fetch(&et, &ev, &tb);
            else
                PyErr_Clear();
        }
        Py_DECREF(batch[2 * i]);
        Py_DECREF(batch[2 * i + 1]);
    }
    g->flushing = 0;
    if (et != NULL) {
        PyErr_Restore(et, ev, tb);
        return -1;
    }
    return 0;
}

/* An event held, a full hold flushed first: 1 held, 0 not (full still: another thread's flush
 * runs), -1 with an error set */
static int gate_hold(Gate *g, PyObject *action, PyObject *fields) {
    if (g->held == DEFER_CAP && gate_flush(g) < 0)
        return -1;
    if (g->held >= DEFER_CAP)
        return 0;
    g->hold[2 * g->held] = Py_NewRef(action);
    g->hold[2 * g->held + 1] = Py_NewRef(fields);
    g->held++;
    return 1;
}

/* A weighted event's draw, draw() < p, made first and once, then for an action of trigger_on
 * the map's trigger(action, fields): 0 with *drawn and *triggered set, or -1 with an error set */
static int gate_weigh(Gate *g, PyObject *p, int bits, PyObject *action, PyObject *fields, int *drawn,
                      int *triggered) {
    Py_INCREF(p);
    PyObject *u = PyObject_CallNoArgs(g->draw);
    int d = -1;
    if (u != NULL) {
        PyObject *lt = PyObject_RichCompare(u, p, Py_LT);
        Py_DECREF(u);
        if (lt != NULL) {
            d = PyObject_IsTrue(lt);
            Py_DECREF(lt);
        }
    }
    Py_DECREF(p);
    int t = 0;
    if (d >= 0 && g->trigger != Py_None) {
        t = (bits & K_TRIGGER) != 0;
        if (t) {
            PyObject *argv[2] = {action, fields};
            PyObject *r = PyObject_Vectorcall(g->trigger, argv, 2, NULL);
            t = r == NULL ? -1 : PyObject_IsTrue(r);
            Py_XDECREF(r);
        }
    }
    if (d < 0 || t < 0)
        return -1;
    *drawn = d;
    *triggered = t;
    return 0;
}

/* Whether a drawn sample is let go here: the monitor gave the gate its budget's clock and
 * let_go, and the clock reads before `closed_until` (the time from which the monitor's
 * budget affords its next sample; -inf while it affords one now). 1, 0, or -1 with an error */
static int gate_closed(Gate *g) {
    if (g->let_go == NULL || g->let_go == Py_None || g->clock == NULL || g->clock == Py_None ||
        !(g->closed_until > -Py_HUGE_VAL))
        return 0;
    PyObject *t = PyObject_CallNoArgs(g->clock);
    if (t == NULL)
        return -1;
    double now = PyFloat_AsDouble(t);
    Py_DECREF(t);
    if (now == -1.0 && PyErr_Occurred())
        return -1;
    return now < g->closed_until;
}

/* A drawn sample let go (gate_closed), the event bound by the caller: recorded and counted,
 * then let_go(action, fields, weighted), the monitor's count, cause and cheap runtime checks,
 * which answers a gap's sample (not weighted) with the next gap. 0, or -1 with an error set */
static int gate_let_go(Gate *g, PyObject *action, PyObject *fields, int weighted) {
    if (gate_append(g, action, fields) < 0)
        return -1;
    PyObject *argv[3] = {action, fields, weighted ? Py_True : Py_False};
    PyObject *r = PyObject_Vectorcall(g->let_go, argv, 3, NULL);
    if (r == NULL)
        return -1;
    if (!weighted) {
        long long gap = PyLong_AsLongLong(r);
        if (gap == -1 && PyErr_Occurred()) {
            Py_DECREF(r);
            return -1;
        }
        g->gap = gap;
    }
    Py_DECREF(r);
    return 0;
}

/* A weighted event drawn or triggered, bound (a reference the call takes): triggered,
 * weighed(action, fields, bound, True); drawn, let go here while the budget is closed
 * (gate_closed), else weighed(action, fields, bound, False) */
static PyObject *gate_weighed_out(Gate *g, PyObject *action, PyObject *fields, PyObject *bound, int triggered) {
    if (!triggered) {
        int closed = gate_closed(g);
        if (closed != 0) {
            int rc = closed < 0 ? -1 : gate_let_go(g, action, fields, 1);
            Py_XDECREF(bound);
            if (rc < 0)
                return NULL;
            Py_RETURN_NONE;
        }
    }
    if (bound == NULL) {
        /* (a pure binder's event, bound now that it is handed on) */
        PyObject *bargv[2] = {action, fields};
        bound = PyObject_Vectorcall(g->bind, bargv, 2, NULL);
        if (bound == NULL || bound == Py_None)
            return bound;
    }
    PyObject *wargv[4] = {action, fields, bound, triggered ? Py_True : Py_False};
    PyObject *r = PyObject_Vectorcall(g->weighed, wargv, 4, NULL);
    Py_DECREF(bound);
    return r;
}

/* Whether an action of kind `bits` is a plain one, neither special, weighted nor unbound (a
 * gap's sample of which the gate may let go) */
static int gate_plain(int bits) {
    return !(bits & (K_SPECIAL | K_WEIGHTED | K_UNBOUND));
}

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
    PyObject *action = args[0], *fields = args[1];
    PyObject *bound = NULL;
    int bits;
    PyObject *p;        /* (a weighted action's probability, borrowed: the gate keeps it) */
    if (gate_kind(g, action, &bits, &p) < 0)
        return NULL;
    if (g->immediate != NULL) {
        if (g->gap > 0) {
            int now = (bits & K_IMMEDIATE) != 0;
            if (!now && g->pure) {
                /* (a pure binder's event: counted and recorded, never bound) */
                if (gate_append(g, action, fields) < 0)
                    return NULL;
                g->gap--;
                Py_RETURN_NONE;
            }
            if (!now) {
                /* held: counted now (the sample's place is the gap's), bound at the flush (full
                 * still only while another thread's flush runs: then bound below, now) */
                int h = gate_hold(g, action, fields);
                if (h < 0)
                    return NULL;
                if (h) {
                    g->gap--;
                    Py_RETURN_NONE;
                }
            }
        }
        /* an action the map binds to nothing is bound first, and one bound to nothing (which
         * then changed nothing: the contract) needs no flush: so held events are bound only on
         * the thread that holds them, never on the loader's, whose LoadBackLayer is such an
         * event (a flush there could run while the scheduler's thread reads the map) */
        if (bits & K_UNBOUND) {
            PyObject *bargv[2] = {action, fields};
            bound = PyObject_Vectorcall(g->bind, bargv, 2, NULL);
            if (bound == NULL || bound == Py_None)
                return bound;
            if (g->gap <= 0)        /* (the contract broken at a sample: the monitor binds it again) */
                Py_CLEAR(bound);
        }
        if (gate_flush(g) < 0 || g->tripped) {
            Py_XDECREF(bound);
            if (PyErr_Occurred())
                return NULL;
            Py_RETURN_NONE;
        }
    }
    PyObject *argv[3] = {action, fields, Py_None};
    if (g->gap <= 0) {
        /* the gap's sample: let go here while the budget is closed (a plain action: the
         * monitor decides the others), else to the monitor, unbound */
        if (bound == NULL && g->let_go != NULL && g->let_go != Py_None) {
            int closed = gate_plain(bits) ? gate_closed(g) : 0;
            if (closed < 0)
                return NULL;
            if (closed) {
                bound = PyObject_Vectorcall(g->bind, argv, 2, NULL);
                if (bound == NULL || bound == Py_None)
                    return bound;
                Py_DECREF(bound);
                if (gate_let_go(g, action, fields, 0) < 0)
                    return NULL;
                Py_RETURN_NONE;
            }
        }
        Py_XDECREF(bound);
        return PyObject_Vectorcall(g->slow, argv, 3, NULL);
    }
    /* a pure binder's weighted event is bound only when the draw or the trigger hands it on
     * (gate_weighed_out): it maps to its step, none but `unbound`'s to nothing (the contract),
     * and binding keeps nothing, so an event recorded here needs no bind (~600 instructions an
     * eviction: a Python frame entered from here) */
    int lazy = bound == NULL && g->pure && !(bits & K_SPECIAL) && (bits & K_WEIGHTED);
    if (bound == NULL && !lazy) {
        bound = PyObject_Vectorcall(g->bind, argv, 2, NULL);
        if (bound == NULL || bound == Py_None)
            return bound;
    }
    if (bits & K_SPECIAL) {
        argv[2] = bound;
        PyObject *r = PyObject_Vectorcall(g->slow, argv, 3, NULL);
        Py_XDECREF(bound);
        return r;
    }
    int weighted = (bits & K_WEIGHTED) != 0;
    if (weighted) {
        /* (the draw first, whatever the trigger says: the seed's draws are the same whether
         * or not anything triggers) */
        int drawn, triggered;
        if (gate_weigh(g, p, bits, action, fields, &drawn, &triggered) < 0) {
            Py_XDECREF(bound);
            return NULL;
        }
        if (triggered || drawn)
            return gate_weighed_out(g, action, fields, bound, triggered);
    }
    Py_XDECREF(bound);
    if (gate_append(g, action, fields) < 0)
        return NULL;
    if (!weighted)
        g->gap--;       /* (the gap counts the events that are not drawn on their own) */
    Py_RETURN_NONE;
}

static PyObject *gate_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"bind", "special", "slow", "history", "weighted", "draw", "trigger", "trigger_on",
                         "weighed", "unbound", "clock", "let_go", "pure", NULL};
    PyObject *bind, *special, *slow, *history, *weighted = NULL, *draw = Py_None, *trigger = Py_None,
             *trigger_on = NULL, *weighed = Py_None, *unbound = Py_None, *clock = Py_None, *let_go = Py_None,
             *pure = Py_False;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!OO|O!OOO!OOOOO:Gate", kw, &bind, &PyFrozenSet_Type, &special,
                                     &slow, &history, &PyDict_Type, &weighted, &draw, &trigger, &PyFrozenSet_Type,
                                     &trigger_on, &weighed, &unbound, &clock, &let_go, &pure))
        return NULL;
    if (!PyBool_Check(pure) || (pure == Py_True && unbound == Py_None)) {
        PyErr_SetString(PyExc_TypeError, "Gate: pure must be a bool, and True only with unbound given");
        return NULL;
    }
    if ((clock == Py_None) != (let_go == Py_None) ||
        (clock != Py_None && (!PyCallable_Check(clock) || !PyCallable_Check(let_go)))) {
        PyErr_SetString(PyExc_TypeError, "Gate: clock and let_go must both be callable, or both None");
        return NULL;
    }
    if (unbound != Py_None && !PyFrozenSet_CheckExact(unbound)) {
        PyErr_Format(PyExc_TypeError, "Gate: unbound must be a frozenset or None, not %.100s", Py_TYPE(unbound)->tp_name);
        return NULL;
    }
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
    g->clock = Py_NewRef(clock);
    g->let_go = Py_NewRef(let_go);
    g->closed_until = -Py_HUGE_VAL;
    g->pure = pure == Py_True;
    if (unbound != Py_None) {
        /* (what is never held: the events the monitor or the draw decides, and those that may
         * bind to nothing) */
        PyObject *imm = PySet_New(special);
        int err = imm == NULL || _PySet_Update(imm, weighted != NULL ? weighted : g->weighted) < 0 ||
                  _PySet_Update(imm, unbound) < 0;
        if (!err) {
            g->immediate = PyFrozenSet_New(imm);
            err = g->immediate == NULL;
        }
        Py_XDECREF(imm);
        if (err) {
            Py_DECREF(g);
            return NULL;
        }
        g->unbound = Py_NewRef(unbound);
    }
    g->vectorcall = gate_call;
    return (PyObject *)g;
}

/* gate.flush(): the held events bound, counted and recorded (gate_flush) */
static PyObject *gate_flush_method(PyObject *self, PyObject *unused) {
    if (gate_flush((Gate *)self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef gate_methods[] = {
    {"flush", gate_flush_method, METH_NOARGS, "bind, count and record the held events, in order"},
    {NULL, NULL, 0, NULL},
};

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
    Py_VISIT(g->unbound);
    Py_VISIT(g->immediate);
    Py_VISIT(g->clock);
    Py_VISIT(g->let_go);
    for (Py_ssize_t i = 0; i < 2 * g->held; i++)
        Py_VISIT(g->hold[i]);
    for (int i = 0; i < g->nkinds; i++) {
        Py_VISIT(g->kind_action[i]);
        Py_VISIT(g->kind_p[i]);
    }
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
    Py_CLEAR(g->unbound);
    Py_CLEAR(g->immediate);
    Py_CLEAR(g->clock);
    Py_CLEAR(g->let_go);
    int k = g->nkinds;
    g->nkinds = 0;
    for (int i = 0; i < k; i++) {
        Py_CLEAR(g->kind_action[i]);
        Py_CLEAR(g->kind_p[i]);
    }
    Py_ssize_t n = g->held;
    g->held = 0;
    for (Py_ssize_t i = 0; i < 2 * n; i++)
        Py_CLEAR(g->hold[i]);
    return 0;
}

static void gate_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    gate_clear(self);
    Py_TYPE(self)->tp_free(self);
}

/* A listener's history attribute (the gate's, the strict step's): read */
static PyObject *history_get(PyObject *history) {
    if (history == NULL) {
        PyErr_SetString(PyExc_AttributeError, "history");
        return NULL;
    }
    return Py_NewRef(history);
}

/* ... and replaced, with the append it calls (`owner`: the type, for the error) */
static int history_set(PyObject **history, PyObject **append, PyObject *value, const char *owner) {
    if (value == NULL) {
        PyErr_Format(PyExc_AttributeError, "%s: history cannot be deleted", owner);
        return -1;
    }
    PyObject *bound = PyObject_GetAttrString(value, "append");
    if (bound == NULL)
        return -1;
    Py_XSETREF(*append, bound);
    Py_XSETREF(*history, Py_NewRef(value));
    return 0;
}

static PyObject *gate_get_history(PyObject *self, void *unused) {
    return history_get(((Gate *)self)->history);
}

static int gate_set_history(PyObject *self, PyObject *value, void *unused) {
    Gate *g = (Gate *)self;
    return history_set(&g->history, &g->append, value, "Gate");
}

static PyMemberDef gate_members[] = {
    {"steps", T_PYSSIZET, offsetof(Gate, steps), 0, "bound events counted"},
    {"gap", T_LONGLONG, offsetof(Gate, gap), 0, "events to record before the next sample"},
    {"tripped", T_BOOL, offsetof(Gate, tripped), 0, "the monitor reported a violation: events are ignored"},
    {"bind", T_OBJECT, offsetof(Gate, bind), READONLY, "the map's binder"},
    {"pure", T_BOOL, offsetof(Gate, pure), READONLY, "the binder is pure: events between samples are not bound"},
    {"special", T_OBJECT, offsetof(Gate, special), READONLY, "the actions the monitor decides"},
    {"slow", T_OBJECT, offsetof(Gate, slow), READONLY, "the monitor's path: slow(action, fields, bound)"},
    {"draw", T_OBJECT, offsetof(Gate, draw), READONLY, "the seeded draw"},
    {"trigger", T_OBJECT, offsetof(Gate, trigger), READONLY, "the map's trigger, or None"},
    {"trigger_on", T_OBJECT, offsetof(Gate, trigger_on), READONLY, "the actions the trigger is asked about"},
    {"weighed", T_OBJECT, offsetof(Gate, weighed), READONLY, "weighed(action, fields, bound, triggered)"},
    {"unbound", T_OBJECT, offsetof(Gate, unbound), READONLY,
     "the actions the map may bind to nothing (deferred binding), or None: no event is held"},
    {"held", T_PYSSIZET, offsetof(Gate, held), READONLY, "events held, to be bound at the next flush"},
    {"clock", T_OBJECT, offsetof(Gate, clock), READONLY, "the budget's clock, or None: no sample let go here"},
    {"let_go", T_OBJECT, offsetof(Gate, let_go), READONLY, "let_go(action, fields, weighted): a sample let go"},
    {"closed_until", T_DOUBLE, offsetof(Gate, closed_until), 0,
     "the clock time before which a drawn sample is let go here (-inf: none is)"},
    {NULL, 0, 0, 0, NULL},
};

/* gate.weighted: a read-only view of the gate's copy (its kinds kept by gate_kind stay true) */
static PyObject *gate_get_weighted(PyObject *self, void *unused) {
    Gate *g = (Gate *)self;
    if (g->weighted == NULL) {
        PyErr_SetString(PyExc_AttributeError, "weighted");
        return NULL;
    }
    return PyDictProxy_New(g->weighted);
}

static PyGetSetDef gate_getset[] = {
    {"history", gate_get_history, gate_set_history, "the deque unsampled events are recorded in", NULL},
    {"weighted", gate_get_weighted, NULL, "action -> probability (a read-only view of the gate's copy)", NULL},
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
    .tp_methods = gate_methods,
    .tp_doc = "sample mode's listener between samples (monitors.gate.PyGate in C)",
};

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
/* a dict's entries as 3.11 lays them out (entry_at_hint) */
#define Py_BUILD_CORE
#include <internal/pycore_dict.h>
#undef Py_BUILD_CORE
#define HICACHE_HINTS 1
#endif

/* What attr_of keeps of one attribute it reads (see there): the version tag of the type found
 * without the name on its MRO (0: none yet), and the entry of the instance dict that held it at
 * the last read (-1: none yet) */
typedef struct {
    unsigned int plain;
    Py_ssize_t hint;
} AttrMemo;

/* Strict mode's step (runtime.py's Monitor._strict_step, which defines it, in C): the listener
 * a strict monitor on an incremental map gives its bus, called at every event of a strict run.
 * It makes the same calls, in the same order, with the same arguments, as the Python step:
 * the name lookup, the map's bind, the quiet-map shortcut, the breach report, the guard, the
 * sync, the history record, the constants lookup by the map's synced_key, the monitor's
 * _check_delta when the state or the binding changed, the effect check and the hooks; the
 * monitor's Python (fail, _report_breach, _check_delta, constants) is called by name on the
 * monitor at each use, so a subclass or a test that replaces one is followed. What it saves is
 * the Python frame of the step (~140 opcodes an event) and the bound methods it made.
 * Where the monitor's _check_delta is Monitor's (the step is given its parts, `checks`), the
 * step runs it itself under the last checked constants binding, most events' case: the same
 * calls (the map's domains and live, variables_of, the fused pass, each check whose reads meet
 * what changed, fail) in the same order; a new binding still goes to _check_delta by name.
 *
 * Invariants: `steps` counts the events the map bound, `checked` those synced and recorded
 * (Monitor.steps and Monitor.checked read them); `tripped` is set by the monitor's fail, after
 * which every event is ignored; the attributes a step reads that the monitor or its map may
 * change (the map's bind, sync, breach, synced_key and effect_due; the monitor's _checked_C) are
 * read at each event, those fixed when the monitor was built are held, the hook lists among them
 * (appended to, never replaced: a hook appended later, the worker watch's, is run). */

typedef struct {
    PyObject_HEAD
    Py_ssize_t steps;
    Py_ssize_t checked;
    char tripped;
    char breaches;        /* the map reports other threads' breaches (`breach`) */
    char synced_key;      /* the map keeps its constants key as `synced_key` */
    char effect_due;      /* the map narrows the effect check's actions at each sync */
    PyObject *monitor;    /* the Monitor (fail, _report_breach, _check_delta, constants, hooks) */
    PyObject *rmap;       /* its incremental map */
    PyObject *names;      /* a dict: action -> its name (runtime._NAMES) */
    PyObject *name_of;    /* name_of(action) -> its name (runtime._name_of) */
    PyObject *cache;      /* a dict: constants key -> binding (the monitor's _cache) */
    PyObject *quiet;      /* quiet() -> truth, or None */
    PyObject *guard;      /* guard(name, fields) -> a Failure or None, or None */
    PyObject *effect;     /* effect(name, fields) -> a Failure or None, or None */
    PyObject *effect_on;  /* a frozenset of the actions whose effect is checked */
    PyObject *history;    /* a deque (maxlen: the monitor's history) */
    PyObject *append;     /* history.append */
    PyObject *step_hooks; /* the monitor's step_hooks, a list of hook(name, fields) */
    PyObject *watch_hooks; /* ... and its watch_hooks */
    /* The invariant checks' parts, where the monitor's _check_delta is Monitor's (`checks`
     * given; else NULL, and _check_delta is called by name at each check): */
    char own_domains;     /* the map may report its dirty dict as the domains (`own_domains`) */
    PyObject *live;       /* the map's live state, one dict for its life, or None: rmap.live() */
    PyObject *inc_all;    /* the fused pass inc_all(C, s, D, changed, skip) -> holds, or None */
    PyObject *fused_skip; /* ... its skip */
    PyObject *unfused_checks; /* a list of (inv, inc, full, reads): what runs when the pass holds */
    PyObject *unfused_reads;  /* ... the variables any of them reads */
    PyObject *inc_checks; /* a list of (inv, inc, full, reads): every invariant's */
    PyObject *variables_of; /* variables_of(delta) -> the set of the variables it writes */
    /* For each attribute a step reads of its monitor or map (attr_of): the version tag of the
     * type last found to have no attribute of that name on its MRO (0: none yet), and the entry
     * of the instance dict that held it (-1: none yet) */
    AttrMemo plain_checked_C, plain_breach, plain_synced_key, plain_effect_due, plain_own_domains;
    /* ... and for the map's bind (step_bind): the version tag of the type found with no data
     * descriptor of that name, and the entry of the map's dict that held its callable */
    AttrMemo plain_bind;
    /* The last constants lookup (step_constants): its key, the binding it found (NULL: none) and
     * the cache dict's version tag after it */
    PyObject *last_key, *last_C;
    uint64_t last_version;
    vectorcallfunc vectorcall;
} StrictStep;

/* (interned once, when the module loads) */
static PyObject *s_bind, *s_sync, *s_breach, *s_synced_key, *s_effect_due, *s_checked_C, *s_fail, *s_report_breach,
    *s_check_delta, *s_constants, *s_action, *s_own_domains, *s_domains, *s_live, *s_isdisjoint, *s_invariant;

/* monitor.fail(kind, name, fields, broke, None, None), kind "action" or "invariant": raises the
 * violation (-1) */
static int step_fail(StrictStep *st, PyObject *kind, PyObject *name, PyObject *fields, PyObject *broke) {
    PyObject *argv[7] = {st->monitor, kind, name, fields, broke, Py_None, Py_None};
    PyObject *r = PyObject_VectorcallMethod(s_fail, argv, 7 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* Append (steps, name, fields, None, delta) to the history (a new reference to delta taken) */
static int step_record(StrictStep *st, PyObject *name, PyObject *fields, PyObject *delta) {
    PyObject *seq = PyLong_FromSsize_t(st->steps);
    if (seq == NULL)
        return -1;
    PyObject *rec = PyTuple_New(5);
    if (rec == NULL) {
        Py_DECREF(seq);
        return -1;
    }
    PyTuple_SET_ITEM(rec, 0, seq);
    PyTuple_SET_ITEM(rec, 1, Py_NewRef(name));
    PyTuple_SET_ITEM(rec, 2, Py_NewRef(fields));
    PyTuple_SET_ITEM(rec, 3, Py_NewRef(Py_None));
    PyTuple_SET_ITEM(rec, 4, Py_NewRef(delta));
    PyObject *r = PyObject_Vectorcall(st->append, &rec, 1, NULL);
    Py_DECREF(rec);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* Each hook of a list, hook(name, fields), in order (a hook appended while they run is run
 * too, as a list iterator would: the length is read at each step) */
/* An action's name as the monitors record it: names.get(action) or name_of(action) (runtime's
 * _NAMES and _name_of); a new reference, or NULL with an error set */
static PyObject *action_name(PyObject *names, PyObject *name_of, PyObject *action) {
    PyObject *name = PyDict_GetItemWithError(names, action);     /* (borrowed) */
    if (name == NULL) {
        if (PyErr_Occurred())
            return NULL;
        return PyObject_CallOneArg(name_of, action);
    }
    Py_INCREF(name);
    int named = PyObject_IsTrue(name);
    if (named > 0)
        return name;
    Py_DECREF(name);
    return named < 0 ? NULL : PyObject_CallOneArg(name_of, action);
}

static int step_hooks(PyObject *hooks, PyObject *name, PyObject *fields) {
    PyObject *argv[2] = {name, fields};
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(hooks); i++) {
        PyObject *hook = Py_NewRef(PyList_GET_ITEM(hooks, i));
        PyObject *r = PyObject_Vectorcall(hook, argv, 2, NULL);
        Py_DECREF(hook);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
    return 0;
}

/* delta, acc = pair (a new reference to each; -1: not a pair, the error Python's unpacking raises) */
static int step_unpack(PyObject *pair, PyObject **delta, PyObject **acc) {
    if (PyTuple_CheckExact(pair) && PyTuple_GET_SIZE(pair) == 2) {
        *delta = Py_NewRef(PyTuple_GET_ITEM(pair, 0));
        *acc = Py_NewRef(PyTuple_GET_ITEM(pair, 1));
        return 0;
    }
    PyObject *seq = PySequence_Fast(pair, "cannot unpack non-iterable object");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n != 2) {
        PyErr_Format(PyExc_ValueError, n < 2 ? "not enough values to unpack (expected 2, got %zd)"
                                             : "too many values to unpack (expected 2)", n);
        Py_DECREF(seq);
        return -1;
    }
    *delta = Py_NewRef(PySequence_Fast_GET_ITEM(seq, 0));
    *acc = Py_NewRef(PySequence_Fast_GET_ITEM(seq, 1));
    Py_DECREF(seq);
    return 0;
}

/* d[name] (borrowed) off d's entry number `hint` where that entry holds name itself, else NULL
 * (nothing raised: the caller looks name up; NULL too where the entry's value was deleted), for
 * an exact dict d and an interned str name: 3.11's layout of a dict of str keys only (any other
 * dict, any other version: NULL). The entry that holds name itself is the one a lookup finds (a
 * dict's keys are unique); entries move only when the dict is rebuilt (a resize, or a rebuild
 * after deletions), which the test sees. */
static inline PyObject *entry_at_hint(PyObject *d, PyObject *name, Py_ssize_t hint) {
#ifdef HICACHE_HINTS
    PyDictObject *mp = (PyDictObject *)d;
    PyDictKeysObject *dk = mp->ma_keys;
    if (mp->ma_values == NULL && dk->dk_kind == DICT_KEYS_UNICODE && 0 <= hint && hint < dk->dk_nentries) {
        PyDictUnicodeEntry *ep = &DK_UNICODE_ENTRIES(dk)[hint];
        if (ep->me_key == name)
            return ep->me_value;
    }
#else
    (void)d; (void)name; (void)hint;
#endif
    return NULL;
}

/* The number of d's entry holding name itself with value v (3.11's layout of a dict of str keys
 * only), else -1: the hint of the next read */
static Py_ssize_t entry_of(PyObject *d, PyObject *name, PyObject *v) {
#ifdef HICACHE_HINTS
    PyDictObject *mp = (PyDictObject *)d;
    PyDictKeysObject *dk = mp->ma_keys;
    if (mp->ma_values == NULL && dk->dk_kind == DICT_KEYS_UNICODE) {
        PyDictUnicodeEntry *ep = DK_UNICODE_ENTRIES(dk);
        for (Py_ssize_t k = 0; k < dk->dk_nentries; k++) {
            if (ep[k].me_key == name && ep[k].me_value == v)
                return k;
        }
    }
#else
    (void)d; (void)name; (void)v;
#endif
    return -1;
}

/* obj.<name> as PyObject_GetAttr reads it (a new reference; NULL: the error it raises), the
 * instance dict read directly where the generic lookup would come down to it: the type's
 * getattro is the generic one, no class on its MRO has `name` (so no descriptor, data or
 * not, comes before the dict or after it), and the dict holds the name. Anything else (a
 * property, a __getattr__, slots, a name the dict lacks, a class attribute): PyObject_GetAttr.
 * `memo->plain` memoizes the MRO's answer: the version tag of the type found without `name`,
 * which is its alone (tags are never reused) and is dropped when the type or a base is changed
 * (an attribute set on a class), so a type whose valid tag it is still has no such attribute.
 * In the dict, the entry that held the name at the last read (`memo->hint`) is read where it
 * still holds it (entry_at_hint: what the interpreter's own reads of an attribute do,
 * LOAD_ATTR_WITH_HINT), else the name is looked up and the entry holding it kept.
 * Why: a step reads three or four attributes of its monitor and map that change between
 * events (_checked_C, breach, synced_key, effect_due, own_domains), each ~320 instructions
 * through the generic lookup, ~135 with a lookup in the dict (~7k reads a kv_bytes replay).
 * (_PyObject_GetDictPtr gives an object whose attributes are still kept inline its dict, as
 * reading `obj.__dict__` does: the monitor and the maps, with more attributes than the inline
 * keys hold, have one already.) */
static PyObject *attr_of(PyObject *obj, PyObject *name, AttrMemo *memo) {
    PyTypeObject *tp = Py_TYPE(obj);
    if (tp->tp_getattro == PyObject_GenericGetAttr) {
        int absent = memo->plain != 0 && tp->tp_version_tag == memo->plain &&
                     PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG);
        if (!absent && _PyType_Lookup(tp, name) == NULL) {
            absent = 1;
            /* (the tag the lookup gave the type, where it could: 0, no memo, where not) */
            memo->plain = PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG) ? tp->tp_version_tag : 0;
        }
        PyObject **dictptr = absent ? _PyObject_GetDictPtr(obj) : NULL;
        if (dictptr != NULL && *dictptr != NULL && PyDict_CheckExact(*dictptr)) {
            /* (no code runs between the entry's test and the reference taken) */
            PyObject *v = entry_at_hint(*dictptr, name, memo->hint);
            if (v != NULL)
                return Py_NewRef(v);
            /* (held, as the generic lookup holds it: a key's __eq__ may replace obj's dict) */
            PyObject *dict = Py_NewRef(*dictptr);
            v = Py_XNewRef(PyDict_GetItemWithError(dict, name));
            if (v != NULL)
                memo->hint = entry_of(dict, name, v);
            Py_DECREF(dict);
            if (v != NULL || PyErr_Occurred())
                return v;
        }
    }
    return PyObject_GetAttr(obj, name);
}

/* changed.isdisjoint(reads) (-1: an error) */
static int step_disjoint(PyObject *changed, PyObject *reads) {
    PyObject *argv[2] = {changed, reads};
    PyObject *r = PyObject_VectorcallMethod(s_isdisjoint, argv, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (r == NULL)
        return -1;
    int disjoint = PyObject_IsTrue(r);
    Py_DECREF(r);
    return disjoint;
}

/* Each check (inv, inc, full, reads) of a list whose reads meet `changed`: f = full(C, s) if
 * inc is None else inc(C, s, D, changed), and monitor.fail("invariant", ...) on a failure f
 * (-1: an error or the violation raised) */
static int step_run_checks(StrictStep *st, PyObject *checks, PyObject *name, PyObject *fields, PyObject *C,
                           PyObject *s, PyObject *D, PyObject *changed) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(checks); i++) {
        PyObject *check = PyList_GET_ITEM(checks, i);
        if (!PyTuple_Check(check) || PyTuple_GET_SIZE(check) != 4) {
            PyErr_SetString(PyExc_TypeError, "StrictStep: a check is not a tuple (inv, inc, full, reads)");
            return -1;
        }
        Py_INCREF(check);
        PyObject *inc = PyTuple_GET_ITEM(check, 1), *full = PyTuple_GET_ITEM(check, 2);
        int skip = step_disjoint(changed, PyTuple_GET_ITEM(check, 3));
        PyObject *f = NULL;
        if (skip == 0) {
            PyObject *argv[4] = {C, s, D, changed};
            f = inc == Py_None ? PyObject_Vectorcall(full, argv, 2, NULL) : PyObject_Vectorcall(inc, argv, 4, NULL);
        }
        Py_DECREF(check);
        if (skip < 0 || (skip == 0 && f == NULL))
            return -1;
        if (f == NULL)
            continue;
        int failed = f != Py_None && step_fail(st, s_invariant, name, fields, f) < 0;
        Py_DECREF(f);
        if (failed)
            return -1;
    }
    return 0;
}

/* Monitor._check_delta under the constants binding of the last checked step (C is
 * _checked_C), in C: the domains, the changed variables, the fused pass, then the checks it
 * does not cover, or every check where it does not hold (-1: an error or the violation raised) */
static int step_check_delta(StrictStep *st, PyObject *name, PyObject *fields, PyObject *C, PyObject *delta,
                            PyObject *acc) {
    PyObject *rmap = st->rmap, *D = NULL, *changed = NULL, *s = NULL;
    int own = 0, rc = -1;
    if (st->own_domains) {
        PyObject *o = attr_of(rmap, s_own_domains, &st->plain_own_domains);
        if (o == NULL)
            return -1;
        own = PyObject_IsTrue(o);
        Py_DECREF(o);
        if (own < 0)
            return -1;
    }
    if (own) {
        D = Py_NewRef(acc);
    } else {
        PyObject *argv[3] = {rmap, C, acc};
        if ((D = PyObject_VectorcallMethod(s_domains, argv, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL)) == NULL)
            return -1;
    }
    if ((changed = PyObject_CallOneArg(st->variables_of, delta)) == NULL)
        goto done;
    s = st->live != Py_None ? Py_NewRef(st->live)
                            : PyObject_VectorcallMethod(s_live, &rmap, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (s == NULL)
        goto done;
    int holds = 1;
    if (st->inc_all != Py_None) {
        PyObject *argv[5] = {C, s, D, changed, st->fused_skip};
        PyObject *r = PyObject_Vectorcall(st->inc_all, argv, 5, NULL);
        if (r == NULL)
            goto done;
        holds = PyObject_IsTrue(r);
        Py_DECREF(r);
        if (holds < 0)
            goto done;
    }
    PyObject *checks = st->inc_checks;
    if (holds) {    /* (the checks the fused pass does not cover: every one where there is none) */
        int disjoint = step_disjoint(changed, st->unfused_reads);
        if (disjoint != 0) {
            rc = disjoint < 0 ? -1 : 0;
            goto done;
        }
        checks = st->unfused_checks;
    }
    rc = step_run_checks(st, checks, name, fields, C, s, D, changed);
done:
    Py_DECREF(D);
    Py_XDECREF(changed);
    Py_XDECREF(s);
    return rc;
}

/* The invariants after a step that changed the state or the constants binding: C in Monitor's
 * own _check_delta where the step holds its parts and the binding is the last checked one,
 * else the monitor's _check_delta by name (-1: an error or the violation raised) */
static int step_invariants(StrictStep *st, PyObject *name, PyObject *fields, PyObject *C, PyObject *delta,
                           PyObject *acc) {
    if (st->inc_checks != NULL) {
        PyObject *checked_C = attr_of(st->monitor, s_checked_C, &st->plain_checked_C);
        if (checked_C == NULL)
            return -1;
        int same = C == checked_C;
        Py_DECREF(checked_C);
        if (same)
            return step_check_delta(st, name, fields, C, delta, acc);
    }
    PyObject *argv[6] = {st->monitor, name, fields, C, delta, acc};
    PyObject *r = PyObject_VectorcallMethod(s_check_delta, argv, 6 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* rmap.bind(name, fields), as PyObject_VectorcallMethod calls it (a new reference): where the
 * map's type has the generic getattro and no data descriptor named `bind` on its MRO (memo:
 * the type's version tag, as attr_of keeps it) and the map's dict holds `bind`, the callable
 * there is called directly, as the generic lookup finds it (the instance dict before a non-data
 * descriptor of the class: each map's bind is a callable of its own in its dict, steps_table's
 * or load_bind's), read off the entry the last call found it at where that entry still holds
 * it (entry_at_hint); else by name. Why: the lookup by name probed the map's dict for `bind` at
 * every event of both monitors (~100 instructions each). */
static PyObject *step_bind(StrictStep *st, PyObject *name, PyObject *fields) {
    PyObject *rmap = st->rmap;
    PyTypeObject *tp = Py_TYPE(rmap);
    AttrMemo *memo = &st->plain_bind;
    int plain = 0;
    if (tp->tp_getattro == PyObject_GenericGetAttr) {
        plain = memo->plain != 0 && tp->tp_version_tag == memo->plain &&
                PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG);
        if (!plain) {
            PyObject *descr = _PyType_Lookup(tp, s_bind);      /* (borrowed) */
            if (descr == NULL || Py_TYPE(descr)->tp_descr_set == NULL) {
                plain = 1;
                /* (the tag the lookup gave the type, where it could: 0, no memo, where not. The
                 * type's tag covers what its MRO holds, not what the descriptor's own class
                 * does: a class given a __set__ later, or the descriptor's __class__ replaced,
                 * leaves the tag as it was, so only no descriptor, or one of an immutable type,
                 * a function's, is memoized; another is asked again at each call) */
                int fixed = descr == NULL || PyType_HasFeature(Py_TYPE(descr), Py_TPFLAGS_IMMUTABLETYPE);
                memo->plain = fixed && PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG) ? tp->tp_version_tag : 0;
            }
        }
    }
    PyObject **dictptr = plain ? _PyObject_GetDictPtr(rmap) : NULL;
    if (dictptr != NULL && *dictptr != NULL && PyDict_CheckExact(*dictptr)) {
        /* (the callable held from the entry's test on: no code runs in between) */
        PyObject *f = Py_XNewRef(entry_at_hint(*dictptr, s_bind, memo->hint));
        if (f == NULL) {
            /* (held, as the generic lookup holds it: a key's __eq__ may replace the map's dict) */
            PyObject *dict = Py_NewRef(*dictptr);
            f = Py_XNewRef(PyDict_GetItemWithError(dict, s_bind));
            if (f != NULL)
                memo->hint = entry_of(dict, s_bind, f);
            Py_DECREF(dict);
            if (f == NULL && PyErr_Occurred())
                return NULL;
        }
        if (f != NULL) {
            PyObject *argv[2] = {name, fields};
            PyObject *r = PyObject_Vectorcall(f, argv, 2, NULL);
            Py_DECREF(f);
            return r;
        }
    }
    PyObject *bargv[3] = {rmap, name, fields};
    return PyObject_VectorcallMethod(s_bind, bargv, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

#ifdef HICACHE_HINTS
/* Whether key's hash and equality are fixed for its life: an exact int or str, or an exact tuple
 * of those (a constants key: the map's counts) */
static int fixed_key(PyObject *key) {
    if (PyLong_CheckExact(key) || PyUnicode_CheckExact(key))
        return 1;
    if (!PyTuple_CheckExact(key))
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(key); i++) {
        PyObject *k = PyTuple_GET_ITEM(key, i);
        if (!PyLong_CheckExact(k) && !PyUnicode_CheckExact(k))
            return 0;
    }
    return 1;
}
#endif

/* The monitor's cache dict at key (a new reference; NULL: absent, or an error set): the binding
 * the last lookup found where key is the very object that lookup was made with, one whose hash
 * and equality are fixed (fixed_key), and the dict has not been written since (its version tag,
 * 3.11: any write that changes a value renews it), else looked up. The same key object in the
 * same mapping finds the same value. Why: the key, the map's synced_key, is a tuple rebuilt only
 * when the constants change, and hashing and looking it up cost ~150 instructions at each
 * checked event of both monitors. */
static PyObject *step_constants(StrictStep *st, PyObject *key) {
#ifdef HICACHE_HINTS
    if (key == st->last_key && ((PyDictObject *)st->cache)->ma_version_tag == st->last_version)
        return Py_XNewRef(st->last_C);
#endif
    /* (the dict held across the lookup, which may run a key's __eq__) */
    PyObject *cache = Py_NewRef(st->cache);
    PyObject *C = Py_XNewRef(PyDict_GetItemWithError(cache, key));
#ifdef HICACHE_HINTS
    if ((C != NULL || !PyErr_Occurred()) && fixed_key(key) && cache == st->cache) {
        /* (the tag read right after the lookup, before anything else can run: a key's __eq__
         * that wrote the dict renewed it first; and the old key and binding released only once
         * the new ones and their tag are in place: a finalizer run by that release that writes
         * the dict renews the tag after it was read, so the next step looks the key up again) */
        uint64_t version = ((PyDictObject *)cache)->ma_version_tag;
        PyObject *old_key = st->last_key, *old_C = st->last_C;
        st->last_key = Py_NewRef(key);
        st->last_C = Py_XNewRef(C);
        st->last_version = version;
        Py_XDECREF(old_key);
        Py_XDECREF(old_C);
    }
#endif
    Py_DECREF(cache);
    return C;
}

/* The step of an event past the binder and the quiet shortcut: breach, guard, sync, record,
 * constants, invariants, effect, hooks (-1: an error or the violation raised) */
static int step_checked(StrictStep *st, PyObject *name, PyObject *fields) {
    PyObject *rmap = st->rmap;
    if (st->breaches) {
        PyObject *breach = attr_of(rmap, s_breach, &st->plain_breach);
        if (breach == NULL)
            return -1;
        int some = breach != Py_None;
        Py_DECREF(breach);
        if (some) {
            /* (a local vector: the offset flag lets a bound method's call write its slot) */
            PyObject *self_arg[1] = {st->monitor};
            PyObject *r = PyObject_VectorcallMethod(s_report_breach, self_arg, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            if (r == NULL)
                return -1;
            Py_DECREF(r);
        }
    }
    PyObject *argv[2] = {name, fields};
    PyObject *broke = NULL;
    if (st->guard != Py_None) {
        broke = PyObject_Vectorcall(st->guard, argv, 2, NULL);
        if (broke == NULL)
            return -1;
    }
    PyObject *pair = PyObject_VectorcallMethod(s_sync, &rmap, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    PyObject *delta = NULL, *acc = NULL, *C = NULL, *checked_C = NULL;
    int rc = -1;
    if (pair == NULL)
        goto done;
    int unpacked = step_unpack(pair, &delta, &acc);
    Py_DECREF(pair);
    if (unpacked < 0 || step_record(st, name, fields, delta) < 0)
        goto done;
    st->checked++;
    if (broke != NULL && broke != Py_None && step_fail(st, s_action, name, fields, broke) < 0)
        goto done;
    if (st->synced_key) {
        PyObject *key = attr_of(rmap, s_synced_key, &st->plain_synced_key);
        if (key == NULL)
            goto done;
        C = step_constants(st, key);
        Py_DECREF(key);
        if (C == NULL && PyErr_Occurred())
            goto done;
    }
    if (C == NULL || C == Py_None) {
        Py_XDECREF(C);
        PyObject *self_arg[1] = {st->monitor};      /* (a local vector, as for _report_breach) */
        C = PyObject_VectorcallMethod(s_constants, self_arg, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (C == NULL)
            goto done;
    }
    int changed = PyObject_IsTrue(delta);
    if (changed < 0)
        goto done;
    if (!changed) {
        checked_C = attr_of(st->monitor, s_checked_C, &st->plain_checked_C);
        if (checked_C == NULL)
            goto done;
        changed = C != checked_C;
    }
    if (changed && step_invariants(st, name, fields, C, delta, acc) < 0)   /* (else the state every
                                                                              * invariant last held on) */
        goto done;
    int due;
    if (st->effect_due) {
        PyObject *actions = attr_of(rmap, s_effect_due, &st->plain_effect_due);
        if (actions == NULL)
            goto done;
        due = PySequence_Contains(actions, name);
        Py_DECREF(actions);
    } else {
        due = PySet_Contains(st->effect_on, name);
    }
    if (due < 0)
        goto done;
    if (due) {
        PyObject *eff = PyObject_Vectorcall(st->effect, argv, 2, NULL);
        if (eff == NULL)
            goto done;
        int failed = eff != Py_None && step_fail(st, s_action, name, fields, eff) < 0;
        Py_DECREF(eff);
        if (failed)
            goto done;
    }
    if (step_hooks(st->step_hooks, name, fields) < 0 || step_hooks(st->watch_hooks, name, fields) < 0)
        goto done;
    rc = 0;
done:
    Py_XDECREF(broke);
    Py_XDECREF(delta);
    Py_XDECREF(acc);
    Py_XDECREF(C);
    Py_XDECREF(checked_C);
    return rc;
}

/* The quiet-map shortcut's test: quiet is not None and _checked_C is not None and quiet()
 * and no step hook and no watch hook (-1: an error) */
static int step_quiet(StrictStep *st) {
    if (st->quiet == Py_None)
        return 0;
    PyObject *checked_C = attr_of(st->monitor, s_checked_C, &st->plain_checked_C);
    if (checked_C == NULL)
        return -1;
    int first = checked_C == Py_None;
    Py_DECREF(checked_C);
    if (first)
        return 0;
    PyObject *q = PyObject_CallNoArgs(st->quiet);
    if (q == NULL)
        return -1;
    int quiet = PyObject_IsTrue(q);
    Py_DECREF(q);
    if (quiet <= 0)
        return quiet;
    return PyList_GET_SIZE(st->step_hooks) == 0 && PyList_GET_SIZE(st->watch_hooks) == 0;
}

static PyObject *step_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    StrictStep *st = (StrictStep *)self;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_Format(PyExc_TypeError, "step(action, fields) takes 2 positional arguments (%zd given)", n);
        return NULL;
    }
    if (st->tripped)
        Py_RETURN_NONE;
    if (st->monitor == NULL) {      /* (cleared by the collector: refused, not called through NULL) */
        PyErr_SetString(PyExc_RuntimeError, "StrictStep: cleared");
        return NULL;
    }
    PyObject *action = args[0], *fields = args[1];
    PyObject *name = action_name(st->names, st->name_of, action);
    if (name == NULL)
        return NULL;
    PyObject *steps = step_bind(st, name, fields);
    if (steps == NULL || steps == Py_None) {
        Py_DECREF(name);
        return steps;
    }
    Py_DECREF(steps);
    st->steps++;
    int rc = step_quiet(st);
    if (rc > 0) {
        /* (a quiet map's sync would return an empty delta: the step is recorded with it, the
         * constants binding the same, so _check_delta is not run) */
        PyObject *empty = PyList_New(0);
        rc = empty == NULL ? -1 : step_record(st, name, fields, empty);
        Py_XDECREF(empty);
        if (rc == 0)
            st->checked++;
    } else if (rc == 0) {
        rc = step_checked(st, name, fields);
    }
    Py_DECREF(name);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *step_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"monitor", "rmap", "names", "name_of", "cache", "history", "quiet", "guard", "effect",
                         "effect_on", "effect_due", "breaches", "synced_key", "step_hooks", "watch_hooks", "checks",
                         NULL};
    PyObject *monitor, *rmap, *names, *name_of, *cache, *history, *quiet = NULL, *guard = NULL, *effect = NULL,
        *effect_on = NULL, *step_hooks = NULL, *watch_hooks = NULL, *checks = Py_None;
    int effect_due = -1, breaches = -1, synced_key = -1;
    /* (every keyword is optional to the parser, which takes no required one after an optional
     * one: all but `checks` are required here) */
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO!OO!O|$OOOO!pppO!O!O:StrictStep", kw, &monitor, &rmap,
                                     &PyDict_Type, &names, &name_of, &PyDict_Type, &cache, &history, &quiet, &guard,
                                     &effect, &PyFrozenSet_Type, &effect_on, &effect_due, &breaches, &synced_key,
                                     &PyList_Type, &step_hooks, &PyList_Type, &watch_hooks, &checks))
        return NULL;
    if (quiet == NULL || guard == NULL || effect == NULL || effect_on == NULL || step_hooks == NULL ||
        watch_hooks == NULL || effect_due < 0 || breaches < 0 || synced_key < 0) {
        PyErr_SetString(PyExc_TypeError, "StrictStep: every keyword argument but checks is required");
        return NULL;
    }
    /* checks: None, or (own_domains, live, inc_all, fused_skip, unfused_checks, unfused_reads,
     * inc_checks, variables_of), the parts of Monitor's _check_delta */
    int own_domains = 0;
    PyObject *live = NULL, *inc_all = NULL, *fused_skip = NULL, *unfused_checks = NULL, *unfused_reads = NULL,
             *inc_checks = NULL, *variables_of = NULL;
    if (checks != Py_None &&
        (!PyArg_ParseTuple(checks, "pOOOO!OO!O:StrictStep checks", &own_domains, &live, &inc_all, &fused_skip,
                           &PyList_Type, &unfused_checks, &unfused_reads, &PyList_Type, &inc_checks, &variables_of) ||
         !PyCallable_Check(variables_of) || (inc_all != Py_None && !PyCallable_Check(inc_all)))) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "StrictStep: checks' variables_of, and inc_all where given, must be callable");
        return NULL;
    }
    if (!PyCallable_Check(name_of) || (quiet != Py_None && !PyCallable_Check(quiet)) ||
        (guard != Py_None && !PyCallable_Check(guard)) ||
        ((effect_due || PySet_GET_SIZE(effect_on) > 0) && !PyCallable_Check(effect))) {
        PyErr_SetString(PyExc_TypeError, "StrictStep: name_of, and quiet, guard, effect where given, must be callable");
        return NULL;
    }
    PyObject *append = PyObject_GetAttrString(history, "append");
    if (append == NULL)
        return NULL;
    StrictStep *st = (StrictStep *)type->tp_alloc(type, 0);
    if (st == NULL) {
        Py_DECREF(append);
        return NULL;
    }
    st->monitor = Py_NewRef(monitor);
    st->rmap = Py_NewRef(rmap);
    st->names = Py_NewRef(names);
    st->name_of = Py_NewRef(name_of);
    st->cache = Py_NewRef(cache);
    st->quiet = Py_NewRef(quiet);
    st->guard = Py_NewRef(guard);
    st->effect = Py_NewRef(effect);
    st->effect_on = Py_NewRef(effect_on);
    st->history = Py_NewRef(history);
    st->append = append;
    st->step_hooks = Py_NewRef(step_hooks);
    st->watch_hooks = Py_NewRef(watch_hooks);
    st->effect_due = (char)effect_due;
    st->breaches = (char)breaches;
    st->synced_key = (char)synced_key;
    st->own_domains = (char)own_domains;
    st->live = Py_XNewRef(live);
    st->inc_all = Py_XNewRef(inc_all);
    st->fused_skip = Py_XNewRef(fused_skip);
    st->unfused_checks = Py_XNewRef(unfused_checks);
    st->unfused_reads = Py_XNewRef(unfused_reads);
    st->inc_checks = Py_XNewRef(inc_checks);
    st->variables_of = Py_XNewRef(variables_of);
    AttrMemo *memos[] = {&st->plain_checked_C, &st->plain_breach, &st->plain_synced_key, &st->plain_effect_due,
                         &st->plain_own_domains, &st->plain_bind};
    for (size_t i = 0; i < sizeof memos / sizeof memos[0]; i++)
        *memos[i] = (AttrMemo){0, -1};
    st->vectorcall = step_call;
    return (PyObject *)st;
}

static int step_traverse(PyObject *self, visitproc visit, void *arg) {
    StrictStep *st = (StrictStep *)self;
    Py_VISIT(st->monitor);
    Py_VISIT(st->rmap);
    Py_VISIT(st->names);
    Py_VISIT(st->name_of);
    Py_VISIT(st->cache);
    Py_VISIT(st->quiet);
    Py_VISIT(st->guard);
    Py_VISIT(st->effect);
    Py_VISIT(st->effect_on);
    Py_VISIT(st->history);
    Py_VISIT(st->append);
    Py_VISIT(st->step_hooks);
    Py_VISIT(st->watch_hooks);
    Py_VISIT(st->live);
    Py_VISIT(st->inc_all);
    Py_VISIT(st->fused_skip);
    Py_VISIT(st->unfused_checks);
    Py_VISIT(st->unfused_reads);
    Py_VISIT(st->inc_checks);
    Py_VISIT(st->variables_of);
    Py_VISIT(st->last_key);
    Py_VISIT(st->last_C);
    return 0;
}

static int step_clear(PyObject *self) {
    StrictStep *st = (StrictStep *)self;
    Py_CLEAR(st->monitor);
    Py_CLEAR(st->rmap);
    Py_CLEAR(st->names);
    Py_CLEAR(st->name_of);
    Py_CLEAR(st->cache);
    Py_CLEAR(st->quiet);
    Py_CLEAR(st->guard);
    Py_CLEAR(st->effect);
    Py_CLEAR(st->effect_on);
    Py_CLEAR(st->history);
    Py_CLEAR(st->append);
    Py_CLEAR(st->step_hooks);
    Py_CLEAR(st->watch_hooks);
    Py_CLEAR(st->live);
    Py_CLEAR(st->inc_all);
    Py_CLEAR(st->fused_skip);
    Py_CLEAR(st->unfused_checks);
    Py_CLEAR(st->unfused_reads);
    Py_CLEAR(st->inc_checks);
    Py_CLEAR(st->variables_of);
    Py_CLEAR(st->last_key);
    Py_CLEAR(st->last_C);
    return 0;
}

static void step_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    step_clear(self);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *step_get_history(PyObject *self, void *unused) {
    return history_get(((StrictStep *)self)->history);
}

static int step_set_history(PyObject *self, PyObject *value, void *unused) {
    StrictStep *st = (StrictStep *)self;
    return history_set(&st->history, &st->append, value, "StrictStep");
}

static PyMemberDef step_members[] = {
    {"steps", T_PYSSIZET, offsetof(StrictStep, steps), 0, "events the map bound"},
    {"checked", T_PYSSIZET, offsetof(StrictStep, checked), 0, "events synced and recorded"},
    {"tripped", T_BOOL, offsetof(StrictStep, tripped), 0, "the monitor reported a violation: events are ignored"},
    {"monitor", T_OBJECT, offsetof(StrictStep, monitor), READONLY, "the monitor whose step this is"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef step_getset[] = {
    {"history", step_get_history, step_set_history, "the deque the steps are recorded in", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject StrictStepType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_hicache_gate.StrictStep",
    .tp_basicsize = sizeof(StrictStep),
    .tp_dealloc = step_dealloc,
    .tp_traverse = step_traverse,
    .tp_clear = step_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(StrictStep, vectorcall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = step_new,
    .tp_members = step_members,
    .tp_getset = step_getset,
    .tp_doc = "strict mode's listener on an incremental map (monitors.runtime.Monitor._strict_step in C)",
};

/* The monitor's let-go (runtime.py's Monitor._gate_let_go, which defines it, in C): what a
 * drawn sample the gate let go for the budget costs the monitor, called by the gate as its
 * `let_go`. Most drawn samples of a budgeted canary are let go (~42 of the ~46 a kv_bytes
 * replay of the monitors bench draws), and in Python each was a frame, the next gap's draw,
 * the budget's lock and the worker watch's call: ~10k instructions. Here, in
 * `_gate_let_go`'s order:
 *   - a gap's sample (not weighted): the next gap, int(log(1 - draw()) / log1p(-rate)) (0 at
 *     rate >= 1, 2**62 at rate <= 0), as `Monitor._next_gap` draws it from the same seeded
 *     draw: the same libm calls on the same doubles, so the same gaps;
 *   - the count (`count`: the monitor's `budget_skipped` adds it to its own);
 *   - the monitor's `sampled` = False and `cause` = cause_draw or cause_weighted;
 *   - each of the monitor's watch hooks (the list, read at each call: appended to after the
 *     gate was made), hook(name, fields), name = names.get(action) or name_of(action).
 * It returns the gap (a gap's sample) or None; an error of a hook propagates after the count,
 * as the Python's does. */
typedef struct {
    PyObject_HEAD
    Py_ssize_t count;
    double rate;
    PyObject *owner;          /* the monitor */
    PyObject *draw;           /* its seeded draw, rng.random */
    PyObject *hooks;          /* its watch_hooks (a list) */
    PyObject *names;          /* a dict: action -> its name */
    PyObject *name_of;        /* name_of(action), for an action names lacks */
    PyObject *cause_draw;     /* the cause of a gap's sample let go */
    PyObject *cause_weighted; /* ... and of a drawn weighted event's */
    vectorcallfunc vectorcall;
} LetGo;

static PyObject *s_sampled, *s_cause;

/* The next gap, drawn as Monitor._next_gap draws it: a new int, or NULL with an error set */
static PyObject *letgo_next_gap(LetGo *lg) {
    if (lg->rate >= 1.0)
        return PyLong_FromLong(0);
    if (lg->rate <= 0.0)
        return PyLong_FromLongLong(1LL << 62);
    PyObject *u = PyObject_CallNoArgs(lg->draw);
    if (u == NULL)
        return NULL;
    double x = PyFloat_AsDouble(u);
    Py_DECREF(u);
    if (x == -1.0 && PyErr_Occurred())
        return NULL;
    return PyLong_FromDouble(log(1.0 - x) / log1p(-lg->rate));
}

static PyObject *letgo_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    LetGo *lg = (LetGo *)self;
    if (PyVectorcall_NARGS(nargsf) != 3 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "let_go(action, fields, weighted) takes 3 positional arguments");
        return NULL;
    }
    if (lg->owner == NULL) {      /* (cleared by the collector) */
        PyErr_SetString(PyExc_RuntimeError, "LetGo: cleared");
        return NULL;
    }
    PyObject *action = args[0], *fields = args[1];
    int weighted = PyObject_IsTrue(args[2]);
    if (weighted < 0)
        return NULL;
    PyObject *gap = Py_None;
    if (!weighted && (gap = letgo_next_gap(lg)) == NULL)
        return NULL;
    if (weighted)
        Py_INCREF(gap);
    lg->count++;
    if (PyObject_SetAttr(lg->owner, s_sampled, Py_False) < 0 ||
        PyObject_SetAttr(lg->owner, s_cause, weighted ? lg->cause_weighted : lg->cause_draw) < 0)
        goto fail;
    if (PyList_GET_SIZE(lg->hooks) > 0) {
        PyObject *name = action_name(lg->names, lg->name_of, action);
        if (name == NULL)
            goto fail;
        /* (step_hooks reads the list by index at each step: a hook may append to it, as the
         * Python's `for` sees an append) */
        int rc = step_hooks(lg->hooks, name, fields);
        Py_DECREF(name);
        if (rc < 0)
            goto fail;
    }
    return gap;
fail:
    Py_DECREF(gap);
    return NULL;
}

static PyObject *letgo_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"owner", "draw", "rate", "hooks", "names", "name_of", "cause_draw", "cause_weighted", NULL};
    PyObject *owner, *draw, *hooks, *names, *name_of, *cause_draw, *cause_weighted;
    double rate;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOdO!O!OOO:LetGo", kw, &owner, &draw, &rate, &PyList_Type, &hooks,
                                     &PyDict_Type, &names, &name_of, &cause_draw, &cause_weighted))
        return NULL;
    if (!PyCallable_Check(draw) || !PyCallable_Check(name_of)) {
        PyErr_SetString(PyExc_TypeError, "LetGo: draw and name_of must be callable");
        return NULL;
    }
    if (!(rate >= 0.0 && rate <= 1.0)) {
        PyErr_SetString(PyExc_ValueError, "LetGo: rate must be in [0, 1]");
        return NULL;
    }
    LetGo *lg = (LetGo *)type->tp_alloc(type, 0);
    if (lg == NULL)
        return NULL;
    lg->rate = rate;
    lg->owner = Py_NewRef(owner);
    lg->draw = Py_NewRef(draw);
    lg->hooks = Py_NewRef(hooks);
    lg->names = Py_NewRef(names);
    lg->name_of = Py_NewRef(name_of);
    lg->cause_draw = Py_NewRef(cause_draw);
    lg->cause_weighted = Py_NewRef(cause_weighted);
    lg->vectorcall = letgo_call;
    return (PyObject *)lg;
}

static int letgo_traverse(PyObject *self, visitproc visit, void *arg) {
    LetGo *lg = (LetGo *)self;
    Py_VISIT(lg->owner);
    Py_VISIT(lg->draw);
    Py_VISIT(lg->hooks);
    Py_VISIT(lg->names);
    Py_VISIT(lg->name_of);
    Py_VISIT(lg->cause_draw);
    Py_VISIT(lg->cause_weighted);
    return 0;
}

static int letgo_clear(PyObject *self) {
    LetGo *lg = (LetGo *)self;
    Py_CLEAR(lg->owner);
    Py_CLEAR(lg->draw);
    Py_CLEAR(lg->hooks);
    Py_CLEAR(lg->names);
    Py_CLEAR(lg->name_of);
    Py_CLEAR(lg->cause_draw);
    Py_CLEAR(lg->cause_weighted);
    return 0;
}

static void letgo_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    letgo_clear(self);
    Py_TYPE(self)->tp_free(self);
}

static PyMemberDef letgo_members[] = {
    {"count", T_PYSSIZET, offsetof(LetGo, count), READONLY, "drawn samples let go"},
    {"rate", T_DOUBLE, offsetof(LetGo, rate), READONLY, "the sample rate the gaps are drawn at"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject LetGoType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_hicache_gate.LetGo",
    .tp_basicsize = sizeof(LetGo),
    .tp_dealloc = letgo_dealloc,
    .tp_traverse = letgo_traverse,
    .tp_clear = letgo_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(LetGo, vectorcall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = letgo_new,
    .tp_members = letgo_members,
    .tp_doc = "a budgeted sample-mode monitor's let-go (monitors.runtime.Monitor._gate_let_go in C)",
};

static int intern_names(void) {
    struct { PyObject **slot; const char *text; } names[] = {
        {&s_bind, "bind"}, {&s_sync, "sync"}, {&s_breach, "breach"}, {&s_synced_key, "synced_key"},
        {&s_effect_due, "effect_due"}, {&s_checked_C, "_checked_C"}, {&s_fail, "fail"},
        {&s_report_breach, "_report_breach"},
        {&s_check_delta, "_check_delta"}, {&s_constants, "constants"}, {&s_action, "action"},
        {&s_own_domains, "own_domains"}, {&s_domains, "domains"}, {&s_live, "live"}, {&s_isdisjoint, "isdisjoint"},
        {&s_invariant, "invariant"}, {&s_sampled, "sampled"}, {&s_cause, "cause"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (*names[i].slot == NULL && (*names[i].slot = PyUnicode_InternFromString(names[i].text)) == NULL)
            return -1;
    }
    return 0;
}

static PyObject *abi(PyObject *self, PyObject *unused) {
    return PyLong_FromLong(ABI_VERSION);
}

static PyMethodDef methods[] = {
    {"abi", abi, METH_NOARGS, "the module's ABI version"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hicache_gate", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__hicache_gate(void) {
    if (PyType_Ready(&GateType) < 0 || PyType_Ready(&StrictStepType) < 0 || PyType_Ready(&LetGoType) < 0 ||
        intern_names() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Gate", (PyObject *)&GateType) < 0 ||
        PyModule_AddObjectRef(m, "StrictStep", (PyObject *)&StrictStepType) < 0 ||
        PyModule_AddObjectRef(m, "LetGo", (PyObject *)&LetGoType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
