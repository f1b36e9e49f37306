#!/usr/bin/env python3
"""Hash of the sources the committed guest is built from.

SHA-256 over every file under wit/ and guest/ but its tests/ folders (and the build script), in
sorted path order, each as `path NUL length NUL bytes`. The host crate's
freshness test computes the same hash (host/src/guest.rs); keep them in step.

  guest_hash.py              print the hash of the current sources
  guest_hash.py --embed F    append it to wasm file F as custom section `omlet-guest-source`
"""
import hashlib, os, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTION = b"omlet-guest-source"


def source_files():
    files = ["scripts/build-guest.sh"]
    for top in ("wit", "guest"):
        for d, dirs, names in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [x for x in dirs if x not in ("target", "tests")]
            for n in names:
                files.append(os.path.relpath(os.path.join(d, n), ROOT).replace(os.sep, "/"))
    return sorted(files)


def source_hash():
    h = hashlib.sha256()
    for rel in source_files():
        with open(os.path.join(ROOT, rel), "rb") as f:
            data = f.read()
        h.update(rel.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()


def leb(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def embed(path, digest):
    payload = leb(len(SECTION)) + SECTION + digest.encode()
    with open(path, "ab") as f:
        f.write(b"\x00" + leb(len(payload)) + payload)


if __name__ == "__main__":
    digest = source_hash()
    if len(sys.argv) == 3 and sys.argv[1] == "--embed":
        embed(sys.argv[2], digest)
    print(digest)
