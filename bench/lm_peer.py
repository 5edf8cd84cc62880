#!/usr/bin/python3
"""Peer benchmark for the language models: a nanoGPT-style run in stock
PyTorch, the yardstick of `petra train --arch gpt|revlm` for speed and
bits per byte.

What: trains petra.models' gpt (or revlm) — plain torch.nn modules, whose
logits python/tests/models_test.py checks equal to the C++ evaluation's —
by standard autograd backprop in one process, on the same tokens a
`petra train` job of the same flags sees: the embedded corpus (GCIDE from
Debian's dict-gcide, its stray non-UTF-8 bytes read as U+FFFD), cut into
training and validation splits at the first line break after 90% of its
bytes (text_corpus.cc), training sequences of --seq-len bytes in the order
batches.cc draws them (each epoch's seeded offset and shuffle), the last
partial batch dropped, validation on the first --test-limit sequences.
Recipe: the language-model recipe (job_spec_defaults.cc): AdamW, betas 0.9
and 0.95, eps 1e-8, weight decay 0.1 on weights of more than one dimension
but the token and position embeddings, gradient norm clipped to 1, peak
rate 1e-3 * sqrt(B / 64), linear warm-up over a twentieth of the run,
cosine decay to 0, per step.

Prints per epoch the training loss, tokens/s (training time only) and
validation loss and bits per byte; --json writes them.

Smoke run (seconds):
    bench/lm_peer.py --embed-dim 16 --depth 2 --heads 2 --seq-len 16 \\
        --micro-batch 8 --train-limit 128 --test-limit 32
"""

import argparse
import gzip
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "python"))
from petra import models  # noqa: E402

CORPUS = "/usr/share/dictd/gcide.dict.dz"
TRAIN_SHARE = 0.9
SEED_STRIDE = 1000003


def generator(seed):
    """A CPU generator seeded as at::detail::createCPUGenerator(seed)."""
    return torch.Generator().manual_seed(seed % 2**64)


def read_splits(path):
    """The training and validation bytes (text_corpus.cc ReadTextSplits)."""
    if not os.path.exists(path):
        sys.exit(f"lm_peer: {path} not found (scripts/install-deps.sh "
                 "--only data unpacks it)")
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    text = raw.decode("utf-8", errors="replace").encode("utf-8")
    cut = text.find(b"\n", int(len(text) * TRAIN_SHARE))
    cut = len(text) if cut < 0 else cut + 1
    return text[:cut], text[cut:]


def sequences(tokens, seq_len, limit):
    """How many sequences a split holds (dataset.h Dataset::size)."""
    n = max(0, (tokens.numel() - 1) // seq_len - 1)
    return min(n, limit) if limit > 0 else n


def batch(tokens, index, seq_len, offset):
    """Inputs and next tokens of sequences `index` (batches.cc Get)."""
    starts = index * seq_len + offset
    at = starts.unsqueeze(1) + torch.arange(seq_len + 1).unsqueeze(0)
    windows = tokens.index_select(0, at.flatten()).view(-1, seq_len + 1)
    return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


def make_optimizer(model, lr):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        embedding = ".embedding." in name or name.endswith(".position")
        (decay if p.dim() > 1 and not embedding else no_decay).append(p)
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=lr, betas=(0.9, 0.95), eps=1e-8)


def learning_rate(peak, step, warmup, total):
    """Linear warm-up from 0, then cosine decay to 0 (lr_schedule.cc)."""
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * 0.5 * (1.0 + math.cos(math.pi * t))


@torch.no_grad()
def evaluate(model, tokens, count, seq_len, batch_size):
    model.eval()
    loss, n = 0.0, 0
    for begin in range(0, count, batch_size):
        index = torch.arange(begin, min(count, begin + batch_size))
        x, y = batch(tokens, index, seq_len, 0)
        logits = model(x)
        loss += F.cross_entropy(logits.flatten(0, 1), y.flatten(),
                                reduction="sum").item()
        n += y.numel()
    model.train()
    return loss / n


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="gpt", choices=models.LANGUAGE_MODELS)
    p.add_argument("--embed-dim", type=int, default=64)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--mlp-ratio", type=float, default=4.0)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--micro-batch", type=int, default=32)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--train-limit", type=int, default=20000,
                   help="training sequences an epoch (0 = all)")
    p.add_argument("--test-limit", type=int, default=512)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (default 1, as petra's "
                        "--threads-per-stage 1)")
    p.add_argument("--corpus", default=CORPUS)
    p.add_argument("--json", help="write the results to this file")
    args = p.parse_args(argv)
    for name in ("embed_dim", "depth", "heads", "seq_len", "micro_batch",
                 "epochs", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}: must be >= 1")
    if args.train_limit < 0 or args.test_limit < 0 or args.seed < 0:
        p.error("--train-limit, --test-limit and --seed must be >= 0")
    return args


def main(argv):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        model = models.build(args.arch, embed_dim=args.embed_dim,
                             depth=args.depth, heads=args.heads,
                             mlp_ratio=args.mlp_ratio, seq_len=args.seq_len)
    except ValueError as e:
        sys.exit(f"lm_peer: {e}")
    train_text, valid_text = read_splits(args.corpus)
    train_tokens = torch.frombuffer(bytearray(train_text),
                                    dtype=torch.uint8).long()
    valid_tokens = torch.frombuffer(bytearray(valid_text),
                                    dtype=torch.uint8).long()
    n = sequences(train_tokens, args.seq_len, args.train_limit)
    n_valid = sequences(valid_tokens, args.seq_len, args.test_limit)
    steps_per_epoch = n // args.micro_batch
    if steps_per_epoch < 1 or n_valid < 1:
        sys.exit("lm_peer: too few sequences for one batch")
    total = steps_per_epoch * args.epochs
    warmup = int(math.floor(args.epochs / 20.0 * steps_per_epoch + 0.5))
    peak = 1e-3 * math.sqrt(args.micro_batch / 64.0)
    optimizer = make_optimizer(model, peak)
    print(f"lm_peer: {args.arch}, "
          f"{sum(p.numel() for p in model.parameters()):,} parameters, "
          f"{n} training sequences of {args.seq_len} bytes, {n_valid} "
          f"validation, {args.threads} thread(s)", flush=True)
    step, epochs = 0, []
    model.train()
    for epoch in range(args.epochs):
        order = torch.randperm(n, generator=generator(
            args.seed * SEED_STRIDE + epoch))
        offset = torch.randint(args.seq_len, (1,), generator=generator(
            args.seed * SEED_STRIDE + epoch + 7)).item()
        start, loss_sum = time.perf_counter(), 0.0
        for i in range(steps_per_epoch):
            x, y = batch(train_tokens,
                         order[i * args.micro_batch:(i + 1) * args.micro_batch],
                         args.seq_len, offset)
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(peak, step, warmup, total)
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            loss_sum += loss.item()
            step += 1
        seconds = time.perf_counter() - start
        valid = evaluate(model, valid_tokens, n_valid, args.seq_len,
                         args.micro_batch)
        r = {"epoch": epoch + 1, "train_loss": loss_sum / steps_per_epoch,
             "tokens_per_second":
                 steps_per_epoch * args.micro_batch * args.seq_len / seconds,
             "valid_loss": valid, "bits_per_byte": valid / math.log(2),
             "train_seconds": seconds}
        epochs.append(r)
        print(f"epoch {r['epoch']}/{args.epochs}: train loss "
              f"{r['train_loss']:.4f}, {r['tokens_per_second']:,.0f} tokens/s, "
              f"valid loss {valid:.4f}, {r['bits_per_byte']:.3f} bits per "
              f"byte", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "epochs": epochs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
