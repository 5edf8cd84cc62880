#!/usr/bin/python3
"""Two builds' throughput side by side, in one run.

Runs bench/throughput.py once per round against each build's binaries,
alternating (old, new, old, new, ...) so both see the same machine noise,
and prints, per configuration, every run and the median of each build with
the ratio new / old. For checking that a change that should not touch
speed did not (a refactoring): the other throughput.py flags pass through.

  python3 bench/compare_builds.py --old-bin /tmp/old/build/bin \\
      --new-bin build/bin --rounds 3 -- --width 0.25 --micro-batches 200 \\
      --stages 2
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

from bench_common import main_guard, parse_two_builds, run

HERE = os.path.dirname(os.path.abspath(__file__))


def cells(result):
    """(label, samples/s) of every measured configuration of one run."""
    out = []
    for width, r in result["widths"].items():
        out.append((f"width {width}: plain backprop, one process",
                    r["plain_backprop"]["median"]))
        for j, row in r["stages"].items():
            for key, label in (("petra", "PETRA, fleet"),
                               ("backprop", "reversible backprop, fleet"),
                               ("in_process", "PETRA, in-process")):
                out.append((f"width {width}, J = {j}: {label}",
                            row[key]["median"]))
    return out


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args, rest = parse_two_builds(
        p, argv, 3,
        "-- then flags for throughput.py (not --bin-dir, --repeats or --json)",
        ("--bin-dir", "--repeats", "--json"))
    for name in ("old_bin", "new_bin"):
        d = getattr(args, name)
        if not os.access(os.path.join(d, "petra"), os.X_OK):
            p.error(f"--{name.replace('_', '-')}: no petra in {d}")
    runs = {"old": [], "new": []}
    with tempfile.TemporaryDirectory(prefix="petra-compare-") as tmp:
        for r in range(args.rounds):
            for build in ("old", "new"):
                print(f"compare_builds: round {r + 1}/{args.rounds}, {build}",
                      file=sys.stderr, flush=True)
                path = os.path.join(tmp, f"{build}-{r}.json")
                run([sys.executable, os.path.join(HERE, "throughput.py"),
                     "--bin-dir", getattr(args, f"{build}_bin"),
                     "--repeats", "1", "--json", path, "--quiet"] + rest,
                    args.timeout)
                with open(path) as f:
                    runs[build].append(dict(cells(json.load(f))))
    labels = list(runs["old"][0])
    print(f"{args.rounds} alternating rounds of `throughput.py "
          f"{' '.join(rest)}` per build; samples/s.\n")
    print("| configuration | old runs | new runs | old median | new median "
          "| new / old |")
    print("|---|---|---|---:|---:|---:|")
    for label in labels:
        old = [r[label] for r in runs["old"]]
        new = [r[label] for r in runs["new"]]
        mo, mn = statistics.median(old), statistics.median(new)
        print(f"| {label} | {', '.join(f'{v:.1f}' for v in old)} "
              f"| {', '.join(f'{v:.1f}' for v in new)} | {mo:.1f} "
              f"| {mn:.1f} | {mn / mo:.3f} |")
    return 0


if __name__ == "__main__":
    main_guard("compare_builds", main)
