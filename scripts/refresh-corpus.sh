#!/usr/bin/env bash
# Copies the shared conformance corpus (../shared/conformance) into the
# repository's own copy (tests/conformance), which the tests read. The test
# `vendored_corpus_matches_the_shared_one` fails while the two differ.
set -euo pipefail
cd "$(dirname "$0")/.."
src=../shared/conformance
[ -d "$src" ] || { echo "refresh-corpus.sh: no $src beside the repository" >&2; exit 1; }
rm -rf tests/conformance
cp -r "$src" tests/conformance
git status --short tests/conformance
