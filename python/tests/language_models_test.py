#!/usr/bin/python3
"""Tests of petra.models' language models that need no C++ binary: sizes as
`petra model-info` counts them, keys, defaults, from_spec of text jobs,
forward's and generate's errors, and generate's determinism. The C++
comparisons (logits, `petra generate`'s text) are in models_test.py.

Run: python3 python/tests/language_models_test.py -v
"""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import cpp_reference  # noqa: E402  (the test's own directory)

torch = cpp_reference.import_torch(__file__)

from petra import models  # noqa: E402  (after the sys.path change)


class LanguageModelTestCase(unittest.TestCase):
    """revlm and gpt in petra.models."""

    def test_language_models(self):
        """Sizes as model-info counts them, keys, defaults and errors."""
        # `petra model-info --arch A --embed-dim 16 --depth 2 --heads 2
        # --seq-len 8`.
        for arch, count in (("revlm", 19296), ("gpt", 15168)):
            model = models.build(arch, embed_dim=16, depth=2, heads=2,
                                 seq_len=8)
            self.assertEqual(sum(p.numel() for p in model.parameters()),
                             count, arch)
            # Tied: the head's weight and bias are gone.
            features = 32 if arch == "revlm" else 16
            tied = models.build(arch, embed_dim=16, depth=2, heads=2,
                                seq_len=8, tie_embeddings=True)
            self.assertEqual(sum(p.numel() for p in tied.parameters()),
                             count - 256 * features - 256, arch)
        model = models.build("revlm")
        self.assertEqual(model.transformer,
                         dict(models.LANGUAGE_MODEL_DEFAULTS,
                              tie_embeddings=False))
        self.assertEqual((model.tokenizer, model.seq_len, model.vocab),
                         ("bytes", 128, 256))
        keys = set(models.build("gpt", depth=1).state_dict())
        self.assertEqual(keys - {k for k in keys if k.startswith("blocks.")},
                         {"input.mean", "input.std", "input.shape",
                          "input.class_names", "input.model",
                          "input.tokenizer"})
        for name in ("blocks.0.embedding.weight", "blocks.0.position",
                     "blocks.1.attention.qkv.weight", "blocks.2.norm.weight",
                     "blocks.2.fc.weight"):
            self.assertIn(name, keys)
        self.assertEqual(model.decode(model.encode("naïve")), "naïve")
        self.assertEqual(model.decode([104, 300, 0xC3]), "h\ufffd\ufffd")
        for args, kwargs, message in (
                (("revlm", "mnist"), {}, "variant: revlm takes tokens"),
                (("gpt",), {"width": 0.5}, "width: 0.5 must be 1"),
                (("revlm",), {"patch_size": 4}, "patch_size: revlm takes"),
                (("revlm",), {"vocab": 300}, "vocab: 300 must be 256"),
                (("revlm",), {"seq_len": 0}, "seq_len"),
                (("revlm",), {"heads": 3}, "heads: 3 must divide"),
                (("revlm",), {"tokenizer": "words"}, "tokenizer"),
                (("revlm",), {"num_classes": 10}, "num_classes: 10 must be"),
                (("revlm",), {"tie_embeddings": 1}, "tie_embeddings: 1 must"),
                (("revvit",), {"tie_embeddings": True},
                 "tie_embeddings: only the language models"),
                (("revvit", "mnist"), {"seq_len": 8},
                 "seq_len: only the language models")):
            with self.subTest(args=args, **kwargs):
                with self.assertRaisesRegex(ValueError, message):
                    models.build(*args, **kwargs)
        small = models.build("revlm", embed_dim=8, depth=1, heads=2,
                             seq_len=4)
        for bad, message in ((torch.zeros(1, 5, dtype=torch.int64), "T <= 4"),
                             (torch.zeros(1, 3), "int64"),
                             (torch.full((1, 3), 256), r"\[0, 256\)")):
            with self.assertRaisesRegex(ValueError, message):
                small(bad)
        for kwargs, message in (({"prompt": ""}, "prompt: empty"),
                                ({"prompt": [1, 999]}, "token 999"),
                                ({"temperature": -1}, "temperature"),
                                ({"top_k": -1}, "top_k"),
                                ({"max_new_tokens": 1.5}, "max_new_tokens"),
                                ({"seed": -1}, "seed")):
            with self.subTest(**{k: repr(v) for k, v in kwargs.items()}):
                with self.assertRaisesRegex(ValueError, message):
                    models.generate(small, **{"prompt": "ab", **kwargs})
        # A prompt longer than the context; the same seed, the same text.
        a = models.generate(small, "abcdefgh", 12, 1.0, 0, 4)
        self.assertEqual(a, models.generate(small, "abcdefgh", 12, 1.0, 0, 4))
        self.assertIsInstance(a, str)
        self.assertEqual(len(models.generate(small, [1, 2], 7)), 7)

    def test_from_spec_of_a_language_model(self):
        model = models.from_spec({
            "model": {"architecture": "ARCHITECTURE_GPT",
                      "transformer": {"embedDim": 32, "seqLen": 16}},
            "dataset": {"kind": "DATASET_KIND_TEXT",
                        "text": {"tokenizer": "TOKENIZER_BYTES"}}})
        self.assertEqual((model.arch, model.seq_len, model.transformer["depth"]),
                         ("gpt", 16, 4))
        with self.assertRaisesRegex(ValueError, "model.transformer.vocab"):
            models.from_spec({"model": {"architecture": "revlm",
                                        "transformer": {"vocab": 100}}})


if __name__ == "__main__":
    unittest.main()
