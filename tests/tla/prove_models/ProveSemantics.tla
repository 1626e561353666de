---------------------------- MODULE ProveSemantics ----------------------------
(* Each theorem says by its suffix what `hicache prove` must answer:         *)
(*   _ok   proved                                                              *)
(*   _cex  a counterexample to the goal                                        *)
(*   _ill  not well-defined: a divisor, a function argument or a CASE that     *)
(*         TLA+ leaves unspecified is reachable.                               *)
EXTENDS Integers
CONSTANT S
ASSUME S \in Nat /\ S >= 1
VARIABLES done, x, y
TypeOK == done \in [0..(S - 1) -> Nat] /\ x \in Int /\ y \in Int
Inv == TypeOK /\ \A s \in 0..(S - 1) : done[s] <= done[0]
Trail(s) == /\ s \in 1..(S - 1)
            /\ done[s] <= done[0]
            /\ done' = [done EXCEPT ![s] = @ + 1]
Same(e) == e' = e

\* integer division: floor semantics, positive divisors only
THEOREM FloorDiv_ok == \A a \in Int, d \in Nat \ {0} : 0 <= a % d /\ a % d < d /\ a = (a \div d) * d + (a % d)
THEOREM NegConst_ok == (-7) \div 2 = -4 /\ (-7) % 2 = 1
THEOREM TruncDiv_cex == (-7) \div 2 = -3
THEOREM DivExact_cex == \A a \in Int, d \in Nat \ {0} : (a \div d) * d = a
THEOREM Multiple_ok == \A a, b \in Nat \ {0} : (a * b) % a = 0 /\ ((a * b + 3) \div b) >= a
THEOREM ProductSign_ill == \A n, ps \in Int \ {0} : n * ps > 0 => 7 \div (n * ps) >= 0
THEOREM ZeroFactor_ill == \A a, b, c \in Nat : (a % (b * c)) % b = a % b
THEOREM Square_cex == \A v \in Int : v * v > 0

\* quantifiers, sets, booleans
THEOREM Unbounded_ok == \A n \in Nat : \E m \in Nat : m > n
THEOREM NoWitness_cex == \E m \in 0..3 : m > 5
THEOREM Filter_ok == {v \in 0..5 : v % 2 = 0} = {0, 2, 4}
THEOREM Filter_cex == {v \in 0..5 : v % 2 = 0} = {0, 2}
THEOREM FilterDiv_ok == \A n \in Nat \ {0} : {v \in 0..10 : v % n = 0} \subseteq Nat
THEOREM Grid_cex == \A a \in 0..3 : \A b \in 0..3 : a * b < 9
THEOREM Bool_cex == \A b \in BOOLEAN : b
THEOREM Excluded_ok == \A b \in BOOLEAN : b \/ ~b
THEOREM Vacuous_ok == \A v \in Nat : v < 0 => v = 5

THEOREM BoolEnum_cex == \A b \in BOOLEAN : b \in {TRUE}
THEOREM TupleSet_ok == \A p \in {<<1, 2>>, <<2, 1>>} : p # <<1, 1>>
THEOREM TupleSet_cex == \A p \in {<<1, 2>>, <<2, 1>>} : p = <<1, 2>>

\* CASE: a missing OTHER and overlapping arms are obligations too
THEOREM CaseGap_ill == \A v \in Int : (CASE v > 0 -> 1 [] v < 0 -> 2) > 0
THEOREM CaseCover_ok == \A v \in Int : (CASE v > 0 -> 1 [] v <= 0 -> 2) > 0
THEOREM CaseClash_ill == \A v \in Int : (CASE v >= 0 -> 1 [] v <= 0 -> 2) > 0
THEOREM CaseAgree_ok == \A v \in Int : (CASE v >= 0 -> v [] v <= 0 -> -v) >= 0

\* state variables, functions, primes
THEOREM TrailBreaksInv_cex == Inv /\ (\E s \in 1..(S - 1) : Trail(s)) => Inv'
THEOREM DomainChange_cex == Inv /\ done' = [s \in 0..S |-> 0] => Inv'
THEOREM NoTypeNoDomain_cex == done' = [done EXCEPT ![0] = 1] => DOMAIN done' = 0..(S - 1)
THEOREM NoTypeNoArg_ill == done'[0] = 1 => done'[0] > 0
THEOREM OutsideDomain_ill == TypeOK => \A i \in Nat : done[i] >= 0
THEOREM Except_ok == TypeOK /\ done' = [done EXCEPT ![0] = 3] => done'[0] = 3 /\ DOMAIN done' = 0..(S - 1)
THEOREM Shift_ok == Inv /\ done' = [s \in 0..(S - 1) |-> done[s] + 1] => Inv'
THEOREM Halve_ok == Inv /\ done' = [s \in 0..(S - 1) |-> done[s] \div 2] => \A s \in 0..(S - 1) : done'[s] <= done[s]
THEOREM LetPrime_cex == LET a == x IN a' = a
THEOREM ArgPrime_cex == Same(x)
THEOREM LetPrimeDiff_ok == x' = x + 1 /\ y' = y => LET d == x - y IN d' = d + 1
THEOREM ArgPrime_ok == x' = x + 1 => Same(y) \/ y' # y
=============================================================================
