"""petra.models without a C++ binary: parameter counts against `petra
model-info`'s, the state_dict keys an export holds, BatchNorm's buffers,
transformer keys, input shapes, defaults, from_spec on every spec form
`petra` writes, and the errors build, from_spec and strict loading give.
(models_test.py compares logits with the C++ zoo.)
"""

import math
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
sys.path.insert(0, PYTHON_DIR)

import cpp_reference  # noqa: E402  (the test's own directory)

torch = cpp_reference.import_torch(__file__)

from petra import models  # noqa: E402  (after the sys.path change)

# What an export holds beside the blocks (export_input.h).
INPUT_KEYS = {"input.mean", "input.std", "input.shape", "input.class_names",
              "input.model", "input.tokenizer"}

CNNS = ("revnet18", "revnet34", "revnet50", "revnet101", "irevnet18",
        "resnet18", "resnet34", "resnet50", "resnet101")

# `petra model-info --arch A --variant V --width 0.25` (CNNs) and
# `--embed-dim 32 --depth 2 --heads 2 --mlp-ratio 1.5 --patch-size 7
# --stem patch` (transformers), default class counts: the C++ parameter
# counts. The conv stem's (the default): MODEL_INFO_CONV_STEM_PARAMS.
MODEL_INFO_PARAMS = {
    ("revnet18", "imagenet"): 961480, ("revnet18", "cifar"): 703210,
    ("revnet18", "mnist"): 702634, ("revnet34", "imagenet"): 1594632,
    ("revnet34", "cifar"): 1336362, ("revnet34", "mnist"): 1335786,
    ("revnet50", "imagenet"): 2683336, ("revnet50", "cifar"): 1664746,
    ("revnet50", "mnist"): 1664170, ("resnet18", "imagenet"): 831096,
    ("resnet18", "cifar"): 701466, ("resnet18", "mnist"): 701178,
    ("resnet34", "imagenet"): 1464248, ("resnet34", "cifar"): 1334618,
    ("resnet34", "mnist"): 1334330, ("resnet50", "imagenet"): 1993976,
    ("resnet50", "cifar"): 1484186, ("resnet50", "mnist"): 1483898,
    ("revnet101", "imagenet"): 3880136, ("revnet101", "cifar"): 2861546,
    ("revnet101", "mnist"): 2860970, ("resnet101", "imagenet"): 3190776,
    ("resnet101", "cifar"): 2680986, ("resnet101", "mnist"): 2680698,
    ("irevnet18", "imagenet"): 6442376, ("irevnet18", "cifar"): 4410026,
    ("revvit", "imagenet"): 117640, ("revvit", "mnist"): 17898,
    ("vit", "imagenet"): 85576, ("vit", "mnist"): 17514,
}

# The same transformer flags without --stem patch (the conv stem), mnist.
MODEL_INFO_CONV_STEM_PARAMS = {"revvit": 36266, "vit": 35882}


class StructureTestCase(unittest.TestCase):
    """What needs no C++ binary: sizes, names, specs, errors."""

    def test_parameter_counts_match_model_info(self):
        for (arch, variant), count in MODEL_INFO_PARAMS.items():
            with self.subTest(arch=arch, variant=variant):
                if arch in models.TRANSFORMERS:
                    model = models.build(arch, variant, embed_dim=32,
                                         depth=2, heads=2, mlp_ratio=1.5,
                                         patch_size=7, stem="patch")
                else:
                    model = models.build(arch, variant, width=0.25)
                self.assertEqual(sum(p.numel() for p in model.parameters()),
                                 count)
        for arch, count in MODEL_INFO_CONV_STEM_PARAMS.items():
            model = models.build(arch, "mnist", embed_dim=32, depth=2,
                                 heads=2, mlp_ratio=1.5, patch_size=7)
            self.assertEqual(sum(p.numel() for p in model.parameters()),
                             count, arch)

    def test_readme_key_examples(self):
        keys = set(models.build("revnet18", "mnist", 0.25, 10).state_dict())
        for name in ("blocks.0.conv.conv.weight",
                     "blocks.0.conv.bn.running_mean",
                     "blocks.8.residual.body.1.conv.weight",
                     "blocks.9.fc.weight"):
            self.assertIn(name, keys)
        blocks = {k for k in keys if k.startswith("blocks.")}
        self.assertEqual(len({k.split(".")[1] for k in blocks}), 10)
        self.assertEqual(keys - blocks, INPUT_KEYS)

    def test_batch_norm_has_no_counter(self):
        """The C++ BatchNorm has no num_batches_tracked; neither may we."""
        for arch in CNNS:
            keys = models.build(arch, "cifar", 0.125).state_dict()
            self.assertFalse([k for k in keys if "num_batches" in k], arch)
            bn = [k for k in keys if k.endswith(".running_var")]
            self.assertTrue(bn, arch)

    def test_transformer_keys(self):
        keys = set(models.build("revvit", "mnist", depth=1,
                                stem="patch").state_dict())
        self.assertEqual(keys, {
            "blocks.0.patch.weight", "blocks.0.patch.bias",
            "blocks.0.position",
            *(f"blocks.1.{part}.{name}"
              for part, names in (("attention", ("norm", "qkv", "proj")),
                                  ("mlp", ("norm", "fc1", "fc2")))
              for layer in names for name in (
                  f"{layer}.weight", f"{layer}.bias")),
            "blocks.2.norm.weight", "blocks.2.norm.bias",
            "blocks.2.fc.weight", "blocks.2.fc.bias", *INPUT_KEYS})
        # The conv stem: patches of 7 take ceil(log2 7) = 3 stride-2
        # ConvBn layers, 32, 64 and 64 wide, then the 1x1 `patch`.
        conv = models.build("revvit", "mnist", depth=1)
        self.assertEqual(set(conv.state_dict()) - keys, {
            f"blocks.0.convs.{i}.{name}" for i in range(3) for name in (
                "conv.weight", "bn.weight", "bn.bias", "bn.running_mean",
                "bn.running_var")})
        self.assertEqual(
            [tuple(c.conv.weight.shape) for c in conv.blocks[0].convs],
            [(32, 1, 3, 3), (64, 32, 3, 3), (64, 64, 3, 3)])
        self.assertEqual(tuple(conv.blocks[0].patch.weight.shape),
                         (64, 64, 1, 1))
        self.assertEqual(models.conv_stem_widths(16, 768),
                         [32, 64, 128, 256])
        self.assertEqual(models.conv_stem_widths(1, 64), [])

    def test_input_shapes_and_logits(self):
        for variant, shape in (("imagenet", (3, 224, 224)),
                               ("cifar", (3, 32, 32)),
                               ("mnist", (1, 28, 28))):
            self.assertEqual(models.input_shape(variant), shape)
            # The proto's full names, as specs and Client.to_dict give them.
            self.assertEqual(
                models.input_shape("VARIANT_" + variant.upper()), shape)
        self.assertEqual(
            models.build("ARCHITECTURE_RESNET18", "VARIANT_MNIST", 0.125,
                         3).arch, "resnet18")
        model = models.build("resnet18", "mnist", 0.125, 3).eval()
        with torch.no_grad():
            self.assertEqual(tuple(model(torch.randn(2, 1, 28, 28)).shape),
                             (2, 3))
        with self.assertRaisesRegex(ValueError, "N x 1 x H x W"):
            model(torch.randn(2, 3, 28, 28))

    def test_train_mode_updates_running_statistics(self):
        model = models.build("revnet18", "mnist", 0.125)
        before = model.blocks[0].conv.bn.running_mean.clone()
        model.train()
        model(torch.randn(4, 1, 28, 28) + 3.0)
        self.assertFalse(torch.equal(before,
                                     model.blocks[0].conv.bn.running_mean))

    def test_defaults(self):
        self.assertEqual(models.build("resnet18", "imagenet", 0.125)
                         .num_classes, 1000)
        vit = models.build("vit", "cifar")
        self.assertEqual(vit.transformer,
                         dict(models.TRANSFORMER_DEFAULTS, patch_size=4,
                              stem="conv"))
        for variant, patch in (("mnist", 7), ("imagenet", 16)):
            self.assertEqual(models.build("revvit", variant)
                             .transformer["patch_size"], patch)
        self.assertEqual(len(vit.blocks), 6 + 2)
        self.assertEqual(vit.num_classes, 10)

    def test_from_spec_as_petra_spec_prints_it(self):
        """snake_case JobSpec: same keys and shapes as build()."""
        spec = {
            "model": {"architecture": "ARCHITECTURE_REVVIT",
                      "variant": "VARIANT_CIFAR", "width": 1,
                      "num_classes": 10,
                      "transformer": {"embed_dim": 32, "depth": 2,
                                      "heads": 4, "mlp_ratio": 2,
                                      "patch_size": 4}},
            "dataset": {"kind": "DATASET_KIND_CIFAR10",
                        "synthetic_train_size": "4096"},
            "seed": "7",
        }
        self.assert_same_state(
            models.from_spec(spec),
            models.build("revvit", "cifar", embed_dim=32, depth=2))

    def test_from_spec_of_a_job_in_camel_case(self):
        """A Job as `petra status --json` prints it (lowerCamel names)."""
        job = {"id": "job-3", "state": "JOB_STATE_SUCCEEDED",
               "spec": {"model": {"architecture": "ARCHITECTURE_RESNET50",
                                  "variant": "VARIANT_MNIST",
                                  "width": 0.125, "numClasses": 4},
                        "dataset": {"kind": "DATASET_KIND_MNIST"}}}
        self.assert_same_state(models.from_spec(job),
                               models.build("resnet50", "mnist", 0.125, 4))

    def test_from_spec_fills_the_defaults(self):
        """Missing fields: job_spec_defaults.cc's values."""
        cases = (
            # The dataset implies the variant; width 1; 10 classes.
            ({"model": {"architecture": "ARCHITECTURE_REVNET18"},
              "dataset": {"kind": "DATASET_KIND_FASHION_MNIST"}},
             models.build("revnet18", "mnist", 1.0, 10)),
            # Not (Fashion-)MNIST: cifar. Enum numbers, as the proto JSON
            # parser accepts them (9 = vit, 4 = synthetic).
            ({"model": {"architecture": 9},
              "dataset": {"kind": 4}},
             models.build("vit", "cifar")),
            # imagenet: 1000 classes; transformer sizes partly given.
            ({"model": {"architecture": "ARCHITECTURE_VIT",
                        "variant": "VARIANT_IMAGENET",
                        "transformer": {"depth": 1, "patchSize": 16}}},
             models.build("vit", "imagenet", num_classes=1000, depth=1,
                          patch_size=16)),
        )
        for spec, expected in cases:
            with self.subTest(spec=spec):
                self.assert_same_state(models.from_spec(spec), expected)

    def test_from_spec_refuses_bad_specs(self):
        cases = (
            ({}, "model.architecture"),
            ({"model": {"architecture": "ARCHITECTURE_UNSPECIFIED"}},
             "model.architecture"),
            ({"model": {"architecture": "ARCHITECTURE_LENET"}},
             "ARCHITECTURE_REVNET18"),
            ({"model": {"architecture": "ARCHITECTURE_RESNET18",
                        "width": 0}}, "model.width"),
            ({"model": {"architecture": "ARCHITECTURE_RESNET18",
                        "numClasses": 1}}, "model.num_classes"),
            ({"model": {"architecture": "ARCHITECTURE_RESNET18",
                        "transformer": {}}}, "model.transformer"),
            ({"model": {"architecture": "ARCHITECTURE_VIT",
                        "transformer": {"heads": 5}}},
             "model.transformer.heads"),
            ({"model": {"architecture": "ARCHITECTURE_VIT",
                        "transformer": {"stem": "STEM_SWIN"}}},
             "model.transformer.stem"),
            ({"model": {"architecture": "ARCHITECTURE_IREVNET18"},
              "dataset": {"kind": "DATASET_KIND_MNIST"}}, "model.variant"),
            ("revnet18", "spec"),
        )
        for spec, field in cases:
            with self.subTest(spec=spec):
                with self.assertRaisesRegex(ValueError, field):
                    models.from_spec(spec)

    def test_build_refuses_bad_arguments(self):
        cases = (
            (("revnet19",), {}, r"arch: 'revnet19' is not one of revnet18"),
            (("revnet18", "svhn"), {}, r"variant: 'svhn' is not one of "
                                       r"imagenet, cifar, mnist"),
            (("revnet18", "cifar", 0), {}, r"width: 0 .*\(0, 8\]"),
            (("revnet18", "cifar", 8.5), {}, r"width"),
            (("revnet18", "cifar", math.nan), {}, r"width"),
            (("revnet18", "cifar", "0.5"), {}, r"width"),
            (("revnet18", "cifar", 1.0, 1), {}, r"num_classes: 1 .*\[2, "),
            (("revnet18", "cifar", 1.0, 2.5), {}, r"num_classes"),
            (("irevnet18", "mnist"), {}, r"variant: 'mnist'.*irevnet18"),
            (("resnet18",), {"depth": 3}, r"depth: only revvit and vit"),
            (("vit", "cifar", 0.5), {}, r"width: 0.5 must be 1"),
            (("vit",), {"embed_dim": 0}, r"embed_dim: 0 .*\[1, 8192\]"),
            (("vit",), {"depth": 0}, r"depth: 0 .*\[1, 256\]"),
            (("vit",), {"heads": 3}, r"heads: 3 must divide embed_dim"),
            (("vit",), {"mlp_ratio": 0.0}, r"mlp_ratio: 0.0 .*\(0, 16\]"),
            (("vit",), {"patch_size": 5},
             r"patch_size: 5 must divide the input's side \(32"),
            (("vit", "imagenet"), {"patch_size": 2},
             r"patch_size: 2 gives 12544 tokens"),
            (("vit", "imagenet"), {"patch_size": 7},
             r"patch_size: 7: the conv stem's stride-2 convolutions take "
             r"224 to 28 tokens a side, not 32"),
            (("vit",), {"stem": "convnext"},
             r"stem: 'convnext' is not one of patch, conv"),
        )
        for args, kwargs, message in cases:
            with self.subTest(args=args, kwargs=kwargs):
                with self.assertRaisesRegex(ValueError, message):
                    models.build(*args, **kwargs)
        # Names are case-insensitive, '-' for '_', as the C++ flags.
        self.assertEqual(models.build("ResNet18", "MNIST", 0.125).arch,
                         "resnet18")

    def test_wrong_state_dicts_fail_strict_loading(self):
        model = models.build("revnet18", "cifar", 0.125)
        good = model.state_dict()
        wrong_shape = dict(good)
        wrong_shape["blocks.9.fc.weight"] = torch.zeros(11, 128)
        missing = {k: v for k, v in good.items()
                   if k != "blocks.3.residual.body.0.bn.running_var"}
        # What torch.nn.BatchNorm2d would add.
        extra = dict(good)
        extra["blocks.0.conv.bn.num_batches_tracked"] = torch.tensor(0)
        other_width = models.build("revnet18", "cifar", 0.25).state_dict()
        for name, state, message in (
                ("wrong shape", wrong_shape, "size mismatch"),
                ("missing", missing, "Missing key"),
                ("unexpected", extra, "Unexpected key"),
                ("other width", other_width, "size mismatch")):
            with self.subTest(name):
                with self.assertRaisesRegex(RuntimeError, message):
                    models.build("revnet18", "cifar", 0.125).load_state_dict(
                        state, strict=True)

    def assert_same_state(self, got, expected):
        got, expected = got.state_dict(), expected.state_dict()
        self.assertEqual(sorted(got), sorted(expected))
        for name in got:
            self.assertEqual(got[name].shape, expected[name].shape, name)


if __name__ == "__main__":
    unittest.main()
