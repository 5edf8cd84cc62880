#!/usr/bin/python3
"""Accuracy benchmark (the paper's Table 2 and Figure 4, on Fashion-MNIST).

Trains the same small RevNet18 with the same epochs and seed by backprop
(exact gradients), by PETRA with accumulation k in {1, 2, 4, 8}, and by
delayed gradients keeping inputs and weights (PipeDream), each with
`petra train --runner in-process` (the same engine and numbers as the
fleet), and prints their test accuracies side by side. The pipelined modes
use one stage per block, the paper's setting, where staleness is largest;
backprop's exact gradient does not depend on the partition, so it runs as
one stage on every core.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (label, flags): the one list of configurations.
CONFIGS = [
    ("backprop", ["--mode", "backprop", "--stages", "1"]),
    ("PETRA k=1", ["--mode", "petra", "--accumulation", "1"]),
    ("PETRA k=2", ["--mode", "petra", "--accumulation", "2"]),
    ("PETRA k=4", ["--mode", "petra", "--accumulation", "4"]),
    ("PETRA k=8", ["--mode", "petra", "--accumulation", "8"]),
    ("delayed, inputs + weights (PipeDream) k=1",
     ["--mode", "delayed", "--stash-inputs", "--stash-weights"]),
]


class BenchError(Exception):
    """A run failed; the message says which and why."""


def train(petra, flags, threads, workdir, timeout):
    report = os.path.join(workdir, "report.json")
    argv = [petra, "train", "--runner", "in-process", "--quiet",
            "--threads-per-stage", str(threads), "--report", report] + flags
    start = time.time()
    try:
        out = subprocess.run(argv, capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"timed out after {timeout} s: {' '.join(argv)}")
    if out.returncode != 0:
        raise BenchError(f"exit {out.returncode}: {' '.join(argv)}\n"
                         f"{out.stdout[-2000:]}{out.stderr[-2000:]}")
    with open(report) as f:
        r = json.load(f)
    r["bench_wall_seconds"] = time.time() - start
    return r


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--petra", default=os.path.join(ROOT, "build", "bin",
                                                   "petra"),
                   help="the petra binary (default: build/bin/petra)")
    p.add_argument("--width", default="0.25")
    p.add_argument("--epochs", default="3")
    p.add_argument("--seed", default="1")
    p.add_argument("--train-limit", default="0",
                   help="training examples used, 0 = all 60000")
    p.add_argument("--test-limit", default="0")
    p.add_argument("--stages", default="per-block",
                   help="stages of the pipelined modes (default per-block)")
    p.add_argument("--only", default="",
                   help="comma-separated labels of CONFIGS to run (default "
                        "all), e.g. 'backprop,PETRA k=1'")
    p.add_argument("--smoke", action="store_true",
                   help="seconds-long run: width 0.125, 1 epoch, 1280 "
                        "training and 256 test examples")
    p.add_argument("--timeout", type=int, default=3600)
    p.add_argument("--json", help="write every run's report to this file")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    if args.smoke:
        args.width, args.epochs = "0.125", "1"
        args.train_limit, args.test_limit = "1280", "256"
    if not os.access(args.petra, os.X_OK):
        p.error(f"--petra: {args.petra} is not an executable "
                "(build first: bash scripts/build.sh)")
    labels = [c[0] for c in CONFIGS]
    args.configs = CONFIGS
    if args.only:
        wanted = [w.strip() for w in args.only.split(",")]
        unknown = [w for w in wanted if w not in labels]
        if unknown:
            p.error(f"--only: unknown {unknown}; choose from {labels}")
        args.configs = [c for c in CONFIGS if c[0] in wanted]
    return args


def main(argv):
    args = parse_args(argv)
    cores = os.cpu_count()
    common = ["--arch", "revnet18", "--width", args.width,
              "--dataset", "fashion_mnist", "--epochs", args.epochs,
              "--seed", args.seed, "--train-limit", args.train_limit,
              "--test-limit", args.test_limit]
    rows = []
    start = time.time()
    for label, flags in args.configs:
        one_stage = "--stages" in flags
        stage_flags = [] if one_stage else ["--stages", args.stages]
        threads = cores if one_stage else 1
        if not args.quiet:
            print(f"accuracy: {label} ...", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="petra-acc-") as workdir:
            r = train(args.petra, common + stage_flags + flags, threads,
                      workdir, args.timeout)
        rows.append((label, common + stage_flags + flags, r))
        if not args.quiet:
            print(f"accuracy: {label}: {100 * r['test_accuracy']:.2f}% in "
                  f"{r['bench_wall_seconds']:.0f} s", file=sys.stderr,
                  flush=True)
    total = time.time() - start

    reference = next((r["test_accuracy"] for label, _, r in rows
                      if label == "backprop"), None)
    print(f"RevNet18 (mnist variant, width {args.width}) on Fashion-MNIST, "
          f"{args.epochs} epochs, seed {args.seed}, micro-batch 64; "
          f"pipelined modes on {args.stages} stages. Whole sweep: "
          f"{total / 60:.1f} min on {cores} cores.\n")
    print("| training | test accuracy | vs backprop | samples/s | minutes |")
    print("|---|---:|---:|---:|---:|")
    for label, _, r in rows:
        delta = ("" if reference is None or label == "backprop" else
                 f"{100 * (r['test_accuracy'] - reference):+.2f} pts")
        print(f"| {label} | {100 * r['test_accuracy']:.2f}% | {delta} "
              f"| {r['samples_per_second']:.0f} "
              f"| {r['bench_wall_seconds'] / 60:.1f} |")
    petra = [(r["test_accuracy"], label) for label, _, r in rows
             if label.startswith("PETRA")]
    if petra and reference is not None:
        best, label = max(petra)
        print(f"\nBest PETRA: {label}, {100 * best:.2f}%, "
              f"{100 * (best - reference):+.2f} points from backprop.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"total_seconds": total,
                       "runs": [{"label": l, "flags": fl, "report": r}
                                for l, fl, r in rows]}, f, indent=2)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print(f"accuracy: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
