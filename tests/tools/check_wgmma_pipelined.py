#!/usr/bin/env python3
"""Fails when ptxas serializes the wgmmas of a kernel in a CUDA source file.

ptxas reports it only as a note, C7512 ("insufficient register resources") or C7513 ("non wgmma
instructions defining input registers of a wgmma between start and end of the pipeline stage"), and
then waits for every wgmma before the next instruction: the 4-bit register kernel's narrow tiles
ran at half their rate that way until the fortieth session (bench/NOTES.md). No GPU is needed: the
source is compiled to PTX once, each kernel that issues wgmmas is cut out into a PTX file of its own
(the module's other text kept) and run through ptxas, several at a time.

  check_wgmma_pipelined.py --nvcc NVCC --source FILE [--min-kernels N] [--jobs J] -- NVCC_FLAGS...

--min-kernels: fewer kernels with wgmmas than that is an error too (a check that found nothing to
check). Exit status 0: none serialized; 1: some serialized or too few kernels; 2: a tool failed.
"""
import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

ENTRY = re.compile(r"^\s*(\.visible\s+|\.weak\s+)?\.entry\s+(\S+?)\s*\(?\s*$")
SERIALIZED = re.compile(r"\((C7512|C7513)\)")


def split_entries(ptx):
    """The module's text without its kernels, and each kernel's (name, lines)."""
    lines = ptx.split("\n")
    rest, kernels, i = [], [], 0
    while i < len(lines):
        m = ENTRY.match(lines[i])
        if not m:
            rest.append(lines[i])
            i += 1
            continue
        j, depth, opened = i, 0, False
        while j < len(lines):  # to the brace that closes the kernel's body
            code = lines[j].split("//")[0]
            depth += code.count("{") - code.count("}")
            opened = opened or "{" in code
            if opened and depth == 0:
                break
            j += 1
        kernels.append((m.group(2), lines[i:j + 1]))
        i = j + 1
    return rest, kernels


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nvcc", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--min-kernels", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("QMOE_JOBS", "2")))
    parser.add_argument("nvcc_flags", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    flags = [f for f in args.nvcc_flags if f != "--"]
    ptxas = os.path.join(os.path.dirname(os.path.realpath(args.nvcc)), "ptxas")

    with tempfile.TemporaryDirectory() as tmp:
        module = os.path.join(tmp, "module.ptx")
        run = subprocess.run([args.nvcc, *flags, "-ptx", args.source, "-o", module], capture_output=True, text=True)
        if run.returncode != 0:
            print(run.stdout + run.stderr, file=sys.stderr)
            print(f"nvcc -ptx {args.source} failed", file=sys.stderr)
            return 2
        with open(module) as f:
            ptx = f.read()
        target = re.search(r"^\.target\s+(\S+)", ptx, re.M)
        if not target:
            print(f"{args.source}: no .target in its PTX", file=sys.stderr)
            return 2
        rest, kernels = split_entries(ptx)
        kernels = [(name, body) for name, body in kernels if any("wgmma.mma_async" in line for line in body)]

        def check(index_kernel):
            index, (name, body) = index_kernel
            path = os.path.join(tmp, f"k{index}.ptx")
            with open(path, "w") as f:
                f.write("\n".join(rest + body))
            out = subprocess.run([ptxas, f"-arch={target.group(1)}", "-O3", "-v", path, "-o", os.devnull],
                                 capture_output=True, text=True)
            notes = [line.strip() for line in (out.stdout + out.stderr).split("\n") if SERIALIZED.search(line)]
            return name, out.returncode, notes, out.stderr

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
            results = list(pool.map(check, enumerate(kernels)))

    failed = [(name, err) for name, rc, _, err in results if rc != 0]
    serialized = [(name, notes) for name, rc, notes, _ in results if rc == 0 and notes]
    for name, err in failed:
        print(f"ptxas failed on {name}:\n{err}", file=sys.stderr)
    for name, notes in serialized:
        print(f"SERIALIZED {name}: {SERIALIZED.search(notes[0]).group(1)}")
    print(f"{args.source}: {len(results)} kernels with wgmmas, {len(serialized)} serialized by ptxas")
    if failed:
        return 2
    if len(results) < args.min_kernels:
        print(f"expected at least {args.min_kernels} kernels with wgmmas", file=sys.stderr)
        return 1
    return 1 if serialized else 0


if __name__ == "__main__":
    sys.exit(main())
