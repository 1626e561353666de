---------------------------- MODULE Euclid ----------------------------
(* Euclid's subtraction algorithm from (Max, y), y \in 1..Max; it stops at x = y. *)
EXTENDS Naturals

CONSTANT Max

VARIABLES x, y

RECURSIVE Gcd(_, _)
Gcd(a, b) == IF a = b THEN a ELSE IF a > b THEN Gcd(a - b, b) ELSE Gcd(a, b - a)

Divides(d, n) == n % d = 0
GcdBySets(a, b) == CHOOSE d \in 1..a : Divides(d, a) /\ Divides(d, b)
                                       /\ \A e \in 1..a : (Divides(e, a) /\ Divides(e, b)) => e <= d

VARIABLE g0   \* the gcd of the initial pair, a ghost

Init == x = Max /\ y \in 1..Max /\ g0 = Gcd(x, y)

StepX == x > y /\ x' = x - y /\ UNCHANGED <<y, g0>>
StepY == y > x /\ y' = y - x /\ UNCHANGED <<x, g0>>
Next == StepX \/ StepY

GcdPreserved == GcdBySets(x, y) = g0
=============================================================================
