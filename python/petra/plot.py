"""Pictures of training runs, from the reports `petra train --report` and
`petra status --report` write (JSON): loss, metric, throughput and the
pipeline bubble of one job, and a race's metric against wall-clock time.

Needs matplotlib (Debian: python3-matplotlib); nothing else of the package
imports it, and the C++ binaries never do.

From the command line:

    python3 -m petra.plot REPORT.json [--output FILE.png] [--title TEXT]

writes the job's four panels to FILE.png (default: REPORT.png beside the
report).
"""

import argparse
import json
import math
import os
import sys

__all__ = ["job_figure", "race_figure", "load_report", "main"]


def _pyplot():
    try:
        import matplotlib
    except ImportError as e:
        raise RuntimeError(
            "petra.plot needs matplotlib (Debian: apt-get install "
            "python3-matplotlib)") from e
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt
    return plt


def load_report(path):
    """A report as a dict; ValueError naming the file when it is not one."""
    try:
        with open(path) as f:
            report = json.load(f)
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror}") from e
    except ValueError as e:
        raise ValueError(f"{path}: not JSON: {e}") from e
    if not isinstance(report, dict) or not isinstance(
            report.get("epochs"), list):
        raise ValueError(
            f"{path}: not a job report (no \"epochs\" list; write one with "
            "petra train --report FILE)")
    return report


def _finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def _series(epochs, key):
    """(steps, seconds, values) of the epochs where `key` is a number."""
    rows = [(e.get("step"), e.get("elapsed_seconds"), e.get(key))
            for e in epochs if _finite(e.get(key))]
    return ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])


def job_figure(report, path, title=None):
    """Writes `report`'s loss, metric, throughput and bubble as one PNG at
    `path`: against optimizer steps (bottom axis) and elapsed seconds (top
    axis) for the first three, per stage for the bubble. Returns `path`."""
    plt = _pyplot()
    epochs = report.get("epochs") or []
    if not epochs:
        raise ValueError("the report has no epochs to draw")
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    (loss_ax, metric_ax), (rate_ax, bubble_ax) = axes
    language = any(_finite(e.get("test_loss")) and
                   not _finite(e.get("test_accuracy")) for e in epochs)

    for key, label in (("train_loss", "train"), ("test_loss", "test")):
        steps, _, values = _series(epochs, key)
        if values:
            loss_ax.plot(steps, values, marker="o", label=label)
    loss_ax.set_title("loss")
    loss_ax.legend()

    for key, label in (("test_accuracy", "test"),
                       ("train_accuracy", "train")):
        steps, _, values = _series(epochs, key)
        if values and not language:
            metric_ax.plot(steps, [100 * v for v in values], marker="o",
                           label=label)
    metric_ax.set_title("accuracy, %" if not language else
                        "accuracy (a language model: see the loss)")
    if metric_ax.lines:
        metric_ax.legend()

    steps, seconds, rates = _series(epochs, "samples_per_second")
    rate_ax.plot(steps, rates, marker="o")
    rate_ax.set_title("samples/s per epoch")
    rate_ax.set_ylim(bottom=0)

    for ax in (loss_ax, metric_ax, rate_ax):
        ax.set_xlabel("optimizer step")
        ax.grid(alpha=0.3)
        # The same epochs in wall-clock seconds, on the top axis.
        if steps and seconds and all(_finite(s) for s in steps + seconds):
            top = ax.secondary_xaxis("top", functions=(
                lambda x, s=steps, t=seconds: _interp(x, s, t),
                lambda x, s=steps, t=seconds: _interp(x, t, s)))
            top.set_xlabel("seconds")

    stages = report.get("stages") or []
    bubbles = [s.get("bubble_fraction", 0.0) for s in stages]
    if bubbles:
        bubble_ax.bar([str(s.get("index", i)) for i, s in enumerate(stages)],
                      [100 * b for b in bubbles])
    overall = report.get("bubble_fraction")
    bubble_ax.set_title("bubble per stage, %" + (
        f" (job: {100 * overall:.1f}%)" if _finite(overall) else ""))
    bubble_ax.set_xlabel("stage")
    bubble_ax.set_ylim(0, max([100 * b for b in bubbles] + [10]) * 1.15)
    bubble_ax.grid(alpha=0.3, axis="y")

    fig.suptitle(title or report.get("name") or report.get("job") or "job")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _interp(x, xs, ys):
    """Piecewise-linear map of x (a number or numpy array) from xs to ys,
    extended by the end slopes; xs increasing."""
    import numpy as np
    xs = np.asarray(xs, dtype=float)
    ys = np.asarray(ys, dtype=float)
    if len(xs) < 2 or xs[-1] == xs[0]:
        return np.asarray(x, dtype=float) * 0 + (ys[0] if len(ys) else 0)
    x = np.asarray(x, dtype=float)
    y = np.interp(x, xs, ys)
    lo = (ys[1] - ys[0]) / (xs[1] - xs[0]) if xs[1] != xs[0] else 0
    hi = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) if xs[-1] != xs[-2] else 0
    y = np.where(x < xs[0], ys[0] + (x - xs[0]) * lo, y)
    return np.where(x > xs[-1], ys[-1] + (x - xs[-1]) * hi, y)


def race_figure(curves, target, path, title, loss=False):
    """Writes a race's curves as one PNG at `path`: each method's metric
    against wall-clock seconds (`curves`: {method: [(seconds, metric)]}),
    the target as a dashed line. Accuracies in [0, 1] are drawn in %.
    Returns `path`."""
    plt = _pyplot()
    if not curves:
        raise ValueError("no curves to draw")
    scale = 1 if loss else 100
    fig, ax = plt.subplots(figsize=(8, 5))
    for method, points in curves.items():
        points = [(t, m) for t, m in points if _finite(t) and _finite(m)]
        if points:
            ax.plot([p[0] for p in points], [scale * p[1] for p in points],
                    marker="o", label=method)
    if _finite(target):
        ax.axhline(scale * target, linestyle="--", color="black",
                   label="target: backprop's final")
    ax.set_xlabel("wall-clock seconds")
    ax.set_ylabel("test loss" if loss else "test accuracy, %")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="python3 -m petra.plot",
        description="Draws a job's loss, accuracy, throughput and bubble "
                    "from its report (petra train --report FILE) as a PNG.")
    p.add_argument("report", help="the report's JSON file")
    p.add_argument("--output", "-o",
                   help="the PNG to write (default: the report's name "
                        "with .png)")
    p.add_argument("--title", help="the figure's title (default: the job's "
                                   "name)")
    a = p.parse_args(argv)
    try:
        report = load_report(a.report)
        out = a.output or os.path.splitext(a.report)[0] + ".png"
        job_figure(report, out, a.title)
    except (ValueError, RuntimeError) as e:
        print(f"petra.plot: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"petra.plot: {e}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
