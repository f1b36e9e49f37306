#!/usr/bin/env bash
# Copies the shared conformance corpus (../shared/conformance) into the
# repository's own copy (tests/conformance), which the tests read, and the
# language contract (../shared/spec) into docs/spec, which the docs link to.
# The tests `vendored_corpus_matches_the_shared_one` and
# `vendored_spec_matches_the_shared_one` fail while they differ.
set -euo pipefail
cd "$(dirname "$0")/.."
src=../shared/conformance
[ -d "$src" ] || { echo "refresh-corpus.sh: no $src beside the repository" >&2; exit 1; }
rm -rf tests/conformance
cp -r "$src" tests/conformance
if [ -d ../shared/spec ]; then
    rm -rf docs/spec
    cp -r ../shared/spec docs/spec
fi
git status --short tests/conformance docs/spec
