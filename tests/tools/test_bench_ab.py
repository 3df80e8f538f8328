#!/usr/bin/env python3
"""tools/bench_ab.py on made-up rounds: both modes' ratios and medians against values computed
here by hand from the rows written."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "bench_ab.py")


def row(path, tokens, gemm, layer, gemm1=None, gemm2=None):
    r = {"model": "m", "scheme": "s", "path": path, "tokens": tokens, "gemm_us": gemm, "layer_us": layer}
    if gemm1 is not None:
        r.update(gemm1_us=gemm1, gemm2_us=gemm2)
    return r


def run(directory, *args):
    p = subprocess.run([sys.executable, TOOL, directory, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def data_lines(out):
    return [line.split() for line in out.splitlines() if line.startswith("m ")]


class BenchAb(unittest.TestCase):
    def write(self, d, name, rows):
        with open(os.path.join(d, name), "w") as f:
            json.dump(rows, f)

    def test_two_binaries(self):
        with tempfile.TemporaryDirectory() as d:
            self.write(d, "a1.json", [row("auto", 8, 100.0, 120.0)])
            self.write(d, "b1.json", [row("auto", 8, 80.0, 90.0)])
            self.write(d, "a2.json", [row("auto", 8, 110.0, 130.0)])
            self.write(d, "b2.json", [row("auto", 8, 90.0, 100.0)])
            rc, out, err = run(d)
            self.assertEqual(rc, 0, err)
            (fields,) = data_lines(out)
            # GEMM medians 105 and 85, layer medians 125 and 95.
            self.assertAlmostEqual(float(fields[9]), 85.0 / 105.0, places=3)
            self.assertAlmostEqual(float(fields[-1]), 95.0 / 125.0, places=3)

    def test_two_paths_of_one_binary(self):
        with tempfile.TemporaryDirectory() as d:
            # Round 2 runs the paths in the other order; the file order must not matter.
            self.write(d, "r1.json", [row("auto", 64, 200.0, 220.0, 120.0, 80.0),
                                      row("prefill:6", 64, 150.0, 170.0, 100.0, 50.0),
                                      row("auto", 128, 300.0, 330.0, 200.0, 100.0)])
            self.write(d, "r2.json", [row("prefill:6", 64, 170.0, 190.0, 110.0, 60.0),
                                      row("auto", 64, 220.0, 240.0, 130.0, 90.0)])
            rc, out, err = run(d, "--paths", "auto", "prefill:6")
            self.assertEqual(rc, 0, err)
            lines = data_lines(out)
            # Only the token count both paths measured.
            self.assertEqual(len(lines), 1)
            fields = lines[0]
            self.assertEqual(fields[3], "64")
            # GEMM medians 210 (A) and 160 (B); layer 230 and 180; GEMM1 125 and 105; GEMM2 85 and 55.
            self.assertEqual(fields[4:6], ["|", "200.0"])
            self.assertAlmostEqual(float(fields[9]), 160.0 / 210.0, places=3)
            self.assertAlmostEqual(float(fields[13]), 180.0 / 230.0, places=3)
            self.assertAlmostEqual(float(fields[15]), 105.0 / 125.0, places=3)
            self.assertAlmostEqual(float(fields[16]), 55.0 / 85.0, places=3)

    def test_missing_path_is_an_error(self):
        with tempfile.TemporaryDirectory() as d:
            self.write(d, "r1.json", [row("auto", 64, 200.0, 220.0)])
            rc, _, err = run(d, "--paths", "auto", "prefill:6")
            self.assertNotEqual(rc, 0)
            self.assertIn("prefill:6", err)


if __name__ == "__main__":
    unittest.main()
