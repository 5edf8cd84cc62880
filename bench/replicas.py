#!/usr/bin/python3
"""Replicas on this machine: samples/s of the main job for R copies of a
J-stage pipeline (R x J in 1x2, 2x1, 2x2 by default), and the share of
training time each stage spent in the all-reduce that averages its
gradients over the copies.

Each run is `petra train --runner in-process --replicas R --stages J` on the
same data, one torch thread per stage; the report's `allreduce_seconds` per
stage over the run's training seconds is the all-reduce's share.
`--runner fleet` runs them on a fleet of R x J stage servers instead, and
`--same-global-batch` gives each run k = (largest R) / R, so that every run
takes the same samples per optimizer step (the accuracy comparison).
"""

import argparse
import shlex
import sys

from bench_common import add_petra_arg, check_petra, main_guard, train_report


def shape(text):
    try:
        r, j = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not RxJ, e.g. 2x2")
    if r < 1 or j < 1:
        raise argparse.ArgumentTypeError(f"'{text}': R and J must be >= 1")
    return r, j


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_petra_arg(p)
    p.add_argument("--shapes", type=lambda s: [shape(x) for x in s.split(",")],
                   default=[(1, 2), (2, 1), (2, 2)],
                   help="R x J runs, comma-separated (default 1x2,2x1,2x2)")
    p.add_argument("--job-flags", default="--epochs 1 --train-limit 12800",
                   help="flags of every run (default: the main job, one "
                        "epoch of 12,800 images)")
    p.add_argument("--runner", choices=("in-process", "fleet"),
                   default="in-process")
    p.add_argument("--same-global-batch", action="store_true",
                   help="k = (largest R) / R for each run (R must divide it)")
    p.add_argument("--timeout", type=int, default=3600,
                   help="seconds one run may take (default 3600)")
    args = p.parse_args(argv)
    check_petra(p, args.petra)
    flags = shlex.split(args.job_flags)
    owned = ["--replicas", "--stages", "--runner"]
    if args.same_global_batch:
        owned.append("--accumulation")
    for f in owned:
        if f in flags:
            p.error(f"--job-flags may not set {f}: this driver does")
    most = max(r for r, _ in args.shapes)
    if args.same_global_batch and any(most % r for r, _ in args.shapes):
        p.error("--same-global-batch: every R must divide the largest")
    print(f"`petra train --runner {args.runner} --threads-per-stage 1 "
          f"{args.job_flags}` with each R x J"
          f"{' and k = ' + str(most) + ' / R' if args.same_global_batch else ''}"
          f"; samples/s over the run's "
          f"training time; all-reduce share: each stage's all-reduce seconds "
          f"over that time (largest stage).\n")
    print("| R x J | k | stages | samples/s | test accuracy | all-reduce share "
          "| all-reduce bytes per stage |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r, j in args.shapes:
        k = most // r if args.same_global_batch else 1
        print(f"bench: replicas {r} x stages {j}, k = {k}", file=sys.stderr)
        report = train_report(
            args.petra,
            ["--runner", args.runner, "--threads-per-stage", "1",
             "--replicas", str(r), "--stages", str(j)] +
            (["--accumulation", str(k)] if args.same_global_batch else []) +
            flags,
            args.timeout)
        stages = report["stages"]
        seconds = report["train_seconds"]
        share = max((s["allreduce_seconds"] for s in stages), default=0)
        share = share / seconds if seconds > 0 else 0
        bytes_ = max((s["allreduce_bytes"] for s in stages), default=0)
        print(f"| {r} x {j} | {k} | {r * j} | "
              f"{report['samples_per_second']:,.1f} "
              f"| {100 * report['test_accuracy']:.2f}% | {100 * share:.1f}% "
              f"| {bytes_:,} |")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    main_guard("replicas.py", main)
