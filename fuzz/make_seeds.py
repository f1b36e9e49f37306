#!/usr/bin/env python3
"""Seeds the fuzz corpora (fuzz/corpus/<target>/seed-*) from the repository's
examples and conformance cases, plus hand-made frames and nasty inputs.
Idempotent: seed files have fixed names; what the fuzzer adds is left alone.
Run by scripts/fuzz.sh before fuzzing."""
import glob
import os
import struct
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


class Frame:
    """The frame layout of guest/lang/src/frame.rs."""

    def __init__(self):
        self.sizes, self.nodes, self.text, self.count = [], bytearray(), bytearray(), 0

    def span(self, s):
        b = s.encode()
        self.nodes += struct.pack("<II", len(self.text), len(b))
        self.text += b

    def head(self, tag, name):
        self.count += 1
        self.nodes.append(tag)
        self.span(name)

    def field(self, name, kind, v=None):
        if kind == "chars":
            self.head(0, name); self.span(v)
        elif kind == "digit":
            self.head(1, name); self.nodes += struct.pack("<q", v)
        elif kind == "float":
            self.head(2, name); self.nodes += struct.pack("<d", v)
        elif kind == "bool":
            self.head(3, name); self.nodes.append(1 if v else 0)
        elif kind == "ipv4":
            self.head(4, name); self.nodes += struct.pack("<I", v)
        elif kind == "ipv6":
            self.head(5, name); self.nodes += struct.pack("<QQ", v >> 64, v & (2**64 - 1))
        elif kind == "time":
            self.head(6, name); self.nodes += struct.pack("<q", v)
        elif kind == "null":
            self.head(7, name)
        elif kind == "ignore":
            self.head(8, name)
        elif kind in ("obj", "array"):
            self.head(9 if kind == "obj" else 10, name)
            self.nodes += struct.pack("<I", len(v))
            for m in v:
                self.field(*m)

    def record(self, fields):
        self.count = 0
        for f in fields:
            self.field(*f)
        self.sizes.append(self.count)

    def finish(self):
        out = struct.pack("<III", len(self.sizes), len(self.nodes), len(self.text))
        for s in self.sizes:
            out += struct.pack("<I", s)
        return out + bytes(self.nodes) + bytes(self.text)


def frames():
    sample = [
        ("s", "chars", "héllo"), ("d", "digit", -42), ("f", "float", 1.5), ("b", "bool", True),
        ("v4", "ipv4", 0x0A000001), ("v6", "ipv6", 0x20010DB8 << 96 | 1), ("t", "time", 1_700_000_000_000_000_000),
        ("n", "null"), ("i", "ignore"),
        ("o", "obj", [("z", "null"), ("a", "array", [("", "digit", 1), ("", "chars", "x")]), ("z", "digit", 2)]),
    ]
    out = {}
    f = Frame(); f.record(sample); out["one"] = f.finish()
    f = Frame(); f.record(sample); f.record([]); f.record(sample[:2]); out["three"] = f.finish()
    f = Frame(); out["empty"] = f.finish()
    f = Frame(); f.record([]); out["one-empty"] = f.finish()
    deep = ("x", "null")
    for _ in range(130):
        deep = ("x", "array", [deep])
    f = Frame(); f.record([deep]); out["deep"] = f.finish()
    f = Frame(); f.record([("k", "chars", "a\u00e9\u6d77")]); out["utf8"] = f.finish()[:-1]  # cut inside a char
    return out


def main():
    # Rule text: the examples and every conformance case's rule.
    for p in sorted(glob.glob(os.path.join(ROOT, "examples", "**", "*.oml"), recursive=True)):
        put("parse_compile", "example-" + os.path.basename(p), open(p, "rb").read())
    for p in sorted(glob.glob(os.path.join(ROOT, "tests", "conformance", "*.toml"))):
        try:
            cases = tomllib.load(open(p, "rb")).get("case", [])
        except tomllib.TOMLDecodeError as e:
            print(f"make_seeds: {p}: {e}", file=sys.stderr)
            continue
        for i, c in enumerate(cases):
            srcs = c.get("oml")
            if isinstance(srcs, str):
                put("parse_compile", f"conf-{os.path.basename(p)[:-5]}-{i}", srcs)
            elif isinstance(srcs, list):
                put("parse_compile", f"conf-{os.path.basename(p)[:-5]}-{i}", "\0".join(map(str, srcs)))
    put("parse_compile", "deep", "name : t\n---\nx = " + "object { a = " * 80 + "chars(1)" + " } ;" * 80 + "\n")
    put("parse_compile", "set", "name : a\nrule : /x/*\n---\nx = read() ;\n\0name : b\nrule : /x/y*\n---\ny = take() ;\n")

    # Frames, for both decoders (the host target's first byte is the batch shape).
    for name, f in frames().items():
        put("frame_guest", name, f)
        put("frame_host", name, b"\x01" + f)
        put("frame_host", name + "-batch", b"\x33" + f)

    # JSONL and CSV (the first byte chooses limits and buffer size).
    for p in sorted(glob.glob(os.path.join(ROOT, "examples", "**", "*.jsonl"), recursive=True)):
        data = open(p, "rb").read()[:4096]
        put("jsonl_csv", "example-" + os.path.basename(p), b"\x3f" + data)
        put("jsonl_csv", "small-" + os.path.basename(p), b"\x00" + data[:600])
    for p in sorted(glob.glob(os.path.join(ROOT, "examples", "**", "*.csv"), recursive=True)):
        data = open(p, "rb").read()[:4096]
        put("jsonl_csv", "example-" + os.path.basename(p), b"\x3f" + data)
        put("jsonl_csv", "small-" + os.path.basename(p), b"\x15" + data[:600])
    put("jsonl_csv", "quotes", b"\x05a,b\r\n\"1\n2\",3\n\"open\n4,5\n\n\xff\xfe,x\n")
    put("jsonl_csv", "json", b"\x27" + b'{"a":1,"a":[1,{"z":2,"b":null}],"c":18446744073709551615}\r\n \n[1]\n{"x":' + b"[" * 200 + b"\n")

    # knowdb.toml files.
    for p in sorted(glob.glob(os.path.join(ROOT, "examples", "**", "knowdb.toml"), recursive=True)):
        put("knowdb", os.path.basename(os.path.dirname(os.path.dirname(p))), open(p, "rb").read())
    put("knowdb", "all-keys", '[[tables]]\nname = "t"\ncsv = "t.csv"\ntypes = ["TEXT", "INTEGER"]\ncreate = "c.sql"\n'
        'insert = "i.sql"\nexpected_rows = 4\non_error = "skip"\n')


if __name__ == "__main__":
    main()
