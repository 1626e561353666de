/* The event bus's dispatch (hicache/runtime/events.py's PyBusCore, which defines it, in C):
 * `BusCore`, the base of EventBus, holding the listeners (a list the bus replaces, never
 * mutates: subscribe copies on write), the sequence number and the lock that serializes
 * events from the scheduler and transfer threads; `publish(action, args)` numbers the event
 * (args["seq"]) and calls each listener `fn(action, args)` under the lock.
 *
 * Why: a verified run publishes every protocol event (~700 a bench replay); in Python the
 * dispatch is a frame of ~50 opcodes around its lock, counter and calls, here the same
 * operations without the frame. Nothing is decided here that PyBusCore does not decide: the
 * same order (the number taken, written into args, then the listeners in list order), the
 * lock released on every exit, a listener's exception propagated after the release.
 *
 * Invariant: `seq` strictly increases per bus (each publish with listeners takes the next).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <pythread.h>

#define ABI_VERSION 1

typedef struct {
    PyObject_HEAD
    PyObject *listeners;
    long long seq;
    PyThread_type_lock lock;
} BusCore;

static PyObject *s_seq;

static PyObject *core_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_Format(PyExc_TypeError, "%s() takes no arguments", type->tp_name);
        return NULL;
    }
    BusCore *self = (BusCore *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    if ((self->lock = PyThread_allocate_lock()) == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    if ((self->listeners = PyList_New(0)) == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int core_traverse(PyObject *self, visitproc visit, void *arg) {
    Py_VISIT(((BusCore *)self)->listeners);
    return 0;
}

static int core_clear(PyObject *self) {
    Py_CLEAR(((BusCore *)self)->listeners);
    return 0;
}

static void core_dealloc(PyObject *self) {
    BusCore *b = (BusCore *)self;
    PyObject_GC_UnTrack(self);
    core_clear(self);
    if (b->lock != NULL)
        PyThread_free_lock(b->lock);
    Py_TYPE(self)->tp_free(self);
}

/* the lock (0), waited for as threading.Lock's acquire waits: with the GIL released (another
 * thread may hold the bus and need the GIL to finish its listeners) and interruptible, the
 * signal handlers run when a signal ends the wait (-1, the lock not taken: a handler raised,
 * KeyboardInterrupt, and the event is not published) */
static int take(PyThread_type_lock lock) {
    if (PyThread_acquire_lock_timed(lock, 0, 0) == PY_LOCK_ACQUIRED)
        return 0;
    for (;;) {
        PyLockStatus r;
        Py_BEGIN_ALLOW_THREADS
        r = PyThread_acquire_lock_timed(lock, -1, 1);
        Py_END_ALLOW_THREADS
        if (r == PY_LOCK_ACQUIRED)
            return 0;
        if (r == PY_LOCK_INTR && Py_MakePendingCalls() < 0)
            return -1;
    }
}

static PyObject *publish(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (n != 2) {
        PyErr_Format(PyExc_TypeError, "publish() takes 2 arguments (%zd given)", n);
        return NULL;
    }
    BusCore *b = (BusCore *)self;
    PyObject *listeners = b->listeners;
    if (listeners == NULL) {
        PyErr_SetString(PyExc_AttributeError, "'listeners'");
        return NULL;
    }
    int any = PyObject_IsTrue(listeners);
    if (any <= 0)
        return any < 0 ? NULL : Py_NewRef(Py_None);
    /* (held from here, across the wait and the calls: another thread, or a listener that
     * subscribes, replaces b->listeners, and this event still goes to the listeners it was
     * published to, as the Python loop's list) */
    Py_INCREF(listeners);
    if (take(b->lock) < 0) {
        Py_DECREF(listeners);
        return NULL;
    }
    PyObject *result = NULL, *it = NULL, *fn;
    PyObject *seq = PyLong_FromLongLong(++b->seq);
    if (seq == NULL)
        goto done;
    int err = PyDict_CheckExact(a[1]) ? PyDict_SetItem(a[1], s_seq, seq) : PyObject_SetItem(a[1], s_seq, seq);
    Py_DECREF(seq);
    if (err < 0)
        goto done;
    PyObject *argv[2] = {a[0], a[1]};
    if (PyList_CheckExact(listeners)) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(listeners); i++) {
            fn = Py_NewRef(PyList_GET_ITEM(listeners, i));
            PyObject *r = PyObject_Vectorcall(fn, argv, 2, NULL);
            Py_DECREF(fn);
            if (r == NULL)
                goto done;
            Py_DECREF(r);
        }
    } else {
        if ((it = PyObject_GetIter(listeners)) == NULL)
            goto done;
        while ((fn = PyIter_Next(it)) != NULL) {
            PyObject *r = PyObject_Vectorcall(fn, argv, 2, NULL);
            Py_DECREF(fn);
            if (r == NULL)
                goto done;
            Py_DECREF(r);
        }
        if (PyErr_Occurred())
            goto done;
    }
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(it);
    PyThread_release_lock(b->lock);
    Py_DECREF(listeners);
    return result;
}

static PyObject *core_seq(PyObject *self, void *unused) {
    return PyLong_FromLongLong(((BusCore *)self)->seq);
}

static PyMethodDef core_methods[] = {
    {"publish", (PyCFunction)(void (*)(void))publish, METH_FASTCALL,
     "publish(action, args): number the event (args['seq']) and call each listener, under the bus's lock"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef core_members[] = {
    {"listeners", T_OBJECT_EX, offsetof(BusCore, listeners), 0, "the listeners (a list, replaced on change)"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef core_getset[] = {
    {"seq", core_seq, NULL, "the last event's number (0: none yet)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject BusCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_hicache_eventbus.BusCore",
    .tp_basicsize = sizeof(BusCore),
    .tp_dealloc = core_dealloc,
    .tp_traverse = core_traverse,
    .tp_clear = core_clear,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = core_new,
    .tp_methods = core_methods,
    .tp_members = core_members,
    .tp_getset = core_getset,
    .tp_doc = "the event bus's listeners, sequence number, lock and dispatch (events.PyBusCore in C)",
};

static PyObject *abi(PyObject *self, PyObject *unused) {
    return PyLong_FromLong(ABI_VERSION);
}

static PyMethodDef methods[] = {
    {"abi", abi, METH_NOARGS, "the module's ABI version"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hicache_eventbus", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__hicache_eventbus(void) {
    if (PyType_Ready(&BusCoreType) < 0)
        return NULL;
    if (s_seq == NULL && (s_seq = PyUnicode_InternFromString("seq")) == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "BusCore", (PyObject *)&BusCoreType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
