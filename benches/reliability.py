#!/usr/bin/env python3
"""Writes RELIABILITY.md from runs on this machine.

    python3 benches/reliability.py [--omlet PATH] [--skip-db]

1. Hostile inputs: each probe of the sandbox round runs through the omlet CLI
   (default `target/debug/omlet`, built first with `cargo build -p omlet-cli`),
   with records in, records out, error lines, exit code, time and a verdict.
2. Limits: the table of docs/deployment.md (one source).
3. Fuzzing: `target/fuzz-summary.txt`, written by scripts/fuzz.sh.
4. Faults: `cargo test -p omlet --test all databases::faults -- --nocapture`, whose
   FAULT lines are the matrix (latency, stall, reset under both policies).
5. Soak: `target/soak/summary.json` and `samples.csv`, written by
   `cargo run -p omlet-benches --bin soak`, with an RSS plot (matplotlib; the
   script installs it with pip when it is missing, as report.py does).

Probes that need a database (SQL) are the named tests of host/tests/all/databases.rs,
run here and reported pass/fail.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRIVIAL = "name : t\n---\nseq = read(seq) ;\nm = read(m) ;\n"
SLOW_REGEX = "name : t\n---\nv = match read(m) {\n    regex_match('[a-z]{1,300}X') => chars(yes),\n    _ => chars(no),\n};\n"


def sh(cmd, **kw):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, errors="replace", **kw)


class Probe:
    def __init__(self, issue, name, expect):
        self.issue, self.name, self.expect = issue, name, expect
        self.records_in = self.out = self.errors = self.code = None
        self.seconds = 0.0
        self.verdict = "?"
        self.note = ""


def run_cli(omlet, args, stdin_bytes=None, timeout=600):
    t = time.time()
    p = subprocess.run([omlet] + args, cwd=ROOT, input=stdin_bytes, capture_output=True, timeout=timeout)
    return p, time.time() - t


def count_lines(b):
    return len([l for l in b.split(b"\n") if l.strip()])


def error_lines(stderr):
    return len([l for l in stderr.split(b"\n") if l.startswith(b"{") and b'"record"' in l])


def write_in(work, name, data):
    """Writes `data` (bytes or text) to `name` in `work`; gives its path."""
    p = os.path.join(work, name)
    with open(p, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    return p


def probes(omlet, work):
    out = []

    def file(name, data):
        return write_in(work, name, data)

    trivial = file("trivial.oml", TRIVIAL)

    def run_probe(issue, name, expect_out, expect_err, args, records_in, stdin=None, check=None):
        pr = Probe(issue, name, f"{expect_out} out, {expect_err} error lines")
        pr.records_in = records_in
        p, pr.seconds = run_cli(omlet, args, stdin)
        pr.out, pr.errors, pr.code = count_lines(p.stdout), error_lines(p.stderr), p.returncode
        summary = [l for l in p.stderr.decode(errors="replace").splitlines() if " records in " in l]
        ok = pr.out == expect_out and pr.errors == expect_err and p.returncode in (0, 1) and summary
        if check:
            ok = ok and check(p)
        pr.verdict = "holds" if ok else "FAILS"
        pr.note = summary[0] if summary else p.stderr.decode(errors="replace")[-300:]
        out.append(pr)

    big = b"".join(b'{"seq":%d,"m":"%s"}\n' % (i, b"M" * 70000) for i in range(600))
    run_probe(1, "600 records of 70 KB, batches of 256", 600, 0, ["run", trivial, "-i", file("r.jsonl", big), "-q"], 600)
    huge = b'{"seq":1,"m":"ok"}\n{"seq":2,"m":"%s"}\n{"seq":3,"m":"ok"}\n' % (b"M" * 20_000_000)
    run_probe(1, "a 20 MB record between two small ones", 2, 1, ["run", trivial, "-i", file("huge.jsonl", huge), "-q"], 3)
    fmt_rule = file("fmt.oml", "name : t\n---\nv = fmt(\"" + "{m}" * 1000 + "\", read(m)) ;\n")
    fmt_in = b'{"m":"%s"}\n{"m":"small"}\n' % (b"x" * 100_000)
    run_probe(1, "`fmt` repeating a 100 KB field 1,000 times (100 MB)", 1, 1, ["run", fmt_rule, "-i", file("fmt.jsonl", fmt_in), "-q"], 2)
    run_probe(2, "a JSONL line that is not UTF-8", 2, 1, ["run", trivial, "-q"], 3, stdin=b'{"a":1}\n{"a":"\xff"}\n{"a":2}\n')
    many = b"".join(b'{"seq":%d}\n' % i for i in range(20000))
    pr = Probe(3, "`--concurrency 300`", "refused with a usage error")
    p, pr.seconds = run_cli(omlet, ["run", trivial, "-i", file("many.jsonl", many), "--concurrency", "300", "-q"])
    pr.records_in, pr.out, pr.errors, pr.code = 20000, count_lines(p.stdout), error_lines(p.stderr), p.returncode
    pr.verdict = "holds" if p.returncode == 2 and b"256" in p.stderr else "FAILS"
    pr.note = p.stderr.decode(errors="replace").strip().splitlines()[0] if p.stderr else ""
    out.append(pr)
    run_probe(3, "`--concurrency 256`, 20,000 records, batches of 8", 20000, 0,
              ["run", trivial, "-i", os.path.join(work, "many.jsonl"), "--concurrency", "256", "--batch", "8", "-q"], 20000)
    rows = ["seq,m"] + [f'{i},"never closed' if i == 11 else f"{i},x" for i in range(1, 100_001)]
    run_probe(5, "CSV: an unbalanced quote in row 11 of 100,000", 99_999, 1,
              ["run", trivial, "-i", file("q.csv", "\n".join(rows) + "\n"), "-q"], 100_000)
    slow = file("slow.oml", SLOW_REGEX)
    run_probe(11, "`regex_match('[a-z]{1,300}X')` on a 5 MB field (deadline 5 s)", 1, 1,
              ["run", slow, "-q"], 2, stdin=b'{"m":"%s"}\n{"m":"abcX"}\n' % (b"a" * 5_000_000))
    wide = b"{" + b",".join(b'"f%d":%d' % (i, i) for i in range(200_000)) + b"}\n"
    run_probe(11, "a record of 200,000 fields", 1, 0, ["run", trivial, "-q"], 1, stdin=wide)

    def compile_probe(issue, name, text, want, cmd="check"):
        pr = Probe(issue, name, want)
        path = file(f"p{len(out)}.oml", text)
        args = [cmd, path] + (["-o", os.path.join(work, "o.wasm")] if cmd == "build" else [])
        p, pr.seconds = run_cli(omlet, args)
        pr.code = p.returncode
        err = p.stderr.decode(errors="replace")
        pr.note = (err.strip().splitlines() or [""])[0][:160]
        pr.verdict = "holds" if want(p, err) else "FAILS"
        pr.expect = want.__doc__
        out.append(pr)

    def clean_error(p, err):
        """a compile or limit error (exit 1), no crash"""
        return p.returncode == 1 and ("error" in err.lower() or "limit" in err.lower())

    deep = "name : t\n---\nv = " + "object { a = " * 3000 + "chars(x)" + " ; }" * 3000 + " ;\n"
    compile_probe(12, "a rule nested 3,000 deep (6 KB)", deep, clean_error)
    line = "name : t\n---\n" + " ".join("field_name_x = ;" for _ in range(2000)) + "\n"

    def capped(p, err):
        """at most 50 errors printed, no panic"""
        return p.returncode == 1 and err.count("error") <= 60 and len(err) < 200_000

    compile_probe(13, "2,000 errors on one 33 KB line", line, capped)
    compile_probe(14, "a 10 MB literal", "name : t\n---\nv = chars(" + "x" * 10_000_000 + ") ;\n", clean_error, "build")
    arms = "".join(f"    chars(k{i}) => chars(v{i}),\n" for i in range(200_000))
    compile_probe(14, "a 200,000-arm match", "name : t\n---\nv = match read(k) {\n" + arms + "};\n", clean_error, "build")
    pat = "/" + "a*" * 30000
    compile_probe(15, "a 60 KB `rule :` pattern", f"name : a\nrule : {pat}\n---\nv = read(v) ;\n", clean_error)

    def builds(p, err):
        """builds"""
        return p.returncode == 0

    compile_probe(16, "`rule : /*` (catch-all)", "name : t\nrule : /*\n---\nv = read(v) ;\n", builds, "build")
    return out


def probes_round_two(omlet, work):
    """The probes of the second trust round, numbered 30.N."""
    out = []

    def file(name, data):
        return write_in(work, name, data)

    copy = file("copy.oml", "name : t\n---\nid = read(id) ;\nname = read(name) ;\n")

    def probe(point, name, expect, args, records_in=None, stdin=None, want=None):
        pr = Probe(f"30.{point}", name, expect)
        pr.records_in = records_in
        p, pr.seconds = run_cli(omlet, args, stdin)
        pr.out, pr.errors, pr.code = count_lines(p.stdout), error_lines(p.stderr), p.returncode
        err = p.stderr.decode(errors="replace")
        pr.verdict = "holds" if want(p, err) else "FAILS"
        lines = [l for l in err.splitlines() if l.strip() and not l.startswith("{")]
        pr.note = (lines[-1] if lines else "")[:160]
        out.append(pr)

    def lines_ok(n_out, n_err, code=(0, 1)):
        return lambda p, err: count_lines(p.stdout) == n_out and error_lines(p.stderr) == n_err and p.returncode in code

    stray = b'id,name\n1,5" screen\n2,keyboard\n3,mouse\n4,10" panel\n5,cable\n'
    probe(1, "CSV: two stray `\"` within 64 lines", "5 out, 0 error lines", ["run", copy, "--format", "csv"], 5, stray,
          lines_ok(5, 0, (0,)))
    probe(1, "CSV: bare-CR line ends", "3 out, 0 error lines", ["run", copy, "--format", "csv"], 3,
          b"id,name\r1,a\r2,b\r3,c\r", lines_ok(3, 0, (0,)))
    probe(1, "CSV: a bare CR inside a line", "3 out, 0 error lines", ["run", copy, "--format", "csv"], 3,
          b"id,name\n1,a\r2,b\n3,c\n", lines_ok(3, 0, (0,)))
    twenty = file("twenty.jsonl", "".join('{"id":%d}\n' % i for i in range(1, 21)))

    def full(p, err):
        return p.returncode == 1 and "may be missing" in err and " records in " not in err

    probe(2, "output to a full disk (`/dev/full`), only the final flush fails", "exit 1, missing lines named, no summary",
          ["run", copy, "-i", twenty, "-o", "/dev/full"], 20, want=full)
    bad20 = file("bad20.jsonl", "".join("not json %d\n" % i for i in range(20)))
    probe(2, "error lines to a full disk", "exit 1, missing lines named, no summary",
          ["run", copy, "-i", bad20, "--errors", "/dev/full", "-o", "/dev/null"], 20, want=full)

    # A stalled producer, then SIGTERM: every line comes before the signal,
    # and the run ends with its summary and status 0.
    import select
    import signal as sig
    pr = Probe("30.3", "stdin stalls after 1,000 records, then SIGTERM", "1000 out before the signal; exit 0 with a summary")
    pr.records_in = 1000
    t = time.time()
    child = subprocess.Popen([omlet, "run", copy], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    child.stdin.write(b"".join(b'{"id":%d}\n' % i for i in range(1000)))
    child.stdin.flush()
    got = b""
    while got.count(b"\n") < 1000 and time.time() - t < 60:
        r, _, _ = select.select([child.stdout], [], [], 0.1)
        if r:
            got += os.read(child.stdout.fileno(), 1 << 20)
    early = got.count(b"\n")
    child.send_signal(sig.SIGTERM)
    rest, err = child.communicate(timeout=60)
    pr.seconds = time.time() - t
    pr.out, pr.errors, pr.code = early + count_lines(rest), error_lines(err), child.returncode
    text = err.decode(errors="replace")
    pr.verdict = "holds" if early == 1000 and child.returncode == 0 and "stopped by SIGTERM" in text else "FAILS"
    pr.note = " ".join(l for l in text.splitlines() if "records in" in l or "stopped" in l)[:160]
    out.append(pr)

    probe(13, "a UTF-8 BOM before the first JSONL line", "1 out, 0 error lines", ["run", copy], 1,
          b'\xef\xbb\xbf{"id":1}\n', lines_ok(1, 0, (0,)))
    probe(13, "lines of NBSP and form feeds", "1 out, 2 error lines", ["run", copy], 3,
          b'{"id":1}\n\xc2\xa0\n\x0c\n', lines_ok(1, 2))
    probe(13, "CSV: a repeated column", "the last cell's value, as JSON", ["run", copy, "--format", "csv"], 1,
          b"id,name,id\n1,a,2\n", lambda p, err: p.stdout.strip() == b'{"id":"2","name":"a"}')
    bad_header = "id,\"name\n" + "".join("%d,x\n" % i for i in range(100_000))
    probe(13, "CSV: a header that cannot be read, 100,000 rows", "one error for the run, exit 1",
          ["run", copy, "--format", "csv", "-i", file("badhead.csv", bad_header)], 100_000,
          want=lambda p, err: p.returncode == 1 and len(err) < 2000 and "CSV header" in err)
    take = file("take.oml", "name : t\n---\n* = take() ;\n")
    probe(13, "an integer past i64 through `* = take()`", "every digit kept", ["run", take], 1,
          b'{"id":340282366920938463463374607431768211457}\n',
          lambda p, err: p.stdout.strip() == b'{"id":340282366920938463463374607431768211457}')

    def compile_probe(point, name, text, want, expect):
        pr = Probe(f"30.{point}", name, expect)
        path = file(f"r2_{len(out)}.oml", text)
        p, pr.seconds = run_cli(omlet, ["run", path], b"{}\n")
        pr.code = p.returncode
        err = p.stderr.decode(errors="replace")
        pr.note = (err.strip().splitlines() or [""])[0][:160]
        pr.verdict = "holds" if want(p, err) else "FAILS"
        out.append(pr)

    wide = "name : t\n---\n" + " ".join("f%05d = ;" % i for i in range(90_000)) + "\n"
    compile_probe(14, "50 errors on one 900 KB line, through `omlet run`", wide,
                  lambda p, err: p.returncode == 1 and len(err) < 100_000, "excerpts, under 100 KB of stderr")
    compile_probe(14, "`regex_match` of a pattern too large to compile",
                  "name : t\n---\nx = match read(a) { regex_match('\\w{1000}\\w{1000}\\w{1000}') => chars(1), _ => chars(2) } ;\n",
                  lambda p, err: p.returncode == 1 and "too large to compile" in err, "a compile error")

    big = file("big.wasm", b"\0asm" + b"\0" * (20 << 20))
    probe(9, "a 20 MB component", "refused before compiling (exit 1)", ["run", big], 1, b"{}\n",
          lambda p, err: p.returncode == 1 and "component bytes" in err)

    kdir = os.path.join(work, "kb")
    os.makedirs(kdir, exist_ok=True)
    rule = file("kb.oml", "name : t\n---\nv = select v from t where k = read(k) ;\n")
    with open(os.path.join(kdir, "escape.toml"), "w") as f:
        f.write('[[tables]]\nname = "t"\ncsv = "../../../../../../etc/passwd"\n')
    probe(11, "knowdb `csv = \"../../../../etc/passwd\"`", "refused (exit 1)",
          ["run", rule, "--knowdb", os.path.join(kdir, "escape.toml")], 1, b'{"k":"root"}\n',
          lambda p, err: p.returncode == 1 and count_lines(p.stdout) == 0)
    with open(os.path.join(kdir, "t.csv"), "w") as f:
        f.write("k,v\na,1\n")
    with open(os.path.join(kdir, "types.toml"), "w") as f:
        f.write('[[tables]]\nname = "t"\ncsv = "t.csv"\ntypes = ["TEXT); DROP TABLE x; --", "TEXT"]\n')
    probe(11, "knowdb `types = [\"TEXT); DROP TABLE x; --\"]`", "refused (exit 1)",
          ["run", rule, "--knowdb", os.path.join(kdir, "types.toml")], 1, b'{"k":"a"}\n',
          lambda p, err: p.returncode == 1 and count_lines(p.stdout) == 0)
    cfg = file("env.toml", 'url = "sqlite://${HOME}/x.db"\n')
    probe(12, "`${HOME}` in a knowledge URL", "refused, naming the variable (exit 1)",
          ["run", rule, "--knowledge", cfg], 1, b'{"k":"a"}\n',
          lambda p, err: p.returncode == 1 and "HOME" in err)
    return out


def probes_round_three(omlet, work):
    """The probes of the third trust round that run through the CLI, numbered R3.N."""
    import select
    import signal as sig
    out = []

    def file(name, data):
        return write_in(work, name, data)

    def probe(point, name, expect, args, records_in=None, stdin=None, want=None, timeout=60):
        pr = Probe(f"R3.{point}", name, expect)
        pr.records_in = records_in
        try:
            p, pr.seconds = run_cli(omlet, args, stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            pr.seconds, pr.verdict, pr.note = timeout, "FAILS", f"no answer within {timeout} s"
            out.append(pr)
            return
        pr.out, pr.errors, pr.code = count_lines(p.stdout), error_lines(p.stderr), p.returncode
        err = p.stderr.decode(errors="replace")
        pr.verdict = "holds" if want(p, err) else "FAILS"
        lines = [l for l in err.splitlines() if l.strip() and not l.startswith("{")]
        pr.note = (lines[-1] if lines else "")[:160]
        out.append(pr)

    copy = file("r3copy.oml", "name : t\n---\nid = read(id) ;\nname = read(name) ;\n")

    def stall_then_signal(point, name, fmt, head, cut, want_out):
        """Writes `head` then `cut` (a line's first part) and stalls; SIGTERM."""
        pr = Probe(f"R3.{point}", name, f"{want_out} out, 0 error lines, exit 0; the cut line is no record")
        pr.records_in = want_out
        t = time.time()
        child = subprocess.Popen([omlet, "run", copy, "--format", fmt], cwd=ROOT, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        child.stdin.write(head + cut)
        child.stdin.flush()
        got = b""
        while got.count(b"\n") < want_out and time.time() - t < 60:
            r, _, _ = select.select([child.stdout], [], [], 0.1)
            if r:
                got += os.read(child.stdout.fileno(), 1 << 20)
        time.sleep(0.3)
        child.send_signal(sig.SIGTERM)
        # The producer stays open (stalled) until omlet has ended.
        child.wait(timeout=60)
        rest, err = child.stdout.read(), child.stderr.read()
        child.stdin.close()
        pr.seconds = time.time() - t
        pr.out, pr.errors, pr.code = count_lines(got + rest), error_lines(err), child.returncode
        text = err.decode(errors="replace")
        pr.verdict = "holds" if (pr.out, pr.errors, pr.code) == (want_out, 0, 0) and b"tru" not in got + rest else "FAILS"
        pr.note = " ".join(l for l in text.splitlines() if "stalled" in l or "records in" in l)[:160]
        out.append(pr)

    stall_then_signal(1, "JSONL: SIGTERM while stdin stalls inside a line", "jsonl",
                      b"".join(b'{"id":%d,"name":"n"}\n' % i for i in range(100)), b'{"id":100,"name":"tru', 100)
    stall_then_signal(1, "CSV: SIGTERM while stdin stalls inside a line", "csv",
                      b"id,name\n" + b"".join(b"%d,n\n" % i for i in range(100)), b"100,tru", 100)

    zero = os.path.join(work, "zero.oml")
    if not os.path.exists(zero):
        os.symlink("/dev/zero", zero)
    probe(2, "a rule file linked to `/dev/zero`", "refused at once (exit 1)", ["check", zero], None, None,
          lambda p, err: p.returncode == 1 and "not a regular file" in err)
    fifo = os.path.join(work, "fifo.toml")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    probe(2, "a knowledge config that is a FIFO", "refused at once (exit 1)", ["run", copy, "--knowledge", fifo], 1,
          b"{}\n", lambda p, err: p.returncode == 1 and "not a regular file" in err)
    zdb = os.path.join(work, "zkb")
    os.makedirs(zdb, exist_ok=True)
    if not os.path.exists(os.path.join(zdb, "knowdb.toml")):
        os.symlink("/dev/zero", os.path.join(zdb, "knowdb.toml"))
    probe(2, "a `knowdb.toml` linked to `/dev/zero`", "refused at once (exit 1)",
          ["run", copy, "--knowdb", os.path.join(zdb, "knowdb.toml")], 1, b"{}\n",
          lambda p, err: p.returncode == 1 and "not a regular file" in err)
    cases = os.path.join(work, "cases")
    os.makedirs(cases, exist_ok=True)
    for n, target in (("zero", "/dev/zero"), ("passwd", "/etc/passwd")):
        case = write_in(cases, f"{n}.toml", f"[[case]]\nname = \"{n}\"\noml_file = \"{target}\"\nexpected = '{{}}'\n")
        probe(2 if n == "zero" else 8, f"a case file with `oml_file = \"{target}\"`",
              "refused (exit 1), nothing of the file printed", ["test", case], None, None,
              lambda p, err: p.returncode == 1 and "oml_file" in err and "root:" not in err and len(err) < 4000)

    loops = os.path.join(work, "loops")
    os.makedirs(loops, exist_ok=True)
    write_in(loops, "a.oml", "name : a\n---\nv = read(v) ;\n")
    for n in ("l1", "l2"):
        if not os.path.lexists(os.path.join(loops, n)):
            os.symlink(".", os.path.join(loops, n))
    probe(10, "two links to `.` in a rule folder", "checks the one rule (exit 0)", ["check", loops], None, None,
          lambda p, err: p.returncode == 0, timeout=30)

    # --watch: the rule replaced by a FIFO, then SIGTERM.
    pr = Probe("R3.9", "`--watch`: the rule replaced by a FIFO, then SIGTERM", "the run stops (exit 0), every record read has its line")
    rule = file("watched.oml", "name : t\n---\nid = read(id) ;\n")
    t = time.time()
    child = subprocess.Popen([omlet, "run", rule, "--watch", "--batch", "1"], cwd=ROOT, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdin.write(b'{"id":1}\n')
    child.stdin.flush()
    first = b""
    while not first.endswith(b"\n") and time.time() - t < 60:
        r, _, _ = select.select([child.stdout], [], [], 0.1)
        if r:
            first += os.read(child.stdout.fileno(), 1 << 16)
    os.remove(rule)
    os.mkfifo(rule)
    time.sleep(2.5)
    child.send_signal(sig.SIGTERM)
    try:
        child.wait(timeout=20)
        rest, err = first + child.stdout.read(), child.stderr.read()
        child.stdin.close()
        pr.out, pr.errors, pr.code = count_lines(rest), error_lines(err), child.returncode
        pr.verdict = "holds" if child.returncode == 0 and pr.out == 1 else "FAILS"
        pr.note = " ".join(l for l in err.decode(errors="replace").splitlines() if "records in" in l)[:160]
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        pr.verdict, pr.note = "FAILS", "still running 20 s after SIGTERM"
    pr.records_in = 1
    pr.seconds = time.time() - t
    out.append(pr)
    return out


SQL_TESTS = [
    (4, "one NUL key in a batched PostgreSQL lookup", "a_refused_key_fails_only_its_own_lookup_in_a_batch_on_postgres"),
    (6, "a `'\\'` literal on MariaDB", "a_backslash_in_a_literal_is_a_character_on_mariadb"),
    (7, "`pg_read_file`, `load_file`, `sleep` in a lookup", "rules_reach_only_their_tables_on"),
    (8, "`pg_catalog.pg_authid`, `mysql.user`, tables outside `tables`", "rules_reach_only_their_tables_on"),
    (8, "the read-only role of docs/deployment.md", "read_only_role_serves_lookups_on"),
    (9, "a lookup cut by the timeout keeps running in the server", "timed_out_lookups_stop_in_the_server_on"),
    ("30.4", "catalog tables (`pg_authid`, `pg_shadow`, `pg_proc`, `sqlite_master`, …) without `tables`, and listed",
     "rules_reach_only_their_tables_on"),
    ("30.5", "`'\\'` under `standard_conforming_strings = off`; backslash literals on all three databases",
     "a_backslash_in_a_literal_is_a_character_on"),
    ("30.6", "a lookup nesting 50,000 parentheses", "deeply_nested_lookups_fail_the_load_not_the_process"),
    ("30.7", "`ip4_int` nested 12 deep on MariaDB", "nested_helpers_stop_at_the_size_bound_on_mariadb"),
    ("30.10", "`IP4_INT(…)` against a decoy server function", "upper_case_helpers_are_omlets_own_on"),
]


# The third round's probes that need a database, a cache or a reload, as
# tests of host/tests/all (module::test prefix).
R3_TESTS = [
    ("R3.3", "a PostgreSQL snapshot table grows past `max_table_mb` (`over_limit` = sql, fail)",
     "trust3_lookups::a_snapshot_over_its_limit_is_never_stale_on_postgres"),
    ("R3.3", "a knowdb loaded again grows past `max_table_mb` with `over_limit = \"fail\"`",
     "trust3_lookups::a_knowdb_reload_over_the_table_limit_follows_fail"),
    ("R3.4", "batched lookups of repeated keys with `order by … limit 1`", "trust3_lookups::batches_answer_as_one_key_does_on"),
    ("R3.5", "an aggregate answer of many MB, 8 records at once", "trust3_lookups::an_aggregate_over_the_answer_bound_fails_on"),
    ("R3.8", "a knowdb's `create.sql` ATTACHes a SQLite file outside its folder",
     "trust3_reach::a_knowdbs_sql_reaches_its_own_database_only"),
    ("R3.8", "a MariaDB lookup of `otherdb.t`", "trust3_reach::a_mariadb_provider_reads_only_its_urls_database"),
]


def run_db_tests():
    """Runs the SQL probes and the fault matrix; returns (sql rows, fault lines)."""
    names = ["databases::" + t for t in sorted({t for _, _, t in SQL_TESTS})] + ["databases::faults_between"]
    names += [t for _, _, t in R3_TESTS]
    p = sh(["cargo", "test", "-j2", "-p", "omlet", "--test", "all", "--"] + names + ["--nocapture", "--test-threads=2"])
    text = p.stdout + p.stderr
    results = {}
    for l in text.splitlines():
        if l.startswith("test ") and (" ... ok" in l or " ... FAILED" in l):
            results[l.split()[1].removeprefix("databases::")] = l.endswith("ok")
    rows = []
    for issue, name, test in SQL_TESTS + R3_TESTS:
        hits = {k: v for k, v in results.items() if k.startswith(test)}
        verdict = "holds" if hits and all(hits.values()) else "FAILS"
        rows.append((issue, name, ", ".join(sorted(hits)) or test, verdict))
    faults = [l[len("FAULT "):].split(" | ") for l in text.splitlines() if l.startswith("FAULT ")]
    faults.sort(key=lambda f: f[0])  # the two databases ran in parallel; each keeps its order
    return rows, faults


def previous_section(title):
    """The section `title` of the RELIABILITY.md this run replaces, with its
    generation line, for a part this run did not redo (fuzzing and the soak
    take long and write their outputs under target/, which a fresh clone
    lacks); None when there is none."""
    path = os.path.join(ROOT, "RELIABILITY.md")
    if not os.path.exists(path):
        return None
    text = open(path).read()
    head = next((l for l in text.splitlines() if l.startswith("Generated by")), "")
    start = text.find(f"\n## {title}\n")
    if start < 0:
        return None
    body = text[start + len(f"\n## {title}\n"):].split("\n## ")[0].strip("\n")
    if body.startswith("Not run for this page") or body.startswith("Kept from an earlier page"):
        return body if body.startswith("Kept") else None
    import re
    m = re.search(r" on (.+? UTC) at (\w+):", head)
    when = f"on {m.group(1)} at {m.group(2)}" if m else "earlier"
    return f"Kept from an earlier page (generated {when}), not run again for this one:\n\n{body}"


def limits_table():
    text = open(os.path.join(ROOT, "docs/deployment.md")).read()
    start = text.index("## Limits")
    table = [l for l in text[start:].split("\n## ")[0].splitlines() if l.startswith("|")]
    return "\n".join(table)


def rss_plot(samples):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("reliability.py: installing matplotlib for the RSS plot", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "matplotlib"], check=False)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    xs = [s[0] for s in samples]
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.plot(xs, [s[1] / 1024 for s in samples], label="RSS (MiB)")
    ax.set_xlabel("second")
    ax.set_ylabel("RSS (MiB)")
    ax.set_ylim(bottom=0)
    ax.set_title("soak: 64 callers, PostgreSQL, reload every 10 s, one restart")
    fig.tight_layout()
    path = os.path.join(ROOT, "benches/plots/soak_rss.png")
    fig.savefig(path, dpi=100)
    return "benches/plots/soak_rss.png"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--omlet", default=os.path.join(ROOT, "target/debug/omlet"))
    ap.add_argument("--skip-db", action="store_true")
    a = ap.parse_args()
    if a.omlet.endswith("target/debug/omlet"):
        b = sh(["cargo", "build", "-j2", "-p", "omlet-cli"])
        if b.returncode != 0:
            sys.exit(b.stderr)

    with tempfile.TemporaryDirectory() as work:
        rows = probes(a.omlet, work) + probes_round_two(a.omlet, work) + probes_round_three(a.omlet, work)
    sql_rows, faults = ([], []) if a.skip_db else run_db_tests()

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    mem = next((l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")), "0")
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    commit = sh(["git", "rev-parse", "--short", "HEAD"]).stdout.strip()
    md = [
        "# Reliability",
        "",
        f"Generated by `python3 benches/reliability.py` on {when} at {commit}: {os.cpu_count()} cores ({cpu}), "
        f"{int(mem) // 1024 // 1024} GiB, Linux {platform.release()}. The CLI is `{os.path.relpath(a.omlet, ROOT)}`.",
        "",
        "omlet's promise: every input record yields exactly one output or one error line naming it, whatever the",
        "input, the rule or the database does; limits end a record or a rule with a typed error, never the run.",
        "",
        "## Hostile inputs",
        "",
        "The probes of the sandbox round and of the second and third trust rounds, through `omlet run`/`check`/`build`/`test`.",
        "The first column is the probe's id: a plain number for a probe of the sandbox round, 30.N for one of the",
        "second trust round, R3.N for one of the third (the same ids name the probes in the tables and notes below).",
        "`out` counts output lines, `errors` error lines naming a record.",
        "",
        "| # | probe | records in | out | errors | exit | seconds | expected | verdict | what omlet said |",
        "|---|---|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        note = r.note.replace("|", "\\|").replace("\n", " ")[:140]
        md.append(
            f"| {r.issue} | {r.name} | {r.records_in if r.records_in is not None else '–'} | "
            f"{r.out if r.out is not None else '–'} | {r.errors if r.errors is not None else '–'} | {r.code} | "
            f"{r.seconds:.1f} | {r.expect} | {r.verdict} | {note} |"
        )
    if sql_rows:
        md += ["", "Probes that need a database, a cache or a reload, as tests on real PostgreSQL 15 and MariaDB 10.11 (host/tests/all/):", "",
               "| # | probe | tests | verdict |", "|---|---|---|---|"]
        for issue, name, tests, verdict in sql_rows:
            md.append(f"| {issue} | {name} | `{tests}` | {verdict} |")
    md += ["", "Secrets: an unsupported or unreachable knowledge URL is reported with its password as `***` (#10; unit tests",
           "`passwords_are_redacted_from_urls_and_messages`, `an_unsupported_url_is_reported_without_its_password`), whatever",
           "characters the password holds, and password-like query parameters too (30.12; `passwords_with_any_character_unencoded_are_redacted`,",
           "`secret_parameters_are_redacted`). Knowdb paths, types and table names (30.11) have the tests",
           "`files_outside_the_knowdb_folder_are_refused`, `column_types_are_never_pasted_into_sql` and",
           "`table_names_must_be_lower_case_identifiers`; cache bytes (30.8) `max_bytes_bounds_the_cache_by_the_size_of_its_rows` and",
           "`large_lookup_values_do_not_fill_the_guest_memory`.", ""]
    md += [
        "The third round's probes that unit and CLI tests hold (each seen failing without its fix): a knowdb named by a bare",
        'file name is watched (R3.6; `reload::tests::a_knowdb_named_by_a_bare_file_name_is_watched_in_the_current_folder`); code',
        'cache entries renamed, copied over or truncated under a running rule (R3.7; `cache::a_code_entry_renamed_to_another_rules_name_is_not_run_as_that_rule`,',
        '`cache::a_code_entry_copied_over_a_running_rules_entry_does_not_switch_it`, `cache::a_code_entry_truncated_under_a_running_rule_does_not_stop_it`);',
        "`dbstat` and SQLite's other catalog tables (R3.8; `guard::tests::sqlite_catalog_tables_and_functions_are_refused`); `omlet test`'s",
        'inline tables, SQLite URL and case paths (R3.8; `trust3::inline_tables_reach_sql_only_through_the_allow_list`,',
        '`trust3::a_sqlite_knowledge_url_must_name_an_existing_file`, `trust3::files_a_case_names_must_lie_inside_its_folder`); a `--watch`',
        "reload of a rule with lookups and no knowledge (R3.9; `run_watch_swaps_a_changed_rule_in_without_stopping`); `--native`'s",
        "bounds and the report's size (R3.10; `trust3::native_outputs_past_their_bound_fail_the_case_and_the_report_stays_small`,",
        '`trust3::the_report_of_a_case_file_is_bounded`, `trust3::a_native_case_past_the_call_deadline_fails_with_a_deadline_error`,',
        '`trust3::a_native_case_that_doubles_its_values_stops_at_the_value_budget`).',
        "",
    ]
    md += ["## Limits", "", "Every limit, its default and what crossing it does (from docs/deployment.md):", "", limits_table(), ""]

    md += ["## Fuzzing", ""]
    fz = os.path.join(ROOT, "target/fuzz-summary.txt")
    if os.path.exists(fz):
        md += ["`scripts/fuzz.sh` (cargo-fuzz, libFuzzer), the summary it wrote:", "", "```", open(fz).read().strip(), "```", ""]
    else:
        kept = previous_section("Fuzzing")
        md += [kept, ""] if kept else ["Not run for this page: `scripts/fuzz.sh` writes `target/fuzz-summary.txt`.", ""]

    md += ["## Faults between omlet and the database", ""]
    if faults:
        md += ["A loopback proxy (`omlet_testdb::FaultProxy`) between omlet and the server; query and connect timeouts 500 ms,",
               "cache bypassed. Time is for one record with one lookup.", "",
               "| database | fault | policy | outcome | time |", "|---|---|---|---|---:|"]
        md += [f"| {' | '.join(f)} |" for f in faults]
        md.append("")
    else:
        md += ["Not run for this page (`--skip-db`).", ""]

    md += ["## Soak", ""]
    sj = os.path.join(ROOT, "target/soak/summary.json")
    if os.path.exists(sj):
        s = json.load(open(sj))
        samples = []
        for l in open(os.path.join(ROOT, "target/soak/samples.csv")).read().splitlines()[1:]:
            samples.append([int(x) for x in l.split(",")])
        plot = rss_plot(samples)
        lost = s["records_in"] - s["records_out"]
        md += [
            f"`cargo run -p omlet-benches --bin soak -- {s['seconds']}`: {s['callers']} callers, batches of {s['batch']}, lookups against",
            f"PostgreSQL 15 (half the keys miss), a reload every 10 s ({s['reloads']} in all), the server stopped for 3 s at second",
            f"{s['restart_at_second']} (with a reload, so lookups met the outage).",
            "",
            "| records in | records out | lost | record errors | lookups absent | lookup errors | database queries | RSS first / last / max |",
            "|---:|---:|---:|---:|---:|---:|---:|---|",
            f"| {s['records_in']:,} | {s['records_out']:,} | {lost} | {s['errors']} | {s['absent']:,} | {s['lookup_errors']} | "
            f"{s['queries']:,} | {s['rss_first_kib'] // 1024} / {s['rss_last_kib'] // 1024} / {s['rss_max_kib'] // 1024} MiB |",
            "",
        ]
        if plot:
            md += [f"![RSS each second]({plot})", ""]
    else:
        kept = previous_section("Soak")
        md += [kept, ""] if kept else ["Not run for this page: `cargo run -p omlet-benches --bin soak` writes `target/soak/`.", ""]

    with open(os.path.join(ROOT, "RELIABILITY.md"), "w") as f:
        f.write("\n".join(md))
    failed = [r for r in rows if r.verdict != "holds"] + [r for r in sql_rows if r[3] != "holds"]
    print(f"RELIABILITY.md written; {len(failed)} probes failing", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
