#!/usr/bin/python3
"""Peer benchmark: our model zoo trained with plain PyTorch backprop.

What: trains the same network as the C++ model zoo (services/model: RevNet18,
RevNet34, RevNet50, ResNet18, ResNet34, ResNet50 in the ``mnist`` variant,
28x28x1 input, 3x3 stem without max-pool, 10 classes, with a width multiplier;
built by petra.models, python/petra/models.py, which
python/tests/models_test.py checks against the C++ build) on Fashion-MNIST with
the same recipe as a resolved PETRA job (services/job/job_spec_defaults.cc,
services/engine/{stage_worker,lr_schedule,job_plan}.cc,
services/data/{dataset,batches}.cc): SGD with Nesterov momentum 0.9, weight
decay 5e-4 on convolution and linear weights only, micro-batch 64, peak rate
0.1 * 64 / 256, cosine decay per step to 0, no warm-up below 10 epochs,
per-epoch seeded shuffle, last partial training batch dropped, per-channel
normalisation with the training split's statistics, and evaluation with
BatchNorm running statistics.

Why: it is the yardstick for the C++ engine. It runs standard autograd
backprop in one Python process (no pipeline, no stages, no reversible
rebuild) on the same cores and data, and reports training samples per second
(training time only, evaluation excluded) and test accuracy, so that
`petra train` can be compared with what plain PyTorch does on this machine.

Smoke run (a few seconds):
    bench/peer_pytorch.py --epochs 1 --train-limit 640 --test-limit 256
"""

import argparse
import gzip
import json
import math
import os
import struct
import sys
import time
import zlib

import numpy as np
import torch
import torch.nn.functional as F

# The model zoo lives in the repository's python/ package (petra.models).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                os.pardir, "python"))
from petra import models  # noqa: E402  (after the sys.path change)

DEFAULT_DATA_ROOT = "/usr/share/datasets/fashion-mnist"
ARCHITECTURES = ("revnet18", "revnet34", "revnet50",
                 "resnet18", "resnet34", "resnet50")
VARIANT = "mnist"
INPUT_SHAPE = models.input_shape(VARIANT)  # (1, 28, 28)
NUM_CLASSES = 10
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
SEED_STRIDE = 1000003  # services/data/batches.cc per-epoch shuffle seed
PROGRESS_SECONDS = 15.0


class UsageError(Exception):
    """Bad input (flags, data): reported in one line, exit code 2."""


# --------------------------------------------------------------------------
# The model: petra.models (python/petra/models.py), the C++ zoo in PyTorch.
# --------------------------------------------------------------------------

def build_network(arch, width):
    """The mnist variant of `arch`, as petra.models builds it.

    Its modules are created in the C++ order with the same initialisers as
    this script always used (He normal fan-out for convolutions, PyTorch's
    defaults for the classifier), so a seed gives the same initial weights
    as before the model moved to petra.models.
    """
    return models.build(arch, VARIANT, width, NUM_CLASSES)


def count_parameters(model):
    return sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------
# Data (services/data/dataset.cc, batches.cc).
# --------------------------------------------------------------------------

def read_maybe_gzipped(path):
    """The bytes of `path`, gunzipped when it is gzip."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise UsageError(f"{path}: cannot open ({e.strerror})") from None
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as e:
        raise UsageError(f"{path}: corrupt or truncated ({e})") from None


def first_existing(directory, name):
    for candidate in (name + ".gz", name):
        path = os.path.join(directory, candidate)
        if os.path.exists(path):
            return path
    return os.path.join(directory, name + ".gz")


def read_idx(images_path, labels_path):
    """uint8 images [N, 1, H, W] and int64 labels [N], validated."""
    images = read_maybe_gzipped(images_path)
    labels = read_maybe_gzipped(labels_path)
    if len(images) < 16 or struct.unpack(">I", images[:4])[0] != 0x803:
        raise UsageError(f"{images_path}: not an IDX image file "
                         "(bad magic number or too short)")
    if len(labels) < 8 or struct.unpack(">I", labels[:4])[0] != 0x801:
        raise UsageError(f"{labels_path}: not an IDX label file "
                         "(bad magic number or too short)")
    n, rows, cols = struct.unpack(">III", images[4:16])
    if len(images) != 16 + n * rows * cols:
        raise UsageError(f"{images_path}: header says {n} images of "
                         f"{rows}x{cols} but the file has {len(images)} "
                         "bytes (truncated?)")
    n_labels = struct.unpack(">I", labels[4:8])[0]
    if len(labels) != 8 + n_labels:
        raise UsageError(f"{labels_path}: header says {n_labels} labels but "
                         f"the file has {len(labels) - 8} (truncated?)")
    if n_labels != n:
        raise UsageError(f"{images_path} has {n} images but {labels_path} "
                         f"has {n_labels} labels")
    if (1, rows, cols) != INPUT_SHAPE:
        raise UsageError(f"{images_path}: images are {rows}x{cols}, the "
                         "mnist variant expects 28x28")
    x = np.frombuffer(images, np.uint8, offset=16).reshape(n, 1, rows, cols)
    y = np.frombuffer(labels, np.uint8, offset=8).astype(np.int64)
    if n > 0 and y.max() > 9:
        raise UsageError(f"{labels_path}: label {y.max()} out of range 0-9")
    return torch.from_numpy(x.copy()), torch.from_numpy(y)


def channel_stats(images):
    """Per-channel mean and population std in [0, 1] units (std >= 1e-3)."""
    x = images.to(torch.float32).div_(255.0)
    mean = x.mean(dim=(0, 2, 3))
    std = x.std(dim=(0, 2, 3), unbiased=False).clamp(min=1e-3)
    return mean.view(1, -1, 1, 1), std.view(1, -1, 1, 1)


def generator(seed):
    """A CPU generator seeded as at::detail::createCPUGenerator(seed)."""
    return torch.Generator().manual_seed(seed % 2**64)


def load_data(root, train_limit, test_limit, seed):
    """Train and test splits; statistics from the whole training split.

    As dataset.cc LoadForJob: --train-limit keeps a seeded random subset of
    the training split, --test-limit the first examples of the test split.
    """
    if not os.path.isdir(root):
        raise UsageError(f"{root}: dataset directory does not exist "
                         "(apt-get install dataset-fashion-mnist)")
    train = read_idx(first_existing(root, "train-images-idx3-ubyte"),
                     first_existing(root, "train-labels-idx1-ubyte"))
    test = read_idx(first_existing(root, "t10k-images-idx3-ubyte"),
                    first_existing(root, "t10k-labels-idx1-ubyte"))
    stats = channel_stats(train[0])
    n = train[1].numel()
    if 0 < train_limit < n:
        index = torch.randperm(n, generator=generator(seed))[:train_limit]
        train = (train[0].index_select(0, index),
                 train[1].index_select(0, index))
    if 0 < test_limit < test[1].numel():
        test = (test[0][:test_limit], test[1][:test_limit])
    return train, test, stats


def make_batch(split, index, stats):
    """Normalised float images and labels of the examples `index`."""
    images, labels = split
    mean, std = stats
    x = images.index_select(0, index).to(torch.float32).div_(255.0)
    return ((x - mean) / std).contiguous(), labels.index_select(0, index)


def epoch_order(n, seed, epoch):
    """The shuffle of 0-based `epoch` (batches.cc EpochBatches)."""
    return torch.randperm(n, generator=generator(seed * SEED_STRIDE + epoch))


# --------------------------------------------------------------------------
# Recipe (job_spec_defaults.cc, stage_worker.cc, lr_schedule.cc).
# --------------------------------------------------------------------------

def make_optimizer(model, lr):
    """Nesterov SGD; weight decay on tensors of more than one dimension."""
    params = list(model.parameters())
    decay = [p for p in params if p.dim() > 1]
    no_decay = [p for p in params if p.dim() <= 1]
    return torch.optim.SGD(
        [{"params": decay, "weight_decay": WEIGHT_DECAY},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=lr, momentum=MOMENTUM, nesterov=True)


class LrSchedule:
    """Linear warm-up from 0, then cosine decay to 0 (lr_schedule.cc)."""

    def __init__(self, peak, steps_per_epoch, epochs, max_steps):
        self.peak = peak
        warmup_epochs = 0.0 if epochs < 10 else 5.0
        self.warmup = int(math.floor(warmup_epochs * steps_per_epoch + 0.5))
        self.total = steps_per_epoch * epochs
        if max_steps > 0:
            self.total = min(self.total, max_steps)

    def at(self, step):
        if step < self.warmup:
            return self.peak * (step + 1) / self.warmup
        span = max(1, self.total - self.warmup)
        t = min(1.0, (step - self.warmup) / span)
        return self.peak * 0.5 * (1.0 + math.cos(math.pi * t))


# --------------------------------------------------------------------------
# Training and evaluation.
# --------------------------------------------------------------------------

def format_seconds(seconds):
    seconds = int(seconds + 0.5)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class Progress:
    """Prints a progress line at most every PROGRESS_SECONDS."""

    def __init__(self, total_steps, quiet):
        self.total_steps = total_steps
        self.quiet = quiet
        self.start = time.perf_counter()
        self.last = self.start
        self.done = 0

    def step(self, epoch, epochs, index, count, loss, samples_per_second):
        self.done += 1
        now = time.perf_counter()
        if self.quiet or now - self.last < PROGRESS_SECONDS:
            return
        self.last = now
        rate = self.done / (now - self.start)
        eta = (self.total_steps - self.done) / rate if rate > 0 else 0
        print(f"epoch {epoch}/{epochs} step {index + 1}/{count} "
              f"loss {loss:.4f} {samples_per_second:.1f} samples/s "
              f"ETA {format_seconds(eta)} (training)", flush=True)


def train_epoch(model, optimizer, schedule, train, stats, ctx):
    """One epoch of plain backprop; returns its statistics."""
    args, epoch, progress = ctx["args"], ctx["epoch"], ctx["progress"]
    model.train()
    start = time.perf_counter()
    n = train[1].numel()
    order = epoch_order(n, args.seed, epoch - 1)
    count = n // args.micro_batch  # the last partial batch is dropped
    if args.max_steps > 0:
        count = min(count, max(0, args.max_steps - ctx["steps"]))
    loss_sum, correct, samples = 0.0, 0, 0
    for i in range(count):
        index = order[i * args.micro_batch:(i + 1) * args.micro_batch]
        x, y = make_batch(train, index, stats)
        for group in optimizer.param_groups:
            group["lr"] = schedule.at(ctx["steps"])
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        value = loss.item()
        if not math.isfinite(value):
            raise FloatingPointError(
                f"the loss of step {ctx['steps']} is {value} (diverged)")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        ctx["steps"] += 1
        loss_sum += value
        correct += int((logits.argmax(1) == y).sum())
        samples += y.numel()
        progress.step(epoch, args.epochs, i, count, value,
                      samples / (time.perf_counter() - start))
    seconds = time.perf_counter() - start
    return {"epoch": epoch, "steps": count, "train_samples": samples,
            "train_seconds": seconds,
            "train_loss": loss_sum / count if count else 0.0,
            "train_accuracy": correct / samples if samples else 0.0,
            "samples_per_second": samples / seconds if seconds > 0 else 0.0,
            "learning_rate": schedule.at(max(0, ctx["steps"] - 1))}


@torch.no_grad()
def evaluate(model, split, stats, batch_size):
    """Loss and accuracy with BatchNorm running statistics, all examples."""
    model.eval()
    n = split[1].numel()
    loss, correct = 0.0, 0
    for begin in range(0, n, batch_size):
        index = torch.arange(begin, min(n, begin + batch_size))
        x, y = make_batch(split, index, stats)
        logits = model(x)
        loss += F.cross_entropy(logits, y, reduction="sum").item()
        correct += int((logits.argmax(1) == y).sum())
    return (loss / n, correct / n) if n else (0.0, 0.0)


def print_epoch(r, epochs):
    print(f"epoch {r['epoch']}/{epochs}: train loss {r['train_loss']:.4f}, "
          f"train acc {100 * r['train_accuracy']:.2f}%, "
          f"test loss {r['test_loss']:.4f}, "
          f"test acc {100 * r['test_accuracy']:.2f}%, "
          f"{r['samples_per_second']:.1f} samples/s "
          f"({r['steps']} steps in {r['train_seconds']:.1f} s, "
          f"lr {r['learning_rate']:.5f})", flush=True)


def train(args, model, data):
    """All epochs; returns the per-epoch statistics."""
    train_split, test_split, stats = data
    steps_per_epoch = train_split[1].numel() // args.micro_batch
    peak = 0.1 * args.micro_batch / 256.0
    schedule = LrSchedule(peak, steps_per_epoch, args.epochs, args.max_steps)
    optimizer = make_optimizer(model, peak)
    ctx = {"args": args, "steps": 0,
           "progress": Progress(schedule.total, args.quiet)}
    details = []
    for epoch in range(1, args.epochs + 1):
        ctx["epoch"] = epoch
        r = train_epoch(model, optimizer, schedule, train_split, stats, ctx)
        r["test_loss"], r["test_accuracy"] = evaluate(
            model, test_split, stats, args.micro_batch)
        details.append(r)
        if not args.quiet:
            print_epoch(r, args.epochs)
        if args.max_steps > 0 and ctx["steps"] >= args.max_steps:
            break
    return details


# --------------------------------------------------------------------------
# Command line.
# --------------------------------------------------------------------------

def int_at_least(minimum):
    """An argparse type: an integer >= minimum."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(
                f"must be >= {minimum}, got {value}")
        return value
    return parse


non_negative_int = int_at_least(0)
positive_int = int_at_least(1)


def seed_value(text):
    value = non_negative_int(text)
    if value >= 2**64:
        raise argparse.ArgumentTypeError(f"must be < 2^64, got {value}")
    return value


def width_value(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 8:  # also rejects nan
        raise argparse.ArgumentTypeError(f"must be in (0, 8], got {text}")
    return value


def parse_args(argv):
    cores = os.cpu_count() or 1
    p = argparse.ArgumentParser(
        prog="peer_pytorch.py",
        description="Trains a network of the PETRA model zoo (mnist variant) "
        "on Fashion-MNIST with plain PyTorch backprop in one process, and "
        "reports training samples/s and test accuracy: the peer the C++ "
        "engine is compared with.")
    add = p.add_argument
    add("--arch", choices=ARCHITECTURES, default="revnet18",
        help="architecture (default revnet18)")
    add("--width", metavar="W", type=width_value, default=0.25,
        help="channel width multiplier in (0, 8] (default 0.25)")
    add("--epochs", metavar="N", type=positive_int, default=3,
        help="passes over the training set (default 3)")
    add("--micro-batch", metavar="B", type=positive_int, default=64,
        help="batch size; peak lr = 0.1 * B / 256 (default 64)")
    add("--seed", metavar="N", type=seed_value, default=1,
        help="seed of weights, shuffle and --train-limit subset "
        "(default 1, as the embedded `petra train` job)")
    add("--threads", metavar="N", type=positive_int, default=cores,
        help=f"torch intra-op threads (default: all cores, {cores})")
    add("--data-root", metavar="DIR", default=DEFAULT_DATA_ROOT,
        help=f"IDX directory (default {DEFAULT_DATA_ROOT})")
    add("--train-limit", metavar="N", type=non_negative_int, default=0,
        help="train on N examples, a seeded random subset as petra's "
        "dataset.train_limit (0 = all)")
    add("--test-limit", metavar="N", type=non_negative_int, default=0,
        help="evaluate on the first N test examples (0 = all)")
    add("--max-steps", metavar="N", type=non_negative_int, default=0,
        help="stop after N optimizer steps; the cosine schedule ends there "
        "(0 = no cap)")
    add("--json", metavar="FILE", help="write the results as JSON to FILE")
    add("--model-info", action="store_true",
        help="print the parameter count and exit (no data read)")
    add("--quiet", action="store_true", help="print only the final line")
    return p.parse_args(argv)


def check_json_path(path):
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError(f"--json {path}: directory {directory} does not "
                         "exist")
    if os.path.isdir(path):
        raise UsageError(f"--json {path}: is a directory")
    if not os.access(directory, os.W_OK):
        raise UsageError(f"--json {path}: directory {directory} is not "
                         "writable")


def summarize(args, params, train_examples, details):
    samples = sum(r["train_samples"] for r in details)
    seconds = sum(r["train_seconds"] for r in details)
    last = details[-1]
    return {
        "framework": "pytorch " + torch.__version__,
        "arch": args.arch, "variant": VARIANT, "width": args.width,
        "params": params, "epochs": args.epochs,
        "epochs_run": len(details), "micro_batch": args.micro_batch,
        "threads": args.threads, "seed": args.seed,
        "train_examples": train_examples,
        "train_samples": samples,
        "steps": sum(r["steps"] for r in details),
        "samples_per_second": samples / seconds if seconds > 0 else 0.0,
        "train_seconds": seconds,
        "test_accuracy": last["test_accuracy"],
        "test_loss": last["test_loss"],
        "epochs_detail": details,
    }


def run(argv):
    args = parse_args(argv)
    if args.json:
        check_json_path(args.json)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # before construction, as job_plan.cc
    model = build_network(args.arch, args.width)
    params = count_parameters(model)
    if args.model_info:
        print(f"peer: arch {args.arch} variant {VARIANT} width {args.width}: "
              f"{len(model.blocks)} blocks, params {params}")
        return 0
    data = load_data(args.data_root, args.train_limit, args.test_limit,
                     args.seed)
    train_examples = data[0][1].numel()
    if train_examples < args.micro_batch:
        raise UsageError(f"the training split has {train_examples} examples, "
                         f"fewer than one micro-batch of {args.micro_batch}")
    if data[1][1].numel() == 0:
        raise UsageError("the test split is empty")
    if not args.quiet:
        print(f"peer: pytorch {torch.__version__}, {args.threads} threads, "
              f"{args.arch} ({VARIANT}, width {args.width}), params {params}, "
              f"{train_examples} train / {data[1][1].numel()} test examples, "
              f"micro-batch {args.micro_batch}, {args.epochs} epochs",
              flush=True)
    result = summarize(args, params, train_examples,
                       train(args, model, data))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    print(f"peer: arch {args.arch} width {args.width:g} epochs {args.epochs}: "
          f"test accuracy {100 * result['test_accuracy']:.2f}%, "
          f"{result['samples_per_second']:.1f} samples/s, params {params}",
          flush=True)
    return 0


def main():
    try:
        return run(sys.argv[1:])
    except UsageError as e:
        print(f"peer_pytorch.py: error: {e}", file=sys.stderr)
        return 2
    except FloatingPointError as e:
        print(f"peer_pytorch.py: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"peer_pytorch.py: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("peer_pytorch.py: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
