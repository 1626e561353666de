"""Import shim: the DraftState refinement map lives in `hicache.monitors.maps.draft_state`
(beside the other protocols' maps)."""
from hicache.monitors.maps.draft_state import DraftStateMap

__all__ = ["DraftStateMap"]
