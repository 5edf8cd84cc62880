#!/usr/bin/python3
"""Which of PETRA's approximations destabilises a deep pipeline: the same
job, one stage per block, trained briefly at a learning rate backprop
takes without warm-up, with each buffer configuration of the paper's
Table 4 in turn.

Each run is `petra train --max-steps N` from the same seed; a run either
trains (its test accuracy and training loss are printed) or stops on the
first NaN or infinite value, and then the micro-batch and stage where it
did are printed. The configurations differ only in what a stage keeps
between a micro-batch's forward and its backward:
  backprop           exact gradients (one stage; the reference)
  inputs + weights   delayed gradients at the weights and input of the
                     forward (PipeDream): staleness only
  inputs only        the input kept, the gradient at the current weights
  weights only       the input rebuilt with, and the gradient at, the
                     weights of the forward
  PETRA (neither)    the input rebuilt with the current weights
"""

import argparse
import re
import shlex
import sys

from bench_common import (BenchError, add_petra_arg, check_petra,
                          main_guard, train_report)

CONFIGS = [
    ("backprop", ["--mode", "backprop", "--stages", "1"]),
    ("inputs + weights (PipeDream)",
     ["--mode", "delayed", "--stash-inputs", "--stash-weights"]),
    ("inputs only", ["--mode", "delayed", "--stash-inputs"]),
    ("weights only", ["--mode", "delayed", "--stash-weights"]),
    ("PETRA (neither)", ["--mode", "petra"]),
]

DIVERGED = re.compile(r"stage (\d+), micro-batch (\d+): [^\n]*NaN or Inf")


def train(petra, flags, timeout):
    """(test accuracy, train loss, None) or (None, None, (micro-batch,
    stage)) where the run stopped on a NaN or infinite value."""
    try:
        r = train_report(petra, ["--runner", "in-process",
                                 "--threads-per-stage", "1"] + flags,
                         timeout)
    except BenchError as e:
        m = DIVERGED.search(str(e))
        if m is None:
            raise
        return None, None, (int(m.group(2)), int(m.group(1)))
    return r["test_accuracy"], r.get("train_loss"), None


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_petra_arg(p)
    p.add_argument("--job-flags",
                   default="--arch revvit --patch-size 7 --optimizer sgd --lr 0.1 "
                           "--delay-lr-power 0",
                   help="the job (default: revvit, 16 tokens, SGD lr 0.1)")
    p.add_argument("--max-steps", type=int, default=200)
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--smoke", action="store_true",
                   help="seconds-long: 4 steps")
    args = p.parse_args(argv)
    if args.smoke:
        args.max_steps = 4
    if args.max_steps < 1:
        p.error("--max-steps: must be >= 1")
    check_petra(p, args.petra)
    common = shlex.split(args.job_flags) + [
        "--dataset", "fashion_mnist", "--seed", "1", "--epochs", "1",
        "--warmup-epochs", "0", "--test-limit", "1000",
        "--max-steps", str(args.max_steps)]
    print(f"`petra train {args.job_flags}`, no warm-up, {args.max_steps} "
          "steps of 64 samples, one stage per block (backprop: one stage), "
          "test accuracy on 1000 test images.\n")
    print("| stage keeps | outcome | test accuracy | train loss |")
    print("|---|---|---:|---:|")
    for label, flags in CONFIGS:
        stages = [] if "--stages" in flags else ["--stages", "per-block"]
        print(f"staleness: {label} ...", file=sys.stderr, flush=True)
        acc, loss, stopped = train(args.petra, common + stages + flags,
                                   args.timeout)
        if stopped is not None:
            mb, stage = stopped
            print(f"| {label} | diverged: NaN at micro-batch {mb}, stage "
                  f"{stage} | | |")
        else:
            loss_text = "" if loss is None else f"{loss:.4f}"
            print(f"| {label} | trained | {100 * acc:.2f}% | {loss_text} |")
    return 0


if __name__ == "__main__":
    main_guard("staleness", main)
