------------------------------ MODULE ProveInductive ------------------------------
(* A PPSync-like pipeline (nested functions, IF over functions, UNCHANGED,  *)
(* \E over two bounds): an inductive invariant proved for all sizes and   *)
(* for the 8-stage model of ProveInductive.cfg; a false step property.      *)
EXTENDS Integers
CONSTANTS NStages, NRanks, MaxT
ASSUME NStages \in Nat /\ NStages >= 1 /\ NRanks \in Nat /\ NRanks >= 1 /\ MaxT \in Nat
Stages == 0..(NStages - 1)
Ranks == 0..(NRanks - 1)
None == -1
VARIABLES done, applied, pending, chan
vars == <<done, applied, pending, chan>>
TypeOK ==
    /\ done \in [Stages -> [Ranks -> 0..MaxT]]
    /\ applied \in [Stages -> 0..MaxT]
    /\ pending \in [Stages -> 0..MaxT \cup {None}]
    /\ chan \in [Stages -> 0..MaxT \cup {None}]
MinDone(s) == done[s][0]
Complete(s, r) ==
    /\ done[s][r] < MaxT
    /\ done' = [done EXCEPT ![s][r] = @ + 1]
    /\ UNCHANGED <<applied, pending, chan>>
Agree ==
    /\ pending[0] = None
    /\ \A r \in Ranks : done[0][r] >= done[0][0]
    /\ pending' = [pending EXCEPT ![0] = done[0][0]]
    /\ chan' = IF NStages > 1 THEN [chan EXCEPT ![1] = done[0][0]] ELSE chan
    /\ UNCHANGED <<done, applied>>
Forward(s) ==
    /\ s >= 1
    /\ pending[s] = None
    /\ chan[s] # None
    /\ pending' = [pending EXCEPT ![s] = chan[s]]
    /\ chan' = [chan EXCEPT ![s] = None]
    /\ UNCHANGED <<done, applied>>
Apply(s) ==
    /\ pending[s] # None
    /\ \A r \in Ranks : done[s][r] >= pending[s]
    /\ applied' = [applied EXCEPT ![s] = IF pending[s] > applied[s] THEN pending[s] ELSE applied[s]]
    /\ pending' = [pending EXCEPT ![s] = None]
    /\ UNCHANGED <<done, chan>>
Next == \/ \E s \in Stages, r \in Ranks : Complete(s, r)
        \/ Agree
        \/ \E s \in Stages : Forward(s) \/ Apply(s)
AppliedDone == \A s \in Stages : \A r \in Ranks : applied[s] <= done[s][r]
PendingDone == \A s \in Stages : pending[s] # None => \A r \in Ranks : pending[s] <= done[s][r] \/ s > 0
IndInv == TypeOK /\ AppliedDone /\ PendingDone
THEOREM AppliedIsDone == IndInv /\ Next => IndInv'
THEOREM ApplyChangesApplied == IndInv /\ Next => (\A s \in Stages : applied'[s] = applied[s])
=============================================================================
