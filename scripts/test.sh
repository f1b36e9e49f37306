#!/usr/bin/env bash
# README command (2): runs every test. CI runs this through .ci/run.
#
# Needs Rust (rustup stable) and python3, which the machine has. The wasm
# toolchain is needed only to rebuild the guest; when one is present (rustup's
# wasm32 target, or Debian's rustc-web + rust-web-src), the tests run a second
# time against a guest freshly built from the current sources.
set -euo pipefail
cd "$(dirname "$0")/.."

# The database tests start throwaway PostgreSQL and MariaDB servers: install
# Debian's packages when they are missing.
if [ ! -x /usr/lib/postgresql/15/bin/initdb ] || ! command -v mariadbd >/dev/null 2>&1; then
    echo "test.sh: installing PostgreSQL 15 and MariaDB from Debian's packages" >&2
    if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql postgresql-contrib mariadb-server mariadb-client >&2
fi

# The Kafka tests (host/cli/tests/all/kafka.rs) start a broker from Maven
# Central's jars on a JDK: fetch the jars now (once; the script installs
# Debian's JDK and Maven when missing), so that the test's time is the test's.
scripts/kafka-jars.sh >/dev/null

# The tree stays formatted (rustfmt.toml) and clippy-clean, the guest crate
# included (checked natively).
cargo fmt --check
cargo clippy -j2 --workspace --all-targets -- -D warnings
# The guest's core ABI door (docs/abi.md), which the workspace build leaves out.
cargo clippy -j2 -p omlet-guest --features core-abi -- -D warnings
# The library without its server drivers (a host that uses SQLite only).
cargo clippy -j2 -p omlet -p omlet-knowledge --no-default-features -- -D warnings

# Includes the freshness test: the committed guest must carry the hash of
# the current guest/ and wit/ sources (host/tests/all/component.rs).
cargo test -j2 -p omlet-lang -p omlet-knowledge -p omlet -p omlet-cli -p omlet-benches
# The guest crate's own tests: its library only (its cdylib links for wasm).
cargo test -j2 -p omlet-guest --lib

# The Go host (go/): formatted, vetted, and its tests, which build core
# modules with the omlet binary the CLI tests above just built and start
# their own PostgreSQL and MariaDB. Go is the machine's, or fetched by
# scripts/go.sh when it has none new enough.
GO=$(scripts/go.sh)
# The Go tests skip what needs the CLI when it is missing; here it must not be.
[ -x target/debug/omlet ] || { echo "test.sh: target/debug/omlet was not built" >&2; exit 1; }
unformatted=$(cd go && "$(dirname "$GO")/gofmt" -l .)
if [ -n "$unformatted" ]; then
    echo "test.sh: gofmt would change: $unformatted" >&2
    exit 1
fi
(cd go && GOTOOLCHAIN=local "$GO" vet ./... && OMLET_BIN=$PWD/../target/debug/omlet GOTOOLCHAIN=local "$GO" test -count=1 ./...)

have_wasm_toolchain() {
    if command -v rustup >/dev/null 2>&1 && rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
        return 0
    fi
    [ -x /usr/bin/rustc ] && dpkg -s rust-web-src >/dev/null 2>&1 && dpkg -s lld-22 >/dev/null 2>&1
}

if have_wasm_toolchain; then
    fresh=target/fresh-guest/omlet_guest.wasm
    scripts/build-guest.sh "$fresh"
    echo "test.sh: running the host tests again against the freshly built guest"
    # The Kafka workers ran above; they run the same guest code as every other test.
    OMLET_GUEST=$PWD/$fresh cargo test -j2 -p omlet -p omlet-cli -- --skip kafka::
else
    echo "test.sh: no wasm toolchain here; tested the committed guest only"
fi
