//! `omlet run`'s throughput, in a bench binary of its own so that it runs with
//! the allocator the `omlet` CLI runs with (mimalloc, see host/cli/Cargo.toml);
//! the `eval` benches measure the library under the system allocator, as an
//! embedder that chooses none gets it. `cargo bench -p omlet-benches --bench run`.

use std::io::{BufRead, BufReader, Write};
use std::sync::Arc;
use std::time::Instant;

use omlet::knowledge::sqlite::SqliteProvider;
use omlet::stream::{Counting, Format, Outcome, RouteBy};
use omlet::{Engine, Knowledge};
use omlet_benches::*;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `omlet run`'s throughput: `OMLET_BENCH_RUN_RECORDS` nginx records (1 M;
/// 100 K in quick mode) streamed from a JSONL file with the code `omlet run`
/// uses (`stream::read` + `stream::run_json`, batch 256, as many calls in flight as
/// the CLI's default, the cores plus one, each output a JSON line written into a
/// sink), through two rules:
/// - `run/nginx`: the nginx rule and its knowdb, the main job;
/// - `run/copy`: `* = take() ;`, which copies each record out as it came in:
///   what reading, parsing, crossing into the guest and back, and rendering
///   cost with next to no evaluation, roughly the ceiling for records of
///   this size (into a sink; the CLI also writes a file).
///
/// And the same runs against large tables, each over a knowdb of
/// `OMLET_BENCH_LARGE_ROWS` rows (1 M; 100 K in quick mode) held in memory,
/// with `K` distinct client addresses among the records (128, 4,096, 65,536,
/// and one per record):
/// - `run/ranges/K`: the nginx rule against `ip_zone` with 1 M ranges;
/// - `run/exact/K`: the nginx rule with its range lookup replaced by an
///   exact one, `zone = select category from hosts where ip =
///   read(client_ip) ;`, against 1 M addresses.
///
/// Each is timed `OMLET_BENCH_RUN_REPEATS` times (3; once in quick mode), from
/// opening the input to the last output, as `omlet run` times itself (rule
/// load and knowdb not included), and the median is kept: on a 2-core VM a
/// single run can land in a stretch where the cores are slow.
fn main() {
    let cells: Vec<&str> = ["run/nginx", "run/copy"].into_iter().filter(|id| side_wanted(id)).collect();
    let n = env_usize("OMLET_BENCH_RUN_RECORDS", if quick() { 100_000 } else { 1_000_000 });
    large_tables(n);
    if cells.is_empty() {
        side::flush();
        return;
    }
    let dir = std::env::temp_dir().join(format!("omlet-bench-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("access.jsonl");
    nginx_jsonl(&input, n).unwrap();
    // As `omlet run`: tokio's multi-threaded runtime, one worker per core.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(cores).enable_all().build().unwrap();
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/nginx"));
    for id in cells {
        let rule = rt.block_on(async {
            let engine = Engine::new().unwrap();
            if id == "run/copy" {
                return engine.load_source("copy.oml", "name : copy\n---\n* = take() ;\n", &Default::default()).await.unwrap();
            }
            // As `omlet run --knowdb examples/nginx/knowdb/knowdb.toml`: the knowdb in memory.
            let db = SqliteProvider::memory().await.unwrap();
            omlet::knowledge::knowdb::load(&root.join("knowdb/knowdb.toml"), &db).await.unwrap();
            let knowledge = Arc::new(Knowledge::new(Arc::new(db)));
            engine.load_path(&root.join("nginx.oml"), &omlet::LoadOptions::new().knowledge(knowledge)).await.unwrap()
        });
        measure(&rt, id, rule, &input, cores + 1);
    }
    let _ = std::fs::remove_dir_all(&dir);
    side::flush();
}

/// Distinct client addresses in the large-table cells.
const KEYS: [u64; 4] = [128, 4096, 65_536, u64::MAX];

/// The `run/ranges/K` and `run/exact/K` cells (see [`main`]).
fn large_tables(n: usize) {
    let wanted = |kind: &str| KEYS.iter().any(|k| side_wanted(&key_id(kind, *k, n)));
    if !wanted("ranges") && !wanted("exact") {
        return;
    }
    let rows = env_usize("OMLET_BENCH_LARGE_ROWS", if quick() { 100_000 } else { 1_000_000 });
    let dir = std::env::temp_dir().join(format!("omlet-bench-large-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let knowdb = large_knowdb(&dir, rows).unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(cores).enable_all().build().unwrap();
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/nginx"));
    let nginx = std::fs::read_to_string(root.join("nginx.oml")).unwrap();
    let range_lookup = "zone, owner = select zone, owner from ip_zone\n    where lo_int <= ip4_int(read(client_ip)) and hi_int >= ip4_int(read(client_ip)) ;";
    assert!(nginx.contains(range_lookup), "the nginx rule's lookup moved: update benches/benches/run.rs");
    let exact = nginx.replace(range_lookup, "zone = select category from hosts where ip = read(client_ip) ;");
    // As `omlet run --knowdb`: the knowdb loaded once, its tables in memory.
    let knowledge = rt.block_on(async {
        let db = SqliteProvider::memory().await.unwrap();
        let started = Instant::now();
        let tables = omlet::knowledge::knowdb::load(&knowdb, &db).await.unwrap();
        let secs = started.elapsed().as_secs_f64();
        eprintln!("large knowdb: {rows} + {rows} rows loaded in {secs:.2} s");
        side::put(
            "memory_table/knowdb_load",
            side::object(&[("rows", (2 * rows).to_string()), ("seconds", side::number((secs * 1000.0).round() / 1000.0))]),
        );
        let config =
            omlet::knowledge::KnowledgeConfig { tables: Some(tables.clone()), knowdb_tables: tables, ..Default::default() };
        Arc::new(Knowledge::with_config(Arc::new(db), config))
    });
    for (kind, text) in [("ranges", nginx.as_str()), ("exact", exact.as_str())] {
        if !wanted(kind) {
            continue;
        }
        for keys in KEYS {
            let id = key_id(kind, keys, n);
            if !side_wanted(&id) {
                continue;
            }
            // A rule (instances, guest caches) of its own per cell, so that
            // no cell starts with what the one before left in the caches.
            let rule = rt.block_on(async {
                let options = omlet::LoadOptions::new().knowledge(knowledge.clone());
                Engine::new().unwrap().load_source(&format!("{kind}.oml"), text, &options).await.unwrap()
            });
            let input = dir.join(format!("{kind}-{keys}.jsonl"));
            nginx_jsonl_keys(&input, n, keys).unwrap();
            measure(&rt, &id, rule, &input, cores + 1);
            let _ = std::fs::remove_file(&input);
        }
    }
    // What each table took in memory, and how long reading it took (at the
    // first bind of a lookup of it, outside the timed runs).
    for t in rt.block_on(knowledge.memory_tables()) {
        side::put(
            &format!("memory_table/{}", t.name),
            side::object(&[
                ("rows", t.len().to_string()),
                ("bytes", t.bytes.to_string()),
                ("index_bytes", t.index_bytes().to_string()),
                ("read_seconds", side::number((t.loaded_in.as_secs_f64() * 1000.0).round() / 1000.0)),
            ]),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The id of a large-table cell: `run/ranges/4096`, or `run/ranges/distinct`
/// for one address per record.
fn key_id(kind: &str, keys: u64, n: usize) -> String {
    if keys >= n as u64 { format!("run/{kind}/distinct") } else { format!("run/{kind}/{keys}") }
}

/// Timed runs of `rule` over `input`; the median run is kept as side result
/// `id`, with the seconds of every run.
fn measure(rt: &tokio::runtime::Runtime, id: &str, rule: omlet::Rule, input: &std::path::Path, concurrency: usize) {
    let repeats = env_usize("OMLET_BENCH_RUN_REPEATS", if quick() { 1 } else { 3 }).max(1);
    let mut runs: Vec<(u64, u64, u64, f64)> = (0..repeats).map(|_| timed_run(rt, id, rule.clone(), input, concurrency)).collect();
    let all: Vec<String> = runs.iter().map(|r| side::number((r.3 * 1000.0).round() / 1000.0)).collect();
    runs.sort_by(|a, b| a.3.total_cmp(&b.3));
    let (records, written, failed, secs) = runs[runs.len() / 2];
    let input_bytes = std::fs::metadata(input).map(|m| m.len()).unwrap_or(0);
    let rps = records as f64 / secs.max(1e-9);
    side::put(
        id,
        side::object(&[
            ("records", records.to_string()),
            ("written", written.to_string()),
            ("failed", failed.to_string()),
            ("input_bytes", input_bytes.to_string()),
            ("seconds", side::number((secs * 1000.0).round() / 1000.0)),
            ("runs_seconds", format!("[{}]", all.join(", "))),
            ("records_per_second", side::number(rps.round())),
            ("batch", BATCH.to_string()),
            ("concurrency", concurrency.to_string()),
        ]),
    );
}

/// Records per guest call, as `omlet run`'s default.
const BATCH: usize = 256;

/// One timed run: (records, written, failed, seconds).
fn timed_run(
    rt: &tokio::runtime::Runtime,
    id: &str,
    rule: omlet::Rule,
    input: &std::path::Path,
    concurrency: usize,
) -> (u64, u64, u64, f64) {
    let (records, written, failed, secs) = rt.block_on(async {
        let f = std::fs::File::open(input).unwrap();
        let reader: Box<dyn BufRead + Send> = Box::new(BufReader::with_capacity(1 << 16, f));
        let (reader, _bytes) = Counting::new(reader);
        let reader: Box<dyn BufRead + Send> = Box::new(BufReader::new(reader));
        let mut out = std::io::BufWriter::new(std::io::sink());
        let started = Instant::now();
        let (mut records, mut written, mut failed) = (0u64, 0u64, 0u64);
        let sink = |d: omlet::stream::Done<String>| -> omlet::Result<()> {
            records += 1;
            match d.outcome {
                Outcome::Ok(line) => {
                    written += 1;
                    let io = |e| omlet::Error::Io { path: "output".into(), source: e };
                    out.write_all(line.as_bytes()).map_err(io)?;
                    out.write_all(b"\n").map_err(io)?;
                }
                Outcome::Unrouted(_) | Outcome::Failed(_) => failed += 1,
            }
            Ok(())
        };
        let inputs = omlet::stream::read(reader, Format::Jsonl);
        let options = omlet::stream::RunOptions { route: RouteBy::Only, batch: BATCH, concurrency };
        omlet::stream::run_json(rule, inputs, &options, sink).await.unwrap();
        out.flush().unwrap();
        (records, written, failed, started.elapsed().as_secs_f64())
    });
    let rps = records as f64 / secs.max(1e-9);
    eprintln!("{id}: {records} records in {secs:.2} s ({rps:.0} records/s), {failed} failed");
    (records, written, failed, secs)
}
