#!/usr/bin/python3
"""Tests of petra.models: the Python model zoo against the C++ one.

What: for every architecture and variant the C++ zoo builds, a network from
`petra_zoo_reference` (the C++ build, tests/support/zoo_reference.cc: its
weights exported exactly as `petra export` exports them, with randomised
BatchNorm/LayerNorm affines, biases and running statistics, and a random
batch with its C++ evaluation-mode logits) is loaded into
petra.models.build(...) with strict=True and must give the same logits.
The structural tests, which need no binary (parameter counts as `petra
model-info` prints them, key names, from_spec's resolution of job specs,
the ValueErrors for bad arguments), are in models_structure_test.py.

Why: `petra export` files are only useful to a PyTorch user if a network
with exactly those keys computes what the fleet computed; these tests are
what keeps the two zoos from drifting apart.

Run (about 30 s on 2 busy cores):
    python3 python/tests/models_test.py -v
The binary is $PETRA_BIN_DIR/petra_zoo_reference, or build/bin/ of this
checkout when PETRA_BIN_DIR is unset (skipped only then, if missing).
"""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
REPO_ROOT = os.path.dirname(PYTHON_DIR)
sys.path.insert(0, PYTHON_DIR)

import cpp_reference  # noqa: E402  (the test's own directory)

torch = cpp_reference.import_torch(__file__)

from petra import models  # noqa: E402  (after the sys.path change)

REFERENCE_BINARY = "petra_zoo_reference"

# Same libtorch kernels on both sides, so the logits agree to float32
# rounding of a few operations at most (bitwise in most cases seen).
ATOL = 1e-5
RTOL = 1e-5

# Per variant: (width, num_classes, batch) for the CNNs. The widths give
# non-round channel counts (64 * 0.3 = 19.2 -> 19); imagenet keeps the
# variant's default class count (None: 1000, checked against C++'s default)
# and a batch of 2 at 224x224.
CNN_SIZES = {
    "imagenet": (0.125, None, 2),
    "cifar": (0.25, 7, 3),
    "mnist": (0.3, 10, 4),
}

# Per variant: (transformer sizes, num_classes, batch). mlp_ratio 1.3 of 24
# is 31.2 -> 31 hidden units (llround); imagenet's 224 takes patches of 16.
# The conv stem by default; check_transformer also builds the patch stem.
TRANSFORMER_SIZES = {
    "imagenet": (dict(embed_dim=16, depth=1, heads=4, mlp_ratio=2.0,
                      patch_size=16), None, 2),
    "cifar": (dict(embed_dim=24, depth=2, heads=3, mlp_ratio=1.3,
                   patch_size=8), 7, 3),
    "mnist": (dict(embed_dim=16, depth=2, heads=2, mlp_ratio=1.5,
                   patch_size=4), 10, 4),
}

# Largest |Python - C++| logit difference per architecture, printed at the
# end so that a run shows how close the zoos are, not only that they pass.
MAX_DIFF = {}


def reference_binary():
    """Path of petra_zoo_reference; skips or fails the test when missing."""
    return cpp_reference.binary(REFERENCE_BINARY)


def job_flags(arch, variant, width=None, num_classes=None, sizes=None):
    """The `petra train` job flags of a model."""
    flags = ["--arch", arch, "--variant", variant]
    if width is not None:
        flags += ["--width", repr(width)]
    if num_classes is not None:
        flags += ["--num-classes", str(num_classes)]
    for name, value in (sizes or {}).items():
        if isinstance(value, bool):
            flags.append(f"--{name.replace('_', '-')}={str(value).lower()}")
            continue
        flags += ["--" + name.replace("_", "-"),
                  value if isinstance(value, str) else repr(value)]
    return flags


class ReferenceServer:
    """One `petra_zoo_reference --serve` for many references: libtorch
    loads once, not once a network (about 40 s of the class's 80)."""

    def __init__(self):
        self.process = subprocess.Popen(
            [reference_binary(), "--serve"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run(self, args):
        """Runs one reference; its error, or None."""
        if any(" " in a or "\n" in a for a in args):
            raise ValueError(f"a flag with a space or a newline: {args}")
        self.process.stdin.write(" ".join(args) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise AssertionError(
                "petra_zoo_reference --serve ended: "
                f"{self.process.wait(timeout=30)}: "
                f"{self.process.stderr.read().strip()}")
        answer = answer.rstrip("\n")
        return None if answer == "ok" else answer

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)
        self.process.stdout.close()
        self.process.stderr.close()


def run_reference(flags, batch, seed, directory, server):
    """Runs one petra_zoo_reference through `server`; returns (export
    dict, reference dict)."""
    args = flags + ["--seed", str(seed), "--batch", str(batch),
                    "--output-dir", directory]
    error = server.run(args)
    if error is not None:
        raise AssertionError(f"petra_zoo_reference {' '.join(args)}: {error}")
    exported = torch.load(os.path.join(directory, "export.pt"))
    reference = torch.load(os.path.join(directory, "reference.pt"))
    return exported, reference


class ReferenceTestCase(unittest.TestCase):
    """Loads C++ exports into petra.models and compares logits."""

    @classmethod
    def setUpClass(cls):
        reference_binary()  # skips (or fails) the whole class when missing
        cls.tmp = tempfile.TemporaryDirectory(prefix="petra-models-test-")
        cls.runs = 0
        cls.server = ReferenceServer()

    @classmethod
    def tearDownClass(cls):
        cls.server.close()
        cls.tmp.cleanup()

    def check_against_cpp(self, arch, variant, width=None, num_classes=None,
                          sizes=None, batch=2):
        """C++ export -> build(...) strict load -> same eval logits."""
        type(self).runs += 1
        directory = os.path.join(self.tmp.name, str(self.runs))
        flags = job_flags(arch, variant, width, num_classes, sizes)
        exported, reference = run_reference(flags, batch, self.runs,
                                            directory, self.server)
        kwargs = dict(sizes or {})
        if width is not None:
            kwargs["width"] = width
        model = models.build(arch, variant, num_classes=num_classes,
                             **kwargs)
        ours = model.state_dict()
        missing = sorted(set(exported) - set(ours))
        unexpected = sorted(set(ours) - set(exported))
        self.assertEqual((missing, unexpected), ([], []),
                         "keys only in the export / only in petra.models")
        for name, tensor in exported.items():
            if name in ("input.class_names", "input.model", "input.tokenizer"):
                continue  # the export's own length: the bytes it holds
            self.assertEqual(tuple(tensor.shape), tuple(ours[name].shape),
                             name)
        model.load_state_dict(exported, strict=True)
        model.eval()
        # The input as petra_zoo_reference records it: the model normalises
        # the [0, 1] images itself, and names the classes.
        self.assertEqual(model.class_names,
                         ["class %d" % k for k in range(model.num_classes)])
        images = reference["input"]
        self.assertEqual(tuple(images.shape[1:]),
                         models.input_shape(variant))
        with torch.no_grad():
            logits = model(images)
        expected = reference["logits"]
        self.assertEqual(tuple(logits.shape),
                         (batch, model.num_classes))
        diff = (logits - expected).abs().max().item()
        MAX_DIFF[arch] = max(MAX_DIFF.get(arch, 0.0), diff)
        torch.testing.assert_close(logits, expected, atol=ATOL, rtol=RTOL)
        # The export says its network: load builds the same one.
        with torch.no_grad():
            self.assertTrue(torch.equal(models.load(exported)(images), logits))

    def check_cnn(self, arch):
        for variant in models.VARIANTS:
            if arch == "irevnet18" and variant == "mnist":
                continue  # refused by both (test_irevnet18_refuses_mnist)
            width, classes, batch = CNN_SIZES[variant]
            with self.subTest(variant=variant):
                self.check_against_cpp(arch, variant, width, classes,
                                       batch=batch)

    def check_transformer(self, arch):
        for variant in models.VARIANTS:
            sizes, classes, batch = TRANSFORMER_SIZES[variant]
            with self.subTest(variant=variant, **sizes):
                self.check_against_cpp(arch, variant, None, classes, sizes,
                                       batch)
        # The C++ defaults on both sides (embed_dim 64, depth 6, heads 4,
        # mlp_ratio 2, and the variant's patch_size: 4 for cifar, 7 for
        # mnist).
        for variant in ("cifar", "mnist"):
            with self.subTest(variant=variant, sizes="defaults"):
                self.check_against_cpp(arch, variant, batch=2)
        # ViT's patchify stem (the default is the conv stem).
        for variant in models.VARIANTS:
            sizes, classes, batch = TRANSFORMER_SIZES[variant]
            with self.subTest(variant=variant, stem="patch"):
                self.check_against_cpp(arch, variant, None, classes,
                                       dict(sizes, stem="patch"), batch)
        # Wide enough that the MLP's pre-activations reach O(1), where the
        # GELU flavour shows: tanh's approximation is 4e-5 off here, exact
        # erf bitwise (the narrow networks above cannot tell them apart, as
        # the reference keeps ViT's N(0, 0.02) linear weights).
        with self.subTest(variant="mnist", sizes="wide"):
            self.check_against_cpp(
                arch, "mnist", None, 10,
                dict(embed_dim=512, depth=1, heads=4, mlp_ratio=8.0,
                     patch_size=7), 2)

    def test_revnet18(self):
        self.check_cnn("revnet18")

    def test_revnet34(self):
        self.check_cnn("revnet34")

    def test_revnet50(self):
        self.check_cnn("revnet50")

    def test_revnet101(self):
        self.check_cnn("revnet101")

    def test_irevnet18(self):
        self.check_cnn("irevnet18")

    def test_resnet18(self):
        self.check_cnn("resnet18")

    def test_resnet34(self):
        self.check_cnn("resnet34")

    def test_resnet50(self):
        self.check_cnn("resnet50")

    def test_resnet101(self):
        self.check_cnn("resnet101")

    def test_revvit(self):
        self.check_transformer("revvit")

    def test_vit(self):
        self.check_transformer("vit")

    def check_language_model(self, arch, sizes, batch=2):
        """C++ export -> build(...) strict load -> the same logits at every
        position of a batch of token ids."""
        type(self).runs += 1
        directory = os.path.join(self.tmp.name, str(self.runs))
        flags = ["--arch", arch] + job_flags(arch, "cifar", sizes=sizes)[4:]
        exported, reference = run_reference(flags, batch, self.runs,
                                            directory, self.server)
        model = models.build(arch, **sizes)
        self.assertIsInstance(model, models.LanguageModel)
        ours = model.state_dict()
        self.assertEqual((sorted(set(exported) - set(ours)),
                          sorted(set(ours) - set(exported))), ([], []),
                         "keys only in the export / only in petra.models")
        model.load_state_dict(exported, strict=True)
        model.eval()
        tokens = reference["input"]
        self.assertEqual(tokens.dtype, torch.int64)
        self.assertEqual(tuple(tokens.shape), (batch, model.seq_len))
        with torch.no_grad():
            logits = model(tokens)
        expected = reference["logits"]
        self.assertEqual(tuple(logits.shape),
                         (batch, model.seq_len, model.vocab))
        MAX_DIFF[arch] = max(MAX_DIFF.get(arch, 0.0),
                             (logits - expected).abs().max().item())
        torch.testing.assert_close(logits, expected, atol=ATOL, rtol=RTOL)
        # Causal: a shorter context gives the same logits at its positions.
        with torch.no_grad():
            prefix = model(tokens[:, :5])
        torch.testing.assert_close(prefix, expected[:, :5], atol=ATOL,
                                   rtol=RTOL)
        return directory, model

    def test_revlm(self):
        self.check_language_model("revlm", dict(
            embed_dim=24, depth=2, heads=3, mlp_ratio=1.3, seq_len=12))

    def test_gpt(self):
        self.check_language_model("gpt", dict(
            embed_dim=16, depth=3, heads=2, seq_len=9))

    def test_tied_revlm_and_gpt(self):
        """--tie-embeddings: no head weight in the export; the head reads
        the embedding's."""
        for arch in ("revlm", "gpt"):
            with self.subTest(arch=arch):
                _, model = self.check_language_model(arch, dict(
                    embed_dim=16, depth=1, heads=2, seq_len=8,
                    tie_embeddings=True))
                self.assertNotIn("blocks.2.fc.weight", model.state_dict())

    def test_generate_writes_what_petra_generate_writes(self):
        """The same export, prompt and seed: the same text in Python and
        from `petra generate`, draw for draw (sampled and greedy)."""
        import json
        petra = os.path.join(os.path.dirname(reference_binary()), "petra")
        if not os.access(petra, os.X_OK):
            self.skipTest(f"{petra} not found")
        sizes = dict(embed_dim=16, depth=2, heads=2, seq_len=16)
        directory, model = self.check_language_model("revlm", sizes)
        size_flags = job_flags("revlm", "cifar", sizes=sizes)[4:]
        prompt = "The reversible network, a prompt longer than its context"
        for temperature, top_k, seed in ((1.0, 0, 3), (0.7, 20, 11),
                                         (0.0, 0, 5)):
            with self.subTest(temperature=temperature, top_k=top_k):
                ours = models.generate(model, prompt, max_new_tokens=24,
                                       temperature=temperature, top_k=top_k,
                                       seed=seed)
                result = subprocess.run(
                    [petra, "generate", "--model",
                     os.path.join(directory, "export.pt"), "--prompt",
                     prompt, "--max-new-tokens", "24", "--temperature",
                     repr(temperature), "--top-k", str(top_k), "--seed",
                     str(seed), "--json"] + size_flags,
                    capture_output=True, text=True, timeout=60, check=False)
                self.assertEqual(result.returncode, 0, result.stderr)
                theirs = json.loads(result.stdout)
                ids = models.generate(model, model.encode(prompt), 24,
                                      temperature, top_k, seed)
                self.assertEqual(ids, theirs["tokens"])
                self.assertEqual(ours, model.decode(theirs["tokens"]))

    def test_from_spec_of_petra_spec_loads_the_export(self):
        """`petra spec` JSON -> from_spec loads that job's C++ export."""
        import json
        petra = os.path.join(os.path.dirname(reference_binary()), "petra")
        if not os.access(petra, os.X_OK):
            self.skipTest(f"{petra} not found")
        for flags, dataset in (
                (["--arch", "revnet50", "--width", "0.125"], "synthetic"),
                (["--arch", "revvit", "--depth", "2", "--embed-dim", "32"],
                 "synthetic"),
                (["--arch", "revlm", "--depth", "2", "--embed-dim", "32",
                  "--seq-len", "20"], "text")):
            with self.subTest(flags=flags):
                result = subprocess.run(
                    [petra, "spec", "--dataset", dataset] + flags,
                    capture_output=True, text=True, timeout=60, check=True)
                model = models.from_spec(json.loads(result.stdout))
                type(self).runs += 1
                directory = os.path.join(self.tmp.name, str(self.runs))
                exported, _ = run_reference(flags + ["--dataset", dataset],
                                            1, self.runs, directory,
                                            self.server)
                model.load_state_dict(exported, strict=True)
                if dataset == "text":
                    self.assertEqual(model.seq_len, 20)
                else:
                    self.assertEqual(model.variant, "cifar")


def tearDownModule():
    if MAX_DIFF:
        print("\nmax |logit difference| vs C++ per architecture: "
              + ", ".join(f"{arch} {diff:.3g}"
                          for arch, diff in sorted(MAX_DIFF.items())),
              file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
