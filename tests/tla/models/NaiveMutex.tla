---------------------------- MODULE NaiveMutex ----------------------------
(* Check-then-set: a process tests the other's flag, then raises its own.
   Both can pass the test before either raises its flag. *)
EXTENDS Naturals

VARIABLES
    pc,     \* pc[i] \in {"idle", "set", "cs"}
    flag    \* flag[i]: process i has announced it is entering

vars == <<pc, flag>>
P == {0, 1}

Init == pc = [i \in P |-> "idle"] /\ flag = [i \in P |-> FALSE]

ProcCheck(i) == /\ pc[i] = "idle"
                /\ ~flag[1 - i]
                /\ pc' = [pc EXCEPT ![i] = "set"]
                /\ UNCHANGED flag

ProcSet(i) == /\ pc[i] = "set"
              /\ flag' = [flag EXCEPT ![i] = TRUE]
              /\ pc' = [pc EXCEPT ![i] = "cs"]

ProcExit(i) == /\ pc[i] = "cs"
               /\ flag' = [flag EXCEPT ![i] = FALSE]
               /\ pc' = [pc EXCEPT ![i] = "idle"]

Next == \E i \in P : ProcCheck(i) \/ ProcSet(i) \/ ProcExit(i)

MutualExclusion == ~(pc[0] = "cs" /\ pc[1] = "cs")
=============================================================================
