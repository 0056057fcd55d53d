"""A PNG of throughput against latency from a serving report: one line per server, one point per level.

matplotlib is optional (`pip install 'tgi[bench]'`); it is imported only here, with the Agg backend.
"""

from __future__ import annotations

METRICS = (("ttft_ms", "TTFT p50 (ms)"), ("itl_ms", "inter-token latency p50 (ms)"))


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError(
            "plotting needs matplotlib: pip install 'tgi[bench]' (or pip install matplotlib)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_report(report: dict, path: str, title: str | None = None) -> str:
    """Write `path` (PNG): output tokens/s against TTFT p50 and against ITL p50. Returns `path`."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(METRICS), figsize=(6 * len(METRICS), 4.5), constrained_layout=True)
    names = [s["name"] for s in report["servers"]]
    for ax, (key, label) in zip(axes, METRICS, strict=True):
        for name in names:
            rows = [r for r in report["results"] if r["server"] == name and r[key]["p50"] is not None]
            if not rows:
                continue
            xs = [r[key]["p50"] for r in rows]
            ys = [r["output_tok_s"] for r in rows]
            ax.plot(xs, ys, marker="o", label=name)
            for x, y, r in zip(xs, ys, rows, strict=True):
                ax.annotate(r["level_label"], (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
        lows = [line.get_xdata().min() for line in ax.get_lines()]
        highs = [line.get_xdata().max() for line in ax.get_lines()]
        if lows and min(lows) > 0 and max(highs) / min(lows) > 20:
            ax.set_xscale("log")  # latencies from one client to many span orders of magnitude
        ax.set_ylim(bottom=0)
        ax.set_xlabel(label)
        ax.set_ylabel("output tokens/s")
        ax.grid(True, alpha=0.3)
        ax.legend()
    machine = report.get("machine", {})
    fig.suptitle(
        title or f"serving benchmark — {machine.get('cpu') or ''} ({machine.get('cpu_count')} cores)"
    )
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    """`python src/tgi/benchmarks/plot.py report.json out.png`: re-plot a saved report."""
    import argparse
    import json

    p = argparse.ArgumentParser(description="plot a serving benchmark's JSON report")
    p.add_argument("report")
    p.add_argument("output")
    p.add_argument("--title", default=None)
    args = p.parse_args(argv)
    with open(args.report) as f:
        plot_report(json.load(f), args.output, args.title)
    print(args.output)
    return 0


if __name__ == "__main__":  # `python src/tgi/benchmarks/<this file> ...`
    import sys

    sys.exit(main())
