#!/usr/bin/env python3
"""Does tracing cost anything when it is off? Runs two builds of the `eval`
bench, one after the other, a few times, and keeps every figure:

    # the bench binary of the commit before traces, and of this one (same target dir)
    git worktree add /tmp/before <commit> && (cd /tmp/before && CARGO_TARGET_DIR=$PWD/../main/target \\
        cargo bench -p omlet-benches --bench eval --no-run)      # copy the binary it names
    cargo bench -p omlet-benches --bench eval --no-run            # after touching the sources
    python3 benches/trace_off.py BEFORE_BINARY AFTER_BINARY [runs]

Cells: `real/wasm_batch_256` (the nginx rule, 256 records a call) and `pure/wasm_batch/256`.
Writes target/criterion/omlet-trace-off.json for `benches/report.py --only trace-off`.
"""
import json, os, re, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CELLS = "real/wasm_batch_256|pure/wasm_batch/256"


def run(binary):
    out = subprocess.run([binary, "--bench", CELLS], cwd=ROOT, capture_output=True, text=True).stdout
    found = {}
    for name, mid, unit in re.findall(r"^(\S+/\S+)\s*\n?\s*time:.*?\n\s*thrpt:\s*\[\S+ \S+ (\S+) (\S+) \S+ \S+\]", out, re.M):
        found[name] = float(mid) * (1e6 if unit.startswith("M") else 1e3)
    return found


def main():
    before, after = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    res = {}
    for _ in range(runs):
        for label, binary in (("before", before), ("after", after)):
            for cell, v in run(binary).items():
                res.setdefault(cell, {}).setdefault(label, []).append(v)
    path = os.path.join(ROOT, "target/criterion/omlet-trace-off.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    json.dump({"runs": runs, "cells": res}, open(path, "w"), indent=1)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
