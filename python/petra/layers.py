"""The layers and blocks of petra.models, each the C++ module's twin: the
convolutional blocks, the model's input, and the networks that chain
blocks (the transformer blocks are in transformer_layers.py).

Each class registers its tensors under the names the C++ torch::nn::Module
registers (services/model/layers.cc, blocks.cc), so an export loads
strictly; petra.models builds networks out of them and states the contract
they keep.
"""

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
