#!/usr/bin/python3
"""Threads: samples/s of the same short job under each way of sharing the
cores between torch's intra-op threads and OpenBLAS's own pool.

Debian's libtorch runs its matrix products in OpenBLAS (pthread build),
which keeps a pool of its own beside torch's OpenMP threads. petra gives
OpenBLAS as many threads as torch (model::SetComputeThreads); this measures
that choice against OPENBLAS_NUM_THREADS=1 and =every core, for one stage
on every core (backprop) and for 2 stages of one thread each (PETRA), on
the local gRPC fleet and on the in-process runner. Each cell is the median
of --rounds runs of --max-steps optimizer steps; the rounds alternate the
settings so that drift on the machine touches them alike.
"""

import argparse
import os
import shlex
import statistics
import sys

from bench_common import (BenchError, add_petra_arg, check_petra,
                          main_guard, train_report)


def samples_per_second(petra, flags, env_blas, timeout):
    env = dict(os.environ)
    env.pop("OPENBLAS_NUM_THREADS", None)
    if env_blas is not None:
        env["OPENBLAS_NUM_THREADS"] = env_blas
    r = train_report(petra, flags, timeout, env=env)
    if "samples_per_second" not in r:
        raise BenchError("petra train's report has no samples_per_second")
    return r["samples_per_second"]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_petra_arg(p)
    p.add_argument("--job-flags",
                   default="--arch revvit --patch-size 7 --optimizer sgd --lr 0.02 "
                           "--delay-lr-power 0",
                   help="the job (default: revvit, 16 tokens)")
    p.add_argument("--max-steps", type=int, default=400)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--timeout", type=int, default=900)
    p.add_argument("--smoke", action="store_true",
                   help="seconds-long: 1 round of 4 steps")
    args = p.parse_args(argv)
    if args.smoke:
        args.rounds, args.max_steps = 1, 4
    if args.rounds < 1 or args.max_steps < 1:
        p.error("--rounds and --max-steps: must be >= 1")
    check_petra(p, args.petra)
    cores = os.cpu_count()
    common = shlex.split(args.job_flags) + [
        "--dataset", "fashion_mnist", "--seed", "1", "--test-limit", "64",
        "--max-steps", str(args.max_steps)]
    jobs = [("backprop, 1 stage", ["--mode", "backprop", "--stages", "1",
                                   "--threads-per-stage", str(cores)],
             cores),
            ("PETRA, 2 stages", ["--stages", "2", "--threads-per-stage", "1"],
             1)]
    runners = ["fleet", "in-process"]
    blas = [("as torch (petra)", None), ("1", "1"), (str(cores), str(cores))]
    cells = {}
    for r in range(args.rounds):
        for runner in runners:
            for job, flags, _ in jobs:
                for label, env in blas:
                    print(f"threads: round {r + 1}/{args.rounds}, {runner}, "
                          f"{job}, OpenBLAS {label} ...", file=sys.stderr,
                          flush=True)
                    cells.setdefault((runner, job, label), []).append(
                        samples_per_second(
                            args.petra,
                            common + ["--runner", runner] + flags, env,
                            args.timeout))
    print(f"`petra train {args.job_flags}`, {args.max_steps} steps of 64 "
          f"samples, median samples/s of {args.rounds} round(s), on {cores} "
          "cores.\n")
    print("| runner | job | torch threads per stage | " +
          " | ".join(f"OpenBLAS {label}" for label, _ in blas) + " |")
    print("|---|---|---:|" + "---:|" * len(blas))
    for runner in runners:
        for job, _, threads in jobs:
            row = [statistics.median(cells[(runner, job, label)])
                   for label, _ in blas]
            print(f"| {runner} | {job} | {threads} | " +
                  " | ".join(f"{x:.0f}" for x in row) + " |")
    return 0


if __name__ == "__main__":
    main_guard("threads", main)
