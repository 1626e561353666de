/* Strict mode's per-page loops, as C over the same Python dicts, lists and sets: the incremental
 * HostTier map's writes of a node's pages, the host slot-state comparison, the device-page
 * holder counts, the dirty-slot and dirty-page tests of SlotInOneOwner and NoDoubleAllocation,
 * the HostTier map's event binders, and the generated fast paths' readers (fast_ap, no_ap). hicache/monitors/native.py builds and
 * loads this module; hicache/monitors/maps/loops.py (and rt.py, for the readers) holds the
 * Python each function replaces, which defines what it does and serves when this module cannot
 * be built.
 *
 * Why: strict mode's map writes each position of a node's pages once per spec variable, and
 * records the value it replaced (the delta). In bytecode each such write costs ~25 opcodes of
 * dispatch, reference counting and frame work around four dict and set operations; here it
 * costs those four operations. Nothing is decided here that the Python loops do not decide:
 * the same comparisons (`is`, then `==` with the same type: the type is tested first, a value
 * of another type being another value), the same order of reads, writes and delta entries, the
 * same exceptions (KeyError for a position outside a variable's domain).
 *
 * Invariant of every function: on an exception, the writes made before it stay made and
 * recorded in the delta (as the Python loop leaves them); the monitor stops on any exception.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <string.h>

#define ABI_VERSION 26

/* *out = x's value when x is exactly an int of at most one digit (|x| < 2**30: the positions,
 * slots and counts the maps hold), read off the object itself (1), else 0: PyLong_AsLong's
 * call, made for each value the loops compare or key, cost as much as their own work */
static inline int small_int(PyObject *x, long long *out) {
    if (!PyLong_CheckExact(x))
        return 0;
#if PY_VERSION_HEX >= 0x030C0000
    if (!PyUnstable_Long_IsCompact((PyLongObject *)x))
        return 0;
    *out = PyUnstable_Long_CompactValue((PyLongObject *)x);
#else
    Py_ssize_t size = Py_SIZE(x);
    if (size < -1 || size > 1)
        return 0;
    *out = size * (long long)((PyLongObject *)x)->ob_digit[0];
#endif
    return 1;
}

/* hash(key): a small int's hash is its value (-1, the error code, hashes as -2), computed
 * here without the call; any other key's by PyObject_Hash (-1 on an error) */
static inline Py_hash_t key_hash(PyObject *key) {
    long long v;
    if (small_int(key, &v))
        return v == -1 ? -2 : (Py_hash_t)v;
    return PyObject_Hash(key);
}

/* int_value of an exact int of more than one digit */
static int wide_int_value(PyObject *x, long long *out) {
    int over;
    *out = PyLong_AsLongLongAndOverflow(x, &over);
    return !over && *out > -(1LL << 61) && *out < (1LL << 61);
}

/* *out = x's value when x is exactly an int with |x| < 2**61 (1), else 0: the maps' slot
 * numbers, counts and pages, whose comparisons and sums the loops then make in C (the sum of
 * two such values fits 64 bits); any other value goes through the object API. (Inline: the
 * small ints its callers read, nearly all, are then read with no call.) */
static inline int int_value(PyObject *x, long long *out) {
    if (small_int(x, out))
        return 1;
    return PyLong_CheckExact(x) && wide_int_value(x, out);
}

/* old and v denote the same value for the map: the same object, or equal with the same type
 * (1 == True in Python, but a bool in an int variable is a different TLA+ value). -1: error. */
static inline int same_value(PyObject *old, PyObject *v) {
    if (old == v)
        return 1;
    if (Py_TYPE(old) != Py_TYPE(v))
        return 0;
    if (PyBool_Check(old))
        return 0;           /* (two bools, not the same object: True and False are singletons) */
    long long x, y;
    if (int_value(old, &x) && int_value(v, &y))
        return x == y;      /* (two exact ints, a slot number or a count: no comparison's call) */
    return PyObject_RichCompareBool(old, v, Py_EQ);
}

/* A dict's get and set by a key whose hash the caller computed once for them both (a page's
 * or slot's int: its lookup and write, each hashing it again, were a fifth of a write's cost);
 * hash -1: unknown, hashed here. The known-hash entry points are private C API, exported
 * through 3.12's headers; later versions hash again. */
static inline PyObject *dict_get_h(PyObject *d, PyObject *key, Py_hash_t hash) {
#if PY_VERSION_HEX < 0x030D0000
    if (hash != -1)
        return _PyDict_GetItem_KnownHash(d, key, hash);
#endif
    return PyDict_GetItemWithError(d, key);
}

static inline int dict_set_h(PyObject *d, PyObject *key, PyObject *v, Py_hash_t hash) {
#if PY_VERSION_HEX < 0x030D0000
    if (hash != -1)
        return _PyDict_SetItem_KnownHash(d, key, v, hash);
#endif
    return PyDict_SetItem(d, key, v);
}

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
/* a dict's entries as 3.11 lays them out (pos_entry) */
#define Py_BUILD_CORE
#include <internal/pycore_dict.h>
#undef Py_BUILD_CORE
#define HICACHE_POS_ENTRIES 1
#endif

/* d[q] (borrowed) for the exact dict d and q an exact int of at most one digit whose value is
 * k, read off d's entry number k where that entry is live and its key is exactly an int of
 * value k; NULL where it is not (no error: the caller looks q up). A dict's keys are unique,
 * so the live entry whose key equals q holds d[q], wherever it is, and an exact int equals q
 * when it has q's value (no Python code asked). A map's function of positions is
 * `dict.fromkeys(range(cap))`, grown in order and written in place: position k is entry k, so
 * the guards' per-page reads (first_page_where, breach_along) are one test each, not a probe
 * of the hash table (a wrong guess costs the lookup it did not save). */
#ifdef HICACHE_POS_ENTRIES
/* d's entry number k where it is live and its key is q itself or exactly an int of value k
 * (q NULL: the latter only), else NULL: the one test behind pos_entry's reads and the writes
 * in an entry (in_place_set, add_ref, fresh_pos_put) */
static inline PyDictKeyEntry *pos_entry_at(PyObject *d, PyObject *q, long long k) {
    PyDictObject *mp = (PyDictObject *)d;
    PyDictKeysObject *dk = mp->ma_keys;
    if (mp->ma_values == NULL && dk->dk_kind == DICT_KEYS_GENERAL && 0 <= k && k < dk->dk_nentries) {
        PyDictKeyEntry *ep = &DK_ENTRIES(dk)[k];
        long long kk;
        if (ep->me_key != NULL && ep->me_value != NULL &&
            (ep->me_key == q || (small_int(ep->me_key, &kk) && kk == k)))
            return ep;
    }
    return NULL;
}
#endif

static inline PyObject *pos_entry(PyObject *d, PyObject *q, long long k) {
#ifdef HICACHE_POS_ENTRIES
    PyDictKeyEntry *ep = pos_entry_at(d, q, k);
    return ep != NULL ? ep->me_value : NULL;
#else
    (void)d; (void)q; (void)k;
    return NULL;
#endif
}

/* KeyError(key) raised unless an error is set already; NULL */
static PyObject *key_missing(PyObject *key) {
    if (!PyErr_Occurred()) {
        PyObject *args = PyTuple_Pack(1, key);     /* (a tuple key would be taken as the args) */
        if (args != NULL) {
            PyErr_SetObject(PyExc_KeyError, args);
            Py_DECREF(args);
        }
    }
    return NULL;
}

/* d[key] (key's hash: hash, -1 when unknown), a new reference; KeyError when absent (as
 * `d[key]`). (Inline, as the get and set above and a write's comparison and record: a
 * call's frame around each cost a fifth of the lookup it makes, at each page and variable.) */
static inline PyObject *dict_at_h(PyObject *d, PyObject *key, Py_hash_t hash) {
    PyObject *v = dict_get_h(d, key, hash);
    return v != NULL ? Py_NewRef(v) : key_missing(key);
}

/* d[key], a new reference; KeyError when absent (as `d[key]`). */
static PyObject *dict_at(PyObject *d, PyObject *key) {
    return dict_at_h(d, key, -1);
}

/* dict_at_h for a dict d of positions (a map's function of positions, or any dict): an exact
 * int key read off its entry where that entry holds it (pos_entry), else looked up as
 * dict_at_h looks it up. Why: the removal's moves, spares and releases, a node's fills and
 * the re-mapping's slot writes read ~46k positions a replay, each a probe of the hash table of
 * ~50 instructions; the entry's test is ~10. */
static inline PyObject *pos_at_h(PyObject *d, PyObject *key, Py_hash_t hash) {
    long long k;
    PyObject *v;
    if (PyDict_CheckExact(d) && small_int(key, &k) && (v = pos_entry(d, key, k)) != NULL)
        return Py_NewRef(v);
    return dict_at_h(d, key, hash);
}

/* The items of an iterable as its iterator yields them, for the loops over a sync's dirty
 * elements (slots, pages, positions: sets nearly always): an exact set's or frozenset's read
 * off its table in place (_PySet_NextEntry, which scans the table in the set iterator's own
 * order, from the position it left), with the set iterator's RuntimeError where the set's size
 * changed between two items (Python code a step ran, a comparison's or a hash's, changed it:
 * the iterator tests the size at each step, before its scan, as here); any other iterable
 * through its iterator. The set is the caller's argument, which its caller holds (borrowed).
 * Why: a set iterator's step is a call of ~50 instructions, ~20k a replay over the dirty sets;
 * the scan in place ~15. (Before 3.13 only: _PySet_NextEntry left the public headers there.) */
typedef struct {
    PyObject *it;       /* the iterator (any other iterable), else NULL */
    PyObject *set;      /* the set read in place (borrowed), NULL once it ended or failed */
    Py_ssize_t pos;     /* the scan's next table index */
    Py_ssize_t used;    /* the set's size when the walk began */
} Items;

/* the walk of x's items begun; 0, or -1 on an error (x not iterable: its iterator's error) */
static int items_begin(Items *w, PyObject *x) {
    w->it = NULL;
    w->set = NULL;
    w->pos = 0;
    w->used = 0;
#if PY_VERSION_HEX < 0x030D0000
    if (PyAnySet_CheckExact(x)) {
        w->set = x;
        w->used = PySet_GET_SIZE(x);
        return 0;
    }
#endif
    w->it = PyObject_GetIter(x);
    return w->it == NULL ? -1 : 0;
}

/* the walk's next item, a new reference; NULL at its end or on an error (PyErr_Occurred) */
static inline PyObject *items_next(Items *w) {
    if (w->it != NULL)
        return PyIter_Next(w->it);
#if PY_VERSION_HEX < 0x030D0000
    if (w->set == NULL)
        return NULL;
    if (PySet_GET_SIZE(w->set) != w->used) {
        PyErr_SetString(PyExc_RuntimeError, "Set changed size during iteration");
        w->set = NULL;
        return NULL;
    }
#ifdef HICACHE_POS_ENTRIES
    /* (3.11's set_next, the scan _PySet_NextEntry makes, inline: the table and mask read at each
     * step as it reads them, each unused or dummy slot passed over. Why: the call's frame and
     * its type test were as much again as the scan of a sparse table, at ~20k items a replay) */
    PySetObject *so = (PySetObject *)w->set;
    Py_ssize_t i = w->pos, mask = so->mask;
    setentry *e = &so->table[i];
    while (i <= mask && (e->key == NULL || e->key == _PySet_Dummy)) {
        i++;
        e++;
    }
    w->pos = i + 1;
    if (i > mask) {
        w->set = NULL;      /* (its end) */
        return NULL;
    }
    return Py_NewRef(e->key);
#else
    PyObject *key;
    Py_hash_t hash;
    if (_PySet_NextEntry(w->set, &w->pos, &key, &hash) <= 0) {
        w->set = NULL;      /* (its end; an error, -1, only for no set: it is one) */
        return NULL;
    }
    return Py_NewRef(key);
#endif
#else
    return NULL;
#endif
}

/* p in so for an exact set or frozenset so and an exact int p of at most one digit of value v,
 * decided off the slot its hash starts the probe at, as 3.11's set_lookkey decides it there:
 * an unused slot (no key) ends the probe, not found (0); a slot holding p itself, or an exact
 * int of p's hash and value (equal to p, as the comparison lookkey would make says, which runs
 * no code), found (1); anything else, -2: the caller asks PySet_Contains (its full probe).
 * Why: NoDoubleAllocation's test asks the free set about each dirty page, ~3.5k a replay, and
 * the call's hashing and probe loop were ~65 instructions against this test's ~10; the holder
 * counts' pass (count_pages_run) asks it of the dirty pages before adding a page, most of
 * which the allocator's calls made dirty already. */
static inline int set_has_small(PyObject *so, PyObject *p, long long v) {
#ifdef HICACHE_POS_ENTRIES
    PySetObject *s = (PySetObject *)so;
    Py_hash_t h = v == -1 ? -2 : (Py_hash_t)v;
    setentry *e = &s->table[(size_t)h & (size_t)s->mask];
    long long kv;
    if (e->key == NULL)
        return 0;
    if (e->hash == h && (e->key == p || (small_int(e->key, &kv) && kv == v)))
        return 1;
#else
    (void)so; (void)p; (void)v;
#endif
    return -2;
}

/* The dealloc of this module's collected types (StepsTable, QuietProbe, MapStep, WatchProbe):
 * untracked, their references dropped by their own tp_clear, freed. */
static void gc_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    Py_TYPE(self)->tp_clear(self);
    PyObject_GC_Del(self);
}

/* A delta-recorded write: var, key and old appended to the delta, which is flat (three items an
 * entry, no tuple of its own: the ~11k entries of a strict replay, each kept until its step
 * leaves the history, were as many tuples allocated and released, ~2M instructions a replay).
 * All three or none: an append that fails (memory) takes back the ones before it, so the delta
 * stays whole entries (undo reads it three items at a time), as a Python `extend` of the
 * three leaves it. */
static inline int record(PyObject *delta, PyObject *var, PyObject *key, PyObject *old) {
    Py_ssize_t n = PyList_GET_SIZE(delta);
    if (PyList_Append(delta, var) == 0 && PyList_Append(delta, key) == 0 && PyList_Append(delta, old) == 0)
        return 0;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (PyList_SetSlice(delta, n, PY_SSIZE_T_MAX, NULL) < 0)
        PyErr_Clear();      /* (a shrink that fails: the append's own error is the one raised) */
    PyErr_Restore(type, value, tb);
    return -1;
}

/* A run of writes to one dict of positions d (a map's function of positions) by one loop:
 * where pos_entry finds a position's entry, the write replaces the entry's value in place, as
 * the dict's own replacement of an existing key's value does it (insertdict: the entry's value
 * swapped, the one it held released), save the version tag (PEP 509), which only the dict's
 * own writes can renew (its counter is no exported symbol). So the run keeps its last such
 * write (the position and the value it replaced), and when it ends (in_place_end) that write
 * is made again through the dict's API: the entry given back the value it replaced, then
 * written its value, which renews the tag once for the run. Once the loop returns, d holds
 * what the same writes through the API leave and its tag is new, as after them; inside the
 * run, only Python code the loop itself runs (a comparison or truth test of a value that is no
 * int, a finalizer its allocations let the collector run) could read d with its contents ahead
 * of its tag (nothing keys what it reads of a map's dict by the tag). A value the collector
 * tracks is written in place only into a dict it tracks already (else through the API, which
 * starts tracking it: MAINTAIN_TRACKING). Why: a write through the API costs ~110
 * instructions, hashing and probing d's table again for the entry the read before it found;
 * in place ~15 (the map's ~16k delta-recorded writes a replay). 3.11 only (pos_entry's
 * layout): elsewhere every write goes through the API. */
typedef struct {
    PyObject *d;        /* the dict the run writes (borrowed: its loop's caller holds it) */
    long long k;        /* the position the last write in place wrote, -1: none yet */
    PyObject *prev;     /* the value it replaced (the reference d held), NULL: none */
} InPlace;


/* d[key] = v (hash: key's, -1 when unknown) for the run ip of writes to d: in place where
 * pos_entry_at finds key's entry, else through the API; 0, or -1 on an error. (Inline: a
 * call's frame cost as much again as the write in place.) */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline int in_place_set(InPlace *ip, PyObject *key, Py_hash_t hash, PyObject *v) {
#ifdef HICACHE_POS_ENTRIES
    long long k;
    PyDictKeyEntry *ep;
    if (PyDict_CheckExact(ip->d) && small_int(key, &k) && (!PyType_IS_GC(Py_TYPE(v)) || PyObject_GC_IsTracked(ip->d)) &&
        (ep = pos_entry_at(ip->d, key, k)) != NULL) {
        PyObject *was = ep->me_value;
        ep->me_value = Py_NewRef(v);
        ip->k = k;
        /* (d's reference to the value replaced kept for in_place_end; the one kept before
         * released last, as insertdict releases the value it replaces: it may run code) */
        Py_XSETREF(ip->prev, was);
        return 0;
    }
#endif
    return dict_set_h(ip->d, key, v, hash);
}

/* the run ip ends: when some write was made in place, d's version tag renewed by the last one
 * made again through the API (its entry given back the value it replaced, then written its
 * value). Where that entry is no longer found, or holds the value it replaced again, nothing is
 * made again: only a write through the API after the last write in place can have moved it or
 * put the value back, and that write renewed the tag (or the value written in place was the
 * one it replaced, a value unequal to itself: d unchanged). On an error already set (err < 0)
 * the renewal is made all the same and that error kept. err, or -1 when the renewal failed. */
static int in_place_end(InPlace *ip, int err) {
    PyObject *prev = ip->prev;
    if (prev == NULL)
        return err;
    long long k = ip->k;
    ip->prev = NULL;
    ip->k = -1;
    PyObject *type = NULL, *value = NULL, *tb = NULL;
    if (err < 0)
        PyErr_Fetch(&type, &value, &tb);
    PyObject *d = ip->d;
    int rc = 0;
#ifdef HICACHE_POS_ENTRIES
    PyDictKeyEntry *ep = pos_entry_at(d, NULL, k);
    if (ep != NULL && ep->me_value != prev) {
        /* (the entry's value taken with d's reference, prev given d's; the write through the
         * API then puts the value back, releasing prev: the tag renewed) */
        PyObject *key = Py_NewRef(ep->me_key), *cur = ep->me_value;
        ep->me_value = prev;
        prev = NULL;
        rc = dict_set_h(d, key, cur, key_hash(key));
        Py_DECREF(cur);
        Py_DECREF(key);
    }
#else
    (void)k;
#endif
    Py_XDECREF(prev);
    if (err < 0) {
        if (rc < 0)
            PyErr_Clear();
        PyErr_Restore(type, value, tb);
        return err;
    }
    return rc;
}

/* refs[h] = refs.get(h, 0) + k; slots.add(h): refs the run rp's dict, h's count read off
 * its entry where that entry holds h (pos_entry_at) and written in place there (as
 * in_place_set writes), else through the API.
 * Why: the map's reference counts are laid out by slot (host_tier_inc: dict.fromkeys over
 * every spec slot), so each count's update, ~12k a replay, is its entry's read and write, not
 * two probes of the table (~160 instructions). */
static int add_ref(InPlace *rp, PyObject *slots, PyObject *h, long k) {
    PyObject *refs = rp->d;
    long long c;
#ifdef HICACHE_POS_ENTRIES
    long long hk;
    PyDictKeyEntry *ep;
    if (PyDict_CheckExact(refs) && small_int(h, &hk) && (ep = pos_entry_at(refs, h, hk)) != NULL &&
        int_value(ep->me_value, &c)) {
        /* (the count in h's entry, an exact int: its sum made in C and written there, as
         * in_place_set writes, the entry found once; making an int runs no code) */
        PyObject *nv = PyLong_FromLongLong(c + k);
        if (nv == NULL)
            return -1;
        PyObject *was = ep->me_value;
        ep->me_value = nv;
        rp->k = hk;
        Py_XSETREF(rp->prev, was);
        return PySet_Add(slots, h);
    }
#endif
    Py_hash_t hash = key_hash(h);
    if (hash == -1)
        return -1;
    PyObject *cur = dict_get_h(refs, h, hash);
    if (cur == NULL && PyErr_Occurred())
        return -1;
    PyObject *nv;
    if (cur != NULL && int_value(cur, &c)) {
        nv = PyLong_FromLongLong(c + k);        /* (a count: its sum in C; no code runs) */
    } else {
        PyObject *step = PyLong_FromLong(k);
        if (step == NULL)
            return -1;
        /* (cur held across the sum, which may run code) */
        Py_XINCREF(cur);
        nv = cur == NULL ? (Py_INCREF(step), step) : PyNumber_Add(cur, step);
        Py_XDECREF(cur);
        Py_DECREF(step);
    }
    if (nv == NULL)
        return -1;
    int rc = in_place_set(rp, h, hash, nv);
    Py_DECREF(nv);
    if (rc < 0)
        return -1;
    return PySet_Add(slots, h);
}

/* d[key] = v unless old (d[key] as read before) is the same value, the write recorded as
 * var, key, old (`record`) and key added to dirty (when dirty is not NULL); 1 when it wrote, 0 when
 * not, -1 on an error; key's hash: hash, -1 when unknown; d the run ip's (in_place_set). */
static inline int write_if_changed_h(InPlace *ip, PyObject *key, Py_hash_t hash, PyObject *old, PyObject *v,
                                     PyObject *var, PyObject *delta, PyObject *dirty) {
    int same = same_value(old, v);
    if (same)
        return same < 0 ? -1 : 0;
    if (record(delta, var, key, old) < 0 || in_place_set(ip, key, hash, v) < 0 ||
        (dirty != NULL && PySet_Add(dirty, key) < 0))
        return -1;
    return 1;
}

/* each of names[i] interned into *slots[i] where that is still NULL; 0, or -1 on an error
 * (those interned before it are kept: each name is tested alone, so a later call interns
 * only what is missing and no name is ever read NULL after a partial failure) */
static int intern_names(const char *const *names, PyObject **const *slots, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (*slots[i] == NULL && (*slots[i] = PyUnicode_InternFromString(names[i])) == NULL)
            return -1;
    return 0;
}

/* the public form of CPython's positional-count check (its own is private API) */
static int arity(const char *fn, Py_ssize_t n, Py_ssize_t want) {
    if (n == want)
        return 1;
    PyErr_Format(PyExc_TypeError, "%s expected %zd arguments, got %zd", fn, want, n);
    return 0;
}

static int check_type(PyObject *o, PyTypeObject *t, const char *fn, const char *what) {
    if (Py_IS_TYPE(o, t))
        return 0;
    PyErr_Format(PyExc_TypeError, "%s: %s must be a %s, not %.100s", fn, what, t->tp_name, Py_TYPE(o)->tp_name);
    return -1;
}

/* x[i] for a sequence index i, a new reference: a list's or tuple's own item when x is exactly
 * one and i an exact int within it, else x[i] through the object API (as Python indexes) */
static PyObject *item_at(PyObject *x, PyObject *i) {
    long long v;
    if (int_value(i, &v) && v >= 0) {
        if (PyList_CheckExact(x) && v < PyList_GET_SIZE(x))
            return Py_NewRef(PyList_GET_ITEM(x, v));
        if (PyTuple_CheckExact(x) && v < PyTuple_GET_SIZE(x))
            return Py_NewRef(PyTuple_GET_ITEM(x, v));
    }
    return PyObject_GetItem(x, i);
}

/* x[i] = v, as item_at reads (a list's own slot written in place); 0, or -1 on an error */
static int item_put(PyObject *x, PyObject *i, PyObject *v) {
    long long k;
    if (PyList_CheckExact(x) && int_value(i, &k) && k >= 0 && k < PyList_GET_SIZE(x)) {
        PyObject *old = PyList_GET_ITEM(x, k);
        PyList_SET_ITEM(x, k, Py_NewRef(v));
        Py_DECREF(old);
        return 0;
    }
    return PyObject_SetItem(x, i, v);
}

/* the truth of `a <op> b` (op: Py_EQ or Py_NE) as Python decides it, with no identity
 * shortcut, compared in C when both are exact ints with |x| < 2**61 (no rich comparison's
 * call); -1 on an error */
static int ints_or_compare(PyObject *a, PyObject *b, int op) {
    long long x, y;
    if (int_value(a, &x) && int_value(b, &y))
        return op == Py_EQ ? x == y : x != y;
    PyObject *r = PyObject_RichCompare(a, b, op);
    int t = r == NULL ? -1 : PyObject_IsTrue(r);
    Py_XDECREF(r);
    return t;
}

/* d[p] = v for each p of the list pos whose value is not v already, each write recorded as
 * (var, p, old) and p added to dirty (unless dirty is NULL: pos known dirty already); 0, or -1
 * on an error */
static int fill_each(PyObject *d, PyObject *pos, PyObject *v, PyObject *var, PyObject *delta, PyObject *dirty) {
    InPlace ip = {d, -1, NULL};
    int rc = 0;
    for (Py_ssize_t i = 0; rc >= 0 && i < PyList_GET_SIZE(pos); i++) {
        PyObject *p = PyList_GET_ITEM(pos, i);
        Py_INCREF(p);
        Py_hash_t hash = key_hash(p);
        PyObject *old = hash == -1 ? NULL : pos_at_h(d, p, hash);
        rc = old == NULL ? -1 : write_if_changed_h(&ip, p, hash, old, v, var, delta, dirty);
        Py_XDECREF(old);
        Py_DECREF(p);
    }
    return in_place_end(&ip, rc < 0 ? -1 : 0);
}

/* fill(d, pos, v, var, delta, dirty): fill_each. */
static PyObject *fill(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("fill", n, 6))
        return NULL;
    PyObject *d = a[0], *pos = a[1], *v = a[2], *var = a[3], *delta = a[4], *dirty = a[5];
    if (check_type(d, &PyDict_Type, "fill", "d") || check_type(pos, &PyList_Type, "fill", "pos") ||
        check_type(delta, &PyList_Type, "fill", "delta") || check_type(dirty, &PySet_Type, "fill", "dirty") ||
        fill_each(d, pos, v, var, delta, dirty) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* the values a removal's moves read or wrote at the positions lo..lo+n-1 that its spare writes
 * then read, so that they are not looked up again (every moved page's source is one): vals[i]
 * d[lo + i]'s value (a strong reference), NULL where none is known */
typedef struct {
    Py_ssize_t n;
    PyObject **vals;
} Seen;

/* one item q -> src of a removal's origin, with the index into Seen's range of each of its
 * positions (-1: outside it, or no exact int) and q's and src's hashes (-1: unknown, hashed
 * where used); strong references */
typedef struct {
    PyObject *q, *src;
    Py_ssize_t qi, si;
    Py_hash_t qh, sh;
} Step;

static Py_ssize_t seen_index(PyObject *x, long long lo, Py_ssize_t n) {
    long long k;
    return int_value(x, &k) && k >= lo && k - lo < n ? (Py_ssize_t)(k - lo) : -1;
}

/* the items of the dict origin in its order, with their indices into range(lo, lo + n) (made
 * once for every column); *count set, and *ints cleared when a key is no exact int (a key
 * equal to an int, True or 1.0, writes that int's position unseen by the indices); NULL on
 * an error */
static Step *steps_of(PyObject *origin, long long lo, Py_ssize_t n, Py_ssize_t *count, int *ints) {
    Py_ssize_t cap = PyDict_GET_SIZE(origin);
    Step *steps = PyMem_New(Step, cap + 1);
    if (steps == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    Py_ssize_t it = 0, i = 0;
    PyObject *q, *src;
    while (i < cap && PyDict_Next(origin, &it, &q, &src)) {
        long long k;
        *ints = *ints && int_value(q, &k);
        /* each exact int's hash (q's, src's), which runs no Python code and cannot fail (the
         * borrowed q and src stay valid); any other key's is left to the writes (-1), which
         * hash it where they read it, as they did before, its errors included */
        Py_hash_t qh = PyLong_CheckExact(q) ? key_hash(q) : -1, sh = PyLong_CheckExact(src) ? key_hash(src) : -1;
        steps[i++] = (Step){Py_NewRef(q), Py_NewRef(src), seen_index(q, lo, n), seen_index(src, lo, n), qh, sh};
    }
    *count = i;
    return steps;
}

static void steps_free(Step *steps, Py_ssize_t count) {
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_DECREF(steps[i].q);
        Py_DECREF(steps[i].src);
    }
    PyMem_Free(steps);
}

/* d[q] = d[src] for each q -> src of steps (in order) where the value differs, each write
 * recorded as (var, q, old), the values read and left at Seen's positions kept in seen (when
 * not NULL); 0, or -1 on an error */
static int move_each(PyObject *d, Step *steps, Py_ssize_t count, PyObject *var, PyObject *delta, Seen *seen) {
    InPlace ip = {d, -1, NULL};
    for (Py_ssize_t i = 0; i < count; i++) {
        Step *st = &steps[i];
        PyObject *old = pos_at_h(d, st->q, st->qh);
        PyObject *v = old == NULL ? NULL : pos_at_h(d, st->src, st->sh);
        int rc = v == NULL ? -1 : write_if_changed_h(&ip, st->q, st->qh, old, v, var, delta, NULL);
        if (rc >= 0 && seen != NULL) {
            if (st->si >= 0)
                Py_XSETREF(seen->vals[st->si], Py_NewRef(v));
            /* (d[q] is v when written, else still old: a value equal to v, perhaps not v) */
            if (st->qi >= 0)
                Py_XSETREF(seen->vals[st->qi], Py_NewRef(rc ? v : old));
        }
        Py_XDECREF(old);
        Py_XDECREF(v);
        if (rc < 0)
            return in_place_end(&ip, -1);
    }
    return in_place_end(&ip, 0);
}

/* d[q] = v for each key q of the list qs where the value differs, each write recorded as
 * (var, q, old), d[q] read from seen where it knows it (seen: NULL, or indexed as qs);
 * 0, or -1 on an error */
static int spare_each(PyObject *d, PyObject *qs, PyObject *v, PyObject *var, PyObject *delta, Seen *seen) {
    InPlace ip = {d, -1, NULL};
    int rc = 0;
    for (Py_ssize_t i = 0; rc >= 0 && i < PyList_GET_SIZE(qs); i++) {
        PyObject *q = Py_NewRef(PyList_GET_ITEM(qs, i));
        Py_hash_t qh = key_hash(q);
        PyObject *old = qh == -1 ? NULL
                        : seen != NULL && seen->vals[i] != NULL ? Py_NewRef(seen->vals[i]) : pos_at_h(d, q, qh);
        rc = old == NULL ? -1 : write_if_changed_h(&ip, q, qh, old, v, var, delta, NULL);
        Py_XDECREF(old);
        Py_DECREF(q);
    }
    return in_place_end(&ip, rc < 0 ? -1 : 0);
}

/* the list of the ints lo..hi-1 */
static PyObject *ints_list(Py_ssize_t lo, Py_ssize_t hi) {
    PyObject *qs = PyList_New(hi > lo ? hi - lo : 0);
    for (Py_ssize_t i = lo; qs != NULL && i < hi; i++) {
        PyObject *q = PyLong_FromSsize_t(i);
        if (q == NULL)
            Py_CLEAR(qs);
        else
            PyList_SET_ITEM(qs, i - lo, q);
    }
    return qs;
}

/* the list of range(a, b)'s ints (a and b taken as range takes them, by __index__) */
static PyObject *range_list(PyObject *a, PyObject *b) {
    Py_ssize_t lo = PyNumber_AsSsize_t(a, PyExc_OverflowError), hi = PyNumber_AsSsize_t(b, PyExc_OverflowError);
    if ((lo == -1 || hi == -1) && PyErr_Occurred())
        return NULL;
    return ints_list(lo, hi);
}

/* for each p of the list holes whose value h = d[p] is true (a slot), refs[h] -= 1 (from 0
 * when absent) and h added to slots; 0, or -1 on an error */
static int release_each(PyObject *d, PyObject *holes, PyObject *refs, PyObject *slots) {
    InPlace rp = {refs, -1, NULL};
    int rc = 0;
    for (Py_ssize_t i = 0; rc >= 0 && i < PyList_GET_SIZE(holes); i++) {
        PyObject *p = PyList_GET_ITEM(holes, i);
        Py_INCREF(p);
        Py_hash_t ph = key_hash(p);
        PyObject *h = ph == -1 ? NULL : pos_at_h(d, p, ph);
        long long hv;
        /* (an exact int's truth, a slot number's, tested in C) */
        int truth = h == NULL ? -1 : int_value(h, &hv) ? hv != 0 : PyObject_IsTrue(h);
        rc = truth < 0 ? -1 : truth ? add_ref(&rp, slots, h, -1) : 0;
        Py_XDECREF(h);
        Py_DECREF(p);
    }
    return in_place_end(&rp, rc < 0 ? -1 : 0);
}

/* move(d, origin, var, delta): move_each over the dict origin. */
static PyObject *move(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("move", n, 4))
        return NULL;
    PyObject *d = a[0], *origin = a[1], *var = a[2], *delta = a[3];
    if (check_type(d, &PyDict_Type, "move", "d") || check_type(origin, &PyDict_Type, "move", "origin") ||
        check_type(delta, &PyList_Type, "move", "delta"))
        return NULL;
    Py_ssize_t count;
    int ints = 1;
    Step *steps = steps_of(origin, 0, 0, &count, &ints);
    if (steps == NULL)
        return NULL;
    int rc = move_each(d, steps, count, var, delta, NULL);
    steps_free(steps, count);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* spare(d, lo, hi, v, var, delta): spare_each over range(lo, hi). */
static PyObject *spare(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("spare", n, 6))
        return NULL;
    PyObject *d = a[0], *v = a[3], *var = a[4], *delta = a[5];
    if (check_type(d, &PyDict_Type, "spare", "d") || check_type(delta, &PyList_Type, "spare", "delta"))
        return NULL;
    PyObject *qs = range_list(a[1], a[2]);
    int rc = qs == NULL ? -1 : spare_each(d, qs, v, var, delta, NULL);
    Py_XDECREF(qs);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* release(d, holes, refs, slots): release_each over the list holes. */
static PyObject *release(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("release", n, 4))
        return NULL;
    PyObject *d = a[0], *holes = a[1], *refs = a[2], *slots = a[3];
    if (check_type(d, &PyDict_Type, "release", "d") || check_type(holes, &PyList_Type, "release", "holes") ||
        check_type(refs, &PyDict_Type, "release", "refs") || check_type(slots, &PySet_Type, "release", "slots") ||
        release_each(d, holes, refs, slots) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* d[p] = v for each pair of zip(pos, values) (pos a list) where old != v, recorded as
 * (var, p, old), p added to dirty (unless dirty is NULL: pos known dirty already), and the page's slot reference moved from old to v
 * (refs[old] -= 1 and refs[v] += 1 for a true one, each such slot added to slots); 0, or -1 on
 * an error (values not a sequence: TypeError) */
static int write_slots_each(PyObject *d, PyObject *pos, PyObject *values, PyObject *var, PyObject *refs,
                            PyObject *delta, PyObject *dirty, PyObject *slots) {
    PyObject *vals = PySequence_Fast(values, "write_slots: values must be a sequence");
    if (vals == NULL)
        return -1;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(vals);
    InPlace rp = {refs, -1, NULL};
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(pos) && i < m; i++) {
        PyObject *p = PyList_GET_ITEM(pos, i), *v = PySequence_Fast_GET_ITEM(vals, i);
        Py_INCREF(p);
        Py_INCREF(v);
        Py_hash_t hash = key_hash(p);
        PyObject *old = hash == -1 ? NULL : pos_at_h(d, p, hash);
        long long ov, vv;
        /* (exact ints, the slot numbers the map writes: compared and tested in C) */
        int ints = old != NULL && int_value(old, &ov) && int_value(v, &vv);
        int differ = old == NULL ? -1 : ints ? ov != vv : PyObject_RichCompareBool(old, v, Py_NE);
        if (differ < 0)
            rc = -1;
        else if (differ) {
            int t_old = 0, t_v = 0;
            if (record(delta, var, p, old) < 0 || dict_set_h(d, p, v, hash) < 0 ||
                (dirty != NULL && PySet_Add(dirty, p) < 0) || (t_old = ints ? ov != 0 : PyObject_IsTrue(old)) < 0 || (t_old && add_ref(&rp, slots, old, -1) < 0) ||
                (t_v = ints ? vv != 0 : PyObject_IsTrue(v)) < 0 || (t_v && add_ref(&rp, slots, v, 1) < 0))
                rc = -1;
        }
        Py_XDECREF(old);
        Py_DECREF(v);
        Py_DECREF(p);
    }
    Py_DECREF(vals);
    return in_place_end(&rp, rc);
}

/* write_slots_each with the values given as C ints (vals[i] the value of pos[i], i < n: the
 * slot numbers node_slot_ints computed), each made an int object only where it is written or
 * compared with an old value that is no exact int: the same reads, comparisons, writes, delta
 * entries and reference counts as write_slots_each over the list of those ints; 0, or -1 on an
 * error */
static int write_slot_ints(PyObject *d, PyObject *pos, const long long *vals, Py_ssize_t n, PyObject *var,
                           PyObject *refs, PyObject *delta, PyObject *dirty, PyObject *slots) {
    InPlace ip = {d, -1, NULL}, rp = {refs, -1, NULL};
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(pos) && i < n; i++) {
        PyObject *p = PyList_GET_ITEM(pos, i), *v = NULL;
        Py_INCREF(p);
        long long ov, vv = vals[i];
        Py_hash_t hash = key_hash(p);
        PyObject *old = hash == -1 ? NULL : pos_at_h(d, p, hash);
        int ints = old != NULL && int_value(old, &ov);
        if (old != NULL && !ints)
            v = PyLong_FromLongLong(vv);
        int differ = old == NULL || (!ints && v == NULL) ? -1 : ints ? ov != vv : PyObject_RichCompareBool(old, v, Py_NE);
        if (differ > 0 && v == NULL && (v = PyLong_FromLongLong(vv)) == NULL)
            differ = -1;
        if (differ < 0)
            rc = -1;
        else if (differ) {
            int t_old = 0;
            if (record(delta, var, p, old) < 0 || in_place_set(&ip, p, hash, v) < 0 ||
                (dirty != NULL && PySet_Add(dirty, p) < 0) || (t_old = ints ? ov != 0 : PyObject_IsTrue(old)) < 0 ||
                (t_old && add_ref(&rp, slots, old, -1) < 0) || (vv != 0 && add_ref(&rp, slots, v, 1) < 0))
                rc = -1;
        }
        Py_XDECREF(v);
        Py_XDECREF(old);
        Py_DECREF(p);
    }
    /* (both runs end, each renewing its dict's tag; the first error kept) */
    rc = in_place_end(&ip, rc);
    return in_place_end(&rp, rc);
}

/* write_slots(d, pos, values, var, refs, delta, dirty, slots): write_slots_each. */
static PyObject *write_slots(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("write_slots", n, 8))
        return NULL;
    PyObject *d = a[0], *pos = a[1], *values = a[2], *var = a[3], *refs = a[4], *delta = a[5], *dirty = a[6],
             *slots = a[7];
    if (check_type(d, &PyDict_Type, "write_slots", "d") || check_type(pos, &PyList_Type, "write_slots", "pos") ||
        check_type(refs, &PyDict_Type, "write_slots", "refs") ||
        check_type(delta, &PyList_Type, "write_slots", "delta") ||
        check_type(dirty, &PySet_Type, "write_slots", "dirty") ||
        check_type(slots, &PySet_Type, "write_slots", "slots") ||
        write_slots_each(d, pos, values, var, refs, delta, dirty, slots) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* diff_bytes(state, seen): the indices where the bytes of the buffer `state` (a C-contiguous
 * array: the host slots' states) differ from the bytearray `seen`, which then holds them. */
static PyObject *diff_bytes(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("diff_bytes", n, 2))
        return NULL;
    PyObject *seen = a[1];
    if (check_type(seen, &PyByteArray_Type, "diff_bytes", "seen"))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(a[0], &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    PyObject *out = NULL;
    if (view.len != PyByteArray_GET_SIZE(seen)) {
        PyErr_Format(PyExc_ValueError, "diff_bytes: %zd bytes of state against %zd seen", view.len,
                     PyByteArray_GET_SIZE(seen));
        goto done;
    }
    const char *now = (const char *)view.buf;
    char *was = PyByteArray_AS_STRING(seen);
    out = PyList_New(0);
    if (out == NULL || memcmp(now, was, (size_t)view.len) == 0)
        goto done;
    for (Py_ssize_t i = 0; i < view.len; i++) {
        if (now[i] == was[i])
            continue;
        was[i] = now[i];
        PyObject *k = PyLong_FromSsize_t(i);
        if (k == NULL || PyList_Append(out, k) < 0) {
            Py_XDECREF(k);
            Py_CLEAR(out);
            goto done;
        }
        Py_DECREF(k);
    }
done:
    PyBuffer_Release(&view);
    return out;
}

/* refs.get(h, 0), a new reference */
static PyObject *count_of(PyObject *refs, PyObject *h, PyObject *zero) {
    PyObject *v = PyDict_GetItemWithError(refs, h);
    if (v == NULL) {
        if (PyErr_Occurred())
            return NULL;
        v = zero;
    }
    Py_INCREF(v);
    return v;
}

/* x == k for a small int k: 1, 0, or -1 on error */
static int equals(PyObject *x, PyObject *k) {
    return PyObject_RichCompareBool(x, k, Py_EQ);
}

/* count_pages's work for the run ip of writes to counts (ip->d): counts[p] += k (from 0) for each
 * p of the sequence pages (None: none) that is not `none`, each added to dirty unless it is
 * None; 0, or -1 on an error. A count read off p's entry (pos_entry_at) is written back there,
 * as in_place_set writes (the run's end, in_place_end, renews counts' tag): the device-page
 * holder counts are keyed in the order the allocator first handed the pages out, page p at
 * entry p nearly always. Why: the write through the API, ~110 instructions, probed the table
 * again for the entry the read found, at each of ~3.5k counts a replay; the commit
 * (commit_rows) keeps one run over all its chains, so the tag is renewed once a commit. */
static int count_pages_run(InPlace *ip, PyObject *pages, PyObject *k, PyObject *dirty, PyObject *none) {
    PyObject *counts = ip->d;
    if (pages == Py_None)
        return 0;
    PyObject *seq = PySequence_Fast(pages, "count_pages: pages must be a sequence");
    if (seq == NULL)
        return -1;
    int rc = 0;
    long long nv_, kv;
    int nint = int_value(none, &nv_), kint = int_value(k, &kv);
    for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *p = PySequence_Fast_GET_ITEM(seq, i);
        Py_INCREF(p);
        /* (exact ints, what pages, NoPage and the counts are: compared and added in C, the
         * sum a cached small int; anything else as Python compares and adds it) */
        long long pv, cv;
        int is_none = nint && int_value(p, &pv) ? pv == nv_ : PyObject_RichCompareBool(p, none, Py_EQ);
        if (is_none < 0)
            rc = -1;
        else if (!is_none) {
            /* (p hashed once for its read and write; the read off p's entry where it holds p,
             * as pos_at_h reads a position, but absent here is a count of 0, not a KeyError) */
            Py_hash_t ph = key_hash(p);
            long long pk;
            PyObject *cur = NULL, *nv;
#ifdef HICACHE_POS_ENTRIES
            PyDictKeyEntry *ep;
            if (ph != -1 && kint && PyDict_CheckExact(counts) && small_int(p, &pk) &&
                (ep = pos_entry_at(counts, p, pk)) != NULL && int_value(ep->me_value, &cv)) {
                /* (an exact int count in p's entry: the sum made in C and written there, as
                 * in_place_set writes, the entry found once; making an int runs no code) */
                if ((nv = PyLong_FromLongLong(cv + kv)) == NULL) {
                    rc = -1;
                } else {
                    PyObject *was = ep->me_value;
                    ep->me_value = nv;
                    ip->k = pk;
                    Py_XSETREF(ip->prev, was);
                    /* (dirty.add(p), passed over where dirty, an exact set, holds p already:
                     * the add would find it and change nothing) */
                    if (dirty != Py_None && !(PySet_CheckExact(dirty) && set_has_small(dirty, p, pk) == 1) &&
                        PySet_Add(dirty, p) < 0)
                        rc = -1;
                }
                Py_DECREF(p);
                continue;
            }
#endif
            if (ph != -1 && PyDict_CheckExact(counts) && small_int(p, &pk))
                cur = pos_entry(counts, p, pk);
            if (cur == NULL && ph != -1)
                cur = dict_get_h(counts, p, ph);
            if (cur != NULL && kint && int_value(cur, &cv))
                nv = PyLong_FromLongLong(cv + kv);
            else if (cur != NULL)
                nv = PyNumber_Add(cur, k);
            else if (PyErr_Occurred())
                nv = NULL;
            else if (PyLong_CheckExact(k))
                nv = Py_NewRef(k);              /* (0 + k is k itself for an exact int) */
            else {
                PyObject *zero = PyLong_FromLong(0);    /* (0 + k as Python adds it: TRUE makes 1) */
                nv = zero == NULL ? NULL : PyNumber_Add(zero, k);
                Py_XDECREF(zero);
            }
            if (nv == NULL || dict_set_h(counts, p, nv, ph) < 0 || (dirty != Py_None && PySet_Add(dirty, p) < 0))
                rc = -1;
            Py_XDECREF(nv);
        }
        Py_DECREF(p);
    }
    Py_DECREF(seq);
    return rc;
}

/* count_pages(counts, pages, k, dirty, none): counts[p] += k (from 0) for each p of the
 * sequence pages (None: none) that is not `none`, each added to dirty unless it is None. */
static PyObject *count_pages(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("count_pages", n, 5))
        return NULL;
    PyObject *counts = a[0], *dirty = a[3];
    if (check_type(counts, &PyDict_Type, "count_pages", "counts"))
        return NULL;
    if (dirty != Py_None && check_type(dirty, &PySet_Type, "count_pages", "dirty"))
        return NULL;
    InPlace ip = {counts, -1, NULL};
    if (in_place_end(&ip, count_pages_run(&ip, a[1], a[2], dirty, a[4])) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* the states slot_owner_breach tells apart, interned */
static PyObject *s_state_idle, *s_state_reserved;

/* st == text for the interned text `interned`, as PyUnicode_CompareWithASCIIString compares a
 * str: an interned exact str equals it exactly when it is that object (one interned object a
 * value), the map's own names; any other str compared */
static int state_is(PyObject *st, PyObject *interned, const char *text) {
    if (st == interned)
        return 1;
    if (PyUnicode_CheckExact(st) && PyUnicode_CHECK_INTERNED(st))
        return 0;
    return PyUnicode_Check(st) && PyUnicode_CompareWithASCIIString(st, text) == 0;
}

/* refs.get(h, 0) for h of hash `hash`, a new reference; an empty dict is not searched (the
 * caller hashed h already, as the search would), and a small exact int h is read off its
 * entry where that entry holds it (pos_entry: the map's reference counts are laid out by slot,
 * `dict.fromkeys` over every spec slot, slot h at entry h; ~15k reads a replay, each a probe
 * of the table of ~50 instructions against the entry's test of ~10) */
static PyObject *count_of_h(PyObject *refs, PyObject *h, Py_hash_t hash, PyObject *zero) {
    long long k;
    PyObject *v = NULL;
    if (PyDict_GET_SIZE(refs) != 0 && (!PyDict_CheckExact(refs) || !small_int(h, &k) ||
                                       (v = pos_entry(refs, h, k)) == NULL))
        v = dict_get_h(refs, h, hash);
    if (v == NULL) {
        if (PyErr_Occurred())
            return NULL;
        v = zero;
    }
    return Py_NewRef(v);
}

/* a count's value when it is an exact int (zero: the count of an absent slot, read as 0) */
static int count_value(PyObject *c, PyObject *zero, long long *out) {
    if (c == zero) {
        *out = 0;
        return 1;
    }
    return int_value(c, out);
}

/* slot_owner_breach(names, slots, tree_refs, backup_refs, pf_refs): SlotInOneOwner's
 * element-local test over the spec slots h of the iterable `slots` (h > len(names) skipped),
 * in its order: with t = tree_refs.get(h, 0), f = backup_refs.get(h, 0) + pf_refs.get(h, 0)
 * and st = names[h - 1], slot h is owned as its state says when st == "idle": t = f = 0;
 * st == "reserved": t = 0, f = 1; any other state: t = 1, f = 0. None when every one is,
 * else the first that is not, as (h, st, t, f). An exact int slot is hashed once for its
 * three gets; f is made only for the witness when its counts are exact ints. */
static PyObject *slot_owner_breach(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("slot_owner_breach", n, 5))
        return NULL;
    PyObject *names = a[0], *tree = a[2], *backup = a[3], *pf = a[4];
    static const char *const state_names[] = {"idle", "reserved"};
    PyObject **const state_slots[] = {&s_state_idle, &s_state_reserved};
    if (check_type(tree, &PyDict_Type, "slot_owner_breach", "tree_refs") ||
        check_type(backup, &PyDict_Type, "slot_owner_breach", "backup_refs") ||
        check_type(pf, &PyDict_Type, "slot_owner_breach", "pf_refs") || intern_names(state_names, state_slots, 2) < 0)
        return NULL;
    Py_ssize_t len = PyObject_Length(names);
    if (len < 0)
        return NULL;
    Items w;
    if (items_begin(&w, a[1]) < 0)
        return NULL;
    PyObject *zero = PyLong_FromLong(0), *one = PyLong_FromLong(1), *nlen = PyLong_FromSsize_t(len);
    PyObject *h, *out = NULL;
    int err = zero == NULL || one == NULL || nlen == NULL;
    /* (the map's own types, a tuple of names and exact int slots and counts: indexed, added
     * and compared in C; anything else through the object API, as Python does it) */
    int seq = PyTuple_CheckExact(names) || PyList_CheckExact(names);
    while (!err && out == NULL && (h = items_next(&w)) != NULL) {
        PyObject *t = NULL, *b = NULL, *p = NULL, *f = NULL, *idx = NULL, *st = NULL;
        long long hv, tv, bv, pv;
        int hint = seq && int_value(h, &hv);
        int beyond = hint ? hv > len : PyObject_RichCompareBool(h, nlen, Py_GT);
        if (beyond < 0)
            err = 1;
        else if (!beyond) {
            int ints = 0;
            Py_hash_t hash = hint ? PyObject_Hash(h) : -1;      /* (an exact int's: cannot fail) */
            if (hint ? (t = count_of_h(tree, h, hash, zero)) == NULL || (b = count_of_h(backup, h, hash, zero)) == NULL ||
                               (p = count_of_h(pf, h, hash, zero)) == NULL
                     : (t = count_of(tree, h, zero)) == NULL || (b = count_of(backup, h, zero)) == NULL ||
                               (p = count_of(pf, h, zero)) == NULL)
                err = 1;
            else if ((ints = hint && hv >= 1 && hv <= PySequence_Fast_GET_SIZE(names) && count_value(t, zero, &tv) &&
                             count_value(b, zero, &bv) && count_value(p, zero, &pv)))
                st = Py_NewRef(PySequence_Fast_GET_ITEM(names, hv - 1));    /* (1 <= h <= len) */
            else if ((f = PyNumber_Add(b, p)) == NULL || (idx = PyNumber_Subtract(h, one)) == NULL ||
                     (st = PyObject_GetItem(names, idx)) == NULL)
                err = 1;
            if (!err) {
                int idle = state_is(st, s_state_idle, "idle");
                int reserved = !idle && state_is(st, s_state_reserved, "reserved");
                /* (t, f) must be (0, 0), (0, 1) or (1, 0) */
                int t_want0 = idle || reserved, f_want1 = reserved;
                int t_ok = ints ? tv == (t_want0 ? 0 : 1) : equals(t, t_want0 ? zero : one);
                int f_ok = t_ok == 1 ? (ints ? bv + pv == (f_want1 ? 1 : 0) : equals(f, f_want1 ? one : zero)) : t_ok;
                if (t_ok < 0 || f_ok < 0)
                    err = 1;
                else if (!(t_ok && f_ok) && ((ints && (f = PyLong_FromLongLong(bv + pv)) == NULL) ||
                                             (out = PyTuple_Pack(4, h, st, t, f)) == NULL))
                    err = 1;
            }
        }
        Py_XDECREF(t);
        Py_XDECREF(b);
        Py_XDECREF(p);
        Py_XDECREF(f);
        Py_XDECREF(idx);
        Py_XDECREF(st);
        Py_DECREF(h);
    }
    Py_XDECREF(w.it);
    Py_XDECREF(zero);
    Py_XDECREF(one);
    Py_XDECREF(nlen);
    if (err || PyErr_Occurred()) {
        Py_XDECREF(out);
        return NULL;
    }
    if (out == NULL)
        Py_RETURN_NONE;
    return out;
}

/* held_once_or_free(pages, holders, free): NoDoubleAllocation's test of the dirty device
 * pages: True when every page p of the iterable, with k = holders.get(p, 0) positions
 * holding it, has 0 <= k <= 1 and is free exactly when no position holds it
 * ((k == 1) != (p in free)); False at the first that does not. */
static PyObject *held_once_or_free(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("held_once_or_free", n, 3))
        return NULL;
    PyObject *holders = a[1], *free_ = a[2];
    if (check_type(holders, &PyDict_Type, "held_once_or_free", "holders"))
        return NULL;
    Items w;
    if (items_begin(&w, a[0]) < 0)
        return NULL;
    PyObject *zero = PyLong_FromLong(0), *one = PyLong_FromLong(1), *p;
    int ok = zero != NULL && one != NULL, err = !ok;
    while (ok && (p = items_next(&w)) != NULL) {
        /* (Python's order: k > 1, k < 0, then k == 1 against p in free, each only if needed;
         * k read off p's entry where it holds p, count_of_h: the holder counts are keyed in the
         * order the pages were first handed out, page p at entry p nearly always, ~3.5k reads a
         * replay, each a probe of the table of ~70 instructions against the entry's ~10) */
        Py_hash_t ph = key_hash(p);
        PyObject *k = ph == -1 ? NULL : count_of_h(holders, p, ph, zero);
        int above, below, once;
        long long kv;
        if (k != NULL && int_value(k, &kv)) {
            /* (an exact int count, what the maps keep: its order without the comparisons' calls) */
            above = kv > 1;
            below = above ? 1 : kv < 0;
            once = below ? -1 : kv == 1;
        } else {
            above = k == NULL ? -1 : PyObject_RichCompareBool(k, one, Py_GT);
            below = above != 0 ? above : PyObject_RichCompareBool(k, zero, Py_LT);
            once = below != 0 ? -1 : PyObject_RichCompareBool(k, one, Py_EQ);
        }
        /* (p in free: for an exact set or frozenset and an exact int p, its own lookup,
         * PySet_Contains, which `in` reaches through the sequence protocol's dispatch; a set p
         * (which `in` retries as a frozenset) or any other free as `in` decides it) */
        int in_free = -1;
        long long pv;
        if (below == 0 && once >= 0) {
            if (!PyAnySet_CheckExact(free_) || !PyLong_CheckExact(p))
                in_free = PySequence_Contains(free_, p);
            else if (!small_int(p, &pv) || (in_free = set_has_small(free_, p, pv)) == -2)
                in_free = PySet_Contains(free_, p);
        }
        if (above < 0 || (above == 0 && below < 0) || (below == 0 && (once < 0 || in_free < 0)))
            err = 1;
        ok = !err && below == 0 && once != in_free;
        Py_XDECREF(k);
        Py_DECREF(p);
    }
    Py_XDECREF(w.it);
    Py_XDECREF(zero);
    Py_XDECREF(one);
    if (err || PyErr_Occurred())
        return NULL;
    return PyBool_FromLong(ok);
}

/* overwrite(d, values): d[i] = values[i] for each index i of the sequence values (a padded
 * row's first positions, its chain's pages), no delta: the dict is a new row's own copy. */
static PyObject *overwrite(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("overwrite", n, 2))
        return NULL;
    PyObject *d = a[0];
    if (check_type(d, &PyDict_Type, "overwrite", "d"))
        return NULL;
    PyObject *seq = PySequence_Fast(a[1], "overwrite: values must be a sequence");
    if (seq == NULL)
        return NULL;
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *k = PyLong_FromSsize_t(i);
        rc = k == NULL ? -1 : PyDict_SetItem(d, k, PySequence_Fast_GET_ITEM(seq, i));
        Py_XDECREF(k);
    }
    Py_DECREF(seq);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* d[k] = v for the dict d, a copy made by the caller that no one else has seen, where its entry
 * number k is live and holds exactly an int of value k (pos_entry's test: a copy of
 * `dict.fromkeys(range(L))` keeps its entries in order): written in that entry, no probe of the
 * table (1); else nothing written (0), the caller sets it. (The entry's old value is released
 * after the write; a value a pad holds too, which the copy shares with it, is not freed.) */
static inline int fresh_pos_put(PyObject *d, long long k, PyObject *v) {
#ifdef HICACHE_POS_ENTRIES
    /* (a value the collector tracks only into a dict it tracks: the copy of an untracked pad
     * is untracked, and the API's write would start tracking it, MAINTAIN_TRACKING) */
    PyDictKeyEntry *ep;
    if ((!PyType_IS_GC(Py_TYPE(v)) || PyObject_GC_IsTracked(d)) && (ep = pos_entry_at(d, NULL, k)) != NULL) {
        PyObject *old = ep->me_value;
        ep->me_value = Py_NewRef(v);
        Py_DECREF(old);
        return 1;
    }
#else
    (void)d; (void)k; (void)v;
#endif
    return 0;
}

/* padded_row(pad, pages, fcn, kk): fcn(d, kk) for d a copy of the exact dict pad with
 * d[i] = pages[i] for each index i of the sequence pages (loops.py's py_padded_row: a chain's
 * page row, the all-NoPage row's dict of positions 0..MaxLen-1 with the chain's pages over its
 * first positions, IncrementalRows._padded). Why in C: it was a frame around a copy, the
 * overwrite's probe of the table at each page and Fcn's call, ~5.4k instructions a row; the
 * copy is written in its entries here (fresh_pos_put). */
static PyObject *padded_make(PyObject *pad, PyObject *pages, PyObject *fcn, PyObject *kk) {
    if (check_type(pad, &PyDict_Type, "padded_row", "pad"))
        return NULL;
    PyObject *seq = PySequence_Fast(pages, "padded_row: pages must be a sequence");
    if (seq == NULL)
        return NULL;
    PyObject *d = PyDict_Copy(pad), *out = NULL;
    int rc = d == NULL ? -1 : 0;
    /* (no Python code runs in the loop: int keys, and each replaced value the pad holds too) */
    for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *v = PySequence_Fast_GET_ITEM(seq, i);
        if (fresh_pos_put(d, i, v))
            continue;
        PyObject *k = PyLong_FromSsize_t(i);
        rc = k == NULL ? -1 : PyDict_SetItem(d, k, v);
        Py_XDECREF(k);
    }
    Py_DECREF(seq);
    if (rc == 0) {
        PyObject *argv[] = {d, kk};
        out = PyObject_Vectorcall(fcn, argv, 2, NULL);
    }
    Py_XDECREF(d);
    return out;
}

static PyObject *padded_row(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("padded_row", n, 4))
        return NULL;
    return padded_make(a[0], a[1], a[2], a[3]);
}

/* byte_names(raw, table): tuple(table[b] for b in raw), raw exact bytes and table a list or
 * a tuple (loops.py's py_byte_names, which defines it: the from-scratch HostTier map's slot
 * names, one a host slot, ~150 instructions a slot through map() and the table's
 * __getitem__). A byte past the table: the table's own IndexError. */
static PyObject *byte_names(PyObject *self, PyObject *const *a, Py_ssize_t nargs) {
    if (!arity("byte_names", nargs, 2))
        return NULL;
    PyObject *raw = a[0], *table = a[1];
    if (!PyBytes_CheckExact(raw)) {
        PyErr_Format(PyExc_TypeError, "byte_names: raw must be bytes, not %.100s", Py_TYPE(raw)->tp_name);
        return NULL;
    }
    if (!PyList_CheckExact(table) && !PyTuple_CheckExact(table)) {
        PyErr_Format(PyExc_TypeError, "byte_names: table must be a list or a tuple, not %.100s",
                     Py_TYPE(table)->tp_name);
        return NULL;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(raw);
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(raw);
    PyObject *out = PyTuple_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        /* (the table read at each byte, as map() reads it: no Python code runs in between) */
        PyObject *v = b[i] < PySequence_Fast_GET_SIZE(table) ? Py_NewRef(PySequence_Fast_GET_ITEM(table, b[i]))
                                                             : PySequence_GetItem(table, b[i]);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, v);
    }
    return out;
}

/* chain_rows(rows, n, pad, empty, fcn, kk, none): the from-scratch chain map's variables over
 * its chains 1..n, (rot, len, page, built) (loops.py's py_chain_rows, which defines it:
 * CPReplayMap.state). Why in C: the loop was ~40 bytecodes a chain around padded_row's call,
 * in every sample-mode check (a from-scratch map's state). */
static PyObject *chain_rows(PyObject *self, PyObject *const *a, Py_ssize_t nargs) {
    if (!arity("chain_rows", nargs, 7))
        return NULL;
    PyObject *rows = a[0], *pad = a[2], *empty = a[3], *fcn = a[4], *kk = a[5], *none = a[6];
    if (check_type(rows, &PyDict_Type, "chain_rows", "rows"))
        return NULL;
    Py_ssize_t n = -1;
    if (PyLong_CheckExact(a[1])) {
        int over = 0;
        long long v = PyLong_AsLongLongAndOverflow(a[1], &over);
        if (v == -1 && PyErr_Occurred())
            return NULL;
        if (!over && v >= 0 && v < (1LL << 31))
            n = (Py_ssize_t)v;
    }
    if (n < 0) {
        PyErr_SetString(PyExc_TypeError, "chain_rows: n must be an int in [0, 2**31)");
        return NULL;
    }
    PyObject *rot = PyTuple_New(n), *ln = PyTuple_New(n), *page = PyTuple_New(n), *built = PyDict_New();
    PyObject *out = NULL;
    if (rot == NULL || ln == NULL || page == NULL || built == NULL)
        goto done;
    for (Py_ssize_t c = 1; c <= n; c++) {
        PyObject *key = PyLong_FromSsize_t(c);
        if (key == NULL)
            goto done;
        PyObject *entry = PyDict_GetItemWithError(rows, key);   /* (borrowed) */
        if (entry == NULL && PyErr_Occurred()) {
            Py_DECREF(key);
            goto done;
        }
        PyObject *r = none, *pages = NULL;
        Py_ssize_t len = 0;
        if (entry != NULL) {
            if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2) {
                PyErr_Format(PyExc_TypeError, "chain_rows: chain %zd's entry must be a tuple (rot, pages)", c);
                Py_DECREF(key);
                goto done;
            }
            r = PyTuple_GET_ITEM(entry, 0);
            pages = PyTuple_GET_ITEM(entry, 1);
            if (!PyList_CheckExact(pages) && !PyTuple_CheckExact(pages)) {
                PyErr_Format(PyExc_TypeError, "chain_rows: chain %zd's pages must be a list or a tuple, not %.100s",
                             c, Py_TYPE(pages)->tp_name);
                Py_DECREF(key);
                goto done;
            }
            len = PySequence_Fast_GET_SIZE(pages);
        }
        PyTuple_SET_ITEM(rot, c - 1, Py_NewRef(r));
        PyObject *count = PyLong_FromSsize_t(len);
        if (count == NULL) {
            Py_DECREF(key);
            goto done;
        }
        PyTuple_SET_ITEM(ln, c - 1, count);
        PyObject *row = NULL;
        if (len > 0) {
            /* (pages.count(none) == len: every page compared as list.count compares, the
             * identity first; the pages held while the comparisons may run Python code) */
            Py_INCREF(pages);
            Py_ssize_t nones = 0;
            for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(pages); i++) {
                PyObject *p = Py_NewRef(PySequence_Fast_GET_ITEM(pages, i));
                int eq = PyObject_RichCompareBool(p, none, Py_EQ);
                Py_DECREF(p);
                if (eq < 0) {
                    Py_DECREF(pages);
                    Py_DECREF(key);
                    goto done;
                }
                nones += eq;
            }
            row = nones == PySequence_Fast_GET_SIZE(pages) ? Py_NewRef(empty) : padded_make(pad, pages, fcn, kk);
            PyObject *pair = row == NULL ? NULL : PyTuple_Pack(2, row, pages);
            int rc = pair == NULL ? -1 : PyDict_SetItem(built, key, pair);
            Py_XDECREF(pair);
            Py_DECREF(pages);
            if (rc < 0) {
                Py_XDECREF(row);
                Py_DECREF(key);
                goto done;
            }
        } else {
            row = Py_NewRef(empty);
        }
        Py_DECREF(key);
        PyTuple_SET_ITEM(page, c - 1, row);
    }
    out = PyTuple_Pack(4, rot, ln, page, built);
done:
    Py_XDECREF(rot);
    Py_XDECREF(ln);
    Py_XDECREF(page);
    Py_XDECREF(built);
    return out;
}

/* ints_within(pages, n, none): whether every item of the iterable pages is an exact int
 * that is in 0..n-1 or equal to `none` (a device page row's pages: PageIds or NoPage, no
 * bool, no float equal to one of them); stops at the first that is not. n and none are
 * ints of 64 bits. */
static PyObject *ints_within(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("ints_within", n, 3))
        return NULL;
    long long hi = PyLong_AsLongLong(a[1]), none = hi == -1 && PyErr_Occurred() ? 0 : PyLong_AsLongLong(a[2]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *it = PyObject_GetIter(a[0]);
    if (it == NULL)
        return NULL;
    int ok = 1;
    PyObject *p;
    while (ok && (p = PyIter_Next(it)) != NULL) {
        if (!PyLong_CheckExact(p)) {
            ok = 0;
        } else {
            int over;
            long long v = PyLong_AsLongLongAndOverflow(p, &over);
            ok = !over && ((0 <= v && v < hi) || v == none);
        }
        Py_DECREF(p);
    }
    Py_DECREF(it);
    if (PyErr_Occurred())
        return NULL;
    return PyBool_FromLong(ok);
}

static PyObject *s_rot, *s_len, *s_page;

/* x[k] for a small int k (0 or 1: a row's items), a new reference, as item_at reads */
static PyObject *item_k(PyObject *x, long k) {
    PyObject *i = PyLong_FromLong(k), *v = i == NULL ? NULL : item_at(x, i);
    Py_XDECREF(i);
    return v;
}

/* pages.count(none) != len(pages) for a list or tuple of pages (as tuple.count compares:
 * PyObject_RichCompareBool, identity first): 1 when some page is not `none`, 0, -1 on an error */
static int some_page(PyObject *pages, PyObject *none) {
    PyObject *seq = PySequence_Fast(pages, "commit_rows: pages must be a sequence");
    if (seq == NULL)
        return -1;
    int some = 0;
    for (Py_ssize_t i = 0; some == 0 && i < PySequence_Fast_GET_SIZE(seq); i++) {
        /* (the item held while compared: an __eq__ may shrink a list, as list.count holds it) */
        PyObject *item = Py_NewRef(PySequence_Fast_GET_ITEM(seq, i));
        int eq = PyObject_RichCompareBool(item, none, Py_EQ);
        Py_DECREF(item);
        some = eq < 0 ? -1 : !eq;
    }
    Py_DECREF(seq);
    return some;
}

/* list(seq), a new reference, for an exact tuple seq a new tuple of its items instead, which
 * edit_put writes in place before anyone else sees it and commit_rows then takes as the
 * variable's new value itself (no list made and turned into a tuple: ~500 instructions a
 * variable, three at most syncs) */
static PyObject *edit_copy(PyObject *seq) {
    if (!PyTuple_CheckExact(seq))
        return PySequence_List(seq);
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    PyObject *t = PyTuple_New(n);
    for (Py_ssize_t k = 0; t != NULL && k < n; k++)
        PyTuple_SET_ITEM(t, k, Py_NewRef(PyTuple_GET_ITEM(seq, k)));
    return t;
}

/* (*copy)[i] = v for a copy edit_copy made, as a list's item is written (item_put): a tuple
 * copy's item in place at an index 0 <= i < len, else the copy turned into a list first (a
 * list's negative index, or its IndexError or TypeError); 0, or -1 on an error */
static int edit_put(PyObject **copy, PyObject *i, PyObject *v) {
    long long k;
    if (PyTuple_CheckExact(*copy)) {
        if (int_value(i, &k) && k >= 0 && k < PyTuple_GET_SIZE(*copy)) {
            PyObject *old = PyTuple_GET_ITEM(*copy, k);
            PyTuple_SET_ITEM(*copy, k, Py_NewRef(v));
            /* (a collection between the copy and this write, which Python code may run, can
             * have untracked the copy, then holding none but atomic items: tracked again
             * before it holds a value the collector tracks, as a list turned into a tuple is) */
            if (PyObject_IS_GC(v) && !PyObject_GC_IsTracked(*copy))
                PyObject_GC_Track(*copy);
            Py_DECREF(old);
            return 0;
        }
        PyObject *l = PySequence_List(*copy);
        if (l == NULL)
            return -1;
        Py_SETREF(*copy, l);
    }
    return item_put(*copy, i, v);
}

/* *copy = list(seq) at the first edit (NULL before; edit_copy), then copy[i] = v; 0, or -1 on
 * an error */
static int edit(PyObject **copy, PyObject *seq, PyObject *i, PyObject *v) {
    if (*copy == NULL && (*copy = edit_copy(seq)) == NULL)
        return -1;
    return edit_put(copy, i, v);
}

/* how commit_rows builds a chain's page row: fn(pages), or, fn NULL, padded_make(pad, pages,
 * fcn, kk) (the device-page sync's, for the map's own _padded: its work, with no frame) */
typedef struct {
    PyObject *fn, *pad, *fcn, *kk;
} Padding;

/* the writes commit_rows makes for one chain c of changed, new its (rot, pages); 0, or -1 on
 * an error (the order of loops.py's py_commit_rows: its reads, writes and calls) */
static int commit_chain(PyObject *const *a, const Padding *padded, InPlace *hp, PyObject *c, PyObject *new,
                        PyObject *unused, PyObject *const *seq0, PyObject **seq1, PyObject *dchains,
                        PyObject *dpages) {
    PyObject *rows = a[1], *page_rows = a[3], *empty = a[6], *none = a[8];
    PyObject *old = PyDict_GetItemWithError(rows, c);
    if (old == NULL && PyErr_Occurred())
        return -1;
    old = Py_NewRef(old == NULL ? unused : old);
    PyObject *r = NULL, *pages = NULL, *old_pages = NULL, *one = NULL, *i = NULL, *v = NULL, *ln = NULL;
    int rc = -1, ne = ints_or_compare(new, old, Py_NE);
    if (ne <= 0) {
        rc = ne;
        goto done;
    }
    if (PySet_Add(dchains, c) < 0 || (r = item_k(new, 0)) == NULL || (pages = item_k(new, 1)) == NULL ||
        (one = PyLong_FromLong(1)) == NULL || (i = PyNumber_Subtract(c, one)) == NULL ||
        (old_pages = item_k(old, 1)) == NULL)
        goto done;
    int paged = ints_or_compare(pages, old_pages, Py_NE);
    if (paged < 0)
        goto done;
    if (paged) {
        /* (count_pages(holders, old_pages, -1, dpages, none), then the new pages' with 1: in
         * the commit's run of writes to holders, hp) */
        PyObject *minus = PyLong_FromLong(-1);
        int bad = minus == NULL || count_pages_run(hp, old_pages, minus, dpages, none) < 0;
        Py_XDECREF(minus);
        if (bad || count_pages_run(hp, pages, one, dpages, none) < 0)
            goto done;
        if (seq1[2] == NULL && (seq1[2] = edit_copy(seq0[2])) == NULL)
            goto done;
        int some = some_page(pages, none);
        if (some < 0)
            goto done;
        if (some) {
            PyObject *argv[] = {pages};
            v = padded->fn != NULL ? PyObject_Vectorcall(padded->fn, argv, 1, NULL)
                                   : padded_make(padded->pad, pages, padded->fcn, padded->kk);
            if (v == NULL || edit_put(&seq1[2], i, v) < 0 ||
                PyDict_SetItem(page_rows, c, v) < 0)
                goto done;
        } else {
            if (edit_put(&seq1[2], i, empty) < 0)
                goto done;
            PyObject *held = PyDict_GetItemWithError(page_rows, c);
            if ((held == NULL && PyErr_Occurred()) || (held != NULL && PyDict_DelItem(page_rows, c) < 0))
                goto done;
        }
    }
    int unused_now = ints_or_compare(new, unused, Py_EQ);
    if (unused_now < 0 || (unused_now ? PyDict_DelItem(rows, c) : PyDict_SetItem(rows, c, new)) < 0)
        goto done;
    PyObject *vals[] = {r, NULL};
    Py_ssize_t n = PyObject_Size(pages);
    if (n < 0 || (ln = PyLong_FromSsize_t(n)) == NULL)
        goto done;
    vals[1] = ln;
    for (int k = 0; k < 2; k++) {       /* rot[c - 1], then len[c - 1], where they differ */
        PyObject *was = item_at(seq0[k], i);
        int differs = was == NULL ? -1 : ints_or_compare(was, vals[k], Py_NE);
        Py_XDECREF(was);
        if (differs < 0 || (differs && edit(&seq1[k], seq0[k], i, vals[k]) < 0))
            goto done;
    }
    rc = 0;
done:
    Py_DECREF(old);
    Py_XDECREF(r);
    Py_XDECREF(pages);
    Py_XDECREF(old_pages);
    Py_XDECREF(one);
    Py_XDECREF(i);
    Py_XDECREF(v);
    Py_XDECREF(ln);
    return rc;
}

/* commit_rows(changed, rows, holders, page_rows, s, delta, empty, padded, none, dirty): loops.py's
 * py_commit_rows, the incremental chain maps' commit of the chains in `changed` on a state of
 * the current shape, in one pass over it: (dirty chains, dirty pages), the dirty pages added
 * to the set `dirty` (a new one when it is None), which is returned. */
static PyObject *commit_rows_with(PyObject *const *a, const Padding *padded);

static PyObject *commit_rows(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("commit_rows", n, 10))
        return NULL;
    Padding padded = {a[7], NULL, NULL, NULL};
    return commit_rows_with(a, &padded);
}

/* commit_rows, each page row built as `padded` says (a[7] not read) */
static PyObject *commit_rows_with(PyObject *const *a, const Padding *padded) {
    PyObject *changed = a[0], *s = a[4], *delta = a[5];
    if (check_type(changed, &PyDict_Type, "commit_rows", "changed") ||
        check_type(a[1], &PyDict_Type, "commit_rows", "rows") ||
        check_type(a[2], &PyDict_Type, "commit_rows", "holders") ||
        check_type(a[3], &PyDict_Type, "commit_rows", "page_rows") ||
        check_type(s, &PyDict_Type, "commit_rows", "s") || check_type(delta, &PyList_Type, "commit_rows", "delta") ||
        (a[9] != Py_None && check_type(a[9], &PySet_Type, "commit_rows", "dirty")))
        return NULL;
    static const char *const row_names[] = {"rot", "len", "page"};
    PyObject **const row_slots[] = {&s_rot, &s_len, &s_page};
    if (intern_names(row_names, row_slots, 3) < 0)
        return NULL;
    PyObject *vars[] = {s_rot, s_len, s_page}, *seq0[] = {NULL, NULL, NULL}, *seq1[] = {NULL, NULL, NULL};
    PyObject *nothing = PyTuple_New(0), *unused = nothing == NULL ? NULL : PyTuple_Pack(2, a[8], nothing);
    PyObject *dchains = PySet_New(NULL), *dpages = a[9] == Py_None ? PySet_New(NULL) : Py_NewRef(a[9]), *out = NULL;
    int err = unused == NULL || dchains == NULL || dpages == NULL;
    for (int k = 0; !err && k < 3; k++)
        err = (seq0[k] = dict_at(s, vars[k])) == NULL;
    PyObject *c, *new;
    Py_ssize_t pos = 0, size = err ? 0 : PyDict_GET_SIZE(changed);
    /* (the holder counts' writes of every chain, one run: holders' tag renewed once, below) */
    InPlace hp = {a[2], -1, NULL};
    while (!err && PyDict_Next(changed, &pos, &c, &new)) {
        Py_INCREF(c);
        Py_INCREF(new);
        err = commit_chain(a, padded, &hp, c, new, unused, seq0, seq1, dchains, dpages) < 0;
        Py_DECREF(c);
        Py_DECREF(new);
        if (!err && PyDict_GET_SIZE(changed) != size) {     /* (as a dict's iterator refuses it) */
            PyErr_SetString(PyExc_RuntimeError, "dictionary changed size during iteration");
            err = 1;
        }
    }
    err = in_place_end(&hp, err ? -1 : 0) < 0;
    /* (each variable an entry was edited in: replaced by a tuple, its old value in the delta) */
    for (int k = 0; !err && k < 3; k++) {
        if (seq1[k] == NULL)
            continue;
        /* (a tuple copy: itself, written only here) */
        PyObject *t = PyTuple_CheckExact(seq1[k]) ? Py_NewRef(seq1[k]) : PyList_AsTuple(seq1[k]);
        err = t == NULL || record(delta, vars[k], Py_None, seq0[k]) < 0 || PyDict_SetItem(s, vars[k], t) < 0;
        Py_XDECREF(t);
    }
    if (!err)
        out = PyTuple_Pack(2, dchains, dpages);
    for (int k = 0; k < 3; k++) {
        Py_XDECREF(seq0[k]);
        Py_XDECREF(seq1[k]);
    }
    Py_XDECREF(nothing);
    Py_XDECREF(unused);
    Py_XDECREF(dchains);
    Py_XDECREF(dpages);
    return out;
}

/* ---- the device-page map's sync on its common path (loops.py's py_device_sync, which states
 * it: the same reads, writes and calls in the same order), one call for the Python glue of
 * device_pages.py's sync, _enter or _leave_subtree (with _id, _release_id), _free and _commit:
 * ~5 frames a sync, most of its cost besides commit_rows */

static PyObject *s_ds_mirror, *s_ds_overflowed, *s_ds_alloc_log, *s_ds_parent, *s_ds_device, *s_ds_n, *s_ds_changed,
    *s_ds_mirror_typed, *s_ds_n_pids, *s_ds_pids_by_value, *s_ds_intersection, *s_ds_update, *s_ds_diff_update,
    *s_ds_free, *s_ds_rebuilt, *s_ds_free_moved, *s_ds_free_built, *s_ds_next_id, *s_ds_n_chains, *s_ds_max_len,
    *s_ds_grow, *s_ds_shape, *s_ds_commit, *s_ds_delta, *s_ds_rows, *s_ds_holders, *s_ds_page_rows, *s_ds_empty,
    *s_ds_padded, *s_ds_mixed, *s_ds_chains, *s_ds_page_ids, *s_ds_children, *s_ds_values, *s_ds_pad;

static PyObject *field_of(PyObject *x, PyObject *name);     /* (below, with the walks) */

static int ds_names(void) {
    static int interned;    /* (each name's test, ~170 instructions a sync, once) */
    if (interned)
        return 0;
    static const char *const names[] = {"mirror", "overflowed", "alloc_log", "parent", "device", "n", "_changed",
        "mirror_typed", "n_pids", "pids_by_value", "intersection", "update", "difference_update", "free",
        "_rebuilt", "free_moved", "free_built", "next_id", "n_chains", "max_len", "_grow", "_shape", "_commit",
        "delta", "rows", "holders", "page_rows", "_empty", "_padded", "mixed", "Chains", "PageIds", "children",
        "values", "_pad"};
    PyObject **const slots[] = {&s_ds_mirror, &s_ds_overflowed, &s_ds_alloc_log, &s_ds_parent, &s_ds_device, &s_ds_n,
        &s_ds_changed, &s_ds_mirror_typed, &s_ds_n_pids, &s_ds_pids_by_value, &s_ds_intersection, &s_ds_update,
        &s_ds_diff_update, &s_ds_free, &s_ds_rebuilt, &s_ds_free_moved, &s_ds_free_built, &s_ds_next_id,
        &s_ds_n_chains, &s_ds_max_len, &s_ds_grow, &s_ds_shape, &s_ds_commit, &s_ds_delta, &s_ds_rows, &s_ds_holders,
        &s_ds_page_rows, &s_ds_empty, &s_ds_padded, &s_ds_mixed, &s_ds_chains, &s_ds_page_ids, &s_ds_children,
        &s_ds_values, &s_ds_pad};
    if (intern_names(names, slots, sizeof(names) / sizeof(names[0])) < 0)
        return -1;
    interned = 1;
    return 0;
}

/* m.name as Python reads it, a new reference: from md, m's own dict (ctx's: no class of the
 * map defines a data descriptor of any name read here, so Python's lookup finds an instance's
 * value there first, ~40 instructions against GetAttr's ~160, at each of a sync's ~28 reads),
 * else through PyObject_GetAttr (a class's default: free_moved; a method) */
static PyObject *m_get(PyObject *md, PyObject *m, PyObject *name) {
    PyObject *v = PyDict_GetItemWithError(md, name);
    if (v != NULL)
        return Py_NewRef(v);
    return PyErr_Occurred() ? NULL : PyObject_GetAttr(m, name);
}

/* m.name = v, into m's own dict md (as Python's store does: no data descriptor of the name) */
static inline int m_set(PyObject *md, PyObject *name, PyObject *v) {
    return PyDict_SetItem(md, name, v);
}

/* the truth of o.name, -1 on an error */
static int attr_true(PyObject *o, PyObject *name) {
    PyObject *v = PyObject_GetAttr(o, name);
    int t = v == NULL ? -1 : PyObject_IsTrue(v);
    Py_XDECREF(v);
    return t;
}

/* _enter(x) (py_device_sync's walk, a node in the tree): its pages, written where they differ
 * from the mapped ones, its chain's entry in changed; 0, or -1 on an error */
static int ds_enter(PyObject *m, PyObject *md, PyObject *x, PyObject *node_pages, PyObject *cid, PyObject *changed,
                    PyObject *none, PyObject *spare, PyObject *pop) {
    PyObject *dev = field_of(x, s_ds_device), *pages = NULL, *old = NULL, *c = NULL, *row = NULL;
    int rc = -1;
    if (dev == NULL)
        goto done;
    if (dev != Py_None) {
        PyObject *again = field_of(x, s_ds_device);     /* (read again, as _enter reads it) */
        pages = again == NULL ? NULL : PySequence_Tuple(again);
        Py_XDECREF(again);
    } else {
        PyObject *n = field_of(x, s_ds_n), *one = n == NULL ? NULL : PyTuple_Pack(1, none);
        pages = one == NULL ? NULL : PyNumber_Multiply(one, n);
        Py_XDECREF(n);
        Py_XDECREF(one);
    }
    if (pages == NULL)
        goto done;
    old = PyDict_GetItemWithError(node_pages, x);
    if (old == NULL && PyErr_Occurred())
        goto done;
    old = Py_NewRef(old == NULL ? Py_None : old);
    PyObject *same = PyObject_RichCompare(old, pages, Py_EQ);
    int eq = same == NULL ? -1 : PyObject_IsTrue(same);
    Py_XDECREF(same);
    if (eq != 0) {
        rc = eq < 0 ? -1 : 0;
        goto done;
    }
    if (PyDict_SetItem(node_pages, x, pages) < 0)
        goto done;
    c = PyDict_GetItemWithError(cid, x);
    if (c == NULL && PyErr_Occurred())
        goto done;
    Py_XINCREF(c);
    PyObject *zero = PyLong_FromLong(0);
    row = zero == NULL ? NULL : PyTuple_Pack(2, zero, pages);
    Py_XDECREF(zero);
    if (row == NULL)
        goto done;
    if (c == NULL) {
        /* (_id: the lowest id given back, heappop(spare), else m.next_id, counted on) */
        int some = PyObject_IsTrue(spare);
        if (some < 0)
            goto done;
        if (some) {
            PyObject *argv[] = {spare};
            c = PyObject_Vectorcall(pop, argv, 1, NULL);
        } else if ((c = m_get(md, m, s_ds_next_id)) != NULL) {
            PyObject *one = PyLong_FromLong(1), *next = one == NULL ? NULL : PyNumber_Add(c, one);
            int bad = next == NULL || m_set(md, s_ds_next_id, next) < 0;
            Py_XDECREF(one);
            Py_XDECREF(next);
            if (bad)
                goto done;
        }
        if (c == NULL || PyDict_SetItem(cid, x, c) < 0)
            goto done;
    }
    if (PyDict_SetItem(changed, c, row) < 0)
        goto done;
    rc = 0;
done:
    Py_XDECREF(dev);
    Py_XDECREF(pages);
    Py_XDECREF(old);
    Py_XDECREF(c);
    Py_XDECREF(row);
    return rc;
}

/* _leave_subtree(x) (py_device_sync's walk, a detached node): each mapped node of x's subtree
 * (a stack, popped from its end, each node's children pushed in their order) unmapped, its
 * chain's id popped from cid and given back, push(spare, c), changed[c] = unused; 0, or -1 */
static int ds_leave(PyObject *x, PyObject *node_pages, PyObject *cid, PyObject *spare, PyObject *push,
                    PyObject *changed, PyObject *unused) {
    PyObject *stack = PyList_New(0);
    int err = stack == NULL || PyList_Append(stack, x) < 0;
    while (!err && PyList_GET_SIZE(stack) > 0) {
        Py_ssize_t top = PyList_GET_SIZE(stack) - 1;
        PyObject *y = Py_NewRef(PyList_GET_ITEM(stack, top)), *was = NULL, *c = NULL, *kids = NULL;
        err = PyList_SetSlice(stack, top, top + 1, NULL) < 0;
        /* node_pages.pop(y, None) */
        if (!err && (was = PyDict_GetItemWithError(node_pages, y)) != NULL) {
            Py_INCREF(was);
            err = PyDict_DelItem(node_pages, y) < 0;
        } else if (!err && PyErr_Occurred())
            err = 1;
        if (!err && was != NULL && was != Py_None) {
            /* _release_id(y): cid.pop(y), KeyError where it has none */
            if ((c = PyDict_GetItemWithError(cid, y)) == NULL)
                err = 1, key_missing(y);
            else {
                Py_INCREF(c);
                PyObject *argv[] = {spare, c}, *r = NULL;
                err = PyDict_DelItem(cid, y) < 0 || (r = PyObject_Vectorcall(push, argv, 2, NULL)) == NULL ||
                      PyDict_SetItem(changed, c, unused) < 0;
                Py_XDECREF(r);
            }
        }
        /* stack.extend(y.children.values()) */
        if (!err && (kids = field_of(y, s_ds_children)) != NULL) {
            PyObject *vals = PyObject_CallMethodNoArgs(kids, s_ds_values);
            Py_ssize_t end = PyList_GET_SIZE(stack);
            err = vals == NULL || PyList_SetSlice(stack, end, end, vals) < 0;
            Py_XDECREF(vals);
        } else if (!err)
            err = 1;
        Py_DECREF(y);
        Py_XDECREF(was);
        Py_XDECREF(c);
        Py_XDECREF(kids);
    }
    Py_XDECREF(stack);
    return err ? -1 : 0;
}

/* pid_set.intersection(pages), a new set: for an exact set and a list or tuple of pages, the
 * pages that are in it, each the call's own object, in the call's order (as set.intersection
 * builds it from a sequence); anything else through the method */
static PyObject *ds_intersection(PyObject *pid_set, PyObject *pages) {
    if (!PySet_CheckExact(pid_set) || !(PyList_CheckExact(pages) || PyTuple_CheckExact(pages)))
        return PyObject_CallMethodOneArg(pid_set, s_ds_intersection, pages);
    PyObject *got = PySet_New(NULL);
    for (Py_ssize_t i = 0; got != NULL && i < PySequence_Fast_GET_SIZE(pages); i++) {
        PyObject *p = Py_NewRef(PySequence_Fast_GET_ITEM(pages, i));
        int in = PySet_Contains(pid_set, p);
        if (in < 0 || (in && PySet_Add(got, p) < 0))
            Py_CLEAR(got);
        Py_DECREF(p);
    }
    return got;
}

/* pid_set.intersection(pages) where pages is a list or tuple of exact ints of one digit and
 * the map's PageIds, pid_set, is set(range(npids)) (ctx's invariant): a page is in pid_set
 * exactly when 0 <= p < npids, decided with no probe of the set; *within, whether each page is
 * in 0..npids-1 or is 0 (ints_within(pages, npids, 0), the same pass). A new set, the call's own
 * objects added in its order (as ds_intersection builds it); NULL with no error set where it
 * does not apply (an item of another kind: ds_intersection and ints_within then), or NULL on
 * an error. Why: the probes of pid_set and ints_within's pass were ~1.2k instructions of a
 * sync's logged call of ~10 pages. */
static PyObject *ds_pages_in(PyObject *pages, long long npids, int *within) {
    if (!PyList_CheckExact(pages) && !PyTuple_CheckExact(pages))
        return NULL;
    /* (the set made first: its allocation may run a collection, and a finalizer change the
     * list; past it, int keys run no Python code and allocate no collected object, so the
     * list cannot change under the two passes) */
    PyObject *got = PySet_New(NULL);
    if (got == NULL)
        return NULL;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(pages);
    PyObject **items = PySequence_Fast_ITEMS(pages);
    long long v;
    *within = 1;
    for (Py_ssize_t i = 0; i < k; i++) {
        if (!small_int(items[i], &v)) {
            Py_DECREF(got);     /* (an empty set: nothing of its release runs code) */
            return NULL;
        }
        *within = *within && ((0 <= v && v < npids) || v == 0);
    }
    for (Py_ssize_t i = 0; got != NULL && i < k; i++)
        if (small_int(items[i], &v) && 0 <= v && v < npids && PySet_Add(got, items[i]) < 0)
            Py_CLEAR(got);
    return got;
}

/* _free's pass over the allocator's calls (ops non-empty, not overflowed, a mirror): the new
 * free set (free_built), or NULL on an error */
static PyObject *ds_free(PyObject *m, PyObject *md, PyObject *ops, PyObject *mirror, PyObject *pid_set, PyObject *dev) {
    PyObject *moved = NULL, *typed = NULL, *n = NULL, *zero = PyLong_FromLong(0), *free_n = NULL, *built = NULL,
             *by_value = NULL;
    Py_INCREF(mirror);
    int err = zero == NULL || (typed = m_get(md, m, s_ds_mirror_typed)) == NULL ||
              (n = m_get(md, m, s_ds_n_pids)) == NULL || (by_value = m_get(md, m, s_ds_pids_by_value)) == NULL;
    long long npids = 0;
    /* (ds_pages_in decides membership by value only where the map found pid_set to be
     * set(range(n_pids)) when it made it, `pids_by_value`, and the set still has that size:
     * the map never writes pid_set after; any other PageIds is intersected as Python does) */
    int arith = !err && by_value == Py_True && PySet_CheckExact(pid_set) && small_int(n, &npids) &&
                PySet_GET_SIZE(pid_set) == npids;
    Py_XDECREF(by_value);
    /* (ops is a list: its items read by index, each held across the calls below) */
    for (Py_ssize_t i = 0; !err && i < PyList_GET_SIZE(ops); i++) {
        PyObject *op = Py_NewRef(PyList_GET_ITEM(ops, i)), *released = NULL, *pages = NULL, *got = NULL;
        /* (within: ints_within(pages, n, 0) as ds_pages_in found it, -1 while not known; taken
         * only where nothing between ran code, the truth tests of bools and an exact set's
         * update, so pages is as it found them) */
        int rel = -1, within = -1;
        if ((released = item_k(op, 0)) == NULL || (pages = item_k(op, 1)) == NULL)
            err = 1;
        else if (arith && (got = ds_pages_in(pages, npids, &within)) == NULL && PyErr_Occurred())
            err = 1;
        else if (got == NULL && (within = -1, got = ds_intersection(pid_set, pages)) == NULL)
            err = 1;
        else if ((rel = PyObject_IsTrue(released)) < 0)
            err = 1;
        else {
            /* (mirror.update(got), mirror.difference_update(got): for an exact set and the set
             * got, what |= and -= do in place, without the methods' lookups) */
            PyObject *r = PySet_CheckExact(mirror) ? (rel ? PyNumber_InPlaceOr(mirror, got)
                                                          : PyNumber_InPlaceSubtract(mirror, got))
                                                   : PyObject_CallMethodOneArg(mirror, rel ? s_ds_update
                                                                                           : s_ds_diff_update, got);
            err = r == NULL;
            Py_XDECREF(r);
            if (!err && rel) {
                /* typed = typed and ints_within(pages, n, 0) */
                int t = PyObject_IsTrue(typed);
                if (t < 0)
                    err = 1;
                else if (t && within >= 0 && PyBool_Check(released) && PyBool_Check(typed) && PySet_CheckExact(mirror))
                    Py_SETREF(typed, PyBool_FromLong(within));
                else if (t) {
                    PyObject *argv[] = {pages, n, zero}, *w = ints_within(NULL, argv, 3);
                    if (w == NULL)
                        err = 1;
                    else
                        Py_SETREF(typed, w);
                }
            }
            if (!err) {
                if (moved == NULL)
                    moved = Py_NewRef(got);
                else {
                    PyObject *u = PyNumber_InPlaceOr(moved, got);
                    err = u == NULL;
                    if (u != NULL)
                        Py_SETREF(moved, u);
                }
            }
        }
        Py_XDECREF(op);
        Py_XDECREF(released);
        Py_XDECREF(pages);
        Py_XDECREF(got);
    }
    int ne = 0;
    if (!err) {     /* del ops[:]; then len(mirror) != dev.free */
        Py_ssize_t size;
        PyObject *len = NULL;
        err = PyList_SetSlice(ops, 0, PY_SSIZE_T_MAX, NULL) < 0 || (size = PyObject_Size(mirror)) < 0 ||
              (len = PyLong_FromSsize_t(size)) == NULL || (free_n = PyObject_GetAttr(dev, s_ds_free)) == NULL ||
              (ne = ints_or_compare(len, free_n, Py_NE)) < 0;
        Py_XDECREF(len);
    }
    if (!err && ne) {
        PyObject *r = PyObject_CallMethodNoArgs(m, s_ds_rebuilt);
        PyObject *mi = r == NULL ? NULL : item_k(r, 0), *ty = mi == NULL ? NULL : item_k(r, 1);
        Py_XDECREF(r);
        if (ty == NULL) {
            Py_XDECREF(mi);
            err = 1;
        } else {
            Py_SETREF(mirror, mi);
            Py_SETREF(typed, ty);
            Py_CLEAR(moved);
        }
    }
    if (!err)
        err = m_set(md, s_ds_free_moved, moved == NULL ? Py_None : moved) < 0 ||
              m_set(md, s_ds_mirror_typed, typed) < 0 || (built = PyFrozenSet_New(mirror)) == NULL ||
              m_set(md, s_ds_free_built, built) < 0;
    Py_DECREF(mirror);
    Py_XDECREF(moved);
    Py_XDECREF(typed);
    Py_XDECREF(n);
    Py_XDECREF(zero);
    Py_XDECREF(free_n);
    if (err) {
        Py_XDECREF(built);
        return NULL;
    }
    return built;
}

/* longest = max(1, the pages' count of each changed chain); then m._grow(next_id - 1,
 * longest) where either grew; 0, or -1 on an error */
static int ds_grow(PyObject *m, PyObject *md, PyObject *changed) {
    Py_ssize_t longest = 1, pos = 0;
    PyObject *c, *new;
    while (PyDict_Next(changed, &pos, &c, &new)) {
        PyObject *pages = item_k(new, 1);
        Py_ssize_t k = pages == NULL ? -1 : PyObject_Size(pages);
        Py_XDECREF(pages);
        if (k < 0)
            return -1;
        if (k > longest)
            longest = k;
    }
    PyObject *next = m_get(md, m, s_ds_next_id), *one = PyLong_FromLong(1), *used = NULL, *nc = NULL,
             *lg = PyLong_FromSsize_t(longest), *ml = NULL;
    int rc = -1, grow = 0;
    if (next == NULL || one == NULL || lg == NULL || (used = PyNumber_Subtract(next, one)) == NULL ||
        (nc = m_get(md, m, s_ds_n_chains)) == NULL || (grow = PyObject_RichCompareBool(used, nc, Py_GT)) < 0)
        goto done;
    if (!grow && ((ml = m_get(md, m, s_ds_max_len)) == NULL || (grow = PyObject_RichCompareBool(lg, ml, Py_GT)) < 0))
        goto done;
    if (grow) {
        PyObject *r = PyObject_CallMethodObjArgs(m, s_ds_grow, used, lg, NULL);
        if (r == NULL)
            goto done;
        Py_DECREF(r);
    }
    rc = 0;
done:
    Py_XDECREF(next);
    Py_XDECREF(one);
    Py_XDECREF(used);
    Py_XDECREF(nc);
    Py_XDECREF(lg);
    Py_XDECREF(ml);
    return rc;
}

/* _commit on a state of the current shape whose free and mixed are written (else m._commit):
 * (delta, {"Chains": ..., "PageIds": ...}), or NULL on an error */
static PyObject *ds_commit(PyObject *m, PyObject *md, PyObject *changed, PyObject *free, PyObject *s, PyObject *none,
                           PyObject *missing, PyObject *fcn, PyObject *kk) {
    PyObject *n = NULL, *L = NULL, *shape = NULL, *old_free = NULL, *delta = NULL, *moved = NULL, *out = NULL,
             *cargs[10] = {NULL}, *dirty = NULL, *dict = NULL;
    int same = 0, has_mixed = 0;
    if ((n = m_get(md, m, s_ds_n_chains)) == NULL || (L = m_get(md, m, s_ds_max_len)) == NULL ||
        (shape = m_get(md, m, s_ds_shape)) == NULL)
        goto done;
    old_free = PyDict_GetItemWithError(s, s_ds_free);
    if (old_free == NULL && PyErr_Occurred())
        goto done;
    old_free = Py_NewRef(old_free == NULL ? missing : old_free);
    if (PyTuple_CheckExact(shape) && PyTuple_GET_SIZE(shape) == 2) {
        /* m._shape != (n, L), as tuples compare: each item identity first, then == */
        same = PyObject_RichCompareBool(PyTuple_GET_ITEM(shape, 0), n, Py_EQ);
        if (same > 0)
            same = PyObject_RichCompareBool(PyTuple_GET_ITEM(shape, 1), L, Py_EQ);
        if (same < 0)
            goto done;
    }
    if (same && old_free != missing && (has_mixed = PyDict_Contains(s, s_ds_mixed)) < 0)
        goto done;
    if (!same || old_free == missing || !has_mixed) {
        out = PyObject_CallMethodObjArgs(m, s_ds_commit, changed, free, NULL);
        goto done;
    }
    if ((delta = PyList_New(0)) == NULL || m_set(md, s_ds_delta, delta) < 0)
        goto done;
    int free_changed = old_free != free ? PyObject_RichCompareBool(old_free, free, Py_NE) : 0;
    if (free_changed < 0)
        goto done;
    if (free_changed) {
        if ((moved = m_get(md, m, s_ds_free_moved)) == NULL)
            goto done;
    } else
        moved = Py_NewRef(Py_None);
    PyObject *const names[] = {s_ds_rows, s_ds_holders, s_ds_page_rows};
    cargs[0] = Py_NewRef(changed);
    for (int k = 0; k < 3; k++)
        if ((cargs[1 + k] = m_get(md, m, names[k])) == NULL)
            goto done;
    cargs[4] = Py_NewRef(s);
    cargs[5] = Py_NewRef(delta);
    if ((cargs[6] = m_get(md, m, s_ds_empty)) == NULL)
        goto done;
    /* (m._padded: an instance's own where it holds one, else the map's method, whose work,
     * padded_row(m._pad, pages, Fcn, KK_INT), commit_rows does without its frame: no class of
     * the map overrides it, ctx's condition) */
    Padding padded = {NULL, NULL, fcn, kk};
    PyObject *own = PyDict_GetItemWithError(md, s_ds_padded);
    if (own != NULL)
        padded.fn = cargs[7] = Py_NewRef(own);      /* (cargs holds it for the call) */
    else if (PyErr_Occurred() || (padded.pad = m_get(md, m, s_ds_pad)) == NULL)
        goto done;
    else
        cargs[7] = Py_NewRef(Py_None);
    cargs[8] = Py_NewRef(none);
    cargs[9] = Py_NewRef(moved);
    dirty = commit_rows_with(cargs, &padded);
    Py_XDECREF(padded.pad);
    if (dirty == NULL)
        goto done;
    PyObject *dchains = PyTuple_GET_ITEM(dirty, 0), *dpages = PyTuple_GET_ITEM(dirty, 1);
    if (free_changed) {
        if (record(delta, s_ds_free, Py_None, old_free) < 0 || PyDict_SetItem(s, s_ds_free, free) < 0)
            goto done;
        if (moved == Py_None) {
            PyObject *x = PyNumber_Xor(old_free, free), *u = x == NULL ? NULL : PyNumber_InPlaceOr(dpages, x);
            Py_XDECREF(x);
            if (u == NULL)
                goto done;
            /* (dpages is a set: |= updates it in place and returns it) */
            if (u != dpages) {
                Py_DECREF(u);
                PyErr_SetString(PyExc_TypeError, "device_sync: dirty pages must be a set");
                goto done;
            }
            Py_DECREF(u);
        }
    }
    if ((dict = PyDict_New()) == NULL || PyDict_SetItem(dict, s_ds_chains, dchains) < 0 ||
        PyDict_SetItem(dict, s_ds_page_ids, dpages) < 0)
        goto done;
    out = PyTuple_Pack(2, delta, dict);
done:
    Py_XDECREF(n);
    Py_XDECREF(L);
    Py_XDECREF(shape);
    Py_XDECREF(old_free);
    Py_XDECREF(delta);
    Py_XDECREF(moved);
    for (int k = 0; k < 10; k++)
        Py_XDECREF(cargs[k]);
    Py_XDECREF(dirty);
    Py_XDECREF(dict);
    return out;
}

/* list(s) for a set s, a new reference: for an exact set its entries in its own order, as its
 * iterator yields them, into a list of their number (list()'s generic extend was ~420
 * instructions for a journal of one node) */
static PyObject *set_list(PyObject *s) {
#if PY_VERSION_HEX >= 0x030D0000
    /* (_PySet_NextEntry left the public headers in 3.13: list()'s own way there) */
    return PySequence_List(s);
#else
    if (!PySet_CheckExact(s))
        return PySequence_List(s);
    Py_ssize_t n = PySet_GET_SIZE(s), pos = 0, k = 0;
    PyObject *out = PyList_New(n), *key;
    if (out == NULL)
        return NULL;
    if (PySet_GET_SIZE(s) != n) {
        /* (the list's allocation ran a collection whose finalizer changed the set: list()'s
         * own way, an empty list dropped first) */
        Py_DECREF(out);
        return PySequence_List(s);
    }
    Py_hash_t hash;
    /* (no Python code runs in the walk, nor is anything allocated: the set cannot change) */
    while (k < n && _PySet_NextEntry(s, &pos, &key, &hash))
        PyList_SET_ITEM(out, k++, Py_NewRef(key));
    return out;
#endif
}

/* device_sync(m, ctx): loops.py's py_device_sync */
static PyObject *device_sync(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("device_sync", n, 2))
        return NULL;
    PyObject *m = a[0], *ctx = a[1];
    if (check_type(ctx, &PyTuple_Type, "device_sync", "ctx") || ds_names() < 0)
        return NULL;
    if (PyTuple_GET_SIZE(ctx) != 18) {
        PyErr_SetString(PyExc_TypeError, "device_sync: ctx must hold 18 items");
        return NULL;
    }
    PyObject *journal = PyTuple_GET_ITEM(ctx, 0), *ops = PyTuple_GET_ITEM(ctx, 1), *node_pages = PyTuple_GET_ITEM(ctx, 2),
             *cid = PyTuple_GET_ITEM(ctx, 3), *root = PyTuple_GET_ITEM(ctx, 4), *cache = PyTuple_GET_ITEM(ctx, 5),
             *pending = PyTuple_GET_ITEM(ctx, 6), *pid_set = PyTuple_GET_ITEM(ctx, 7), *dev = PyTuple_GET_ITEM(ctx, 8),
             *s = PyTuple_GET_ITEM(ctx, 9), *none = PyTuple_GET_ITEM(ctx, 10), *missing = PyTuple_GET_ITEM(ctx, 11),
             *spare = PyTuple_GET_ITEM(ctx, 12), *push = PyTuple_GET_ITEM(ctx, 13), *pop = PyTuple_GET_ITEM(ctx, 14),
             *unused = PyTuple_GET_ITEM(ctx, 15), *fcn = PyTuple_GET_ITEM(ctx, 16), *kk = PyTuple_GET_ITEM(ctx, 17);
    if (!PySet_Check(journal) || !PyList_Check(ops) || check_type(node_pages, &PyDict_Type, "device_sync", "node_pages") ||
        check_type(cid, &PyDict_Type, "device_sync", "cid") || check_type(s, &PyDict_Type, "device_sync", "s")) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "device_sync: journal must be a set and ops a list");
        return NULL;
    }
    /* m's own dict, taken at each call (not kept in ctx, which m's dict holds: a cycle that
     * kept the map's dict, and the cache through ctx, alive until a collection) */
    PyObject *md = PyObject_GenericGetDict(m, NULL);
    if (md == NULL)
        return NULL;
    if (check_type(md, &PyDict_Type, "device_sync", "the map's dict")) {
        Py_DECREF(md);
        return NULL;
    }
    /* (the ctx tuple holds its items for the call: the caller's, never rebound) */
    Py_INCREF(ctx);
    PyObject *mirror = NULL, *todo = NULL, *changed = NULL, *free = NULL, *out = NULL;
    int t, leaving = -1, fits = 1;
    if ((mirror = m_get(md, m, s_ds_mirror)) == NULL)
        goto done;
    if (mirror == Py_None)
        fits = 0;
    else if ((t = attr_true(ops, s_ds_overflowed)) != 0 || (t = attr_true(cache, s_ds_alloc_log)) != 0 ||
             (t = PyObject_IsTrue(pending)) != 0) {
        if (t < 0)
            goto done;
        fits = 0;
    }
    /* the journal listed (its own order, as list(journal) makes it), each node's parent read */
    if (fits && (todo = set_list(journal)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; fits && i < PyList_GET_SIZE(todo); i++) {
        PyObject *x = PyList_GET_ITEM(todo, i);
        if (x == root)
            continue;
        PyObject *par = field_of(x, s_ds_parent);
        if (par == NULL)
            goto done;
        int detached = par == Py_None, in = 1;
        if (leaving < 0)
            leaving = detached;
        else if (leaving != detached)
            fits = 0;
        if (fits && !detached && par != root && (in = PyDict_Contains(node_pages, par)) <= 0)
            fits = 0;
        Py_DECREF(par);
        if (in < 0)
            goto done;
    }
    if (!fits) {
        out = Py_NewRef(Py_None);
        goto done;
    }
    if ((changed = PyDict_New()) == NULL || m_set(md, s_ds_changed, changed) < 0 || PySet_Clear(journal) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(todo); i++) {
        PyObject *x = PyList_GET_ITEM(todo, i);     /* (todo holds it) */
        if (x == root)
            continue;
        if (leaving > 0 ? ds_leave(x, node_pages, cid, spare, push, changed, unused) < 0
                        : ds_enter(m, md, x, node_pages, cid, changed, none, spare, pop) < 0)
            goto done;
    }
    int any = PyObject_IsTrue(ops);
    if (any < 0)
        goto done;
    if (!any) {
        if ((free = dict_at(s, s_ds_free)) == NULL)
            goto done;
    } else if ((free = ds_free(m, md, ops, mirror, pid_set, dev)) == NULL)
        goto done;
    if (ds_grow(m, md, changed) < 0)
        goto done;
    out = ds_commit(m, md, changed, free, s, none, missing, fcn, kk);
done:
    Py_DECREF(ctx);
    Py_DECREF(md);
    Py_XDECREF(mirror);
    Py_XDECREF(todo);
    Py_XDECREF(changed);
    Py_XDECREF(free);
    return out;
}

/* ---- the device-page map's per-chain tests of TypeOK and NoDoubleAllocation over the dirty
 * chains (device_pages.py's type_ok_inc, cp_replay_inc.py's no_double_allocation_inc;
 * loops.py's py_chains_typed, py_chains_padded): the same reads in the same order, each
 * chain's a few pages rather than the bytecode of ~100 opcodes a chain */

static PyObject *s_d_attr;

/* the interned name "d" (a function value's dict), or NULL on an error */
static PyObject *str_d_attr(void) {
    if (s_d_attr == NULL)
        s_d_attr = PyUnicode_InternFromString("d");
    return s_d_attr;
}

/* c - 1 for a chain id (a new reference) */
static PyObject *minus_one(PyObject *c) {
    long long v;
    if (small_int(c, &v))
        return PyLong_FromLongLong(v - 1);
    PyObject *one = PyLong_FromLong(1), *i = one == NULL ? NULL : PyNumber_Subtract(c, one);
    Py_XDECREF(one);
    return i;
}

/* 0 <= x for an exact int x */
static inline int non_negative(PyObject *x) {
    return _PyLong_Sign(x) >= 0;
}

/* len(pages) == n for an exact int n: 1, 0, or -1 on an error */
static int length_is(PyObject *pages, PyObject *n) {
    Py_ssize_t k = PyObject_Size(pages);
    if (k < 0)
        return -1;
    int over = 0;
    long long v = PyLong_AsLongLongAndOverflow(n, &over);
    if (v == -1 && PyErr_Occurred())
        return -1;
    return !over && v == (long long)k;
}

/* rows.get(c, unused)[1] (a new reference) for an exact dict rows */
static PyObject *chain_pages(PyObject *rows, PyObject *c, PyObject *unused) {
    PyObject *e = PyDict_GetItemWithError(rows, c);
    if (e == NULL && PyErr_Occurred())
        return NULL;
    e = Py_NewRef(e == NULL ? unused : e);
    PyObject *p = item_k(e, 1);
    Py_DECREF(e);
    return p;
}

/* one chain's test of chains_typed: 1 when it holds, 0, -1 on an error */
static int chain_typed_built(PyObject *const *a, PyObject *c) {
    PyObject *rows = a[1], *built = a[2], *rot = a[3], *ln = a[4], *page = a[5], *host = a[6], *empty = a[7],
             *L = a[8], *n_ids = a[9], *cp = a[10], *no_rot = a[11], *none = a[12], *unused = a[13];
    PyObject *i = minus_one(c), *n = NULL, *r = NULL, *row = NULL, *h = NULL, *pages = NULL;
    int ok = -1, t;
    if (i == NULL || (n = item_at(ln, i)) == NULL || (r = item_at(rot, i)) == NULL)
        goto done;
    /* r: an exact int, NoRot or in 0..CP-1; n: an exact int in 0..MaxLen */
    if (!PyLong_CheckExact(r)) {
        ok = 0;
        goto done;
    }
    if ((t = PyObject_RichCompareBool(r, no_rot, Py_EQ)) < 0)
        goto done;
    if (!t && non_negative(r) && (t = PyObject_RichCompareBool(r, cp, Py_LT)) < 0)
        goto done;
    if (!t || !PyLong_CheckExact(n) || !non_negative(n)) {
        ok = 0;
        goto done;
    }
    if ((t = PyObject_RichCompareBool(n, L, Py_LE)) <= 0) {
        ok = t;
        goto done;
    }
    if ((row = item_at(page, i)) == NULL || (h = item_at(host, i)) == NULL)
        goto done;
    if (h != empty) {
        ok = 0;
        goto done;
    }
    if (row == empty) {
        ok = 1;
        goto done;
    }
    if ((pages = chain_pages(rows, c, unused)) == NULL)
        goto done;
    PyObject *held = PyDict_GetItemWithError(built, c);    /* (borrowed: only compared) */
    if (held == NULL && PyErr_Occurred())
        goto done;
    if (row != held) {
        ok = 0;
        goto done;
    }
    if ((t = length_is(pages, n)) <= 0) {
        ok = t;
        goto done;
    }
    PyObject *argv[3] = {pages, n_ids, none};
    PyObject *within = ints_within(NULL, argv, 3);
    ok = within == NULL ? -1 : within == Py_True;
    Py_XDECREF(within);
done:
    Py_XDECREF(i);
    Py_XDECREF(n);
    Py_XDECREF(r);
    Py_XDECREF(row);
    Py_XDECREF(h);
    Py_XDECREF(pages);
    return ok;
}

/* chains_typed(chains, rows, built, rot, len, page, host, empty, L, n_ids, cp, no_rot, none,
 * unused): loops.py's py_chains_typed, TypeOK's test of each chain of the iterable chains on
 * the rows the map built: True when each holds, False at the first that does not. rows and
 * built are exact dicts. */
static PyObject *chains_typed(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("chains_typed", n, 14) || check_type(a[1], &PyDict_Type, "chains_typed", "rows") < 0 ||
        check_type(a[2], &PyDict_Type, "chains_typed", "built") < 0)
        return NULL;
    Items w;
    PyObject *c;
    if (items_begin(&w, a[0]) < 0)
        return NULL;
    int ok = 1;
    while (ok > 0 && (c = items_next(&w)) != NULL) {
        ok = chain_typed_built(a, c);
        Py_DECREF(c);
    }
    Py_XDECREF(w.it);
    if (ok < 0 || PyErr_Occurred())
        return NULL;
    return PyBool_FromLong(ok);
}

/* one chain's test of chains_padded: 1 when it holds, 0, -1 on an error */
static int chain_padded(PyObject *const *a, PyObject *c) {
    PyObject *rows = a[1], *hosts = a[2], *lens = a[3], *built = a[4], *empty = a[5], *chains = a[6],
             *unused = a[7], *beyond = a[8];
    PyObject *i = minus_one(c), *row = NULL, *h = NULL, *ln = NULL, *pages = NULL, *rd = NULL, *hd = NULL;
    int ok = -1, t;
    if (i == NULL || (row = item_at(rows, i)) == NULL)
        goto done;
    PyObject *want = PyDict_GetItemWithError(built, c);     /* (borrowed: only compared) */
    if (want == NULL && PyErr_Occurred())
        goto done;
    if (row == (want == NULL ? empty : want)) {
        if ((h = item_at(hosts, i)) == NULL)
            goto done;
        if (h == empty) {
            if ((ln = item_at(lens, i)) == NULL || (pages = chain_pages(chains, c, unused)) == NULL)
                goto done;
            Py_ssize_t k = PyObject_Size(pages);
            PyObject *size = k < 0 ? NULL : PyLong_FromSsize_t(k);
            t = size == NULL ? -1 : PyObject_RichCompareBool(ln, size, Py_EQ);
            Py_XDECREF(size);
            if (t != 0) {
                ok = t < 0 ? -1 : 1;
                goto done;
            }
            Py_CLEAR(ln);
        }
        Py_CLEAR(h);
    }
    /* beyond_len_used(rows[i].d, hosts[i].d, lens[i]): reads each again, as Python does */
    Py_CLEAR(row);
    if ((row = item_at(rows, i)) == NULL || (rd = PyObject_GetAttr(row, str_d_attr())) == NULL ||
        (h = item_at(hosts, i)) == NULL || (hd = PyObject_GetAttr(h, str_d_attr())) == NULL ||
        (ln = item_at(lens, i)) == NULL)
        goto done;
    PyObject *argv[3] = {rd, hd, ln};
    PyObject *used = PyObject_Vectorcall(beyond, argv, 3, NULL);
    t = used == NULL ? -1 : PyObject_IsTrue(used);
    Py_XDECREF(used);
    ok = t < 0 ? -1 : !t;
done:
    Py_XDECREF(i);
    Py_XDECREF(row);
    Py_XDECREF(h);
    Py_XDECREF(ln);
    Py_XDECREF(pages);
    Py_XDECREF(rd);
    Py_XDECREF(hd);
    return ok;
}

/* chains_padded(chains, rows, hosts, lens, built, empty, chain_rows, unused, beyond):
 * loops.py's py_chains_padded, NoDoubleAllocation's test of each chain of the iterable chains
 * that no position past its length is used: True when none of them is, False at the first
 * that is. built and chain_rows are exact dicts. */
static PyObject *chains_padded(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("chains_padded", n, 9) || check_type(a[4], &PyDict_Type, "chains_padded", "built") < 0 ||
        check_type(a[6], &PyDict_Type, "chains_padded", "chain_rows") < 0)
        return NULL;
    if (str_d_attr() == NULL)
        return NULL;
    Items w;
    PyObject *c;
    if (items_begin(&w, a[0]) < 0)
        return NULL;
    int ok = 1;
    while (ok > 0 && (c = items_next(&w)) != NULL) {
        ok = chain_padded(a, c);
        Py_DECREF(c);
    }
    Py_XDECREF(w.it);
    if (ok < 0 || PyErr_Occurred())
        return NULL;
    return PyBool_FromLong(ok);
}

/* ---- the device-page map's per-event calls as objects the monitor calls (cp_replay.py's
 * bind, device_pages.py's quiet; loops.py's py_steps_table, py_quiet_probe): at every event
 * of a strict run the monitor's step calls the map's bind and, on a map that can tell, its
 * quiet test; as Python methods each is a frame entered from C (~1k instructions) around a
 * dict lookup or four truth tests. */

/* A table's lookup with a fallback: table.get(action) when that is not None, else
 * fallback(action, fields). Holds the table (a dict of steps) and the fallback (a module's
 * function, as cp_replay.py gives it: nothing that refers back to a map); a collected type all
 * the same, as a bound method for a fallback would close a cycle through its map. */
typedef struct {
    PyObject_HEAD
    PyObject *table, *fallback;
    vectorcallfunc vectorcall;
} StepsTable;

static PyObject *steps_table_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    StepsTable *t = (StepsTable *)self;
    if (PyVectorcall_NARGS(nargsf) != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "a steps table takes (action, fields)");
        return NULL;
    }
    if (t->table == NULL || t->fallback == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a steps table cleared by the collector was called");
        return NULL;
    }
    /* (both held across the lookup, whose key comparison may run Python code, and the call:
     * a collection there may clear the table) */
    PyObject *table = Py_NewRef(t->table), *fallback = Py_NewRef(t->fallback), *out;
    PyObject *steps = PyDict_GetItemWithError(table, args[0]);     /* (borrowed) */
    if (steps != NULL && steps != Py_None)
        out = Py_NewRef(steps);
    else if (steps == NULL && PyErr_Occurred())
        out = NULL;
    else
        out = PyObject_Vectorcall(fallback, args, 2, NULL);
    Py_DECREF(table);
    Py_DECREF(fallback);
    return out;
}

static int steps_table_traverse(PyObject *self, visitproc visit, void *arg) {
    Py_VISIT(((StepsTable *)self)->table);
    Py_VISIT(((StepsTable *)self)->fallback);
    return 0;
}

static int steps_table_clear(PyObject *self) {
    Py_CLEAR(((StepsTable *)self)->table);
    Py_CLEAR(((StepsTable *)self)->fallback);
    return 0;
}

static PyTypeObject StepsTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_hicache_incmap.StepsTable",
    .tp_basicsize = sizeof(StepsTable),
    .tp_dealloc = gc_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(StepsTable, vectorcall),
    .tp_traverse = steps_table_traverse,
    .tp_clear = steps_table_clear,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "table.get(action), or fallback(action, fields) where that is None",
};

/* steps_table(table, fallback): a StepsTable over an exact dict and a callable */
static PyObject *steps_table(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("steps_table", n, 2) || check_type(a[0], &PyDict_Type, "steps_table", "table") < 0)
        return NULL;
    if (!PyCallable_Check(a[1])) {
        PyErr_SetString(PyExc_TypeError, "steps_table: fallback must be callable");
        return NULL;
    }
    StepsTable *t = PyObject_GC_New(StepsTable, &StepsTableType);
    if (t == NULL)
        return NULL;
    t->table = Py_NewRef(a[0]);
    t->fallback = Py_NewRef(a[1]);
    t->vectorcall = steps_table_call;
    PyObject_GC_Track(t);
    return (PyObject *)t;
}

/* A truth test of several objects and one attribute: True when each of `before` is false,
 * then getattr(holder, name), then each of `after` (in that order, the first true one ending
 * it: False). Holds what the map holds (its journals, its cache), which may refer back to
 * the map's monitor: a part of the cyclic collector. */
typedef struct {
    PyObject_HEAD
    PyObject *before, *holder, *name, *after;     /* two tuples, any object, a str */
    vectorcallfunc vectorcall;
} QuietProbe;

/* 1 when every item of the tuple is false, 0 at the first true one, -1 on an error */
static int all_false(PyObject *items) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items); i++) {
        int t = PyObject_IsTrue(PyTuple_GET_ITEM(items, i));      /* (the tuple holds it) */
        if (t != 0)
            return t < 0 ? -1 : 0;
    }
    return 1;
}

static PyObject *quiet_probe_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    QuietProbe *q = (QuietProbe *)self;
    if (PyVectorcall_NARGS(nargsf) != 0 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "a quiet probe takes no arguments");
        return NULL;
    }
    if (q->before == NULL) {        /* (cleared by the collector) */
        PyErr_SetString(PyExc_RuntimeError, "quiet probe: cleared");
        return NULL;
    }
    /* (the parts held across the calls: a __bool__ may run anything, a collection included) */
    PyObject *before = Py_NewRef(q->before), *holder = Py_NewRef(q->holder), *name = Py_NewRef(q->name),
             *after = Py_NewRef(q->after);
    int quiet = all_false(before);
    if (quiet > 0) {
        PyObject *v = PyObject_GetAttr(holder, name);
        quiet = v == NULL ? -1 : PyObject_Not(v);
        Py_XDECREF(v);
    }
    if (quiet > 0)
        quiet = all_false(after);
    Py_DECREF(before);
    Py_DECREF(holder);
    Py_DECREF(name);
    Py_DECREF(after);
    if (quiet < 0)
        return NULL;
    return PyBool_FromLong(quiet);
}

static int quiet_probe_traverse(PyObject *self, visitproc visit, void *arg) {
    QuietProbe *q = (QuietProbe *)self;
    Py_VISIT(q->before);
    Py_VISIT(q->holder);
    Py_VISIT(q->name);
    Py_VISIT(q->after);
    return 0;
}

static int quiet_probe_clear(PyObject *self) {
    QuietProbe *q = (QuietProbe *)self;
    Py_CLEAR(q->before);
    Py_CLEAR(q->holder);
    Py_CLEAR(q->name);
    Py_CLEAR(q->after);
    return 0;
}

static PyTypeObject QuietProbeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_hicache_incmap.QuietProbe",
    .tp_basicsize = sizeof(QuietProbe),
    .tp_dealloc = gc_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(QuietProbe, vectorcall),
    .tp_traverse = quiet_probe_traverse,
    .tp_clear = quiet_probe_clear,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "whether each of some objects and one attribute is false",
};

/* quiet_probe(before, holder, name, after): a QuietProbe over two exact tuples, an object and
 * a str */
static PyObject *quiet_probe(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("quiet_probe", n, 4) || check_type(a[0], &PyTuple_Type, "quiet_probe", "before") < 0 ||
        check_type(a[2], &PyUnicode_Type, "quiet_probe", "name") < 0 ||
        check_type(a[3], &PyTuple_Type, "quiet_probe", "after") < 0)
        return NULL;
    QuietProbe *q = PyObject_GC_New(QuietProbe, &QuietProbeType);
    if (q == NULL)
        return NULL;
    q->before = Py_NewRef(a[0]);
    q->holder = Py_NewRef(a[1]);
    q->name = Py_NewRef(a[2]);
    q->after = Py_NewRef(a[3]);
    q->vectorcall = quiet_probe_call;
    PyObject_GC_Track(q);
    return (PyObject *)q;
}

/* m.get(key) (a new reference): an exact dict's own lookup, else m's method named `get` (an
 * interned "get", which the caller's names hold) called */
static PyObject *get_via(PyObject *m, PyObject *key, PyObject *get) {
    if (PyDict_CheckExact(m)) {
        PyObject *v = PyDict_GetItemWithError(m, key);
        if (v == NULL)
            return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
        return Py_NewRef(v);
    }
    return PyObject_CallMethodOneArg(m, get, key);
}

/* ---- An attribute of an object whose attributes are kept inline (3.11's "values" of a type
 * with a managed dict: the cache, its workers, the watch; none has a dict of its own until
 * something asks for one, and a dict made then would slow every later read of the runtime's
 * own, which the interpreter makes by index), read by the index of its name in the type's
 * shared keys, kept with the type's version tag: what the interpreter's LOAD_ATTR_INSTANCE_VALUE
 * reads (the same guard: the type unchanged since, the object's values still inline, the slot
 * filled). Elsewhere, or on any miss: PyObject_GetAttr, which never makes the dict. */
typedef struct {
    unsigned int tag;     /* the type's version tag the index was found under (0: none) */
    Py_ssize_t ix;
} IvMemo;

static PyObject *iv_get(PyObject *obj, PyObject *name, IvMemo *memo) {
#ifdef HICACHE_POS_ENTRIES
    PyTypeObject *tp = Py_TYPE(obj);
    int inline_ok = (tp->tp_flags & Py_TPFLAGS_MANAGED_DICT) && tp->tp_getattro == PyObject_GenericGetAttr &&
                    PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG);
    if (inline_ok && memo->tag != 0 && memo->tag == tp->tp_version_tag) {
        PyDictValues *values = *(((PyDictValues **)obj) - 4);     /* (_PyObject_ValuesPointer) */
        if (values != NULL && values->values[memo->ix] != NULL)
            return Py_NewRef(values->values[memo->ix]);
    }
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v != NULL && inline_ok && _PyType_Lookup(tp, name) == NULL &&
        PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG)) {
        /* (the name's index in the shared keys, where it is there: kept for the next read) */
        PyDictKeysObject *keys = ((PyHeapTypeObject *)tp)->ht_cached_keys;
        memo->tag = 0;
        if (keys != NULL && DK_IS_UNICODE(keys)) {
            PyDictUnicodeEntry *ep = DK_UNICODE_ENTRIES(keys);
            for (Py_ssize_t k = 0; k < keys->dk_nentries; k++)
                if (ep[k].me_key == name) {
                    memo->ix = k;
                    memo->tag = tp->tp_version_tag;
                    break;
                }
        }
    }
    return v;
#else
    (void)memo;
    return PyObject_GetAttr(obj, name);
#endif
}

/* ---- HostTierMap.trigger (host_tier.py, which defines it: the same reads, tests and calls in
 * the same order) over one cache, a callable (action, fields) -> bool: whether an eviction took a
 * node that an op in flight or a prefetch's anchor still holds. Sample mode's gate asks it at
 * every eviction; as a method each call was a Python frame entered from C around ~10 attribute
 * reads, most evictions finding nothing in flight (~0.5-1.3 % of the monitors bench's kv_bytes
 * replay, 112 evictions, measured without any trigger: docs/monitors-bench-log.md). Holds the cache (which holds its bus, its gate, the monitor and the
 * map): a part of the cyclic collector. */
typedef struct {
    PyObject_HEAD
    PyObject *cache;
    /* (where the cache's and its workers' attributes sit: read as the interpreter reads them,
     * iv_get, ~20 instructions a read where PyObject_GetAttr took ~150; ten reads an eviction) */
    IvMemo m_workers[4], m_acks[4], m_prefetching, m_orphans;
    vectorcallfunc vectorcall;
} TriggerProbe;

static PyObject *tp_node, *tp_get, *tp_loader, *tp_writer, *tp_prefetcher, *tp_backuper, *tp_acks, *tp_prefetching,
    *tp_orphans, *tp_device_evict, *tp_anchor, *tp_id, *tp_lock_ref, *tp_host_ref, *tp_pins_device, *tp_nodes;

static int tp_names(void) {
    static const char *const names[] = {"node", "get", "loader", "writer", "prefetcher", "backuper", "acks",
        "_prefetching", "_orphans", "DeviceEvict", "anchor", "id", "lock_ref", "host_ref", "pins_device", "nodes"};
    PyObject **const slots[] = {&tp_node, &tp_get, &tp_loader, &tp_writer, &tp_prefetcher, &tp_backuper, &tp_acks,
        &tp_prefetching, &tp_orphans, &tp_device_evict, &tp_anchor, &tp_id, &tp_lock_ref, &tp_host_ref,
        &tp_pins_device, &tp_nodes};
    return intern_names(names, slots, sizeof names / sizeof names[0]);
}

/* x.id == nid, as Python's == then its truth (-1: an error) */
static int tp_id_is(PyObject *x, PyObject *nid) {
    PyObject *id = PyObject_GetAttr(x, tp_id);
    if (id == NULL)
        return -1;
    PyObject *eq = PyObject_RichCompare(id, nid, Py_EQ);
    Py_DECREF(id);
    int t = eq == NULL ? -1 : PyObject_IsTrue(eq);
    Py_XDECREF(eq);
    return t;
}

/* the anchor test of one op: 1 when its anchor is node nid and held (lock_ref, or host_ref when
 * not `device`), 0 when not, -1 on an error */
static int tp_anchor_holds(PyObject *op, PyObject *nid, int device) {
    PyObject *anchor;
    if (_PyObject_LookupAttr(op, tp_anchor, &anchor) < 0)
        return -1;
    if (anchor == NULL || anchor == Py_None) {
        Py_XDECREF(anchor);
        return 0;
    }
    int t = tp_id_is(anchor, nid);
    if (t > 0) {
        t = attr_true(anchor, tp_lock_ref);
        if (t == 0 && !device)
            t = attr_true(anchor, tp_host_ref);
    }
    Py_DECREF(anchor);
    return t;
}

/* the op test of one op in flight: 1 when one of its nodes is nid (an op pinning device pages
 * only, for a device eviction), 0 when not, -1 on an error */
static int tp_op_holds(PyObject *op, PyObject *nid, int device) {
    if (device) {
        int pins = attr_true(op, tp_pins_device);
        if (pins <= 0)
            return pins;
    }
    PyObject *nodes = PyObject_GetAttr(op, tp_nodes);
    PyObject *it = nodes == NULL ? NULL : PyObject_GetIter(nodes);
    Py_XDECREF(nodes);
    if (it == NULL)
        return -1;
    int t = 0;
    PyObject *x;
    while (t == 0 && (x = PyIter_Next(it)) != NULL) {
        t = tp_id_is(x, nid);
        Py_DECREF(x);
    }
    Py_DECREF(it);
    return t == 0 && PyErr_Occurred() ? -1 : t;
}

/* the first op of the list `ops` that `holds` (1), none (0), or -1 on an error: each op held
 * across its test (the list may change under a call into Python) */
static int tp_first_holds(PyObject *ops, PyObject *nid, int device, int (*holds)(PyObject *, PyObject *, int)) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ops); i++) {
        PyObject *op = Py_NewRef(PyList_GET_ITEM(ops, i));
        int held = holds(op, nid, device);
        Py_DECREF(op);
        if (held != 0)
            return held;
    }
    return 0;
}

/* iv_get's read followed by its truth (attr_true through the memo): 1, 0, or -1 on an error */
static int iv_true(PyObject *o, PyObject *name, IvMemo *memo) {
    PyObject *v = iv_get(o, name, memo);
    int t = v == NULL ? -1 : PyObject_IsTrue(v);
    Py_XDECREF(v);
    return t;
}

/* the decision over the probe's cache c: 1, 0, or -1 on an error */
static int trigger_decide(TriggerProbe *t, PyObject *c, PyObject *action, PyObject *fields) {
    PyObject *nid = get_via(fields, tp_node, tp_get);       /* fields.get("node") */
    if (nid == NULL)
        return -1;
    if (nid == Py_None) {
        Py_DECREF(nid);
        return 0;
    }
    int rc = -1;
    /* (made at the first busy worker: most evictions find none) */
    PyObject *in_flight = NULL, *all = NULL, *pre = NULL, *orph = NULL;
    /* for w in (c.loader, c.writer, c.prefetcher, c.backuper): their acks, listed */
    PyObject *const workers[] = {tp_loader, tp_writer, tp_prefetcher, tp_backuper};
    for (int i = 0; i < 4; i++) {
        PyObject *w = iv_get(c, workers[i], &t->m_workers[i]);
        if (w == NULL)
            goto done;
        int err = 0;
        if (w != Py_None) {
            /* (`w.acks` then `list(w.acks)`: read twice, as Python reads it) */
            PyObject *acks = NULL, *got = NULL, *r = NULL;
            int busy = iv_true(w, tp_acks, &t->m_acks[i]);
            if (busy > 0)
                err = (in_flight == NULL && (in_flight = PyList_New(0)) == NULL) ||
                      (acks = iv_get(w, tp_acks, &t->m_acks[i])) == NULL || (got = PySequence_List(acks)) == NULL ||
                      (r = _PyList_Extend((PyListObject *)in_flight, got)) == NULL;
            err = err || busy < 0;
            Py_XDECREF(r);
            Py_XDECREF(got);
            Py_XDECREF(acks);
        }
        Py_DECREF(w);
        if (err)
            goto done;
    }
    /* if not in_flight and not c._prefetching and not c._orphans: nothing in flight (most
     * evictions) */
    if (in_flight == NULL || PyList_GET_SIZE(in_flight) == 0) {
        int busy = iv_true(c, tp_prefetching, &t->m_prefetching);
        if (busy == 0)
            busy = iv_true(c, tp_orphans, &t->m_orphans);
        if (busy <= 0) {
            rc = busy;
            goto done;
        }
    }
    if (in_flight == NULL && (in_flight = PyList_New(0)) == NULL)
        goto done;
    int device = PyObject_RichCompareBool(action, tp_device_evict, Py_EQ);
    if (device < 0 || (pre = iv_get(c, tp_prefetching, &t->m_prefetching)) == NULL ||
        (orph = iv_get(c, tp_orphans, &t->m_orphans)) == NULL)
        goto done;
    /* for op in (*c._prefetching, *c._orphans, *in_flight): the anchors */
    if ((all = PySequence_List(pre)) == NULL)
        goto done;
    PyObject *more = _PyList_Extend((PyListObject *)all, orph);
    if (more == NULL)
        goto done;
    Py_DECREF(more);
    if ((more = _PyList_Extend((PyListObject *)all, in_flight)) == NULL)
        goto done;
    Py_DECREF(more);
    rc = tp_first_holds(all, nid, device, tp_anchor_holds);
    /* for op in in_flight: the nodes it holds */
    if (rc == 0)
        rc = tp_first_holds(in_flight, nid, device, tp_op_holds);
done:
    Py_DECREF(nid);
    Py_XDECREF(in_flight);
    Py_XDECREF(all);
    Py_XDECREF(pre);
    Py_XDECREF(orph);
    return rc;
}

static PyObject *trigger_probe_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    TriggerProbe *t = (TriggerProbe *)self;
    if (PyVectorcall_NARGS(nargsf) != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "a trigger takes 2 positional arguments (action, fields)");
        return NULL;
    }
    if (t->cache == NULL) {        /* (cleared by the collector) */
        PyErr_SetString(PyExc_RuntimeError, "trigger: cleared");
        return NULL;
    }
    PyObject *c = Py_NewRef(t->cache);
    int rc = trigger_decide(t, c, args[0], args[1]);
    Py_DECREF(c);
    if (rc < 0)
        return NULL;
    return PyBool_FromLong(rc);
}

static int trigger_probe_traverse(PyObject *self, visitproc visit, void *arg) {
    Py_VISIT(((TriggerProbe *)self)->cache);
    return 0;
}

static int trigger_probe_clear(PyObject *self) {
    Py_CLEAR(((TriggerProbe *)self)->cache);
    return 0;
}

static PyTypeObject TriggerProbeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_hicache_incmap.TriggerProbe",
    .tp_basicsize = sizeof(TriggerProbe),
    .tp_dealloc = gc_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(TriggerProbe, vectorcall),
    .tp_traverse = trigger_probe_traverse,
    .tp_clear = trigger_probe_clear,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "HostTierMap.trigger over one cache: whether an eviction took a node something holds",
};

/* trigger_probe(cache): a TriggerProbe over the cache */
static PyObject *trigger_probe(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("trigger_probe", n, 1) || tp_names() < 0)
        return NULL;
    TriggerProbe *t = PyObject_GC_New(TriggerProbe, &TriggerProbeType);
    if (t == NULL)
        return NULL;
    t->cache = Py_NewRef(a[0]);
    IvMemo none = {0, 0};
    t->m_prefetching = t->m_orphans = none;
    for (int i = 0; i < 4; i++)
        t->m_workers[i] = t->m_acks[i] = none;
    t->vectorcall = trigger_probe_call;
    PyObject_GC_Track(t);
    return (PyObject *)t;
}

/* ---- the fast paths' readers (hicache/monitors/rt.py's fast_ap and no_ap, called once per
 * variable a generated fast path reads, at every strict step): set by configure_readers */
static PyObject *fcn_type, *py_fast_ap, *no_read, *seq_error, *str_d, *str_getitem;

/* A sequence's reader: rt.fast_ap's seq_at over one tuple (a TLA+ sequence is a function on
 * 1..n): x an int (exactly: TRUE is not 1 here) with 1 <= x <= n reads element x - 1; an int
 * above n raises IndexError; anything else the EvalError rt's seq_error builds. Called
 * through vectorcall, one argument. */
typedef struct {
    PyObject_HEAD
    PyObject *seq;
    vectorcallfunc vectorcall;
} SeqReader;

static PyObject *seq_read(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "a sequence reader takes one argument");
        return NULL;
    }
    PyObject *seq = ((SeqReader *)self)->seq, *x = args[0];
    if (PyLong_CheckExact(x)) {
        int overflow = 0;
        long long i = PyLong_AsLongLongAndOverflow(x, &overflow);
        if (i == -1 && PyErr_Occurred())
            return NULL;
        if (overflow > 0) {         /* (Python's own message for such an index) */
            PyErr_SetString(PyExc_IndexError, "cannot fit 'int' into an index-sized integer");
            return NULL;
        }
        if (overflow == 0 && i >= 1) {
            if (i - 1 < PyTuple_GET_SIZE(seq))
                return Py_NewRef(PyTuple_GET_ITEM(seq, i - 1));
            PyErr_SetString(PyExc_IndexError, "tuple index out of range");
            return NULL;
        }
    }
    PyObject *exc = PyObject_CallFunctionObjArgs(seq_error, x, seq, NULL);
    if (exc == NULL)
        return NULL;
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return NULL;
}

static void seq_reader_dealloc(PyObject *self) {
    Py_XDECREF(((SeqReader *)self)->seq);
    Py_TYPE(self)->tp_free(self);
}

static PyTypeObject SeqReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_hicache_incmap.SeqReader",
    .tp_basicsize = sizeof(SeqReader),
    .tp_dealloc = seq_reader_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(SeqReader, vectorcall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "rt.fast_ap's reader of one sequence",
};

/* configure_readers(Fcn, fast_ap, no_read, seq_error): the function value class, the
 * Python fast_ap (what serves for any value but a function or a tuple), what no_ap returns,
 * and what builds a sequence reader's EvalError (seq_error(x, seq)). no_read is set once per
 * process (a later call must give the same object): the compiled fused passes ask no_ap for
 * it once, when they load, and use it in place of its calls (fused_whole's no_reader) */
static PyObject *configure_readers(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("configure_readers", n, 4))
        return NULL;
    if (!PyType_Check(a[0])) {
        PyErr_SetString(PyExc_TypeError, "configure_readers: Fcn must be a class");
        return NULL;
    }
    if (no_read != NULL && a[2] != no_read) {
        PyErr_SetString(PyExc_RuntimeError, "configure_readers: no_read is set once per process, to another object");
        return NULL;
    }
    if (str_d == NULL && ((str_d = PyUnicode_InternFromString("d")) == NULL ||
                          (str_getitem = PyUnicode_InternFromString("__getitem__")) == NULL))
        return NULL;
    Py_XSETREF(fcn_type, Py_NewRef(a[0]));
    Py_XSETREF(py_fast_ap, Py_NewRef(a[1]));
    Py_XSETREF(no_read, Py_NewRef(a[2]));
    Py_XSETREF(seq_error, Py_NewRef(a[3]));
    Py_RETURN_NONE;
}

/* fast_ap(f): f.d.__getitem__ for a function value (exactly its type: as the Python one
 * tests it), else the Python fast_ap's answer */
static PyObject *fast_ap(PyObject *self, PyObject *f) {
    if (fcn_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "fast_ap: configure_readers was not called");
        return NULL;
    }
    if (PyTuple_CheckExact(f)) {
        SeqReader *r = PyObject_New(SeqReader, &SeqReaderType);
        if (r == NULL)
            return NULL;
        r->seq = Py_NewRef(f);
        r->vectorcall = seq_read;
        return (PyObject *)r;
    }
    if ((PyObject *)Py_TYPE(f) != fcn_type)
        return PyObject_CallOneArg(py_fast_ap, f);
    PyObject *d = PyObject_GetAttr(f, str_d);
    if (d == NULL)
        return NULL;
    PyObject *get = PyObject_GetAttr(d, str_getitem);
    Py_DECREF(d);
    return get;
}

/* no_ap(f): the reader of nothing (a fast path's read no running conjunct uses) */
static PyObject *no_ap(PyObject *self, PyObject *f) {
    if (no_read == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "no_ap: configure_readers was not called");
        return NULL;
    }
    return Py_NewRef(no_read);
}

/* ---- the HostTier map's per-slot and per-page tests around a sync (maps/loops.py's
 * py_slot_changes, py_first_not_in_state, py_nodes_at, py_prefix_breach): the same reads
 * and writes in the same order, through the generic object API (so the same exceptions) */

/* The end of each of them: the iterator and up to three constants released; then NULL on an
 * error (err, or one the iteration left), the result released, else the result (NULL: None). */
static PyObject *finish(PyObject *it, int err, PyObject *out, PyObject *k1, PyObject *k2, PyObject *k3) {
    Py_XDECREF(it);
    Py_XDECREF(k1);
    Py_XDECREF(k2);
    Py_XDECREF(k3);
    if (err || PyErr_Occurred()) {
        Py_XDECREF(out);
        return NULL;
    }
    return out != NULL ? out : Py_NewRef(Py_None);
}

/* slot_changes(hs, raw, names, table, slot_page, dirty): for each runtime slot h of hs,
 * names[h] = table[raw[h]], h + 1 added to dirty; returns the set of slot_page.get(h) that
 * are not None (the nodes holding a changed slot). */
static PyObject *slot_changes(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("slot_changes", n, 6))
        return NULL;
    PyObject *raw = a[1], *names = a[2], *table = a[3], *slot_page = a[4], *dirty = a[5];
    if (check_type(slot_page, &PyDict_Type, "slot_changes", "slot_page") ||
        check_type(dirty, &PySet_Type, "slot_changes", "dirty"))
        return NULL;
    PyObject *it = PyObject_GetIter(a[0]);
    if (it == NULL)
        return NULL;
    PyObject *one = PyLong_FromLong(1), *held = PySet_New(NULL), *h;
    int err = one == NULL || held == NULL;
    /* (the map's own types: the bytes seen a bytearray, names and table lists, each slot an
     * exact int within all three; read and written directly, else through the object API,
     * which raises what Python raises) */
    int exact = PyByteArray_CheckExact(raw) && PyList_CheckExact(names) && PyList_CheckExact(table);
    /* the last node added to held (borrowed: held keeps it alive, so an equal pointer is that
     * node, already in held). Why: a node's slots change together and come in a run (hs is in
     * slot order, a node's slots mostly consecutive): ~9,000 adds a replay of a node just added */
    PyObject *last = NULL;
    /* (a list of slots, diff_bytes' own: its items taken directly, each held while used, the
     * size read again at each, as its iterator reads them; any other iterable iterated) */
    PyObject *list = PyList_CheckExact(a[0]) ? a[0] : NULL;
    for (Py_ssize_t k = 0; !err; k++) {
        h = list == NULL ? PyIter_Next(it) : k < PyList_GET_SIZE(list) ? Py_NewRef(PyList_GET_ITEM(list, k)) : NULL;
        if (h == NULL)
            break;
        long long iv = 0;
        /* (an exact int: its value, and its hash for slot_page's lookup, read off the object;
         * any other slot, a wide int included, through the object API, which raises as Python) */
        int small = exact && small_int(h, &iv);
        Py_ssize_t i = small ? (Py_ssize_t)iv : -1;
        PyObject *b = NULL, *name = NULL, *spec = NULL;
        if (i >= 0 && i < PyByteArray_GET_SIZE(raw) && i < PyList_GET_SIZE(names) &&
                (unsigned char)PyByteArray_AS_STRING(raw)[i] < PyList_GET_SIZE(table)) {
            name = Py_NewRef(PyList_GET_ITEM(table, (unsigned char)PyByteArray_AS_STRING(raw)[i]));
            PyObject *prev = PyList_GET_ITEM(names, i);
            PyList_SET_ITEM(names, i, Py_NewRef(name));
            Py_DECREF(prev);
            err = (spec = PyLong_FromSsize_t(i + 1)) == NULL || PySet_Add(dirty, spec) < 0;
        } else {
            b = PyObject_GetItem(raw, h);
            name = b == NULL ? NULL : PyObject_GetItem(table, b);
            err = name == NULL || PyObject_SetItem(names, h, name) < 0 ||
                  (spec = PyNumber_Add(h, one)) == NULL || PySet_Add(dirty, spec) < 0;
        }
        if (!err) {
            /* (borrowed from slot_page, as before; once added, held holds it too, which keeps
             * `last` alive for the pointer test. Read off its entry where that entry holds h:
             * the map's slot_page is laid out by slot, pos_entry) */
            PyObject *x = small && PyDict_CheckExact(slot_page) ? pos_entry(slot_page, h, iv) : NULL;
            if (x == NULL)
                x = dict_get_h(slot_page, h, small ? (iv == -1 ? -2 : (Py_hash_t)iv) : -1);
            err = x == NULL && PyErr_Occurred();
            if (!err && x != NULL && x != Py_None && x != last) {
                err = PySet_Add(held, x) < 0;
                last = x;
            }
        }
        Py_XDECREF(spec);
        Py_XDECREF(name);
        Py_XDECREF(b);
        Py_DECREF(h);
    }
    return finish(it, err, held, one, NULL, NULL);
}

/* first_not_in_state(names, slots, state): the first spec slot h of slots with not
 * 0 < h <= len(names), or names[h - 1] != state; None when there is none. */
static PyObject *first_not_in_state(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("first_not_in_state", n, 3))
        return NULL;
    PyObject *names = a[0], *state = a[2];
    Py_ssize_t len = PyObject_Length(names);
    if (len < 0)
        return NULL;
    PyObject *it = PyObject_GetIter(a[1]);
    if (it == NULL)
        return NULL;
    PyObject *zero = PyLong_FromLong(0), *one = PyLong_FromLong(1), *nlen = PyLong_FromSsize_t(len);
    PyObject *h, *out = NULL;
    int err = zero == NULL || one == NULL || nlen == NULL;
    while (!err && out == NULL && (h = PyIter_Next(it)) != NULL) {
        /* (Python's chain 0 < h <= n: each test only when the one before it held) */
        int above = PyObject_RichCompareBool(zero, h, Py_LT);
        int within = above <= 0 ? above : PyObject_RichCompareBool(h, nlen, Py_LE);
        int bad = within;
        if (within > 0) {
            PyObject *i = PyNumber_Subtract(h, one);
            PyObject *st = i == NULL ? NULL : PyObject_GetItem(names, i);
            bad = st == NULL ? -1 : PyObject_RichCompareBool(st, state, Py_NE);
            Py_XDECREF(st);
            Py_XDECREF(i);
        } else if (within == 0) {
            bad = 1;
        }
        if (bad < 0)
            err = 1;
        else if (bad)
            out = Py_NewRef(h);
        Py_DECREF(h);
    }
    return finish(it, err, out, zero, one, nlen);
}

/* first_where(d, pos, want): the first q of pos whose value d[q] is true when want is true,
 * false when it is not (Python's truth of each); None when there is none. */
static PyObject *first_where(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("first_where", n, 3))
        return NULL;
    PyObject *d = a[0];
    int want = PyObject_IsTrue(a[2]);
    if (want < 0)
        return NULL;
    PyObject *it = PyObject_GetIter(a[1]);
    if (it == NULL)
        return NULL;
    PyObject *q, *out = NULL;
    int err = 0;
    while (!err && out == NULL && (q = PyIter_Next(it)) != NULL) {
        PyObject *v = PyObject_GetItem(d, q);
        int truth = v == NULL ? -1 : PyObject_IsTrue(v);
        Py_XDECREF(v);
        if (truth < 0)
            err = 1;
        else if (truth == want)
            out = Py_NewRef(q);
        Py_DECREF(q);
    }
    return finish(it, err, out, NULL, NULL, NULL);
}

/* variables_of(delta): the set of the variables a sync's delta wrote, delta[0::3] (a delta is
 * flat: variable, key, old value, then the next write's, `record`). A variable that is the very
 * object the entry before named is not added again (a run of one variable's writes). */
static PyObject *variables_of(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("variables_of", n, 1))
        return NULL;
    if (!PyList_CheckExact(a[0]) && !PyTuple_CheckExact(a[0])) {
        PyErr_Format(PyExc_TypeError, "variables_of: a delta is a list or a tuple, not %.100s", Py_TYPE(a[0])->tp_name);
        return NULL;
    }
    PyObject *delta = a[0], *out = PySet_New(NULL), *last = NULL;
    if (out == NULL)
        return NULL;
    /* (adding to the set may run an item's __hash__ or __eq__, which may change a list: its
     * size is read at each entry, and the item added and the last one are held) */
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(delta); i += 3) {
        PyObject *v = Py_NewRef(PySequence_Fast_GET_ITEM(delta, i));
        if (v != last && PySet_Add(out, v) < 0) {
            Py_DECREF(v);
            Py_XDECREF(last);
            Py_DECREF(out);
            return NULL;
        }
        Py_XSETREF(last, v);
    }
    Py_XDECREF(last);
    return out;
}

/* nodes_at(keys, positions, L): the set of keys[p][0] for each p of positions with p < L. */
static PyObject *nodes_at(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("nodes_at", n, 3))
        return NULL;
    PyObject *keys = a[0], *L = a[2];
    Items w;
    if (items_begin(&w, a[1]) < 0)
        return NULL;
    PyObject *zero = PyLong_FromLong(0), *out = PySet_New(NULL), *last = NULL, *p;
    int err = zero == NULL || out == NULL;
    /* (the map's own types, a list of (node, index) tuples and exact int positions: compared
     * and indexed in C; anything else through the object API, as Python does it. A node's
     * pages lie at neighbouring positions, which a set of positions mostly yields in a row:
     * the node added just before is not added again, a set holding it already) */
    long long lv, pv;
    int lint = PyList_CheckExact(keys) && int_value(L, &lv);
    while (!err && (p = items_next(&w)) != NULL) {
        int pint = lint && int_value(p, &pv);
        int in = pint ? pv < lv : PyObject_RichCompareBool(p, L, Py_LT);
        if (in < 0) {
            err = 1;
        } else if (in) {
            PyObject *k = NULL, *x;
            if (pint && pv >= 0 && pv < PyList_GET_SIZE(keys) && PyTuple_CheckExact(PyList_GET_ITEM(keys, pv)) &&
                PyTuple_GET_SIZE(PyList_GET_ITEM(keys, pv)) > 0)
                x = Py_NewRef(PyTuple_GET_ITEM(PyList_GET_ITEM(keys, pv), 0));     /* (held before any call) */
            else
                x = (k = item_at(keys, p)) == NULL ? NULL : item_at(k, zero);
            err = x == NULL || (x != last && PySet_Add(out, x) < 0);
            Py_XSETREF(last, x);
            Py_XDECREF(k);
        }
        Py_DECREF(p);
    }
    Py_XDECREF(last);
    return finish(w.it, err, out, zero, NULL, NULL);
}

/* host[p] (a new reference), as PyObject_GetItem reads it, off its entry where host is an exact
 * dict and p a small int position held there (pos_entry) */
static inline PyObject *page_item(PyObject *host, PyObject *p) {
    long long k;
    PyObject *v;
    if (PyDict_CheckExact(host) && small_int(p, &k) && (v = pos_entry(host, p, k)) != NULL)
        return Py_NewRef(v);
    return PyObject_GetItem(host, p);
}

/* prefix_breach(host, pos, q) (breach_along, also tree_prefix_breach's per-node test): along
 * pos in order, each page's parent the page before it (the first's q; None: none), the first
 * (p, parent) with host[p] != 0 and host[parent] == 0; None when there is none. */
static PyObject *breach_along(PyObject *host, PyObject *pos, PyObject *q0) {
    PyObject *it = PyObject_GetIter(pos);
    if (it == NULL)
        return NULL;
    PyObject *zero = PyLong_FromLong(0), *q = Py_NewRef(q0), *p, *out = NULL;
    int err = zero == NULL;
    while (!err && out == NULL && (p = PyIter_Next(it)) != NULL) {
        if (q != Py_None) {
            /* (Python's `host[p] != 0 and host[q] == 0`: the second read only if the first held) */
            long long v;
            PyObject *hp = page_item(host, p);
            int set = hp == NULL ? -1 : int_value(hp, &v) ? v != 0 : PyObject_RichCompareBool(hp, zero, Py_NE);
            Py_XDECREF(hp);
            int gap = set;
            if (set > 0) {
                PyObject *hq = page_item(host, q);
                gap = hq == NULL ? -1 : int_value(hq, &v) ? v == 0 : PyObject_RichCompareBool(hq, zero, Py_EQ);
                Py_XDECREF(hq);
            }
            if (gap < 0)
                err = 1;
            else if (gap > 0 && (out = PyTuple_Pack(2, p, q)) == NULL)
                err = 1;
        }
        Py_SETREF(q, p);    /* (takes p's reference) */
    }
    return finish(it, err, out, zero, q, NULL);
}

static PyObject *prefix_breach(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("prefix_breach", n, 3))
        return NULL;
    return breach_along(a[0], a[1], a[2]);
}

/* ---- HostTier's event binder: hicache/monitors/maps/host_tier.py's HostTierMap.bind and the
 * binders it dispatches to (`_bind_lock`, `_bind_end`, `_bind_any`, `_request_event`), which
 * define it, over the map's own bookkeeping dicts and set. Sample mode binds every event
 * (the map follows requests through their events: the runtime keeps no request table), so
 * this is most of what an unsampled event costs; in Python it is two frames and ~4k
 * instructions an event.
 *
 * What each action is to the binder is decided once, in Python (`host_tier._bind_table`):
 * action -> (bits, the request phase after it, its compound step); an action not in the
 * table is bound by the general rule with no bit set (as `_bind_any` binds an action it does
 * not name) and its step asked of `compound_step`. The same reads, writes and comparisons as
 * the Python, in the same order; an exception leaves the writes made before it. */
enum {
    BIND_LAYER = 1,          /* LoadBackLayer: no step, nothing bound */
    BIND_LOCK = 2,           /* _bind_lock's (RequestMatch, DeviceInsert) */
    BIND_END = 4,            /* _bind_end's (RequestFinish, RequestAbort) */
    BIND_PHASE = 8,          /* in _PHASE */
    BIND_MOVES = 16,         /* in _MOVES_LOCK */
    BIND_MATCH = 32,         /* RequestMatch */
    BIND_LOAD_START = 64,    /* LoadBackStart */
    BIND_LOAD_END = 128,     /* in _LOAD_ENDS */
    BIND_BACKUP_START = 256, /* BackupStart */
    BIND_BACKUP_FINISH = 512 /* BackupFinish */
};

static PyObject *s_rid, *s_node, *s_blocking, *s_slots, *s_loading;

/* the event fields' and a node's loading field's names (the binders read them) */
static int event_names(void) {
    static const char *const names[] = {"rid", "node", "blocking", "slots", "loading"};
    PyObject **const slots[] = {&s_rid, &s_node, &s_blocking, &s_slots, &s_loading};
    return intern_names(names, slots, 5);
}

typedef struct {
    PyObject_HEAD
    PyObject *phase, *loads, *ending, *req_node, *sync_backup;   /* the map's bookkeeping */
    PyObject *table;          /* action -> (bits, phase after or None, steps) */
    PyObject *compound_step;  /* an action's steps when the table has none */
    vectorcallfunc vectorcall;
} Binder;

/* d.pop(key, None), the value dropped; -1: error */
static int dict_discard(PyObject *d, PyObject *key) {
    int r = PyDict_Contains(d, key);
    if (r <= 0)
        return r;
    return PyDict_DelItem(d, key);
}

/* bool(loads.get(rid)) and rid in phase; -1: error */
static int loading_and_live(Binder *b, PyObject *rid) {
    PyObject *n = PyDict_GetItemWithError(b->loads, rid);
    if (n == NULL)
        return PyErr_Occurred() ? -1 : 0;
    int t = PyObject_IsTrue(n);
    if (t <= 0)
        return t;
    return PyDict_Contains(b->phase, rid);
}

/* a request leaves: ending, "loading", while a load of its is still to finish; else gone */
static int leave(Binder *b, PyObject *rid) {
    int r = loading_and_live(b, rid);
    if (r < 0)
        return -1;
    if (r) {
        if (PySet_Add(b->ending, rid) < 0)
            return -1;
        return PyDict_SetItem(b->phase, rid, s_loading);
    }
    return dict_discard(b->phase, rid);
}

/* _request_event(action, rid) */
static int request_event(Binder *b, long bits, PyObject *ph, PyObject *rid) {
    if (bits & BIND_LOAD_START) {
        PyObject *n = PyDict_GetItemWithError(b->loads, rid);
        if (n == NULL && PyErr_Occurred())
            return -1;
        PyObject *one = PyLong_FromLong(1);
        if (one == NULL)
            return -1;
        PyObject *v = n == NULL ? Py_NewRef(one) : PyNumber_Add(n, one);
        Py_DECREF(one);
        if (v == NULL)
            return -1;
        int rc = PyDict_SetItem(b->loads, rid, v);
        Py_DECREF(v);
        if (rc < 0)
            return -1;
    } else if (bits & BIND_LOAD_END) {
        PyObject *n = PyDict_GetItemWithError(b->loads, rid);
        if (n == NULL && PyErr_Occurred())
            return -1;
        if (n != NULL) {
            PyObject *one = PyLong_FromLong(1);
            if (one == NULL)
                return -1;
            PyObject *v = PyNumber_Subtract(n, one);
            Py_DECREF(one);
            if (v == NULL)
                return -1;
            int rc = PyDict_SetItem(b->loads, rid, v);
            int t = rc < 0 ? -1 : PyObject_IsTrue(v);
            Py_DECREF(v);
            if (t < 0)
                return -1;
            if (!t) {
                if (PyDict_DelItem(b->loads, rid) < 0)
                    return -1;
                int e = PySet_Contains(b->ending, rid);
                if (e < 0)
                    return -1;
                if (e) {
                    if (PySet_Discard(b->ending, rid) < 0)
                        return -1;
                    return dict_discard(b->phase, rid);
                }
            }
        }
    }
    if (ph == Py_None)
        return leave(b, rid);
    int e = PySet_Contains(b->ending, rid);
    if (e)
        return e < 0 ? -1 : 0;
    int live = (bits & BIND_MATCH) ? 1 : PyDict_Contains(b->phase, rid);
    if (live <= 0)
        return live;
    return PyDict_SetItem(b->phase, rid, ph);
}

/* req_node[rid] = fields["node"] unless that is None (or absent) */
static int lock_on(Binder *b, PyObject *fields, PyObject *rid) {
    PyObject *node = PyDict_GetItemWithError(fields, s_node);
    if (node == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (node == Py_None)
        return 0;
    return PyDict_SetItem(b->req_node, rid, node);
}

/* _bind_lock (rid not None) */
static int bind_lock(Binder *b, long bits, PyObject *ph, PyObject *fields, PyObject *rid) {
    int out = PySet_Contains(b->ending, rid);
    if (out < 0)
        return -1;
    if (!out && !(bits & BIND_MATCH)) {
        int live = PyDict_Contains(b->phase, rid);
        if (live < 0)
            return -1;
        out = !live;
    }
    if (out)
        return dict_discard(b->req_node, rid);
    if (PyDict_SetItem(b->phase, rid, ph) < 0)
        return -1;
    return lock_on(b, fields, rid);
}

/* _bind_any */
static int bind_any(Binder *b, long bits, PyObject *ph, PyObject *fields, PyObject *rid) {
    if (rid != NULL) {
        if ((bits & BIND_PHASE) && request_event(b, bits, ph, rid) < 0)
            return -1;
        int live = PyDict_Contains(b->phase, rid);
        if (live < 0)
            return -1;
        int e = live ? PySet_Contains(b->ending, rid) : 0;
        if (e < 0)
            return -1;
        if (!live || e) {
            if (dict_discard(b->req_node, rid) < 0)
                return -1;
        } else if ((bits & BIND_MOVES) && lock_on(b, fields, rid) < 0)
            return -1;
    }
    if (bits & BIND_BACKUP_START) {
        PyObject *node = PyDict_GetItemWithError(fields, s_node);
        if (node == NULL)
            return PyErr_Occurred() ? -1 : 0;
        if (node == Py_None)
            return 0;
        PyObject *blocking = PyDict_GetItemWithError(fields, s_blocking);
        if (blocking == NULL && PyErr_Occurred())
            return -1;
        int t = blocking == NULL ? 0 : PyObject_IsTrue(blocking);
        if (t <= 0)
            return t;
        PyObject *slots = PyDict_GetItemWithError(fields, s_slots);
        if (slots == NULL && PyErr_Occurred())
            return -1;
        int full = slots == NULL ? 0 : PyObject_IsTrue(slots);
        if (full < 0)
            return -1;
        PyObject *lst = full ? PySequence_List(slots) : PyList_New(0);
        if (lst == NULL)
            return -1;
        int rc = PyDict_SetItem(b->sync_backup, node, lst);
        Py_DECREF(lst);
        return rc;
    }
    if (bits & BIND_BACKUP_FINISH) {
        PyObject *node = PyDict_GetItemWithError(fields, s_node);
        if (node == NULL && PyErr_Occurred())
            return -1;
        return dict_discard(b->sync_backup, node == NULL ? Py_None : node);
    }
    return 0;
}

static PyObject *binder_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Binder *b = (Binder *)self;
    if (PyVectorcall_NARGS(nargsf) != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "a binder takes (action, fields)");
        return NULL;
    }
    PyObject *action = args[0], *fields = args[1];
    if (!PyDict_Check(fields)) {
        PyErr_SetString(PyExc_TypeError, "a binder's fields must be a dict");
        return NULL;
    }
    PyObject *entry = PyDict_GetItemWithError(b->table, action);
    if (entry == NULL && PyErr_Occurred())
        return NULL;
    long bits = 0;
    PyObject *ph = Py_None, *steps = NULL;
    if (entry != NULL) {
        bits = PyLong_AsLong(PyTuple_GET_ITEM(entry, 0));
        if (bits == -1 && PyErr_Occurred())
            return NULL;
        ph = PyTuple_GET_ITEM(entry, 1);
        steps = PyTuple_GET_ITEM(entry, 2);
    }
    if (bits & BIND_LAYER)
        Py_RETURN_NONE;
    PyObject *rid = PyDict_GetItemWithError(fields, s_rid);
    if (rid == NULL && PyErr_Occurred())
        return NULL;
    if (rid == Py_None)
        rid = NULL;
    Py_XINCREF(rid);      /* (held across the writes: a dict write may drop the fields' own) */
    int rc = 0;
    if (bits & BIND_LOCK)
        rc = rid == NULL ? 0 : bind_lock(b, bits, ph, fields, rid);
    else if (bits & BIND_END)
        rc = rid == NULL ? 0 : (leave(b, rid) < 0 ? -1 : dict_discard(b->req_node, rid));
    else
        rc = bind_any(b, bits, ph, fields, rid);
    Py_XDECREF(rid);
    if (rc < 0)
        return NULL;
    if (steps != NULL) {
        int t = PyObject_IsTrue(steps);
        if (t < 0)
            return NULL;
        if (t)
            return Py_NewRef(steps);
    }
    return PyObject_CallOneArg(b->compound_step, action);
}

static void binder_dealloc(PyObject *self) {
    Binder *b = (Binder *)self;
    Py_XDECREF(b->phase);
    Py_XDECREF(b->loads);
    Py_XDECREF(b->ending);
    Py_XDECREF(b->req_node);
    Py_XDECREF(b->sync_backup);
    Py_XDECREF(b->table);
    Py_XDECREF(b->compound_step);
    Py_TYPE(self)->tp_free(self);
}

static PyTypeObject BinderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_hicache_incmap.Binder",
    .tp_basicsize = sizeof(Binder),
    .tp_dealloc = binder_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Binder, vectorcall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "HostTierMap.bind over one map's bookkeeping",
};

/* binder(phase, loads, ending, req_node, sync_backup, table, compound_step): a Binder. Each
 * table entry is checked here, once, to be (int, phase, steps). */
static PyObject *binder(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("binder", n, 7))
        return NULL;
    if (check_type(a[0], &PyDict_Type, "binder", "phase") < 0 || check_type(a[1], &PyDict_Type, "binder", "loads") < 0
        || check_type(a[2], &PySet_Type, "binder", "ending") < 0
        || check_type(a[3], &PyDict_Type, "binder", "req_node") < 0
        || check_type(a[4], &PyDict_Type, "binder", "sync_backup") < 0
        || check_type(a[5], &PyDict_Type, "binder", "table") < 0)
        return NULL;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(a[5], &pos, &k, &v)) {
        if (!PyTuple_CheckExact(v) || PyTuple_GET_SIZE(v) != 3 || !PyLong_CheckExact(PyTuple_GET_ITEM(v, 0))) {
            PyErr_SetString(PyExc_TypeError, "binder: each table entry must be (bits, phase, steps)");
            return NULL;
        }
    }
    if (event_names() < 0)
        return NULL;
    Binder *b = PyObject_New(Binder, &BinderType);
    if (b == NULL)
        return NULL;
    b->phase = Py_NewRef(a[0]);
    b->loads = Py_NewRef(a[1]);
    b->ending = Py_NewRef(a[2]);
    b->req_node = Py_NewRef(a[3]);
    b->sync_backup = Py_NewRef(a[4]);
    b->table = Py_NewRef(a[5]);
    b->compound_step = Py_NewRef(a[6]);
    b->vectorcall = binder_call;
    return (PyObject *)b;
}

/* What attr_of and attr_set keep of one attribute of an object they read or write: plain_dict's
 * memo of the type, and the entry of the instance dict that held the name at the last read (-1:
 * none yet). One per name and role for every object read so: a memo names a type version and a
 * hint an entry whose key is tested, so objects of two types, or two dicts, only look up again,
 * never misread. */
typedef struct {
    unsigned int plain;
    Py_ssize_t hint;
} AttrMemo;

#define ATTR_MEMO_INIT {0, -1}

/* ---- IncrementalHostTierMap's bind after its load-backs' bookkeeping (host_tier_inc.py's
 * `bind`; loops.py's py_request_binder, the same reads, writes and calls in the same order):
 * the event's request's phase and lock before it (the request guards' pre-state, written to
 * the map: `phase_before`, `lock_before`), the map's own binder (HostTierMap.bind), then the
 * request's slot q taken at its first phase or freed when it leaves (`qtab`, `qslot`; the
 * pages of its load-backs re-mapped: `loading_nodes` into `requeue`), whether the request
 * rows are to be rebuilt (`req_dirty`) and a copy's node re-mapped (`by_id` into
 * `requeue`). In Python a frame of ~100 bytecodes and two more at a request's first and
 * last event: ~8k instructions of every request event's ~50k in strict mode.
 *
 * It holds the map's request bookkeeping (dicts of request ids and phases, the slot table,
 * each never rebound) and reads what holds nodes (`loading_nodes`, `by_id`, `requeue`, which
 * a sync rebinds) off the map at each use: nothing it holds refers back to the map, so it
 * needs no part in the cyclic collector. An exception leaves the writes made before it. */
typedef struct {
    PyObject_HEAD
    PyObject *binder;                           /* the map's HostTierMap.bind (its native Binder) */
    PyObject *phase, *ending, *req_node;        /* HostTierMap's bookkeeping */
    PyObject *qslot, *qtab;                     /* rid -> q; q - 1 -> rid or None */
    PyObject *phase_actions, *req_actions, *backup_actions;
    /* for each attribute of the map it reads or writes (attr_of, attr_set) */
    AttrMemo plain_phase_before, plain_lock_before, plain_req_dirty, plain_requeue, plain_loading_nodes,
        plain_by_id;
    vectorcallfunc vectorcall;
} RequestBinder;

static PyObject *s_get, *s_pop, *s_add, *s_phase_before, *s_lock_before, *s_req_dirty, *s_requeue,
    *s_loading_nodes, *s_by_id;

/* The instance dict PyObject_GetAttr and PyObject_SetAttr come down to for m.<name> (borrowed),
 * or NULL (nothing raised) where they would not: the type's getattro and setattro are the
 * generic ones, no class on its MRO has `name` (so no descriptor, data or not, comes first:
 * a property's setter runs, a class attribute is read, by the generic calls), and m keeps an
 * exact dict. `*plain` memoizes the MRO's answer: the version tag of the type found without
 * `name`, which is its alone (tags are never reused) and is dropped when the type or a base
 * is changed (an attribute set on a class), so a type whose valid tag it is still has no such
 * attribute. (_PyObject_GetDictPtr gives an object whose attributes are still kept inline its
 * dict, as reading `m.__dict__` does: the map, with more attributes than the inline keys
 * hold, has one already.) Why: the request step writes two or three attributes of the map at
 * every event (phase_before, lock_before, req_dirty), each ~460 instructions through the
 * generic setattr, ~200 this way. */
static PyObject *plain_dict(PyObject *m, PyObject *name, unsigned int *plain) {
    PyTypeObject *tp = Py_TYPE(m);
    if (tp->tp_getattro != PyObject_GenericGetAttr || tp->tp_setattro != PyObject_GenericSetAttr)
        return NULL;
    if (*plain == 0 || tp->tp_version_tag != *plain || !PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG)) {
        if (_PyType_Lookup(tp, name) != NULL)
            return NULL;
        /* (the tag the lookup gave the type, where it could: 0, no memo, where not) */
        *plain = PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG) ? tp->tp_version_tag : 0;
    }
    PyObject **dictptr = _PyObject_GetDictPtr(m);
    return dictptr != NULL && *dictptr != NULL && PyDict_CheckExact(*dictptr) ? *dictptr : NULL;
}

/* m.<name> = v, as PyObject_SetAttr writes it, through the dict's API (its version renewed;
 * -1: an error) */
static int attr_set(PyObject *m, PyObject *name, PyObject *v, AttrMemo *memo) {
    PyObject *dict = plain_dict(m, name, &memo->plain);
    if (dict == NULL)
        return PyObject_SetAttr(m, name, v);
    /* (held: the value it replaces, dropped inside, may run code that replaces m's dict) */
    Py_INCREF(dict);
    int rc = PyDict_SetItem(dict, name, v);
    Py_DECREF(dict);
    return rc;
}

/* obj.<name> as PyObject_GetAttr reads it (a new reference): where the generic lookup comes
 * down to obj's own dict (plain_dict), the entry that held the name at the last read is read
 * where it still holds the name itself (what the interpreter's LOAD_ATTR_WITH_HINT does),
 * else the name is looked up there and its entry kept. Why: a sync reads ~12 attributes of
 * its map and the request step several, each a probe of the map's large dict (~80
 * instructions) where the bytecode they replace read them by hint. 3.11's layout only
 * (elsewhere: the lookup). */
static PyObject *attr_of(PyObject *obj, PyObject *name, AttrMemo *memo) {
    PyObject *dict = plain_dict(obj, name, &memo->plain);
    if (dict == NULL)
        return PyObject_GetAttr(obj, name);
#ifdef HICACHE_POS_ENTRIES
    PyDictObject *mp = (PyDictObject *)dict;
    PyDictKeysObject *dk = mp->ma_keys;
    Py_ssize_t i = memo->hint;
    if (mp->ma_values == NULL && dk->dk_kind == DICT_KEYS_UNICODE && 0 <= i && i < dk->dk_nentries) {
        PyDictUnicodeEntry *ep = &DK_UNICODE_ENTRIES(dk)[i];
        if (ep->me_key == name && ep->me_value != NULL)
            return Py_NewRef(ep->me_value);
    }
#endif
    /* (held, as the generic lookup holds it: a key's __eq__ may replace obj's dict) */
    Py_INCREF(dict);
    PyObject *v = Py_XNewRef(PyDict_GetItemWithError(dict, name));
#ifdef HICACHE_POS_ENTRIES
    if (v != NULL) {
        mp = (PyDictObject *)dict;
        dk = mp->ma_keys;
        memo->hint = -1;
        if (mp->ma_values == NULL && dk->dk_kind == DICT_KEYS_UNICODE) {
            PyDictUnicodeEntry *ep = DK_UNICODE_ENTRIES(dk);
            for (Py_ssize_t k = 0; k < dk->dk_nentries; k++)
                if (ep[k].me_key == name) {
                    memo->hint = k;
                    break;
                }
        }
    }
#endif
    Py_DECREF(dict);
    if (v != NULL || PyErr_Occurred())
        return v;
    return PyObject_GetAttr(obj, name);
}

/* obj.<name> = v unless obj.<name> is v already (a write of the value it holds leaves the
 * object as it was: skipped, the read by hint ~20 instructions where the write through the
 * dict's API costs ~150: the flags a sync writes at every event mostly keep their values) */
static int attr_put(PyObject *obj, PyObject *name, PyObject *v, AttrMemo *memo) {
    PyObject *cur = attr_of(obj, name, memo);
    if (cur == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
    }
    int same = cur == v;
    Py_XDECREF(cur);
    return same ? 0 : attr_set(obj, name, v, memo);
}

/* m.get(key) (a new reference): get_via with the map writes' interned "get" */
static PyObject *get_of(PyObject *m, PyObject *key) {
    return get_via(m, key, s_get);
}

/* m.<attr>.get(key) (pop: .pop(key, None)), a new reference */
static PyObject *attr_get(PyObject *m, PyObject *attr, AttrMemo *plain, PyObject *key, int pop) {
    PyObject *d = attr_of(m, attr, plain);
    if (d == NULL)
        return NULL;
    PyObject *v;
    if (!pop) {
        v = get_of(d, key);
    } else if (PyDict_CheckExact(d)) {
        v = PyDict_GetItemWithError(d, key);
        if (v == NULL) {
            v = PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
        } else {
            Py_INCREF(v);
            if (PyDict_DelItem(d, key) < 0)
                Py_CLEAR(v);
        }
    } else {
        v = PyObject_CallMethodObjArgs(d, s_pop, key, Py_None, NULL);
    }
    Py_DECREF(d);
    return v;
}

/* `if loading: m.requeue |= loading` (loading: a request's load-back nodes); -1: error */
static int requeue_loading(RequestBinder *b, PyObject *m, PyObject *loading) {
    int t = PyObject_IsTrue(loading);
    if (t <= 0)
        return t;
    PyObject *r = attr_of(m, s_requeue, &b->plain_requeue);
    if (r == NULL)
        return -1;
    PyObject *u = PyNumber_InPlaceOr(r, loading);
    Py_DECREF(r);
    if (u == NULL)
        return -1;
    int rc = attr_set(m, s_requeue, u, &b->plain_requeue);
    Py_DECREF(u);
    return rc;
}

/* the first free q (a None in qtab, else one past its end) given to rid; its load-backs'
 * nodes re-mapped */
static int take_q(RequestBinder *b, PyObject *m, PyObject *rid) {
    PyObject *qtab = b->qtab;
    Py_ssize_t q = 0, n = PyList_GET_SIZE(qtab);
    while (q < n && PyList_GET_ITEM(qtab, q) != Py_None)
        q++;
    if (q < n) {
        if (PyList_SetItem(qtab, q, Py_NewRef(rid)) < 0)
            return -1;
    } else {
        if (PyList_Append(qtab, rid) < 0)
            return -1;
        q = PyList_GET_SIZE(qtab) - 1;
    }
    PyObject *slot = PyLong_FromSsize_t(q + 1);
    if (slot == NULL)
        return -1;
    int rc = PyDict_SetItem(b->qslot, rid, slot);
    Py_DECREF(slot);
    if (rc < 0)
        return -1;
    PyObject *loading = attr_get(m, s_loading_nodes, &b->plain_loading_nodes, rid, 0);
    if (loading == NULL)
        return -1;
    rc = requeue_loading(b, m, loading);
    Py_DECREF(loading);
    return rc;
}

/* rid's q freed (qtab's trailing free slots dropped); its load-backs' nodes re-mapped */
static int free_q(RequestBinder *b, PyObject *m, PyObject *rid) {
    PyObject *q = PyDict_GetItemWithError(b->qslot, rid), *one = NULL, *at = NULL;
    if (q == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, rid);
        return -1;
    }
    Py_INCREF(q);
    int rc = PyDict_DelItem(b->qslot, rid);
    if (rc == 0 && ((one = PyLong_FromLong(1)) == NULL || (at = PyNumber_Subtract(q, one)) == NULL))
        rc = -1;
    if (rc == 0)
        rc = PyObject_SetItem(b->qtab, at, Py_None);
    Py_XDECREF(at);
    Py_XDECREF(one);
    Py_DECREF(q);
    if (rc < 0)
        return -1;
    PyObject *qtab = b->qtab;
    Py_ssize_t n = PyList_GET_SIZE(qtab);
    while (n > 0 && PyList_GET_ITEM(qtab, n - 1) == Py_None) {
        if (PyList_SetSlice(qtab, n - 1, n, NULL) < 0)
            return -1;
        n = PyList_GET_SIZE(qtab);
    }
    PyObject *loading = attr_get(m, s_loading_nodes, &b->plain_loading_nodes, rid, 1);
    if (loading == NULL)
        return -1;
    rc = requeue_loading(b, m, loading);
    Py_DECREF(loading);
    return rc;
}

/* `x = m.by_id.get(fields.get("node")); if x is not None: m.requeue.add(x)` */
static int requeue_node(RequestBinder *b, PyObject *m, PyObject *fields) {
    PyObject *node = get_of(fields, s_node);
    if (node == NULL)
        return -1;
    PyObject *x = attr_get(m, s_by_id, &b->plain_by_id, node, 0);
    Py_DECREF(node);
    if (x == NULL)
        return -1;
    int rc = 0;
    if (x != Py_None) {
        PyObject *r = attr_of(m, s_requeue, &b->plain_requeue), *done = NULL;
        if (r == NULL)
            rc = -1;
        else if (PySet_CheckExact(r))
            rc = PySet_Add(r, x);
        else if ((done = PyObject_CallMethodOneArg(r, s_add, x)) == NULL)
            rc = -1;
        Py_XDECREF(done);
        Py_XDECREF(r);
    }
    Py_DECREF(x);
    return rc;
}

static PyObject *request_binder_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    RequestBinder *b = (RequestBinder *)self;
    if (PyVectorcall_NARGS(nargsf) != 3 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "a request binder takes (map, action, fields)");
        return NULL;
    }
    PyObject *m = args[0], *action = args[1], *fields = args[2];
    PyObject *steps = NULL, *before = NULL, *lock = NULL;
    PyObject *rid = get_of(fields, s_rid);
    if (rid == NULL)
        return NULL;
    int t;
    if (rid == Py_None) {
        if (attr_set(m, s_phase_before, Py_None, &b->plain_phase_before) < 0
            || attr_set(m, s_lock_before, Py_None, &b->plain_lock_before) < 0)
            goto fail;
    } else {
        if ((t = PySequence_Contains(b->ending, rid)) < 0)
            goto fail;
        before = t ? Py_NewRef(Py_None) : get_of(b->phase, rid);
        if (before == NULL || attr_set(m, s_phase_before, before, &b->plain_phase_before) < 0)
            goto fail;
        lock = get_of(b->req_node, rid);
        if (lock == NULL || attr_set(m, s_lock_before, lock, &b->plain_lock_before) < 0)
            goto fail;
    }
    {
        PyObject *argv[] = {action, fields};
        steps = PyObject_Vectorcall(b->binder, argv, 2, NULL);
    }
    if (steps == NULL)
        goto fail;
    if (rid != Py_None) {
        if (attr_set(m, s_req_dirty, Py_True, &b->plain_req_dirty) < 0
            || (t = PySequence_Contains(b->phase_actions, action)) < 0)
            goto fail;
        if (t) {
            int live = PyDict_Contains(b->phase, rid), held;
            if (live < 0 || (held = PyDict_Contains(b->qslot, rid)) < 0)
                goto fail;
            if (live ? !held && take_q(b, m, rid) < 0 : held && free_q(b, m, rid) < 0)
                goto fail;
        }
    } else {
        if ((t = PySequence_Contains(b->req_actions, action)) < 0
            || (t && attr_set(m, s_req_dirty, Py_True, &b->plain_req_dirty) < 0))
            goto fail;
    }
    if ((t = PySequence_Contains(b->backup_actions, action)) < 0 || (t && requeue_node(b, m, fields) < 0))
        goto fail;
    Py_DECREF(rid);
    Py_XDECREF(before);
    Py_XDECREF(lock);
    return steps;
fail:
    Py_DECREF(rid);
    Py_XDECREF(before);
    Py_XDECREF(lock);
    Py_XDECREF(steps);
    return NULL;
}

static void request_binder_dealloc(PyObject *self) {
    RequestBinder *b = (RequestBinder *)self;
    Py_XDECREF(b->binder);
    Py_XDECREF(b->phase);
    Py_XDECREF(b->ending);
    Py_XDECREF(b->req_node);
    Py_XDECREF(b->qslot);
    Py_XDECREF(b->qtab);
    Py_XDECREF(b->phase_actions);
    Py_XDECREF(b->req_actions);
    Py_XDECREF(b->backup_actions);
    Py_TYPE(self)->tp_free(self);
}

static PyTypeObject RequestBinderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_hicache_incmap.RequestBinder",
    .tp_basicsize = sizeof(RequestBinder),
    .tp_dealloc = request_binder_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(RequestBinder, vectorcall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "IncrementalHostTierMap.bind's request step over one map's bookkeeping",
};

/* request_binder(binder, phase, ending, req_node, qslot, qtab, phase_actions, req_actions,
 * backup_actions): a RequestBinder, called (map, action, fields) */
static PyObject *request_binder(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("request_binder", n, 9))
        return NULL;
    if (check_type(a[1], &PyDict_Type, "request_binder", "phase") < 0
        || check_type(a[2], &PySet_Type, "request_binder", "ending") < 0
        || check_type(a[3], &PyDict_Type, "request_binder", "req_node") < 0
        || check_type(a[4], &PyDict_Type, "request_binder", "qslot") < 0
        || check_type(a[5], &PyList_Type, "request_binder", "qtab") < 0)
        return NULL;
    static const char *const map_names[] = {"get", "pop", "add", "phase_before", "lock_before", "req_dirty",
                                            "requeue", "loading_nodes", "by_id"};
    PyObject **const map_slots[] = {&s_get, &s_pop, &s_add, &s_phase_before, &s_lock_before, &s_req_dirty,
                                    &s_requeue, &s_loading_nodes, &s_by_id};
    if (intern_names(map_names, map_slots, 9) < 0)
        return NULL;
    if (event_names() < 0)
        return NULL;
    RequestBinder *b = PyObject_New(RequestBinder, &RequestBinderType);
    if (b == NULL)
        return NULL;
    b->binder = Py_NewRef(a[0]);
    b->phase = Py_NewRef(a[1]);
    b->ending = Py_NewRef(a[2]);
    b->req_node = Py_NewRef(a[3]);
    b->qslot = Py_NewRef(a[4]);
    b->qtab = Py_NewRef(a[5]);
    b->phase_actions = Py_NewRef(a[6]);
    b->req_actions = Py_NewRef(a[7]);
    b->backup_actions = Py_NewRef(a[8]);
    AttrMemo none = ATTR_MEMO_INIT;
    b->plain_phase_before = b->plain_lock_before = b->plain_req_dirty = none;
    b->plain_requeue = b->plain_loading_nodes = b->plain_by_id = none;
    b->vectorcall = request_binder_call;
    return (PyObject *)b;
}

/* The map a callable of its own refers to weakly (load_bind's, host_sync_step's): a new
 * reference, or NULL with ReferenceError ("<what>: its map is gone") once it is gone. */
static inline PyObject *map_of(PyObject *ref, const char *what) {
    PyObject *m;
#if PY_VERSION_HEX >= 0x030D0000
    /* (PyWeakref_GetObject is deprecated from 3.13, to be removed: GetRef returns 1 with m a
     * new reference, 0 with m NULL when the map is gone, -1 with m NULL and an error set) */
    int alive = PyWeakref_GetRef(ref, &m);
    if (alive < 0)
        return NULL;
    if (alive == 0) {
        PyErr_Format(PyExc_ReferenceError, "%s: its map is gone", what);
        return NULL;
    }
#else
    m = PyWeakref_GetObject(ref);      /* (borrowed: None when the map is gone) */
    if (m == NULL)
        return NULL;
    if (m == Py_None) {
        PyErr_Format(PyExc_ReferenceError, "%s: its map is gone", what);
        return NULL;
    }
    Py_INCREF(m);
#endif
    return m;
}

/* The class's `name` as the instance's would be looked up without the map's own attribute:
 * where it is not `own` (a subclass's, or one patched on the class: a profiler's wrapper), *out
 * is it bound to m (a new reference) and 1 is returned; 0 where it is `own`; -1 on an error
 * (AttributeError, "<what>: the map's class has none", where the class has none). */
static inline int overridden(PyObject *m, PyObject *name, PyObject *own, PyObject **out, const char *what) {
    PyObject *attr = _PyType_Lookup(Py_TYPE(m), name);     /* (borrowed) */
    if (attr == own)
        return 0;
    if (attr == NULL) {
        PyErr_Format(PyExc_AttributeError, "%s: the map's class has none", what);
        return -1;
    }
    Py_INCREF(attr);
    descrgetfunc get = Py_TYPE(attr)->tp_descr_get;
    *out = get == NULL ? Py_NewRef(attr) : get(attr, m, (PyObject *)Py_TYPE(m));
    Py_DECREF(attr);
    return *out == NULL ? -1 : 1;
}

/* A map's method as a callable of its own (the map's instance attribute, read off the instance
 * before the class: host_tier_inc.py installs them), over a weak reference to the map (its dict
 * holds this: a strong one would make every map a cycle, kept until the collector runs), what
 * the method reads that the map never rebinds (`ctx`, checked once by the constructor) and the
 * class's method it stands for (`own`): while the class's `name` is `own`, impl(m, ctx, args)
 * does the method's work; while it is another (a subclass's, or one patched on the class: a
 * profiler's wrapper), that one is called instead, bound to the map. The map's sync
 * (host_sync_step), guard (guard_step) and effect (effect_step). Why: the monitor calls each at
 * every event it concerns, and as a method each call was a frame entered from C. */
typedef PyObject *(*map_step_fn)(PyObject *m, PyObject *const *ctx, PyObject *const *args);

typedef struct {
    PyObject_HEAD
    PyObject *ref;        /* a weak reference to the map */
    PyObject *ctx;        /* the method's reads, checked */
    PyObject *own;        /* the class's method this stands for */
    PyObject *name;       /* its name (interned) */
    const char *what;     /* ... as the errors say it */
    Py_ssize_t nargs;     /* the arguments it takes */
    map_step_fn impl;
    vectorcallfunc vectorcall;
} MapStep;

static PyObject *map_step_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    MapStep *st = (MapStep *)self;
    if (PyVectorcall_NARGS(nargsf) != st->nargs || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_Format(PyExc_TypeError, "a map's %s takes %zd positional arguments", st->what, st->nargs);
        return NULL;
    }
    if (st->ref == NULL || st->ctx == NULL || st->own == NULL) {
        PyErr_Format(PyExc_RuntimeError, "a map's %s cleared by the collector was called", st->what);
        return NULL;
    }
    PyObject *m = map_of(st->ref, st->what);
    if (m == NULL)
        return NULL;
    /* (ctx and own held across the calls below, which may run a collection that clears this) */
    PyObject *ctx = Py_NewRef(st->ctx), *own = Py_NewRef(st->own), *r = NULL, *other = NULL;
    int over = overridden(m, st->name, own, &other, st->what);
    if (over > 0) {
        r = PyObject_Vectorcall(other, args, st->nargs, NULL);
        Py_DECREF(other);
    } else if (over == 0) {
        r = st->impl(m, &PyTuple_GET_ITEM(ctx, 0), args);
    }
    Py_DECREF(ctx);
    Py_DECREF(own);
    Py_DECREF(m);
    return r;
}

static int map_step_traverse(PyObject *self, visitproc visit, void *arg) {
    MapStep *st = (MapStep *)self;
    Py_VISIT(st->ref);
    Py_VISIT(st->ctx);
    Py_VISIT(st->own);
    return 0;
}

static int map_step_clear(PyObject *self) {
    MapStep *st = (MapStep *)self;
    Py_CLEAR(st->ref);
    Py_CLEAR(st->ctx);
    Py_CLEAR(st->own);
    return 0;
}

static PyTypeObject MapStepType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_hicache_incmap.MapStep",
    .tp_basicsize = sizeof(MapStep),
    .tp_dealloc = gc_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(MapStep, vectorcall),
    .tp_traverse = map_step_traverse,
    .tp_clear = map_step_clear,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "a map's method over the map (weakly held), what it reads and the class's method",
};

/* A MapStep of `fn` (its constructor's name: the errors') over a[0] (a weak reference), a[1] (a
 * tuple of `size` items, its further checks the caller's) and a[2]; NULL on an error */
static PyObject *map_step_new(const char *fn, PyObject *const *a, Py_ssize_t n, Py_ssize_t size, PyObject *name,
                              const char *what, Py_ssize_t nargs, map_step_fn impl) {
    if (!arity(fn, n, 3))
        return NULL;
    if (!PyWeakref_CheckRef(a[0])) {
        PyErr_Format(PyExc_TypeError, "%s: ref must be a weak reference", fn);
        return NULL;
    }
    if (!PyTuple_CheckExact(a[1]) || PyTuple_GET_SIZE(a[1]) != size) {
        PyErr_Format(PyExc_TypeError, "%s: ctx must be a tuple of %zd items", fn, size);
        return NULL;
    }
    MapStep *st = PyObject_GC_New(MapStep, &MapStepType);
    if (st == NULL)
        return NULL;
    st->ref = Py_NewRef(a[0]);
    st->ctx = Py_NewRef(a[1]);
    st->own = Py_NewRef(a[2]);
    st->name = name;
    st->what = what;
    st->nargs = nargs;
    st->impl = impl;
    st->vectorcall = map_step_call;
    PyObject_GC_Track(st);
    return (PyObject *)st;
}

/* ---- IncrementalHostTierMap's `bind` as a callable of its own (host_tier_inc.py installs it
 * as the map's instance attribute, what a monitor calls at every event, while the class's
 * bind is IncrementalHostTierMap's; loops.py's py_load_bind, the same reads and calls): a
 * MapStep whose work is: the events of a load-back's course (`events`) by the class's own
 * bind, slow(m, action, fields), every other by the map's request step, m._bind_step(m,
 * action, fields), read off the map at each call (python_bind replaces it). Why: as a method
 * each event entered a frame from C for one set test and one call. */
static PyObject *s_bind_step, *s_bind_name;
static AttrMemo hm_bind_step = ATTR_MEMO_INIT;

static PyObject *load_bind_impl(PyObject *m, PyObject *const *ctx, PyObject *const *args) {
    /* ctx: (events, slow) */
    int special = PySet_Contains(ctx[0], args[0]);
    if (special < 0)
        return NULL;
    PyObject *argv[3] = {m, args[0], args[1]};
    if (special)
        return PyObject_Vectorcall(ctx[1], argv, 3, NULL);
    PyObject *step = attr_of(m, s_bind_step, &hm_bind_step);
    if (step == NULL)
        return NULL;
    PyObject *r = PyObject_Vectorcall(step, argv, 3, NULL);
    Py_DECREF(step);
    return r;
}

/* load_bind(ref, events, slow): the map's bind as a MapStep (action, fields) over a weak
 * reference, a frozenset and the class's bind it stands for */
static PyObject *load_bind(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("load_bind", n, 3))
        return NULL;
    if (check_type(a[1], &PyFrozenSet_Type, "load_bind", "events") < 0)
        return NULL;
    if (!PyCallable_Check(a[2])) {
        PyErr_SetString(PyExc_TypeError, "load_bind: slow must be callable");
        return NULL;
    }
    if ((s_bind_step == NULL && (s_bind_step = PyUnicode_InternFromString("_bind_step")) == NULL) ||
        (s_bind_name == NULL && (s_bind_name = PyUnicode_InternFromString("bind")) == NULL))
        return NULL;
    PyObject *ctx = PyTuple_Pack(2, a[1], a[2]);
    if (ctx == NULL)
        return NULL;
    PyObject *argv[3] = {a[0], ctx, a[2]};
    PyObject *st = map_step_new("load_bind", argv, 3, 2, s_bind_name, "bind", 2, load_bind_impl);
    Py_DECREF(ctx);
    return st;
}

/* loops.py's py_vacate: the holes are taken as sorted(holes, reverse=True) takes them
 * (reversed, sorted stably, reversed back: equal items keep their order); `p != last` is
 * Python's comparison (no identity shortcut) unless both are exact ints. The tuple (origin,
 * the new L), or NULL on an error. */
static PyObject *vacate_holes(PyObject *holes, PyObject *L0) {
    PyObject *order = PySequence_List(holes);
    if (order == NULL)
        return NULL;
    if (PyList_Reverse(order) < 0 || PyList_Sort(order) < 0 || PyList_Reverse(order) < 0) {
        Py_DECREF(order);
        return NULL;
    }
    PyObject *origin = PyDict_New(), *one = PyLong_FromLong(1), *L = Py_NewRef(L0);
    int err = origin == NULL || one == NULL;
    for (Py_ssize_t i = 0; !err && i < PyList_GET_SIZE(order); i++) {
        PyObject *p = Py_NewRef(PyList_GET_ITEM(order, i));
        PyObject *last = PyNumber_Subtract(L, one);
        int ne = last == NULL ? -1 : ints_or_compare(p, last, Py_NE);
        if (ne > 0) {
            /* origin[p] = origin.pop(last, last) */
            PyObject *src = PyDict_GetItemWithError(origin, last);
            if (src != NULL) {
                Py_INCREF(src);
                if (PyDict_DelItem(origin, last) < 0)
                    Py_CLEAR(src);
            } else if (!PyErr_Occurred()) {
                src = Py_NewRef(last);
            }
            ne = src == NULL || PyDict_SetItem(origin, p, src) < 0 ? -1 : 1;
            Py_XDECREF(src);
        }
        err = ne < 0;
        Py_DECREF(p);
        if (last != NULL)
            Py_SETREF(L, last);
    }
    PyObject *out = err ? NULL : PyTuple_Pack(2, origin, L);
    Py_DECREF(order);
    Py_XDECREF(origin);
    Py_XDECREF(one);
    Py_DECREF(L);
    return out;
}

/* vacate(holes, L): vacate_holes. */
static PyObject *vacate(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("vacate", n, 2))
        return NULL;
    return vacate_holes(a[0], a[1]);
}

/* loops.py's py_renumber for one q -> src (strong references held by the caller):
 * k = keys[q] = keys[src]; npos[k[0]][k[1]] = q; q added to the set dirty when src is in it
 * (zero, one: the ints 0 and 1); 0, or -1 on an error */
static int renumber_one(PyObject *q, PyObject *src, PyObject *keys, PyObject *npos, PyObject *dirty, PyObject *zero,
                        PyObject *one) {
    PyObject *k = item_at(keys, src), *node = NULL, *idx = NULL, *row = NULL;
    int err = k == NULL || item_put(keys, q, k) < 0 || (node = item_at(k, zero)) == NULL ||
              (row = PyDict_CheckExact(npos) ? dict_at(npos, node) : PyObject_GetItem(npos, node)) == NULL ||
              (idx = item_at(k, one)) == NULL || item_put(row, idx, q) < 0;
    if (!err) {
        int in = PySet_Contains(dirty, src);
        err = in < 0 || (in && PySet_Add(dirty, q) < 0);
    }
    Py_XDECREF(k);
    Py_XDECREF(node);
    Py_XDECREF(row);
    Py_XDECREF(idx);
    return err ? -1 : 0;
}

/* renumber_one for each q -> src of the dict origin, in its order; 0, or -1 on an error */
static int renumber_each(PyObject *origin, PyObject *keys, PyObject *npos, PyObject *dirty) {
    PyObject *zero = PyLong_FromLong(0), *one = PyLong_FromLong(1);
    int err = zero == NULL || one == NULL;
    Py_ssize_t it = 0;
    PyObject *q, *src;
    while (!err && PyDict_Next(origin, &it, &q, &src)) {
        Py_INCREF(q);
        Py_INCREF(src);
        err = renumber_one(q, src, keys, npos, dirty, zero, one) < 0;
        Py_DECREF(q);
        Py_DECREF(src);
    }
    Py_XDECREF(zero);
    Py_XDECREF(one);
    return err ? -1 : 0;
}

/* renumber_one for one step over the map's own types (keys a list holding both positions,
 * its item an exact (node, page index) pair, npos an exact dict, the node's row a list holding
 * the index; node of a hash that runs no Python code: the default, a pointer's), made
 * directly: 1 when it applied, 0 when renumber_one is to serve (nothing written yet), -1 on an
 * error. Why: renumber_one's generic reads and writes cost ~390 instructions a moved page, a
 * removal's ~20 of them. */
static int renumber_fast(Step *st, PyObject *keys, PyObject *npos, PyObject *dirty) {
    long long q, src, idx;
    if (!PyList_CheckExact(keys) || !PyDict_CheckExact(npos) || !small_int(st->q, &q) || !small_int(st->src, &src) ||
        q < 0 || src < 0 || q >= PyList_GET_SIZE(keys) || src >= PyList_GET_SIZE(keys))
        return 0;
    PyObject *k = PyList_GET_ITEM(keys, src);
    if (!PyTuple_CheckExact(k) || PyTuple_GET_SIZE(k) != 2)
        return 0;
    PyObject *node = PyTuple_GET_ITEM(k, 0), *ix = PyTuple_GET_ITEM(k, 1);
    if (Py_TYPE(node)->tp_hash != PyBaseObject_Type.tp_hash || !small_int(ix, &idx) || idx < 0)
        return 0;
    /* (the lookup hashes by pointer and finds node by identity, or compares it with keys of
     * that hash: npos' keys are nodes, of the default comparison, which runs no Python code) */
    PyObject *row = PyDict_GetItemWithError(npos, node);
    if (row == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (!PyList_CheckExact(row) || idx >= PyList_GET_SIZE(row))
        return 0;
    /* keys[q] = k (a reference of its own; keys[src] keeps its one), row[idx] = q; the items
     * they replace released last, after every read */
    Py_INCREF(k);
    PyObject *was = PyList_GET_ITEM(keys, q);
    PyList_SET_ITEM(keys, q, k);
    PyObject *prev = PyList_GET_ITEM(row, idx);
    PyList_SET_ITEM(row, idx, Py_NewRef(st->q));
    /* (dirty's test skipped when it is empty: no page was dirty) */
    int in = PySet_GET_SIZE(dirty) == 0 ? 0 : PySet_Contains(dirty, st->src);
    int rc = in < 0 || (in && PySet_Add(dirty, st->q) < 0) ? -1 : 1;
    Py_DECREF(was);
    Py_DECREF(prev);
    return rc;
}

/* renumber_one for each step (origin's items, in its order), renumber_fast where it
 * applies; 0, or -1 on an error */
static int renumber_steps(Step *steps, Py_ssize_t count, PyObject *keys, PyObject *npos, PyObject *dirty) {
    PyObject *zero = PyLong_FromLong(0), *one = PyLong_FromLong(1);
    int err = zero == NULL || one == NULL;
    for (Py_ssize_t i = 0; !err && i < count; i++) {
        int fast = renumber_fast(&steps[i], keys, npos, dirty);
        err = fast < 0 || (fast == 0 && renumber_one(steps[i].q, steps[i].src, keys, npos, dirty, zero, one) < 0);
    }
    Py_XDECREF(zero);
    Py_XDECREF(one);
    return err ? -1 : 0;
}

/* renumber(origin, keys, npos, dirty): renumber_each. */
static PyObject *renumber(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("renumber", n, 4))
        return NULL;
    PyObject *origin = a[0], *keys = a[1], *npos = a[2], *dirty = a[3];
    if (check_type(origin, &PyDict_Type, "renumber", "origin") || check_type(dirty, &PySet_Type, "renumber", "dirty") ||
        renumber_each(origin, keys, npos, dirty) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* one column of remove_pages: (var, d, its spare value, its slot reference counts or None),
 * checked as the per-variable functions check theirs; 0, or -1 (TypeError) */
static int column_of(PyObject *col, PyObject **var, PyObject **d, PyObject **v, PyObject **refs) {
    if (check_type(col, &PyTuple_Type, "remove_pages", "a column"))
        return -1;
    if (PyTuple_GET_SIZE(col) != 4) {
        PyErr_Format(PyExc_TypeError, "remove_pages: a column must have 4 items, not %zd", PyTuple_GET_SIZE(col));
        return -1;
    }
    *var = PyTuple_GET_ITEM(col, 0), *d = PyTuple_GET_ITEM(col, 1), *v = PyTuple_GET_ITEM(col, 2);
    *refs = PyTuple_GET_ITEM(col, 3);
    return check_type(*d, &PyDict_Type, "remove_pages", "d") ||
           (*refs != Py_None && check_type(*refs, &PyDict_Type, "remove_pages", "refs")) ? -1 : 0;
}

/* a hole of vacate_ints: its int value and its object (borrowed from the holes list) */
typedef struct {
    long long v;
    PyObject *p;
} Hole;

static int hole_above(const void *a, const void *b) {
    long long x = ((const Hole *)a)->v, y = ((const Hole *)b)->v;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* the holes in decreasing order of their values (equal values: in some order): reversed when
 * increasing, else by insertion up to 64 holes, qsort beyond. Why: a node's holes, ~20, come
 * mostly in order (its positions as they were given, increasing), where qsort's comparator
 * calls cost ~2k instructions a removal */
static void sort_holes(Hole *h, Py_ssize_t n) {
    Py_ssize_t up = 1;
    while (up < n && h[up - 1].v < h[up].v)
        up++;
    if (up == n) {
        for (Py_ssize_t i = 0, j = n - 1; i < j; i++, j--) {
            Hole t = h[i];
            h[i] = h[j];
            h[j] = t;
        }
        return;
    }
    if (n > 64) {
        qsort(h, n, sizeof(Hole), hole_above);
        return;
    }
    for (Py_ssize_t i = 1; i < n; i++) {
        Hole t = h[i];
        Py_ssize_t j = i;
        for (; j > 0 && h[j - 1].v < t.v; j--)
            h[j] = h[j - 1];
        h[j] = t;
    }
}

/* vacate_holes over the map's own holes (distinct exact ints each in 0..L0-1, L0 an exact
 * int) made in C, its origin made as remove_pages' steps directly: the holes taken in
 * decreasing order, each p != last (= L - 1) filled from last's source (the source of a hole
 * filled before, now last, else last itself). A hole at or above the new L (L0 - holes) is
 * always popped again (last sweeps every position down to it): origin keeps exactly the holes
 * below it, in the order they were taken, so the sources are tracked for the positions new
 * L..L0-1 only. Each source is one of those positions: its object is qs's (the list of their
 * ints, qs[i] = new L + i), its index into Seen the same i. 1 with *steps and *count set, 0
 * when the holes or L0 are not such ints (vacate_holes serves), -1 on an error.
 * Why: the generic vacate's dict of sources and its int arithmetic in objects, then the steps
 * read back from that dict, cost ~600 instructions a hole, more than its moves' writes. */
static int vacate_ints(PyObject *holes, long long L0, PyObject *qs, Step **steps, Py_ssize_t *count) {
    Py_ssize_t n = PyList_GET_SIZE(holes);
    long long lo = L0 - n;
    Hole *order = PyMem_New(Hole, n + 1);
    long long *src_at = PyMem_New(long long, n + 1);
    Step *out = PyMem_New(Step, n + 1);
    int fit = order != NULL && src_at != NULL && out != NULL;
    for (Py_ssize_t i = 0; fit && i < n; i++) {
        PyObject *p = PyList_GET_ITEM(holes, i);
        fit = small_int(p, &order[i].v) && order[i].v >= 0 && order[i].v < L0;
        order[i].p = p;
    }
    if (fit)
        sort_holes(order, n);
    for (Py_ssize_t i = 1; fit && i < n; i++)
        fit = order[i].v < order[i - 1].v;
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; fit && i < n; i++)
        src_at[i] = -1;
    for (Py_ssize_t i = 0; fit && i < n; i++) {
        long long p = order[i].v, last = L0 - 1 - i;
        if (p == last)
            continue;
        long long src = src_at[last - lo] >= 0 ? src_at[last - lo] : last;
        src_at[last - lo] = -1;
        if (p >= lo) {
            src_at[p - lo] = src;
        } else {
            PyObject *q = order[i].p, *so = PyList_GET_ITEM(qs, src - lo);
            out[m++] = (Step){Py_NewRef(q), Py_NewRef(so), -1, (Py_ssize_t)(src - lo), (Py_hash_t)p, (Py_hash_t)src};
        }
    }
    PyMem_Free(order);
    PyMem_Free(src_at);
    if (!fit) {
        PyMem_Free(out);
        if (order == NULL || src_at == NULL || out == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        return 0;
    }
    *steps = out;
    *count = m;
    return 1;
}

/* remove_pages' vacate: *steps (origin's items, with their indices into the positions new L..
 * L0-1), *L (the new L) and *qs (the list of those positions' ints) set, *ints cleared when a
 * hole is no exact int (the positions it writes are then unseen by the indices); vacate_ints
 * where the holes are the map's, else vacate_holes' origin read into steps; 0, or -1 on an
 * error (nothing set) */
static int removal_steps(PyObject *holes, PyObject *L0, Step **steps, Py_ssize_t *count, PyObject **L, PyObject **qs,
                         int *ints) {
    long long l0;
    Py_ssize_t n = PyList_GET_SIZE(holes);
    if (small_int(L0, &l0) && l0 >= n) {
        *qs = ints_list((Py_ssize_t)(l0 - n), (Py_ssize_t)l0);
        int fast = *qs == NULL ? -1 : vacate_ints(holes, l0, *qs, steps, count);
        if (fast > 0 && (*L = PyLong_FromLongLong(l0 - n)) == NULL) {
            steps_free(*steps, *count);
            fast = -1;
        }
        if (fast > 0)
            return 0;
        Py_CLEAR(*qs);
        if (fast < 0)
            return -1;
    }
    PyObject *vac = vacate_holes(holes, L0);
    if (vac == NULL)
        return -1;
    PyObject *origin = PyTuple_GET_ITEM(vac, 0);
    *L = Py_NewRef(PyTuple_GET_ITEM(vac, 1));
    *qs = range_list(*L, L0);
    /* (qs's ints: range_list made them, its first is L's value) */
    Py_ssize_t m = *qs == NULL ? 0 : PyList_GET_SIZE(*qs);
    *steps = *qs == NULL ? NULL : steps_of(origin, m ? PyLong_AsLongLong(PyList_GET_ITEM(*qs, 0)) : 0, m, count, ints);
    Py_DECREF(vac);
    if (*steps == NULL) {
        Py_CLEAR(*L);
        Py_CLEAR(*qs);
        return -1;
    }
    return 0;
}

/* remove_pages(cols, holes, L, keys, npos, delta, dirty, slots): loops.py's
 * py_remove_pages, the pages at the list holes leaving the prefix 0..L-1 over every column
 * (var, d, spare value, refs or None) of the tuple cols in one call: vacate, then for each
 * column release (refs not None), move and spare, then renumber, keys cut to the new L and
 * range(new L, L) added to dirty; returns the new L. The positions that become spare are
 * made ints once for every column, and a column's values its moves read there (each moved
 * page's source) are not looked up again by its spare writes (Seen). */
static PyObject *remove_pages(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("remove_pages", n, 8))
        return NULL;
    PyObject *cols = a[0], *holes = a[1], *L0 = a[2], *keys = a[3], *npos = a[4], *delta = a[5], *dirty = a[6],
             *slots = a[7];
    if (check_type(cols, &PyTuple_Type, "remove_pages", "cols") ||
        check_type(holes, &PyList_Type, "remove_pages", "holes") ||
        check_type(keys, &PyList_Type, "remove_pages", "keys") ||
        check_type(delta, &PyList_Type, "remove_pages", "delta") ||
        check_type(dirty, &PySet_Type, "remove_pages", "dirty") ||
        check_type(slots, &PySet_Type, "remove_pages", "slots"))
        return NULL;
    Step *steps;
    Py_ssize_t count = 0;
    PyObject *L, *qs;
    int ints = 1;
    if (removal_steps(holes, L0, &steps, &count, &L, &qs, &ints) < 0)
        return NULL;
    Seen seen = {PyList_GET_SIZE(qs), NULL};
    int err = 0;
    if (ints && seen.n > 0) {
        seen.vals = PyMem_Calloc(seen.n, sizeof(PyObject *));
        if (seen.vals == NULL) {
            PyErr_NoMemory();
            err = 1;
        }
    }
    Seen *known = seen.vals != NULL ? &seen : NULL;
    for (Py_ssize_t i = 0; !err && i < PyTuple_GET_SIZE(cols); i++) {
        PyObject *var, *d, *v, *refs;
        err = column_of(PyTuple_GET_ITEM(cols, i), &var, &d, &v, &refs) < 0 ||
              (refs != Py_None && release_each(d, holes, refs, slots) < 0) ||
              move_each(d, steps, count, var, delta, known) < 0 || spare_each(d, qs, v, var, delta, known) < 0;
        for (Py_ssize_t j = 0; j < seen.n && seen.vals != NULL; j++)
            Py_CLEAR(seen.vals[j]);
    }
    PyMem_Free(seen.vals);
    if (!err)
        err = renumber_steps(steps, count, keys, npos, dirty) < 0;
    steps_free(steps, count);
    if (!err) {
        /* del keys[L:] (a negative L counted from the end, as a slice counts it) */
        Py_ssize_t cut = PyLong_AsSsize_t(L), size = PyList_GET_SIZE(keys);
        if (cut < 0 && !PyErr_Occurred())
            cut = cut + size < 0 ? 0 : cut + size;
        err = PyErr_Occurred() != NULL || (cut < size && PyList_SetSlice(keys, cut, size, NULL) < 0);
    }
    for (Py_ssize_t i = 0; !err && i < PyList_GET_SIZE(qs); i++)
        err = PySet_Add(dirty, PyList_GET_ITEM(qs, i)) < 0;
    Py_DECREF(qs);
    if (err)
        Py_CLEAR(L);
    return L;
}

static PyObject *s_id;

static PyObject *s_parent;

/* x.name (name a str) as PyObject_GetAttr reads it: where x's type reads attributes
 * generically (PyObject_GenericGetAttr) and name is a data descriptor of that type (a node's
 * slot: a tracked node's fields stay its base class's slots), the descriptor's get called directly, as the generic lookup
 * calls it, without that lookup's own setup (~45 instructions of its ~127, at each of the nine
 * fields a re-mapping reads of each node); any other attribute through PyObject_GetAttr */
static PyObject *field_of(PyObject *x, PyObject *name) {
#if PY_VERSION_HEX < 0x030D0000
    PyTypeObject *t = Py_TYPE(x);
    if (t->tp_getattro == PyObject_GenericGetAttr) {
        PyObject *d = _PyType_Lookup(t, name);      /* (borrowed: held below across the get) */
        if (d != NULL && Py_TYPE(d)->tp_descr_get != NULL && Py_TYPE(d)->tp_descr_set != NULL) {
            Py_INCREF(d);
            PyObject *r = Py_TYPE(d)->tp_descr_get(d, x, (PyObject *)t);
            Py_DECREF(d);
            return r;
        }
    }
#endif
    return PyObject_GetAttr(x, name);
}

/* f(x), its result dropped; 0, or -1 on an error */
static int call_on(PyObject *f, PyObject *x) {
    PyObject *argv[] = {x};
    PyObject *r = PyObject_Vectorcall(f, argv, 1, NULL);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* what the walk does with a node in the tree, or with a detached one: visit(arg, x); 0, or -1
 * on an error */
typedef int (*visit_fn)(void *arg, PyObject *x);

static int visit_by_call(void *f, PyObject *x) {
    return call_on((PyObject *)f, x);
}

/* loops.py's py_walk_journaled over todo, root and mapped, each node in the tree given to
 * enter(arg, x) and each detached one to leave(leave_arg, x): the same reads (each node's
 * `parent` read again at each pass, `par in mapped` asked at each look: enter maps nodes as it
 * goes) and the same calls in the same order; None, or NULL on an error */
static PyObject *walk_nodes(PyObject *todo, PyObject *root, PyObject *mapped, visit_fn enter, void *arg,
                            visit_fn leave, void *leave_arg) {
    if (s_parent == NULL && (s_parent = PyUnicode_InternFromString("parent")) == NULL)
        return NULL;
    Items w;
    if (items_begin(&w, todo) < 0)
        return NULL;
    PyObject *pending = PyList_New(0), *later = NULL, *x;
    int err = pending == NULL;
    while (!err && (x = items_next(&w)) != NULL) {
        if (x != root) {
            PyObject *par = field_of(x, s_parent);
            err = par == NULL || (par == Py_None ? leave(leave_arg, x) : PyList_Append(pending, x)) < 0;
            Py_XDECREF(par);
        }
        Py_DECREF(x);
    }
    err = err || PyErr_Occurred() != NULL;
    /* (pending and later are this call's own lists: nothing enter or leave runs can reach them) */
    while (!err && PyList_GET_SIZE(pending) > 0) {
        later = PyList_New(0);
        err = later == NULL;
        for (Py_ssize_t i = 0; !err && i < PyList_GET_SIZE(pending); i++) {
            x = Py_NewRef(PyList_GET_ITEM(pending, i));
            PyObject *par = field_of(x, s_parent);
            if (par == NULL) {
                err = 1;
            } else if (par == Py_None) {
                err = leave(leave_arg, x) < 0;
            } else {
                int in = par == root ? 1 : PySequence_Contains(mapped, par);
                err = in < 0 || (in ? enter(arg, x) : PyList_Append(later, x)) < 0;
            }
            Py_XDECREF(par);
            Py_DECREF(x);
        }
        if (!err && PyList_GET_SIZE(later) == PyList_GET_SIZE(pending)) {
            for (Py_ssize_t i = 0; !err && i < PyList_GET_SIZE(later); i++) {
                x = Py_NewRef(PyList_GET_ITEM(later, i));
                err = leave(leave_arg, x) < 0;
                Py_DECREF(x);
            }
            break;
        }
        if (!err)
            Py_SETREF(pending, later);
        else
            Py_CLEAR(later);
        later = NULL;
    }
    Py_XDECREF(later);
    Py_XDECREF(pending);
    return finish(w.it, err, NULL, NULL, NULL, NULL);
}

/* walk_journaled(todo, root, mapped, enter, leave): loops.py's py_walk_journaled, walk_nodes
 * with enter called. */
static PyObject *walk_journaled(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("walk_journaled", n, 5))
        return NULL;
    return walk_nodes(a[0], a[1], a[2], visit_by_call, a[3], visit_by_call, a[4]);
}

static PyObject *s_n, *s_device, *s_loading, *s_stored, *s_hit_count, *s_host, *s_inflight, *s_discard;

/* the node fields remap_node reads (and the kids' discard), interned once; 0, or -1 on an error */
static int remap_names(void) {
    static const char *const names[] = {"id", "parent", "n", "device", "loading", "stored", "hit_count", "host",
                                        "inflight", "discard"};
    PyObject **const slots[] = {&s_id, &s_parent, &s_n, &s_device, &s_loading, &s_stored, &s_hit_count, &s_host,
                                &s_inflight, &s_discard};
    return intern_names(names, slots, sizeof names / sizeof names[0]);
}

/* s.add(x) for a set s (PySet_Add), else s.add(x) called; 0, or -1 on an error */
static int set_like_add(PyObject *s, PyObject *x) {
    if (PySet_Check(s))
        return PySet_Add(s, x);
    PyObject *r = PyObject_CallMethod(s, "add", "O", x);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* s.discard(x) for a set s (PySet_Discard), else the method called; 0, or -1 on an error */
static int set_like_discard(PyObject *s, PyObject *x) {
    if (PySet_Check(s))
        return PySet_Discard(s, x) < 0 ? -1 : 0;
    PyObject *r = PyObject_CallMethodOneArg(s, s_discard, x);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* `d[key].discard(x)` when the dict d has key (`if key in d`, `d.get(key, set())`: nothing
 * when absent); 0, or -1 on an error */
static int discard_from(PyObject *d, PyObject *key, PyObject *x) {
    PyObject *s = PyDict_GetItemWithError(d, key);
    if (s == NULL)
        return PyErr_Occurred() ? -1 : 0;
    Py_INCREF(s);
    int rc = set_like_discard(s, x);
    Py_DECREF(s);
    return rc;
}

/* up[x] = par and x moved from kids[was] (when kids has was) to kids.setdefault(par, set()):
 * loops.py's py_remap_node's parent link, when x's parent is no longer `was`; 0, or -1 */
static int relink(PyObject *up, PyObject *kids, PyObject *x, PyObject *par, PyObject *was) {
    if (discard_from(kids, was, x) < 0 || PyDict_SetItem(up, x, par) < 0)
        return -1;
    PyObject *fresh = PySet_New(NULL);
    if (fresh == NULL)
        return -1;
    PyObject *mine = PyDict_SetDefault(kids, par, fresh);     /* (borrowed) */
    Py_XINCREF(mine);
    Py_DECREF(fresh);
    int rc = mine == NULL ? -1 : set_like_add(mine, x);
    Py_XDECREF(mine);
    return rc;
}

/* `(var, d) = col` of node_cols / `(var, d, refs) = col` of slot_cols, d a dict (refs one too
 * when asked): borrowed; 0, or -1 (TypeError) */
static int remap_column(PyObject *col, Py_ssize_t size, PyObject **var, PyObject **d, PyObject **refs) {
    if (check_type(col, &PyTuple_Type, "remap_node", "a column"))
        return -1;
    if (PyTuple_GET_SIZE(col) != size) {
        PyErr_Format(PyExc_TypeError, "remap_node: a column must have %zd items, not %zd", size,
                     PyTuple_GET_SIZE(col));
        return -1;
    }
    *var = PyTuple_GET_ITEM(col, 0), *d = PyTuple_GET_ITEM(col, 1);
    if (refs != NULL) {
        *refs = PyTuple_GET_ITEM(col, 2);
        if (check_type(*refs, &PyDict_Type, "remap_node", "refs"))
            return -1;
    }
    return check_type(*d, &PyDict_Type, "remap_node", "d");
}

/* the node-level values' writes: every column's positions filled when `all`, else the columns
 * whose value differs from (or is of another type than) the one at the same index of old_vals
 * (zip(node_cols, old_vals, vals): the shortest decides); 0, or -1 on an error */
static int remap_node_level(PyObject *node_cols, PyObject *vals, PyObject *old_vals, int all, PyObject *pos,
                            PyObject *delta, PyObject *dirty) {
    PyObject *olds = all ? NULL : PySequence_Fast(old_vals, "remap_node: the old values must be a sequence");
    if (!all && olds == NULL)
        return -1;
    Py_ssize_t m = PyTuple_GET_SIZE(node_cols) < PyTuple_GET_SIZE(vals) ? PyTuple_GET_SIZE(node_cols)
                                                                          : PyTuple_GET_SIZE(vals);
    if (olds != NULL && PySequence_Fast_GET_SIZE(olds) < m)
        m = PySequence_Fast_GET_SIZE(olds);
    int err = 0;
    for (Py_ssize_t i = 0; !err && i < m; i++) {
        PyObject *var, *d, *v = PyTuple_GET_ITEM(vals, i);
        err = remap_column(PyTuple_GET_ITEM(node_cols, i), 2, &var, &d, NULL) < 0;
        int write = 1;
        if (!err && olds != NULL) {
            PyObject *a = Py_NewRef(PySequence_Fast_GET_ITEM(olds, i));
            write = ints_or_compare(a, v, Py_NE);
            if (write == 0)
                write = Py_TYPE(a) != Py_TYPE(v);
            Py_DECREF(a);
            err = write < 0;
        }
        if (!err && write)
            err = fill_each(d, pos, v, var, delta, dirty) < 0;
    }
    Py_XDECREF(olds);
    return err ? -1 : 0;
}

static PyObject *shifted(PyObject *self, PyObject *slots);

/* [0] * n, a new list */
static PyObject *zeros_list(Py_ssize_t n) {
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++)
        PyList_SET_ITEM(out, i, PyLong_FromLong(0));       /* (a small int: the interpreter's own, no failure) */
    return out;
}

/* n's value when it is an exact int in 0..2**61 (a node's page count); TypeError when it is no
 * exact int >= 0, as py_node_slots refuses it, and OverflowError past 2**61 (no node has such a
 * count: both twins refuse it alike) */
static int page_count(PyObject *nobj, long long *n) {
    if (int_value(nobj, n) && *n >= 0)
        return 0;
    if (PyLong_CheckExact(nobj) && _PyLong_Sign(nobj) > 0)
        PyErr_SetString(PyExc_OverflowError, "node_slots: n is past 2**61 pages");
    else
        PyErr_SetString(PyExc_TypeError, "node_slots: n must be an int >= 0");
    return -1;
}

/* node_slots(hs, pending, n, backing): loops.py's py_node_slots (host_tier's node_slots), the
 * tuple of the two lists (host[p], backupOp[p]) of a node's n pages; hs and pending read
 * through the object API (len, hs[:n], shifted) in the order Python reads them. */
static PyObject *node_slot_lists(PyObject *hs, PyObject *pending, PyObject *nobj, PyObject *backing) {
    long long n;
    if (page_count(nobj, &n) < 0)
        return NULL;
    PyObject *cut = NULL, *sh = NULL, *z = NULL, *z2 = NULL, *out = NULL;
    if (hs != Py_None) {
        Py_ssize_t size = PyObject_Size(hs);
        if (size < 0)
            return NULL;
        if (size < n) {
            PyErr_Format(PyExc_ValueError, "a node of %lld pages holds %zd host slots", n, size);
            return NULL;
        }
        if ((cut = size > n ? PySequence_GetSlice(hs, 0, (Py_ssize_t)n) : Py_NewRef(hs)) == NULL)
            return NULL;
        int back = PyObject_IsTrue(backing);
        if (back >= 0 && (sh = shifted(NULL, cut)) != NULL && (z = zeros_list((Py_ssize_t)n)) != NULL)
            out = back ? PyTuple_Pack(2, z, sh) : PyTuple_Pack(2, sh, z);
    } else if (pending != Py_None) {
        /* ([0] * n, shifted(pending[:n]) + [0] * (n - len(pending[:n]))) */
        if ((cut = PySequence_GetSlice(pending, 0, (Py_ssize_t)n)) != NULL && (z = zeros_list((Py_ssize_t)n)) != NULL &&
            (sh = shifted(NULL, cut)) != NULL) {
            Py_ssize_t k = PyList_GET_SIZE(sh);
            z2 = k < n ? zeros_list((Py_ssize_t)n - k) : NULL;
            if ((k >= n || (z2 != NULL && PyList_SetSlice(sh, k, k, z2) == 0)))
                out = PyTuple_Pack(2, z, sh);
        }
    } else if ((z = zeros_list((Py_ssize_t)n)) != NULL && (z2 = zeros_list((Py_ssize_t)n)) != NULL) {
        out = PyTuple_Pack(2, z, z2);
    }
    Py_XDECREF(cut);
    Py_XDECREF(sh);
    Py_XDECREF(z);
    Py_XDECREF(z2);
    return out;
}

/* node_slots(hs, pending, n, backing): node_slot_lists. */
static PyObject *node_slots_call(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("node_slots", n, 4))
        return NULL;
    return node_slot_lists(a[0], a[1], a[2], a[3]);
}

static PyObject *s_writes_host;

/* The StopIteration set replaced by RuntimeError("generator raised StopIteration"), the
 * StopIteration its cause and context, as a generator's frame turns one raised in it (PEP 479):
 * where the twin reads inside a generator expression, what the C reads in its place raises. */
static void stop_in_generator(void) {
    PyObject *type, *stop, *tb;
    PyErr_Fetch(&type, &stop, &tb);
    PyErr_NormalizeException(&type, &stop, &tb);
    if (tb != NULL && stop != NULL)
        PyException_SetTraceback(stop, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    PyErr_SetString(PyExc_RuntimeError, "generator raised StopIteration");
    if (stop == NULL)
        return;
    PyObject *rtype, *err, *rtb;
    PyErr_Fetch(&rtype, &err, &rtb);
    PyErr_NormalizeException(&rtype, &err, &rtb);
    if (err != NULL) {
        /* (each setter takes a reference: stop's own, and one more) */
        PyException_SetCause(err, Py_NewRef(stop));
        PyException_SetContext(err, stop);
    } else {
        Py_DECREF(stop);
    }
    PyErr_Restore(rtype, err, rtb);
}

/* host_write_in_flight(v): hicache.runtime.cache's host_write_in_flight, `bool(v.inflight) and
 * any(getattr(op, "writes_host", False) for op in v.inflight)`, with the same reads in the same
 * order (v.inflight read and tested, read again and iterated, each op's writes_host read as
 * getattr with a default reads it, AttributeError alone taken as absent, and tested, up to the
 * first true one): True or False, NULL on an error. Why: a node with a write in flight is
 * re-mapped about once a sync, and the Python function's frame and generator cost ~3.4k
 * instructions against this one's few hundred. */
static PyObject *host_write_in_flight(PyObject *self, PyObject *v) {
    (void)self;
    if (remap_names() < 0 ||
        (s_writes_host == NULL && (s_writes_host = PyUnicode_InternFromString("writes_host")) == NULL))
        return NULL;
    PyObject *ops = field_of(v, s_inflight);
    if (ops == NULL)
        return NULL;
    int found = PyObject_IsTrue(ops);
    Py_DECREF(ops);
    if (found <= 0)
        return found < 0 ? NULL : Py_NewRef(Py_False);
    if ((ops = field_of(v, s_inflight)) == NULL)
        return NULL;
    PyObject *it = PyObject_GetIter(ops), *op;
    Py_DECREF(ops);
    if (it == NULL)
        return NULL;
    found = 0;
    while (found == 0 && (op = PyIter_Next(it)) != NULL) {
        PyObject *w;
#if PY_VERSION_HEX >= 0x030D0000
        int has = PyObject_GetOptionalAttr(op, s_writes_host, &w);
#else
        int has = _PyObject_LookupAttr(op, s_writes_host, &w);
#endif
        Py_DECREF(op);
        if (has > 0) {
            found = PyObject_IsTrue(w);
            Py_DECREF(w);
        } else if (has < 0) {
            found = -1;
            if (PyErr_ExceptionMatches(PyExc_StopIteration))
                stop_in_generator();
        }
    }
    Py_DECREF(it);
    if (found < 0 || (found == 0 && PyErr_Occurred()))
        return NULL;
    return Py_NewRef(found ? Py_True : Py_False);
}

/* node_slot_lists' values as C ints, hv[i] host's and bv[i] backupOp's for each of the n pages,
 * where hs (pending when hs is None) is an exact list or tuple of exact ints with |h| < 2**61
 * (the runtime's slots) and backing True or False: 1; 0 where that is not so (nothing raised:
 * node_slot_lists then serves), -1 on node_slot_lists' ValueError (a node holding fewer host
 * slots than pages). Nothing here can run Python code. */
static int node_slot_ints(PyObject *hs, PyObject *pending, Py_ssize_t n, PyObject *backing, long long *hv,
                          long long *bv) {
    PyObject *src = hs != Py_None ? hs : pending;
    if (backing != Py_True && backing != Py_False)
        return 0;
    Py_ssize_t k = 0;
    if (src != Py_None) {
        if (!PyList_CheckExact(src) && !PyTuple_CheckExact(src))
            return 0;
        k = PySequence_Fast_GET_SIZE(src);
        if (src == hs && k < n) {
            PyErr_Format(PyExc_ValueError, "a node of %zd pages holds %zd host slots", n, k);
            return -1;
        }
        if (k > n)
            k = n;
    }
    long long *to = hs != Py_None && backing == Py_False ? hv : bv, *other = to == hv ? bv : hv;
    for (Py_ssize_t i = 0; i < n; i++) {
        long long h = 0;
        if (i < k) {
            if (!int_value(PySequence_Fast_GET_ITEM(src, i), &h))
                return 0;
            h += 1;
        }
        to[i] = h;
        other[i] = 0;
    }
    return 1;
}

/* the per-page slot values' writes: slot_page[h] = x for each h of hs (not None), then
 * node_slots(hs, pending, len(pos), backing)'s two lists written, host's and backupOp's
 * (zip(slot_cols, them): write_slots_each). node_slots this module's own (node_slots_call,
 * which is node_slot_lists): its values computed here in C where node_slot_ints can, no list
 * nor int object made for a page whose value is unchanged (write_slot_ints); 0, or -1 on an
 * error */
static int remap_slots(PyObject *x, PyObject *hs, PyObject *pending, PyObject *backing, PyObject *pos,
                       PyObject *slot_page, PyObject *slot_cols, PyObject *node_slots, PyObject *delta,
                       PyObject *dirty, PyObject *slots) {
    if (hs != Py_None && (PyList_CheckExact(hs) || PyTuple_CheckExact(hs))) {
        /* (an exact list or tuple by index, its size read at each step, as its iterator reads
         * it; a slot whose holder is x already is not written again: the same dict after.
         * slot_page is laid out by slot (host_tier_inc): each holder read off its entry and
         * written there in place, a run of in_place_set) */
        InPlace sp = {slot_page, -1, NULL};
        int err = 0;
        for (Py_ssize_t i = 0; !err && i < PySequence_Fast_GET_SIZE(hs); i++) {
            PyObject *h = Py_NewRef(PySequence_Fast_GET_ITEM(hs, i));
            long long k;
            Py_hash_t hash = key_hash(h);
            PyObject *was = hash == -1 ? NULL
                            : PyDict_CheckExact(slot_page) && small_int(h, &k) ? pos_entry(slot_page, h, k) : NULL;
            if (hash != -1 && was == NULL)
                was = dict_get_h(slot_page, h, hash);
            err = hash == -1 || (was == NULL && PyErr_Occurred()) || (was != x && in_place_set(&sp, h, hash, x) < 0);
            Py_DECREF(h);
        }
        if (in_place_end(&sp, err ? -1 : 0) < 0)
            return -1;
    } else if (hs != Py_None) {
        PyObject *it = PyObject_GetIter(hs), *h;
        if (it == NULL)
            return -1;
        int err = 0;
        while (!err && (h = PyIter_Next(it)) != NULL) {
            err = PyDict_SetItem(slot_page, h, x) < 0;
            Py_DECREF(h);
        }
        Py_DECREF(it);
        if (err || PyErr_Occurred())
            return -1;
    }
    if (PyCFunction_Check(node_slots) &&
        PyCFunction_GET_FUNCTION(node_slots) == (PyCFunction)(void (*)(void))node_slots_call) {
        Py_ssize_t np = PyList_GET_SIZE(pos);
        long long *hv = PyMem_New(long long, 2 * np + 1);
        if (hv == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        int fast = node_slot_ints(hs, pending, np, backing, hv, hv + np), err = fast < 0;
        for (Py_ssize_t i = 0; fast > 0 && !err && i < PyTuple_GET_SIZE(slot_cols) && i < 2; i++) {
            PyObject *var, *d, *refs;
            err = remap_column(PyTuple_GET_ITEM(slot_cols, i), 3, &var, &d, &refs) < 0 ||
                  write_slot_ints(d, pos, hv + i * np, np, var, refs, delta, dirty, slots) < 0;
        }
        PyMem_Free(hv);
        if (fast != 0)
            return err ? -1 : 0;
    }
    PyObject *n = PyLong_FromSsize_t(PyList_GET_SIZE(pos));
    if (n == NULL)
        return -1;
    PyObject *argv[] = {hs, pending, n, backing};
    PyObject *res = PyObject_Vectorcall(node_slots, argv, 4, NULL);
    Py_DECREF(n);
    PyObject *lists = res == NULL ? NULL : PySequence_Fast(res, "remap_node: node_slots must return a sequence");
    Py_XDECREF(res);
    if (lists == NULL)
        return -1;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(lists) < PyTuple_GET_SIZE(slot_cols) ? PySequence_Fast_GET_SIZE(lists)
                                                                                  : PyTuple_GET_SIZE(slot_cols);
    int err = 0;
    for (Py_ssize_t i = 0; !err && i < m; i++) {
        PyObject *var, *d, *refs, *values = Py_NewRef(PySequence_Fast_GET_ITEM(lists, i));
        err = remap_column(PyTuple_GET_ITEM(slot_cols, i), 3, &var, &d, &refs) < 0 ||
              write_slots_each(d, pos, values, var, refs, delta, dirty, slots) < 0;
        Py_DECREF(values);
    }
    Py_DECREF(lists);
    return err ? -1 : 0;
}

/* the tuple's items into out (borrowed) when it is a tuple of `size` items (ValueError as an
 * unpacking's otherwise, TypeError when no tuple) */
static int unpack(PyObject *t, Py_ssize_t size, const char *what, PyObject **out) {
    if (check_type(t, &PyTuple_Type, "remap_node", what))
        return -1;
    if (PyTuple_GET_SIZE(t) != size) {
        if (PyTuple_GET_SIZE(t) > size)
            PyErr_Format(PyExc_ValueError, "too many values to unpack (expected %zd)", size);
        else
            PyErr_Format(PyExc_ValueError, "not enough values to unpack (expected %zd, got %zd)", size,
                         PyTuple_GET_SIZE(t));
        return -1;
    }
    for (Py_ssize_t i = 0; i < size; i++)
        out[i] = PyTuple_GET_ITEM(t, i);
    return 0;
}

/* `a == b` (op Py_EQ) or `a != b` (Py_NE) as Python decides it for the values a re-mapping keeps
 * (nval's (node values, slot values) and their halves: exact tuples of bools, ints, None and
 * tuples of slots), decided in C for two exact tuples: tuple comparison's own rule (the items
 * at each index up to the shorter length compared as PyObject_RichCompareBool compares them,
 * the identity first, the first unequal pair deciding, else the lengths), an item pair of two
 * exact tuples compared so in turn, of two exact ints or bools by value (int's own __eq__, 1 ==
 * True), any other pair through PyObject_RichCompareBool; a or b no exact tuple:
 * ints_or_compare. -1: error. Why: the rich comparison of those nested tuples, at each node
 * a sync re-maps, cost ~430 instructions, its items' comparisons nearly all a call each. */
static int same_items(PyObject *a, PyObject *b);

static int kept_values_compare(PyObject *a, PyObject *b, int op) {
    if (!PyTuple_CheckExact(a) || !PyTuple_CheckExact(b))
        return ints_or_compare(a, b, op);
    int eq = same_items(a, b);
    return eq < 0 ? -1 : op == Py_EQ ? eq : !eq;
}

/* a == b for two exact tuples (kept_values_compare's rule); -1: error */
static int same_items(PyObject *a, PyObject *b) {
    Py_ssize_t na = PyTuple_GET_SIZE(a), nb = PyTuple_GET_SIZE(b);
    for (Py_ssize_t i = 0; i < na && i < nb; i++) {
        PyObject *x = PyTuple_GET_ITEM(a, i), *y = PyTuple_GET_ITEM(b, i);
        if (x == y)
            continue;
        long long u, v;
        int eq;
        if (PyTuple_CheckExact(x) && PyTuple_CheckExact(y)) {
            if (Py_EnterRecursiveCall(" in comparison"))
                return -1;
            eq = same_items(x, y);
            Py_LeaveRecursiveCall();
        } else if ((PyBool_Check(x) ? (u = x == Py_True, 1) : int_value(x, &u)) &&
                   (PyBool_Check(y) ? (v = y == Py_True, 1) : int_value(y, &v))) {
            eq = u == v;
        } else {
            /* (a and b hold x and y: the call may run Python code, not change them) */
            Py_INCREF(x);
            Py_INCREF(y);
            eq = PyObject_RichCompareBool(x, y, Py_EQ);
            Py_DECREF(x);
            Py_DECREF(y);
        }
        if (eq <= 0)
            return eq;
    }
    return na == nb;
}

/* loops.py's py_remap_node(ctx, step, x), the same reads of x's fields, lookups, calls (resize,
 * loading_req, in_flight, node_slots) and writes, in the same order; 0, or -1 on an error.
 * Why: per node, the bytecode around its few C loops cost more than the loops (~25k
 * instructions a node, ~1 node a sync). */
static int remap_entry(PyObject *ctx, PyObject *step, PyObject *x) {
    PyObject *c[14], *st[5];
    if (unpack(ctx, 14, "ctx", c) < 0 || unpack(step, 5, "step", st) < 0 || remap_names() < 0)
        return -1;
    PyObject *npos = c[0], *by_id = c[1], *up = c[2], *kids = c[3], *nval = c[4], *slot_changed = c[5],
             *sync_backup = c[6], *slot_page = c[7], *node_cols = c[8], *slot_cols = c[9], *in_flight = c[10],
             *node_slots = c[11], *resize = c[12], *loading_req = c[13];
    PyObject *delta = st[0], *changed = st[1], *dirty = st[2], *slots = st[3], *m = st[4];
    if (check_type(npos, &PyDict_Type, "remap_node", "npos") ||
        check_type(by_id, &PyDict_Type, "remap_node", "by_id") ||
        check_type(up, &PyDict_Type, "remap_node", "up") || check_type(kids, &PyDict_Type, "remap_node", "kids") ||
        check_type(nval, &PyDict_Type, "remap_node", "nval") ||
        check_type(slot_changed, &PySet_Type, "remap_node", "slot_changed") ||
        check_type(sync_backup, &PyDict_Type, "remap_node", "sync_backup") ||
        check_type(slot_page, &PyDict_Type, "remap_node", "slot_page") ||
        check_type(node_cols, &PyTuple_Type, "remap_node", "node_cols") ||
        check_type(slot_cols, &PyTuple_Type, "remap_node", "slot_cols") ||
        check_type(delta, &PyList_Type, "remap_node", "delta") ||
        check_type(changed, &PyDict_Type, "remap_node", "changed") ||
        check_type(dirty, &PySet_Type, "remap_node", "dirty") || check_type(slots, &PySet_Type, "remap_node", "slots"))
        return -1;
    PyObject *pos = NULL, *xid = NULL, *par = NULL, *was = NULL, *n = NULL, *lq = NULL, *hits = NULL, *hs = NULL,
             *pending = NULL, *backing = NULL, *node_vals = NULL, *slot_vals = NULL, *new = NULL, *old = NULL,
             *item = NULL, *ht = NULL, *pt = NULL;
    int err = 1;
    /* pos = npos.setdefault(x, []) */
    pos = PyDict_GetItemWithError(npos, x);
    if (pos != NULL) {
        Py_INCREF(pos);
    } else {
        if (PyErr_Occurred() || (pos = PyList_New(0)) == NULL || PyDict_SetItem(npos, x, pos) < 0)
            goto done;
    }
    if (check_type(pos, &PyList_Type, "remap_node", "npos[x]"))
        goto done;
    if ((xid = field_of(x, s_id)) == NULL || PyDict_SetItem(by_id, xid, x) < 0 ||
        (par = field_of(x, s_parent)) == NULL)
        goto done;
    was = PyDict_GetItemWithError(up, x);
    if (was == NULL && PyErr_Occurred())
        goto done;
    was = Py_NewRef(was != NULL ? was : Py_None);
    if (par != was && relink(up, kids, x, par, was) < 0)
        goto done;
    /* resized = len(pos) != n */
    if ((n = field_of(x, s_n)) == NULL || (item = PyLong_FromSsize_t(PyList_GET_SIZE(pos))) == NULL)
        goto done;
    int resized = ints_or_compare(item, n, Py_NE);
    Py_CLEAR(item);
    if (resized < 0)
        goto done;
    if (resized) {
        PyObject *argv[] = {m, x, pos, n};
        if ((item = PyObject_Vectorcall(resize, argv, 4, NULL)) == NULL)
            goto done;
        Py_CLEAR(item);
    }
    /* the node-level values: (x.device is not None, bool(x.stored), min(x.hit_count, 2), loadReq) */
    if ((item = field_of(x, s_device)) == NULL)
        goto done;
    PyObject *dev = item != Py_None ? Py_True : Py_False;
    Py_CLEAR(item);
    if ((item = field_of(x, s_loading)) == NULL)
        goto done;
    if (item == Py_None) {
        lq = PyLong_FromLong(0);
    } else {
        PyObject *argv[] = {m, x};
        lq = PyObject_Vectorcall(loading_req, argv, 2, NULL);
    }
    Py_CLEAR(item);
    if (lq == NULL || (hits = field_of(x, s_hit_count)) == NULL ||
        (item = field_of(x, s_stored)) == NULL)
        goto done;
    int stored = PyObject_IsTrue(item);
    Py_CLEAR(item);
    if (stored < 0 || (item = PyLong_FromLong(2)) == NULL)
        goto done;
    long long hv;
    int below = int_value(hits, &hv) ? hv < 2 : PyObject_RichCompareBool(hits, item, Py_LT);
    if (below < 0 || (node_vals = PyTuple_Pack(4, dev, stored ? Py_True : Py_False, below ? hits : item, lq)) == NULL)
        goto done;
    Py_CLEAR(item);
    /* the slot values: (tuple(x.host) or None, tuple(sync_backup.get(x.id)) or None, backing) */
    if ((hs = field_of(x, s_host)) == NULL)
        goto done;
    pending = PyDict_GetItemWithError(sync_backup, xid);
    if (pending == NULL && PyErr_Occurred())
        goto done;
    pending = Py_NewRef(pending != NULL ? pending : Py_None);
    if ((item = field_of(x, s_inflight)) == NULL)
        goto done;
    int busy = PyObject_IsTrue(item);
    Py_CLEAR(item);
    if (busy < 0)
        goto done;
    if (busy) {
        PyObject *argv[] = {x};
        if ((item = PyObject_Vectorcall(in_flight, argv, 1, NULL)) == NULL)
            goto done;
        busy = PyObject_IsTrue(item);
        Py_CLEAR(item);
        if (busy < 0)
            goto done;
    }
    backing = Py_NewRef(busy ? Py_True : Py_False);
    if ((ht = hs == Py_None ? Py_NewRef(Py_None) : PySequence_Tuple(hs)) == NULL ||
        (pt = pending == Py_None ? Py_NewRef(Py_None) : PySequence_Tuple(pending)) == NULL ||
        (slot_vals = PyTuple_Pack(3, ht, pt, backing)) == NULL || (new = PyTuple_Pack(2, node_vals, slot_vals)) == NULL)
        goto done;
    old = PyDict_GetItemWithError(nval, x);
    if (old == NULL && PyErr_Occurred())
        goto done;
    Py_XINCREF(old);
    int forced = PySet_Contains(slot_changed, x);
    if (forced < 0)
        goto done;
    int same = old != NULL && !resized ? kept_values_compare(old, new, Py_EQ) : 0;
    if (same < 0)
        goto done;
    if (same && !forced) {
        err = 0;
        goto done;
    }
    if (!same && PyDict_SetDefault(changed, x, old != NULL ? old : Py_None) == NULL)
        goto done;
    if (PyDict_SetItem(nval, x, new) < 0)
        goto done;
    /* every position of pos made dirty first when x is new or in slot_changed: the writes
     * below then skip their own adds (NULL), up to six a page for a new node */
    PyObject *page_dirty = dirty;
    if (forced || old == NULL) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(pos); i++)
            if (PySet_Add(dirty, PyList_GET_ITEM(pos, i)) < 0)
                goto done;
        page_dirty = NULL;
    }
    if (resized || old == NULL) {
        if (remap_node_level(node_cols, node_vals, NULL, 1, pos, delta, page_dirty) < 0)
            goto done;
    } else {
        PyObject *zero = PyLong_FromLong(0);
        item = zero == NULL ? NULL : item_at(old, zero);
        Py_XDECREF(zero);
        int differ = item == NULL ? -1 : kept_values_compare(item, node_vals, Py_NE);
        if (differ < 0 || (differ && remap_node_level(node_cols, node_vals, item, 0, pos, delta, page_dirty) < 0))
            goto done;
        Py_CLEAR(item);
    }
    int slots_differ = resized || forced || old == NULL;
    if (!slots_differ) {
        PyObject *one = PyLong_FromLong(1);
        item = one == NULL ? NULL : item_at(old, one);
        Py_XDECREF(one);
        slots_differ = item == NULL ? -1 : kept_values_compare(item, slot_vals, Py_NE);
        Py_CLEAR(item);
        if (slots_differ < 0)
            goto done;
    }
    if (slots_differ &&
        remap_slots(x, hs, pending, backing, pos, slot_page, slot_cols, node_slots, delta, page_dirty, slots) < 0)
        goto done;
    err = 0;
done:
    Py_XDECREF(pos);
    Py_XDECREF(xid);
    Py_XDECREF(par);
    Py_XDECREF(was);
    Py_XDECREF(n);
    Py_XDECREF(lq);
    Py_XDECREF(hits);
    Py_XDECREF(hs);
    Py_XDECREF(pending);
    Py_XDECREF(backing);
    Py_XDECREF(node_vals);
    Py_XDECREF(slot_vals);
    Py_XDECREF(new);
    Py_XDECREF(old);
    Py_XDECREF(item);
    Py_XDECREF(ht);
    Py_XDECREF(pt);
    return err ? -1 : 0;
}

static PyObject *s_L, *s_children;

/* the names the unmapping reads, interned once (besides remap_names'); 0, or -1 */
static int unmap_names(void) {
    static const char *const names[] = {"L", "children", "req_dirty", "rid"};
    PyObject **const slots[] = {&s_L, &s_children, &s_req_dirty, &s_rid};
    return remap_names() < 0 ? -1 : intern_names(names, slots, sizeof names / sizeof names[0]);
}

/* d.pop(key, None) for a dict d: its value (a new reference), None when absent; NULL on an
 * error */
static PyObject *dict_pop(PyObject *d, PyObject *key) {
    PyObject *v = PyDict_GetItemWithError(d, key);
    if (v == NULL)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    Py_INCREF(v);
    if (PyDict_DelItem(d, key) < 0)
        Py_CLEAR(v);
    return v;
}

/* x's positions `holes` (not empty) out of the prefix: m.L = remove_pages(cols, holes, m.L,
 * keys, npos, delta, dirty, slots); 0, or -1 on an error */
static int unmap_positions(PyObject *m, PyObject *cols, PyObject *holes, PyObject *keys, PyObject *npos,
                           PyObject *delta, PyObject *dirty, PyObject *slots) {
    PyObject *L = PyObject_GetAttr(m, s_L);
    if (L == NULL)
        return -1;
    PyObject *argv[] = {cols, holes, L, keys, npos, delta, dirty, slots};
    PyObject *L1 = remove_pages(NULL, argv, 8);
    Py_DECREF(L);
    int rc = L1 == NULL ? -1 : PyObject_SetAttr(m, s_L, L1);
    Py_XDECREF(L1);
    return rc;
}

/* x out of its request's loading_nodes set while it is loading (x.loading not None; the rid,
 * getattr(x.loading, "rid", None)); 0, or -1 on an error */
static int unmap_loading(PyObject *loading_nodes, PyObject *x) {
    PyObject *load = field_of(x, s_loading);
    if (load == NULL || load == Py_None) {
        Py_XDECREF(load);
        return load == NULL ? -1 : 0;
    }
    PyObject *rid = PyObject_GetAttr(load, s_rid);
    Py_DECREF(load);
    if (rid == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
        rid = Py_NewRef(Py_None);
    }
    int rc = discard_from(loading_nodes, rid, x);
    Py_DECREF(rid);
    return rc;
}

/* loops.py's py_unmap_node(ctx, step, unmapping, x): the same reads, writes and calls in the
 * same order; 0, or -1 on an error. Why: ~1 node an eviction leaves the tree, and its
 * unmapping's bytecode, called back from the walk, cost as much as its pages' writes. */
static int unmap_node(PyObject *ctx, PyObject *step, PyObject *unmapping, PyObject *x) {
    PyObject *c[5], *st[5], *u[4];
    if (check_type(ctx, &PyTuple_Type, "unmap_node", "ctx"))
        return -1;
    /* npos, by_id, up, kids, nval = ctx[:5] (borrowed: ctx holds them) */
    PyObject *head = PyTuple_GetSlice(ctx, 0, 5);
    if (head == NULL)
        return -1;
    int bad = unpack(head, 5, "ctx", c) < 0;
    Py_DECREF(head);
    PyObject *npos = c[0], *by_id = c[1], *up = c[2], *kids = c[3], *nval = c[4];
    if (bad || unpack(step, 5, "step", st) < 0 || unpack(unmapping, 4, "unmapping", u) < 0 || unmap_names() < 0 ||
        check_type(npos, &PyDict_Type, "unmap_node", "npos") || check_type(by_id, &PyDict_Type, "unmap_node", "by_id") ||
        check_type(up, &PyDict_Type, "unmap_node", "up") || check_type(kids, &PyDict_Type, "unmap_node", "kids") ||
        check_type(nval, &PyDict_Type, "unmap_node", "nval") ||
        check_type(u[2], &PyDict_Type, "unmap_node", "loading_nodes") ||
        check_type(u[3], &PyList_Type, "unmap_node", "left"))
        return -1;
    PyObject *delta = st[0], *dirty = st[2], *slots = st[3], *m = st[4];
    PyObject *xid = NULL, *par = NULL, *holes = NULL, *gone = NULL;
    int err = 1;
    if (PyList_Append(u[3], x) < 0 || (xid = field_of(x, s_id)) == NULL)
        goto done;
    /* (by_id's own entry: `xid in by_id`, then its pop) */
    PyObject *had = PyDict_GetItemWithError(by_id, xid);
    if (had == NULL ? PyErr_Occurred() != NULL
                    : (PyObject_SetAttr(m, s_req_dirty, Py_True) < 0 || PyDict_DelItem(by_id, xid) < 0))
        goto done;
    if ((gone = dict_pop(nval, x)) == NULL || (par = dict_pop(up, x)) == NULL || discard_from(kids, par, x) < 0)
        goto done;
    Py_CLEAR(gone);
    if ((gone = dict_pop(kids, x)) == NULL || (holes = dict_pop(npos, x)) == NULL)
        goto done;
    int some = PyObject_IsTrue(holes);
    if (some < 0 || (some && unmap_positions(m, u[1], holes, u[0], npos, delta, dirty, slots) < 0) ||
        unmap_loading(u[2], x) < 0)
        goto done;
    err = 0;
done:
    Py_XDECREF(xid);
    Py_XDECREF(par);
    Py_XDECREF(holes);
    Py_XDECREF(gone);
    return err ? -1 : 0;
}

/* loops.py's py_unmap_subtree(ctx, step, unmapping, x): x and every node below it, popped off
 * a stack (each one's children pushed in their dict's order), each mapped one (in ctx[0])
 * unmapped (unmap_node); 0, or -1 on an error */
static int unmap_subtree(PyObject *ctx, PyObject *step, PyObject *unmapping, PyObject *x) {
    if (check_type(ctx, &PyTuple_Type, "unmap_subtree", "ctx") || unmap_names() < 0)
        return -1;
    if (PyTuple_GET_SIZE(ctx) == 0) {
        PyErr_SetString(PyExc_IndexError, "tuple index out of range");
        return -1;
    }
    PyObject *npos = PyTuple_GET_ITEM(ctx, 0), *stack = PyList_New(0);
    int err = stack == NULL || PyList_Append(stack, x) < 0;
    while (!err && PyList_GET_SIZE(stack) > 0) {
        Py_ssize_t top = PyList_GET_SIZE(stack) - 1;
        PyObject *y = Py_NewRef(PyList_GET_ITEM(stack, top)), *children = NULL;
        int in = PyList_SetSlice(stack, top, top + 1, NULL) < 0 ? -1 : PySequence_Contains(npos, y);
        err = in < 0 || (in && unmap_node(ctx, step, unmapping, y) < 0) ||
              (children = field_of(y, s_children)) == NULL;
        if (!err && PyDict_CheckExact(children)) {
            /* (a dict's values in its order, as values() gives them, without the view) */
            Py_ssize_t it = 0;
            PyObject *k, *v;
            while (!err && PyDict_Next(children, &it, &k, &v))
                err = PyList_Append(stack, v) < 0;
        } else if (!err) {
            PyObject *vals = PyObject_CallMethod(children, "values", NULL);
            PyObject *iter = vals == NULL ? NULL : PyObject_GetIter(vals), *v;
            err = iter == NULL;
            while (!err && (v = PyIter_Next(iter)) != NULL) {
                err = PyList_Append(stack, v) < 0;
                Py_DECREF(v);
            }
            err = err || PyErr_Occurred() != NULL;
            Py_XDECREF(iter);
            Py_XDECREF(vals);
        }
        Py_XDECREF(children);
        Py_DECREF(y);
    }
    Py_XDECREF(stack);
    return err ? -1 : 0;
}

/* unmap_subtree(ctx, step, unmapping, x): unmap_subtree. */
static PyObject *unmap_subtree_call(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("unmap_subtree", n, 4) || unmap_subtree(a[0], a[1], a[2], a[3]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* remap_node(ctx, step, x): remap_entry. */
static PyObject *remap_node(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("remap_node", n, 3) || remap_entry(a[0], a[1], a[2]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static int remap_enter(void *cs, PyObject *x) {
    PyObject **a = cs;
    return remap_entry(a[0], a[1], x);
}

static int unmap_leave(void *cs, PyObject *x) {
    PyObject **a = cs;
    return unmap_subtree(a[0], a[1], a[2], x);
}

/* remap_journaled(todo, root, ctx, step, unmapping): loops.py's py_remap_journaled, walk_nodes
 * over ctx[0] (npos: the mapped nodes) with each node in the tree re-mapped (remap_entry) and
 * each detached one unmapped with what hangs below it (unmap_subtree), no call between. */
static PyObject *remap_journaled(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("remap_journaled", n, 5) || check_type(a[2], &PyTuple_Type, "remap_journaled", "ctx"))
        return NULL;
    if (PyTuple_GET_SIZE(a[2]) == 0) {
        PyErr_SetString(PyExc_IndexError, "tuple index out of range");
        return NULL;
    }
    PyObject *cs[] = {a[2], a[3], a[4]};
    return walk_nodes(a[0], a[1], PyTuple_GET_ITEM(a[2], 0), remap_enter, cs, unmap_leave, cs);
}

/* shifted(slots): loops.py's py_shifted, [h + 1 for h in slots] (an exact int's sum made in
 * C, any other item's by Python's +) */
static PyObject *shifted(PyObject *self, PyObject *slots) {
    PyObject *it = PyObject_GetIter(slots);
    if (it == NULL)
        return NULL;
    PyObject *one = PyLong_FromLong(1), *out = PyList_New(0), *h;
    int err = one == NULL || out == NULL;
    while (!err && (h = PyIter_Next(it)) != NULL) {
        long long v;
        PyObject *x = int_value(h, &v) ? PyLong_FromLongLong(v + 1) : PyNumber_Add(h, one);
        err = x == NULL || PyList_Append(out, x) < 0;
        Py_XDECREF(x);
        Py_DECREF(h);
    }
    return finish(it, err, out, one, NULL, NULL);
}

static PyObject *s_idle, *s_req, *s_reqlen;

/* whether rows a (old's) and b (new) differ: `a != b`, decided without a call for the same
 * exact str (the rows are the phase table's strs) or two exact ints; -1: error */
static int row_differs(PyObject *a, PyObject *b) {
    if (a == b && PyUnicode_CheckExact(a))
        return 0;
    return ints_or_compare(a, b, Py_NE);
}

/* row rid of loops.py's _request_rows appended to req ("idle" for None, else its phase, or
 * "idle"); 1 when its locked node is out of the tree (nothing appended), 0, or -1: error */
static int request_row(PyObject *const *a, PyObject *rid, PyObject *req) {
    PyObject *phase = a[1], *req_node = a[2], *by_id = a[3], *root = a[4];
    if (rid == Py_None)
        return PyList_Append(req, s_idle);
    /* nid = req_node.get(rid); out of the tree unless None, root or in by_id */
    PyObject *nid = PyDict_GetItemWithError(req_node, rid);
    int in = 1;
    if (nid == NULL) {
        in = PyErr_Occurred() ? -1 : 1;
    } else if (nid != Py_None) {
        Py_INCREF(nid);
        in = ints_or_compare(nid, root, Py_EQ);
        if (in == 0)
            in = PyDict_Contains(by_id, nid);
        Py_DECREF(nid);
    }
    if (in <= 0)
        return in < 0 ? -1 : 1;
    PyObject *ph = PyDict_GetItemWithError(phase, rid);
    if (ph == NULL && PyErr_Occurred())
        return -1;
    return PyList_Append(req, ph != NULL ? ph : s_idle);
}

/* loops.py's _request_rows over (qtab, phase, req_node, by_id, root) and old, the same reads
 * in the same order (phase, req_node and by_id checked dicts by request_step; an exact list
 * qtab indexed as its iterator walks it): 1 with *rows (a new tuple) and *changed (a new list
 * of changed row numbers), 0 when a locked node is out of the tree (None), -1: error. n0 is
 * len(old), taken after the rows as Python takes it. */
static int request_rows(PyObject *const *a, PyObject *old, PyObject **rows, PyObject **changed, Py_ssize_t *n0) {
    PyObject *qtab = a[0], *it = NULL, *rid;
    if (!PyList_CheckExact(qtab) && (it = PyObject_GetIter(qtab)) == NULL)
        return -1;
    PyObject *req = PyList_New(0);
    int rc = req == NULL ? -1 : 0;
    for (Py_ssize_t i = 0; rc == 0; i++) {
        if (it == NULL) {
            if (i >= PyList_GET_SIZE(qtab))
                break;
            rid = Py_NewRef(PyList_GET_ITEM(qtab, i));
        } else if ((rid = PyIter_Next(it)) == NULL) {
            rc = PyErr_Occurred() ? -1 : 0;
            break;
        }
        rc = request_row(a, rid, req);
        Py_DECREF(rid);
    }
    Py_XDECREF(it);
    if (rc != 0) {
        Py_XDECREF(req);
        return rc < 0 ? -1 : 0;
    }
    if (PyList_GET_SIZE(req) == 0 && PyList_Append(req, s_idle) < 0) {
        Py_DECREF(req);
        return -1;
    }
    *n0 = PyObject_Size(old);
    PyObject *out = *n0 < 0 ? NULL : PyList_New(0);
    int err = out == NULL;
    for (Py_ssize_t q = 0; !err && q < PyList_GET_SIZE(req); q++) {
        int differs = 1;
        if (q < *n0) {
            PyObject *was = NULL;
            if (PyTuple_CheckExact(old)) {
                was = Py_NewRef(PyTuple_GET_ITEM(old, q));
            } else {
                PyObject *k = PyLong_FromSsize_t(q);
                was = k == NULL ? NULL : PyObject_GetItem(old, k);
                Py_XDECREF(k);
            }
            differs = was == NULL ? -1 : row_differs(was, PyList_GET_ITEM(req, q));
            Py_XDECREF(was);
        }
        if (differs > 0) {
            PyObject *k = PyLong_FromSsize_t(q + 1);
            err = k == NULL || PyList_Append(out, k) < 0;
            Py_XDECREF(k);
        } else {
            err = differs < 0;
        }
    }
    *rows = err ? NULL : PyList_AsTuple(req);
    Py_DECREF(req);
    if (*rows == NULL) {
        Py_XDECREF(out);
        return -1;
    }
    *changed = out;
    return 1;
}

/* 1 when an item of the iterable x is true, 0 when none is (Python's any), -1 on an error (an
 * exact tuple's items read in place) */
static int any_true(PyObject *x) {
    if (PyTuple_CheckExact(x)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(x); i++) {
            int t = PyObject_IsTrue(PyTuple_GET_ITEM(x, i));
            if (t != 0)
                return t;
        }
        return 0;
    }
    PyObject *it = PyObject_GetIter(x), *v;
    if (it == NULL)
        return -1;
    int found = 0;
    while (!found && (v = PyIter_Next(it)) != NULL) {
        found = PyObject_IsTrue(v);
        Py_DECREF(v);
    }
    Py_DECREF(it);
    return found < 0 || PyErr_Occurred() ? -1 : found;
}

/* request_step(qtab, phase, req_node, by_id, root, s, delta, dirty): loops.py's
 * py_request_step, the same reads and writes in the same order: None (nothing written) when
 * the common step does not apply, else whether the number of rows changed. Why in C: it runs
 * at every request event of a strict run, where its bytecode was most of the sync's. */
static PyObject *request_step(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("request_step", n, 8))
        return NULL;
    PyObject *s = a[5], *delta = a[6], *dirty = a[7];
    if (check_type(a[1], &PyDict_Type, "request_step", "phase") ||
        check_type(a[2], &PyDict_Type, "request_step", "req_node") ||
        check_type(a[3], &PyDict_Type, "request_step", "by_id") ||
        check_type(s, &PyDict_Type, "request_step", "s") ||
        check_type(delta, &PyList_Type, "request_step", "delta") ||
        check_type(dirty, &PySet_Type, "request_step", "dirty"))
        return NULL;
    if ((s_idle == NULL && (s_idle = PyUnicode_InternFromString("idle")) == NULL) ||
        (s_req == NULL && (s_req = PyUnicode_InternFromString("req")) == NULL) ||
        (s_reqlen == NULL && (s_reqlen = PyUnicode_InternFromString("reqLen")) == NULL))
        return NULL;
    /* old = s.get("req"): None (none yet) takes the full rebuild, as a true row of reqLen does */
    PyObject *old = PyDict_GetItemWithError(s, s_req);
    if (old == NULL)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    if (old == Py_None)
        return Py_NewRef(Py_None);
    Py_INCREF(old);      /* (held: the write below replaces it in s) */
    /* s["reqLen"] (s an exact dict: its KeyError as subscription raises it) */
    PyObject *lens = PyDict_GetItemWithError(s, s_reqlen);
    if (lens == NULL && !PyErr_Occurred())
        PyErr_SetObject(PyExc_KeyError, s_reqlen);
    Py_XINCREF(lens);
    int some = lens == NULL ? -1 : any_true(lens);
    Py_XDECREF(lens);
    PyObject *req = NULL, *changed = NULL, *out = NULL;
    Py_ssize_t n0 = 0;
    int got = some != 0 ? -1 : request_rows(a, old, &req, &changed, &n0);
    if (got == 0 || some > 0) {
        out = Py_NewRef(Py_None);     /* (a locked node out of the tree, a true row: the full rebuild) */
    } else if (got > 0) {
        Py_ssize_t nq = PyTuple_GET_SIZE(req);
        int err = 0;
        if (PyList_GET_SIZE(changed) > 0 || nq != n0) {
            for (Py_ssize_t i = 0; !err && i < PyList_GET_SIZE(changed); i++)
                err = PySet_Add(dirty, PyList_GET_ITEM(changed, i)) < 0;
            err = err || record(delta, s_req, Py_None, old) < 0 || PyDict_SetItem(s, s_req, req) < 0;
        }
        out = err ? NULL : PyBool_FromLong(nq != n0);
        Py_DECREF(req);
        Py_DECREF(changed);
    }
    Py_DECREF(old);
    return out;
}

/* ---- the tree nodes' journaled fields (maps/host_tier_inc.py's _tracked_class; loops.py's
 * py_tracked_class, whose __setattr__ and __delattr__ do the same in Python): a subclass of the
 * runtime's node class, no slots of its own, whose writes of a field named in its
 * `_hicache_journals` (a read-only mapping, fixed when the class is made: field name -> the
 * list of journals journal_tree keeps, appended to and pruned as maps come and go, so read at
 * each write) store as any write does, then add the node to each journal of that field's list.
 * The class's own attribute-setting slot does it (tp_setattro): its fields stay the base
 * class's slot descriptors.
 * Why: as data descriptors of the subclass (the form before this one) every read of a
 * journaled field, ~8,500 a bench replay by the runtime alone, took the generic lookup and
 * the descriptor's call (17 ns; the interpreter specializes a read only of a plain slot); now
 * those reads are the interpreter's specialized slot read (2.9 ns), and the cost moves to the
 * writes, ~3,700 a replay, which the interpreter no longer specializes either (25 ns for a
 * field not journaled, 45 ns for a journaled one, against a slot's 3.4 ns).
 * Invariant: a write through the class's attribute protocol (x.f = v, setattr) journals the
 * node exactly when f is named in the mapping; a delete of such a field is refused (the map
 * would read a field it cannot map), any other attribute's goes through as written. */
static PyObject *s_journals;

/* every name some tracked class journals, interned (each class's, added when it is made): a
 * write of another name journals nothing on any tracked class, decided by comparing pointers
 * (PyObject_SetAttr interns the name before it calls the class's slot). Exact because a
 * class's journaled names never change (its `_hicache_journals` is a read-only copy). Beyond
 * TRACKED_NAMES_MAX names (a test's many classes), every write takes the class's own look-up. */
#define TRACKED_NAMES_MAX 32
static PyObject *tracked_names[TRACKED_NAMES_MAX];
static int n_tracked_names, tracked_names_full;

/* whether `name` may be journaled by some tracked class (1), or surely not (0) */
static int maybe_tracked(PyObject *name) {
    if (tracked_names_full || !PyUnicode_CheckExact(name) || !PyUnicode_CHECK_INTERNED(name))
        return 1;
    for (int i = 0; i < n_tracked_names; i++)
        if (tracked_names[i] == name)
            return 1;
    return 0;
}

/* `name` (an exact str) among the names writes journal (interned, kept for the module's life;
 * past TRACKED_NAMES_MAX the filter is off for good) */
static void note_tracked(PyObject *name) {
    Py_INCREF(name);
    PyUnicode_InternInPlace(&name);
    for (int i = 0; i < n_tracked_names; i++)
        if (tracked_names[i] == name) {
            Py_DECREF(name);
            return;
        }
    if (n_tracked_names == TRACKED_NAMES_MAX) {
        tracked_names_full = 1;
        Py_DECREF(name);
        return;
    }
    tracked_names[n_tracked_names++] = name;
}

/* the journals of obj's class for the field `name` (a new reference to a list), NULL where
 * the field is not journaled or on an error (set) */
static PyObject *journals_of(PyObject *obj, PyObject *name) {
    PyObject *by_field = _PyType_Lookup(Py_TYPE(obj), s_journals);     /* (borrowed: the class's mapping) */
    if (by_field == NULL || !PyUnicode_Check(name))
        return NULL;
    Py_INCREF(by_field);
    PyObject *lists = PyObject_GetItem(by_field, name);
    Py_DECREF(by_field);
    if (lists == NULL) {
        if (PyErr_ExceptionMatches(PyExc_KeyError))
            PyErr_Clear();
        return NULL;
    }
    if (!PyList_CheckExact(lists)) {
        PyErr_Format(PyExc_TypeError, "_hicache_journals['%U'] must be a list", name);
        Py_DECREF(lists);
        return NULL;
    }
    return lists;
}

static int tracked_setattro(PyObject *obj, PyObject *name, PyObject *value) {
    if (!maybe_tracked(name))
        return PyObject_GenericSetAttr(obj, name, value);
    PyObject *lists = journals_of(obj, name);
    if (lists == NULL) {
        if (PyErr_Occurred())
            return -1;
        return PyObject_GenericSetAttr(obj, name, value);
    }
    if (value == NULL) {
        PyErr_Format(PyExc_AttributeError, "can't delete journaled field '%U'", name);
        Py_DECREF(lists);
        return -1;
    }
    /* (lists held: adding may run Python, a hash or an `add`, that changes the list) */
    int err = PyObject_GenericSetAttr(obj, name, value);
    for (Py_ssize_t i = 0; !err && i < PyList_GET_SIZE(lists); i++) {
        PyObject *journal = Py_NewRef(PyList_GET_ITEM(lists, i));
        if (PySet_Check(journal)) {
            err = PySet_Add(journal, obj);
        } else {
            PyObject *r = PyObject_CallMethod(journal, "add", "O", obj);    /* (any journal with `add`) */
            err = r == NULL ? -1 : 0;
            Py_XDECREF(r);
        }
        Py_DECREF(journal);
    }
    Py_DECREF(lists);
    return err ? -1 : 0;
}

/* the tracked class's __init_subclass__: refused, since a subclass's attribute-setting slot
 * would be the generic one again (the interpreter sets a new class's slots from the
 * __setattr__ it finds, object's here), and its writes would journal nothing */
static PyObject *tracked_init_subclass(PyObject *self, PyObject *args, PyObject *kw) {
    PyErr_SetString(PyExc_TypeError, "a tracked class cannot be subclassed: the subclass's writes would not journal");
    return NULL;
}

static PyMethodDef tracked_init_subclass_def = {"__init_subclass__", (PyCFunction)(void (*)(void))tracked_init_subclass,
                                                METH_VARARGS | METH_KEYWORDS, NULL};

/* tracked_class(base, journals, name): the class `name`, a subclass of the type base (which
 * sets attributes the generic way, PyObject_GenericSetAttr) with __slots__ () and
 * _hicache_journals a read-only copy of journals (a dict of str -> list: the same lists), whose
 * writes of a field named there journal the object (tracked_setattro), and which cannot be
 * subclassed */
static PyObject *tracked_class(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("tracked_class", n, 3))
        return NULL;
    if (!PyType_Check(a[0])) {
        PyErr_SetString(PyExc_TypeError, "tracked_class: base must be a class");
        return NULL;
    }
    if (check_type(a[1], &PyDict_Type, "tracked_class", "journals") < 0 ||
        check_type(a[2], &PyUnicode_Type, "tracked_class", "name") < 0)
        return NULL;
    if (((PyTypeObject *)a[0])->tp_setattro != PyObject_GenericSetAttr) {
        PyErr_SetString(PyExc_TypeError, "tracked_class: base must set attributes the generic way");
        return NULL;
    }
    if (s_journals == NULL && (s_journals = PyUnicode_InternFromString("_hicache_journals")) == NULL)
        return NULL;
    Py_ssize_t pos = 0;
    PyObject *key, *val;
    while (PyDict_Next(a[1], &pos, &key, &val)) {
        if (!PyUnicode_CheckExact(key) || !PyList_CheckExact(val)) {
            PyErr_SetString(PyExc_TypeError, "tracked_class: journals must map field names (str) to lists");
            return NULL;
        }
        /* (noted even if a later entry is refused: the filter only needs a superset) */
        note_tracked(key);
    }
    PyObject *copy = PyDict_Copy(a[1]);
    PyObject *fixed = copy == NULL ? NULL : PyDictProxy_New(copy);
    Py_XDECREF(copy);
    PyObject *slots = PyTuple_New(0);
    PyObject *fn = PyCFunction_New(&tracked_init_subclass_def, NULL);
    PyObject *init = fn == NULL ? NULL : PyClassMethod_New(fn);
    PyObject *ns = slots == NULL || init == NULL || fixed == NULL ? NULL
                   : Py_BuildValue("{sOsOsO}", "__slots__", slots, "_hicache_journals", fixed, "__init_subclass__", init);
    Py_XDECREF(fixed);
    PyObject *cls = ns == NULL ? NULL : PyObject_CallFunction((PyObject *)&PyType_Type, "O(O)O", a[2], a[0], ns);
    Py_XDECREF(slots);
    Py_XDECREF(fn);
    Py_XDECREF(init);
    Py_XDECREF(ns);
    if (cls == NULL)
        return NULL;
    /* (a class made here, of the generic setattr before: its instances' writes come here) */
    ((PyTypeObject *)cls)->tp_setattro = tracked_setattro;
    PyType_Modified((PyTypeObject *)cls);
    return cls;
}

/* ---- the HostTier guards' and frame's tests of a node's or an event's slots in one call
 * (maps/loops.py's py_first_slot_not_in, py_holders_outside): the same reads in the same
 * order */

/* first_slot_not_in(names, slots, state, runtime): first_not_in_state(names, slots, state)
 * over spec slots, or with runtime true over runtime slots, each made a spec slot first (as
 * shifted(slots) makes them: every one before any is tested). In C when names is an exact
 * list, slots an exact list or tuple of exact ints (|h| < 2**61) and state an exact str
 * (names[h - 1] is state: equal, no comparison's call); else first_not_in_state itself. */
static PyObject *first_slot_not_in(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("first_slot_not_in", n, 4))
        return NULL;
    PyObject *names = a[0], *slots = a[1], *state = a[2];
    int runtime = PyObject_IsTrue(a[3]);
    if (runtime < 0)
        return NULL;
    int fast = PyList_CheckExact(names) && PyUnicode_CheckExact(state) &&
               (PyList_CheckExact(slots) || PyTuple_CheckExact(slots));
    /* the slots read once, before any comparison (Python's twin takes a list of them first):
     * a name's comparison with state runs Python code, which may change slots or names */
    Py_ssize_t count = fast ? PySequence_Fast_GET_SIZE(slots) : 0;
    long long *hs = fast ? PyMem_New(long long, count > 0 ? count : 1) : NULL;
    if (fast && hs == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; fast && i < count; i++)
        fast = int_value(PySequence_Fast_GET_ITEM(slots, i), &hs[i]);
    if (!fast) {
        PyMem_Free(hs);
        PyObject *spec = runtime ? shifted(self, slots) : PySequence_List(slots);
        if (spec == NULL)
            return NULL;
        PyObject *args[3] = {names, spec, state};
        PyObject *out = first_not_in_state(self, args, 3);
        Py_DECREF(spec);
        return out;
    }
    /* (names' length is Python's len(names) of the loop's start, each item read as it is then) */
    Py_ssize_t len = PyList_GET_SIZE(names);
    PyObject *out = NULL;
    for (Py_ssize_t i = 0; out == NULL && i < count; i++) {
        long long h = hs[i] + runtime;
        if (h <= 0 || h > len) {
            out = PyLong_FromLongLong(h);
            break;
        }
        if (h > PyList_GET_SIZE(names)) {
            PyErr_SetString(PyExc_IndexError, "list index out of range");
            break;
        }
        PyObject *st = PyList_GET_ITEM(names, h - 1);
        if (st == state)
            continue;
        Py_INCREF(st);
        int bad = PyObject_RichCompareBool(st, state, Py_NE);
        Py_DECREF(st);
        if (bad < 0)
            break;
        if (bad)
            out = PyLong_FromLongLong(h);
    }
    PyMem_Free(hs);
    if (out == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return out;
}

/* holders_outside(slots, slot_page, ids): the list of (h, y) for each h of slots whose
 * y = slot_page.get(h) (a dict) is not None with y.id not in ids; a holder that is the very
 * object the slot before it had (a node's slots run together) keeps its verdict, y.id read
 * and searched once per run. */
static PyObject *holders_outside(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("holders_outside", n, 3))
        return NULL;
    PyObject *slot_page = a[1], *ids = a[2];
    if (check_type(slot_page, &PyDict_Type, "holders_outside", "slot_page"))
        return NULL;
    if (s_id == NULL && (s_id = PyUnicode_InternFromString("id")) == NULL)
        return NULL;
    Items w;
    if (items_begin(&w, a[0]) < 0)
        return NULL;
    PyObject *out = PyList_New(0), *h, *last = NULL;
    int err = out == NULL, outside = 0;
    while (!err && (h = items_next(&w)) != NULL) {
        /* (borrowed; off its entry where that entry holds h: the map's slot_page is laid out
         * by slot, pos_entry) */
        long long k;
        PyObject *y = PyDict_CheckExact(slot_page) && small_int(h, &k) ? pos_entry(slot_page, h, k) : NULL;
        if (y == NULL)
            y = PyDict_GetItemWithError(slot_page, h);
        if (y == NULL) {
            err = PyErr_Occurred() != NULL;
        } else if (y != Py_None) {
            Py_INCREF(y);
            if (y != last) {
                /* (last holds its holder: the verdict is the object's, not an address's) */
                Py_XSETREF(last, Py_NewRef(y));
                PyObject *id = PyObject_GetAttr(y, s_id);
                int in = id == NULL ? -1 : PySequence_Contains(ids, id);
                Py_XDECREF(id);
                err = in < 0;
                outside = in == 0;
            }
            if (!err && outside) {
                PyObject *pair = PyTuple_Pack(2, h, y);
                err = pair == NULL || PyList_Append(out, pair) < 0;
                Py_XDECREF(pair);
            }
            Py_DECREF(y);
        }
        Py_DECREF(h);
    }
    Py_XDECREF(last);
    return finish(w.it, err, out, NULL, NULL, NULL);
}

/* ---- WriteThroughPrefix in tree form over a sync's dirty positions, in one call (the
 * incremental HostTier map's write_through_prefix_inc; maps/loops.py's py_tree_prefix_breach):
 * its Python loop over the nodes cost as much as the tests it made. The same reads in the same
 * order, through the object API where the map's own types are not given. */

static PyObject *s_children, *s_values;

/* seq[-1] (a list's own last item when it is exactly one), a new reference */
static PyObject *last_item(PyObject *seq) {
    if (PyList_CheckExact(seq) && PyList_GET_SIZE(seq) > 0)
        return Py_NewRef(PyList_GET_ITEM(seq, PyList_GET_SIZE(seq) - 1));
    PyObject *minus1 = PyLong_FromLong(-1);
    PyObject *v = minus1 == NULL ? NULL : PyObject_GetItem(seq, minus1);
    Py_XDECREF(minus1);
    return v;
}

/* npos.get(x) when it is true (a node with pages), a new reference; NULL with no exception
 * set when it is absent or false */
static PyObject *pages_of(PyObject *npos, PyObject *x) {
    PyObject *pos = PyDict_GetItemWithError(npos, x);
    if (pos == NULL)
        return NULL;
    Py_INCREF(pos);
    int truth = PyObject_IsTrue(pos);
    if (truth <= 0)
        Py_CLEAR(pos);
    return pos;
}

/* host[k] compared with 0 (`==` when eq, else `!=`): 1, 0, or -1 on an error */
static int host_cmp0(PyObject *host, PyObject *k, PyObject *zero, int eq) {
    long long v;
    PyObject *h = PyObject_GetItem(host, k);
    int r = h == NULL ? -1 : int_value(h, &v) ? (eq ? v == 0 : v != 0)
                                              : PyObject_RichCompareBool(h, zero, eq ? Py_EQ : Py_NE);
    Py_XDECREF(h);
    return r;
}

/* The first child c of x (x.children.values(), in order) whose first page has a host copy
 * (host[npos[c][0]] != 0), as (that page, q); NULL with no exception when there is none. An
 * exact dict is walked in place, its size watched as its iterator would watch it. */
static PyObject *child_breach(PyObject *x, PyObject *npos, PyObject *host, PyObject *q, PyObject *zero) {
    PyObject *kids = PyObject_GetAttr(x, s_children), *it = NULL, *c, *out = NULL;
    if (kids == NULL)
        return NULL;
    int walk = PyDict_CheckExact(kids), err = 0;
    Py_ssize_t i = 0, size = walk ? PyDict_GET_SIZE(kids) : 0;
    if (!walk) {
        PyObject *vals = PyObject_CallMethodNoArgs(kids, s_values);
        it = vals == NULL ? NULL : PyObject_GetIter(vals);
        Py_XDECREF(vals);
        err = it == NULL;
    }
    while (!err && out == NULL) {
        if (walk) {
            if (PyDict_GET_SIZE(kids) != size) {
                PyErr_SetString(PyExc_RuntimeError, "dictionary changed size during iteration");
                err = 1;
                break;
            }
            if (!PyDict_Next(kids, &i, NULL, &c))
                break;
            Py_INCREF(c);
        } else if ((c = PyIter_Next(it)) == NULL) {
            break;
        }
        PyObject *below = pages_of(npos, c), *b0 = NULL;
        if (below == NULL) {
            err = PyErr_Occurred() != NULL;
        } else if ((b0 = item_at(below, zero)) == NULL) {
            err = 1;
        } else {
            int set = host_cmp0(host, b0, zero, 0);
            err = set < 0 || (set > 0 && (out = PyTuple_Pack(2, b0, q)) == NULL);
        }
        Py_XDECREF(b0);
        Py_XDECREF(below);
        Py_DECREF(c);
    }
    Py_XDECREF(it);
    Py_DECREF(kids);
    if (err || PyErr_Occurred())
        Py_CLEAR(out);
    return out;
}

/* WriteThroughPrefix at node x: its pages along from its parent's last page (none when the
 * parent is None or root), then, when its own last page q has no host copy, its children's
 * first pages; the first (page, parent page) that breaks it, a new reference; NULL with no
 * exception when none does (or x has no pages) */
static PyObject *node_breach(PyObject *x, PyObject *npos, PyObject *host, PyObject *root, PyObject *zero) {
    PyObject *pos = pages_of(npos, x);
    if (pos == NULL)
        return NULL;
    PyObject *par = PyObject_GetAttr(x, s_parent), *above = NULL, *q = NULL, *out = NULL;
    int err = par == NULL;
    if (!err && par != Py_None && par != root) {
        above = pages_of(npos, par);
        err = above == NULL && PyErr_Occurred();
    }
    if (!err)
        err = (q = above == NULL ? Py_NewRef(Py_None) : last_item(above)) == NULL;
    PyObject *broke = err ? NULL : breach_along(host, pos, q);
    Py_XDECREF(q);
    q = NULL;
    if (broke == NULL) {
        err = 1;
    } else if (broke != Py_None) {
        out = Py_NewRef(broke);
    } else if ((q = last_item(pos)) == NULL) {
        err = 1;
    } else {
        int gap = host_cmp0(host, q, zero, 1);
        err = gap < 0;
        if (gap > 0)
            out = child_breach(x, npos, host, q, zero);
    }
    Py_XDECREF(broke);
    Py_XDECREF(q);
    Py_XDECREF(above);
    Py_XDECREF(par);
    Py_DECREF(pos);
    if (err || PyErr_Occurred())
        Py_CLEAR(out);
    return out;
}

/* tree_prefix_breach(keys, positions, L, npos, host, root): WriteThroughPrefix in tree form
 * at each node of nodes_at(keys, positions, L), in that set's order (node_breach); None, or
 * the first (page, parent page) that breaks it. */
static PyObject *tree_prefix_breach(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("tree_prefix_breach", n, 6))
        return NULL;
    PyObject *npos = a[3], *host = a[4], *root = a[5];
    static const char *const names[] = {"children", "values"};
    PyObject **const slots[] = {&s_children, &s_values};
    if (check_type(npos, &PyDict_Type, "tree_prefix_breach", "npos") || remap_names() < 0 ||
        intern_names(names, slots, 2) < 0)
        return NULL;
    PyObject *nodes = nodes_at(self, a, 3);
    if (nodes == NULL)
        return NULL;
    /* (nodes, this call's own set, held to the end: the walk reads it in place) */
    Items w;
    PyObject *zero = PyLong_FromLong(0), *x, *out = NULL;
    int err = items_begin(&w, nodes) < 0 || zero == NULL;
    while (!err && out == NULL && (x = items_next(&w)) != NULL) {
        out = node_breach(x, npos, host, root, zero);
        err = out == NULL && PyErr_Occurred();
        Py_DECREF(x);
    }
    Py_DECREF(nodes);
    return finish(w.it, err, out, zero, NULL, NULL);
}

/* extend_positions(x, keys, pos, n, L, dirty): loops.py's py_extend_positions, node x's pages
 * len(pos)..n-1 given the positions L onwards, each one's key (x, i) appended to keys, its
 * position to pos and to dirty; returns L + n - len(pos). (A node's new pages, one call for what
 * cost a Python frame of three extends over zips and ranges.) */
static PyObject *extend_positions(PyObject *self, PyObject *const *a, Py_ssize_t nargs) {
    if (!arity("extend_positions", nargs, 6))
        return NULL;
    PyObject *x = a[0], *keys = a[1], *pos = a[2], *dirty = a[5];
    if (check_type(keys, &PyList_Type, "extend_positions", "keys") ||
        check_type(pos, &PyList_Type, "extend_positions", "pos") ||
        check_type(dirty, &PySet_Type, "extend_positions", "dirty"))
        return NULL;
    long long n, L;
    if (!int_value(a[3], &n) || !int_value(a[4], &L)) {
        PyErr_SetString(PyExc_TypeError, "extend_positions: n and L must be ints");
        return NULL;
    }
    long long k = PyList_GET_SIZE(pos);
    for (long long i = k; i < n; i++) {
        PyObject *idx = PyLong_FromLongLong(i);
        PyObject *key = idx == NULL ? NULL : PyTuple_Pack(2, x, idx);
        Py_XDECREF(idx);
        int err = key == NULL || PyList_Append(keys, key) < 0;
        Py_XDECREF(key);
        if (err)
            return NULL;
        PyObject *p = PyLong_FromLongLong(L + i - k);
        err = p == NULL || PyList_Append(pos, p) < 0 || PySet_Add(dirty, p) < 0;
        Py_XDECREF(p);
        if (err)
            return NULL;
    }
    return PyLong_FromLongLong(L + n - k);
}

/* ---- the HostTier guards' per-page tests of a node (maps/loops.py's py_first_page_where) */

/* first_page_where(d, pos, want): first_where(d, pos, want), its reads made directly where d
 * is an exact dict, pos an exact list or tuple and want True or False: a small exact int
 * position found in d with an exact int or bool value is read and tested in place (off the
 * entry it numbers where that entry holds it, pos_entry, else hashed as the int it is); any
 * other position or value, d[q] and its truth through the object API, as
 * Python reads them (the same reads in the same order; want anything else, or d or pos of
 * another type: first_where itself). A guard asks this of each page of its node, two passes
 * an event: the object API's lookup and truth test per page cost twice these. */
static PyObject *first_page_where(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("first_page_where", n, 3))
        return NULL;
    PyObject *d = a[0], *pos = a[1];
    if (!PyDict_CheckExact(d) || !(PyList_CheckExact(pos) || PyTuple_CheckExact(pos)) ||
        (a[2] != Py_True && a[2] != Py_False))
        return first_where(self, a, n);
    int want = a[2] == Py_True;
    /* (as Python's for loop over a list: its length re-read and each item held while it is
     * used: a lookup may run a colliding key's __eq__, which may change pos) */
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(pos); i++) {
        PyObject *q = Py_NewRef(PySequence_Fast_GET_ITEM(pos, i)), *v;
        long long k, x;
        int truth;
        if (small_int(q, &k) && ((v = pos_entry(d, q, k)) != NULL ||
                                 (v = dict_get_h(d, q, k == -1 ? -2 : (Py_hash_t)k)) != NULL) &&
            (v == Py_True || v == Py_False || small_int(v, &x))) {
            truth = v == Py_True || (v != Py_False && x != 0);      /* (v borrowed: read at once) */
        } else if (PyErr_Occurred() || (v = PyObject_GetItem(d, q)) == NULL) {
            Py_DECREF(q);                                        /* (d[q]'s KeyError, as Python's) */
            return NULL;
        } else {
            truth = PyObject_IsTrue(v);                          /* (any other key or value) */
            Py_DECREF(v);
            if (truth < 0) {
                Py_DECREF(q);
                return NULL;
            }
        }
        if (truth == want)
            return q;
        Py_DECREF(q);
    }
    Py_RETURN_NONE;
}

/* ---- IncrementalHostTierMap.sync (loops.py's py_host_sync: the same reads, writes and calls in
 * the same order): host_sync(m, ctx), and the map's `sync` as a callable of its own,
 * host_sync_step(ref, ctx, own), which host_tier_inc.py installs as the map's instance
 * attribute while the class's sync is `own` (a weak reference, as load_bind's: the map's dict
 * holds it). ctx: what the map never rebinds (dirty, dirty_nodes, dirty_slots, dirty_reqs,
 * cache, states, free_of, seen, journal, s, qtab, phase, req_node, by_id, root, prefetching,
 * orphans, unchanged, empty); what it rebinds is read and written on m (its own dict where no
 * class on its MRO names the attribute: plain_dict), its rare steps are its methods. Why: the
 * sync runs at every event of a strict run, and its bytecode, ~146 opcodes a call, was 30 % of
 * the monitors' Python. */
#define HS_CTX 31
enum { HS_DIRTY, HS_DIRTY_NODES, HS_DIRTY_SLOTS, HS_DIRTY_REQS, HS_CACHE, HS_STATES, HS_FREE_OF, HS_SEEN,
       HS_JOURNAL, HS_S, HS_QTAB, HS_PHASE, HS_REQ_NODE, HS_BY_ID, HS_ROOT, HS_PREFETCHING, HS_ORPHANS,
       HS_UNCHANGED, HS_EMPTY,
       /* (what the class's _map_nodes and _slots read that the map never rebinds, and the
        * two methods themselves: each is done here while the map's class has that one) */
       HS_CHANGED_ACTIONS, HS_REMAP_CTX, HS_KEYS, HS_PAGE_COLS, HS_LOADING_NODES, HS_SLOT_CHANGED, HS_SLOT_NAMES,
       HS_SLOT_PAGE, HS_NAMES, HS_IDLE_BYTE, HS_OWN_MAP_NODES, HS_OWN_SLOTS };

static PyObject *hs_delta, *hs_effect_due, *hs_left, *hs_changed, *hs_slots_changed, *hs_free, *hs_free_seen,
    *hs_adjusted, *hs_slots_m, *hs_L, *hs_requeue, *hs_map_nodes, *hs_len, *hs_set_scalar, *hs_prefetcher, *hs_acks,
    *hs_req_dirty, *hs_pf_refs, *hs_id, *hs_requests, *hs_synced_key, *hs_constants_key, *hs_zero_rows, *hs_req,
    *hs_fetching, *hs_own_domains, *hs_reqs, *hs_sync, *hs_slot, *hs_hidden_retention, *hs_count;
/* (the cache's, its prefetcher's and the host free list's attributes: kept inline, read by index) */
static IvMemo im_prefetcher = {0, 0}, im_acks = {0, 0}, im_free = {0, 0};
static AttrMemo hm_delta = ATTR_MEMO_INIT, hm_effect_due = ATTR_MEMO_INIT, hm_left = ATTR_MEMO_INIT, hm_changed = ATTR_MEMO_INIT,
    hm_slots_changed = ATTR_MEMO_INIT, hm_free_seen = ATTR_MEMO_INIT, hm_adjusted = ATTR_MEMO_INIT, hm_L = ATTR_MEMO_INIT, hm_requeue = ATTR_MEMO_INIT,
    hm_req_dirty = ATTR_MEMO_INIT, hm_pf_refs = ATTR_MEMO_INIT, hm_synced_key = ATTR_MEMO_INIT, hm_fetching = ATTR_MEMO_INIT,
    hm_own_domains = ATTR_MEMO_INIT;

static int host_sync_names(void) {
    static const char *const names[] = {"delta", "effect_due", "left", "changed", "slots_changed", "free", "free_seen",
                                        "adjusted", "_slots", "L", "requeue", "_map_nodes", "len", "_set_scalar",
                                        "prefetcher", "acks", "req_dirty", "pf_refs", "id", "_requests", "synced_key",
                                        "constants_key", "_zero_rows", "req", "fetching", "own_domains", "Reqs",
                                        "sync", "slot", "_hidden_retention", "count"};
    PyObject **const slots[] = {&hs_delta, &hs_effect_due, &hs_left, &hs_changed, &hs_slots_changed, &hs_free,
                                &hs_free_seen, &hs_adjusted, &hs_slots_m, &hs_L, &hs_requeue, &hs_map_nodes, &hs_len,
                                &hs_set_scalar, &hs_prefetcher, &hs_acks, &hs_req_dirty, &hs_pf_refs, &hs_id,
                                &hs_requests, &hs_synced_key, &hs_constants_key, &hs_zero_rows, &hs_req, &hs_fetching,
                                &hs_own_domains, &hs_reqs, &hs_sync, &hs_slot, &hs_hidden_retention, &hs_count};
    return intern_names(names, slots, sizeof(names) / sizeof(names[0]));
}

/* the truth of m.<name> (-1: an error) */
static int attr_truth(PyObject *m, PyObject *name, AttrMemo *plain) {
    PyObject *v = attr_of(m, name, plain);
    if (v == NULL)
        return -1;
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

/* `if m.<name>: m.<name> = fresh()` (fresh: an empty list or dict); -1: an error */
static int refill(PyObject *m, PyObject *name, AttrMemo *plain, int dict) {
    int t = attr_truth(m, name, plain);
    if (t <= 0)
        return t;
    PyObject *fresh = dict ? PyDict_New() : PyList_New(0);
    if (fresh == NULL)
        return -1;
    int rc = attr_set(m, name, fresh, plain);
    Py_DECREF(fresh);
    return rc;
}

/* `if x: x.clear()` for an exact set (the dirty sets) */
static int clear_filled(PyObject *x) {
    if (PySet_GET_SIZE(x) > 0)
        return PySet_Clear(x);
    return 0;
}

/* m.<name>() or m.<name>(arg...) with its result dropped; -1: an error */
static int call_method(PyObject *m, PyObject *name, PyObject *a, PyObject *b) {
    PyObject *argv[3] = {m, a, b};
    size_t n = a == NULL ? 1 : b == NULL ? 2 : 3;
    PyObject *r = PyObject_VectorcallMethod(name, argv, n | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* m.synced_key = m.constants_key() */
static int rekey(PyObject *m) {
    PyObject *argv[1] = {m};
    PyObject *key = PyObject_VectorcallMethod(hs_constants_key, argv, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (key == NULL)
        return -1;
    int rc = attr_set(m, hs_synced_key, key, &hm_synced_key);
    Py_DECREF(key);
    return rc;
}

/* whether any prefetch op may hold slots: the cache's live ones, its orphans, or ops its
 * prefetcher still has to acknowledge (-1: an error) */
static int prefetch_inflight(PyObject *const *ctx) {
    int t = PyObject_IsTrue(ctx[HS_PREFETCHING]);
    if (t != 0)
        return t;
    if ((t = PyObject_IsTrue(ctx[HS_ORPHANS])) != 0)
        return t;
    PyObject *p = iv_get(ctx[HS_CACHE], hs_prefetcher, &im_prefetcher);
    if (p == NULL)
        return -1;
    t = 0;
    if (p != Py_None) {
        PyObject *acks = iv_get(p, hs_acks, &im_acks);
        t = acks == NULL ? -1 : PyObject_IsTrue(acks);
        Py_XDECREF(acks);
    }
    Py_DECREF(p);
    return t;
}

/* m.L compared with L0 (op: Py_NE or Py_EQ); -1: an error */
static int L_compare(PyObject *m, PyObject *L0, int op) {
    PyObject *L = attr_of(m, hs_L, &hm_L);
    if (L == NULL)
        return -1;
    int r = PyObject_RichCompareBool(L, L0, op);
    Py_DECREF(L);
    return r;
}

/* the finally of _map_nodes, with the error of its body (err < 0, set) kept unless this raises
 * one of its own: m.slot_changed cleared; if m.changed or m.left: m.effect_due = the changed
 * actions */
static int map_nodes_finally(PyObject *m, PyObject *const *ctx, int err) {
    PyObject *et = NULL, *ev = NULL, *tb = NULL;
    if (err < 0)
        PyErr_Fetch(&et, &ev, &tb);
    int t = PySet_Clear(ctx[HS_SLOT_CHANGED]);
    if (t == 0 && (t = attr_truth(m, hs_changed, &hm_changed)) == 0)
        t = attr_truth(m, hs_left, &hm_left);
    if (t > 0)
        t = attr_set(m, hs_effect_due, ctx[HS_CHANGED_ACTIONS], &hm_effect_due);
    if (t < 0) {
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        return -1;
    }
    if (err < 0)
        PyErr_Restore(et, ev, tb);
    return err < 0 ? -1 : 0;
}

/* m._map_nodes() (IncrementalHostTierMap's, done here while the map's class has that one,
 * ctx[HS_OWN_MAP_NODES]; else the method called): every journaled or requeued node re-mapped
 * by remap_journaled over the map's containers, the journal emptied and requeue a new set
 * first; its finally (map_nodes_finally) whatever the re-mapping did. */
static int host_sync_map_nodes(PyObject *m, PyObject *const *ctx) {
    if (_PyType_Lookup(Py_TYPE(m), hs_map_nodes) != ctx[HS_OWN_MAP_NODES])
        return call_method(m, hs_map_nodes, NULL, NULL);
    PyObject *requeue = attr_of(m, hs_requeue, &hm_requeue);
    if (requeue == NULL)
        return -1;
    PyObject *todo = PyNumber_Or(ctx[HS_JOURNAL], requeue);
    Py_DECREF(requeue);
    if (todo == NULL)
        return -1;
    PyObject *fresh = NULL, *delta = NULL, *changed = NULL, *left = NULL, *step = NULL, *unmapping = NULL;
    int rc = -1;
    if (PySet_Clear(ctx[HS_JOURNAL]) < 0 || (fresh = PySet_New(NULL)) == NULL ||
        attr_set(m, hs_requeue, fresh, &hm_requeue) < 0)
        goto done;
    /* (the body: its error, if any, kept through the finally) */
    if ((delta = attr_of(m, hs_delta, &hm_delta)) == NULL || (changed = attr_of(m, hs_changed, &hm_changed)) == NULL ||
        (step = PyTuple_Pack(5, delta, changed, ctx[HS_DIRTY_NODES], ctx[HS_DIRTY_SLOTS], m)) == NULL ||
        (left = attr_of(m, hs_left, &hm_left)) == NULL ||
        (unmapping = PyTuple_Pack(4, ctx[HS_KEYS], ctx[HS_PAGE_COLS], ctx[HS_LOADING_NODES], left)) == NULL) {
        rc = map_nodes_finally(m, ctx, -1);
        goto done;
    }
    {
        PyObject *ra[5] = {todo, ctx[HS_ROOT], ctx[HS_REMAP_CTX], step, unmapping};
        PyObject *r = remap_journaled(NULL, ra, 5);
        Py_XDECREF(r);
        rc = map_nodes_finally(m, ctx, r == NULL ? -1 : 0);
    }
done:
    Py_DECREF(todo);
    Py_XDECREF(fresh);
    Py_XDECREF(delta);
    Py_XDECREF(changed);
    Py_XDECREF(left);
    Py_XDECREF(step);
    Py_XDECREF(unmapping);
    return rc;
}

/* `if held: m.<name> |= held` (m.<name> a set the map rebinds, requeue, or ctx's set: name NULL) */
static int or_into(PyObject *m, PyObject *name, AttrMemo *memo, PyObject *set, PyObject *held) {
    PyObject *cur = set != NULL ? Py_NewRef(set) : attr_of(m, name, memo);
    if (cur == NULL)
        return -1;
    PyObject *u = PyNumber_InPlaceOr(cur, held);
    int rc = u == NULL ? -1 : 0;
    if (rc == 0 && name != NULL)
        rc = attr_set(m, name, u, memo);
    Py_XDECREF(u);
    Py_DECREF(cur);
    return rc;
}

/* m._slots(hs, free) (IncrementalHostTierMap's, done here while the map's class has that one,
 * ctx[HS_OWN_SLOTS]; else the method called): the free count seen; each changed slot's name,
 * dirty spec slot and holding nodes (slot_changes; those nodes requeued); the `slot` variable
 * rewritten when a slot changed and no idle slot is, nor was, shown "reserved", else
 * m._hidden_retention(raw, hs). */
static int host_sync_slots_of(PyObject *m, PyObject *const *ctx, PyObject *hs, PyObject *free) {
    if (_PyType_Lookup(Py_TYPE(m), hs_slots_m) != ctx[HS_OWN_SLOTS])
        return call_method(m, hs_slots_m, hs, free);
    PyObject *raw = ctx[HS_SEEN];
    if (attr_set(m, hs_free_seen, free, &hm_free_seen) < 0)
        return -1;
    int t = PyObject_IsTrue(hs);
    if (t < 0)
        return -1;
    if (t) {
        if (attr_set(m, hs_slots_changed, hs, &hm_slots_changed) < 0 ||
            attr_set(m, hs_effect_due, ctx[HS_CHANGED_ACTIONS], &hm_effect_due) < 0)
            return -1;
        PyObject *sa[6] = {hs, raw, ctx[HS_SLOT_NAMES], ctx[HS_NAMES], ctx[HS_SLOT_PAGE], ctx[HS_DIRTY_SLOTS]};
        PyObject *held = slot_changes(NULL, sa, 6);
        if (held == NULL)
            return -1;
        int h = PyObject_IsTrue(held), rc = h;
        if (h > 0)
            rc = or_into(m, hs_requeue, &hm_requeue, NULL, held) < 0 ||
                 or_into(m, NULL, NULL, ctx[HS_SLOT_CHANGED], held) < 0 ? -1 : 0;
        Py_DECREF(held);
        if (rc < 0)
            return -1;
    }
    /* if raw.count(IDLE) == free and not m.adjusted: (the names are the states') */
    PyObject *ca[2] = {raw, ctx[HS_IDLE_BYTE]};
    PyObject *count = PyObject_VectorcallMethod(hs_count, ca,
                                                2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (count == NULL)
        return -1;
    int eq = PyObject_RichCompareBool(count, free, Py_EQ);
    Py_DECREF(count);
    if (eq > 0) {
        int adjusted = attr_truth(m, hs_adjusted, &hm_adjusted);
        if (adjusted < 0)
            return -1;
        eq = !adjusted;
    }
    if (eq < 0)
        return -1;
    if (!eq)
        return call_method(m, hs_hidden_retention, raw, hs);
    if (!t)
        return 0;
    /* (every slot of hs changed name: `slot` differs, written without _set_scalar's comparison) */
    PyObject *s = ctx[HS_S];
    PyObject *old = PyObject_GetItem(s, hs_slot);
    if (old == NULL)
        return -1;
    PyObject *delta = attr_of(m, hs_delta, &hm_delta), *names = NULL;
    int rc = delta == NULL ? -1 : record(delta, hs_slot, Py_None, old);
    if (rc == 0)
        rc = (names = PySequence_Tuple(ctx[HS_SLOT_NAMES])) == NULL ? -1 : PyObject_SetItem(s, hs_slot, names);
    Py_XDECREF(names);
    Py_XDECREF(delta);
    Py_DECREF(old);
    return rc;
}

/* the slots part: `free = free_of.free; hs = diff_bytes(states, seen); if hs or free !=
 * m.free_seen or m.adjusted: m._slots(hs, free)` */
static int host_sync_slots(PyObject *m, PyObject *const *ctx) {
    PyObject *free = iv_get(ctx[HS_FREE_OF], hs_free, &im_free);
    if (free == NULL)
        return -1;
    PyObject *da[2] = {ctx[HS_STATES], ctx[HS_SEEN]};
    PyObject *hs = diff_bytes(NULL, da, 2);
    int rc = -1, t = 0;
    if (hs == NULL)
        goto done;
    t = PyObject_IsTrue(hs);
    if (t == 0) {
        PyObject *seen = attr_of(m, hs_free_seen, &hm_free_seen);
        if (seen == NULL)
            goto done;
        t = PyObject_RichCompareBool(free, seen, Py_NE);
        Py_DECREF(seen);
    }
    if (t == 0)
        t = attr_truth(m, hs_adjusted, &hm_adjusted);
    if (t < 0)
        goto done;
    rc = t ? host_sync_slots_of(m, ctx, hs, free) : 0;
done:
    Py_XDECREF(hs);
    Py_DECREF(free);
    return rc;
}

/* the request-side part, past its test: m.req_dirty = False; the common step or the rebuild */
static int host_sync_requests(PyObject *m, PyObject *const *ctx, PyObject *delta, int inflight) {
    if (attr_put(m, hs_req_dirty, Py_False, &hm_req_dirty) < 0)
        return -1;
    PyObject *grew = Py_None;     /* (borrowed None, or a new reference) */
    int t = inflight;
    if (!t && (t = attr_truth(m, hs_pf_refs, &hm_pf_refs)) < 0)
        return -1;
    if (!t) {
        PyObject *root_id = PyObject_GetAttr(ctx[HS_ROOT], hs_id);
        if (root_id == NULL)
            return -1;
        PyObject *ra[8] = {ctx[HS_QTAB], ctx[HS_PHASE], ctx[HS_REQ_NODE], ctx[HS_BY_ID], root_id, ctx[HS_S], delta,
                           ctx[HS_DIRTY_REQS]};
        grew = request_step(NULL, ra, 8);
        Py_DECREF(root_id);
        if (grew == NULL)
            return -1;
    } else {
        Py_INCREF(grew);
    }
    int rc = 0;
    if (grew == Py_None) {
        rc = call_method(m, hs_requests, NULL, NULL) < 0 || rekey(m) < 0 ? -1 : 0;
    } else {
        t = PyObject_IsTrue(grew);
        if (t < 0) {
            rc = -1;
        } else if (t) {
            /* m._zero_rows(len(s["req"])) */
            PyObject *req = PyObject_GetItem(ctx[HS_S], hs_req), *nq = NULL;
            Py_ssize_t n = req == NULL ? -1 : PyObject_Length(req);
            Py_XDECREF(req);
            if (n < 0 || (nq = PyLong_FromSsize_t(n)) == NULL)
                rc = -1;
            else
                rc = call_method(m, hs_zero_rows, nq, NULL) < 0 || rekey(m) < 0 ? -1 : 0;
            Py_XDECREF(nq);
        }
        if (rc == 0)
            rc = attr_put(m, hs_fetching, ctx[HS_EMPTY], &hm_fetching);
    }
    Py_DECREF(grew);
    return rc;
}

/* d[key] = v unless d[key] is v already (d an exact dict) */
static int dict_put(PyObject *d, PyObject *key, PyObject *v) {
    PyObject *cur = PyDict_GetItemWithError(d, key);
    if (cur == v)
        return 0;
    return cur == NULL && PyErr_Occurred() ? -1 : PyDict_SetItem(d, key, v);
}

/* host_sync's work over a checked ctx (its items borrowed: the tuple is held by the caller; no
 * arguments: `args` unused, the MapStep signature) */
static PyObject *host_sync_on(PyObject *m, PyObject *const *ctx, PyObject *const *args) {
    (void)args;
    if (hs_delta == NULL && host_sync_names() < 0)
        return NULL;
    PyObject *delta = PyList_New(0), *L0 = NULL, *out = NULL;
    if (delta == NULL || attr_set(m, hs_delta, delta, &hm_delta) < 0)
        goto done;
    {
        PyObject *due = attr_of(m, hs_effect_due, &hm_effect_due);
        if (due == NULL)
            goto done;
        int other = due != ctx[HS_UNCHANGED];
        Py_DECREF(due);
        if (other && (refill(m, hs_left, &hm_left, 0) < 0 || refill(m, hs_changed, &hm_changed, 1) < 0 ||
                      refill(m, hs_slots_changed, &hm_slots_changed, 0) < 0 ||
                      attr_set(m, hs_effect_due, ctx[HS_UNCHANGED], &hm_effect_due) < 0))
            goto done;
    }
    if (clear_filled(ctx[HS_DIRTY_NODES]) < 0 || clear_filled(ctx[HS_DIRTY_SLOTS]) < 0 ||
        clear_filled(ctx[HS_DIRTY_REQS]) < 0)
        goto done;
    if (ctx[HS_STATES] != Py_None && host_sync_slots(m, ctx) < 0)
        goto done;
    if ((L0 = attr_of(m, hs_L, &hm_L)) == NULL)
        goto done;
    {
        int t = PySet_GET_SIZE(ctx[HS_JOURNAL]) > 0;
        if (!t && (t = attr_truth(m, hs_requeue, &hm_requeue)) < 0)
            goto done;
        if (t) {
            if (host_sync_map_nodes(m, ctx) < 0)
                goto done;
            /* if s["len"] != m.L: m._set_scalar("len", m.L) */
            PyObject *len = PyObject_GetItem(ctx[HS_S], hs_len), *L = NULL;
            int ne = len == NULL || (L = attr_of(m, hs_L, &hm_L)) == NULL ? -1 : PyObject_RichCompareBool(len, L, Py_NE);
            if (ne > 0)
                ne = call_method(m, hs_set_scalar, hs_len, L) < 0 ? -1 : 0;
            Py_XDECREF(len);
            Py_XDECREF(L);
            if (ne < 0)
                goto done;
        }
    }
    {
        int inflight = prefetch_inflight(ctx), t;
        if (inflight < 0 || (t = attr_truth(m, hs_req_dirty, &hm_req_dirty)) < 0)
            goto done;
        if (!t)
            t = inflight;
        if (!t && (t = attr_truth(m, hs_pf_refs, &hm_pf_refs)) < 0)
            goto done;
        if (!t && (t = L_compare(m, L0, Py_NE)) < 0)
            goto done;
        if (t && host_sync_requests(m, ctx, delta, inflight) < 0)
            goto done;
    }
    {
        int own = L_compare(m, L0, Py_EQ);
        if (own < 0 || attr_put(m, hs_own_domains, own ? Py_True : Py_False, &hm_own_domains) < 0 ||
            dict_put(ctx[HS_DIRTY], hs_reqs, own ? ctx[HS_DIRTY_REQS] : Py_None) < 0)
            goto done;
    }
    out = PyTuple_Pack(2, delta, ctx[HS_DIRTY]);
done:
    Py_XDECREF(L0);
    Py_XDECREF(delta);
    return out;
}

/* ctx checked: a tuple of HS_CTX items, the containers of their exact types (what the loops
 * it calls check again: diff_bytes, request_step) */
static int host_sync_ctx(PyObject *ctx, const char *fn) {
    if (!PyTuple_CheckExact(ctx) || PyTuple_GET_SIZE(ctx) != HS_CTX) {
        PyErr_Format(PyExc_TypeError, "%s: ctx must be a tuple of %d items", fn, HS_CTX);
        return -1;
    }
    PyObject *const *c = &PyTuple_GET_ITEM(ctx, 0);
    if (check_type(c[HS_DIRTY], &PyDict_Type, fn, "dirty") < 0 ||
        check_type(c[HS_DIRTY_NODES], &PySet_Type, fn, "dirty_nodes") < 0 ||
        check_type(c[HS_DIRTY_SLOTS], &PySet_Type, fn, "dirty_slots") < 0 ||
        check_type(c[HS_DIRTY_REQS], &PySet_Type, fn, "dirty_reqs") < 0 ||
        check_type(c[HS_JOURNAL], &PySet_Type, fn, "journal") < 0)
        return -1;
    return 0;
}

/* host_sync(m, ctx): (delta, dirty) */
static PyObject *host_sync(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("host_sync", n, 2) || host_sync_ctx(a[1], "host_sync") < 0)
        return NULL;
    PyObject *ctx = Py_NewRef(a[1]);      /* (held: a method it calls may drop the map's ctx) */
    PyObject *out = host_sync_on(a[0], &PyTuple_GET_ITEM(ctx, 0), NULL);
    Py_DECREF(ctx);
    return out;
}

/* host_sync_step(ref, ctx, own): the map's sync as a MapStep (no arguments) */
static PyObject *host_sync_step(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if ((hs_sync == NULL && host_sync_names() < 0) || (n == 3 && host_sync_ctx(a[1], "host_sync_step") < 0))
        return NULL;
    return map_step_new("host_sync_step", a, n, HS_CTX, hs_sync, "sync", 0, host_sync_on);
}

/* ---- The HostTier map's action guards' dispatch (host_tier_guards.check, which defines it) as
 * the map's own `guard`, a callable (action, fields) over a weak reference to the map, which
 * host_tier_inc.py installs while the class's guard is `own` (check): the request guards by
 * action, of which a live request's finish or abort and a match of a request not live (most
 * request events) pass on the phase before the event alone; the node guards given the node and
 * its positions before the event. The guards themselves are check's, called. Why: the monitor
 * called check at every event, a frame entered from C for ~31 opcodes, most events' whole guard.
 * ctx: (REQUEST_GUARDS, NODE_GUARDS, _request_live, _request_match, _ACKS, the map's by_id and
 * npos (never rebound), no_page(action, nid): the failure of a node event whose node has no page
 * in the tree). */
#define GS_CTX 8
enum { GS_REQUEST, GS_NODE, GS_LIVE, GS_MATCH, GS_ACKS, GS_BY_ID, GS_NPOS, GS_NO_PAGE };

static PyObject *gs_guard, *gs_phase_before, *gs_node;
static AttrMemo hm_phase_before = ATTR_MEMO_INIT;

/* check(m, action, fields) over the checked ctx c (borrowed items), args: (action, fields) */
static PyObject *guard_on(PyObject *m, PyObject *const *c, PyObject *const *args) {
    PyObject *action = args[0], *fields = args[1];
    PyObject *fn = PyDict_GetItemWithError(c[GS_REQUEST], action);     /* (borrowed) */
    if (fn != NULL) {
        if (fn == c[GS_LIVE] || fn == c[GS_MATCH]) {
            PyObject *before = attr_of(m, gs_phase_before, &hm_phase_before);
            if (before == NULL)
                return NULL;
            int live = before != Py_None;
            Py_DECREF(before);
            if (live == (fn == c[GS_LIVE]))
                Py_RETURN_NONE;
        }
        PyObject *argv[3] = {m, action, fields};
        Py_INCREF(fn);      /* (held across its call: the table may be changed by it) */
        PyObject *r = PyObject_Vectorcall(fn, argv, 3, NULL);
        Py_DECREF(fn);
        return r;
    }
    if (PyErr_Occurred() || (fn = PyDict_GetItemWithError(c[GS_NODE], action)) == NULL)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    Py_INCREF(fn);
    PyObject *nid = get_of(fields, gs_node), *x = NULL, *pos = NULL, *r = NULL;
    if (nid == NULL)
        goto done;
    if (nid == Py_None) {
        int ack = PySet_Contains(c[GS_ACKS], action);
        if (ack != 0) {
            r = ack < 0 ? NULL : Py_NewRef(Py_None);
            goto done;
        }
    }
    if ((x = get_of(c[GS_BY_ID], nid)) == NULL)
        goto done;
    if (x != Py_None && (pos = get_of(c[GS_NPOS], x)) == NULL)
        goto done;
    int has = pos == NULL ? 0 : PyObject_IsTrue(pos);
    if (has < 0)
        goto done;
    if (!has) {
        PyObject *argv[2] = {action, nid};
        r = PyObject_Vectorcall(c[GS_NO_PAGE], argv, 2, NULL);
    } else {
        PyObject *argv[5] = {m, action, x, pos, fields};
        r = PyObject_Vectorcall(fn, argv, 5, NULL);
    }
done:
    Py_DECREF(fn);
    Py_XDECREF(nid);
    Py_XDECREF(x);
    Py_XDECREF(pos);
    return r;
}

/* guard_step(ref, ctx, own): the map's guard as a MapStep (action, fields) */
static PyObject *guard_step(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    static const char *const names[] = {"guard", "phase_before", "node"};
    PyObject **const slots[] = {&gs_guard, &gs_phase_before, &gs_node};
    if (intern_names(names, slots, 3) < 0 || (hs_delta == NULL && host_sync_names() < 0))
        return NULL;
    if (n == 3 && PyTuple_CheckExact(a[1]) && PyTuple_GET_SIZE(a[1]) == GS_CTX) {
        PyObject *const *c = &PyTuple_GET_ITEM(a[1], 0);
        if (check_type(c[GS_REQUEST], &PyDict_Type, "guard_step", "request_guards") < 0 ||
            check_type(c[GS_NODE], &PyDict_Type, "guard_step", "node_guards") < 0 ||
            check_type(c[GS_ACKS], &PyFrozenSet_Type, "guard_step", "acks") < 0 ||
            check_type(c[GS_BY_ID], &PyDict_Type, "guard_step", "by_id") < 0 ||
            check_type(c[GS_NPOS], &PyDict_Type, "guard_step", "npos") < 0)
            return NULL;
    }
    return map_step_new("guard_step", a, n, GS_CTX, gs_guard, "guard", 2, guard_on);
}

/* ---- The HostTier steps' frame and writes check (host_tier_guards.effect, which defines it) as
 * the map's own `effect`, a callable (action, fields) over a weak reference to the map, which
 * host_tier_inc.py installs while the class's effect is `own` (effect): on the map just synced,
 * when the sync changed a node's values, a slot's state or took a node out, the frame holds at
 * once where every such node is one the event names and no changed slot's last holder is
 * outside them, else host_tier_guards._frame judges; then the action's own writes (WRITES), its
 * function called. Why: the monitor called effect after each node event's sync, a frame entered
 * from C for ~80 opcodes. ctx: (FRAMES, WRITES, _named_node, _frame, the map's slot_page, never
 * rebound). */
#define ES_CTX 5
enum { ES_FRAMES, ES_WRITES, ES_NAMED, ES_FRAME, ES_SLOT_PAGE };

static PyObject *es_effect, *es_id;

/* whether some node y of `nodes` (an iterable: a dict's keys, a list) has y.id not in ids (-1: an
 * error) */
static int some_outside(PyObject *nodes, PyObject *ids) {
    PyObject *it = PyObject_GetIter(nodes);
    if (it == NULL)
        return -1;
    PyObject *y;
    int out = 0;
    while (out == 0 && (y = PyIter_Next(it)) != NULL) {
        PyObject *yid = PyObject_GetAttr(y, es_id);
        Py_DECREF(y);
        int in = yid == NULL ? -1 : PySequence_Contains(ids, yid);
        Py_XDECREF(yid);
        out = in < 0 ? -1 : !in;
    }
    Py_DECREF(it);
    return out == 0 && PyErr_Occurred() ? -1 : out;
}

/* effect(m, action, fields) over the checked ctx c (borrowed items), args: (action, fields) */
static PyObject *effect_on(PyObject *m, PyObject *const *c, PyObject *const *args) {
    PyObject *action = args[0], *fields = args[1];
    PyObject *changed = attr_of(m, hs_changed, &hm_changed), *slots_changed = NULL, *left = NULL, *ids = NULL,
             *r = NULL;
    if (changed == NULL || (slots_changed = attr_of(m, hs_slots_changed, &hm_slots_changed)) == NULL ||
        (left = attr_of(m, hs_left, &hm_left)) == NULL)
        goto done;
    /* (the truth of each read as Python's `or` reads it: in turn, up to the first true) */
    int any = PyObject_IsTrue(changed);
    if (any == 0)
        any = PyObject_IsTrue(slots_changed);
    if (any == 0)
        any = PyObject_IsTrue(left);
    if (any < 0)
        goto done;
    if (any) {
        PyObject *frame = PyDict_GetItemWithError(c[ES_FRAMES], action);      /* (borrowed) */
        if (frame == NULL && PyErr_Occurred())
            goto done;
        if (frame == c[ES_NAMED]) {
            PyObject *nid = get_of(fields, gs_node);
            if (nid == NULL)
                goto done;
            ids = nid == Py_None ? Py_NewRef(Py_None) : PyTuple_Pack(1, nid);
            Py_DECREF(nid);
            if (ids == NULL)
                goto done;
        } else if (frame != NULL) {
            PyObject *argv[2] = {m, fields};
            Py_INCREF(frame);
            ids = PyObject_Vectorcall(frame, argv, 2, NULL);
            Py_DECREF(frame);
            if (ids == NULL)
                goto done;
        } else {
            ids = Py_NewRef(Py_None);
        }
        if (ids != Py_None) {
            int judge = some_outside(changed, ids), t;
            if (judge == 0 && (t = PyObject_IsTrue(slots_changed)) != 0) {
                PyObject *ha[3] = {slots_changed, c[ES_SLOT_PAGE], ids};
                PyObject *out = t < 0 ? NULL : holders_outside(NULL, ha, 3);
                judge = out == NULL ? -1 : PyObject_IsTrue(out);
                Py_XDECREF(out);
            }
            if (judge == 0 && (t = PyObject_IsTrue(left)) != 0)
                judge = t < 0 ? -1 : some_outside(left, ids);
            if (judge < 0)
                goto done;
            if (judge) {
                PyObject *argv[3] = {m, action, ids};
                PyObject *f = PyObject_Vectorcall(c[ES_FRAME], argv, 3, NULL);
                if (f == NULL)
                    goto done;
                if (f != Py_None) {
                    r = f;
                    goto done;
                }
                Py_DECREF(f);
            }
        }
    }
    {
        PyObject *post = PyDict_GetItemWithError(c[ES_WRITES], action);
        if (post == NULL) {
            r = PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
        } else {
            PyObject *argv[2] = {m, fields};
            Py_INCREF(post);
            r = PyObject_Vectorcall(post, argv, 2, NULL);
            Py_DECREF(post);
        }
    }
done:
    Py_XDECREF(changed);
    Py_XDECREF(slots_changed);
    Py_XDECREF(left);
    Py_XDECREF(ids);
    return r;
}

/* effect_step(ref, ctx, own): the map's effect as a MapStep (action, fields) */
static PyObject *effect_step(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    static const char *const names[] = {"effect", "id", "node"};
    PyObject **const slots[] = {&es_effect, &es_id, &gs_node};
    if (intern_names(names, slots, 3) < 0 || (hs_delta == NULL && host_sync_names() < 0))
        return NULL;
    if (n == 3 && PyTuple_CheckExact(a[1]) && PyTuple_GET_SIZE(a[1]) == ES_CTX) {
        PyObject *const *c = &PyTuple_GET_ITEM(a[1], 0);
        if (check_type(c[ES_FRAMES], &PyDict_Type, "effect_step", "frames") < 0 ||
            check_type(c[ES_WRITES], &PyDict_Type, "effect_step", "writes") < 0 ||
            check_type(c[ES_SLOT_PAGE], &PyDict_Type, "effect_step", "slot_page") < 0)
            return NULL;
    }
    return map_step_new("effect_step", a, n, ES_CTX, es_effect, "effect", 2, effect_on);
}

/* ---- The worker watch's common case (monitors/workers.py's WorkerWatch.check, which defines
 * it and is `slow` here) as a callable (name, fields) of its own, the HostTier monitor's watch
 * hook: None at once when the cache's storage is no KeyAudit of ours with a breach the watch
 * has not reported (len(breaches) > watch._seen) and no worker of the cache has an ack queued,
 * most events; else slow(name, fields), which judges (a queued ack's worker thread alive, or
 * the breach reported). Why: the monitor called the check at every event, a frame entered from
 * C for ~42 opcodes whose answer was nearly always this one. */
typedef struct {
    PyObject_HEAD
    PyObject *cache;
    PyObject *watch;
    PyObject *audit;      /* the KeyAudit type */
    PyObject *slow;       /* WorkerWatch.check bound to the watch */
    IvMemo m_storage, m_breaches, m_seen, m_workers[4], m_acks[4];
    vectorcallfunc vectorcall;
} WatchProbe;

static PyObject *wp_storage, *wp_breaches, *wp_seen, *wp_acks, *wp_workers[4];

/* whether the watch has something to judge (-1: an error) */
static int watch_due(WatchProbe *p) {
    PyObject *storage = iv_get(p->cache, wp_storage, &p->m_storage);
    if (storage == NULL)
        return -1;
    int due = 0;
    if ((PyObject *)Py_TYPE(storage) == p->audit) {
        PyObject *breaches = iv_get(storage, wp_breaches, &p->m_breaches), *seen = NULL, *n = NULL;
        Py_ssize_t len = breaches == NULL ? -1 : PyObject_Length(breaches);
        if (len < 0 || (seen = iv_get(p->watch, wp_seen, &p->m_seen)) == NULL || (n = PyLong_FromSsize_t(len)) == NULL)
            due = -1;
        else
            due = PyObject_RichCompareBool(n, seen, Py_GT);
        Py_XDECREF(breaches);
        Py_XDECREF(seen);
        Py_XDECREF(n);
    }
    Py_DECREF(storage);
    for (int i = 0; due == 0 && i < 4; i++) {
        PyObject *w = iv_get(p->cache, wp_workers[i], &p->m_workers[i]);
        if (w == NULL)
            return -1;
        if (w != Py_None) {
            PyObject *acks = iv_get(w, wp_acks, &p->m_acks[i]);
            due = acks == NULL ? -1 : PyObject_IsTrue(acks);
            Py_XDECREF(acks);
        }
        Py_DECREF(w);
    }
    return due;
}

static PyObject *watch_probe_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    WatchProbe *p = (WatchProbe *)self;
    if (PyVectorcall_NARGS(nargsf) != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "a watch probe takes (name, fields)");
        return NULL;
    }
    if (p->cache == NULL || p->slow == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a watch probe cleared by the collector was called");
        return NULL;
    }
    Py_INCREF(self);      /* (held: the calls below may run a collection that clears it) */
    int due = watch_due(p);
    PyObject *r = due < 0 ? NULL : due == 0 ? Py_NewRef(Py_None) : PyObject_Vectorcall(p->slow, args, 2, NULL);
    Py_DECREF(self);
    return r;
}

static int watch_probe_traverse(PyObject *self, visitproc visit, void *arg) {
    WatchProbe *p = (WatchProbe *)self;
    Py_VISIT(p->cache);
    Py_VISIT(p->watch);
    Py_VISIT(p->audit);
    Py_VISIT(p->slow);
    return 0;
}

static int watch_probe_clear(PyObject *self) {
    WatchProbe *p = (WatchProbe *)self;
    Py_CLEAR(p->cache);
    Py_CLEAR(p->watch);
    Py_CLEAR(p->audit);
    Py_CLEAR(p->slow);
    return 0;
}

static PyTypeObject WatchProbeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_hicache_incmap.WatchProbe",
    .tp_basicsize = sizeof(WatchProbe),
    .tp_dealloc = gc_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(WatchProbe, vectorcall),
    .tp_traverse = watch_probe_traverse,
    .tp_clear = watch_probe_clear,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "WorkerWatch.check's common case: None unless the watch has something to judge",
};

/* watch_probe(cache, watch, audit, slow): a WatchProbe */
static PyObject *watch_probe(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("watch_probe", n, 4))
        return NULL;
    if (!PyType_Check(a[2]) || !PyCallable_Check(a[3])) {
        PyErr_SetString(PyExc_TypeError, "watch_probe: audit must be a type and slow callable");
        return NULL;
    }
    static const char *const names[] = {"storage", "breaches", "_seen", "acks", "loader", "writer", "prefetcher",
                                        "backuper"};
    PyObject **const slots[] = {&wp_storage, &wp_breaches, &wp_seen, &wp_acks, &wp_workers[0], &wp_workers[1],
                                &wp_workers[2], &wp_workers[3]};
    if (intern_names(names, slots, 8) < 0)
        return NULL;
    WatchProbe *p = PyObject_GC_New(WatchProbe, &WatchProbeType);
    if (p == NULL)
        return NULL;
    p->cache = Py_NewRef(a[0]);
    p->watch = Py_NewRef(a[1]);
    p->audit = Py_NewRef(a[2]);
    p->slow = Py_NewRef(a[3]);
    IvMemo none = {0, 0};
    p->m_storage = p->m_breaches = p->m_seen = none;
    for (int i = 0; i < 4; i++)
        p->m_workers[i] = p->m_acks[i] = none;
    p->vectorcall = watch_probe_call;
    PyObject_GC_Track(p);
    return (PyObject *)p;
}

/* ---- The from-scratch HostTier map's per-page functions (host_tier.py's `state`: a dict over
 * the pages 0..n of each per-page variable, n + 1 entries, built at each sampled step and cache
 * check), made at their final size, one insert a page: `dict(enumerate(pages))` over a list
 * grown a node at a time resized the dict five times on the way and cost ~4 us a variable */

/* d[p] = v for the page p, a new key object each (the interpreter's own for p <= 256): 0, or -1 */
static inline int page_set(PyObject *d, Py_ssize_t p, PyObject *v) {
    PyObject *key = PyLong_FromSsize_t(p);
    if (key == NULL)
        return -1;
    int rc = PyDict_SetItem(d, key, v);
    Py_DECREF(key);
    return rc;
}

/* ---- The from-scratch HostTier map's linear invariant forms (host_tier.py's
 * `slot_in_one_owner_linear` and `write_through_prefix_tree`) over a state's values: a check
 * reads every page and every host slot once, ~130 of each on the monitors bench's replay, where
 * the dicts the generic loops count into took ~160k and ~100k instructions a check */

/* a sequence the functions below index: an exact tuple or list, else TypeError */
static int fast_seq(PyObject *o, const char *fn, const char *what) {
    if (PyTuple_CheckExact(o) || PyList_CheckExact(o))
        return 0;
    PyErr_Format(PyExc_TypeError, "%s: %s must be a tuple or list, not %.100s", fn, what, Py_TYPE(o)->tp_name);
    return -1;
}

/* one_owner_breach(names, tree_vals, backup_vals, pf_vals): loops.py's py_one_owner_breach */
static PyObject *one_owner_breach(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("one_owner_breach", n, 4))
        return NULL;
    static const char *const state_names[] = {"idle", "reserved"};
    PyObject **const state_slots[] = {&s_state_idle, &s_state_reserved};
    if (fast_seq(a[0], "one_owner_breach", "names") || fast_seq(a[1], "one_owner_breach", "tree_vals") ||
        fast_seq(a[2], "one_owner_breach", "backup_vals") || fast_seq(a[3], "one_owner_breach", "pf_vals") ||
        intern_names(state_names, state_slots, 2) < 0)
        return NULL;
    /* every value an exact int, or the caller counts by equality (a TRUE is slot 1 there) */
    for (int k = 1; k <= 3; k++)
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(a[k]); i++)
            if (!PyLong_CheckExact(PySequence_Fast_GET_ITEM(a[k], i)))
                Py_RETURN_NOTIMPLEMENTED;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(a[0]);
    /* refs[2h] the tree's references to slot h, refs[2h + 1] the backups' and fetches' (a
     * value outside 1..len, NoSlot = 0 among them, names no slot checked: not counted) */
    long long *refs = PyMem_Calloc(2 * (size_t)len + 2, sizeof(long long));
    if (refs == NULL)
        return PyErr_NoMemory();
    for (int k = 1; k <= 3; k++)
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(a[k]); i++) {
            long long h;
            if (int_value(PySequence_Fast_GET_ITEM(a[k], i), &h) && h >= 1 && h <= len)
                refs[2 * h + (k > 1)]++;
        }
    PyObject *out = Py_None;
    for (Py_ssize_t h = 1; h <= len && out == Py_None; h++) {
        PyObject *st = PySequence_Fast_GET_ITEM(a[0], h - 1);
        int idle = state_is(st, s_state_idle, "idle");
        int reserved = !idle && state_is(st, s_state_reserved, "reserved");
        long long t = refs[2 * h], f = refs[2 * h + 1];
        /* (t, f) must be (0, 0) idle, (0, 1) reserved, (1, 0) any other state */
        if (!(t == (idle || reserved ? 0 : 1) && f == (reserved ? 1 : 0)))
            out = Py_BuildValue("(nOLL)", h, st, t, f);
    }
    PyMem_Free(refs);
    return out == Py_None ? Py_NewRef(Py_None) : out;
}

/* v <op> 0 (Py_NE or Py_EQ) as Python compares: an exact int's value, else the object API */
static int vs_zero(PyObject *v, PyObject *zero, int op) {
    long long x;
    if (int_value(v, &x))
        return op == Py_NE ? x != 0 : x == 0;
    return PyObject_RichCompareBool(v, zero, op);
}

/* parent_breach(parent, host): loops.py's py_parent_breach (host's pages read as a position's
 * value is read, pos_at_h: off the entry where page p sits at entry p) */
static PyObject *parent_breach(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("parent_breach", n, 2))
        return NULL;
    PyObject *parent = a[0], *host = a[1];
    if (fast_seq(parent, "parent_breach", "parent") || check_type(host, &PyDict_Type, "parent_breach", "host"))
        return NULL;
    PyObject *zero = PyLong_FromLong(0), *out = NULL;
    int err = 0;
    Py_INCREF(parent);      /* (held: a comparison below may run Python code) */
    for (Py_ssize_t i = 0; !err && out == NULL && i < PySequence_Fast_GET_SIZE(parent); i++) {
        PyObject *p = Py_NewRef(PySequence_Fast_GET_ITEM(parent, i)), *key = NULL, *hn = NULL, *hp = NULL;
        long long pv;
        int ge = int_value(p, &pv) ? pv >= 0 : PyObject_RichCompareBool(p, zero, Py_GE);
        int ne = 0, eq = 0;
        if (ge < 0)
            err = 1;
        else if (ge) {
            if ((key = PyLong_FromSsize_t(i)) == NULL || (hn = pos_at_h(host, key, -1)) == NULL ||
                (ne = vs_zero(hn, zero, Py_NE)) < 0)
                err = 1;
            else if (ne && ((hp = pos_at_h(host, p, -1)) == NULL || (eq = vs_zero(hp, zero, Py_EQ)) < 0))
                err = 1;
            else if (ne && eq && (out = PyTuple_Pack(2, key, p)) == NULL)
                err = 1;
        }
        Py_DECREF(p);
        Py_XDECREF(key);
        Py_XDECREF(hn);
        Py_XDECREF(hp);
    }
    Py_DECREF(parent);
    Py_DECREF(zero);
    if (err) {
        Py_XDECREF(out);
        return NULL;
    }
    return out != NULL ? out : Py_NewRef(Py_None);
}

/* the pages a spread may hold (no tree has as many: both twins refuse more alike) */
#define SPREAD_MAX (1LL << 61)

/* a copy of pad when it is a dict of `size` entries, else a new dict made at that size (pad
 * NULL or None); a pad of another type: TypeError (loops.py's _padded_dict). *copied: whether
 * it is pad's copy (its values then written in its entries, fresh_pos_put) */
static PyObject *padded_dict(PyObject *pad, Py_ssize_t size, const char *fn, int *copied) {
    *copied = 0;
    if (pad != NULL && pad != Py_None) {
        if (!PyDict_CheckExact(pad)) {
            PyErr_Format(PyExc_TypeError, "%s: pad must be a dict or None, not %.100s", fn, Py_TYPE(pad)->tp_name);
            return NULL;
        }
        if (PyDict_GET_SIZE(pad) == size) {
            *copied = 1;
            return PyDict_Copy(pad);
        }
    }
    return _PyDict_NewPresized(size);
}

/* d[p] = v, in p's entry where d is a pad's copy laid out for it */
static inline int page_put(PyObject *d, Py_ssize_t p, PyObject *v, int copied) {
    return copied && fresh_pos_put(d, p, v) ? 0 : page_set(d, p, v);
}

/* spread(values, runs, spare[, pad]): loops.py's py_spread, a new dict */
static PyObject *spread(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (n != 4 && !arity("spread", n, 3))
        return NULL;
    PyObject *values = a[0], *runs = a[1], *spare = a[2], *pad = n == 4 ? a[3] : NULL;
    if (check_type(values, &PyList_Type, "spread", "values") || check_type(runs, &PyList_Type, "spread", "runs"))
        return NULL;
    Py_ssize_t k = PyList_GET_SIZE(values);
    if (PyList_GET_SIZE(runs) != k) {
        PyErr_SetString(PyExc_ValueError, "spread: values and runs differ in length");
        return NULL;
    }
    /* the runs read first, into C (an allocation below may run a collection, and a finalizer
     * could change a list: the walk never reads past the values it still has), so the dict
     * is made at its size */
    long long *counts = PyMem_Malloc((k > 0 ? (size_t)k : 1) * sizeof(long long)), total = 0;
    if (counts == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *ro = PyList_GET_ITEM(runs, i);
        long long r;
        if (!int_value(ro, &r) || r < 0) {
            if (PyLong_CheckExact(ro) && _PyLong_Sign(ro) > 0)
                r = SPREAD_MAX + 1;         /* (an int too wide to read: past the bound below) */
            else {
                PyMem_Free(counts);
                PyErr_SetString(PyExc_TypeError, "spread: runs must hold exact ints >= 0");
                return NULL;
            }
        }
        if (r > SPREAD_MAX - total) {
            PyMem_Free(counts);
            PyErr_SetString(PyExc_OverflowError, "spread: past 2**61 pages");
            return NULL;
        }
        counts[i] = r;
        total += r;
    }
    int copied;
    PyObject *d = padded_dict(pad, (Py_ssize_t)total + 1, "spread", &copied);
    Py_ssize_t p = 0;
    int err = d == NULL;
    for (Py_ssize_t i = 0; !err && i < k && i < PyList_GET_SIZE(values); i++) {
        PyObject *v = Py_NewRef(PyList_GET_ITEM(values, i));
        for (long long j = 0; !err && j < counts[i]; j++, p++)
            err = page_put(d, p, v, copied) < 0;
        Py_DECREF(v);
    }
    PyMem_Free(counts);
    if (err || page_put(d, p, spare, copied) < 0) {
        Py_XDECREF(d);
        return NULL;
    }
    return d;
}

/* enumerated(values[, pad]): loops.py's py_enumerated, a new dict */
static PyObject *enumerated(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (n != 2 && !arity("enumerated", n, 1))
        return NULL;
    PyObject *values = a[0];
    if (check_type(values, &PyList_Type, "enumerated", "values"))
        return NULL;
    int copied;
    PyObject *d = padded_dict(n == 2 ? a[1] : NULL, PyList_GET_SIZE(values), "enumerated", &copied);
    if (d == NULL)
        return NULL;
    /* (the list's size read at each page: a collection's finalizer could change it) */
    for (Py_ssize_t p = 0; p < PyList_GET_SIZE(values); p++) {
        PyObject *v = Py_NewRef(PyList_GET_ITEM(values, p));
        int rc = page_put(d, p, v, copied);
        Py_DECREF(v);
        if (rc < 0) {
            Py_DECREF(d);
            return NULL;
        }
    }
    return d;
}

/* ---- tree_pages(nodes, sync_backup, load_req_of, node_slots): loops.py's py_tree_pages, the
 * from-scratch HostTier map's walk of the tree (host_tier.py's `state`), which defines it: the
 * same reads, calls and results in the same order, the nodes' fields read as remap_node reads
 * them (field_of: a slot's descriptor, no instance dict), each node's slot lists
 * node_slot_lists's where node_slots is this module's own (any other, a test's stand-in for a
 * map that maps slots wrong, is called). In Python the walk was ~40 opcodes a node, a third of
 * a state's mapping */

/* `hv, bv = node_slots(hs, pending, n, backing)` as Python unpacks it: a new 2-tuple */
static PyObject *slot_lists_via(PyObject *fn, PyObject *hs, PyObject *pending, PyObject *nobj, PyObject *backing) {
    if (PyCFunction_Check(fn) && PyCFunction_GET_FUNCTION(fn) == (PyCFunction)(void (*)(void))node_slots_call)
        return node_slot_lists(hs, pending, nobj, backing);
    PyObject *argv[4] = {hs, pending, nobj, backing};
    PyObject *r = PyObject_Vectorcall(fn, argv, 4, NULL);
    if (r == NULL)
        return NULL;
    PyObject *seq = PySequence_Fast(r, "");
    if (seq == NULL) {
        PyErr_Format(PyExc_TypeError, "cannot unpack non-iterable %.100s object", Py_TYPE(r)->tp_name);
        Py_DECREF(r);
        return NULL;
    }
    Py_DECREF(r);
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = NULL;
    if (k > 2)
        PyErr_SetString(PyExc_ValueError, "too many values to unpack (expected 2)");
    else if (k < 2)
        PyErr_Format(PyExc_ValueError, "not enough values to unpack (expected 2, got %zd)", k);
    else
        out = PyTuple_Pack(2, PySequence_Fast_GET_ITEM(seq, 0), PySequence_Fast_GET_ITEM(seq, 1));
    Py_DECREF(seq);
    return out;
}

/* list.append(v) of a new reference v (consumed): 0, or -1 */
static inline int append_new(PyObject *list, PyObject *v) {
    if (v == NULL)
        return -1;
    int rc = PyList_Append(list, v);
    Py_DECREF(v);
    return rc;
}

static PyObject *tree_pages(PyObject *self, PyObject *const *a, Py_ssize_t n) {
    if (!arity("tree_pages", n, 4) || remap_names() < 0)
        return NULL;
    PyObject *sync_backup = a[1], *load_req_of = a[2], *slots_of = a[3];
    if (check_type(sync_backup, &PyDict_Type, "tree_pages", "sync_backup"))
        return NULL;
    PyObject *it = PyObject_GetIter(a[0]);
    if (it == NULL)
        return NULL;
    /* runs, dev, stor, hits, loadreq, host, backup, parent */
    PyObject *lists[8] = {NULL};
    PyObject *last_page = PyDict_New(), *zero = PyLong_FromLong(0), *two = PyLong_FromLong(2),
             *minus = PyLong_FromLong(-1), *out = NULL, *x = NULL;
    int err = last_page == NULL || zero == NULL || two == NULL || minus == NULL, loading = 0;
    for (int i = 0; !err && i < 8; i++)
        err = (lists[i] = PyList_New(0)) == NULL;
    PyObject *runs = lists[0], *dev = lists[1], *stor = lists[2], *hits = lists[3], *loadreq = lists[4],
             *host = lists[5], *backup = lists[6], *parent = lists[7];
    long long start = 0;
    while (!err && (x = PyIter_Next(it)) != NULL) {
        PyObject *p = NULL, *nobj = NULL, *ld = NULL, *lq = NULL, *v = NULL, *hs = NULL, *id = NULL, *pending = NULL,
                 *backing = NULL, *sl = NULL;
        long long pages;
        err = (p = field_of(x, s_parent)) == NULL || (nobj = field_of(x, s_n)) == NULL;
        if (!err && (!int_value(nobj, &pages) || pages < 0 || pages >= (1LL << 61))) {
            PyErr_SetString(PyExc_TypeError, "tree_pages: a node's n must be an int in [0, 2**61)");
            err = 1;
        }
        if (!err)
            err = (ld = field_of(x, s_loading)) == NULL;
        if (!err) {
            if (ld != Py_None) {
                err = (lq = PyObject_CallOneArg(load_req_of, x)) == NULL;
                if (!err && !loading) {
                    /* loading = loading or (lq != 0 and n != 0) */
                    int nz = vs_zero(lq, zero, Py_NE);
                    err = nz < 0;
                    loading = nz > 0 && pages != 0;
                }
            } else
                lq = Py_NewRef(zero);
        }
        if (!err && pages) {
            /* the node's first page's parent: its parent node's last page (-1: none) */
            PyObject *up = minus;
            if (p != Py_None) {
                PyObject *pid = field_of(p, s_id);
                if (pid == NULL)
                    err = 1;
                else {
                    PyObject *got = PyDict_GetItemWithError(last_page, pid);
                    Py_DECREF(pid);
                    if (got != NULL)
                        up = got;
                    else if (PyErr_Occurred())
                        err = 1;
                }
            }
            err = err || PyList_Append(parent, up) < 0;
            for (long long q = start; !err && q < start + pages - 1; q++)
                err = append_new(parent, PyLong_FromLongLong(q)) < 0;
        }
        if (!err)
            err = PyList_Append(runs, nobj) < 0 || (v = field_of(x, s_device)) == NULL ||
                  PyList_Append(dev, v != Py_None ? Py_True : Py_False) < 0;
        Py_XDECREF(v);
        v = NULL;
        if (!err) {
            int t = (v = field_of(x, s_stored)) == NULL ? -1 : PyObject_IsTrue(v);
            err = t < 0 || PyList_Append(stor, t ? Py_True : Py_False) < 0;
        }
        Py_XDECREF(v);
        v = NULL;
        if (!err && (v = field_of(x, s_hit_count)) == NULL)
            err = 1;
        if (!err) {
            /* min(hit_count, 2): 2 when 2 < hit_count, else hit_count (Python's min) */
            long long h;
            int above = int_value(v, &h) ? h > 2 : PyObject_RichCompareBool(two, v, Py_LT);
            err = above < 0 || PyList_Append(hits, above ? two : v) < 0;
        }
        if (!err)
            err = PyList_Append(loadreq, lq) < 0 || (hs = field_of(x, s_host)) == NULL || (id = field_of(x, s_id)) == NULL;
        if (!err) {
            pending = PyDict_GetItemWithError(sync_backup, id);      /* (borrowed) */
            if (pending == NULL && PyErr_Occurred())
                err = 1;
            else
                pending = Py_NewRef(pending != NULL ? pending : Py_None);
        }
        if (!err)
            err = (backing = host_write_in_flight(NULL, x)) == NULL ||
                  (sl = slot_lists_via(slots_of, hs, pending, nobj, backing)) == NULL;
        if (!err) {
            PyObject *hv = PyTuple_GET_ITEM(sl, 0), *bv = PyTuple_GET_ITEM(sl, 1);
            PyObject *r1 = _PyList_Extend((PyListObject *)host, hv), *r2 = r1 == NULL ? NULL
                : _PyList_Extend((PyListObject *)backup, bv);
            err = r1 == NULL || r2 == NULL;
            Py_XDECREF(r1);
            Py_XDECREF(r2);
        }
        if (!err) {
            start += pages;
            PyObject *last = PyLong_FromLongLong(start - 1);
            err = last == NULL || PyDict_SetItem(last_page, id, last) < 0;
            Py_XDECREF(last);
        }
        Py_XDECREF(p);
        Py_XDECREF(nobj);
        Py_XDECREF(ld);
        Py_XDECREF(lq);
        Py_XDECREF(v);
        Py_XDECREF(hs);
        Py_XDECREF(id);
        Py_XDECREF(pending);
        Py_XDECREF(backing);
        Py_XDECREF(sl);
        Py_DECREF(x);
    }
    if (!err && PyErr_Occurred())
        err = 1;
    if (!err)
        out = Py_BuildValue("(OOOOOOOOOO)", runs, dev, stor, hits, loadreq, host, backup, parent,
                            loading ? Py_True : Py_False, last_page);
    for (int i = 0; i < 8; i++)
        Py_XDECREF(lists[i]);
    Py_DECREF(it);
    Py_XDECREF(last_page);
    Py_XDECREF(zero);
    Py_XDECREF(two);
    Py_XDECREF(minus);
    return out;
}

/* chain_walk(roots, bases, cp, none): the from-scratch chain map's walk of the tree,
 * (rows, held) (loops.py's py_chain_walk, which defines it: CPReplayMap._rows). Each node's
 * attributes are read, and its rot and depth computed, as the Python does (the number
 * protocol: any ints), in the same order; the stack holds (node, depth, base) tuples. */
static PyObject *chain_walk(PyObject *self, PyObject *const *a, Py_ssize_t nargs) {
    if (!arity("chain_walk", nargs, 4) || ds_names() < 0)
        return NULL;
    PyObject *roots = a[0], *bases = a[1], *cp = a[2], *none = a[3];
    const char *what[] = {"roots", "bases"};
    for (int i = 0; i < 2; i++)
        if (!PyList_CheckExact(a[i]) && !PyTuple_CheckExact(a[i])) {
            PyErr_Format(PyExc_TypeError, "chain_walk: %s must be a list or a tuple, not %.100s", what[i],
                         Py_TYPE(a[i])->tp_name);
            return NULL;
        }
    if (PySequence_Fast_GET_SIZE(roots) != PySequence_Fast_GET_SIZE(bases)) {
        PyErr_SetString(PyExc_TypeError, "chain_walk: roots and bases must be as many");
        return NULL;
    }
    PyObject *rows = PyList_New(0), *held = PySet_New(NULL), *stack = PyList_New(0), *zero = PyLong_FromLong(0);
    PyObject *one_none = NULL, *out = NULL;
    if (rows == NULL || held == NULL || stack == NULL || zero == NULL || (one_none = PyList_New(1)) == NULL)
        goto done;
    PyList_SET_ITEM(one_none, 0, Py_NewRef(none));
    for (Py_ssize_t i = PySequence_Fast_GET_SIZE(roots) - 1; i >= 0; i--) {
        PyObject *entry = PyTuple_Pack(3, PySequence_Fast_GET_ITEM(roots, i), zero, PySequence_Fast_GET_ITEM(bases, i));
        int rc = entry == NULL ? -1 : PyList_Append(stack, entry);
        Py_XDECREF(entry);
        if (rc < 0)
            goto done;
    }
    while (PyList_GET_SIZE(stack) > 0) {
        Py_ssize_t top = PyList_GET_SIZE(stack) - 1;
        PyObject *entry = Py_NewRef(PyList_GET_ITEM(stack, top));
        if (PyList_SetSlice(stack, top, top + 1, NULL) < 0) {
            Py_DECREF(entry);
            goto done;
        }
        PyObject *x = PyTuple_GET_ITEM(entry, 0), *depth = PyTuple_GET_ITEM(entry, 1),
                 *base = PyTuple_GET_ITEM(entry, 2);
        PyObject *pages = NULL, *rot = NULL, *row = NULL, *n = NULL, *below = NULL, *children = NULL;
        int ok = 0;
        PyObject *dev = PyObject_GetAttr(x, s_ds_device);
        if (dev == NULL)
            goto node_done;
        if (dev != Py_None) {
            if ((pages = PySequence_List(dev)) == NULL)
                goto node_done;
            for (Py_ssize_t k = 0; k < PyList_GET_SIZE(pages); k++)
                if (PySet_Add(held, PyList_GET_ITEM(pages, k)) < 0)
                    goto node_done;
        } else {
            if ((n = PyObject_GetAttr(x, s_ds_n)) == NULL || (pages = PyNumber_Multiply(one_none, n)) == NULL)
                goto node_done;
            Py_CLEAR(n);
        }
        if (base == Py_None) {
            rot = Py_NewRef(none);
        } else {
            PyObject *sum = PyNumber_Add(base, depth);
            rot = sum == NULL ? NULL : PyNumber_Remainder(sum, cp);
            Py_XDECREF(sum);
            if (rot == NULL)
                goto node_done;
        }
        if ((row = PyTuple_Pack(3, x, rot, pages)) == NULL || PyList_Append(rows, row) < 0)
            goto node_done;
        if ((children = PyObject_GetAttr(x, s_ds_children)) == NULL)
            goto node_done;
        if (!PyDict_CheckExact(children)) {
            PyErr_Format(PyExc_TypeError, "chain_walk: a node's children must be a dict, not %.100s",
                         Py_TYPE(children)->tp_name);
            goto node_done;
        }
        if ((n = PyObject_GetAttr(x, s_ds_n)) == NULL || (below = PyNumber_Add(depth, n)) == NULL)
            goto node_done;
        {
            /* (children.values() reversed: pushed last to first, so the first is popped next) */
            PyObject *vals = PyDict_Values(children);
            if (vals == NULL)
                goto node_done;
            int rc = 0;
            for (Py_ssize_t k = PyList_GET_SIZE(vals) - 1; rc == 0 && k >= 0; k--) {
                PyObject *e = PyTuple_Pack(3, PyList_GET_ITEM(vals, k), below, base);
                rc = e == NULL ? -1 : PyList_Append(stack, e);
                Py_XDECREF(e);
            }
            Py_DECREF(vals);
            if (rc < 0)
                goto node_done;
        }
        ok = 1;
    node_done:
        Py_XDECREF(dev);
        Py_XDECREF(pages);
        Py_XDECREF(rot);
        Py_XDECREF(row);
        Py_XDECREF(n);
        Py_XDECREF(below);
        Py_XDECREF(children);
        Py_DECREF(entry);
        if (!ok)
            goto done;
    }
    out = PyTuple_Pack(2, rows, held);
done:
    Py_XDECREF(rows);
    Py_XDECREF(held);
    Py_XDECREF(stack);
    Py_XDECREF(zero);
    Py_XDECREF(one_none);
    return out;
}

/* tree_nodes(root): the nodes under root as a list, in radix.Tree.nodes()'s order (loops.py's
 * py_tree_nodes, which defines it: the from-scratch HostTier map's walk, whose generator's
 * frames were ~4k instructions a node). */
static PyObject *tree_nodes(PyObject *self, PyObject *root) {
    if (ds_names() < 0)
        return NULL;
    PyObject *out = PyList_New(0), *stack = PyList_New(0);
    PyObject *x = Py_NewRef(root);
    while (out != NULL && stack != NULL) {
        PyObject *children = PyObject_GetAttr(x, s_ds_children);
        Py_DECREF(x);
        x = NULL;
        if (children == NULL)
            break;
        if (!PyDict_CheckExact(children)) {
            PyErr_Format(PyExc_TypeError, "tree_nodes: a node's children must be a dict, not %.100s",
                         Py_TYPE(children)->tp_name);
            Py_DECREF(children);
            break;
        }
        PyObject *vals = PyDict_Values(children);
        Py_DECREF(children);
        if (vals == NULL)
            break;
        Py_ssize_t end = PyList_GET_SIZE(stack);
        int rc = PyList_SetSlice(stack, end, end, vals);
        Py_DECREF(vals);
        if (rc < 0)
            break;
        Py_ssize_t top = PyList_GET_SIZE(stack) - 1;
        if (top < 0) {
            Py_DECREF(stack);
            return out;
        }
        x = Py_NewRef(PyList_GET_ITEM(stack, top));
        if (PyList_SetSlice(stack, top, top + 1, NULL) < 0 || PyList_Append(out, x) < 0)
            break;
    }
    Py_XDECREF(x);
    Py_XDECREF(out);
    Py_XDECREF(stack);
    return NULL;
}

/* pending_allocs(log, allocated, held, cp, none, rows): loops.py's py_pending_allocs, which
 * defines it (CPReplayMap._rows' pass over the allocation log: in sample mode the log holds
 * every allocation since the last check, ~185 on the monitors bench's replay, ~140k
 * instructions a check in Python). The same comparisons, membership tests and arithmetic
 * through the object protocol, in the same order. */
static PyObject *pending_allocs(PyObject *self, PyObject *const *a, Py_ssize_t nargs) {
    if (!arity("pending_allocs", nargs, 6))
        return NULL;
    PyObject *log = a[0], *allocated = a[1], *held = a[2], *cp = a[3], *none = a[4], *rows = a[5];
    if (check_type(log, &PyDict_Type, "pending_allocs", "log") || check_type(held, &PySet_Type, "pending_allocs", "held")
        || check_type(rows, &PyList_Type, "pending_allocs", "rows"))
        return NULL;
    PyObject *aids = PyDict_Keys(log), *tag = PyUnicode_InternFromString("alloc");
    /* (sorted(log, reverse=True) as list.sort does it: reversed, sorted, reversed again, the
     * same comparisons in the same order) */
    if (aids == NULL || tag == NULL || PyList_Reverse(aids) < 0 || PyList_Sort(aids) < 0 || PyList_Reverse(aids) < 0)
        goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(aids); i++) {
        PyObject *aid = PyList_GET_ITEM(aids, i);
        PyObject *entry = PyObject_GetItem(log, aid), *pending = NULL, *pages = NULL;
        int ok = 0;
        if (entry == NULL)
            goto entry_done;
        if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 3) {
            PyObject *r = PyObject_Repr(aid);
            if (r != NULL)
                PyErr_Format(PyExc_TypeError,
                             "pending_allocs: allocation %U's entry must be a tuple (base, start, pages)", r);
            Py_XDECREF(r);
            goto entry_done;
        }
        if ((pages = PySequence_List(PyTuple_GET_ITEM(entry, 2))) == NULL ||
            (pending = PyList_New(PyList_GET_SIZE(pages))) == NULL)
            goto entry_done;
        int every_none = 1;
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(pages); k++) {
            PyObject *p = PyList_GET_ITEM(pages, k);
            int in = PySequence_Contains(allocated, p);
            int kept = in < 0 ? -1 : in ? PySet_Contains(held, p) : 1;
            if (kept < 0)
                goto entry_done;
            PyList_SET_ITEM(pending, k, Py_NewRef(in && !kept ? p : none));
        }
        for (Py_ssize_t k = 0; every_none && k < PyList_GET_SIZE(pending); k++) {
            int eq = PyObject_RichCompareBool(PyList_GET_ITEM(pending, k), none, Py_EQ);
            if (eq < 0)
                goto entry_done;
            every_none = eq;
        }
        if (every_none) {
            ok = PyObject_DelItem(log, aid) == 0;
            goto entry_done;
        }
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(pending); k++) {
            PyObject *p = PyList_GET_ITEM(pending, k);
            int ne = PyObject_RichCompareBool(p, none, Py_NE);
            if (ne < 0 || (ne && PySet_Add(held, p) < 0))
                goto entry_done;
        }
        {
            PyObject *key = PyTuple_Pack(2, tag, aid), *sum = PyNumber_Add(PyTuple_GET_ITEM(entry, 0),
                                                                               PyTuple_GET_ITEM(entry, 1));
            PyObject *rot = sum == NULL ? NULL : PyNumber_Remainder(sum, cp);
            PyObject *row = key == NULL || rot == NULL ? NULL : PyTuple_Pack(3, key, rot, pending);
            ok = row != NULL && PyList_Append(rows, row) == 0;
            Py_XDECREF(key);
            Py_XDECREF(sum);
            Py_XDECREF(rot);
            Py_XDECREF(row);
        }
    entry_done:
        Py_XDECREF(entry);
        Py_XDECREF(pages);
        Py_XDECREF(pending);
        if (!ok)
            goto fail;
    }
    Py_DECREF(aids);
    Py_DECREF(tag);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(aids);
    Py_XDECREF(tag);
    return NULL;
}

static PyObject *abi(PyObject *self, PyObject *unused) {
    return PyLong_FromLong(ABI_VERSION);
}

static PyMethodDef methods[] = {
    {"fill", (PyCFunction)(void (*)(void))fill, METH_FASTCALL, "d[p] = v for p in pos, delta-recorded"},
    {"spread", (PyCFunction)(void (*)(void))spread, METH_FASTCALL, "{page: its node's value} over runs, then spare"},
    {"chain_walk", (PyCFunction)(void (*)(void))chain_walk, METH_FASTCALL,
     "the from-scratch chain map's rows of the tree's nodes, and the device pages they hold"},
    {"byte_names", (PyCFunction)(void (*)(void))byte_names, METH_FASTCALL, "tuple(table[b] for b in raw)"},
    {"tree_nodes", tree_nodes, METH_O, "the nodes under root, in radix.Tree.nodes()'s order"},
    {"pending_allocs", (PyCFunction)(void (*)(void))pending_allocs, METH_FASTCALL,
     "the chain map's pending allocations, newest first, the log's settled ones dropped"},
    {"chain_rows", (PyCFunction)(void (*)(void))chain_rows, METH_FASTCALL,
     "the from-scratch chain map's rot, len and page over its chains, and the rows it built"},
    {"tree_pages", (PyCFunction)(void (*)(void))tree_pages, METH_FASTCALL,
     "the from-scratch HostTier map's per-node and per-page lists over the tree's nodes"},
    {"one_owner_breach", (PyCFunction)(void (*)(void))one_owner_breach, METH_FASTCALL,
     "SlotInOneOwner's first breach over every spec slot, from the reference values"},
    {"parent_breach", (PyCFunction)(void (*)(void))parent_breach, METH_FASTCALL,
     "WriteThroughPrefix's first page with a host copy under a parent page without one"},
    {"enumerated", (PyCFunction)(void (*)(void))enumerated, METH_FASTCALL, "dict(enumerate(values)) of a list, made at its size"},
    {"move", (PyCFunction)(void (*)(void))move, METH_FASTCALL, "d[q] = d[src] for q, src in origin, delta-recorded"},
    {"spare", (PyCFunction)(void (*)(void))spare, METH_FASTCALL, "d[q] = v for q in range(lo, hi), delta-recorded"},
    {"release", (PyCFunction)(void (*)(void))release, METH_FASTCALL, "release the slot references of pages"},
    {"write_slots", (PyCFunction)(void (*)(void))write_slots, METH_FASTCALL, "a node's per-page slot values"},
    {"diff_bytes", (PyCFunction)(void (*)(void))diff_bytes, METH_FASTCALL, "changed bytes, copied into seen"},
    {"count_pages", (PyCFunction)(void (*)(void))count_pages, METH_FASTCALL, "counts[p] += k for pages"},
    {"slot_owner_breach", (PyCFunction)(void (*)(void))slot_owner_breach, METH_FASTCALL,
     "SlotInOneOwner over slots: None or the first (h, st, t, f) that breaks it"},
    {"overwrite", (PyCFunction)(void (*)(void))overwrite, METH_FASTCALL, "d[i] = values[i] for each index i"},
    {"padded_row", (PyCFunction)(void (*)(void))padded_row, METH_FASTCALL, "fcn(pad's copy with pages over it, kk)"},
    {"ints_within", (PyCFunction)(void (*)(void))ints_within, METH_FASTCALL,
     "every item an exact int in 0..n-1 or equal to none"},
    {"commit_rows", (PyCFunction)(void (*)(void))commit_rows, METH_FASTCALL,
     "the changed chains' rows, holder counts and sequence variables written"},
    {"device_sync", (PyCFunction)(void (*)(void))device_sync, METH_FASTCALL,
     "the device-page map's sync on its common path: (delta, dirty), or None where it does not apply"},
    {"held_once_or_free", (PyCFunction)(void (*)(void))held_once_or_free, METH_FASTCALL,
     "NoDoubleAllocation over dirty pages: each held at most once, free exactly when unheld"},
    {"chains_typed", (PyCFunction)(void (*)(void))chains_typed, METH_FASTCALL,
     "TypeOK over the dirty chains' rows as the map built them: False at the first that breaks it"},
    {"chains_padded", (PyCFunction)(void (*)(void))chains_padded, METH_FASTCALL,
     "no position past a dirty chain's length used (its built rows, else beyond): False at the first"},
    {"steps_table", (PyCFunction)(void (*)(void))steps_table, METH_FASTCALL,
     "a callable (action, fields): table.get(action), or fallback(action, fields) where that is None"},
    {"quiet_probe", (PyCFunction)(void (*)(void))quiet_probe, METH_FASTCALL,
     "a callable (): each of before, getattr(holder, name), each of after false"},
    {"slot_changes", (PyCFunction)(void (*)(void))slot_changes, METH_FASTCALL,
     "changed slots' names and dirty spec slots; the set of nodes holding them"},
    {"variables_of", (PyCFunction)(void (*)(void))variables_of, METH_FASTCALL,
     "the set of the variables a (flat) delta wrote, delta[0::3]"},
    {"first_where", (PyCFunction)(void (*)(void))first_where, METH_FASTCALL,
     "the first position whose value's truth is the one asked, or None"},
    {"first_not_in_state", (PyCFunction)(void (*)(void))first_not_in_state, METH_FASTCALL,
     "the first spec slot not in the given state (or no slot), or None"},
    {"nodes_at", (PyCFunction)(void (*)(void))nodes_at, METH_FASTCALL, "the nodes at the positions below L"},
    {"prefix_breach", (PyCFunction)(void (*)(void))prefix_breach, METH_FASTCALL,
     "WriteThroughPrefix along one node's pages: None or the first (p, parent) that breaks it"},
    {"vacate", (PyCFunction)(void (*)(void))vacate, METH_FASTCALL,
     "the holes' positions filled from the end: (origin, the new L)"},
    {"renumber", (PyCFunction)(void (*)(void))renumber, METH_FASTCALL,
     "the moved pages' keys and node positions at their new positions"},
    {"remove_pages", (PyCFunction)(void (*)(void))remove_pages, METH_FASTCALL,
     "pages leaving the prefix, over every column: vacate, release, move, spare, renumber; the new L"},
    {"walk_journaled", (PyCFunction)(void (*)(void))walk_journaled, METH_FASTCALL,
     "the journaled nodes, parents first: enter(x) the ones in the tree, leave(x) the detached"},
    {"remap_node", (PyCFunction)(void (*)(void))remap_node, METH_FASTCALL,
     "the incremental HostTier map's re-mapping of one node"},
    {"remap_journaled", (PyCFunction)(void (*)(void))remap_journaled, METH_FASTCALL,
     "walk_journaled with each node in the tree re-mapped by remap_node"},
    {"shifted", shifted, METH_O, "[h + 1 for h in slots]"},
    {"host_write_in_flight", (PyCFunction)host_write_in_flight, METH_O,
     "host_write_in_flight(v): bool(v.inflight) and any(getattr(op, 'writes_host', False) for op in v.inflight)"},
    {"node_slots", (PyCFunction)(void (*)(void))node_slots_call, METH_FASTCALL,
     "(host[p], backupOp[p]) of a node's pages, from its host slots or a blocking copy's"},
    {"request_step", (PyCFunction)(void (*)(void))request_step, METH_FASTCALL,
     "the request rows of the common step written, or None (the full rebuild)"},
    {"host_sync", (PyCFunction)(void (*)(void))host_sync, METH_FASTCALL,
     "IncrementalHostTierMap.sync over (the map, what it never rebinds): (delta, dirty)"},
    {"host_sync_step", (PyCFunction)(void (*)(void))host_sync_step, METH_FASTCALL,
     "IncrementalHostTierMap.sync as a callable over (a weak reference to the map, host_sync's ctx, the class's sync)"},
    {"guard_step", (PyCFunction)(void (*)(void))guard_step, METH_FASTCALL,
     "host_tier_guards.check as a callable (action, fields) over (a weak reference to the map, its tables, check)"},
    {"effect_step", (PyCFunction)(void (*)(void))effect_step, METH_FASTCALL,
     "host_tier_guards.effect as a callable (action, fields) over (a weak reference to the map, its tables, effect)"},
    {"watch_probe", (PyCFunction)(void (*)(void))watch_probe, METH_FASTCALL,
     "WorkerWatch.check's common case over (cache, watch, KeyAudit, the watch's check)"},
    {"configure_readers", (PyCFunction)(void (*)(void))configure_readers, METH_FASTCALL,
     "(Fcn, the Python fast_ap, what no_ap returns)"},
    {"fast_ap", fast_ap, METH_O, "f.d.__getitem__ for a Fcn, a SeqReader for a tuple, else the Python fast_ap(f)"},
    {"no_ap", no_ap, METH_O, "the reader of nothing"},
    {"binder", (PyCFunction)(void (*)(void))binder, METH_FASTCALL,
     "HostTierMap.bind over (phase, loads, ending, req_node, sync_backup, table, compound_step)"},
    {"request_binder", (PyCFunction)(void (*)(void))request_binder, METH_FASTCALL,
     "IncrementalHostTierMap.bind's request step over (binder, phase, ending, req_node, qslot, qtab, "
     "phase_actions, req_actions, backup_actions)"},
    {"load_bind", (PyCFunction)(void (*)(void))load_bind, METH_FASTCALL,
     "IncrementalHostTierMap.bind over (a weak reference to the map, the load events, the class's bind)"},
    {"tracked_class", (PyCFunction)(void (*)(void))tracked_class, METH_FASTCALL,
     "a subclass of a node class whose writes of a journaled field add the object to each journal"},
    {"abi", abi, METH_NOARGS, "the module's ABI version"},
    {"first_slot_not_in", (PyCFunction)(void (*)(void))first_slot_not_in, METH_FASTCALL,
     "first_not_in_state over spec slots, or runtime slots made spec slots"},
    {"holders_outside", (PyCFunction)(void (*)(void))holders_outside, METH_FASTCALL,
     "(h, y) for the slots whose holder is a node not named, each run of one holder's slots judged once"},
    {"unmap_subtree", (PyCFunction)(void (*)(void))unmap_subtree_call, METH_FASTCALL,
     "a detached node and the nodes below it unmapped by the incremental HostTier map"},
    {"tree_prefix_breach", (PyCFunction)(void (*)(void))tree_prefix_breach, METH_FASTCALL,
     "WriteThroughPrefix in tree form at the nodes of the positions below L: None or the first (page, parent)"},
    {"extend_positions", (PyCFunction)(void (*)(void))extend_positions, METH_FASTCALL,
     "a node's new pages given the positions from L: keys, pos and dirty extended; the new L"},
    {"first_page_where", (PyCFunction)(void (*)(void))first_page_where, METH_FASTCALL,
     "first_where over a node's pages, read directly for an exact dict and ints"},
    {"trigger_probe", (PyCFunction)(void (*)(void))trigger_probe, METH_FASTCALL,
     "HostTierMap.trigger over one cache, a callable (action, fields) -> bool"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_hicache_incmap", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__hicache_incmap(void) {
    if (PyType_Ready(&SeqReaderType) < 0 || PyType_Ready(&BinderType) < 0 || PyType_Ready(&RequestBinderType) < 0 ||
        PyType_Ready(&StepsTableType) < 0 || PyType_Ready(&QuietProbeType) < 0 || PyType_Ready(&MapStepType) < 0 ||
        PyType_Ready(&WatchProbeType) < 0 || PyType_Ready(&TriggerProbeType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    /* the binder's bits, for host_tier._bind_table (one definition: these) */
    static const struct { const char *name; long v; } bits[] = {
        {"BIND_LAYER", BIND_LAYER}, {"BIND_LOCK", BIND_LOCK}, {"BIND_END", BIND_END}, {"BIND_PHASE", BIND_PHASE},
        {"BIND_MOVES", BIND_MOVES}, {"BIND_MATCH", BIND_MATCH}, {"BIND_LOAD_START", BIND_LOAD_START},
        {"BIND_LOAD_END", BIND_LOAD_END}, {"BIND_BACKUP_START", BIND_BACKUP_START},
        {"BIND_BACKUP_FINISH", BIND_BACKUP_FINISH}};
    for (size_t i = 0; i < sizeof bits / sizeof bits[0]; i++)
        if (PyModule_AddIntConstant(m, bits[i].name, bits[i].v) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    return m;
}
