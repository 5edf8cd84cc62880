#!/usr/bin/python3
"""Partition benchmark: how well the default split of `--stages N` balances.

For each network, measures every block's forward + backward time on this
machine (`petra profile --stages per-block --threads 1`, one core as a
stage of a 2-stage job on 2 cores gets) and sets three splits into J
stages side by side: the default (`--partition-cost estimated`: FLOPs plus
the elements of memory-bound layers), FLOPs alone (`--partition-cost
flops`, the default before), and the best split for the measured times
(`petra profile --balance J`). Each split is scored by its slowest stage
under the measured times, which is what bounds a pipeline's throughput;
"vs best" is that time over the best split's (1.00 is as good as a
measured profile).
"""

import argparse
import json
import os
import re
import sys
import tempfile

from bench_common import BenchError, add_petra_arg, check_petra, main_guard, run

# (label, model flags shared by model-info and profile): the networks.
NETWORKS = [
    ("revnet18 w0.25 28x28 (main job)",
     ["--arch", "revnet18", "--width", "0.25", "--variant", "mnist"]),
    ("revnet18 w1 28x28", ["--arch", "revnet18", "--width", "1",
                           "--variant", "mnist"]),
    ("revnet18 w0.25 32x32", ["--arch", "revnet18", "--width", "0.25",
                              "--variant", "cifar"]),
    ("revnet34 w0.25 28x28", ["--arch", "revnet34", "--width", "0.25",
                              "--variant", "mnist"]),
    ("resnet18 w0.25 28x28", ["--arch", "resnet18", "--width", "0.25",
                              "--variant", "mnist"]),
    ("irevnet18 w0.25 32x32", ["--arch", "irevnet18", "--width", "0.25",
                               "--variant", "cifar"]),
    ("revvit D64 L6 28x28/4", ["--arch", "revvit", "--variant", "mnist"]),
]
SMOKE_NETWORKS = [("revnet18 w0.125 28x28",
                   ["--arch", "revnet18", "--width", "0.125",
                    "--variant", "mnist"])]


def profile(petra, flags, stage_counts, batch, repeats, timeout):
    """One measurement: each block's forward + backward seconds, and the
    split `petra profile --balance` finds for them, per stage count."""
    with tempfile.TemporaryDirectory(prefix="petra-partition-") as d:
        path = os.path.join(d, "profile.json")
        out = run([petra, "profile", "--dataset", "synthetic", "--stages",
                   "per-block", "--threads", "1", "--micro-batch", str(batch),
                   "--warmup", "1", "--repeats", str(repeats), "--balance",
                   ",".join(str(j) for j in stage_counts), "--output", path]
                  + flags, timeout)
        with open(path) as f:
            stages = json.load(f)["stages"]
    seconds = [s["forward_seconds"] + s["backward_seconds"] for s in stages]
    best = {}
    for j in stage_counts:
        m = re.search(r"balanced for %d stage\(s\): --split-at ([0-9,]+)" % j,
                      out)
        if not m:
            raise BenchError(f"no --split-at for {j} stages in:\n{out}")
        best[j] = [0] + [int(b) for b in m.group(1).split(",")]
    return seconds, best


def planned_starts(petra, flags, stages, cost, timeout):
    """Where each stage of the split `cost` plans begins."""
    out = run([petra, "model-info", "--json", "--stages", str(stages),
               "--partition-cost", cost] + flags, timeout)
    return [s["blocks"][0] for s in json.loads(out)["stages"]]


def slowest(seconds, starts):
    """The slowest stage's seconds when stages begin at `starts`."""
    ends = starts[1:] + [len(seconds)]
    return max(sum(seconds[b:e]) for b, e in zip(starts, ends))


def split_text(starts):
    return ",".join(str(s) for s in starts[1:])


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_petra_arg(p)
    p.add_argument("--stages", default="2,4",
                   help="stage counts J, comma-separated (default 2,4)")
    p.add_argument("--micro-batch", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5,
                   help="micro-batches timed per block (median; default 5)")
    p.add_argument("--smoke", action="store_true",
                   help="one small network, for CI")
    p.add_argument("--timeout", type=float, default=1800)
    a = p.parse_args(argv)
    check_petra(p, a.petra)
    try:
        a.stage_counts = [int(s) for s in a.stages.split(",")]
    except ValueError:
        p.error(f"--stages: '{a.stages}' is not a comma-separated list of "
                "integers")
    if any(j < 2 for j in a.stage_counts):
        p.error("--stages: every count must be at least 2")
    if a.micro_batch < 1 or a.repeats < 1:
        p.error("--micro-batch and --repeats must be at least 1")
    return a


def main(argv):
    a = parse_args(argv)
    networks = SMOKE_NETWORKS if a.smoke else NETWORKS
    print(f"micro-batch {a.micro_batch}, 1 thread per stage, median of "
          f"{a.repeats} timed micro-batches per block")
    print()
    print("| network | J | default split | vs best | FLOPs-only split "
          "| vs best | best split (measured) |")
    print("|---|---:|---|---:|---|---:|---|")
    for label, flags in networks:
        print(f"partition: {label}", file=sys.stderr)
        counts = [j for j in a.stage_counts if j <= len(planned_starts(
            a.petra, flags, "per-block", "estimated", a.timeout))]
        seconds, best = profile(a.petra, flags, counts, a.micro_batch,
                                a.repeats, a.timeout)
        for j in counts:
            default = planned_starts(a.petra, flags, j, "estimated", a.timeout)
            flops = planned_starts(a.petra, flags, j, "flops", a.timeout)
            floor = slowest(seconds, best[j])
            print(f"| {label} | {j} | {split_text(default)} | "
                  f"{slowest(seconds, default) / floor:.2f} | "
                  f"{split_text(flops)} | "
                  f"{slowest(seconds, flops) / floor:.2f} | "
                  f"{split_text(best[j])} |")
    return 0


if __name__ == "__main__":
    main_guard("partition.py", main)
