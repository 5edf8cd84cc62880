#!/usr/bin/python3
"""Our training figures beside stock PyTorch's, measured in the same run.

Reads bench/stock_pytorch.py's --json file and `petra train --report` files,
and prints one table: each run's samples/s and its ratio to stock PyTorch's
ResNet18 (fp32, and bf16 with channels_last) and to the same RevNet18 under
plain PyTorch backprop (fp32, and bf16 with channels_last), so that no GPU
figure stands without the yardstick from the same machine and run; and the
largest rebuild error any stage of the run measured (||x - rebuilt x|| /
||x||, `--rebuild-error-every`; "-" where no stage rebuilds) and its test
accuracy. Without --stock, the runs alone (accuracy comparisons).

usage: gpu_ratios.py [--stock STOCK.json] LABEL=REPORT.json [LABEL=REPORT.json ...]
"""

import argparse
import json
import sys


def load(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"gpu_ratios: {what} {path}: {e}")


def rebuild_error(report):
    """The largest rebuild error of any stage, or "-" where none measured."""
    worst = None
    for stage in report.get("stages", []):
        e = stage.get("rebuild_error", {})
        if e.get("samples", 0) > 0:
            worst = max(worst or 0.0, e.get("max", 0.0))
    return "-" if worst is None else f"{worst:.1e}"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stock",
                   help="bench/stock_pytorch.py --json output (omit for no "
                        "ratios)")
    p.add_argument("runs", nargs="+", metavar="LABEL=REPORT.json",
                   help="a `petra train --report` file and its row's label")
    args = p.parse_args(argv)
    stock = load(args.stock, "stock figures") if args.stock else {"rows": []}
    by_key = {(r["arch"], r["precision"]): r["samples_per_second"]
              for r in stock["rows"]}
    columns = [("resnet18", "fp32", "ResNet18 fp32"),
               ("resnet18", "bf16", "ResNet18 bf16"),
               ("revnet18", "fp32", "RevNet18 fp32"),
               ("revnet18", "bf16", "RevNet18 bf16")]
    columns = [c for c in columns if (c[0], c[1]) in by_key]
    header = (["run", "samples/s"] + [f"/ stock {c[2]}" for c in columns]
              + ["test accuracy", "rebuild error (max)"])
    print("| " + " | ".join(header) + " |")
    print("|---|---:|" + "---:|" * len(columns) + "---:|---:|")
    for spec in args.runs:
        label, sep, path = spec.partition("=")
        if not sep:
            p.error(f"'{spec}' is not LABEL=REPORT.json")
        report = load(path, "report")
        rate = report.get("samples_per_second")
        if not isinstance(rate, (int, float)):
            raise SystemExit(f"gpu_ratios: {path} has no samples_per_second")
        cells = ([label, f"{rate:,.0f}"]
                 + [f"{rate / by_key[(c[0], c[1])]:.2f}" for c in columns]
                 + [f"{100 * report.get('test_accuracy', 0):.2f}%",
                    rebuild_error(report)])
        print("| " + " | ".join(cells) + " |")
    if stock["rows"]:
        print(f"\nStock PyTorch: {stock['torch']} on {stock['device']}, "
              f"batch {stock['rows'][0]['batch']} (bench/stock_pytorch.py, "
              "above).")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
