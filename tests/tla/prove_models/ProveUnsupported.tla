--------------------------- MODULE ProveUnsupported ---------------------------
EXTENDS Naturals

Pick(n) == CHOOSE x \in 0..n : x * x = n

THEOREM UsesChoose == \A n \in Nat : Pick(n * n) = n

RECURSIVE Sum(_)
Sum(n) == IF n = 0 THEN 0 ELSE n + Sum(n - 1)

THEOREM UsesRecursion == \A n \in Nat : 2 * Sum(n) = n * (n + 1)
=============================================================================
