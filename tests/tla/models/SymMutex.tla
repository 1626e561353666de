---------------------------- MODULE SymMutex ----------------------------
(* Processes compete for one lock; processes are interchangeable, so the
   model may be checked under symmetry. *)
EXTENDS TLC

CONSTANTS Procs, NoOne

VARIABLES
    st,     \* st[p] \in {"idle", "wait", "cs"}
    lock    \* the lock holder, NoOne when free

vars == <<st, lock>>

TypeOK == st \in [Procs -> {"idle", "wait", "cs"}] /\ lock \in Procs \cup {NoOne}

Init == st = [p \in Procs |-> "idle"] /\ lock = NoOne

ProcRequest(p) == /\ st[p] = "idle"
                  /\ st' = [st EXCEPT ![p] = "wait"]
                  /\ UNCHANGED lock

ProcAcquire(p) == /\ st[p] = "wait"
                  /\ lock = NoOne
                  /\ lock' = p
                  /\ st' = [st EXCEPT ![p] = "cs"]

ProcRelease(p) == /\ st[p] = "cs"
                  /\ lock' = NoOne
                  /\ st' = [st EXCEPT ![p] = "idle"]

Next == \E p \in Procs : ProcRequest(p) \/ ProcAcquire(p) \/ ProcRelease(p)

Spec == Init /\ [][Next]_vars

MutualExclusion == \A p, q \in Procs : (st[p] = "cs" /\ st[q] = "cs") => p = q

Perms == Permutations(Procs)
=============================================================================
