"""The PETRA model zoo in plain PyTorch, loadable from `petra export` files.

What: a pure-Python definition of every network the C++ model zoo builds
(services/model/network.cc BuildNetwork): RevNet18/34/50/101, i-RevNet18,
ResNet18/34/50/101, RevViT and ViT, in the ``imagenet``, ``cifar`` and ``mnist``
variants, with the width multiplier of the CNNs and the sizes of the
transformers.

Why: `petra export JOB` writes a job's trained weights as a file that
``torch.load`` reads, a dict from ``blocks.<i>.<name>`` to tensors
(docs/USING.md, "Exported weights"). This module gives those weights a
network to live in outside the fleet:

    import torch, petra.models
    model = petra.models.build("revnet18", variant="mnist", width=0.25,
                               num_classes=10)
    model.load_state_dict(torch.load("job-1.pt"), strict=True)
    model.eval()              # or, the same: petra.models.load("job-1.pt"),
                              # which builds what the export says it is
    logits = model(images)  # images: float N x C x H x W, pixel values in
                            # [0, 1]; normalised inside, as the job did
    model.class_names[logits.argmax(1)[0]]  # e.g. "Ankle boot"

The contract, checked by python/tests/models_test.py against the C++ build:

* ``state_dict()`` has exactly the export's keys and shapes:
  ``blocks.<i>.<name>``, where ``i`` is the block's index (0 = stem, last =
  head) and ``<name>`` is the path the C++ ``torch::nn::Module`` registers
  inside the block, e.g. ``blocks.0.conv.conv.weight``,
  ``blocks.0.conv.bn.running_mean``, ``blocks.8.residual.body.1.conv.weight``,
  ``blocks.9.fc.weight`` (RevNet18). BatchNorm is our own
  (services/model/batch_norm.cc): weight, bias, running_mean and running_var,
  and no ``num_batches_tracked``, so strict loading works both ways. And
  the model's input, ``input.mean``, ``input.std`` (float [C]),
  ``input.shape`` (int64 [3]), ``input.class_names`` (uint8, the names
  each ended by a NUL), ``input.model`` (uint8, the network's spec as
  JSON) and ``input.tokenizer`` (uint8, a language model's SentencePiece
  model): the job's preprocessing (services/engine/export_input.h). ``forward`` takes pixel values in [0, 1] and normalises
  them with ``input.mean`` and ``input.std``; a network built here and not
  loaded has the identity there, and no class names.
* In ``eval()`` mode the forward computes what the C++ evaluation computes
  (BatchNorm with running statistics, eps 1e-5; LayerNorm eps 1e-5; exact
  erf GELU; attention logits divided by sqrt(head_dim)), with the same
  operations in the same order on the same libtorch kernels, so logits
  agree within 1e-5: bitwise for the CNNs in the tests, within a few 1e-7
  for the transformers (threads may split a matmul's sums differently).
* In ``train()`` mode BatchNorm normalises with batch statistics and updates
  its running statistics with momentum 0.1 as ``torch.nn.BatchNorm2d`` does
  (the C++ engine updates them once per micro-batch during its backward
  rebuild instead, which gives the same running statistics).
* Initial weights follow the C++ recipe (He normal, fan-out, for every
  convolution of a CNN; N(0, 0.02) weights and zero biases for the
  transformers' linear layers; PyTorch defaults elsewhere) but are not the
  C++ draws: load weights to get a trained network.

The layers and blocks live in ``petra.layers`` and
``petra.transformer_layers``; this module builds networks of them and
checks the arguments.

``build`` and ``from_spec`` refuse what the C++ job validation refuses
(services/job/job_spec_validation.cc) with a ValueError naming the argument
and what it accepts.
"""

import json
import math
import re

import torch

from .layers import (INPUT_SHAPES, CouplingBlock, HeadBlock, LanguageModel,
                     Network, ResidualBlock, RevDownsampleBlock, StemBlock)
from .transformer_layers import (LmHeadBlock, PatchEmbedBlock, RevViTBlock,
                                 TokenEmbedBlock, TokenHeadBlock, ViTBlock,
                                 _conv_stem_side, conv_stem_widths)
from . import spec_json as js
from .generation import generate

__all__ = ["ARCHITECTURES", "VARIANTS", "TRANSFORMER_DEFAULTS", "PATCH_SIZES",
           "STEMS", "LANGUAGE_MODELS", "LANGUAGE_MODEL_DEFAULTS", "TOKENIZERS",
           "LanguageModel", "Network", "build", "conv_stem_widths",
           "from_spec", "generate", "input_shape", "load"]

# In the proto's enum order (proto/petra/v1/job.proto Architecture, Variant):
# ARCHITECTURES[i] is enum value i + 1, and so is VARIANTS[i].
ARCHITECTURES = ("revnet18", "revnet34", "revnet50", "resnet18", "resnet34",
                 "resnet50", "irevnet18", "revvit", "vit", "revnet101",
                 "resnet101", "revlm", "gpt")
VARIANTS = ("imagenet", "cifar", "mnist")
TRANSFORMERS = ("revvit", "vit")
# The causal decoders (reversible and its one-stream twin): token ids in,
# every position's next-token logits out.
LANGUAGE_MODELS = ("revlm", "gpt")
# services/model/architecture_catalog.h LanguageModelDefaults.
LANGUAGE_MODEL_DEFAULTS = {"embed_dim": 128, "depth": 4, "heads": 4,
                           "mlp_ratio": 4.0, "seq_len": 128, "vocab": 256}
# TextSpec.Tokenizer; bytes: token i is byte i (256 symbols); sentencepiece:
# a model the export carries, of `vocab` pieces (default 8000, at least
# 260: its 256 byte pieces, <unk>, <s> and </s>, and one more).
TOKENIZERS = ("bytes", "sentencepiece")
_SENTENCEPIECE_VOCAB = 8000
_SENTENCEPIECE_MIN_VOCAB = 260

# services/model/architecture_catalog.h TransformerDefaults.
TRANSFORMER_DEFAULTS = {"embed_dim": 64, "depth": 6, "heads": 4,
                        "mlp_ratio": 2.0}
# The patch side by variant (architecture_catalog.cc DefaultPatchSize).
PATCH_SIZES = {"imagenet": 16, "cifar": 4, "mnist": 7}
# How images become tokens, in the enum's order (TransformerSpec.Stem);
# the default is the one C++ resolution gives.
STEMS = ("patch", "conv")
DEFAULT_STEM = "conv"
# Every transformer size a spec may set (the stem besides, not a number).
_SIZE_NAMES = (*TRANSFORMER_DEFAULTS, "patch_size")


# services/job/job_spec_validation.cc limits.
_MAX_WIDTH = 8.0
_MAX_CLASSES = 1000000
_MAX_EMBED_DIM = 8192
_MAX_DEPTH = 256
_MAX_MLP_RATIO = 16.0
_MAX_TOKENS = 4096


# proto enum names of the dataset kinds whose images are 28x28x1
# (job_spec_defaults.cc: they imply the mnist variant, the others cifar).
_MNIST_LIKE_DATASETS = ("fashion_mnist", "mnist")
_DATASET_KINDS = ("fashion_mnist", "mnist", "cifar10", "synthetic",
                  "image_folder", "text")


def _llround(x):
    """C's llround for x >= 0: the nearest integer, halves away from zero.

    network.cc sizes channels with llround; floor(x + 0.5) would be off by
    one for the largest double below 0.5.
    """
    whole = math.floor(x)
    return int(whole) + (1 if x - whole >= 0.5 else 0)


def _scaled(channels, width):
    """max(1, llround(channels * width)), as network.cc `scaled`."""
    return max(1, _llround(channels * width))


def _build_cnn(arch, variant, width, num_classes):
    """network.cc BuildNetwork for the CNNs, block by block."""
    bottleneck = arch.endswith("50") or arch.endswith("101")
    per_layer = {"18": (2, 2, 2, 2), "34": (3, 4, 6, 3), "50": (3, 4, 6, 3),
                 "101": (3, 4, 23, 3)}[re.search(r"\d+$", arch).group()]
    reversible = arch.startswith(("revnet", "irevnet"))
    # i-RevNet: every shape change is a squeeze inside the coupling.
    invertible_downsampling = arch == "irevnet18"
    imagenet = variant == "imagenet"
    shape = INPUT_SHAPES[variant]

    # A reversible network carries two streams, each as wide as the
    # matching ResNet.
    stem_width = _scaled(64, width)
    blocks = [StemBlock(shape[0], 2 * stem_width if reversible else stem_width,
                        imagenet, reversible)]
    channels = stem_width  # per stream
    for layer, base in enumerate((64, 128, 256, 512)):
        inner = _scaled(base, width)
        out = 4 * inner if bottleneck else inner
        for i in range(per_layer[layer]):
            stride = 2 if i == 0 and layer > 0 else 1
            if invertible_downsampling:
                # A squeeze by the stride keeps every value: s^2 x channels.
                squeezed = channels * stride * stride
                blocks.append(CouplingBlock(channels, inner, squeezed, stride,
                                            bottleneck))
                channels = squeezed
                continue
            changes_shape = stride != 1 or channels != out
            if not reversible:
                block = ResidualBlock(channels, inner, out, stride, bottleneck)
            elif changes_shape:
                block = RevDownsampleBlock(channels, inner, out, stride,
                                           bottleneck)
            else:
                block = CouplingBlock(channels, inner, out, 1, bottleneck)
            blocks.append(block)
            channels = out
    blocks.append(HeadBlock(2 * channels if reversible else channels,
                            num_classes))
    return Network(blocks, arch=arch, variant=variant, width=width,
                   num_classes=num_classes)


def _build_transformer(arch, variant, num_classes, sizes):
    """network.cc BuildTransformer: stem, `depth` blocks, head."""
    rev = arch == "revvit"
    cin, side, _ = INPUT_SHAPES[variant]
    dim, heads = sizes["embed_dim"], sizes["heads"]
    hidden = max(1, _llround(sizes["mlp_ratio"] * dim))
    block = RevViTBlock if rev else ViTBlock
    blocks = [PatchEmbedBlock(cin, side, dim, sizes["patch_size"], rev,
                              sizes["stem"] == "conv")]
    blocks += [block(dim, heads, hidden) for _ in range(sizes["depth"])]
    blocks.append(TokenHeadBlock(2 * dim if rev else dim, num_classes))
    return Network(blocks, arch=arch, variant=variant, width=1.0,
                   num_classes=num_classes, transformer=dict(sizes))


def _build_language_model(arch, t):
    """network.cc DescribeLanguageModel: token stem, `depth` causal blocks,
    LM head."""
    rev = arch == "revlm"
    dim = t["embed_dim"]
    hidden = max(1, _llround(t["mlp_ratio"] * dim))
    block = RevViTBlock if rev else ViTBlock
    blocks = [TokenEmbedBlock(t["vocab"], t["seq_len"], dim, rev)]
    blocks += [block(dim, t["heads"], hidden, causal=True)
               for _ in range(t["depth"])]
    blocks.append(LmHeadBlock(2 * dim if rev else dim, t["vocab"],
                              blocks[0] if t["tie_embeddings"] else None))
    sizes = {k: v for k, v in t.items() if k != "tokenizer"}
    return LanguageModel(blocks, arch=arch, transformer=sizes,
                         tokenizer=t["tokenizer"])


# --------------------------------------------------------------------------
# Argument checking (job_spec_validation.cc) and the public API.
# --------------------------------------------------------------------------

def _short_name(value, allowed, field, prefix):
    """A lower-case name from `allowed` (case-insensitive, '-' as '_'), or
    the proto's full name with `prefix` ("VARIANT_MNIST", as specs and
    petra.Client.to_dict give them)."""
    if isinstance(value, str):
        name = value.strip().lower().replace("-", "_")
        if name.startswith(prefix.lower()):
            name = name[len(prefix):]
        if name in allowed:
            return name
    raise ValueError(f"{field}: {value!r} is not one of "
                     f"{', '.join(allowed)}")


def _check_int(value, field, low, high, what=None):
    if not js.is_int(value) or not low <= value <= high:
        raise ValueError(f"{field}: {value!r} "
                         f"{what or f'must be an integer in [{low}, {high}]'}")
    return int(value)


def _check_real(value, field, high):
    if (not js.is_real(value) or not math.isfinite(value) or value <= 0
            or value > high):
        raise ValueError(f"{field}: {value!r} must be a number in "
                         f"(0, {high:g}]")
    return float(value)


def _check_block_sizes(t, field):
    """The sizes every transformer's blocks share, checked in place
    (job_spec_validation.cc CheckBlockSizes)."""
    t["embed_dim"] = _check_int(t["embed_dim"], field("embed_dim"), 1,
                                _MAX_EMBED_DIM)
    t["depth"] = _check_int(t["depth"], field("depth"), 1, _MAX_DEPTH)
    t["heads"] = _check_int(
        t["heads"], field("heads"), 1, t["embed_dim"],
        f"must be a positive integer dividing embed_dim ({t['embed_dim']})")
    if t["embed_dim"] % t["heads"]:
        raise ValueError(f"{field('heads')}: {t['heads']} must divide "
                         f"embed_dim ({t['embed_dim']})")
    t["mlp_ratio"] = _check_real(t["mlp_ratio"], field("mlp_ratio"),
                                 _MAX_MLP_RATIO)


def _resolve(arch, variant, width, num_classes, sizes, field):
    """Checks and fills in a model as the C++ resolution and validation do.

    `sizes` maps the transformer size names to values or None (unset);
    `field(name)` is how an error names an argument. Returns (arch,
    variant, width, num_classes, resolved sizes or None).
    """
    arch = _short_name(arch, ARCHITECTURES, field("arch"), "ARCHITECTURE_")
    lm_names = ("seq_len", "vocab", "tokenizer", "tie_embeddings")
    if arch in LANGUAGE_MODELS:
        return _resolve_language_model(arch, variant, width, num_classes,
                                       sizes, field)
    lm_given = [k for k in lm_names if sizes.get(k) is not None]
    if lm_given:
        raise ValueError(f"{field(lm_given[0])}: only the language models "
                         f"(revlm, gpt) have seq_len, vocab, tokenizer and "
                         f"tie_embeddings, "
                         f"not {arch}")
    sizes = {k: v for k, v in sizes.items() if k not in lm_names}
    if variant is None:
        variant = "cifar"
    variant = _short_name(variant, VARIANTS, field("variant"), "VARIANT_")
    width = 1.0 if width is None else _check_real(width, field("width"),
                                                  _MAX_WIDTH)
    if arch == "irevnet18" and variant == "mnist":
        raise ValueError(
            f"{field('variant')}: 'mnist' cannot be used with irevnet18, "
            "which squeezes 2x2 pixels three times and needs sides divisible "
            "by 8 (variant cifar or imagenet), not 28x28")
    if num_classes is None:
        num_classes = 1000 if variant == "imagenet" else 10
    num_classes = _check_int(num_classes, field("num_classes"), 2,
                             _MAX_CLASSES)
    given = {k: v for k, v in sizes.items() if v is not None}
    if arch not in TRANSFORMERS:
        if given:
            raise ValueError(
                f"{field(next(iter(given)))}: only revvit and vit have "
                "transformer sizes (embed_dim, depth, heads, mlp_ratio, "
                f"patch_size, stem); a CNN's size is its width, not {arch}")
        return arch, variant, width, num_classes, None
    if width != 1.0:
        raise ValueError(
            f"{field('width')}: {width:g} must be 1 for {arch}, which is "
            "sized by embed_dim, depth, heads, mlp_ratio and patch_size")
    t = dict(TRANSFORMER_DEFAULTS, patch_size=PATCH_SIZES[variant],
             stem=DEFAULT_STEM)
    t.update(given)
    _check_block_sizes(t, field)
    side = INPUT_SHAPES[variant][1]
    patch = t["patch_size"]
    if not js.is_int(patch) or patch < 1 or side % patch:
        divisors = [p for p in range(1, side + 1)
                    if side % p == 0 and (side // p) ** 2 <= _MAX_TOKENS]
        raise ValueError(
            f"{field('patch_size')}: {patch!r} must divide the input's side "
            f"({side} for variant {variant}): one of "
            f"{', '.join(map(str, divisors))}")
    tokens = (side // patch) ** 2
    if tokens > _MAX_TOKENS:
        raise ValueError(
            f"{field('patch_size')}: {patch} gives {tokens} tokens of a "
            f"{side}x{side} input; at most {_MAX_TOKENS} (a larger patch)")
    t["patch_size"] = int(patch)
    t["stem"] = _short_name(t["stem"], STEMS, field("stem"), "STEM_")
    if t["stem"] == "conv" and _conv_stem_side(side, patch) != side // patch:
        raise ValueError(
            f"{field('patch_size')}: {patch}: the conv stem's stride-2 "
            f"convolutions take {side} to {_conv_stem_side(side, patch)} "
            f"tokens a side, not {side // patch}; use a power of two or "
            "stem='patch'")
    return arch, variant, width, num_classes, t


def _resolve_language_model(arch, variant, width, num_classes, sizes,
                            field):
    """_resolve for revlm and gpt (model_data_checks.cc): no variant, width
    1, the language-model sizes; num_classes is the vocabulary."""
    if variant is not None:
        raise ValueError(f"{field('variant')}: {arch} takes tokens and has no "
                         f"image variant; leave it out")
    if width is not None and width != 1.0:
        raise ValueError(f"{field('width')}: {width!r} must be 1 for {arch}, "
                         "which is sized by embed_dim, depth, heads, "
                         "mlp_ratio, seq_len and vocab")
    for name in ("patch_size", "stem"):
        if sizes.get(name) is not None:
            raise ValueError(f"{field(name)}: {arch} takes tokens, not "
                             f"image patches; leave {name} out")
    t = dict(LANGUAGE_MODEL_DEFAULTS, tokenizer="bytes", tie_embeddings=False)
    t.update({k: v for k, v in sizes.items()
              if v is not None and k in (*LANGUAGE_MODEL_DEFAULTS,
                                         "tokenizer", "tie_embeddings")})
    if not isinstance(t["tie_embeddings"], bool):
        raise ValueError(f"{field('tie_embeddings')}: "
                         f"{t['tie_embeddings']!r} must be True or False")
    t["tokenizer"] = _short_name(t["tokenizer"], TOKENIZERS,
                                 field("tokenizer"), "TOKENIZER_")
    if t["tokenizer"] == "sentencepiece" and sizes.get("vocab") is None:
        t["vocab"] = _SENTENCEPIECE_VOCAB
    _check_block_sizes(t, field)
    t["seq_len"] = _check_int(t["seq_len"], field("seq_len"), 1, _MAX_TOKENS)
    t["vocab"] = _check_int(t["vocab"], field("vocab"), 2, _MAX_CLASSES)
    if t["tokenizer"] == "bytes" and t["vocab"] != 256:
        raise ValueError(f"{field('vocab')}: {t['vocab']} must be 256 with "
                         "the bytes tokenizer (one token per byte value)")
    if (t["tokenizer"] == "sentencepiece"
            and t["vocab"] < _SENTENCEPIECE_MIN_VOCAB):
        raise ValueError(f"{field('vocab')}: {t['vocab']} must be at least "
                         f"{_SENTENCEPIECE_MIN_VOCAB} with a sentencepiece "
                         "tokenizer (256 byte pieces, <unk>, <s>, </s> first)")
    if num_classes is not None and num_classes != t["vocab"]:
        raise ValueError(f"{field('num_classes')}: {num_classes!r} must be "
                         f"the vocabulary's size ({t['vocab']}) for {arch}")
    return arch, None, 1.0, t["vocab"], t


def input_shape(variant):
    """One sample's input shape (C, H, W) for a variant (InputShape)."""
    return INPUT_SHAPES[_short_name(variant, VARIANTS, "variant",
                                     "VARIANT_")]


def build(arch, variant=None, width=None, num_classes=None, *,
          embed_dim=None, depth=None, heads=None, mlp_ratio=None,
          patch_size=None, stem=None, seq_len=None, vocab=None,
          tokenizer=None, tie_embeddings=None):
    """The network `petra` builds for this model, freshly initialised.

    arch: one of ARCHITECTURES; variant: one of VARIANTS (names are
    case-insensitive, '-' may stand for '_'; None means cifar; the language
    models have none). width: channel multiplier of
    the CNNs, in (0, 8]; must be 1 (or None) for the transformers. num_classes: in
    [2, 1000000]; None means the variant's default, as a job spec (1000 for
    imagenet, 10 otherwise). embed_dim, depth, heads, mlp_ratio, patch_size,
    stem (one of STEMS): revvit and vit only; None means the C++ default
    (TRANSFORMER_DEFAULTS, the variant's PATCH_SIZES, the conv stem).
    revlm and gpt (LANGUAGE_MODELS) take embed_dim, depth, heads,
    mlp_ratio, seq_len, vocab, tokenizer (one of TOKENIZERS) and
    tie_embeddings (the LM head reads the token embedding's weight), None
    meaning LANGUAGE_MODEL_DEFAULTS, bytes and untied, and return a
    LanguageModel.
    Raises ValueError naming the bad argument and what it accepts.
    """
    sizes = {"embed_dim": embed_dim, "depth": depth, "heads": heads,
             "mlp_ratio": mlp_ratio, "patch_size": patch_size, "stem": stem,
             "seq_len": seq_len, "vocab": vocab, "tokenizer": tokenizer,
             "tie_embeddings": tie_embeddings}
    arch, variant, width, num_classes, t = _resolve(
        arch, variant, width, num_classes, sizes, lambda name: name)
    if arch in LANGUAGE_MODELS:
        return _build_language_model(arch, t)
    if t is None:
        return _build_cnn(arch, variant, width, num_classes)
    return _build_transformer(arch, variant, num_classes, t)


# --------------------------------------------------------------------------
# Job specs as JSON dicts (services/job/job_spec_io.cc, job_spec_defaults.cc).
# --------------------------------------------------------------------------

def from_spec(spec):
    """The network of a job spec given as a dict (its `model` part).

    spec: a JobSpec as `petra spec` prints it, or a Job as `petra status
    --json` prints it (the JobSpec is its "spec"), already parsed with
    json.load. Field names may be snake_case or lowerCamel; enums
    "ARCHITECTURE_REVNET18", their numbers or short names ("revnet18").
    Missing fields get the C++ defaults (job_spec_defaults.cc): the variant
    the dataset kind implies (mnist for (Fashion-)MNIST, cifar otherwise),
    width 1, the variant's class count, TRANSFORMER_DEFAULTS, the
    variant's PATCH_SIZES and the conv stem. Raises
    ValueError naming the spec field ("model.width", ...) that is wrong.
    """
    if not isinstance(spec, dict):
        raise ValueError(f"spec: expected a dict (a JobSpec or a Job parsed "
                         f"from JSON), got {type(spec).__name__}")
    if "model" not in spec and isinstance(spec.get("spec"), dict):
        spec = spec["spec"]  # a Job
    model = js.field(spec, "model", "")
    if model is None:
        model = {}
    if not isinstance(model, dict):
        raise ValueError(f"model: expected an object, got {model!r}")

    arch = js.field(model, "architecture", "model.")
    if arch is not None:
        arch = js.enum(arch, "ARCHITECTURE_", ARCHITECTURES,
                     "model.architecture")
    if arch is None:
        raise ValueError("model.architecture: required (one of "
                         f"{', '.join(ARCHITECTURES)})")
    variant = js.field(model, "variant", "model.")
    if variant is not None:
        variant = js.enum(variant, "VARIANT_", VARIANTS, "model.variant")
    language_model = arch in LANGUAGE_MODELS
    if variant is None and not language_model:
        dataset = js.field(spec, "dataset", "") or {}
        kind = js.field(dataset, "kind", "dataset.") if isinstance(
            dataset, dict) else None
        if kind is not None:
            kind = js.enum(kind, "DATASET_KIND_", _DATASET_KINDS,
                         "dataset.kind")
        variant = "mnist" if kind in _MNIST_LIKE_DATASETS else "cifar"
    width = js.number(js.field(model, "width", "model."), "model.width", False)
    num_classes = js.number(js.field(model, "num_classes", "model."),
                          "model.num_classes", True)
    transformer = js.field(model, "transformer", "model.")
    lm_sizes = ("seq_len", "vocab")
    sizes = dict.fromkeys((*_SIZE_NAMES, "stem", *lm_sizes, "tokenizer",
                           "tie_embeddings"))
    if language_model:
        dataset = js.field(spec, "dataset", "") or {}
        text = js.field(dataset, "text", "dataset.") if isinstance(
            dataset, dict) else None
        tokenizer = js.field(text, "tokenizer", "dataset.text.") if isinstance(
            text, dict) else None
        if tokenizer is not None:
            sizes["tokenizer"] = js.enum(tokenizer, "TOKENIZER_", TOKENIZERS,
                                       "dataset.text.tokenizer")
    if transformer is not None:
        if not isinstance(transformer, dict):
            raise ValueError(f"model.transformer: expected an object, got "
                             f"{transformer!r}")
        if language_model:
            for name in lm_sizes:
                sizes[name] = js.number(
                    js.field(transformer, name, "model.transformer."),
                    f"model.transformer.{name}", True)
            sizes["tie_embeddings"] = js.field(transformer, "tie_embeddings",
                                             "model.transformer.")
        elif arch not in TRANSFORMERS:
            # As the validation: a CNN's spec may not carry transformer
            # sizes, even an empty message.
            raise ValueError(
                "model.transformer: only revvit and vit have transformer "
                f"sizes (a CNN's size is model.width), not {arch}")
        for name in _SIZE_NAMES:
            sizes[name] = js.number(
                js.field(transformer, name, "model.transformer."),
                f"model.transformer.{name}", name != "mlp_ratio")
        stem = js.field(transformer, "stem", "model.transformer.")
        if stem is not None:
            sizes["stem"] = js.enum(stem, "STEM_", STEMS,
                                  "model.transformer.stem")

    def field(name):
        if name in (*_SIZE_NAMES, "stem", *lm_sizes, "tie_embeddings"):
            return f"model.transformer.{name}"
        if name == "tokenizer":
            return "dataset.text.tokenizer"
        return "model.architecture" if name == "arch" else f"model.{name}"

    arch, variant, width, num_classes, t = _resolve(
        arch, variant, width, num_classes, sizes, field)
    if language_model:
        return _build_language_model(arch, t)
    if t is None:
        return _build_cnn(arch, variant, width, num_classes)
    return _build_transformer(arch, variant, num_classes, t)


def load(export, map_location="cpu"):
    """The network of `export` (a path, or the state_dict torch.load gave),
    its weights loaded strictly, in eval mode. Raises ValueError when the
    export does not say its network."""
    state = (export if isinstance(export, dict) else torch.load(
        export, map_location=map_location))
    described = state.get("input.model")
    if not isinstance(described, torch.Tensor) or described.numel() == 0:
        raise ValueError(
            "the export does not say its network (it predates input.model): "
            "build it with petra.models.build(...) with the sizes it was "
            "trained with, then load_state_dict(torch.load(path))")
    try:
        model_spec = json.loads(bytes(described.tolist()).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"the export's input.model is not JSON: {e}") from e
    spec = {"model": model_spec}
    tokenizer = state.get("input.tokenizer")
    arch = str(model_spec.get("architecture", "")).lower()
    if arch.endswith(LANGUAGE_MODELS):
        sentencepiece = isinstance(tokenizer, torch.Tensor) and bool(
            tokenizer.numel())
        spec["dataset"] = {"kind": "DATASET_KIND_TEXT", "text": {
            "tokenizer": "TOKENIZER_SENTENCEPIECE" if sentencepiece
            else "TOKENIZER_BYTES"}}
    network = from_spec(spec)
    network.load_state_dict(state, strict=True)
    return network.eval()
