#!/usr/bin/python3
"""Stock PyTorch on the same device: the yardstick for every GPU figure.

What: trains, with plain autograd backprop in one process (no stages, no
pipeline, no rebuild), the CIFAR-size networks of petra.models (the C++ zoo
in PyTorch, python/petra/models.py): ResNet18 (what a user with one GPU
trains; the same layers as torchvision's resnet18 with a 3x3 stride-1 stem
and no max-pool) and RevNet18 (the network our GPU figures train), on random
inputs and labels, SGD with Nesterov momentum 0.9. Each row warms up, then
times `--steps` optimizer steps and reports samples/s:

* fp32 at the given batch, NCHW (what `petra train` runs today);
* bf16 autocast with channels_last, at the same batch (what a user runs).

`--json FILE` writes the rows for bench/gpu_ratios.py, which divides our
figures by them. On the CPU it takes as many threads as `petra train`'s
stages use together (one per core; `--threads` to change), and says so:
Debian's torch would start with one.

Smoke run (seconds, on the CPU):
    bench/stock_pytorch.py --device cpu --batch 4 --width 0.125 --steps 1
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                os.pardir, "python"))
from petra import models  # noqa: E402  (after the sys.path change)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    p.add_argument("--batch", type=int, default=256, help="samples per step")
    p.add_argument("--width", type=float, default=1.0,
                   help="width multiplier of both networks")
    p.add_argument("--arch", default="resnet18,revnet18",
                   help="comma-separated petra.models architectures")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps")
    p.add_argument("--steps", type=int, default=30, help="timed steps")
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--threads", type=int, default=0,
                   help="torch's CPU threads; 0 (default): one per core, "
                        "as many as `petra train`'s stages use together")
    args = p.parse_args(argv)
    if args.threads < 0:
        p.error("--threads must be >= 0")
    if args.batch < 1 or args.warmup < 0 or args.steps < 1:
        p.error("--batch and --steps must be >= 1, --warmup >= 0")
    if not args.width > 0:
        p.error("--width must be > 0")
    for arch in args.arch.split(","):
        if arch not in models.ARCHITECTURES:
            p.error(f"--arch: unknown '{arch}' "
                    f"(one of {', '.join(models.ARCHITECTURES)})")
    try:
        torch.empty(1, device=args.device)
    except (RuntimeError, AssertionError) as e:
        p.error(f"--device {args.device}: not usable here ({e})")
    return args


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def samples_per_second(arch, args, bf16):
    """Trains `arch` on random data; returns the timed steps' samples/s."""
    device = torch.device(args.device)
    torch.manual_seed(1)
    model = models.build(arch, "cifar", args.width, 10).to(device)
    x = torch.randn(args.batch, *models.input_shape("cifar"), device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    if bf16:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9,
                          nesterov=True)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    sync(device)
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync(device)
    return args.batch * args.steps / (time.perf_counter() - start)


def main(argv):
    args = parse_args(argv)
    # Debian's torch starts with one thread on this machine while petra's
    # stages use every core between them: the yardstick gets the same.
    threads = args.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    rows = []
    for arch in args.arch.split(","):
        for bf16 in (False, True):
            precision = "bf16 autocast, channels_last" if bf16 else "fp32"
            print(f"stock_pytorch: {arch}, {precision} ...", file=sys.stderr,
                  flush=True)
            rows.append({"arch": arch, "precision": "bf16" if bf16 else "fp32",
                         "label": precision, "batch": args.batch,
                         "samples_per_second":
                             samples_per_second(arch, args, bf16)})
    name = (torch.cuda.get_device_name(torch.device(args.device))
            if args.device.startswith("cuda") else "cpu")
    print(f"Stock PyTorch {torch.__version__} on {name}: plain backprop, "
          f"CIFAR size, batch {args.batch}, width {args.width:g}, "
          f"{args.warmup} warm-up then {args.steps} timed steps, random "
          f"data, {torch.get_num_threads()} CPU thread(s):\n")
    print("| network | precision | samples/s |\n|---|---|---:|")
    for r in rows:
        print(f"| {r['arch']} | {r['label']} | "
              f"{r['samples_per_second']:,.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "torch": torch.__version__,
                       "threads": torch.get_num_threads(), "rows": rows},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
