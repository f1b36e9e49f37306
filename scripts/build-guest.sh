#!/usr/bin/env bash
# Builds the prebuilt guest modules from guest/ and wit/, and stamps them
# with the hash of those sources: host/guest/omlet_guest.wasm, which `omlet
# build` wraps into a component, and host/guest/omlet_guest_core.wasm, the
# same guest behind the core ABI (docs/abi.md, feature `core-abi`), which
# `omlet build --target core` writes as it is.
#
#   scripts/build-guest.sh [OUT]     (default OUT: host/guest/omlet_guest.wasm;
#                                     the core module goes beside it, OUT with _core)
#   OMLET_GUEST_FEATURES=by-hand-nginx scripts/build-guest.sh /tmp/byhand.wasm   (an experiment)
#
# Uses rustup's wasm32-unknown-unknown target when it is installed, otherwise
# Debian's toolchain (rustc-web, cargo-web, rust-web-src, lld-22), installing
# those packages if they are missing. It never downloads a toolchain or target.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${1:-host/guest/omlet_guest.wasm}
TARGET_DIR=${OMLET_GUEST_TARGET_DIR:-$ROOT/target/guest}
CORE_OUT=${OUT%.wasm}_core.wasm
FLAGS=(-p omlet-guest --lib --target wasm32-unknown-unknown --profile wasm -j2)
# Experiments only (see guest/component/Cargo.toml's features): a guest built
# with features is never the committed one, whose stamp says nothing of them.
if [ -n "${OMLET_GUEST_FEATURES:-}" ]; then
    if [ $# -lt 1 ] || [ "$(realpath -m "$OUT")" = "$(realpath -m host/guest/omlet_guest.wasm)" ]; then
        echo "build-guest: OMLET_GUEST_FEATURES needs an OUT other than host/guest/omlet_guest.wasm" >&2
        exit 2
    fi
    FLAGS+=(--features "$OMLET_GUEST_FEATURES")
    CORE_OUT=
fi
# Inline more than LLVM's default (225): every call that stays a call in the
# guest pays wasmtime's epoch check (the call deadline) on entry. 1000 made
# the nginx rule ~8% faster batched (3.8 -> 3.5 us a record) for a module 30%
# larger and ~80 ms more to compile at load; 500 gained half, 1500 nothing
# more, and 3000 was slower again (docs/decisions/0023-guest-build.md). Set here, not taken
# from the caller's environment, so that the committed guest does not depend
# on it.
# wasm's 128-bit SIMD (simd128, a standard part of wasm that wasmtime runs
# on x86-64 and aarch64) lets LLVM use 16-byte loads and compares where it
# vectorises: in the guest's code, and in core's where core is built with it
# (Debian's toolchain, -Zbuild-std). 0.7 % fewer instructions a nginx record
# (valgrind, 30,350 -> 30,126), outputs byte-identical.
unset CARGO_ENCODED_RUSTFLAGS
export RUSTFLAGS="-C llvm-args=-inline-threshold=1000 -C target-feature=+simd128"

# cargo_build [ARGS...]: the guest with the toolchain at hand.
if command -v rustup >/dev/null 2>&1 && rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
    echo "build-guest: using rustup's wasm32-unknown-unknown target" >&2
    cargo_build() { CARGO_TARGET_DIR=$TARGET_DIR cargo build "${FLAGS[@]}" "$@" >&2; }
else
    need=()
    [ -x /usr/bin/rustc ] && /usr/bin/rustc --version | grep -q . || need+=(rustc-web)
    [ -x /usr/bin/cargo ] || need+=(cargo-web)
    dpkg -s rust-web-src >/dev/null 2>&1 || need+=(rust-web-src)
    dpkg -s lld-22 >/dev/null 2>&1 || need+=(lld-22)
    if [ ${#need[@]} -gt 0 ]; then
        echo "build-guest: installing Debian's wasm toolchain: ${need[*]}" >&2
        if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
        $SUDO apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >&2
    fi
    echo "build-guest: using Debian's toolchain ($(/usr/bin/rustc --version))" >&2
    cargo_build() {
        RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR=$TARGET_DIR \
            /usr/bin/cargo build "${FLAGS[@]}" -Zbuild-std=core,alloc,panic_abort "$@" >&2
    }
fi

# Binaryen's wasm-opt then optimises the module as wasm: LLVM's output still
# leaves it locals, copies and branches to fold, and Cranelift compiles what
# it is given. On the nginx rule, 4 % fewer instructions run in the guest
# (valgrind, 32,000 records; -O3 alone gave 2.6 %, more inlining than this
# gave less), for a module of the same size (docs/decisions/0023-guest-build.md). Debian's
# package `binaryen` has it; it is installed when missing. Its data packing
# ends the segment of the IR slot before the slot's zeroed fields, which
# `omlet build` puts back (host/src/build.rs, `splice_ir`).
WASM_OPT_FLAGS=(-O4 --flexible-inline-max-function-size 200
    --enable-bulk-memory --enable-sign-ext --enable-nontrapping-float-to-int
    --enable-mutable-globals --enable-multivalue --enable-reference-types --enable-simd)
# A guest built with its names (CARGO_PROFILE_WASM_STRIP=none, for profiles)
# keeps them.
case "${CARGO_PROFILE_WASM_STRIP:-}" in none | false) KEEP_NAMES=1 ;; *) KEEP_NAMES= ;; esac
if [ -n "$KEEP_NAMES" ]; then
    WASM_OPT_FLAGS+=(--debuginfo)
fi
if ! command -v wasm-opt >/dev/null 2>&1; then
    echo "build-guest: installing Debian's binaryen (wasm-opt)" >&2
    if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq binaryen >&2
fi
mkdir -p "$(dirname "$OUT")"
BUILT=$TARGET_DIR/wasm32-unknown-unknown/wasm/omlet_guest.wasm
# Then omlet's own pass (guest/passes): every memory.copy becomes a call of a
# function that copies up to 32 bytes with loads and stores, since wasmtime
# makes each memory.copy a call out to the host's memmove, which cost more
# than the short copies it made (~7 % of a one-record call,
# docs/decisions/0023-guest-build.md). A host-side tool: built with the
# host's toolchain and without the guest's RUSTFLAGS.
lower_copies() {
    env -u RUSTFLAGS cargo run -q --release -j2 -p omlet-wasm-passes -- lower-copies "$1" "$1" >&2
}
# optimise_and_stamp OUT: the module just built, through wasm-opt and the
# copy pass, stamped.
optimise_and_stamp() {
    wasm-opt "${WASM_OPT_FLAGS[@]}" "$BUILT" -o "$1"
    lower_copies "$1"
    hash=$(python3 scripts/guest_hash.py --embed "$1")
    echo "build-guest: wrote $1 ($(wc -c <"$1") bytes), sources $hash" >&2
}
cargo_build
optimise_and_stamp "$OUT"
# The core ABI's guest: the same crate, its other door.
if [ -n "$CORE_OUT" ]; then
    cargo_build --features core-abi
    optimise_and_stamp "$CORE_OUT"
fi
