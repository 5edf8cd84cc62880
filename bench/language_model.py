#!/usr/bin/python3
"""Language models under PETRA (issue 50): bits per byte against backprop,
and memory per stage against a 1F1B pipeline that stashes.

Trains the same small RevLM on the same tokens of the embedded corpus
(GCIDE, bytes) with the same seed and recipe (`--recipe language_model`,
the default) by backprop on one stage, by PETRA on 2 stages and on one
stage per block, and by PETRA per block with accumulation k = 4 (the
paper's lever on staleness), each with `petra train --runner in-process`
(the fleet's engine and numbers). Then its non-reversible twin, gpt: by
backprop, and per block with delayed gradients that stash each micro-batch's
input and weights until its backward (PipeDream's 1F1B, the memory a
non-reversible pipeline needs), whose per-stage memory is set beside
PETRA's. And the stock-PyTorch peer (bench/lm_peer.py: gpt by plain
autograd on the same tokens with the same recipe). Prints one Markdown
table: validation bits per byte after the
same tokens, the gap to revlm's backprop, tokens/s, and the largest
stage's peak memory (parameters, optimizer state, activations kept, weight
stash).
"""

import argparse
import json
import os
import shlex
import sys
import tempfile
import time

from bench_common import (add_petra_arg, check_petra, main_guard, run,
                          train_report)

HERE = os.path.dirname(os.path.abspath(__file__))
PEER = "gpt, stock PyTorch (nanoGPT-style)"
CLOSED_2 = "revlm, PETRA, 2 stages, micro-batch 1, k=32"
CLOSED_PER_BLOCK = "revlm, PETRA, per block, micro-batch 1, k=32"
# Issue 50's goals: bits per byte within this much of backprop.
GOALS = [("revlm, PETRA, 2 stages", CLOSED_2, 0.02),
         ("revlm, PETRA, per block", CLOSED_PER_BLOCK, 0.05)]

# (label, flags): the one list of configurations.
CONFIGS = [
    ("revlm, backprop", ["--arch", "revlm", "--mode", "backprop",
                         "--stages", "1"]),
    ("revlm, PETRA, 2 stages", ["--arch", "revlm", "--mode", "petra",
                                "--stages", "2"]),
    # The exact delayed gradient (inputs and weights stashed): what the
    # delay alone costs, beside PETRA's rebuild with current weights.
    ("revlm, delayed, stashed (PipeDream), 2 stages",
     ["--arch", "revlm", "--mode", "delayed", "--stash-inputs",
      "--stash-weights", "--stages", "2"]),
    ("revlm, PETRA, per block", ["--arch", "revlm", "--mode", "petra",
                                 "--stages", "per-block"]),
    ("revlm, PETRA, per block, k=4",
     ["--arch", "revlm", "--mode", "petra", "--stages", "per-block",
      "--accumulation", "4"]),
    # The same 32 sequences a step (625 steps), in micro-batches of one:
    # the delay in optimizer steps falls 32-fold (what closes the gap).
    (CLOSED_2, ["--arch", "revlm", "--mode", "petra", "--stages", "2",
                "--micro-batch", "1", "--accumulation", "32"]),
    (CLOSED_PER_BLOCK, ["--arch", "revlm", "--mode", "petra", "--stages",
                        "per-block", "--micro-batch", "1",
                        "--accumulation", "32"]),
    ("gpt, backprop", ["--arch", "gpt", "--mode", "backprop",
                       "--stages", "1"]),
    ("gpt, 1F1B stashing inputs and weights (PipeDream), per block",
     ["--arch", "gpt", "--mode", "delayed", "--stash-inputs",
      "--stash-weights", "--stages", "per-block"]),
]
SMOKE_FLAGS = ["--embed-dim", "16", "--depth", "2", "--heads", "2",
               "--seq-len", "16", "--micro-batch", "8"]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_petra_arg(p)
    p.add_argument("--model-flags",
                   default="--embed-dim 64 --depth 4 --heads 4 --seq-len 64 "
                           "--micro-batch 32",
                   help="`petra train` flags of the model and batch, for "
                        "every run (default: %(default)s)")
    p.add_argument("--epochs", default="1")
    p.add_argument("--seed", default="1")
    p.add_argument("--train-limit", default="20000",
                   help="training sequences an epoch (default 20000)")
    p.add_argument("--test-limit", default="512",
                   help="validation sequences (default 512)")
    p.add_argument("--only", default="",
                   help="semicolon-separated labels of CONFIGS to run (the "
                        "labels hold commas; default all)")
    p.add_argument("--smoke", action="store_true",
                   help="seconds-long run: a 2-block model of width 16, "
                        "128 sequences of 16 bytes")
    p.add_argument("--timeout", type=int, default=7200)
    p.add_argument("--json", help="write every run's report to this file")
    args = p.parse_args(argv)
    check_petra(p, args.petra)
    labels = [label for label, _ in CONFIGS] + [PEER]
    args.only = [s.strip() for s in args.only.split(";") if s.strip()]
    for label in args.only:
        if label not in labels:
            p.error(f"--only: unknown configuration {label!r}; one of: "
                    + "; ".join(labels))
    return args


def peak_stage_bytes(report):
    return max((s.get("memory_bytes", {}).get("peak", 0)
                for s in report.get("stages", [])), default=0)


def print_goals(reports, base):
    """The gap to backprop against issue 50's goals, at the default
    micro-batch and with micro-batches of one (the same batch)."""
    if not base:
        return
    lines = []
    for default, closed, goal in GOALS:
        parts = []
        for label in (default, closed):
            r = reports.get(label)
            if r and r.get("bits_per_byte") is not None:
                gap = r["bits_per_byte"] - base["bits_per_byte"]
                parts.append(f"{label}: {gap:+.3f} "
                             f"({'within' if gap <= goal else 'outside'} "
                             f"the goal, {goal})")
        if parts:
            lines.append("* " + "; ".join(parts) + ".")
    if lines:
        print("\nGap to revlm backprop against the goals:\n")
        print("\n".join(lines))


def main(argv):
    args = parse_args(argv)
    model = SMOKE_FLAGS if args.smoke else shlex.split(args.model_flags)
    common = model + ["--epochs", args.epochs, "--seed", args.seed,
                      "--train-limit", "128" if args.smoke else
                      args.train_limit,
                      "--test-limit", "32" if args.smoke else args.test_limit,
                      "--runner", "in-process", "--threads-per-stage", "1"]
    print("Command of each row: `petra train --quiet " + " ".join(common) +
          " FLAGS` (FLAGS in the table).\n")
    rows, reports = [], {}
    for label, flags in CONFIGS:
        if args.only and label not in args.only:
            continue
        print(f"language_model: {label} ...", file=sys.stderr, flush=True)
        start = time.time()
        r = train_report(args.petra, common + flags, args.timeout)
        r["bench_wall_seconds"] = time.time() - start
        reports[label] = r
        rows.append((label, flags, r))
    peer = None
    if not args.only or PEER in args.only:
        # The stock-PyTorch yardstick, on the same tokens and recipe.
        print(f"language_model: {PEER} ...", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="petra-lm-peer-") as d:
            out = os.path.join(d, "peer.json")
            run([sys.executable, os.path.join(HERE, "lm_peer.py")] + model +
                ["--epochs", args.epochs, "--seed", args.seed,
                 "--train-limit", "128" if args.smoke else args.train_limit,
                 "--test-limit", "32" if args.smoke else args.test_limit,
                 "--json", out], args.timeout)
            with open(out) as f:
                peer = json.load(f)["epochs"][-1]
        reports[PEER] = peer
    base = reports.get("revlm, backprop")
    print("| run | FLAGS | stages | valid bits/byte | gap to revlm backprop "
          "| tokens/s | largest stage's peak memory |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for label, flags, r in rows:
        bpb = r.get("bits_per_byte")
        gap = (f"{bpb - base['bits_per_byte']:+.3f}"
               if base and bpb is not None and r is not base else "")
        print(f"| {label} | `{' '.join(flags)}` | {len(r.get('stages', []))} "
              f"| {bpb:.3f} | {gap} | {r.get('tokens_per_second', 0):,.0f} "
              f"| {peak_stage_bytes(r) / 2**20:.2f} MiB |")
    if peer:
        gap = (f"{peer['bits_per_byte'] - base['bits_per_byte']:+.3f}"
               if base else "")
        print(f"| {PEER} | `bench/lm_peer.py` with the model flags | 1 | "
              f"{peer['bits_per_byte']:.3f} | {gap} | "
              f"{peer['tokens_per_second']:,.0f} | |")
    print_goals(reports, base)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(reports, f, indent=1)
    return 0


if __name__ == "__main__":
    main_guard("language_model", main)
