--------------------------- MODULE ProveUnsupported ---------------------------
EXTENDS Naturals

Pick(n) == [lo |-> n, hi |-> n].lo

THEOREM UsesRecord == \A n \in Nat : Pick(n * n) = n * n

RECURSIVE Sum(_)
Sum(n) == IF n = 0 THEN 0 ELSE n + Sum(n - 1)

THEOREM UsesRecursion == \A n \in Nat : 2 * Sum(n) = n * (n + 1)
=============================================================================
