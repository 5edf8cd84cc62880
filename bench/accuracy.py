#!/usr/bin/python3
"""Accuracy benchmark (the paper's Tables 2 and 4, Figures 4 and 5, on
Fashion-MNIST).

Trains the same small RevNet18 with the same epochs and seed by backprop
(exact gradients), by PETRA with accumulation k in {1, 2, 4, 8, 16, 32}, by
delayed gradients in the other rows of Table 4 (inputs and weights kept,
PipeDream; inputs only; weights only with the input rebuilt with the current
weights) and, when --only names them, by forward gradients (local or random
guesses, or the local losses alone), each with
`petra train --runner in-process` (the same engine and numbers as the
fleet), and prints their test accuracies side by side. With --e2e N the
pipelined runs also check their gradients against the true end-to-end one
every N steps (--e2e-diagnostics) and a second table gives, per epoch, each
stage's mean cosine to it (Figure 5). The pipelined modes
run on each of --stages: by default one stage per block (the paper's
setting, where staleness is largest: a delay of up to 18 ticks) and 2
stages (the default job's, one per core); backprop's exact gradient does
not depend on the partition, so it runs once, as one stage, on
--backprop-threads torch threads (default 1: in the in-process runner, 2
OpenMP threads beside OpenBLAS's own pool ran revvit 3x slower than 1 on 2
cores, 557 against 1556 samples/s).
"""

import argparse
import json
import os
import shlex
import sys
import time

from bench_common import (BenchError, add_petra_arg, check_petra, main_guard,
                          train_report)

# (label, flags): the one list of configurations.
CONFIGS = [
    ("backprop", ["--mode", "backprop", "--stages", "1"]),
    ("PETRA k=1", ["--mode", "petra", "--accumulation", "1"]),
    ("PETRA k=2", ["--mode", "petra", "--accumulation", "2"]),
    ("PETRA k=4", ["--mode", "petra", "--accumulation", "4"]),
    ("PETRA k=8", ["--mode", "petra", "--accumulation", "8"]),
    ("PETRA k=16", ["--mode", "petra", "--accumulation", "16"]),
    ("PETRA k=32", ["--mode", "petra", "--accumulation", "32"]),
    # Table 4's other rows (k = 1): which buffers, which weights rebuild.
    ("delayed, inputs + weights (PipeDream) k=1",
     ["--mode", "delayed", "--stash-inputs", "--stash-weights"]),
    ("delayed, inputs only k=1", ["--mode", "delayed", "--stash-inputs"]),
    ("delayed, weights only, input rebuilt with current weights k=1",
     ["--mode", "delayed", "--stash-weights", "--rebuild-with", "current"]),
]
# Forward gradients (no backward pass through the network), run only when
# --only names them: per block they cost many times a PETRA run (stage j
# pushes j + 1 tangents).
FORWARD_GRADIENT = [
    ("forward gradient (local guess)",
     ["--mode", "forward_gradient", "--guess", "local"]),
    ("forward gradient (random guess)",
     ["--mode", "forward_gradient", "--guess", "random"]),
    ("local losses only",
     ["--mode", "forward_gradient", "--guess", "local_only"]),
]
# Beyond the paper, run only when --only names them: SpecTrain's weight
# prediction (--predict-weights) and Kosson et al.'s spike compensation
# (--spike-compensation) on PETRA's delayed stages.
EXTRAS = [
    ("predicted weights (SpecTrain), PETRA k=1",
     ["--mode", "petra", "--accumulation", "1", "--predict-weights"]),
    ("predicted weights (SpecTrain), PETRA k=4",
     ["--mode", "petra", "--accumulation", "4", "--predict-weights"]),
    # The exact delayed gradient at k = 4: what delay alone costs there.
    ("delayed, inputs + weights (PipeDream) k=4",
     ["--mode", "delayed", "--stash-inputs", "--stash-weights",
      "--accumulation", "4"]),
    # Spike compensation (--spike-compensation), alone and with prediction.
    ("spike compensation, PETRA k=1",
     ["--mode", "petra", "--accumulation", "1", "--spike-compensation"]),
    ("spike compensation, PETRA k=4",
     ["--mode", "petra", "--accumulation", "4", "--spike-compensation"]),
    ("spike compensation + predicted weights, PETRA k=4",
     ["--mode", "petra", "--accumulation", "4", "--spike-compensation",
      "--predict-weights"]),
]


def train(petra, flags, threads, timeout):
    start = time.time()
    r = train_report(petra, ["--runner", "in-process", "--threads-per-stage",
                             str(threads)] + flags, timeout)
    r["bench_wall_seconds"] = time.time() - start
    return r


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_petra_arg(p)
    p.add_argument("--arch", default="revnet18",
                   help="network (default revnet18; revvit and vit take "
                        "their sizes from --model-flags, not --width)")
    p.add_argument("--width", default="0.25")
    p.add_argument("--model-flags", default="",
                   help="more `petra train` flags for every run, e.g. "
                        "'--patch-size 7 --lr 0.1'")
    p.add_argument("--base-lr", type=float, default=None,
                   help="give each run --lr BASE * k, k its accumulation "
                        "(1 for backprop): the paper's linear scaling "
                        "(default: petra's own default, 0.1 * 64k / 256)")
    p.add_argument("--backprop-threads", type=int, default=1,
                   help="torch threads of the backprop run (default 1)")
    p.add_argument("--epochs", default="3")
    p.add_argument("--seed", default="1")
    p.add_argument("--train-limit", default="0",
                   help="training examples used, 0 = all 60000")
    p.add_argument("--test-limit", default="0")
    p.add_argument("--stages", default="per-block,2",
                   help="comma-separated stage settings the pipelined modes "
                        "run on (default per-block,2)")
    p.add_argument("--e2e", type=int, default=0,
                   help="every N steps, the pipelined runs compare their "
                        "gradients with the true end-to-end one "
                        "(--e2e-diagnostics N); 0 = off")
    p.add_argument("--only", default="",
                   help="comma-separated labels of CONFIGS to run (default "
                        "all), e.g. 'backprop,PETRA k=1'")
    p.add_argument("--smoke", action="store_true",
                   help="seconds-long run: width 0.125, 1 epoch, 256 "
                        "training and 64 test examples in micro-batches of 8 "
                        "(unless --model-flags sets one): 32 of them, so "
                        "that every k up to 32 runs")
    p.add_argument("--timeout", type=int, default=3600)
    p.add_argument("--json", help="write every run's report to this file")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    if args.backprop_threads < 1:
        p.error("--backprop-threads: must be >= 1")
    if args.e2e < 0:
        p.error("--e2e: must be >= 0")
    if args.base_lr is not None and not args.base_lr > 0:
        p.error("--base-lr: must be > 0")
    if args.base_lr is not None and "--lr" in shlex.split(args.model_flags):
        p.error("--base-lr: --model-flags already sets --lr")
    if args.smoke:
        args.width, args.epochs = "0.125", "1"
        args.train_limit, args.test_limit = "256", "64"
    check_petra(p, args.petra)
    labels = [c[0] for c in CONFIGS + FORWARD_GRADIENT + EXTRAS]
    args.configs = CONFIGS
    if args.only:
        # Labels hold commas ("delayed, inputs only k=1"): a comma ends a
        # label only where the text so far is one.
        wanted, part = [], ""
        for piece in args.only.split(","):
            part = f"{part},{piece}" if part else piece
            if part.strip() in labels:
                wanted.append(part.strip())
                part = ""
        if part.strip():
            p.error(f"--only: unknown {part.strip()!r}; choose from {labels}")
        args.configs = [c for c in CONFIGS + FORWARD_GRADIENT + EXTRAS
                        if c[0] in wanted]
    return args


def main(argv):
    args = parse_args(argv)
    cores = os.cpu_count()
    transformer = args.arch in ("revvit", "vit")
    common = (["--arch", args.arch] +
              ([] if transformer else ["--width", args.width]) +
              ["--dataset", "fashion_mnist", "--epochs", args.epochs,
               "--seed", args.seed, "--train-limit", args.train_limit,
               "--test-limit", args.test_limit] +
              shlex.split(args.model_flags))
    if args.smoke and "--micro-batch" not in common:
        common += ["--micro-batch", "8"]
    # (label, stages, flags, threads) of every run, in order.
    plan = []
    for label, flags in args.configs:
        if args.base_lr is not None:
            k = (int(flags[flags.index("--accumulation") + 1])
                 if "--accumulation" in flags else 1)
            flags = flags + ["--lr", f"{args.base_lr * k:g}"]
        if "--stages" in flags:
            plan.append((label, "1", flags, args.backprop_threads))
            continue
        if args.e2e > 0 and "forward_gradient" not in flags:
            flags = flags + ["--e2e-diagnostics", str(args.e2e)]
        for stages in args.stages.split(","):
            plan.append((label, stages, ["--stages", stages] + flags, 1))
    rows = []
    start = time.time()
    for label, stages, flags, threads in plan:
        name = f"{label} on {stages} stages"
        if not args.quiet:
            print(f"accuracy: {name} ...", file=sys.stderr, flush=True)
        try:
            r = train(args.petra, common + flags, threads, args.timeout)
        except BenchError as e:
            # A run that diverges is a result too (random guesses may).
            r = {"failed": str(e).strip().splitlines()[-1]}
        rows.append((label, stages, common + flags, r))
        if not args.quiet:
            print(f"accuracy: {name}: " +
                  (f"failed: {r['failed']}" if "failed" in r else
                   f"{100 * r['test_accuracy']:.2f}% in "
                   f"{r['bench_wall_seconds']:.0f} s"), file=sys.stderr,
                  flush=True)
    total = time.time() - start

    reference = next((r["test_accuracy"] for label, _, _, r in rows
                      if label == "backprop" and "failed" not in r), None)
    size = (args.model_flags or "default sizes") if transformer else \
        f"width {args.width}" + (f", {args.model_flags}"
                                 if args.model_flags else "")
    extra = shlex.split(args.model_flags)
    micro_batch = (extra[extra.index("--micro-batch") + 1]
                   if "--micro-batch" in extra[:-1] else "64")
    print(f"{args.arch} (mnist variant, {size}) on Fashion-MNIST, "
          f"{args.epochs} epochs, seed {args.seed}, micro-batch {micro_batch}"
          + (f", lr {args.base_lr:g} x k (k: the accumulation)"
             if args.base_lr is not None else "") +
          f". Whole sweep: {total / 60:.1f} min on {cores} cores.\n")
    print("| training | stages | test accuracy | vs backprop | samples/s "
          "| minutes |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, stages, _, r in rows:
        if "failed" in r:
            print(f"| {label} | {stages} | failed: {r['failed']} | | | |")
            continue
        delta = ("" if reference is None or label == "backprop" else
                 f"{100 * (r['test_accuracy'] - reference):+.2f} pts")
        print(f"| {label} | {stages} | {100 * r['test_accuracy']:.2f}% "
              f"| {delta} | {r['samples_per_second']:.0f} "
              f"| {r['bench_wall_seconds'] / 60:.1f} |")
    if reference is not None:
        print()
        for stages in args.stages.split(","):
            petra = [(r["test_accuracy"], label) for label, st, _, r in rows
                     if label.startswith("PETRA") and st == stages
                     and "failed" not in r]
            if petra:
                best, label = max(petra)
                print(f"Best PETRA on {stages} stages: {label}, "
                      f"{100 * best:.2f}%, {100 * (best - reference):+.2f} "
                      f"points from backprop.")
    checked = [(label, stages, r) for label, stages, _, r in rows
               if "failed" not in r and any("end_to_end_cosine" in e
                                            for e in r["epochs"])]
    if checked:
        print()
        print(f"End-to-end gradient check (Figure 5), every {args.e2e} "
              "steps: per epoch, each stage's mean cosine similarity of its "
              "applied gradient to the true end-to-end one (stage 0 first), "
              "and their mean.")
        print()
        print("| training | stages | epoch | cosine per stage | mean |")
        print("|---|---:|---:|---|---:|")
        for label, stages, r in checked:
            for e in r["epochs"]:
                c = e.get("end_to_end_cosine")
                if not c:
                    continue
                print(f"| {label} | {stages} | {e['epoch']} | "
                      f"{' '.join(f'{x:.3f}' for x in c)} | "
                      f"{sum(c) / len(c):.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"total_seconds": total,
                       "runs": [{"label": l, "stages": st, "flags": fl,
                                 "report": r}
                                for l, st, fl, r in rows]}, f, indent=2)
    return 0


if __name__ == "__main__":
    main_guard("accuracy", main)
