"""The layers and blocks of petra.models, each the C++ module's twin.

Each class registers its tensors under the names the C++ torch::nn::Module
registers (services/model/layers.cc, blocks.cc, transformer.cc), so an
export loads strictly; petra.models builds networks out of them and states
the contract they keep.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

# services/model/batch_norm.h defaults; LayerNorm keeps torch's 1e-5.
BN_MOMENTUM = 0.1
BN_EPS = 1e-5

# services/model/architecture_catalog.cc InputShape.
INPUT_SHAPES = {"imagenet": (3, 224, 224), "cifar": (3, 32, 32),
                "mnist": (1, 28, 28)}


# --------------------------------------------------------------------------
# Layers (services/model/batch_norm.cc, layers.cc).
# --------------------------------------------------------------------------

class BatchNorm2d(nn.Module):
    """BatchNorm with exactly the C++ tensors: no num_batches_tracked.

    torch.nn.BatchNorm2d registers a num_batches_tracked buffer that the C++
    BatchNorm2dImpl has not, which would break strict loading of an export.
    With a fixed momentum that counter is unused anyway.
    """

    def __init__(self, channels, momentum=BN_MOMENTUM, eps=BN_EPS):
        super().__init__()
        self.momentum = momentum
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))

    def forward(self, x):
        # The call the C++ makes: torch::batch_norm(x, weight, bias,
        # running_mean, running_var, training, momentum, eps, cudnn).
        return F.batch_norm(x, self.running_mean, self.running_var,
                            self.weight, self.bias, self.training,
                            self.momentum, self.eps)

    def extra_repr(self):
        return (f"{self.weight.numel()}, eps={self.eps}, "
                f"momentum={self.momentum}")


class ConvBn(nn.Module):
    """conv (no bias, He fan-out init) -> BatchNorm -> optional ReLU."""

    def __init__(self, cin, cout, kernel=3, stride=1, relu=True):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride=stride,
                              padding=kernel // 2, bias=False)
        # He initialisation (fan-out, ReLU), as layers.cc and torchvision.
        nn.init.kaiming_normal_(self.conv.weight, mode="fan_out",
                                nonlinearity="relu")
        self.bn = BatchNorm2d(cout)
        self.relu = relu

    def forward(self, x):
        y = self.bn(self.conv(x))
        return F.relu(y) if self.relu else y


class ResidualFunction(nn.Module):
    """A residual body without its skip (layers.cc ResidualFunctionImpl).

    basic:      conv3x3(stride) - BN - ReLU - conv3x3 - BN [- ReLU]
    bottleneck: conv1x1 - BN - ReLU - conv3x3(stride) - BN - ReLU - conv1x1
                - BN [- ReLU]
    The final ReLU is on in RevNet blocks and off in ResNet blocks (there it
    follows the addition).
    """

    def __init__(self, cin, width, cout, stride, bottleneck, final_relu):
        super().__init__()
        if bottleneck:
            layers = [ConvBn(cin, width, 1, 1, True),
                      ConvBn(width, width, 3, stride, True),
                      ConvBn(width, cout, 1, 1, final_relu)]
        else:
            layers = [ConvBn(cin, width, 3, stride, True),
                      ConvBn(width, cout, 3, 1, final_relu)]
        self.body = nn.Sequential(*layers)

    def forward(self, x):
        return self.body(x)


# --------------------------------------------------------------------------
# CNN blocks (services/model/blocks.cc, coupling_block.cc). Every block maps
# a pair (a, b) to a pair; b is None on a single-tensor boundary.
# --------------------------------------------------------------------------

class StemBlock(nn.Module):
    """conv - BN - ReLU (- max-pool); a RevNet stem splits its channels.

    imagenet: 7x7 stride-2 conv and a 3x3 stride-2 max-pool (padding 1);
    cifar and mnist: 3x3 stride-1 conv, no pool. A reversible network's stem
    has twice a stream's channels and chunks them: the first half is a, the
    second b.
    """

    def __init__(self, cin, cout, imagenet, split):
        super().__init__()
        self.conv = ConvBn(cin, cout, 7 if imagenet else 3,
                           2 if imagenet else 1, True)
        self.imagenet = imagenet
        self.split = split

    def forward(self, pair):
        y = self.conv(pair[0])
        if self.imagenet:
            y = F.max_pool2d(y, 3, 2, 1)
        return tuple(y.chunk(2, 1)) if self.split else (y, None)


class CouplingBlock(nn.Module):
    """(a, b) -> (S(b) + R(a), S(a)): the RevNet coupling.

    S is the identity for stride 1 and i-RevNet's invertible downsampling
    (pixel_unshuffle by the stride: s x s pixels into s^2 x the channels)
    otherwise.
    """

    def __init__(self, cin, width, cout, stride, bottleneck):
        super().__init__()
        self.residual = ResidualFunction(cin, width, cout, stride,
                                         bottleneck, True)
        self.squeeze = stride

    def _squeeze(self, x):
        return x if self.squeeze == 1 else F.pixel_unshuffle(x, self.squeeze)

    def forward(self, pair):
        a, b = pair
        return self._squeeze(b) + self.residual(a), self._squeeze(a)


class RevDownsampleBlock(nn.Module):
    """(a, b) -> (R(a) + P(b), P'(a)) with strided 1x1 projections.

    Basic-block RevNets share P' = P (only project_b exists); bottleneck
    RevNets give each stream its own (project_a too).
    """

    def __init__(self, cin, width, cout, stride, bottleneck):
        super().__init__()
        self.residual = ResidualFunction(cin, width, cout, stride,
                                         bottleneck, True)
        self.project_b = ConvBn(cin, cout, 1, stride, False)
        self.project_a = (ConvBn(cin, cout, 1, stride, False)
                          if bottleneck else None)

    def forward(self, pair):
        a, b = pair
        project_a = (self.project_a if self.project_a is not None
                     else self.project_b)
        return self.residual(a) + self.project_b(b), project_a(a)


class ResidualBlock(nn.Module):
    """relu(R(x) + shortcut(x)); a 1x1 projection when the shape changes."""

    def __init__(self, cin, width, cout, stride, bottleneck):
        super().__init__()
        self.residual = ResidualFunction(cin, width, cout, stride,
                                         bottleneck, False)
        self.shortcut = (ConvBn(cin, cout, 1, stride, False)
                         if stride != 1 or cin != cout else None)

    def forward(self, pair):
        x = pair[0]
        skip = self.shortcut(x) if self.shortcut is not None else x
        return F.relu(self.residual(x) + skip), None


class HeadBlock(nn.Module):
    """Concatenate a pair (a first), global average pool, linear."""

    def __init__(self, features, classes):
        super().__init__()
        self.fc = nn.Linear(features, classes)

    def forward(self, pair):
        a, b = pair
        x = torch.cat([a, b], 1) if b is not None else a
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1)), None


# --------------------------------------------------------------------------
# Transformer blocks (services/model/transformer_blocks.cc). Tokens are
# [batch, tokens, embed_dim].
# --------------------------------------------------------------------------

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

class Input(nn.Module):
    """The model's input as the job gave it (export_input.h): forward
    normalises images with pixel values in [0, 1], (x - mean) / std per
    channel. Built as the identity with no class names; an export's
    ``input.*`` tensors load into it, the class names whatever their length.
    """

    # Bytes of any length: the names, the network as JSON, a language
    # model's SentencePiece model. The last two may be absent from an export
    # written before they existed.
    _BYTES = ("class_names", "model", "tokenizer")
    _OPTIONAL = ("model", "tokenizer")

    def __init__(self, shape):
        super().__init__()
        # A language model's input is (tokens,): ids, nothing to normalise.
        channels = shape[0] if len(shape) == 3 else 0
        self.register_buffer("mean", torch.zeros(channels))
        self.register_buffer("std", torch.ones(channels))
        self.register_buffer("shape", torch.tensor(shape, dtype=torch.int64))
        for name in self._BYTES:
            self.register_buffer(name, torch.zeros(0, dtype=torch.uint8))

    def forward(self, images):
        c = self.mean.numel()
        return (images - self.mean.view(1, c, 1, 1)) / self.std.view(1, c, 1, 1)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for name in self._BYTES:
            value = state_dict.get(prefix + name)
            if isinstance(value, torch.Tensor):
                # The export's length, not the built one's (none).
                setattr(self, name, torch.zeros_like(value))
            elif value is None and name in self._OPTIONAL:
                state_dict[prefix + name] = torch.zeros(0, dtype=torch.uint8)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def names(self):
        raw = bytes(self.class_names.tolist())
        return [n.decode("utf-8") for n in raw.split(b"\0")[:-1]]


class Network(nn.Module):
    """The blocks in order; forward maps images to logits.

    ``blocks[i]`` is block i of the C++ network (and of the export's
    ``blocks.<i>.`` names); ``input`` holds the export's ``input.*``
    (the normalisation forward applies, and ``class_names``). Attributes say what was built: ``arch``,
    ``variant``, ``width``, ``num_classes``, ``input_shape`` (C, H, W) and
    ``transformer`` (the sizes as a dict, None for a CNN).
    """

    def __init__(self, blocks, *, arch, variant, width, num_classes,
                 transformer=None):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.arch = arch
        self.variant = variant
        self.width = width
        self.num_classes = num_classes
        self.input_shape = INPUT_SHAPES[variant]
        self.transformer = transformer
        self.input = Input(self.input_shape)

    def forward(self, images):
        if images.dim() != 4 or images.shape[1] != self.input_shape[0]:
            raise ValueError(
                f"{self.arch} ({self.variant}) takes images N x "
                f"{self.input_shape[0]} x H x W "
                f"({'x'.join(map(str, self.input_shape))} as trained), got "
                f"{tuple(images.shape)}")
        pair = (self.input(images), None)
        for block in self.blocks:
            pair = block(pair)
        return pair[0]

    @property
    def class_names(self):
        """Class i's name at i, from a loaded export; [] before one is."""
        return self.input.names()

    def extra_repr(self):
        if self.transformer is not None:
            size = ", ".join(f"{k} {v:g}" if isinstance(v, float)
                             else f"{k} {v}"
                             for k, v in self.transformer.items())
        else:
            size = f"width {self.width:g}"
        return (f"arch={self.arch}, variant={self.variant}, {size}, "
                f"num_classes={self.num_classes}")


class LanguageModel(nn.Module):
    """revlm and gpt: token ids [N, T] (T <= seq_len) -> the next token's
    logits at every position [N, T, vocab].

    ``blocks[i]`` is block i of the C++ network; ``input`` holds the
    export's ``input.*`` (``input.shape`` is (seq_len,); ``input.tokenizer``
    a SentencePiece model). Attributes: ``arch``, ``transformer`` (the sizes
    as a dict), ``seq_len``, ``vocab`` and ``tokenizer`` ("bytes": token i
    is byte i; "sentencepiece": the export's model, which encode and decode
    need loaded first).
    """

    def __init__(self, blocks, *, arch, transformer, tokenizer="bytes"):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.arch = arch
        self.transformer = transformer
        self.seq_len = transformer["seq_len"]
        self.vocab = transformer["vocab"]
        self.num_classes = self.vocab
        self.tokenizer = tokenizer
        self.input_shape = (self.seq_len,)
        self.input = Input(self.input_shape)

    def forward(self, tokens):
        if (tokens.dim() != 2 or tokens.dtype not in (torch.int64, torch.int32)
                or not 1 <= tokens.shape[1] <= self.seq_len):
            raise ValueError(
                f"{self.arch} takes token ids N x T (int64, 1 <= T <= "
                f"{self.seq_len}), got {tuple(tokens.shape)} {tokens.dtype}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.vocab):
            raise ValueError(f"{self.arch}: token ids must be in [0, "
                             f"{self.vocab}), got [{tokens.min().item()}, "
                             f"{tokens.max().item()}]")
        pair = (tokens.long(), None)
        for block in self.blocks:
            pair = block(pair)
        return pair[0]

    def encode(self, text):
        """The token ids of `text` (str, or bytes of UTF-8), as the C++
        tokenizer gives them (services/data/tokenizer.h): bytes, token i is
        byte i; sentencepiece, each line apart, then its line break as the
        byte piece <0x0A>."""
        if self.tokenizer == "bytes":
            data = text.encode("utf-8") if isinstance(text, str) else bytes(
                text)
            return list(data)
        if not isinstance(text, str):
            text = bytes(text).decode("utf-8")
        sp = self._sentencepiece()
        newline = sp.piece_to_id("<0x0A>")
        ids = []
        for i, line in enumerate(text.split("\n")):
            if i:
                ids.append(newline)
            ids += sp.encode(line)
        return ids

    def decode(self, ids):
        """The text of token ids; an id outside the vocabulary, and bytes
        that are not UTF-8 (a model may stop mid-character), become U+FFFD."""
        ids = [int(i) for i in ids]
        if self.tokenizer == "bytes":
            data = b"".join(bytes([i]) if 0 <= i < 256 else b"\xef\xbf\xbd"
                            for i in ids)
            return data.decode("utf-8", errors="replace")
        sp = self._sentencepiece()
        out, run = [], []
        for i in ids + [None]:
            if i is not None and 0 <= i < self.vocab:
                run.append(i)
                continue
            if run:
                out.append(sp.decode(run))
                run = []
            if i is not None:
                out.append("\ufffd")
        return "".join(out)

    def _sentencepiece(self):
        raw = bytes(self.input.tokenizer.tolist())
        if not raw:
            raise ValueError(
                "this sentencepiece model has no tokenizer yet: its export "
                "carries it (input.tokenizer); load that first")
        cached = getattr(self, "_sp", None)
        if cached is not None and cached[0] == raw:
            return cached[1]
        try:
            import sentencepiece
        except ImportError as e:
            raise ImportError(
                "the sentencepiece tokenizer needs Python's sentencepiece "
                "(Debian: python3-sentencepiece)") from e
        sp = sentencepiece.SentencePieceProcessor(model_proto=raw)
        if sp.get_piece_size() != self.vocab:
            raise ValueError(f"the export's tokenizer has "
                             f"{sp.get_piece_size()} pieces, the network a "
                             f"vocabulary of {self.vocab}")
        self._sp = (raw, sp)
        return sp

    def extra_repr(self):
        size = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                         for k, v in self.transformer.items())
        return f"arch={self.arch}, {size}, tokenizer={self.tokenizer}"
