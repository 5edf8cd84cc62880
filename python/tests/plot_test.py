#!/usr/bin/python3
"""Tests of petra.plot: a job's figure and a race's, each PNG opened and
checked for its size and for being a drawing, not a blank page.

Run: python3 python/tests/plot_test.py -v (seconds). Needs matplotlib and
PIL (Debian: python3-matplotlib, python3-pil).
"""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))

try:
    import matplotlib  # noqa: F401
    from PIL import Image
    MISSING = None
except ImportError as e:
    MISSING = str(e)


def report(epochs=3):
    """A report as `petra train --report` writes it (the fields drawn)."""
    return {
        "job": "job-1", "name": "a test", "bubble_fraction": 0.12,
        "epochs": [{"epoch": e, "step": 10 * e, "train_loss": 2.0 / e,
                    "train_accuracy": 0.3 * e, "test_accuracy": 0.25 * e,
                    "test_loss": 2.2 / e, "samples_per_second": 400 + e,
                    "elapsed_seconds": 5.0 * e}
                   for e in range(1, epochs + 1)],
        "stages": [{"index": 0, "bubble_fraction": 0.1},
                   {"index": 1, "bubble_fraction": 0.14}],
    }


def colours(path):
    """The distinct colours of a PNG, and its size; fails on another
    format."""
    im = Image.open(path)
    assert im.format == "PNG", im.format
    return len(im.convert("RGB").getcolors(1 << 24)), im.size


@unittest.skipIf(MISSING, f"needs matplotlib and PIL: {MISSING}")
class PlotTest(unittest.TestCase):
    def setUp(self):
        from petra import plot
        self.plot = plot
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def test_job_figure_draws_every_panel(self):
        path = os.path.join(self.dir.name, "job.png")
        self.plot.job_figure(report(), path)
        n, size = colours(path)
        self.assertGreaterEqual(size, (1000, 700))
        # Lines, bars, text, grid: far more than a blank page's one colour.
        self.assertGreater(n, 50)

    def test_race_figure_has_a_line_per_method(self):
        path = os.path.join(self.dir.name, "race.png")
        self.plot.race_figure({"PETRA": [(1, 0.5), (2, 0.7)],
                               "1F1B": [(1.5, 0.55), (3, 0.72)]}, 0.71,
                              path, "a race")
        n, size = colours(path)
        self.assertEqual(size, (800, 500))
        self.assertGreater(n, 20)
        # An empty race is refused, not drawn blank.
        with self.assertRaises(ValueError):
            self.plot.race_figure({}, 0.7, path, "nothing")

    def test_command_line_reads_a_report_and_refuses_what_is_not_one(self):
        src = os.path.join(self.dir.name, "r.json")
        with open(src, "w") as f:
            json.dump(report(1), f)
        self.assertEqual(self.plot.main([src]), 0)
        self.assertGreater(colours(os.path.join(self.dir.name, "r.png"))[0],
                           50)
        bad = os.path.join(self.dir.name, "bad.json")
        with open(bad, "w") as f:
            f.write("[1, 2]")
        self.assertEqual(self.plot.main([bad]), 1)
        self.assertEqual(self.plot.main([os.path.join(self.dir.name,
                                                      "none.json")]), 1)
        with open(bad, "w") as f:
            json.dump({"epochs": []}, f)
        self.assertEqual(self.plot.main([bad]), 1)


if __name__ == "__main__":
    unittest.main()
