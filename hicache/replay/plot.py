"""`--plot out.png`: hit rate per tier against device memory per rank, for both setups.

matplotlib is an optional extra (`pip install hicache[plot]`); `plot` raises
ModuleNotFoundError without it and the CLI reports that.
"""
from __future__ import annotations

#: (setup, figure key) -> line style; device tier solid, device+host dashed
LINES = {
    ("baseline", "device_hit_rate"): ("tab:blue", "-", "replicate: device"),
    ("baseline", "device_host_hit_rate"): ("tab:blue", "--", "replicate: device+host"),
    ("sharded", "device_hit_rate"): ("tab:red", "-", "sharded: device"),
    ("sharded", "device_host_hit_rate"): ("tab:red", "--", "sharded: device+host"),
}


def plot(result: dict, out_path: str) -> str:
    """Draw `result["sweep"]` (from evaluate) into `out_path`; returns the path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result.get("sweep") or []
    if not rows:
        raise ValueError("sweep: the plot needs capacity points (evaluate with a sweep)")
    x = [r["device_tokens_per_rank"] / 1e6 for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (setup, key), (color, style, label) in LINES.items():
        ax.plot(x, [100 * r[setup][key] for r in rows], color=color, linestyle=style,
                marker="o", label=label)
    ax.axhline(100 * result["ceiling"]["hit_rate"], color="gray", linestyle=":",
               label="infinite-cache ceiling")
    st = (result.get("comparisons") or {}).get("storage_hit_rate")
    if st is not None:
        ax.scatter([result["config"]["device_tokens_per_rank"] / 1e6], [100 * st["with"]],
                   color="black", marker="*", s=120, zorder=5,
                   label=f"{result['storage']['setup']} + {result['storage']['backend']} storage")
    cfg = result["config"]
    ax.set_xscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels([f"{v:.3g}" for v in x])
    ax.minorticks_off()
    ax.set_xlabel("device memory per rank (M tokens)")
    ax.set_ylabel("token hit rate (%)")
    ax.set_title(f"{result['trace'].rsplit('/', 1)[-1]}: CP{cfg['cp']}, host "
                 f"{cfg['host_tokens_per_engine'] / 1e6:g}M tokens per engine")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_path, dpi=120)
    plt.close(fig)
    return out_path
