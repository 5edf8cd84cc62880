#!/usr/bin/python3
"""The main job by two builds side by side, in one run.

Trains `petra train`'s embedded default (what `bash scripts/train.sh` runs:
RevNet18 at width 0.25 on Fashion-MNIST, 2 stages, 3 epochs, PETRA) with
each build's `petra`, alternating (old, new, old, new, ...) so that both see
the same machine noise, and prints every run's samples/s, test accuracy and
split, each build's medians, and the ratio new / old of samples/s. Flags
after `--` go to every `petra train` (both builds must accept them).

  python3 bench/main_job.py --old-bin /tmp/old/build/bin \\
      --new-bin build/bin --rounds 2
"""

import argparse
import os
import statistics
import sys

from bench_common import main_guard, parse_two_builds, train_report


def split_of(report):
    """Where each stage begins, from the report's stages."""
    starts = sorted(s["blocks"][0] for s in report.get("stages", []))
    return ",".join(str(b) for b in starts[1:]) or "-"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a, rest = parse_two_builds(p, argv, 2, "-- then flags for every petra "
                               "train", ("--report", "--quiet"))
    builds = []
    for label, d in (("old", a.old_bin), ("new", a.new_bin)):
        petra = os.path.join(d, "petra")
        if not os.access(petra, os.X_OK):
            p.error(f"--{label}-bin: {petra} is not an executable")
        builds.append((label, petra))

    runs = {label: [] for label, _ in builds}
    print("| round | build | samples/s | test accuracy | split (stage starts) "
          "| wall |")
    print("|---:|---|---:|---:|---|---:|")
    for r in range(1, a.rounds + 1):
        for label, petra in builds:
            print(f"main_job.py: round {r}, {label}", file=sys.stderr)
            rep = train_report(petra, rest, a.timeout)
            runs[label].append(rep)
            print(f"| {r} | {label} | {rep['samples_per_second']:.1f} | "
                  f"{100 * rep['test_accuracy']:.2f}% | {split_of(rep)} | "
                  f"{rep['wall_seconds']:.0f} s |", flush=True)
    print()
    med = {}
    for label, _ in builds:
        rate = statistics.median(x["samples_per_second"] for x in runs[label])
        acc = statistics.median(x["test_accuracy"] for x in runs[label])
        splits = sorted({split_of(x) for x in runs[label]})
        med[label] = rate
        print(f"{label}: median {rate:.1f} samples/s, median test accuracy "
              f"{100 * acc:.2f}%, split {' / '.join(splits)}"
              f"{' (the same in every run)' if len(splits) == 1 else ''}")
    if med["old"] > 0:
        print(f"new / old samples/s: {med['new'] / med['old']:.3f}")
    return 0


if __name__ == "__main__":
    main_guard("main_job.py", main)
