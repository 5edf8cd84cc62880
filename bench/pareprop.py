#!/usr/bin/python3
"""PaReprop's overlap on one stage: backward time of a stage of several
reversible blocks with and without --overlap-rebuild.

Runs `petra profile` on a job split so that one stage holds only reversible
blocks (by default revvit's depth-6 blocks: --split-at 1,7), once with the
blocks rebuilt one after the other and once with block i-1 rebuilt on a
second thread while block i's gradient is computed, alternating the two for
--rounds rounds, and prints the median backward time of that stage and the
speed-up. --threads is each run's torch threads: the overlap's second thread
needs a core of its own to gain anything. petra gives OpenBLAS the same
thread count as torch (model::SetComputeThreads); --blas-threads N also
measures with OPENBLAS_NUM_THREADS=N, which overrides that (0: the
library's own default, every core). For a stage on a GPU, put --devices
cuda in --job-flags: the helper then rebuilds on a second CUDA stream.
"""

import argparse
import json
import os
import shlex
import statistics
import sys

from bench_common import (BenchError, add_petra_arg, check_petra,
                          main_guard, run)

def backward_seconds(petra, flags, stage, timeout, blas_threads):
    env = dict(os.environ)
    env.pop("OPENBLAS_NUM_THREADS", None)
    if blas_threads:
        env["OPENBLAS_NUM_THREADS"] = blas_threads
    out = run([petra, "profile", "--json"] + flags, timeout, env=env)
    try:
        stages = json.loads(out)["stages"]
    except (ValueError, KeyError) as e:
        raise BenchError(f"petra profile printed no profile: {e}")
    if stage >= len(stages) or not stages[stage]["reversible"]:
        raise BenchError(f"stage {stage} is not a stage of reversible blocks "
                         f"(check --job-flags' --split-at)")
    return stages[stage]["backward_seconds"]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_petra_arg(p)
    p.add_argument("--job-flags",
                   default="--arch revvit --patch-size 7 --split-at 1,7",
                   help="the job profiled (default: revvit, its 6 blocks as "
                        "stage 1)")
    p.add_argument("--stage", type=int, default=1,
                   help="the stage of reversible blocks (default 1)")
    p.add_argument("--threads", default="1")
    p.add_argument("--blas-threads", default=None,
                   help="also measure with OPENBLAS_NUM_THREADS set to this "
                        "(0: OpenBLAS's own default, every core)")
    p.add_argument("--repeats", default="20",
                   help="micro-batches measured per run (median)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--timeout", type=int, default=1200)
    p.add_argument("--smoke", action="store_true",
                   help="seconds-long: 1 round of 2 micro-batches")
    args = p.parse_args(argv)
    if args.smoke:
        args.rounds, args.repeats = 1, "2"
    if args.rounds < 1:
        p.error("--rounds: must be >= 1")
    check_petra(p, args.petra)
    flags = shlex.split(args.job_flags) + [
        "--threads", args.threads, "--repeats", args.repeats, "--warmup", "2"]
    settings = [(f"{args.threads}, as torch (petra's setting)", None)]
    if args.blas_threads is not None:
        if not args.blas_threads.isdigit():
            p.error("--blas-threads: must be a whole number >= 0")
        n = int(args.blas_threads)
        n = n or os.cpu_count()
        settings.append((f"{n}, OPENBLAS_NUM_THREADS={n}" +
                         (" (the library's default)"
                          if n == os.cpu_count() else ""), str(n)))
    times = {(b, o): [] for b, _ in settings for o in (False, True)}
    for r in range(args.rounds):
        for blas, env in settings:
            for overlap in (False, True):
                print(f"pareprop: round {r + 1}/{args.rounds}, BLAS threads "
                      f"{blas}, {'overlapped' if overlap else 'sequential'} "
                      "...", file=sys.stderr, flush=True)
                times[(blas, overlap)].append(backward_seconds(
                    args.petra,
                    flags + (["--overlap-rebuild"] if overlap else []),
                    args.stage, args.timeout, env))
    print(f"Stage {args.stage} of `{args.job_flags}`, {args.threads} torch "
          f"thread(s), median of {args.rounds} round(s) of {args.repeats} "
          f"micro-batches, on {os.cpu_count()} cores.\n")
    print("| OpenBLAS threads | rebuild | backward ms (median) | rounds (ms) |")
    print("|---|---|---:|---|")
    for blas, _ in settings:
        for label, overlap in (("sequential", False),
                               ("overlapped (PaReprop)", True)):
            t = times[(blas, overlap)]
            print(f"| {blas} | {label} | {1e3 * statistics.median(t):.1f} | "
                  f"{', '.join(f'{1e3 * x:.1f}' for x in t)} |")
    print()
    for blas, _ in settings:
        seq = statistics.median(times[(blas, False)])
        ovl = statistics.median(times[(blas, True)])
        print(f"Speed-up of the stage's backward (OpenBLAS threads {blas}): "
              f"{seq / ovl:.2f}x ({100 * (seq / ovl - 1):+.0f}%).")
    return 0


if __name__ == "__main__":
    main_guard("pareprop", main)
