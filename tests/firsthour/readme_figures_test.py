#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""readme-figures: the README's "Figures at a glance" block is what bench/figures makes of the
benchmark JSON committed in bench/*/ (bench/figures --check), and the check can fail: a changed
figure is reported with a diff and repaired by bench/figures, a row whose JSON file is absent is
left out, the newest of several runs is shown, a JSON without a value a row names and a README
without the markers are errors.

usage: readme_figures_test.py SOURCE_DIR
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SRC = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else \
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIGURES = os.path.join(SRC, "bench", "figures")
BEGIN, END = "<!-- figures:begin -->", "<!-- figures:end -->"


def read(path):
    with open(path) as f:
        return f.read()


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def figures(*args):
    return subprocess.run(["/usr/bin/python3", FIGURES, *args], capture_output=True, text=True,
                          timeout=30)


class ReadmeFigures(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="droce-readme-figures.")
        self.readme = os.path.join(self.tmp, "README.md")
        shutil.copy(os.path.join(SRC, "README.md"), self.readme)
        # A copy of bench/ holding only its JSON files, for the tests that take some away.
        self.bench = os.path.join(self.tmp, "bench")
        for f in glob.glob(os.path.join(SRC, "bench", "*", "*.json")):
            dst = os.path.join(self.bench, os.path.relpath(f, os.path.join(SRC, "bench")))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy(f, dst)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def block(self, path):
        text = read(path)
        return text[text.index(BEGIN):text.index(END)]

    def test_committed_readme_matches_the_json(self):
        r = figures("--check", os.path.join(SRC, "README.md"))
        self.assertEqual(r.returncode, 0, "README.md's figures differ from bench/*.json; run "
                         "bench/figures and commit README.md:\n" + r.stdout + r.stderr)
        self.assertIn("matches", r.stdout)
        rows = [line for line in self.block(os.path.join(SRC, "README.md")).splitlines()
                if line.startswith("| ") and not line.startswith("| what")]
        self.assertGreaterEqual(len(rows), 10, "fewer rows than the JSON committed today gives")
        for row in rows:
            self.assertRegex(row, r"`bench/[^`]+\.json`", "a row without its source file")

    def test_a_changed_figure_is_found_and_repaired(self):
        text = read(self.readme)
        b = text.index(BEGIN)
        row_at = text.index("\n| MRC", b) + 1
        row = text[row_at:text.index("\n", row_at)]
        bad = row.replace("**", "**9", 1)  # a ratio typed by hand
        self.assertNotEqual(row, bad)
        write(self.readme, text[:row_at] + bad + text[row_at + len(row):])
        r = figures("--check", self.readme)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("-" + bad, r.stdout)
        self.assertIn("+" + row, r.stdout)
        self.assertIn("differs", r.stderr)
        r = figures(self.readme)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(read(self.readme), text, "the rewrite touched more than the block")
        self.assertEqual(figures("--check", self.readme).returncode, 0)

    def test_a_row_whose_json_is_absent_is_left_out(self):
        full = figures("--print", "--bench", self.bench)
        self.assertEqual(full.returncode, 0, full.stderr)
        self.assertIn("| MRC", full.stdout)
        shutil.rmtree(os.path.join(self.bench, "mrc"))
        r = figures("--print", "--bench", self.bench)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("| MRC", r.stdout)
        self.assertNotIn("mrc-bench", r.stdout)
        self.assertIn("| DCQCN", r.stdout)
        self.assertEqual(len(full.stdout.splitlines()) - len(r.stdout.splitlines()),
                         full.stdout.count("bench/mrc/"))

    def test_the_newest_run_is_shown(self):
        [mrc] = glob.glob(os.path.join(self.bench, "mrc", "mrc-bench-*.json"))
        doc = json.loads(read(mrc))
        doc["p5_one_of_four_down"]["ratio"] = 0.5  # under the goal of 0.72
        newer = os.path.join(self.bench, "mrc", "mrc-bench-2099-01-01.json")
        write(newer, json.dumps(doc))
        r = figures("--print", "--bench", self.bench)
        self.assertEqual(r.returncode, 0, r.stderr)
        [row] = [line for line in r.stdout.splitlines() if "one of 4 planes" in line]
        self.assertIn("**0.500**", row)
        self.assertIn("**not met**", row)
        self.assertIn("bench/mrc/mrc-bench-2099-01-01.json`, 2099-01-01", row)

    def test_a_json_without_a_named_value_is_an_error(self):
        cc = max(glob.glob(os.path.join(self.bench, "cc", "dcqcn-bench-*.json")))  # the newest
        text = read(cc)
        write(cc, text.replace('"cpu_cost"', '"cpu_cost_renamed"'))
        r = figures("--print", "--bench", self.bench)
        self.assertEqual(r.returncode, 2, r.stdout)
        self.assertIn(os.path.basename(cc), r.stderr)
        self.assertIn("cpu_cost", r.stderr)

    def test_a_readme_without_markers_is_an_error(self):
        text = read(self.readme)
        write(self.readme, text.replace(END, "<!-- end -->"))
        r = figures("--check", self.readme)
        self.assertEqual(r.returncode, 2)
        self.assertIn("figures:end", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
