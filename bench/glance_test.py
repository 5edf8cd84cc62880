#!/usr/bin/python3
"""bench/glance.py: the summary is read from the sections, and the one in
docs/BENCHMARKS.md is the one the sections give today."""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import glance  # noqa: E402
import update_doc  # noqa: E402

DOC = os.path.join(HERE, "..", "docs", "BENCHMARKS.md")


class Glance(unittest.TestCase):
    def setUp(self):
        with open(DOC) as f:
            self.text = f.read()
        self.sections = update_doc.read_sections(self.text)

    def test_every_claim_finds_its_figure_in_the_document(self):
        summary = glance.render(self.sections)
        missing = [line for line in summary.split("\n")
                   if "| not measured |" in line]
        self.assertEqual(missing, [])

    def test_the_documents_summary_is_what_its_sections_give(self):
        start = self.text.index("<!-- glance -->\n") + len("<!-- glance -->\n")
        end = self.text.index("\n<!-- end: glance -->")
        self.assertEqual(self.text[start:end], glance.render(self.sections),
                         "run: python3 bench/update_doc.py --glance "
                         "docs/BENCHMARKS.md")

    def test_a_changed_table_changes_the_figure(self):
        body = self.sections["transport"]
        row = next(line for line in body.split("\n")
                   if line.startswith("| host to host through shared memory"))
        changed = row.rsplit("|", 2)[0] + "| 99.99 |"
        self.sections["transport"] = body.replace(row, changed)
        self.assertIn("| 99.99 |", glance.render(self.sections))

    def test_a_missing_section_says_not_measured(self):
        del self.sections["gpu"]
        lines = [line for line in glance.render(self.sections).split("\n")
                 if line.startswith("| GPU:")]
        self.assertTrue(lines)
        for line in lines:
            self.assertIn("| not measured |", line)

    def test_repeated_column_names_keep_the_first(self):
        rows = glance.tables("| a | b | a |\n|---|---|---|\n| 1 | 2 | 3 |\n")
        self.assertEqual(rows, [[{"a": "1", "b": "2", "a (2)": "3"}]])


if __name__ == "__main__":
    unittest.main()
