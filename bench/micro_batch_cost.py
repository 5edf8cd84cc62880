#!/usr/bin/python3
"""What a micro-batch costs beyond its arithmetic (issue 67): the same
optimizer steps of 32 samples, fed as micro-batches of 1, 2, 4, 8, 16 and
32 (k = 32 / micro-batch accumulated), on 2 stages, in process and on the
fleet (stage servers on loopback, shared memory between them), for the
small RevLM of the language-model section and RevNet18 on Fashion-MNIST.

Each run is `petra train --report`; its training rate gives the time one
micro-batch takes a stage, t(b) = b / (samples per second). A least-squares
line t(b) = c0 + c1 b through the six points splits it into the fixed cost
of a micro-batch, c0 (messages, encoding, allocations, queue hand-offs,
optimizer bookkeeping, per-op dispatch: everything that does not grow with
its samples), and the cost of a sample, c1. The stage timers split t(b)
further: each stage's forward and backward wall seconds (the report's
forward_seconds + backward_seconds, over its micro-batches) are its
compute, per-op dispatch and optimizer included; the slowest stage's is
the compute column, and t(b) less it is what the micro-batch spends
outside any computation (messages, hand-offs, waiting for the other
stage). The same line through the compute times splits c0 into its compute
and its outside part. Prints one Markdown table per network: each row's
rate, its ratio to micro-batch 32's (issue 67's goals: 0.8 at 1, 0.9 at 2),
the split and its final metric, then the lines per runner.

CPU a micro-batch: the process's CPU time (every thread: on the fleet the
stage servers' messaging threads too, `petra train --runner fleet` runs
its fleet in one process) of each row's run less that of the same run on
an eighth of the samples, over the micro-batches between them: start-up,
data loading and the evaluation cancel out. In process it is the
computation's; on the fleet the excess over it is the messages' CPU,
which on 2 cores slows the computation it shares them with.
"""

import argparse
import json
import resource
import sys

from bench_common import add_petra_arg, check_petra, main_guard, train_report

MICRO_BATCHES = [1, 2, 4, 8, 16, 32]
SAMPLES_PER_STEP = 32
RUNNERS = ["in-process", "fleet"]
# (name, flags, samples a "sample" counts: tokens per sequence for a
# language model, whose rate petra reports in tokens).
NETWORKS = {
    "revlm": (["--arch", "revlm", "--embed-dim", "64", "--depth", "4",
               "--heads", "4", "--seq-len", "64"], 64),
    "revnet18": (["--arch", "revnet18", "--width", "0.25", "--dataset",
                  "fashion_mnist"], 1),
}
SMOKE = {
    "revlm": (["--arch", "revlm", "--embed-dim", "16", "--depth", "2",
               "--heads", "2", "--seq-len", "16"], 16),
    "revnet18": (["--arch", "revnet18", "--width", "0.125", "--dataset",
                  "synthetic"], 1),
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_petra_arg(p)
    p.add_argument("--networks", default="revlm,revnet18",
                   help="comma-separated: revlm, revnet18 (default both)")
    p.add_argument("--runners", default=",".join(RUNNERS),
                   help="comma-separated: in-process, fleet (default both)")
    p.add_argument("--train-limit", type=int, default=5120,
                   help="training samples (sequences for revlm) of the one "
                        "epoch each run trains (default 5120: 160 steps)")
    p.add_argument("--seed", default="1")
    p.add_argument("--smoke", action="store_true",
                   help="seconds-long: tiny models, 256 samples, micro-"
                        "batches 1, 4 and 32")
    p.add_argument("--timeout", type=int, default=3600)
    p.add_argument("--json", help="write every run's report to this file")
    a = p.parse_args(argv)
    check_petra(p, a.petra)
    a.networks = [n for n in a.networks.split(",") if n]
    a.runners = [r for r in a.runners.split(",") if r]
    for n in a.networks:
        if n not in NETWORKS:
            p.error(f"--networks: unknown network {n!r} (revlm, revnet18)")
    for r in a.runners:
        if r not in RUNNERS:
            p.error(f"--runners: unknown runner {r!r} (in-process, fleet)")
    if a.train_limit < SAMPLES_PER_STEP:
        p.error(f"--train-limit must be at least {SAMPLES_PER_STEP}")
    return a


def fit(points):
    """Least squares t = c0 + c1 b through (b, t); (c0, c1)."""
    n = len(points)
    if n < 2:
        return float("nan"), float("nan")
    mb = sum(b for b, _ in points) / n
    mt = sum(t for _, t in points) / n
    var = sum((b - mb) ** 2 for b, _ in points)
    c1 = sum((b - mb) * (t - mt) for b, t in points) / var if var else 0.0
    return mt - c1 * mb, c1


def children_cpu():
    """CPU seconds (user + system) of every child waited for so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed_report(petra, flags, timeout):
    """The run's report, and the CPU seconds it took."""
    before = children_cpu()
    r = train_report(petra, flags, timeout)
    return r, children_cpu() - before


def slowest_compute(report):
    """Seconds a micro-batch spends computing on the busiest stage: its
    forward and backward seconds over the micro-batches it forwarded."""
    worst = 0.0
    for s in report.get("stages", []):
        n = s.get("forward_count", 0)
        if n > 0:
            worst = max(worst, (s.get("forward_seconds", 0.0) +
                                s.get("backward_seconds", 0.0)) / n)
    return worst


def main(argv):
    a = parse_args(argv)
    networks = SMOKE if a.smoke else NETWORKS
    micro_batches = [1, 4, 32] if a.smoke else MICRO_BATCHES
    limit = 128 if a.smoke else a.train_limit
    test_limit = 64 if a.smoke else 256
    reports = {}
    print("Command of each row: `petra train --quiet --stages 2 --epochs 1 "
          f"--train-limit {limit} --test-limit {test_limit} --seed {a.seed} "
          "--threads-per-stage 1 --runner RUNNER --micro-batch B "
          f"--accumulation {SAMPLES_PER_STEP}/B MODEL` (MODEL per network "
          "below): the same optimizer steps of "
          f"{SAMPLES_PER_STEP} samples in every row.\n")
    for name in a.networks:
        model, per_sample = networks[name]
        unit = "tokens/s" if per_sample > 1 else "samples/s"
        metric = "bits/byte" if per_sample > 1 else "test accuracy"
        print(f"### {name}\n\nMODEL: `{' '.join(model)}`\n")
        print(f"| runner | micro-batch | k | {unit} | of micro-batch "
              f"{max(micro_batches)}'s | ms a micro-batch | of it computing "
              f"(slowest stage), ms | outside computation, ms | CPU a "
              f"micro-batch, ms | {metric} |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        fits = []
        for runner in a.runners:
            points, rates, computes, cpus = [], {}, [], {}
            short = max(SAMPLES_PER_STEP, limit // 8 // SAMPLES_PER_STEP *
                        SAMPLES_PER_STEP)
            for b in micro_batches:
                print(f"micro_batch_cost: {name}, {runner}, micro-batch {b}"
                      " ...", file=sys.stderr, flush=True)

                def flags(samples):
                    return model + [
                        "--stages", "2", "--epochs", "1", "--train-limit",
                        str(samples), "--test-limit", str(test_limit),
                        "--seed", a.seed,
                        "--threads-per-stage", "1", "--runner", runner,
                        "--micro-batch", str(b), "--accumulation",
                        str(SAMPLES_PER_STEP // b)]
                r, cpu = timed_report(a.petra, flags(limit), a.timeout)
                _, cpu_short = timed_report(a.petra, flags(short), a.timeout)
                reports[f"{name} {runner} {b}"] = r
                cpus[b] = ((cpu - cpu_short) / ((limit - short) // b)
                           if limit > short else float("nan"))
                rate = r["samples_per_second"]
                rates[b] = rate
                # Seconds a micro-batch of b samples takes (a stage's tick).
                t = b * per_sample / rate if rate > 0 else float("nan")
                points.append((b, t))
                computes.append((b, slowest_compute(r)))
            top = rates[max(micro_batches)]
            for (b, t), (_, c) in zip(points, computes):
                r = reports[f"{name} {runner} {b}"]
                value = (r.get("bits_per_byte") if per_sample > 1
                         else r.get("test_accuracy"))
                shown = (f"{value:.3f}" if per_sample > 1
                         else f"{100 * value:.2f}%")
                print(f"| {runner} | {b} | {SAMPLES_PER_STEP // b} | "
                      f"{rates[b]:,.0f} | {rates[b] / top:.2f} | "
                      f"{1000 * t:.3f} | {1000 * c:.3f} | "
                      f"{1000 * (t - c):.3f} | {1000 * cpus[b]:.3f} | "
                      f"{shown} |")
            fits.append((runner, fit(points), fit(computes)))
        print("\nThe line t(b) = c0 + c1 b through each runner's points: "
              "c0 the fixed cost of a micro-batch, c1 a sample's; the same "
              "line through the compute times splits c0.\n")
        print("| runner | fixed cost a micro-batch (c0) | a sample (c1) | "
              "c0 against micro-batch 1's whole time | c0 computing | "
              "c0 outside computation |")
        print("|---|---:|---:|---:|---:|---:|")
        for runner, (c0, c1), (k0, _) in fits:
            print(f"| {runner} | {1000 * c0:.3f} ms | {1000 * c1:.4f} ms | "
                  f"{c0 / (c0 + c1):.0%} | {1000 * k0:.3f} ms | "
                  f"{1000 * (c0 - k0):.3f} ms |")
        print()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(reports, f, indent=1)
    return 0


if __name__ == "__main__":
    main_guard("micro_batch_cost", main)
