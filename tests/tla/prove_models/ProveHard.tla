------------------------------ MODULE ProveHard ------------------------------
(* True (Euler: no positive cubes sum to a cube) but far beyond Z3: unknown. *)
EXTENDS Naturals
THEOREM NoCubeSum ==
    \A x, y, z \in Nat \ {0} : x * x * x + y * y * y # z * z * z
=============================================================================
