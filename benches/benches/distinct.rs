//! Lookups against large tables with distinct keys: what one
//! lookup costs on each path when caches cannot help, against the floor of
//! hand-written Rust.
//!
//! Two tables of `OMLET_BENCH_LARGE_ROWS` rows (1 M; 100 K in quick mode),
//! those of `large_knowdb`: `hosts` (an address and its category) and
//! `ip_zone` (ranges of equal width, none overlapping, holding every key). Each lookup draws
//! its key from 10^6 values (a fixed LCG), so nearly every key is new.
//! - `distinct_exact/*`: `select category from hosts where ip = :ip`;
//! - `distinct_range/*`: `select zone, owner from ip_zone where lo_int <= :n
//!   and hi_int >= :n_2`;
//! - `distinct_range_ordered/*`: the same with `order by lo_int desc limit
//!   1`, the upstream form, which lets a database stop at the first row its
//!   index gives (the SQL paths only: memory answers both alike).
//!
//! Paths: `memory` (the knowdb table in memory, asked on the fiber-less path
//! `Knowledge::query_cached`, as a guest call with lookups takes it),
//! `sqlite_indexed` (the same table in SQLite with omlet's index, memory
//! off, no cache: one query per lookup), `postgres` and `mariadb` (the table
//! in a server the bench starts, indexed, no cache), and the floor:
//! `floor_hashmap` (a `HashMap<String, String>`) and `floor_binary_search`
//! (a binary search over sorted `(lo, hi, zone, owner)`), each cloning its
//! answer as a lookup does.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use omlet::Knowledge;
use omlet::knowledge::{BoundStatement, CacheMode, KnowledgeConfig};
use omlet_benches::*;
use omlet_lang::Cell;
use tokio::runtime::Runtime;

/// Values keys are drawn from.
const KEY_SPACE: u64 = 1_000_000;

fn config() -> Criterion {
    let (warm_up, measure, samples) = criterion_timing();
    Criterion::default().configure_from_args().warm_up_time(warm_up).measurement_time(measure).sample_size(samples)
}

/// The i-th key: an address of `hosts` (all keys below the row count are in it).
fn key(lcg: &mut u64, rows: u64) -> u32 {
    *lcg = lcg.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let k = (*lcg >> 33) % KEY_SPACE.min(rows);
    distinct_address(k, 1 << 24, &mut 0)
}

fn statement(sql: &str, params: &[&str]) -> omlet_lang::ir::SqlStatement {
    omlet_lang::ir::SqlStatement {
        sql: sql.into(),
        params: params.iter().map(|p| p.to_string()).collect(),
        table: String::new(),
        columns: Vec::new(),
        file: "bench.oml".into(),
        line: 1,
        column: 1,
    }
}

const EXACT: &str = "select category from hosts where ip = :ip";
const RANGE: &str = "select zone, owner from ip_zone where lo_int <= :n and hi_int >= :n_2";
const RANGE_ORDERED: &str = "select zone, owner from ip_zone where lo_int <= :n and hi_int >= :n_2 order by lo_int desc limit 1";

/// The three statements bound on `k`: exact, range, ordered range.
fn bound(rt: &Runtime, k: &Knowledge) -> (BoundStatement, BoundStatement, BoundStatement) {
    let stmts = [statement(EXACT, &["ip"]), statement(RANGE, &["n", "n_2"]), statement(RANGE_ORDERED, &["n", "n_2"])];
    let mut b = rt.block_on(k.bind(&stmts)).unwrap();
    let ordered = b.pop().unwrap();
    let range = b.pop().unwrap();
    (b.pop().unwrap(), range, ordered)
}

fn params(exact: bool, a: u32) -> Vec<Cell> {
    if exact {
        vec![Cell::Text(std::net::Ipv4Addr::from(a).to_string())]
    } else {
        vec![Cell::Integer(i64::from(a)), Cell::Integer(i64::from(a))]
    }
}

/// `iters` lookups through `k`'s async path, in one task; each must find its row.
fn through_sql(rt: &Runtime, k: &Arc<Knowledge>, stmt: &BoundStatement, exact: bool, rows: u64, iters: u64) -> Duration {
    let (k, stmt) = (k.clone(), stmt.clone());
    rt.block_on(async move {
        let mut lcg = 7;
        let t = Instant::now();
        for _ in 0..iters {
            let row = k.query(&stmt, &params(exact, key(&mut lcg, rows))).await.unwrap();
            assert!(row.is_some());
        }
        t.elapsed()
    })
}

fn benches(c: &mut Criterion) {
    let rows = env_usize("OMLET_BENCH_LARGE_ROWS", if quick() { 100_000 } else { 1_000_000 }) as u64;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = std::env::temp_dir().join(format!("omlet-bench-distinct-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let knowdb = large_knowdb(&dir, rows as usize).unwrap();

    // The knowdb in SQLite: in memory, and with memory off and no cache.
    let open = |memory: bool| {
        rt.block_on(async {
            let db = omlet::knowledge::sqlite::SqliteProvider::memory().await.unwrap();
            let tables = omlet::knowledge::knowdb::load(&knowdb, &db).await.unwrap();
            let mut config = KnowledgeConfig { tables: Some(tables.clone()), knowdb_tables: tables, ..Default::default() };
            config.memory.knowdb = memory;
            config.cache.mode = CacheMode::Bypass;
            Arc::new(Knowledge::with_config(Arc::new(db), config))
        })
    };
    let memory = open(true);
    let (mem_exact, mem_range, _) = bound(&rt, &memory);
    assert!(mem_exact.memory.is_some() && mem_range.memory.is_some(), "{} / {}", mem_exact.path, mem_range.path);
    let sqlite = open(false);
    let (sql_exact, sql_range, sql_ordered) = bound(&rt, &sqlite);

    // The floor: the same rows in plain Rust structures.
    let mut lcg = 0;
    let hosts: HashMap<String, String> = (0..rows)
        .map(|k| (std::net::Ipv4Addr::from(distinct_address(k, 1 << 24, &mut lcg)).to_string(), format!("c{}", k % 11)))
        .collect();
    let width = (1u64 << 24).div_ceil(rows) as i64;
    let ranges: Vec<(i64, i64, String, String)> = (0..rows as i64)
        .map(|i| {
            let lo = (10i64 << 24) + i * width;
            (lo, lo + width - 1, format!("z{}", i % 97), format!("team-{}", i % 13))
        })
        .collect();

    // The servers, with the same tables, indexed.
    let mut servers = Vec::new();
    for kind in ["postgres", "mariadb"] {
        let Some((url, guard)) = database(kind) else { continue };
        let k = rt.block_on(async {
            let mut config = KnowledgeConfig::for_url(&url);
            config.cache.mode = CacheMode::Bypass;
            let k = config.open().await.unwrap();
            let p = k.provider().clone();
            let read = |name: &str| {
                // Plain CSV, as `large_knowdb` writes it: no quotes.
                let text = std::fs::read_to_string(dir.join(name)).unwrap();
                let mut lines = text.lines();
                let header: Vec<String> = lines.next().unwrap().split(',').map(str::to_string).collect();
                let rows: Vec<Vec<Cell>> = lines
                    .map(|l| {
                        l.split(',')
                            .map(|v| v.parse::<i64>().map(Cell::Integer).unwrap_or_else(|_| Cell::Text(v.into())))
                            .collect()
                    })
                    .collect();
                (header, rows)
            };
            for (table, file, types, index) in [
                ("hosts", "hosts.csv", vec!["TEXT", "TEXT"], vec!["ip"]),
                ("ip_zone", "ip_zone.csv", vec!["INTEGER", "INTEGER", "TEXT", "TEXT"], vec!["lo_int"]),
            ] {
                let (header, data) = read(file);
                let types: Vec<String> = types.into_iter().map(String::from).collect();
                let _ = p.drop_table(table).await;
                let started = Instant::now();
                p.load_table(table, &header, &types, &data).await.unwrap();
                let index: Vec<String> = index.into_iter().map(String::from).collect();
                p.create_index(table, &index).await.unwrap();
                eprintln!("{kind}: {table} ({} rows) loaded and indexed in {:.1} s", data.len(), started.elapsed().as_secs_f64());
            }
            k
        });
        let (e, r, o) = bound(&rt, &k);
        servers.push((kind, k, e, r, o, guard));
    }

    for exact in [true, false] {
        let mut g = c.benchmark_group(if exact { "distinct_exact" } else { "distinct_range" });
        g.throughput(Throughput::Elements(1));
        if exact {
            g.bench_function("floor_hashmap", |b| {
                let mut lcg = 7;
                b.iter_custom(|n| {
                    let keys: Vec<String> = (0..n).map(|_| std::net::Ipv4Addr::from(key(&mut lcg, rows)).to_string()).collect();
                    let t = Instant::now();
                    for k in &keys {
                        std::hint::black_box(hosts.get(k).cloned().unwrap());
                    }
                    t.elapsed()
                })
            });
        } else {
            g.bench_function("floor_binary_search", |b| {
                let mut lcg = 7;
                b.iter_custom(|n| {
                    let keys: Vec<i64> = (0..n).map(|_| i64::from(key(&mut lcg, rows))).collect();
                    let t = Instant::now();
                    for &x in &keys {
                        let i = ranges.partition_point(|r| r.0 <= x);
                        let r = &ranges[i - 1];
                        assert!(r.1 >= x);
                        std::hint::black_box((r.2.clone(), r.3.clone()));
                    }
                    t.elapsed()
                })
            });
        }
        // The memory path's parameters are made outside the timing, as the
        // floor's keys are: a guest hands them over made.
        let stmt = if exact { &mem_exact } else { &mem_range };
        g.bench_function("memory", |b| {
            let mut lcg = 7;
            b.iter_custom(|n| {
                let keys: Vec<Vec<Cell>> = (0..n).map(|_| params(exact, key(&mut lcg, rows))).collect();
                let generation = memory.generation();
                let t = Instant::now();
                for p in &keys {
                    let row = memory.query_cached(generation, stmt, p).unwrap();
                    std::hint::black_box(row.unwrap());
                }
                t.elapsed()
            })
        });
        let stmt = if exact { &sql_exact } else { &sql_range };
        g.bench_function("sqlite_indexed", |b| b.iter_custom(|n| through_sql(&rt, &sqlite, stmt, exact, rows, n)));
        for (kind, k, e, r, _, _) in &servers {
            let stmt = if exact { e } else { r };
            g.bench_function(*kind, |b| b.iter_custom(|n| through_sql(&rt, k, stmt, exact, rows, n)));
        }
        g.finish();
    }
    let mut g = c.benchmark_group("distinct_range_ordered");
    g.throughput(Throughput::Elements(1));
    g.bench_function("sqlite_indexed", |b| b.iter_custom(|n| through_sql(&rt, &sqlite, &sql_ordered, false, rows, n)));
    for (kind, k, _, _, o, _) in &servers {
        g.bench_function(*kind, |b| b.iter_custom(|n| through_sql(&rt, k, o, false, rows, n)));
    }
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group! { name = distinct; config = config(); targets = benches }
criterion_main!(distinct);
