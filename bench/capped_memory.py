#!/usr/bin/python3
"""The memory argument, measured (issue 35): the same job under the same
per-device memory cap with plain backprop on one device, 1F1B-style stashing
(delayed gradients keeping inputs and weights) across J devices, and PETRA
across J devices. On the CPU a device is a process and its memory cap is
RLIMIT_DATA (`prlimit --data`: heap and private mappings, which is what
tensors take) set to the process's idle size plus --cap-mib. Reports, for
each configuration and cap, whether the job fit (trained to the end) or
failed, and its samples/s; Markdown, and JSON with --json.

The stage servers are told they have far more memory than the cap
(--memory-limit-bytes), so the coordinator's placement, which would refuse
a job its estimate says cannot fit, lets the allocations decide.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from bench_common import BenchError, main_guard, run
from throughput import Fleet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIGS = [
    # (name, where, mode flags)
    ("backprop, one device", "one", []),
    ("1F1B-style stashing (delayed, inputs + weights)", "fleet",
     ["--mode", "delayed", "--stash-inputs", "--stash-weights"]),
    ("PETRA", "fleet", ["--mode", "petra"]),
]


def idle_data_kib(bin_dir, workdir):
    """VmData of an idle stage server: libtorch's and gRPC's own mappings,
    on top of which the cap is given."""
    log = open(os.path.join(workdir, "probe.log"), "w+")
    p = subprocess.Popen([os.path.join(bin_dir, "petra-stage-server"),
                          "--listen", "127.0.0.1:0", "--metrics-listen", "",
                          "--insecure",
                          "--state-dir", os.path.join(workdir, "probe")],
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            log.seek(0)
            if "listening on port" in log.read():
                break
            if p.poll() is not None:
                raise BenchError("the probe stage server did not start")
            time.sleep(0.05)
        with open(f"/proc/{p.pid}/status") as f:
            m = re.search(r"VmData:\s+(\d+) kB", f.read())
        return int(m.group(1))
    finally:
        p.terminate()
        p.wait(timeout=30)
        log.close()


def one_device(bin_dir, job, limit, timeout):
    """Plain backprop (graph kept) in one process under the limit."""
    argv = ["/usr/bin/prlimit", f"--data={limit}", "--",
            os.path.join(bin_dir, "petra_bench_backprop"), "--threads", "2",
            "--warmup", "2"] + job
    try:
        out = subprocess.run(argv, capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"fit": False, "detail": f"did not end in {timeout} s"}
    m = re.search(r"([\d.]+) samples/s", out.stdout)
    if out.returncode == 0 and m:
        return {"fit": True, "samples_per_second": float(m.group(1))}
    text = (out.stdout + out.stderr).strip().splitlines()
    # libtorch's allocation failure, not the stack trace after it.
    said = [l for l in text if "memory" in l.lower() or "alloc" in l.lower()]
    detail = (said or text or [f"exit {out.returncode}"])[0]
    return {"fit": False, "detail": detail.strip()[:300]}


def on_fleet(bin_dir, job, mode, stages, limit, workdir, timeout):
    fleet = Fleet(bin_dir, stages, os.cpu_count() or 2, workdir,
                  prefix=["/usr/bin/prlimit", f"--data={limit}", "--"],
                  extra=["--memory-limit-bytes", "1000000000000000"])
    petra = os.path.join(bin_dir, "petra")
    try:
        watched = subprocess.run(
            [petra, "submit", "--coordinator", fleet.address, "--watch",
             "--stages", str(stages)] + mode + job, capture_output=True,
            text=True, timeout=timeout)
        lines = watched.stdout.strip().splitlines()
        if not lines or not lines[0].startswith("job-"):
            raise BenchError(f"petra submit failed:\n{watched.stdout[-2000:]}"
                             f"{watched.stderr[-2000:]}")
        status = json.loads(run([petra, "status", "--coordinator",
                                 fleet.address, "--json", lines[0]], 60))
    except subprocess.TimeoutExpired:
        return {"fit": False, "detail": f"did not end in {timeout} s"}
    finally:
        fleet.stop()
    if status.get("state") == "JOB_STATE_SUCCEEDED":
        return {"fit": True, "samples_per_second":
                float(status["progress"]["samples_per_second"])}
    error = status.get("error", {})
    message = error.get("message", "") if isinstance(error, dict) else str(error)
    return {"fit": False, "detail": message[:300] or status.get("state")}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--cap-mib", type=int, action="append",
                        help="memory per device above idle, MiB (repeat; "
                             "default: 300 and 1200)")
    parser.add_argument("--job", default="--arch revnet18 --width 1 "
                        "--dataset synthetic --variant cifar --micro-batch 128 "
                        "--train-limit 2048 --test-limit 256 --epochs 1 "
                        "--seed 1",
                        help="the job's flags (one string)")
    parser.add_argument("--timeout", type=int, default=900,
                        help="seconds per run")
    parser.add_argument("--json", help="also write every run here")
    args = parser.parse_args(argv)
    if args.stages < 2:
        parser.error("--stages must be at least 2")
    caps = args.cap_mib or [300, 1200]
    if any(c < 1 for c in caps):
        parser.error("--cap-mib must be at least 1")
    job = args.job.split()
    runs = []
    with tempfile.TemporaryDirectory(prefix="petra-capped-") as work:
        idle = idle_data_kib(args.bin_dir, work)
        for cap in caps:
            limit = idle * 1024 + cap * 1024 * 1024
            for name, where, mode in CONFIGS:
                print(f"capped: {cap} MiB: {name} ...", file=sys.stderr,
                      flush=True)
                d = tempfile.mkdtemp(dir=work)
                if where == "one":
                    r = one_device(args.bin_dir, job, limit, args.timeout)
                else:
                    r = on_fleet(args.bin_dir, job, mode, args.stages, limit,
                                 d, args.timeout)
                r.update({"cap_mib": cap, "config": name,
                          "devices": 1 if where == "one" else args.stages})
                print(f"capped:   {'fits' if r['fit'] else 'does not fit'}"
                      f" {r.get('samples_per_second', r.get('detail'))}",
                      file=sys.stderr, flush=True)
                runs.append(r)
    print(f"Job: `{args.job}`; each device capped at its idle data segment "
          f"({idle / 1024:.0f} MiB, an idle stage server's VmData) plus the "
          f"cap below (`prlimit --data`).\n")
    print("| cap per device | configuration | devices | fits | samples/s | "
          "why not |")
    print("|---:|---|---:|---|---:|---|")
    for r in runs:
        rate = f"{r['samples_per_second']:.1f}" if r["fit"] else "-"
        why = "" if r["fit"] else r["detail"].replace("|", "/")
        print(f"| {r['cap_mib']} MiB | {r['config']} | {r['devices']} | "
              f"{'yes' if r['fit'] else 'no'} | {rate} | {why} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)
    return 0


if __name__ == "__main__":
    main_guard("capped_memory", main)
