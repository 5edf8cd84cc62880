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
import argparse, gzip, math, time, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
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
a = p.parse_args()
torch.set_num_threads(a.threads); torch.manual_seed(a.seed)
def load(kind):
    d = '/usr/share/datasets/fashion-mnist/'
    x = np.frombuffer(gzip.open(d + kind + '-images-idx3-ubyte.gz').read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    y = np.frombuffer(gzip.open(d + kind + '-labels-idx1-ubyte.gz').read(), np.uint8, offset=8)
    return torch.tensor(x.copy()).float() / 255, torch.tensor(y.copy()).long()
xt, yt = load('train'); xv, yv = load('t10k')
m, s = xt.mean(), xt.std(); xt = (xt - m) / s; xv = (xv - m) / s
if a.limit: xt, yt = xt[:a.limit], yt[:a.limit]
def lin(i, o, zero=False):
    l = nn.Linear(i, o); nn.init.normal_(l.weight, 0, 0.02); nn.init.zeros_(l.bias)
    if zero: nn.init.zeros_(l.weight)
    return l
class Attn(nn.Module):
    def __init__(s, d, h):
        super().__init__(); s.h = h; s.norm = nn.LayerNorm(d); s.qkv = lin(d, 3 * d); s.proj = lin(d, d, a.zero)
    def forward(s, x):
        b, n, d = x.shape; q, k, v = s.qkv(s.norm(x)).reshape(b, n, 3, s.h, d // s.h).permute(2, 0, 3, 1, 4)
        at = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // s.h), -1)
        return s.proj((at @ v).transpose(1, 2).reshape(b, n, d))
class Mlp(nn.Module):
    def __init__(s, d, hd):
        super().__init__(); s.norm = nn.LayerNorm(d); s.fc1 = lin(d, hd); s.fc2 = lin(hd, d, a.zero)
    def forward(s, x): return s.fc2(F.gelu(s.fc1(s.norm(x))))
def sincos(side, d):
    gy, gx = torch.meshgrid(torch.arange(side).float(), torch.arange(side).float(), indexing='ij')
    om = 1.0 / 10000 ** (torch.arange(d // 4).float() / (d // 4))
    out = [torch.sin(gy.flatten()[:, None] * om), torch.cos(gy.flatten()[:, None] * om),
           torch.sin(gx.flatten()[:, None] * om), torch.cos(gx.flatten()[:, None] * om)]
    return torch.cat(out, 1)[None]
class Net(nn.Module):
    def __init__(s):
        super().__init__(); d = a.dim; cin = 1; layers = []
        for i in range(a.stem_layers if a.stem else 0):
            layers += [nn.Conv2d(cin, a.stem, 3, a.stem_stride if i == 0 else 1, 1), nn.BatchNorm2d(a.stem), nn.GELU()]; cin = a.stem
        side = 28 // (a.stem_stride if a.stem else 1)
        ps = a.patch
        if a.convstem:
            for c in map(int, a.convstem.split(',')):
                layers += [nn.Conv2d(cin, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU() if a.stem_act == 'relu' else nn.GELU()]; cin = c; side = (side + 1) // 2
            ps = 1
        s.stem = nn.Sequential(*layers)
        s.patch = nn.Conv2d(cin, d, ps + 2 * a.overlap, ps, a.overlap)
        if a.patch_init == 'xavier':
            nn.init.xavier_uniform_(s.patch.weight.view(d, -1)); nn.init.zeros_(s.patch.bias)
        n = (side // ps) ** 2
        if a.pos == 'sincos': s.register_buffer('pos', sincos(side // ps, d))
        else: s.pos = nn.Parameter(torch.randn(1, n, d) * 0.02)
        s.f = nn.ModuleList([Attn(d, a.heads) for _ in range(a.depth)])
        s.g = nn.ModuleList([Mlp(d, int(d * a.mlp)) for _ in range(a.depth)])
        fd = 2 * d if a.rev else d
        s.norm = nn.LayerNorm(fd); s.fc = lin(fd, 10)
    def forward(s, x):
        t = s.patch(s.stem(x)).flatten(2).transpose(1, 2) + s.pos
        if a.rev:
            x1, x2 = t, t
            for f, g in zip(s.f, s.g):
                x1 = x1 + f(x2); x2 = x2 + g(x1)
            t = torch.cat([x1, x2], -1)
        else:
            for f, g in zip(s.f, s.g):
                t = t + f(t); t = t + g(t)
        return s.fc(s.norm(t).mean(1))
net = Net()
decay, nodecay = [], []
for nme, prm in net.named_parameters():
    (nodecay if prm.ndim <= 1 or 'pos' in nme else decay).append(prm)
opt = torch.optim.AdamW([{'params': decay, 'weight_decay': a.wd}, {'params': nodecay, 'weight_decay': 0}],
                        lr=a.lr, betas=(0.9, a.beta2), eps=1e-8)
steps_per = math.ceil(len(xt) / a.mb); total = int(steps_per * a.epochs); warm = a.warmup * steps_per
def rate(step):
    if step < warm: return (step + 1) / warm
    return 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, total - warm)))
t0 = time.time(); step = 0; g = torch.Generator().manual_seed(a.seed)
while step < total:
    perm = torch.randperm(len(xt), generator=g)
    for i in range(0, len(xt), a.mb):
        if step >= total: break
        idx = perm[i:i + a.mb]
        for pg in opt.param_groups: pg['lr'] = a.lr * rate(step)
        loss = F.cross_entropy(net(xt[idx]), yt[idx], label_smoothing=a.ls)
        opt.zero_grad(); loss.backward(); opt.step(); step += 1
net.eval(); correct = 0
with torch.no_grad():
    for i in range(0, len(xv), 1000): correct += (net(xv[i:i + 1000]).argmax(1) == yv[i:i + 1000]).sum().item()
print(f'{correct / 100:.2f}% loss {loss.item():.4f} {time.time() - t0:.0f}s {vars(a)}', flush=True)
