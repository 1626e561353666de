---------------------------- MODULE Peterson ----------------------------
(* Peterson's mutual exclusion for two processes, one atomic step per line. *)
EXTENDS Naturals

VARIABLES
    pc,     \* pc[i] \in {"idle", "flag", "turn", "wait", "cs"}
    flag,   \* flag[i]: process i wants to enter
    turn    \* whose turn it is to wait

vars == <<pc, flag, turn>>
P == {0, 1}
Other(i) == 1 - i

Init == /\ pc = [i \in P |-> "idle"]
        /\ flag = [i \in P |-> FALSE]
        /\ turn \in P

ProcFlag(i) == /\ pc[i] = "idle"
               /\ flag' = [flag EXCEPT ![i] = TRUE]
               /\ pc' = [pc EXCEPT ![i] = "turn"]
               /\ UNCHANGED turn

ProcTurn(i) == /\ pc[i] = "turn"
               /\ turn' = Other(i)
               /\ pc' = [pc EXCEPT ![i] = "wait"]
               /\ UNCHANGED flag

ProcEnter(i) == /\ pc[i] = "wait"
                /\ (~flag[Other(i)] \/ turn = i)
                /\ pc' = [pc EXCEPT ![i] = "cs"]
                /\ UNCHANGED <<flag, turn>>

ProcExit(i) == /\ pc[i] = "cs"
               /\ flag' = [flag EXCEPT ![i] = FALSE]
               /\ pc' = [pc EXCEPT ![i] = "idle"]
               /\ UNCHANGED turn

Next == \E i \in P : \/ ProcFlag(i) \/ ProcTurn(i)
                     \/ ProcEnter(i) \/ ProcExit(i)

Spec == Init /\ [][Next]_vars

MutualExclusion == ~(pc[0] = "cs" /\ pc[1] = "cs")
=============================================================================
