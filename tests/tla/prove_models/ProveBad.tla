------------------------------ MODULE ProveBad -------------------------------
(* Obligations that do NOT hold; each must come back with a counterexample.  *)
EXTENDS Naturals, Integers

CONSTANT S
ASSUME S \in Nat /\ S >= 1

(* Wrong owner: forgets to reduce modulo the stripe before dividing.        *)
Owner(N, ps, loc) == loc \div ps
Local(N, ps, loc) == (loc \div (N * ps)) * ps + (loc % ps)
LocOf(N, ps, r, a) == (a \div ps) * (N * ps) + r * ps + (a % ps)

THEOREM WrongOwnerInRange ==
    \A N \in Nat \ {0}, ps \in Nat \ {0}, loc \in Nat : Owner(N, ps, loc) < N

(* The divisor may be zero: TLA+ leaves the value unspecified.               *)
THEOREM DivisorMayBeZero == \A a, n \in Nat : (a \div n) * n <= a

THEOREM SlotWrong == \A l \in Nat : (l + 2) % 2 # l % 2

VARIABLES done
TypeOK == done \in [0..(S - 1) -> Nat]
Inv == TypeOK /\ \A s \in 0..(S - 1) : done[s] <= done[0]
Next == \E s \in 1..(S - 1) : done' = [done EXCEPT ![s] = @ + 1]

THEOREM NotInductive == Inv /\ Next => Inv'
=============================================================================
