----------------------------- MODULE CPSharding -----------------------------
(***************************************************************************)
(* Context-parallel page placement and rotation.                           *)
(*                                                                         *)
(* CP ranks share one logical radix tree and one space of logical page     *)
(* IDs; each rank stores only the KV pages it owns.  A logical page p      *)
(* lives on rank  p % CP  at local page  p \div CP:  owner and address     *)
(* follow by arithmetic, there is no per-page table.  At token level       *)
(* (page size PageSize) the same rule reads                                *)
(*    owner(loc) = (loc % (CP*ps)) \div ps                                 *)
(*    local(loc) = (loc \div (CP*ps))*ps + loc % ps.                       *)
(*                                                                         *)
(* A chain (a path of pages from the root) has a rotation base b: its page *)
(* at position P is allocated in owner class (b + P) % CP, so a chain of   *)
(* k pages is spread evenly over the ranks.  A new chain starts on the     *)
(* least-full owner class; a request that extends a cached prefix keeps    *)
(* the prefix's rotation.  A request whose pages were computed under its   *)
(* own rotation may later be inserted under a cached chain (a splice):     *)
(* the tree accepts it only when both rotations agree, otherwise declines  *)
(* the insert and frees the request's pages.  Pages are evicted from       *)
(* device, backed up to host by their owner rank, and restored by that     *)
(* same rank, possibly at a different local address.                       *)
(*                                                                         *)
(* Bug twin (CPSharding_bug.cfg): BugSpliceAnyRotation = TRUE accepts      *)
(* splices of different rotations; SpliceRotationsAgree fails.             *)
(***************************************************************************)
EXTENDS Naturals, Integers, FiniteSets

CONSTANTS
    CP,                    \* number of context-parallel ranks (>= 1)
    LocalPages,            \* device pages per rank
    PageSize,              \* tokens per page (used by the token-level rule)
    ArithPages,            \* local pages PlacementBijection walks (a model: LocalPages)
    Chains,                \* chain identifiers (requests' page chains)
    MaxLen,                \* longest chain, in pages
    BugSpliceAnyRotation   \* seeded bug: accept splices of different rotations

(* A positive natural number.                                             *)
Positive(x) == x \in Nat /\ x >= 1

ASSUME Positive(CP) /\ Positive(LocalPages) /\ Positive(PageSize)
ASSUME ArithPages \in 1..LocalPages
ASSUME Positive(MaxLen) /\ BugSpliceAnyRotation \in BOOLEAN

Ranks   == 0..(CP - 1)
PageIds == 0..(CP * LocalPages - 1)
Pos     == 0..(MaxLen - 1)
NoRot   == -1              \* chain not allocated
NoPage  == -1              \* position has no device page
NoHost  == -1              \* position has no host copy

(* Placement arithmetic: logical page <-> (owner rank, local page).        *)
Owner(p)     == p % CP
LocalAddr(p) == p \div CP
PageAt(r, a) == a * CP + r

(* Token-level placement for n ranks and page size ps, and its inverse.    *)
TokOwner(loc, n, ps)    == (loc % (n * ps)) \div ps
TokLocal(loc, n, ps)    == (loc \div (n * ps)) * ps + (loc % ps)
TokLoc(r, a, n, ps)     == (a \div ps) * (n * ps) + r * ps + (a % ps)

(* Rotation arithmetic.                                                    *)
ChainOwner(b, P, n)     == (b + P) % n          \* owner class of position P
SpliceOK(b1, b2)        == b1 = b2              \* the tree's splice test
FirstPos(b, r, n)       == (r - b) % n          \* first position owned by r
PagesOn(k, b, r, n)     == k \div n + (IF FirstPos(b, r, n) < k % n THEN 1 ELSE 0)

VARIABLES
    rot,      \* rot[c]: rotation base of chain c, NoRot when c holds no pages
    len,      \* len[c]: pages in chain c (positions 0..len[c]-1 are in the tree)
    page,     \* page[c][P]: logical page holding position P on device, or NoPage
    host,     \* host[c][P]: rank whose host tier holds position P, or NoHost
    free,     \* logical page IDs free on device
    mixed     \* ghost: a splice of two different rotations was accepted

vars == <<rot, len, page, host, free, mixed>>

TypeOK ==
    /\ rot \in [Chains -> Ranks \cup {NoRot}]
    /\ len \in [Chains -> 0..MaxLen]
    /\ page \in [Chains -> [Pos -> PageIds \cup {NoPage}]]
    /\ host \in [Chains -> [Pos -> Ranks \cup {NoHost}]]
    /\ free \subseteq PageIds
    /\ mixed \in BOOLEAN

(* Device pages in use by owner rank r.                                    *)
Used(r) == Cardinality({p \in PageIds \ free : Owner(p) = r})
LeastFull == {r \in Ranks : \A r2 \in Ranks : Used(r) <= Used(r2)}
FreeOn(r) == {p \in free : Owner(p) = r}
EmptyRow(f) == [P \in Pos |-> f]
(* The allocator hands out the lowest free page of a class (a free list).  *)
Lowest(S) == CHOOSE p \in S : \A q \in S : p <= q

Init ==
    /\ rot = [c \in Chains |-> NoRot]
    /\ len = [c \in Chains |-> 0]
    /\ page = [c \in Chains |-> EmptyRow(NoPage)]
    /\ host = [c \in Chains |-> EmptyRow(NoHost)]
    /\ free = PageIds
    /\ mixed = FALSE

(* A new chain starts on a least-full owner class.                         *)
ChainAllocate(c) ==
    /\ rot[c] = NoRot
    /\ \E r \in LeastFull :
        /\ FreeOn(r) # {}
        /\ rot' = [rot EXCEPT ![c] = r]
        /\ len' = [len EXCEPT ![c] = 1]
        /\ page' = [page EXCEPT ![c][0] = Lowest(FreeOn(r))]
        /\ free' = free \ {Lowest(FreeOn(r))}
    /\ UNCHANGED <<host, mixed>>

(* The request extends cached chain c by one page in class (rot + len).    *)
ExtendByAllocation(c) ==
    /\ rot[c] # NoRot
    /\ len[c] < MaxLen
    /\ LET cls == ChainOwner(rot[c], len[c], CP) IN
        /\ FreeOn(cls) # {}
        /\ page' = [page EXCEPT ![c][len[c]] = Lowest(FreeOn(cls))]
        /\ len' = [len EXCEPT ![c] = len[c] + 1]
        /\ free' = free \ {Lowest(FreeOn(cls))}
    /\ UNCHANGED <<rot, host, mixed>>

(* Request d computed pages for a longer prefix than cached chain c under  *)
(* its own rotation, all still on device.  Inserting d splices its pages   *)
(* at positions >= len[c] under c's tail; d's copies of c's positions are  *)
(* duplicates.                                                             *)
SpliceCandidate(c, d) ==
    /\ c # d
    /\ rot[c] # NoRot /\ rot[d] # NoRot
    /\ len[c] < len[d]
    /\ \A P \in 0..(len[d] - 1) : page[d][P] # NoPage /\ host[d][P] = NoHost

DPages(d) == {page[d][P] : P \in 0..(len[d] - 1)}

SpliceAccept(c, d) ==
    /\ SpliceCandidate(c, d)
    /\ SpliceOK(rot[c], rot[d]) \/ BugSpliceAnyRotation
    /\ page' = [page EXCEPT ![c] = [P \in Pos |-> IF P >= len[c] /\ P < len[d]
                                                  THEN page[d][P] ELSE page[c][P]],
                            ![d] = EmptyRow(NoPage)]
    /\ free' = free \cup {page[d][P] : P \in 0..(len[c] - 1)}
    /\ len' = [len EXCEPT ![c] = len[d], ![d] = 0]
    /\ rot' = [rot EXCEPT ![d] = NoRot]
    /\ mixed' = (mixed \/ rot[c] # rot[d])
    /\ UNCHANGED host

(* A cached prefix is extended and keeps its rotation: by allocating the   *)
(* next page, or by accepting a splice of the same rotation.               *)
ChainExtend(c) ==
    \/ ExtendByAllocation(c)
    \/ \E d \in Chains : SpliceAccept(c, d)

(* A splice of a different rotation is declined; d's pages are freed.      *)
InsertReject(c, d) ==
    /\ SpliceCandidate(c, d)
    /\ ~SpliceOK(rot[c], rot[d])
    /\ ~BugSpliceAnyRotation
    /\ free' = free \cup DPages(d)
    /\ page' = [page EXCEPT ![d] = EmptyRow(NoPage)]
    /\ len' = [len EXCEPT ![d] = 0]
    /\ rot' = [rot EXCEPT ![d] = NoRot]
    /\ UNCHANGED <<host, mixed>>

(* Position P has no device page beyond it: it is a device leaf.           *)
DeviceLeaf(c, P) == \A Q \in Pos : Q > P => page[c][Q] = NoPage

(* Evict position P of chain c: a device copy with a host backup is        *)
(* dropped (the node stays, host only); the tail node is removed with its  *)
(* slots on every tier.                                                    *)
PageEvict(c, P) ==
    /\ P < len[c]
    /\ DeviceLeaf(c, P)
    /\ \/ /\ page[c][P] # NoPage
          /\ host[c][P] # NoHost
          /\ page' = [page EXCEPT ![c][P] = NoPage]
          /\ free' = free \cup {page[c][P]}
          /\ UNCHANGED <<len, rot, host>>
       \/ /\ P = len[c] - 1
          /\ page' = [page EXCEPT ![c][P] = NoPage]
          /\ host' = [host EXCEPT ![c][P] = NoHost]
          /\ free' = IF page[c][P] # NoPage THEN free \cup {page[c][P]} ELSE free
          /\ len' = [len EXCEPT ![c] = P]
          /\ rot' = IF P = 0 THEN [rot EXCEPT ![c] = NoRot] ELSE rot
    /\ UNCHANGED mixed

(* The owner rank copies its page to its host tier.                        *)
OwnerBackup(c, P) ==
    /\ P < len[c]
    /\ page[c][P] # NoPage
    /\ host[c][P] = NoHost
    /\ host' = [host EXCEPT ![c][P] = Owner(page[c][P])]
    /\ UNCHANGED <<rot, len, page, free, mixed>>

(* The owner rank restores the page into any free local page it owns: the  *)
(* address may change, the owner does not.                                 *)
OwnerRestore(c, P) ==
    /\ P < len[c]
    /\ page[c][P] = NoPage
    /\ host[c][P] # NoHost
    /\ \E p \in FreeOn(host[c][P]) :
        /\ page' = [page EXCEPT ![c][P] = p]
        /\ free' = free \ {p}
    /\ UNCHANGED <<rot, len, host, mixed>>

Next ==
    \E c \in Chains :
        \/ ChainAllocate(c)
        \/ ChainExtend(c)
        \/ \E d \in Chains : InsertReject(c, d)
        \/ \E P \in Pos : PageEvict(c, P) \/ OwnerBackup(c, P) \/ OwnerRestore(c, P)

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Safety properties.                                                       *)

(* Owner/local address is a bijection onto the logical page IDs, over the  *)
(* first ArithPages local pages of every rank.  A model sets ArithPages =  *)
(* LocalPages.  The arithmetic holds for every size (THEOREMs below:       *)
(* PagePlacementIsBijection, TokOwnerIsPageOwner, PlacementIsBijection,    *)
(* proved by `hicache prove`), so a runtime map, whose LocalPages is a     *)
(* device's, checks a prefix: walking every token of it took ~10 s.        *)
PlacementBijection ==
    /\ \A p \in 0..(CP * ArithPages - 1) :
          PageAt(Owner(p), LocalAddr(p)) = p /\ LocalAddr(p) < LocalPages
    /\ \A r \in Ranks, a \in 0..(ArithPages - 1) :
          Owner(PageAt(r, a)) = r /\ LocalAddr(PageAt(r, a)) = a
    /\ \A loc \in 0..(CP * ArithPages * PageSize - 1) :
          /\ TokOwner(loc, CP, PageSize) = Owner(loc \div PageSize)
          /\ TokLoc(TokOwner(loc, CP, PageSize), TokLocal(loc, CP, PageSize), CP, PageSize) = loc

(* A chain's page at position P is owned by (rotation + P) mod CP.         *)
PositionOwner ==
    \A c \in Chains : \A P \in 0..(len[c] - 1) :
        page[c][P] # NoPage => Owner(page[c][P]) = ChainOwner(rot[c], P, CP)

(* Extensions keep the rotation: consecutive device pages of a chain sit   *)
(* on consecutive owner classes.                                           *)
ExtensionKeepsRotation ==
    \A c \in Chains : \A P \in 1..(len[c] - 1) :
        (page[c][P] # NoPage /\ page[c][P - 1] # NoPage)
            => Owner(page[c][P]) = (Owner(page[c][P - 1]) + 1) % CP

(* Splices of different rotations are rejected.                            *)
SpliceRotationsAgree == ~mixed

(* Restore keeps the owner even when the address changes.                  *)
RestoreKeepsOwner ==
    \A c \in Chains : \A P \in 0..(len[c] - 1) :
        (page[c][P] # NoPage /\ host[c][P] # NoHost) => Owner(page[c][P]) = host[c][P]

(* Each rank holds floor(k/CP) or ceil(k/CP) of a chain's k positions.     *)
ChainBalanced ==
    \A c \in Chains : rot[c] # NoRot =>
        \A r \in Ranks :
            LET n == Cardinality({P \in 0..(len[c] - 1) : ChainOwner(rot[c], P, CP) = r})
            IN  n \in {len[c] \div CP, (len[c] + CP - 1) \div CP}

(* No page is used twice, none leaks: used pages and free pages partition. *)
NoDoubleAllocation ==
    /\ \A c, d \in Chains : \A P, Q \in Pos :
          (page[c][P] # NoPage /\ <<c, P>> # <<d, Q>>) => page[c][P] # page[d][Q]
    /\ \A c \in Chains : \A P \in Pos : page[c][P] # NoPage => page[c][P] \notin free
    /\ \A c \in Chains : \A P \in Pos : P >= len[c] => page[c][P] = NoPage /\ host[c][P] = NoHost
    /\ \A p \in PageIds : p \notin free => \E c \in Chains, P \in Pos : page[c][P] = p

(* Symmetry: chains are interchangeable, so a model may identify states    *)
(* that differ only by chain names (cfg: VIEW View).                       *)
View == <<{<<rot[c], len[c], page[c], host[c]>> : c \in Chains}, free, mixed>>

-----------------------------------------------------------------------------
(* Obligations for all sizes (discharged by Z3, `hicache prove`).          *)

THEOREM PlacementIsBijection ==
    \A n, ps, loc \in Nat :
        (n >= 1 /\ ps >= 1) =>
            /\ TokOwner(loc, n, ps) < n
            /\ TokLocal(loc, n, ps) >= 0
            /\ TokLoc(TokOwner(loc, n, ps), TokLocal(loc, n, ps), n, ps) = loc

THEOREM PagePlacementIsBijection ==
    \A n, l, p, r, a \in Nat :
        (n >= 1) =>
            /\ ((p \div n) * n) + (p % n) = p
            /\ (p < n * l) => p \div n < l
            /\ (r < n) => ((a * n + r) % n = r /\ (a * n + r) \div n = a)

THEOREM TokOwnerIsPageOwner ==
    \A n, ps, loc \in Nat :
        (n >= 1 /\ ps >= 1) => TokOwner(loc, n, ps) = (loc \div ps) % n

THEOREM PlacementIsInjective ==
    \A n, ps, r, a \in Nat :
        (n >= 1 /\ ps >= 1 /\ r < n) =>
            /\ TokOwner(TokLoc(r, a, n, ps), n, ps) = r
            /\ TokLocal(TokLoc(r, a, n, ps), n, ps) = a

THEOREM ChainBalance ==
    \A n, k, b, r \in Nat :
        (n >= 1 /\ b < n /\ r < n) =>
            \/ PagesOn(k, b, r, n) = k \div n
            \/ PagesOn(k, b, r, n) = (k + n - 1) \div n

THEOREM ChainBalanceCount ==
    \A n, k, b, r, j \in Nat :
        (n >= 1 /\ b < n /\ r < n) =>
            /\ ChainOwner(b, FirstPos(b, r, n) + j * n, n) = r
            /\ (j < PagesOn(k, b, r, n)) <=> (FirstPos(b, r, n) + j * n < k)

THEOREM OwnedPositionsAreFirstPosPlusMultiples ==
    \A n, b, r, P \in Nat :
        (n >= 1 /\ b < n /\ r < n /\ ChainOwner(b, P, n) = r) =>
            /\ P >= FirstPos(b, r, n)
            /\ (P - FirstPos(b, r, n)) % n = 0

THEOREM ExtendContinuesRotation ==
    \A n, b, k \in Nat :
        (n >= 1 /\ k >= 1) =>
            ChainOwner(b, k, n) = (ChainOwner(b, k - 1, n) + 1) % n

THEOREM SpliceAcceptedIffRotationsAgree ==
    \A n, b1, b2 \in Nat :
        (n >= 1 /\ b1 < n /\ b2 < n) =>
            /\ SpliceOK(b1, b2) => \A P \in Nat : ChainOwner(b1, P, n) = ChainOwner(b2, P, n)
            /\ ~SpliceOK(b1, b2) => ChainOwner(b1, 0, n) # ChainOwner(b2, 0, n)
=============================================================================
