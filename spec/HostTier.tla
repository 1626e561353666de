------------------------------ MODULE HostTier ------------------------------
(***************************************************************************)
(* Device / host / storage slot lifecycle of one engine.                   *)
(*                                                                         *)
(* The radix tree is modelled as one chain of NNodes page nodes from the   *)
(* root (node n's parent is n-1); nodes 0..len-1 are in the tree, each     *)
(* with a device copy, a host copy (a host slot), or both; storage holds   *)
(* pages by content, independent of the tree.  Host slots move through     *)
(*                                                                         *)
(*   idle --BackupStart/PrefetchStart--> reserved --...Finish--> synced    *)
(*   reserved --PrefetchFinish (miss, abort)--> idle                       *)
(*   synced --LoadBackStart--> protected --LoadBackFinish--> synced        *)
(*   synced --StorageBackupStart--> backup --StorageBackupFinish--> synced *)
(*   synced --HostEvict--> idle          (never protected, never backup)   *)
(*                                                                         *)
(* Write policies decide when a device page is backed up to host:          *)
(* write_through on its first hit (insert), write_through_selective on its *)
(* second, write_back only when it is about to be evicted from device (a   *)
(* device copy without host copy is then never dropped).  Write-through    *)
(* backups start and are acknowledged in root-to-leaf order.  A request    *)
(* matches the whole chain and locks it, loads host-only nodes back layer  *)
(* by layer (slots PROTECTED until the last layer), runs and may insert    *)
(* new nodes, then finishes; a matched request may prefetch the next node  *)
(* from storage into a reserved slot, and may abort, which releases the    *)
(* prefetch's slot once its I/O ends.                                      *)
(*                                                                         *)
(* Bug twins: BugEvictDuringLoad = TRUE lets host eviction take the slot   *)
(* of a pending load (the reference system's bug 10): PendingLoadLocked    *)
(* fails.  BugAbortLeak = TRUE drops an aborted request's prefetch record  *)
(* without releasing its slot (bugs 6 and 8): SlotInOneOwner fails.        *)
(***************************************************************************)
EXTENDS Naturals, Integers, FiniteSets

CONSTANTS
    NNodes,              \* page nodes of the chain
    NSlots,              \* host slots
    NLayers,             \* layers of a load-back (per-layer events)
    NReqs,               \* concurrent requests
    Policies,            \* write policies explored (subset of AllPolicies)
    BugEvictDuringLoad,  \* seeded bug: host eviction ignores a pending load
    BugAbortLeak         \* seeded bug: abort forgets its prefetch's slot

AllPolicies == {"write_through", "write_through_selective", "write_back"}

(* A positive natural number.                                             *)
Positive(x) == x \in Nat /\ x >= 1

ASSUME Positive(NNodes) /\ Positive(NSlots) /\ Positive(NLayers)
ASSUME Positive(NReqs) /\ Policies \subseteq AllPolicies /\ Policies # {}
ASSUME BugEvictDuringLoad \in BOOLEAN /\ BugAbortLeak \in BOOLEAN

Nodes   == 0..(NNodes - 1)
HSlots  == 1..NSlots
Reqs    == 1..NReqs
NoSlot  == 0
NoReq   == 0
SlotStates == {"idle", "reserved", "protected", "synced", "backup"}
ReqStates  == {"idle", "matched", "loading", "running"}
WriteThrough == {"write_through", "write_through_selective"}

VARIABLES
    policy,     \* the write policy of this run
    len,        \* nodes 0..len-1 are in the tree
    dev,        \* dev[n]: node n has a device copy
    host,       \* host[n]: host slot holding node n, or NoSlot
    stor,       \* stor[n]: storage holds node n's page
    hits,       \* hits[n]: times node n was hit, capped at 2
    slot,       \* slot[h]: state of host slot h
    backupOp,   \* backupOp[n]: slot of an in-flight device->host write of n, or NoSlot
    loadReq,    \* loadReq[n]: request whose load-back of n is in flight, or NoReq
    loadDone,   \* loadDone[n]: layers of that load-back already on device
    req,        \* req[q]: phase of request q
    reqLen,     \* reqLen[q]: q locks nodes 0..reqLen[q]-1 (0 when idle)
    pfSlot,     \* pfSlot[q]: slot of q's in-flight prefetch, or NoSlot
    pfNode,     \* pfNode[q]: node that prefetch fetches
    pfAbort     \* pfAbort[q]: q aborted; its prefetch's slot is freed when the I/O ends

vars == <<policy, len, dev, host, stor, hits, slot, backupOp, loadReq, loadDone,
          req, reqLen, pfSlot, pfNode, pfAbort>>

TypeOK ==
    /\ policy \in Policies
    /\ len \in 0..NNodes
    /\ dev \in [Nodes -> BOOLEAN]
    /\ host \in [Nodes -> HSlots \cup {NoSlot}]
    /\ stor \in [Nodes -> BOOLEAN]
    /\ hits \in [Nodes -> 0..2]
    /\ slot \in [HSlots -> SlotStates]
    /\ backupOp \in [Nodes -> HSlots \cup {NoSlot}]
    /\ loadReq \in [Nodes -> Reqs \cup {NoReq}]
    /\ loadDone \in [Nodes -> 0..NLayers]
    /\ req \in [Reqs -> ReqStates]
    /\ reqLen \in [Reqs -> 0..NNodes]
    /\ pfSlot \in [Reqs -> HSlots \cup {NoSlot}]
    /\ pfNode \in [Reqs -> Nodes]
    /\ pfAbort \in [Reqs -> BOOLEAN]

Locked(n)   == \E q \in Reqs : req[q] # "idle" /\ n < reqLen[q]
IdleSlots   == {h \in HSlots : slot[h] = "idle"}
Cap2(x)     == IF x > 2 THEN 2 ELSE x
InTree(n)   == n < len

Init ==
    /\ policy \in Policies
    /\ len = 0
    /\ dev = [n \in Nodes |-> FALSE]
    /\ host = [n \in Nodes |-> NoSlot]
    /\ stor = [n \in Nodes |-> FALSE]
    /\ hits = [n \in Nodes |-> 0]
    /\ slot = [h \in HSlots |-> "idle"]
    /\ backupOp = [n \in Nodes |-> NoSlot]
    /\ loadReq = [n \in Nodes |-> NoReq]
    /\ loadDone = [n \in Nodes |-> 0]
    /\ req = [q \in Reqs |-> "idle"]
    /\ reqLen = [q \in Reqs |-> 0]
    /\ pfSlot = [q \in Reqs |-> NoSlot]
    /\ pfNode = [q \in Reqs |-> 0]
    /\ pfAbort = [q \in Reqs |-> FALSE]

(* Request q matches the cached chain and locks it; hit counts grow.       *)
RequestMatch(q) ==
    /\ req[q] = "idle"
    /\ pfSlot[q] = NoSlot
    /\ req' = [req EXCEPT ![q] = "matched"]
    /\ reqLen' = [reqLen EXCEPT ![q] = len]
    /\ hits' = [n \in Nodes |-> IF InTree(n) THEN Cap2(hits[n] + 1) ELSE hits[n]]
    /\ UNCHANGED <<policy, len, dev, host, stor, slot, backupOp, loadReq, loadDone,
                   pfSlot, pfNode, pfAbort>>

(* Host-only nodes of q's prefix q loads back (none may already be loading).*)
ToLoad(q) == {n \in Nodes : n < reqLen[q] /\ ~dev[n]}

(* q starts loading its host-only nodes: their slots become PROTECTED.     *)
LoadBackStart(q) ==
    /\ req[q] = "matched"
    /\ pfSlot[q] = NoSlot
    /\ \A n \in ToLoad(q) : loadReq[n] = NoReq /\ slot[host[n]] = "synced"
    /\ slot' = [h \in HSlots |-> IF \E n \in ToLoad(q) : host[n] = h
                                 THEN "protected" ELSE slot[h]]
    /\ loadReq' = [n \in Nodes |-> IF n \in ToLoad(q) THEN q ELSE loadReq[n]]
    /\ loadDone' = [n \in Nodes |-> IF n \in ToLoad(q) THEN 0 ELSE loadDone[n]]
    /\ req' = [req EXCEPT ![q] = "loading"]
    /\ UNCHANGED <<policy, len, dev, host, stor, hits, backupOp, reqLen,
                   pfSlot, pfNode, pfAbort>>

(* One more layer of node n's load-back is on device.                      *)
LoadBackLayer(n) ==
    /\ loadReq[n] # NoReq
    /\ loadDone[n] < NLayers
    /\ loadDone' = [loadDone EXCEPT ![n] = loadDone[n] + 1]
    /\ UNCHANGED <<policy, len, dev, host, stor, hits, slot, backupOp, loadReq,
                   req, reqLen, pfSlot, pfNode, pfAbort>>

Loading(q) == {n \in Nodes : loadReq[n] = q}

(* q's load-back ends, whether it landed or not: the slots it read are     *)
(* SYNCED again, its nodes no longer loading, q running, the ack popped.   *)
LoadEnd(q) ==
    /\ req[q] = "loading"
    /\ slot' = [h \in HSlots |-> IF \E n \in Loading(q) : host[n] = h
                                 THEN "synced" ELSE slot[h]]
    /\ loadReq' = [n \in Nodes |-> IF n \in Loading(q) THEN NoReq ELSE loadReq[n]]
    /\ loadDone' = [n \in Nodes |-> IF n \in Loading(q) THEN 0 ELSE loadDone[n]]
    /\ req' = [req EXCEPT ![q] = "running"]

(* Every layer of every node q loads is done: copies on device.            *)
LoadBackFinish(q) ==
    /\ LoadEnd(q)
    /\ \A n \in Loading(q) : loadDone[n] = NLayers
    /\ dev' = [n \in Nodes |-> dev[n] \/ n \in Loading(q)]
    /\ UNCHANGED <<policy, len, host, stor, hits, backupOp, reqLen, pfSlot, pfNode, pfAbort>>

(* q's load-back failed (a copy raised): nothing of it reached the device. *)
(* The host copies are intact (a later load may read them) and q runs on   *)
(* without those pages: it computes them.                                  *)
LoadBackFail(q) ==
    /\ LoadEnd(q)
    /\ UNCHANGED <<policy, len, dev, host, stor, hits, backupOp, reqLen, pfSlot, pfNode, pfAbort>>

(* Running request q computed the next page and inserts it on device.      *)
DeviceInsert(q) ==
    /\ req[q] = "running"
    /\ reqLen[q] = len
    /\ len < NNodes
    /\ dev' = [dev EXCEPT ![len] = TRUE]
    /\ hits' = [hits EXCEPT ![len] = 1]
    /\ len' = len + 1
    /\ reqLen' = [reqLen EXCEPT ![q] = len + 1]
    /\ UNCHANGED <<policy, host, stor, slot, backupOp, loadReq, loadDone, req,
                   pfSlot, pfNode, pfAbort>>

(* Node n may leave the device: unlocked, no transfer, a device leaf.      *)
DevEvictable(n) ==
    /\ InTree(n) /\ dev[n]
    /\ ~Locked(n)
    /\ loadReq[n] = NoReq /\ backupOp[n] = NoSlot
    /\ IF n = len - 1 THEN TRUE ELSE ~dev[n + 1]

(* When the write policy backs node n up to host.                          *)
BackupDue(n) ==
    CASE policy = "write_through"           -> hits[n] >= 1
      [] policy = "write_through_selective" -> hits[n] >= 2
      [] policy = "write_back"              -> DevEvictable(n)

(* Write-through backups go root to leaf.  (IF, not \/: in an action TLC   *)
(* explores every disjunct, even after a true one.)                       *)
ParentBacked(n) == IF n = 0 THEN TRUE ELSE host[n - 1] # NoSlot
ParentBackedOrGoing(n) ==
    IF n = 0 THEN TRUE ELSE host[n - 1] # NoSlot \/ backupOp[n - 1] # NoSlot

(* Device->host write of node n begins: an idle slot becomes RESERVED.     *)
BackupStart(n) ==
    /\ InTree(n) /\ dev[n]
    /\ host[n] = NoSlot /\ backupOp[n] = NoSlot
    /\ BackupDue(n)
    /\ policy \in WriteThrough => ParentBackedOrGoing(n)
    /\ \E h \in IdleSlots :
        /\ slot' = [slot EXCEPT ![h] = "reserved"]
        /\ backupOp' = [backupOp EXCEPT ![n] = h]
    /\ UNCHANGED <<policy, len, dev, host, stor, hits, loadReq, loadDone,
                   req, reqLen, pfSlot, pfNode, pfAbort>>

(* The write is done: RESERVED -> SYNCED and n gains its host copy.  Write *)
(* acks are consumed in order, so a write-through child never gets its     *)
(* host copy before its parent.                                            *)
BackupFinish(n) ==
    /\ backupOp[n] # NoSlot
    /\ policy \in WriteThrough => ParentBacked(n)
    /\ slot' = [slot EXCEPT ![backupOp[n]] = "synced"]
    /\ host' = [host EXCEPT ![n] = backupOp[n]]
    /\ backupOp' = [backupOp EXCEPT ![n] = NoSlot]
    /\ UNCHANGED <<policy, len, dev, stor, hits, loadReq, loadDone,
                   req, reqLen, pfSlot, pfNode, pfAbort>>

(* Node n's device copy is dropped.  With a host copy the node stays;      *)
(* without one a tree leaf is deleted, except under write_back, which      *)
(* always backs up first.                                                  *)
DeviceEvict(n) ==
    /\ DevEvictable(n)
    /\ \/ /\ host[n] # NoSlot
          /\ dev' = [dev EXCEPT ![n] = FALSE]
          /\ UNCHANGED <<len, hits>>
       \/ /\ host[n] = NoSlot
          /\ policy # "write_back"
          /\ n = len - 1
          /\ dev' = [dev EXCEPT ![n] = FALSE]
          /\ hits' = [hits EXCEPT ![n] = 0]
          /\ len' = n
    /\ UNCHANGED <<policy, host, stor, slot, backupOp, loadReq, loadDone,
                   req, reqLen, pfSlot, pfNode, pfAbort>>

(* A host slot may be evicted when SYNCED and nobody relies on it (the bug:*)
(* also while a load-back reads it).                                       *)
HostEvictable(n) ==
    /\ InTree(n) /\ host[n] # NoSlot
    /\ IF n = len - 1 THEN TRUE ELSE host[n + 1] = NoSlot /\ backupOp[n + 1] = NoSlot
    /\ \/ /\ slot[host[n]] = "synced"
          /\ dev[n] \/ ~Locked(n)
       \/ BugEvictDuringLoad /\ slot[host[n]] = "protected"
    /\ dev[n] \/ n = len - 1

(* Node n's host copy is dropped: SYNCED -> IDLE; a host-only leaf leaves  *)
(* the tree.                                                               *)
HostEvict(n) ==
    /\ HostEvictable(n)
    /\ slot' = [slot EXCEPT ![host[n]] = "idle"]
    /\ host' = [host EXCEPT ![n] = NoSlot]
    /\ len' = IF dev[n] THEN len ELSE n
    /\ hits' = IF dev[n] THEN hits ELSE [hits EXCEPT ![n] = 0]
    /\ UNCHANGED <<policy, dev, stor, backupOp, loadReq, loadDone,
                   req, reqLen, pfSlot, pfNode, pfAbort>>

(* Host->storage write of node n: SYNCED -> BACKUP.                        *)
StorageBackupStart(n) ==
    /\ InTree(n) /\ host[n] # NoSlot
    /\ slot[host[n]] = "synced"
    /\ ~stor[n]
    /\ slot' = [slot EXCEPT ![host[n]] = "backup"]
    /\ UNCHANGED <<policy, len, dev, host, stor, hits, backupOp, loadReq, loadDone,
                   req, reqLen, pfSlot, pfNode, pfAbort>>

(* The storage write is done: BACKUP -> SYNCED, n gains its storage copy.  *)
StorageBackupFinish(n) ==
    /\ InTree(n) /\ host[n] # NoSlot
    /\ slot[host[n]] = "backup"
    /\ slot' = [slot EXCEPT ![host[n]] = "synced"]
    /\ stor' = [stor EXCEPT ![n] = TRUE]
    /\ UNCHANGED <<policy, len, dev, host, hits, backupOp, loadReq, loadDone,
                   req, reqLen, pfSlot, pfNode, pfAbort>>

(* The chain's tail has a host copy: a fetched page extends the host      *)
(* resident prefix.                                                        *)
HostTail == IF len = 0 THEN TRUE ELSE host[len - 1] # NoSlot

(* Matched request q fetches the node after the cached chain from storage  *)
(* into an idle slot, now RESERVED.                                        *)
PrefetchStart(q) ==
    /\ req[q] = "matched"
    /\ pfSlot[q] = NoSlot
    /\ reqLen[q] = len
    /\ len < NNodes
    /\ stor[len]
    /\ HostTail
    /\ \E h \in IdleSlots :
        /\ slot' = [slot EXCEPT ![h] = "reserved"]
        /\ pfSlot' = [pfSlot EXCEPT ![q] = h]
        /\ pfNode' = [pfNode EXCEPT ![q] = len]
    /\ UNCHANGED <<policy, len, dev, host, stor, hits, backupOp, loadReq, loadDone,
                   req, reqLen, pfAbort>>

(* The fetch ended: on a hit for a live request whose node is still the    *)
(* next one, the page enters the tree host-only (SYNCED); otherwise (miss, *)
(* abort, or the tree moved on) the slot goes back to IDLE.                *)
PrefetchFinish(q) ==
    /\ pfSlot[q] # NoSlot
    /\ \E hit \in BOOLEAN :
        IF hit /\ ~pfAbort[q] /\ pfNode[q] = len /\ HostTail
        THEN /\ slot' = [slot EXCEPT ![pfSlot[q]] = "synced"]
             /\ host' = [host EXCEPT ![len] = pfSlot[q]]
             /\ hits' = [hits EXCEPT ![len] = 0]
             /\ len' = len + 1
        ELSE /\ slot' = [slot EXCEPT ![pfSlot[q]] = "idle"]
             /\ UNCHANGED <<host, hits, len>>
    /\ pfSlot' = [pfSlot EXCEPT ![q] = NoSlot]
    /\ pfAbort' = [pfAbort EXCEPT ![q] = FALSE]
    /\ UNCHANGED <<policy, dev, stor, backupOp, loadReq, loadDone, req, reqLen, pfNode>>

(* A matched request is aborted: its locks go; an in-flight prefetch keeps *)
(* its slot until the I/O ends, then frees it (the bug: forgets it now).   *)
RequestAbort(q) ==
    /\ req[q] = "matched"
    /\ req' = [req EXCEPT ![q] = "idle"]
    /\ reqLen' = [reqLen EXCEPT ![q] = 0]
    /\ IF BugAbortLeak
       THEN /\ pfSlot' = [pfSlot EXCEPT ![q] = NoSlot]
            /\ UNCHANGED pfAbort
       ELSE /\ pfAbort' = [pfAbort EXCEPT ![q] = pfSlot[q] # NoSlot]
            /\ UNCHANGED pfSlot
    /\ UNCHANGED <<policy, len, dev, host, stor, hits, slot, backupOp, loadReq, loadDone, pfNode>>

(* Request q is done: its locks are released.                              *)
RequestFinish(q) ==
    /\ req[q] = "running"
    /\ req' = [req EXCEPT ![q] = "idle"]
    /\ reqLen' = [reqLen EXCEPT ![q] = 0]
    /\ UNCHANGED <<policy, len, dev, host, stor, hits, slot, backupOp, loadReq, loadDone,
                   pfSlot, pfNode, pfAbort>>

Next ==
    \/ \E q \in Reqs :
        \/ RequestMatch(q) \/ LoadBackStart(q) \/ LoadBackFinish(q) \/ LoadBackFail(q)
        \/ DeviceInsert(q) \/ PrefetchStart(q) \/ PrefetchFinish(q)
        \/ RequestAbort(q) \/ RequestFinish(q)
    \/ \E n \in Nodes :
        \/ BackupStart(n) \/ BackupFinish(n) \/ LoadBackLayer(n)
        \/ DeviceEvict(n) \/ HostEvict(n)
        \/ StorageBackupStart(n) \/ StorageBackupFinish(n)

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
(* Safety properties.                                                       *)

TreeRefs(h)   == {n \in Nodes : InTree(n) /\ host[n] = h}
BackupRefs(h) == {n \in Nodes : backupOp[n] = h}
FetchRefs(h)  == {q \in Reqs : pfSlot[q] = h}

(* Each host slot is in exactly one of {free, tree, in-flight}: an idle    *)
(* slot has no user; any other slot has exactly one, of the kind its state *)
(* says.                                                                   *)
SlotInOneOwner ==
    \A h \in HSlots :
        LET t == Cardinality(TreeRefs(h))
            f == Cardinality(BackupRefs(h)) + Cardinality(FetchRefs(h))
        IN  CASE slot[h] = "idle"     -> t = 0 /\ f = 0
              [] slot[h] = "reserved" -> t = 0 /\ f = 1
              [] OTHER                -> t = 1 /\ f = 0

(* A slot read by a pending load is never freed or reused.                 *)
PendingLoadLocked ==
    \A n \in Nodes :
        loadReq[n] # NoReq =>
            /\ InTree(n)
            /\ host[n] # NoSlot
            /\ slot[host[n]] = "protected"

(* Write-through backups form a prefix from the root.                      *)
WriteThroughPrefix ==
    policy \in WriteThrough =>
        \A n \in Nodes : (InTree(n) /\ n > 0 /\ host[n] # NoSlot) => host[n - 1] # NoSlot

(* Every tree node has a copy somewhere; nothing outside the tree holds    *)
(* device pages or host slots.                                             *)
TreeCopiesConsistent ==
    /\ \A n \in Nodes : InTree(n) => dev[n] \/ host[n] # NoSlot
    /\ \A n \in Nodes : ~InTree(n) =>
          ~dev[n] /\ host[n] = NoSlot /\ backupOp[n] = NoSlot /\ loadReq[n] = NoReq

(* Locked nodes stay in the tree with their copies; write_back never       *)
(* drops the only copy of a page.                                          *)
LockedNodesKept ==
    \A q \in Reqs : req[q] # "idle" => reqLen[q] <= len
=============================================================================
