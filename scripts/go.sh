#!/usr/bin/env bash
# Prints the path of a `go` command new enough for go/go.mod, fetching one
# when the machine has none:
#
#   GO=$(scripts/go.sh) && (cd go && "$GO" test ./...)
#
# The machine's `go` is used when it is at least the version go/go.mod names.
# Otherwise the Go toolchain module of that version (golang.org/toolchain, the
# same one `GOTOOLCHAIN` fetches) is downloaded once from the Go module proxy
# into ~/.cache/omlet/go. Debian's golang package is not used: bookworm's is Go
# 1.19, older than wazero and the SQL drivers need, and too old to fetch a
# newer toolchain itself.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLCHAIN=1.26.8 # fetched when the machine has no Go new enough
need=$(awk '$1 == "go" { print $2; exit }' go/go.mod)

newer_or_same() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$2" ]; }

if command -v go >/dev/null 2>&1; then
    have=$(go env GOVERSION 2>/dev/null | sed 's/^go//')
    if [ -n "$have" ] && newer_or_same "$have" "$need"; then
        command -v go
        exit 0
    fi
fi
case "$(uname -m)" in
    x86_64) arch=amd64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) echo "go.sh: no Go toolchain for $(uname -m); install Go $need or newer" >&2; exit 1 ;;
esac
dest=${XDG_CACHE_HOME:-$HOME/.cache}/omlet/go/go$TOOLCHAIN
if [ ! -x "$dest/bin/go" ]; then
    proxy=${GOPROXY:-https://proxy.golang.org}
    proxy=${proxy%%,*}
    version=v0.0.1-go$TOOLCHAIN.linux-$arch
    echo "go.sh: fetching Go $TOOLCHAIN from $proxy (golang.org/toolchain@$version)" >&2
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    curl -fsSL "$proxy/golang.org/toolchain/@v/$version.zip" -o "$tmp/go.zip"
    python3 - "$tmp/go.zip" "$tmp/x" <<'PY'
import sys, zipfile, os, stat
with zipfile.ZipFile(sys.argv[1]) as z:
    for info in z.infolist():
        path = z.extract(info, sys.argv[2])
        mode = (info.external_attr >> 16) & 0o777
        if mode:
            os.chmod(path, mode)
PY
    mkdir -p "$(dirname "$dest")"
    rm -rf "$dest"
    mv "$tmp/x/golang.org/toolchain@$version" "$dest"
    chmod +x "$dest"/bin/* "$dest"/pkg/tool/*/* 2>/dev/null || true
fi
echo "$dest/bin/go"
