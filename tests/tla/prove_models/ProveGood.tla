------------------------------ MODULE ProveGood ------------------------------
(* Obligations that hold for all sizes; `hicache prove` must discharge each.  *)
EXTENDS Naturals, Integers

CONSTANT S                 \* pipeline stages
ASSUME S \in Nat /\ S >= 1

(* Token-level context-parallel placement: N ranks, page size ps.           *)
Owner(N, ps, loc) == (loc % (N * ps)) \div ps
Local(N, ps, loc) == (loc \div (N * ps)) * ps + (loc % ps)
LocOf(N, ps, r, a) == (a \div ps) * (N * ps) + r * ps + (a % ps)

THEOREM PlacementBijective ==
    \A N \in Nat \ {0}, ps \in Nat \ {0}, loc \in Nat :
        LocOf(N, ps, Owner(N, ps, loc), Local(N, ps, loc)) = loc

THEOREM OwnerInRange ==
    \A N \in Nat \ {0}, ps \in Nat \ {0}, loc \in Nat : Owner(N, ps, loc) \in 0..(N - 1)

(* A chain of k pages starting at rotation b puts on rank r the pages at    *)
(* positions P with (b + P) % N = r: floor(k/N) or ceil(k/N) of them.       *)
PagesOn(N, k, b, r) ==
    LET first == (r - b) % N
    IN  k \div N + (IF first < k % N THEN 1 ELSE 0)

THEOREM ChainBalanced ==
    \A N \in Nat \ {0}, k, b, r \in Nat :
        (b < N /\ r < N) => PagesOn(N, k, b, r) \in {k \div N, (k + N - 1) \div N}

(* Two gather buffers: the next layer never lands in the slot being read.   *)
Slot(l) == l % 2
THEOREM SlotAlternates == \A l \in Nat : Slot(l + 1) # Slot(l)

(* Packed host layout: per sequence nt target rows then nd draft rows.       *)
Offset(s, row, nt, nd) == s * (nt + nd) + row
THEOREM PackedOffsetsDisjoint ==
    \A s1, s2 \in Nat, r1, r2 \in Nat, nt \in Nat \ {0}, nd \in Nat :
        (r1 < nt + nd /\ r2 < nt + nd /\ <<s1, r1>> # <<s2, r2>>) =>
            Offset(s1, r1, nt, nd) # Offset(s2, r2, nt, nd)

THEOREM CaseAndLet ==
    \A x \in Int :
        LET a == IF x >= 0 THEN x ELSE -x
        IN  CASE x > 0 -> a = x [] x < 0 -> a = -x [] OTHER -> a = 0

(* An inductive invariant over a function-valued state variable.            *)
VARIABLES done, cur
TypeOK == done \in [0..(S - 1) -> Nat] /\ cur \in 0..(S - 1)
Inv == TypeOK /\ \A s \in 0..(S - 1) : done[s] <= done[0]
Step == /\ done' = [done EXCEPT ![0] = @ + 1]
        /\ cur' = (cur + 1) % S
Trail(s) == /\ s \in 1..(S - 1)
            /\ done[s] < done[0]
            /\ done' = [done EXCEPT ![s] = @ + 1]
            /\ UNCHANGED cur
Next == Step \/ \E s \in 1..(S - 1) : Trail(s)

THEOREM InvInductive == Inv /\ Next => Inv'
=============================================================================
