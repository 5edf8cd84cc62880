#!/usr/bin/python3
"""A language model with a SentencePiece tokenizer, from `petra train` to
petra.models: the export carries the tokenizer, Python encodes and decodes
text as the C++ side does, and petra.models.generate writes what `petra
generate` writes from the same export (with no model flags: the export
describes itself).

Run: python3 python/tests/sentencepiece_test.py -v (a few seconds; needs
the build's `petra`, Debian's sentencepiece tools and python3-sentencepiece,
each skipped with the reason when missing).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
sys.path.insert(0, PYTHON_DIR)

import cpp_reference  # noqa: E402  (the test's own directory)

torch = cpp_reference.import_torch(__file__)

from petra import models  # noqa: E402  (after the sys.path change)

WORDS = ("one", "two", "buckle", "my", "shoe", "three", "four", "knock",
         "at", "the door", "déjà vu", "€5")


def rhyme(lines):
    return "".join(" ".join(WORDS[(i * 5 + w * 3) % len(WORDS)]
                            for w in range(3 + i % 6)) + "\n"
                   for i in range(lines))


class SentencePieceModelTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.petra = cpp_reference.binary("petra")
        if shutil.which("spm_train") is None:
            raise unittest.SkipTest(
                "spm_train not found (Debian's sentencepiece)")
        try:
            import sentencepiece  # noqa: F401
        except ImportError:
            raise unittest.SkipTest("python3-sentencepiece is not installed")
        cls.dir = tempfile.mkdtemp(prefix="petra_spm_py_")
        for split, lines in (("train", 3000), ("valid", 300)):
            os.makedirs(os.path.join(cls.dir, "text", split))
            with open(os.path.join(cls.dir, "text", split, "a.txt"), "w",
                      encoding="utf-8") as f:
                f.write(rhyme(lines))
        cls.export = os.path.join(cls.dir, "model.pt")
        cls.sizes = dict(embed_dim=16, depth=2, heads=2, seq_len=16,
                         vocab=300)
        result = subprocess.run(
            [cls.petra, "train", "--arch", "revlm", "--dataset", "text",
             "--data-root", cls.dir, "--data-path", "text", "--tokenizer",
             "sentencepiece", "--vocab", "300", "--embed-dim", "16",
             "--depth", "2", "--heads", "2", "--seq-len", "16", "--epochs",
             "1", "--runner", "in-process", "--output", cls.export],
            capture_output=True, text=True, timeout=600, check=False,
            cwd=cls.dir)
        if result.returncode != 0:
            shutil.rmtree(cls.dir, ignore_errors=True)
            raise AssertionError(f"petra train failed:\n{result.stderr}")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def load(self):
        model = models.build("revlm", tokenizer="sentencepiece", **self.sizes)
        model.load_state_dict(torch.load(self.export), strict=True)
        return model.eval()

    def test_the_export_carries_its_network_and_tokenizer(self):
        exported = torch.load(self.export)
        spec = json.loads(bytes(exported["input.model"].tolist()))
        self.assertEqual(spec["architecture"], "ARCHITECTURE_REVLM")
        self.assertEqual(spec["transformer"]["vocab"], 300)
        self.assertGreater(exported["input.tokenizer"].numel(), 1000)
        model = self.load()
        self.assertEqual(model.tokenizer, "sentencepiece")

    def test_text_round_trips_in_fewer_tokens_than_bytes(self):
        model = self.load()
        for text in (rhyme(5), "unseen: 中文 and  two  spaces\n\nend", "x",
                     "\n"):
            with self.subTest(text=text):
                ids = model.encode(text)
                self.assertTrue(all(0 <= i < 300 for i in ids))
                self.assertEqual(model.decode(ids), text)
        self.assertLess(len(model.encode(rhyme(20))),
                        len(rhyme(20).encode("utf-8")) / 1.5)
        self.assertEqual(model.decode([300]), "\ufffd")

    def test_generate_writes_what_petra_generate_writes(self):
        model = self.load()
        prompt = "one two buckle my shoe déjà vu"
        for temperature, seed in ((1.0, 3), (0.0, 5)):
            with self.subTest(temperature=temperature):
                result = subprocess.run(
                    [self.petra, "generate", "--model", self.export,
                     "--prompt", prompt, "--max-new-tokens", "20",
                     "--temperature", repr(temperature), "--seed",
                     str(seed), "--json"],
                    capture_output=True, text=True, timeout=60, check=False)
                self.assertEqual(result.returncode, 0, result.stderr)
                theirs = json.loads(result.stdout)
                # The prompt's ids decide every draw: equal ids say that
                # Python encodes as the C++ side does.
                ids = models.generate(model, model.encode(prompt), 20,
                                      temperature, 0, seed)
                self.assertEqual(ids, theirs["tokens"])
                self.assertEqual(model.decode(ids), theirs["continuation"])

    def test_load_builds_what_the_export_says(self):
        model = models.load(self.export)
        self.assertEqual((model.arch, model.tokenizer, model.vocab,
                          model.seq_len, model.training),
                         ("revlm", "sentencepiece", 300, 16, False))
        text = rhyme(3)
        self.assertEqual(model.decode(model.encode(text)), text)
        older = torch.load(self.export)
        del older["input.model"]
        with self.assertRaisesRegex(ValueError, "predates input.model"):
            models.load(older)

    def test_a_model_without_its_export_cannot_encode(self):
        model = models.build("revlm", tokenizer="sentencepiece", **self.sizes)
        with self.assertRaisesRegex(ValueError, "load that first"):
            model.encode("one two")
        with self.assertRaisesRegex(ValueError, "at least 260"):
            models.build("revlm", tokenizer="sentencepiece", vocab=256)
        self.assertEqual(
            models.build("revlm", tokenizer="sentencepiece", depth=1).vocab,
            8000)


if __name__ == "__main__":
    unittest.main()
