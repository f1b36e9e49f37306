#!/usr/bin/env python3
"""Instructions of the guest's compiled code, by wasm function.

Why: under valgrind the guest's code has no symbols (cachegrind shows it as
one `???` line), so a cut in the guest could be judged only as a whole.
wasmtime's perf map (`OMLET_PERFMAP=1` in the CLI) names each compiled
function's address range; callgrind with `--dump-instr=yes` counts
instructions by address. Put together, they give the guest's instructions by
function, per evaluation.

    OMLET_PERFMAP=1 valgrind --tool=callgrind --dump-instr=yes \\
        --callgrind-out-file=cl.out omlet run --batch 64 RULE -i RECORDS ...
    python3 benches/guest_functions.py cl.out /tmp/perf-PID.map [TOP]

Use a guest built with its names (`CARGO_PROFILE_WASM_STRIP=none
scripts/build-guest.sh OUT`, loaded with `OMLET_GUEST=OUT` by a CLI built
with `--features omlet/test-guest`). Keep batches small (`--batch 64`):
under valgrind a batch of 256 runs past the fiber-less path's budget and is
evaluated again on the async path, so records would count more than once.
Evaluations are counted as calls of `eval::evaluate_with` (or of the
function named by `$EVF`), and the figures are per evaluation.
"""

import bisect
import collections
import os
import re
import sys


def perf_map(path):
    """Sorted starts, and the (end, name) of each."""
    rows = []
    for line in open(path):
        addr, size, name = line.rstrip("\n").split(" ", 2)
        rows.append((int(addr, 16), int(addr, 16) + int(size, 16), name))
    rows.sort()
    return [r[0] for r in rows], [(r[1], r[2]) for r in rows]


def main():
    callgrind, pmap = sys.argv[1], sys.argv[2]
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    evaluate = os.environ.get("EVF", "4eval13evaluate_with")
    starts, spans = perf_map(pmap)
    eval_addr = next((s for s, (_, n) in zip(starts, spans) if n.endswith(evaluate)), None)

    def function_at(addr):
        i = bisect.bisect_right(starts, addr) - 1
        return spans[i][1] if i >= 0 and addr < spans[i][0] else None

    cost = collections.Counter()
    last = 0
    skip = False  # the line after `calls=` is the call's inclusive cost
    names, callee_is_eval, evaluations = {}, False, 0
    for line in open(callgrind):
        c = line[0]
        if c.isdigit() or c in "+-*":
            fields = line.split()
            tok = fields[0]
            if tok[0] == "+":
                last += int(tok[1:], 0)
            elif tok[0] == "-":
                last -= int(tok[1:], 0)
            elif tok != "*":
                last = int(tok, 0)
            if skip:
                skip = False
                continue
            # `positions: instr line`: the address, the line, then Ir.
            if len(fields) >= 3:
                name = function_at(last)
                if name:
                    cost[name] += int(fields[2])
        elif line.startswith("calls="):
            skip = True
            if callee_is_eval:
                evaluations += int(line[6:].split()[0])
        elif line.startswith(("fn=", "cfn=")):
            m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line.strip())
            if m.group(2):
                names[m.group(1)] = m.group(2)
            if line.startswith("cfn="):
                callee = names.get(m.group(1), "")
                addr = callee.split()[0].split("'")[0] if callee.startswith("0x") else None
                callee_is_eval = addr is not None and int(addr, 16) == eval_addr
    total = sum(cost.values())
    evaluations = evaluations or 1
    print(f"guest code: {total:,} instructions, {evaluations:,} evaluations, {total / evaluations:,.1f} each")
    for name, n in cost.most_common(top):
        short = re.sub(r"^wasm\[0\]::function\[\d+\]::", "", name)
        print(f"{n / evaluations:10.1f} {100 * n / total:5.1f}%  {short[:140]}")


if __name__ == "__main__":
    main()
