#!/usr/bin/env python3
"""Runs the Go host's benchmarks (go/bench_test.go) and keeps their medians:

    python3 benches/go_bench.py        # then: python3 benches/report.py --only portable

It runs, in go/,

    go test -run '^$' -bench PATTERN -benchtime=TIME -count=N .

with PATTERN `.` (env OMLET_GO_BENCH), TIME `1s` (OMLET_GO_BENCHTIME) and N 3
(OMLET_GO_BENCH_COUNT), and writes target/criterion/omlet-go.json beside
criterion's results: for each benchmark the median over the N runs of its
ns/op and of its records/s, every run's figures, and the machine, date,
commit and Go version. The benchmarks build their rules with the omlet CLI
(target/debug/omlet, or $OMLET_BIN); OMLET_BENCH_OPS and OMLET_BENCH_HOT size
them as they size the Rust benches.
"""
import datetime
import json
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import CRIT, ROOT, machine  # noqa: E402

GO = os.path.join(ROOT, "go")
OUT = os.path.join(CRIT, "omlet-go.json")

# `BenchmarkPure/single-2   2000   3914 ns/op   255474 records/s`
LINE = re.compile(r"^Benchmark(\S+?)(?:-(\d+))?\s+(\d+)\s+([\d.]+) ns/op(.*)$")


def parse(text):
    """{name: [{"ns_per_op", "records_per_second", "iterations"}]}, and GOMAXPROCS (the -N suffix)."""
    cells, procs = {}, None
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if not m:
            continue
        name, p, iters, ns, rest = m.groups()
        procs = int(p) if p else procs
        metrics = dict((unit, float(v)) for v, unit in re.findall(r"([\d.e+-]+) (\S+)", rest))
        cells.setdefault(name, []).append({"ns_per_op": float(ns), "iterations": int(iters),
                                           "records_per_second": metrics.get("records/s")})
    return cells, procs


def commit():
    """HEAD, and the files of the measured code (the Go host, the guest, the CLI that builds it) that differ from it."""
    git = lambda *a: subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout
    head = git("rev-parse", "--short", "HEAD").strip()
    dirty = [l[3:] for l in git("status", "--porcelain", "--untracked-files=no", "--", "go", "guest", "host",
                                 "wit", "Cargo.toml").splitlines()]
    return head + (f", with uncommitted changes to {', '.join(dirty)}" if dirty else "")


def env_int(name, default):
    try:
        v = int(os.environ.get(name, ""))
        return v if v > 0 else default
    except ValueError:
        return default


def main():
    pattern = os.environ.get("OMLET_GO_BENCH", ".")
    benchtime = os.environ.get("OMLET_GO_BENCHTIME", "1s")
    count = int(os.environ.get("OMLET_GO_BENCH_COUNT", "3"))
    cmd = ["go", "test", "-run", "^$", "-bench", pattern, f"-benchtime={benchtime}", f"-count={count}",
           "-timeout", os.environ.get("OMLET_GO_BENCH_TIMEOUT", "60m"), "."]
    binary = os.environ.get("OMLET_BIN") or os.path.join(ROOT, "target", "debug", "omlet")
    if not os.path.exists(binary):
        raise SystemExit(f"the omlet CLI is not built ({binary}): the Go benchmarks build their rules with it; "
                         "build it with `cargo build -p omlet-cli`, or set OMLET_BIN. Nothing written.")
    print("+ (cd go &&", " ".join(cmd) + ")", file=sys.stderr)
    proc = subprocess.run(cmd, cwd=GO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stderr.write(proc.stdout)
    if proc.returncode != 0:
        raise SystemExit(f"go test failed (exit {proc.returncode}): nothing written")
    runs, procs = parse(proc.stdout)
    if not runs:
        skipped = [l.strip() for l in proc.stdout.splitlines() if "SKIP" in l or "skip" in l.lower()]
        raise SystemExit("no benchmark results in go test's output: nothing written"
                         + ("\n" + "\n".join(skipped) if skipped else ""))
    cells = {}
    for name, rs in runs.items():
        rates = [r["records_per_second"] for r in rs if r["records_per_second"] is not None]
        cells[name] = {
            "ns_per_op": statistics.median(r["ns_per_op"] for r in rs),
            "records_per_second": statistics.median(rates) if rates else None,
            "runs_ns_per_op": [r["ns_per_op"] for r in rs],
            "runs_records_per_second": rates,
            "iterations": [r["iterations"] for r in rs],
        }
    version = subprocess.run(["go", "version"], cwd=GO, capture_output=True, text=True).stdout.strip()
    out = {
        "machine": machine(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit(),
        "go": version,
        "gomaxprocs": procs,
        "command": f"go test -run '^$' -bench {pattern} -benchtime={benchtime} -count={count}",
        "count": count,
        "benchtime": benchtime,
        "ops": env_int("OMLET_BENCH_OPS", 20000),
        "hot": env_int("OMLET_BENCH_HOT", 128),
        "cells": cells,
    }
    os.makedirs(CRIT, exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {os.path.relpath(OUT, ROOT)}: " + ", ".join(
        f"{k} {v['records_per_second'] / 1e6:.2f} M/s" if v["records_per_second"] else f"{k} {v['ns_per_op'] / 1e6:.1f} ms"
        for k, v in cells.items()))


if __name__ == "__main__":
    main()
