#!/usr/bin/python3
"""How to use N devices (64 by default, 8 per host) on one network: `petra
simulate`'s prediction for every split into R replicas of a J-stage PETRA
pipeline, beside pure per-block PETRA (R = 1, one device per block) and
plain data parallelism (DDP: J = 1, R = N, each step all-reduced).

Nothing is trained: stage costs are the simulator's FLOPs estimate at
--device-flops-per-second, links and the all-reduce at the given
bandwidths (inside a host, across hosts). Each row names what binds it.
"""

import argparse
import json
import sys

from bench_common import add_petra_arg, check_petra, main_guard, run

NETWORKS = {
    "revnet50": ["--arch", "revnet50"],
    "revvit-b": ["--arch", "revvit", "--embed-dim", "768", "--depth", "12",
                 "--heads", "12", "--mlp-ratio", "4", "--patch-size", "16",
                 "--stem", "patch"],
}


def simulate(petra, flags, timeout):
    out = run([petra, "simulate", "--json"] + flags, timeout)
    return json.loads(out)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_petra_arg(p)
    p.add_argument("--networks", default="revnet50,revvit-b",
                   help=f"comma-separated, of {', '.join(NETWORKS)}")
    p.add_argument("--devices", type=int, default=64)
    p.add_argument("--devices-per-host", type=int, default=8)
    p.add_argument("--device-flops-per-second", type=float, default=1e14,
                   help="sustained FLOP/s of one device (default 1e14, a "
                        "recent GPU in bf16)")
    p.add_argument("--link-bandwidth", type=float, default=1e11,
                   help="bytes/s each way inside a host (default 1e11, "
                        "NVLink-class)")
    p.add_argument("--cross-host-bandwidth", type=float, default=2.5e10,
                   help="bytes/s each way between hosts (default 2.5e10, "
                        "200 Gb/s)")
    p.add_argument("--micro-batch", type=int, default=64)
    p.add_argument("--micro-batches-per-replica", type=int, default=64)
    p.add_argument("--stage-counts", default="1,2,4,8,16",
                   help="J of the R x J splits (R = devices / J), besides "
                        "per-block")
    p.add_argument("--timeout", type=int, default=600)
    args = p.parse_args(argv)
    check_petra(p, args.petra)
    nets = args.networks.split(",")
    for n in nets:
        if n not in NETWORKS:
            p.error(f"--networks: '{n}' is not one of {', '.join(NETWORKS)}")
    if args.devices < 1 or args.devices_per_host < 1:
        p.error("--devices and --devices-per-host must be >= 1")
    counts = [int(x) for x in args.stage_counts.split(",")]
    common = ["--device-flops-per-second", f"{args.device_flops_per_second:g}",
              "--devices-per-host", str(args.devices_per_host),
              "--link-bandwidth", f"{args.link_bandwidth:g}",
              "--cross-host-bandwidth", f"{args.cross_host_bandwidth:g}",
              "--micro-batch", str(args.micro_batch)]
    print(f"{args.devices} devices, {args.devices_per_host} per host, "
          f"{args.device_flops_per_second:g} FLOP/s each; links "
          f"{args.link_bandwidth:g} B/s inside a host, "
          f"{args.cross_host_bandwidth:g} B/s across (each way); micro-batch "
          f"{args.micro_batch}, {args.micro_batches_per_replica} micro-batches "
          f"per replica, an all-reduce every step (k = 1). Each row: `petra "
          f"simulate --json {' '.join(common)}` with the network's flags and "
          f"the row's `--stages J --replicas R --micro-batches "
          f"R*{args.micro_batches_per_replica} --schedule S` (one device per "
          f"stage of every replica).\n")
    for net in nets:
        print(f"bench: {net}", file=sys.stderr)
        rows = []

        def one(label, stages, replicas, schedule):
            flags = NETWORKS[net] + common + [
                "--stages", str(stages), "--replicas", str(replicas),
                "--schedule", schedule,
                "--micro-batches",
                str(replicas * args.micro_batches_per_replica)]
            # Without --devices: one device per stage of every replica.
            doc = simulate(args.petra, flags, args.timeout)
            j = doc["inputs"]["stages"]
            r = doc["schedules"][0]
            rows.append((label, replicas, j, replicas * j,
                         r["steady_samples_per_second"],
                         r["mean_device_utilization"], r["bound"]))
            return j

        one("DDP (one stage a copy)", 1, args.devices, "backprop")
        # Per-block: J is the network's block count.
        blocks = one("PETRA per block, one copy", "per-block", 1, "petra")
        if args.devices // blocks > 1:
            one(f"PETRA per block, {args.devices // blocks} copies",
                "per-block", args.devices // blocks, "petra")
        for j in counts:
            if j < 2 or j >= blocks or args.devices % j:
                continue
            one(f"PETRA {args.devices // j} x {j}", j, args.devices // j,
                "petra")
        ddp = rows[0][4]
        print(f"### {net}\n")
        print("| split | R | J | devices | samples/s (steady) | vs DDP "
              "| device utilisation | bound by |")
        print("|---|---:|---:|---:|---:|---:|---:|---|")
        best = max(rows, key=lambda x: x[4])
        for label, r, j, d, rate, util, bound in rows:
            mark = " **(best)**" if (label, r, j) == best[:3] else ""
            print(f"| {label}{mark} | {r} | {j} | {d} | {rate:,.0f} | "
                  f"{rate / ddp:.2f}x | {100 * util:.1f}% | {bound} |")
        print()
    return 0


if __name__ == "__main__":
    main_guard("replicas_plan", main)
