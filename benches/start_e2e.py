#!/usr/bin/env python3
"""The release CLI's wall time from outside, beside a Python loop.

    cargo build --release -p omlet-cli && python3 benches/start_e2e.py

Runs, 7 times each, and keeps the medians (the 200,000-record runs of omlet, of the Python
loop and of the rule by hand in turns, so that they share the VM's drift):
- `omlet run` of examples/nginx on one record: the start, with the compiled guest read
  from the code cache (a fresh cache folder, filled by one run first) and with the cache
  off (`OMLET_CODE_CACHE=off`: Cranelift compiles the guest);
- the same over 200,000 nginx records (the example's lines, repeated), to /dev/null;
- a Python loop that only parses each line with `json.loads` and writes it back with
  `json.dumps`: the floor a script would have.
With OMLET_BY_HAND_CLI set to a release CLI whose embedded guest is the instrument of
guest/component/src/by_hand.rs (nginx.oml written by hand, never a shipped guest), it also
times that CLI over the 200,000 records: the bound a faster evaluator could reach. Make it
from a checkout with:

    OMLET_GUEST_FEATURES=by-hand-nginx scripts/build-guest.sh /tmp/by-hand.wasm
    cp host/guest/omlet_guest.wasm /tmp/shipped.wasm && cp /tmp/by-hand.wasm host/guest/omlet_guest.wasm
    cargo build --release -p omlet-cli && cp target/release/omlet /tmp/omlet-by-hand
    cp /tmp/shipped.wasm host/guest/omlet_guest.wasm && cargo build --release -p omlet-cli

Writes target/criterion/omlet-start.json for `benches/report.py --only start`.
"""
import json, os, platform, shutil, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.path.join(ROOT, "target/release/omlet")
N = 200_000
RUNS = 7


def timed(cmd, env=None):
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main():
    if not os.path.exists(CLI):
        sys.exit("build the release CLI first: cargo build --release -p omlet-cli")
    work = tempfile.mkdtemp(prefix="omlet-start-")
    try:
        nginx = os.path.join(ROOT, "examples/nginx")
        lines = open(os.path.join(nginx, "access.jsonl")).read().splitlines()
        many, one = os.path.join(work, "many.jsonl"), os.path.join(work, "one.jsonl")
        with open(many, "w") as f:
            for i in range(N):
                f.write(lines[i % len(lines)] + "\n")
        with open(one, "w") as f:
            f.write(lines[0] + "\n")
        loop = os.path.join(work, "loop.py")
        with open(loop, "w") as f:
            f.write("import json, sys\nw = sys.stdout.write\nfor line in open(sys.argv[1]):\n"
                    "    w(json.dumps(json.loads(line)) + '\\n')\n")
        cached = dict(os.environ, OMLET_CODE_CACHE=os.path.join(work, "code"))
        off = dict(os.environ, OMLET_CODE_CACHE="off")

        def run(inp, env, cli=CLI):
            return timed([cli, "run", os.path.join(nginx, "nginx.oml"), "--knowdb",
                          os.path.join(nginx, "knowdb/knowdb.toml"), "-i", inp, "-o", "/dev/null",
                          "--errors", "/dev/null"], env)

        run(one, cached)  # fills the cache
        by_hand = os.environ.get("OMLET_BY_HAND_CLI")
        if by_hand:
            run(one, cached, by_hand)  # its guest differs: fills its own cache entry
        cells = {
            "first record, cached": [run(one, cached) for _ in range(RUNS)],
            "first record, compiled": [run(one, off) for _ in range(RUNS)],
            f"{N:,} records, compiled": [run(many, off) for _ in range(RUNS)],
        }
        # The runs compared with one another go in turns (omlet, the Python
        # loop, the rule by hand, omlet, ...): this VM's speed drifts by tens
        # of percent over minutes, and runs side by side see the same drift.
        turns = {f"{N:,} records, cached": lambda: run(many, cached),
                 f"{N:,} records, Python json loop": lambda: timed([sys.executable, loop, many])}
        if by_hand:
            turns[f"{N:,} records, cached, the rule by hand (instrument)"] = lambda: run(many, cached, by_hand)
        for name in turns:
            cells[name] = []
        for _ in range(RUNS):
            for name, once in turns.items():
                cells[name].append(once())
        out = {
            "machine": f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}, {platform.system()} {platform.release()}",
            "runs": RUNS,
            "cells": {k: {"median_s": statistics.median(v), "all_s": v} for k, v in cells.items()},
        }
        os.makedirs(os.path.join(ROOT, "target/criterion"), exist_ok=True)
        with open(os.path.join(ROOT, "target/criterion/omlet-start.json"), "w") as f:
            json.dump(out, f, indent=1)
        for k, v in out["cells"].items():
            print(f"{k}: median {v['median_s']:.3f} s ({', '.join(f'{x:.3f}' for x in v['all_s'])})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
