//! Shared set-up for the benches: data sizes, generated records and
//! knowledge, and the rules of the matrix (issue 5).
//!
//! Sizes come from the environment, with the defaults of the reference
//! measurements: `OMLET_BENCH_ROWS` (10000), `OMLET_BENCH_HOT` (128),
//! `OMLET_BENCH_OPS` (20000). `OMLET_BENCH_QUICK=1` shortens every bench.

use std::sync::Arc;

use omlet::knowledge::Provider;
use omlet::knowledge::sqlite::SqliteProvider;
use omlet::{Knowledge, Record};
use omlet_lang::Cell;

pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

pub fn quick() -> bool {
    std::env::var("OMLET_BENCH_QUICK").is_ok_and(|v| v != "0" && !v.is_empty())
}

pub struct Sizes {
    pub rows: usize,
    pub hot: usize,
    pub ops: usize,
}

impl Sizes {
    pub fn from_env() -> Sizes {
        Sizes {
            rows: env_usize("OMLET_BENCH_ROWS", 10_000),
            hot: env_usize("OMLET_BENCH_HOT", 128),
            ops: env_usize("OMLET_BENCH_OPS", 20_000),
        }
    }
}

pub const PURE_RULE: &str = "name : bench/pure\n---\nV = read(id) ;\n";
pub const LOOKUP_RULE: &str = "name : bench/lookup\n---\nV = select value from perf where id = read(id) ;\n";

/// `{"id": k}` records, keys drawn from the hot set with a fixed LCG.
pub fn id_records(sizes: &Sizes) -> Vec<Record> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..sizes.ops)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let id = (x >> 33) as usize % sizes.hot.max(1) + 1;
            omlet::record::from_json_str(&format!("{{\"id\":{id}}}")).unwrap()
        })
        .collect()
}

/// The `perf(id, value)` table with `rows` rows, in in-memory SQLite.
pub async fn perf_knowledge(rows: usize) -> Arc<Knowledge> {
    let db = SqliteProvider::memory().await.unwrap();
    let data: Vec<Vec<Cell>> =
        (1..=rows as i64).map(|i| vec![Cell::Integer(i), Cell::Text(format!("value-{i}"))]).collect();
    db.load_table("perf", &["id".into(), "value".into()], &["INTEGER PRIMARY KEY".into(), "TEXT".into()], &data)
        .await
        .unwrap();
    Arc::new(Knowledge::new(Arc::new(db)))
}

/// The nginx example: its rule, knowledge and records (cycled to `ops`).
pub async fn nginx(sizes: &Sizes) -> (String, Arc<Knowledge>, Vec<Record>) {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/nginx");
    let rule = std::fs::read_to_string(format!("{root}/nginx.oml")).unwrap();
    let db = SqliteProvider::memory().await.unwrap();
    omlet::knowledge::knowdb::load(format!("{root}/knowdb/knowdb.toml").as_ref(), &db).await.unwrap();
    let lines = std::fs::read_to_string(format!("{root}/access.jsonl")).unwrap();
    let base: Vec<Record> = lines.lines().map(|l| omlet::record::from_json_str(l).unwrap()).collect();
    let records = base.iter().cycle().take(sizes.ops).cloned().collect();
    (rule, Arc::new(Knowledge::new(Arc::new(db))), records)
}
