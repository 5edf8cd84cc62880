#!/usr/bin/env python3
"""Screens RevViT changes for one epoch of Fashion-MNIST, by backprop in torch.

A stand-alone RevViT of petra's default sizes (services/model/
transformer_blocks.cc: embed 64, depth 6, heads 4, MLP ratio 2, patches of
7, ViT's N(0, 0.02) linear init, mean over tokens) trained as the
transformer recipe trains it (AdamW, lr 2e-3 at micro-batch 64, weight decay
0.05 off norms, biases and positions, a third of the run as linear warm-up,
then cosine), with flags for what petra does not have (label smoothing,
zero-initialised residual branches, sin-cos positions, overlapping patches,
convolutional stems). A screen, fast to change: what it finds is then
measured with `petra train` (docs/BENCHMARKS.md, transformer_recipe). Prints
one line: test accuracy, last loss, seconds, the arguments.

  /usr/bin/python3 bench/vit_stem_screen.py --convstem 32,64,64
"""
import argparse
import gzip
import math
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
for flag, kind, default, what in (
        ("--dim", int, 64, "token width"),
        ("--depth", int, 6, "blocks"),
        ("--heads", int, 4, "attention heads"),
        ("--mlp", float, 2, "MLP ratio"),
        ("--patch", int, 7, "patch side (ignored with --convstem)"),
        ("--mb", int, 64, "micro-batch"),
        ("--lr", float, 2e-3, "peak AdamW rate"),
        ("--wd", float, 0.05, "decoupled weight decay"),
        ("--warmup", float, 1 / 3, "epochs of linear warm-up"),
        ("--beta2", float, 0.999, "AdamW beta2"),
        ("--ls", float, 0.0, "label smoothing"),
        ("--overlap", int, 0, "pixels each patch reaches into its neighbours"),
        ("--stem", int, 0, "channels of 3x3 stride --stem-stride convs before the patches (0: none)"),
        ("--stem-stride", int, 1, "stride of the first --stem conv"),
        ("--stem-layers", int, 1, "--stem convs"),
        ("--convstem", str, "", "widths of 3x3 stride-2 ConvBn layers, then a 1x1 conv (the conv stem)"),
        ("--stem-act", str, "relu", "relu or gelu after each --convstem BatchNorm"),
        ("--patch-init", str, "default", "default (torch's) or xavier"),
        ("--pos", str, "learned", "learned or sincos position embedding"),
        ("--rev", int, 1, "1: RevViT's two streams, 0: ViT"),
        ("--epochs", float, 1, "epochs"),
        ("--limit", int, 0, "training images (0: all 60000)"),
        ("--seed", int, 1, "seed"),
        ("--threads", int, 1, "torch threads")):
    p.add_argument(flag, type=kind, default=default, help=what)
p.add_argument("--zero", action="store_true",
               help="zero-initialise each branch's last linear layer")


DATA = "/usr/share/datasets/fashion-mnist/"


def load(kind):
    """Fashion-MNIST's IDX files as float images in [0, 1] and labels."""
    with gzip.open(DATA + kind + "-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(DATA + kind + "-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    return torch.tensor(x.copy()).float() / 255, torch.tensor(y.copy()).long()


def linear(cin, cout, zero=False):
    """ViT's initialisation (N(0, 0.02), zero bias), or all zeros."""
    layer = nn.Linear(cin, cout)
    nn.init.normal_(layer.weight, 0, 0.02)
    nn.init.zeros_(layer.bias)
    if zero:
        nn.init.zeros_(layer.weight)
    return layer


class Attention(nn.Module):
    def __init__(self, dim, heads, zero):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = linear(dim, 3 * dim)
        self.proj = linear(dim, dim, zero)

    def forward(self, x):
        b, n, d = x.shape
        dh = d // self.heads
        q, k, v = (self.qkv(self.norm(x)).reshape(b, n, 3, self.heads, dh)
                   .permute(2, 0, 3, 1, 4))
        attention = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dh), -1)
        return self.proj((attention @ v).transpose(1, 2).reshape(b, n, d))


class Mlp(nn.Module):
    def __init__(self, dim, hidden, zero):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = linear(dim, hidden)
        self.fc2 = linear(hidden, dim, zero)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(self.norm(x))))


def sincos_positions(side, dim):
    """Fixed 2-D sin-cos position embeddings, [1, side^2, dim]."""
    gy, gx = torch.meshgrid(torch.arange(side).float(),
                            torch.arange(side).float(), indexing="ij")
    omega = 1.0 / 10000 ** (torch.arange(dim // 4).float() / (dim // 4))
    y, x = gy.flatten()[:, None] * omega, gx.flatten()[:, None] * omega
    return torch.cat([y.sin(), y.cos(), x.sin(), x.cos()], 1)[None]


class Net(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.rev = a.rev
        d, cin, side, patch, layers = a.dim, 1, 28, a.patch, []
        for i in range(a.stem_layers if a.stem else 0):
            stride = a.stem_stride if i == 0 else 1
            layers += [nn.Conv2d(cin, a.stem, 3, stride, 1),
                       nn.BatchNorm2d(a.stem), nn.GELU()]
            cin = a.stem
        if a.stem:
            side //= a.stem_stride
        if a.convstem:
            for width in map(int, a.convstem.split(",")):
                act = nn.ReLU() if a.stem_act == "relu" else nn.GELU()
                layers += [nn.Conv2d(cin, width, 3, 2, 1, bias=False),
                           nn.BatchNorm2d(width), act]
                cin, side = width, (side + 1) // 2
            patch = 1
        self.stem = nn.Sequential(*layers)
        self.patch = nn.Conv2d(cin, d, patch + 2 * a.overlap, patch,
                               a.overlap)
        if a.patch_init == "xavier":
            nn.init.xavier_uniform_(self.patch.weight.view(d, -1))
            nn.init.zeros_(self.patch.bias)
        if a.pos == "sincos":
            self.register_buffer("pos", sincos_positions(side // patch, d))
        else:
            self.pos = nn.Parameter(torch.randn(1, (side // patch) ** 2, d)
                                    * 0.02)
        self.f = nn.ModuleList(Attention(d, a.heads, a.zero)
                               for _ in range(a.depth))
        self.g = nn.ModuleList(Mlp(d, int(d * a.mlp), a.zero)
                               for _ in range(a.depth))
        features = 2 * d if a.rev else d
        self.norm = nn.LayerNorm(features)
        self.fc = linear(features, 10)

    def forward(self, x):
        t = self.patch(self.stem(x)).flatten(2).transpose(1, 2) + self.pos
        if self.rev:  # Y1 = X1 + F(X2), Y2 = X2 + G(Y1)
            x1, x2 = t, t
            for f, g in zip(self.f, self.g):
                x1 = x1 + f(x2)
                x2 = x2 + g(x1)
            t = torch.cat([x1, x2], -1)
        else:
            for f, g in zip(self.f, self.g):
                t = t + f(t)
                t = t + g(t)
        return self.fc(self.norm(t).mean(1))


def main():
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    xt, yt = load("train")
    xv, yv = load("t10k")
    mean, std = xt.mean(), xt.std()
    xt, xv = (xt - mean) / std, (xv - mean) / std
    if a.limit:
        xt, yt = xt[:a.limit], yt[:a.limit]
    net = Net(a)
    # No weight decay on norms, biases and positions (the recipe's groups).
    decay, no_decay = [], []
    for name, param in net.named_parameters():
        plain = param.ndim <= 1 or "pos" in name
        (no_decay if plain else decay).append(param)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": no_decay, "weight_decay": 0}],
                            lr=a.lr, betas=(0.9, a.beta2), eps=1e-8)
    steps_per_epoch = math.ceil(len(xt) / a.mb)
    total = int(steps_per_epoch * a.epochs)
    warm = a.warmup * steps_per_epoch

    def rate(step):  # linear warm-up, then cosine to 0
        if step < warm:
            return (step + 1) / warm
        return 0.5 * (1 + math.cos(math.pi * (step - warm)
                                   / max(1, total - warm)))

    start, step = time.time(), 0
    gen = torch.Generator().manual_seed(a.seed)
    while step < total:
        order = torch.randperm(len(xt), generator=gen)
        for i in range(0, len(xt), a.mb):
            if step >= total:
                break
            idx = order[i:i + a.mb]
            for group in opt.param_groups:
                group["lr"] = a.lr * rate(step)
            loss = F.cross_entropy(net(xt[idx]), yt[idx],
                                   label_smoothing=a.ls)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
    net.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(xv), 1000):
            predicted = net(xv[i:i + 1000]).argmax(1)
            correct += (predicted == yv[i:i + 1000]).sum().item()
    print(f"{100 * correct / len(xv):.2f}% loss {loss.item():.4f} "
          f"{time.time() - start:.0f}s {vars(a)}", flush=True)


if __name__ == "__main__":
    main()
