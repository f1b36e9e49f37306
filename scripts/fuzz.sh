#!/usr/bin/env bash
# Runs the cargo-fuzz targets of fuzz/ (see fuzz/README.md). Not run in CI:
# CI replays the saved findings instead (tests/fuzz-regressions/, through
# guest/lang/tests/fuzz_regressions.rs and host/tests/all/fuzz_regressions.rs).
#
#   scripts/fuzz.sh [TARGET] [--runs N] [--minutes M] [--keep-going]
#                   [--sanitizer address|none] [--no-build]
#
# Each target (all of them, or TARGET) runs for N executions (default
# 10,000,000) or M minutes (default 30), whichever comes first, as one
# libFuzzer process (a single job). By default a target stops at its first
# finding, as libFuzzer does; --keep-going runs it in libFuzzer's fork mode
# (still one job at a time) and goes on past crashes, timeouts and OOMs, so
# that one known bug does not hide the next. Findings land in
# fuzz/artifacts/TARGET/.
#
# One summary line per target (executions, seconds, findings) goes to
# target/fuzz-summary.txt; each target's libFuzzer output to
# target/fuzz-logs/TARGET.log.
#
# Needs cargo-fuzz (installed from crates.io when missing) and python3 (to
# seed the corpora). Uses the stable toolchain: RUSTC_BOOTSTRAP=1 lets it
# take the nightly flags cargo-fuzz passes. Builds with one job
# (CARGO_BUILD_JOBS=1); the host targets build the host crate with
# wasmtime and sqlx, instrumented: allow half an hour or more the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

lang_targets=(parse_compile frame_guest)
host_targets=(frame_host jsonl_csv knowdb)
all_targets=("${lang_targets[@]}" "${host_targets[@]}")

runs=10000000
minutes=30
keep_going=0
sanitizer=address
build=1
only=
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) runs=$2; shift 2 ;;
        --runs=*) runs=${1#*=}; shift ;;
        --minutes) minutes=$2; shift 2 ;;
        --minutes=*) minutes=${1#*=}; shift ;;
        --keep-going) keep_going=1; shift ;;
        --sanitizer) sanitizer=$2; shift 2 ;;
        --sanitizer=*) sanitizer=${1#*=}; shift ;;
        --no-build) build=0; shift ;;
        -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
        *)
            if [ -n "$only" ]; then echo "fuzz.sh: one target at most" >&2; exit 2; fi
            only=$1; shift ;;
    esac
done
case "$runs$minutes" in *[!0-9]*) echo "fuzz.sh: --runs and --minutes take whole numbers" >&2; exit 2 ;; esac

targets=("${all_targets[@]}")
if [ -n "$only" ]; then
    case " ${all_targets[*]} " in
        *" $only "*) targets=("$only") ;;
        *) echo "fuzz.sh: unknown target $only (one of: ${all_targets[*]})" >&2; exit 2 ;;
    esac
fi

export RUSTC_BOOTSTRAP=1 CARGO_BUILD_JOBS=1
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz from crates.io" >&2
    cargo install cargo-fuzz --locked -j1
fi

python3 fuzz/make_seeds.py

features_of() {
    case " ${host_targets[*]} " in *" $1 "*) echo "--features=host" ;; *) echo "" ;; esac
}

mkdir -p target/fuzz-logs
summary=target/fuzz-summary.txt
{
    echo "# scripts/fuzz.sh $(date -u +%Y-%m-%dT%H:%M:%SZ): up to $runs executions or $minutes minutes per target," \
        "sanitizer $sanitizer$([ $keep_going = 1 ] && echo ', fork mode past findings')"
} > "$summary"

status=0
for t in "${targets[@]}"; do
    features=$(features_of "$t")
    log=$root/target/fuzz-logs/$t.log
    artifacts=$root/fuzz/artifacts/$t
    mkdir -p "$artifacts" "$root/fuzz/corpus/$t"
    if [ $build = 1 ]; then
        echo "fuzz.sh: building $t" >&2
        start=$(date +%s)
        # shellcheck disable=SC2086
        if ! (cd fuzz && cargo fuzz build $features -s "$sanitizer" "$t") >"$log.build" 2>&1; then
            tail -20 "$log.build" >&2
            echo "$t: build failed (see target/fuzz-logs/$t.log.build)" | tee -a "$summary"
            status=1
            continue
        fi
        echo "fuzz.sh: built $t in $(( $(date +%s) - start ))s" >&2
    fi
    before=$(find "$artifacts" -type f | wc -l)
    flags=(-runs="$runs" -max_total_time=$((minutes * 60)) -timeout=20 -rss_limit_mb=2048
           -print_final_stats=1 -artifact_prefix="$artifacts/")
    if [ $keep_going = 1 ]; then
        flags+=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
    fi
    echo "fuzz.sh: fuzzing $t ($runs executions or $minutes minutes)" >&2
    start=$(date +%s)
    set +e
    # shellcheck disable=SC2086
    (cd fuzz && cargo fuzz run $features -s "$sanitizer" "$t" "corpus/$t" -- "${flags[@]}") >"$log" 2>&1
    rc=$?
    set -e
    wall=$(( $(date +%s) - start ))
    # Executions: libFuzzer's final stats, or (fork mode) its last status line.
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
    if [ -z "$execs" ]; then
        execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#' || true)
    fi
    # Fuzzing time as libFuzzer counts it (without a rebuild by `cargo fuzz
    # run`): "Done N runs in S second(s)", or fork mode's last "time: Ss".
    secs=$(grep -o 'runs in [0-9]* second' "$log" | tail -1 | grep -o '[0-9]*' || true)
    if [ -z "$secs" ]; then
        secs=$(grep -o ' time: [0-9]*s' "$log" | tail -1 | grep -o '[0-9]*' || true)
    fi
    secs=${secs:-$wall}
    after=$(find "$artifacts" -type f | wc -l)
    found=$(( after - before ))
    if [ $found -gt 0 ] || [ $rc -ne 0 ]; then
        state=findings
        status=1
    else
        state=clean
    fi
    line="$t: executions ${execs:-?}, fuzzing ${secs}s (${wall}s wall), new findings $found ($state, exit $rc), artifacts fuzz/artifacts/$t/"
    echo "$line" | tee -a "$summary"
done
echo "fuzz.sh: summary in $summary" >&2
exit $status
