#!/usr/bin/python3
"""Throughput benchmark (the paper's Table 5, on this machine).

Starts J stage servers as separate processes, each pinned with `taskset` to
its share of the cores (stage j on core floor(j * cores / J)), and a
coordinator, all on loopback with ephemeral ports; trains the same job with
PETRA and with reversible backprop (the engine's backprop mode: the same
rebuild/recompute, no overlap of micro-batches) through them; and runs plain
backprop in one process (petra_bench_backprop, every core) and the
in-process runner (`petra train --runner in-process`, the transport-free
reference). Each configuration runs --repeats times; the median samples/s is
reported. Prints Markdown tables and, with --json, writes every run.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench_common import BenchError, main_guard, run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Fleet:
    """A coordinator and J pinned stage servers on loopback."""

    def __init__(self, bin_dir, stages, cores, workdir, prefix=(),
                 extra=()):
        """`prefix`: a command each stage server runs under (prlimit, say),
        or a function of the server's index giving it; `extra`: more flags
        for each."""
        self.procs = []
        self.logs = []
        addresses = []
        try:
            for j in range(stages):
                core = j * cores // stages
                threads = max(1, cores // stages)
                cpus = ",".join(str(core + t) for t in range(threads))
                port = self._start(
                    ["taskset", "-c", cpus] +
                    (prefix(j) if callable(prefix) else list(prefix)) +
                    [os.path.join(bin_dir, "petra-stage-server"),
                     "--listen", "127.0.0.1:0", "--metrics-listen", "",
                     "--threads", str(threads), "--insecure",
                     "--state-dir", os.path.join(workdir, f"stage{j}")] +
                    list(extra),
                    os.path.join(workdir, f"stage{j}.log"))
                addresses.append(f"127.0.0.1:{port}")
            self.port = self._start(
                [os.path.join(bin_dir, "petra-coordinator"),
                 "--listen", "127.0.0.1:0", "--metrics-listen", "",
                 "--stages", ",".join(addresses),
                 "--state-dir", os.path.join(workdir, "coordinator")],
                os.path.join(workdir, "coordinator.log"))
        except BaseException:
            self.stop()
            raise
        self.address = f"127.0.0.1:{self.port}"
        # Stage server j's address, and the cores it is pinned to.
        self.addresses = addresses
        self.cores = [sorted({j * cores // stages + t
                              for t in range(max(1, cores // stages))})
                      for j in range(stages)]

    def _start(self, argv, log_path):
        log = open(log_path, "w+")
        self.logs.append(log)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        deadline = time.time() + 30
        while time.time() < deadline:
            log.seek(0)
            m = re.search(r"listening on port (\d+)", log.read())
            if m:
                return int(m.group(1))
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        log.seek(0)
        name = next((a for a in argv
                     if os.path.basename(a).startswith("petra")), argv[0])
        raise BenchError(f"{name} did not start:\n{log.read()[-2000:]}")

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in self.logs:
            log.close()


def fleet_job(bin_dir, fleet, job_flags, mode, timeout):
    """Trains one job on the fleet; returns its last epoch's samples/s."""
    petra = os.path.join(bin_dir, "petra")
    # One client follows the job (`--watch`): polling with a new process
    # each time would load libtorch again and again on the measured cores.
    try:
        watched = subprocess.run(
            [petra, "submit", "--coordinator", fleet.address, "--watch",
             "--mode", mode] + job_flags, capture_output=True, text=True,
            timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"a {mode} job did not end in {timeout} s")
    lines = watched.stdout.strip().splitlines()
    if not lines or not lines[0].startswith("job-"):
        raise BenchError(f"petra submit failed ({mode}):\n"
                         f"{watched.stdout[-2000:]}{watched.stderr[-2000:]}")
    job_id = lines[0]
    job = json.loads(run([petra, "status", "--coordinator", fleet.address,
                          "--json", job_id], 60))
    if job.get("state") != "JOB_STATE_SUCCEEDED":
        raise BenchError(f"{job_id} ({mode}) ended {job.get('state')}: "
                         f"{job.get('error', '')}")
    return float(job["progress"]["samples_per_second"])


def in_process(bin_dir, job_flags, stages, cores, workdir, timeout):
    report = os.path.join(workdir, "in-process.json")
    run([os.path.join(bin_dir, "petra"), "train", "--runner", "in-process",
         "--quiet", "--threads-per-stage", str(max(1, cores // stages)),
         "--report", report] + job_flags, timeout, cwd=workdir)
    with open(report) as f:
        return float(json.load(f)["epochs"][-1]["samples_per_second"])


def plain_backprop(bin_dir, model_flags, micro_batches, cores, timeout):
    out = run([os.path.join(bin_dir, "petra_bench_backprop"),
               "--threads", str(cores), "--micro-batches", str(micro_batches)]
              + model_flags, timeout)
    m = re.search(r"([0-9.]+) samples/s", out)
    if not m:
        raise BenchError(f"petra_bench_backprop printed no rate:\n{out}")
    return float(m.group(1))


def profile(bin_dir, job_flags, workdir, timeout):
    """Measures every stage of the job on one core (one stage's share)."""
    path = os.path.join(workdir, "profile.json")
    run(["taskset", "-c", "0", os.path.join(bin_dir, "petra"), "profile",
         "--threads", "1", "--output", path] + job_flags, timeout)
    return path


def simulate(bin_dir, profile_path, schedule, cores, micro_batches, timeout):
    """The simulator's samples/s for one schedule on `cores` devices."""
    out = run([os.path.join(bin_dir, "petra"), "simulate", "--profile",
               profile_path, "--schedule", schedule, "--devices", str(cores),
               "--micro-batches", str(micro_batches), "--json"], timeout)
    return float(simulated_rate(json.loads(out), schedule))


def simulated_rate(result, schedule):
    for row in result["schedules"]:
        if row["schedule"] == schedule:
            return row["samples_per_second"]
    raise BenchError(f"petra simulate printed no {schedule} row")


def balanced_layouts(bin_dir, model_flags, stage_counts, workdir, timeout):
    """Profiles every block on one core; for each J, the --split-at that
    `petra profile --balance` prints (the coordinator's own balancing), and
    the blocks' forward + backward seconds."""
    path = os.path.join(workdir, "blocks.json")
    out = run(["taskset", "-c", "0", os.path.join(bin_dir, "petra"),
               "profile", "--threads", "1", "--output", path,
               "--stages", "per-block",
               "--balance", ",".join(map(str, stage_counts))] + model_flags,
              timeout)
    layouts = {}
    for m in re.finditer(r"balanced for (\d+) stage\(s\): (--split-at \S+|"
                         r"--stages 1)", out):
        layouts[int(m.group(1))] = m.group(2).split()
    missing = [j for j in stage_counts if j not in layouts]
    if missing:
        raise BenchError(f"petra profile printed no balanced split for J = "
                         f"{missing}:\n{out[-2000:]}")
    with open(path) as f:
        stages = json.load(f)["stages"]
    costs = [s.get("forward_seconds", 0) + s.get("backward_seconds", 0)
             for s in stages]
    return layouts, costs


def median_of(label, repeats, fn, progress):
    values = []
    for r in range(repeats):
        values.append(fn())
        progress(f"{label}: run {r + 1}/{repeats}: {values[-1]:.1f} samples/s")
    return statistics.median(values), values


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"),
                   help="where petra, petra-stage-server, petra-coordinator "
                        "and petra_bench_backprop are (default: build/bin)")
    p.add_argument("--stages", default="2,4",
                   help="comma-separated stage counts J (default 2,4)")
    p.add_argument("--repeats", type=int, default=3,
                   help="runs per configuration; the median is reported")
    p.add_argument("--cores", type=int, default=os.cpu_count(),
                   help="cores to share among the stages (default: all)")
    p.add_argument("--arch", default="revnet18")
    p.add_argument("--width", default="1,0.25",
                   help="comma-separated width multipliers, each measured "
                        "in full (default 1,0.25: the paper's RevNet18, "
                        "then our default job's, whose 16x less compute per "
                        "message byte shows what the transport costs)")
    p.add_argument("--dataset", default="fashion_mnist")
    p.add_argument("--micro-batch", type=int, default=64)
    p.add_argument("--micro-batches", default="30,200",
                   help="training micro-batches per epoch, one per --width "
                        "or one for all (default 30,200)")
    p.add_argument("--partition", default="profiled",
                   choices=["profiled", "estimated", "measured"],
                   help="profiled (default): `petra profile --stages "
                        "per-block` once, then the split that minimises the "
                        "slowest stage, passed to every run as --split-at; "
                        "estimated/measured: the coordinator balances by "
                        "FLOPs or by its own timing, per job")
    p.add_argument("--timeout", type=int, default=1800,
                   help="seconds any one run may take")
    p.add_argument("--simulate", action="store_true",
                   help="also profile each J (petra profile, one core) and "
                        "print petra simulate's prediction beside the "
                        "measured throughput")
    p.add_argument("--transports", default="shm,grpc",
                   help="data channels to run PETRA on the fleet with, "
                        "comma-separated, the first also for reversible "
                        "backprop (default shm,grpc; docs/DATA_PLANE.md)")
    p.add_argument("--json", help="write every run's numbers to this file")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    args.transport_list = args.transports.split(",")
    if not args.transport_list or any(
            t not in ("auto", "grpc", "grpc_bulk", "shm")
            for t in args.transport_list):
        p.error(f"--transports: '{args.transports}' is not a list of auto, "
                "grpc, grpc_bulk, shm")
    try:
        args.stage_counts = [int(s) for s in args.stages.split(",")]
    except ValueError:
        p.error(f"--stages: '{args.stages}' is not a list of integers")
    if any(j < 1 for j in args.stage_counts):
        p.error("--stages: every stage count must be >= 1")
    try:
        args.widths = [float(w) for w in args.width.split(",")]
        args.batches = [int(m) for m in args.micro_batches.split(",")]
    except ValueError:
        p.error("--width and --micro-batches take comma-separated numbers")
    if any(not 0 < w <= 8 for w in args.widths):
        p.error("--width: every width must be in (0, 8]")
    if len(args.batches) == 1:
        args.batches *= len(args.widths)
    if len(args.batches) != len(args.widths):
        p.error(f"--micro-batches: {len(args.batches)} values for "
                f"{len(args.widths)} widths")
    if any(m < 1 for m in args.batches):
        p.error("--micro-batches must be >= 1")
    for name in ("repeats", "cores", "micro_batch"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.cores > os.cpu_count():
        p.error(f"--cores {args.cores}: this machine has {os.cpu_count()}")
    # Some runs start in a scratch folder of their own.
    args.bin_dir = os.path.abspath(args.bin_dir)
    for tool in ("petra", "petra-stage-server", "petra-coordinator",
                 "petra_bench_backprop"):
        if not os.access(os.path.join(args.bin_dir, tool), os.X_OK):
            p.error(f"--bin-dir: no executable {tool} in {args.bin_dir} "
                    "(build first: bash scripts/build.sh)")
    if shutil.which("taskset") is None:
        p.error("taskset (util-linux) is not installed")
    return args


def measure_width(args, width, micro_batches, progress):
    """Every row of one network width: plain backprop, then each J."""
    model_flags = ["--arch", args.arch, "--width", f"{width:g}",
                   "--dataset", args.dataset,
                   "--micro-batch", str(args.micro_batch), "--seed", "1"]
    result = {"model_flags": model_flags, "micro_batches": micro_batches,
              "stages": {}, "layouts": {}}
    name = f"width {width:g}"
    plain, runs = median_of(
        f"{name}: plain backprop, one process", args.repeats,
        lambda: plain_backprop(args.bin_dir, model_flags, micro_batches,
                               args.cores, args.timeout), progress)
    result["plain_backprop"] = {"median": plain, "runs": runs}
    layouts = {}
    if args.partition == "profiled":
        progress(f"{name}: petra profile --stages per-block (one core)")
        with tempfile.TemporaryDirectory(prefix="petra-bench-") as workdir:
            layouts, result["block_seconds"] = balanced_layouts(
                args.bin_dir, model_flags, args.stage_counts, workdir,
                args.timeout)
    for j in args.stage_counts:
        layout = layouts.get(j) or [
            "--stages", str(j), "--partition-cost", args.partition]
        result["layouts"][str(j)] = layout

        # Two epochs; the second's rate is the one reported, once every
        # process has warmed up (thread pools, oneDNN's kernels).
        job_flags = model_flags + layout + [
            "--epochs", "2",
            "--train-limit", str(micro_batches * args.micro_batch),
            "--test-limit", str(args.micro_batch)]
        row = {}
        with tempfile.TemporaryDirectory(prefix="petra-bench-") as workdir:
            progress(f"{name}, J = {j}: starting {j} stage servers and a "
                     "coordinator")
            fleet = Fleet(args.bin_dir, j, args.cores, workdir)
            try:
                first = args.transport_list[0]
                for mode, transport in (
                        [("petra", t) for t in args.transport_list] +
                        [("backprop", first)]):
                    key = mode if transport == first else f"{mode}_{transport}"
                    flags = job_flags + ["--transport", transport]
                    row[key] = median_of(
                        f"{name}, J = {j}, {mode} on the fleet over "
                        f"{transport}", args.repeats,
                        lambda: fleet_job(args.bin_dir, fleet, flags, mode,
                                          args.timeout), progress)
            finally:
                fleet.stop()
            row["in_process"] = median_of(
                f"{name}, J = {j}, petra in-process", args.repeats,
                lambda: in_process(args.bin_dir, job_flags, j, args.cores,
                                   workdir, args.timeout), progress)
            predicted = {}
            if args.simulate:
                progress(f"{name}, J = {j}: petra profile and petra simulate")
                path = profile(args.bin_dir, job_flags, workdir, args.timeout)
                for mode in ("petra", "backprop"):
                    predicted[mode] = simulate(
                        args.bin_dir, path, mode, args.cores, micro_batches,
                        args.timeout)
        result["stages"][str(j)] = {
            k: {"median": v[0], "runs": v[1]} for k, v in row.items()}
        result["stages"][str(j)]["predicted"] = predicted
    return result


def main(argv):
    args = parse_args(argv)

    def progress(text):
        if not args.quiet:
            print(f"throughput: {text}", file=sys.stderr, flush=True)

    results = {"machine_cores": os.cpu_count(), "cores": args.cores,
               "repeats": args.repeats, "widths": {}}
    for width, micro_batches in zip(args.widths, args.batches):
        results["widths"][f"{width:g}"] = measure_width(
            args, width, micro_batches, progress)

    print(f"{args.arch} on {args.dataset}, micro-batch {args.micro_batch}; "
          "two epochs a run, the second timed; median of "
          f"{args.repeats} runs; stage j pinned to core "
          f"floor(j * {args.cores} / J); partition {args.partition}; "
          f"plain backprop on all {args.cores} cores.\n")
    for width, r in results["widths"].items():
        layouts = "; ".join(f"J = {j}: {' '.join(r['layouts'][str(j)])}"
                            for j in args.stage_counts)
        print(f"* width {width}: {r['micro_batches']} micro-batches an "
              f"epoch; {layouts}")
    print()
    first, others = args.transport_list[0], args.transport_list[1:]
    print(f"| width | J | plain backprop | reversible backprop (fleet, "
          f"{first}) | PETRA (fleet, {first}) | PETRA / rev. backprop "
          "| PETRA (in-process) | fleet / in-process "
          f"({first}) |" + "".join(f" PETRA (fleet, {t}) | fleet / "
                                   f"in-process ({t}) |" for t in others))
    print("|---:|---:|---:|---:|---:|---:|---:|---:|" + "---:|---:|" *
          len(others))
    for width, r in results["widths"].items():
        plain = r["plain_backprop"]["median"]
        for j in args.stage_counts:
            row = r["stages"][str(j)]
            petra, rev, local = (row["petra"]["median"],
                                 row["backprop"]["median"],
                                 row["in_process"]["median"])
            line = (f"| {width} | {j} | {plain:.1f} | {rev:.1f} | {petra:.1f} "
                    f"| {petra / rev:.2f}x | {local:.1f} "
                    f"| {petra / local:.2f} |")
            for t in others:
                other = row[f"petra_{t}"]["median"]
                line += f" {other:.1f} | {other / local:.2f} |"
            print(line)
    print("\nsamples/s throughout; PETRA / rev. backprop is the paper's "
          "speed-up; fleet / in-process is what the fleet keeps of the "
          "transport-free runner's rate, per data channel between the "
          "stages (docs/DATA_PLANE.md).")
    if args.simulate:
        print("\nThe simulator's prediction (`petra profile` of each stage on "
              "one core, then `petra simulate --profile FILE --devices "
              f"{args.cores}` with its default loopback link) against the "
              "measured medians above:\n")
        print("| width | J | schedule | predicted samples/s "
              "| measured samples/s | error |")
        print("|---:|---:|---|---:|---:|---:|")
        for width, r in results["widths"].items():
            for j in args.stage_counts:
                row = r["stages"][str(j)]
                for mode, label in (("petra", "PETRA"),
                                    ("backprop", "reversible backprop")):
                    pred, meas = row["predicted"][mode], row[mode]["median"]
                    print(f"| {width} | {j} | {label} | {pred:.1f} "
                          f"| {meas:.1f} "
                          f"| {100 * (pred - meas) / meas:+.1f}% |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    main_guard("throughput", main)
