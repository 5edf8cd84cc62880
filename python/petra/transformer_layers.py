"""The transformer blocks of petra.models (RevViT, ViT, RevLM, GPT): attention,
MLP, the patch and token embeddings, heads, and the convolutional stem's
sizes, each the C++ module's twin (services/model/transformer.cc), under
the names its torch::nn::Module registers so that an export loads strictly
(services/model/transformer_blocks.cc). Tokens are [batch, tokens,
embed_dim].
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from .layers import ConvBn


def _vit_linear(cin, cout):
    """ViT's initialisation: N(0, 0.02) weights, zero biases (MakeLinear)."""
    layer = nn.Linear(cin, cout)
    with torch.no_grad():
        layer.weight.normal_(0.0, 0.02)
        layer.bias.zero_()
    return layer


class Attention(nn.Module):
    """F: LayerNorm -> multi-head self-attention (no dropout); `causal`
    (the language models): position i attends to positions <= i only."""

    def __init__(self, dim, heads, causal=False):
        super().__init__()
        self.heads = heads
        self.causal = causal
        self.norm = nn.LayerNorm(dim)
        self.qkv = _vit_linear(dim, 3 * dim)
        self.proj = _vit_linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        dh = d // self.heads
        # [b, n, 3, heads, dh] -> [3, b, heads, n, dh]
        qkv = (self.qkv(self.norm(x)).reshape(b, n, 3, self.heads, dh)
               .permute(2, 0, 3, 1, 4))
        q, k, v = qkv[0], qkv[1], qkv[2]
        # Divided by sqrt(dh) after the product, as the C++ (not q scaled
        # first, which rounds differently).
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(dh)
        if self.causal:
            later = torch.ones(n, n, dtype=torch.bool,
                               device=x.device).triu(1)
            scores = scores.masked_fill(later, float("-inf"))
        attention = torch.softmax(scores, -1)
        out = torch.matmul(attention, v).transpose(1, 2).reshape(b, n, d)
        return self.proj(out)


class Mlp(nn.Module):
    """G: LayerNorm -> Linear -> GELU (exact, erf) -> Linear."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = _vit_linear(dim, hidden)
        self.fc2 = _vit_linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(self.norm(x))))


def _conv_stem_depth(patch_size):
    """ceil(log2 patch_size) (architecture_catalog.cc ConvStemDepth)."""
    n = 0
    while (1 << n) < patch_size:
        n += 1
    return n


def conv_stem_widths(patch_size, embed_dim):
    """The conv stem's stride-2 widths (architecture_catalog ConvStemWidths):
    doubling from 32, at most embed_dim."""
    return [min(embed_dim, 32 << i)
            for i in range(_conv_stem_depth(patch_size))]


def _conv_stem_side(side, patch_size):
    for _ in range(_conv_stem_depth(patch_size)):
        side = (side + 1) // 2
    return side


class PatchEmbedBlock(nn.Module):
    """Image -> tokens: patch_size-strided conv (with bias) + position, or
    with `conv_stem` 3x3 stride-2 ConvBn layers and a 1x1 conv (with bias).

    The tokens go down both streams of a reversible network.
    """

    def __init__(self, cin, side, dim, patch_size, two_streams,
                 conv_stem=False):
        super().__init__()
        kernel = patch_size
        if conv_stem:
            convs = []
            for width in conv_stem_widths(patch_size, dim):
                convs.append(ConvBn(cin, width, 3, 2))
                cin = width
            self.convs = nn.ModuleList(convs)
            kernel = 1
        self.patch = nn.Conv2d(cin, dim, kernel, stride=kernel)
        tokens = (side // patch_size) ** 2
        self.position = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.two_streams = two_streams

    def forward(self, pair):
        image = pair[0]
        for conv in getattr(self, "convs", ()):
            image = conv(image)
        y = self.patch(image)  # [b, d, side, side]
        tokens = y.flatten(2).transpose(1, 2) + self.position
        return (tokens, tokens) if self.two_streams else (tokens, None)


class TokenEmbedBlock(nn.Module):
    """A language model's stem: token ids [b, n] (n <= max_tokens) -> their
    embeddings plus a learned position embedding, on both streams of a
    reversible network."""

    def __init__(self, vocab, max_tokens, dim, two_streams):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        with torch.no_grad():
            self.embedding.weight.normal_(0.0, 0.02)
        self.position = nn.Parameter(torch.randn(1, max_tokens, dim) * 0.02)
        self.two_streams = two_streams

    def forward(self, pair):
        ids = pair[0]
        tokens = self.embedding(ids) + self.position[:, :ids.shape[1]]
        return (tokens, tokens) if self.two_streams else (tokens, None)


class LmHeadBlock(nn.Module):
    """Concatenate the streams' features, LayerNorm, and every position's
    logits over the vocabulary [b, n, vocab].

    tied: a TokenEmbedBlock whose weight is the head's (no weight of its
    own; the normalised streams' halves summed, as the C++ head), kept out
    of this module's state_dict as in the export."""

    def __init__(self, features, vocab, tied=None):
        super().__init__()
        self.norm = nn.LayerNorm(features)
        if tied is None:
            self.fc = _vit_linear(features, vocab)
        self._tied = [tied] if tied is not None else []

    def forward(self, pair):
        a, b = pair
        tokens = torch.cat([a, b], -1) if b is not None else a
        h = self.norm(tokens)
        if not self._tied:
            return self.fc(h), None
        weight = self._tied[0].embedding.weight
        dim = weight.shape[1]
        if h.shape[-1] != dim:
            h = h[..., :dim] + h[..., dim:]
        return F.linear(h, weight), None


class RevViTBlock(nn.Module):
    """(X1, X2) -> (Y1, Y2): Y1 = X1 + F(X2), Y2 = X2 + G(Y1)."""

    def __init__(self, dim, heads, hidden, causal=False):
        super().__init__()
        self.attention = Attention(dim, heads, causal)
        self.mlp = Mlp(dim, hidden)

    def forward(self, pair):
        x1, x2 = pair
        y1 = x1 + self.attention(x2)
        return y1, x2 + self.mlp(y1)


class ViTBlock(nn.Module):
    """The non-reversible twin: h = x + F(x), then h + G(h)."""

    def __init__(self, dim, heads, hidden, causal=False):
        super().__init__()
        self.attention = Attention(dim, heads, causal)
        self.mlp = Mlp(dim, hidden)

    def forward(self, pair):
        x = pair[0]
        h = x + self.attention(x)
        return h + self.mlp(h), None


class TokenHeadBlock(nn.Module):
    """Concatenate the streams' features, LayerNorm, mean over tokens, fc."""

    def __init__(self, features, classes):
        super().__init__()
        self.norm = nn.LayerNorm(features)
        self.fc = _vit_linear(features, classes)

    def forward(self, pair):
        a, b = pair
        tokens = torch.cat([a, b], -1) if b is not None else a
        return self.fc(self.norm(tokens).mean(1)), None


# --------------------------------------------------------------------------
# The network.
# --------------------------------------------------------------------------
