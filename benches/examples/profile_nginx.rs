//! Profiling aid for the real rule (`perf record`): examples/nginx/nginx.oml
//! on the example's records, natively with the zone lookup answered from an
//! in-memory table (`native`), or in wasm, batches of 256 (`wasm`).
//! Usage: profile_nginx native|wasm [RECORDS] [RUNS]
//!
//! It is also the A/B tool for a change to the guest: the rule is loaded
//! before the clock starts, each of RUNS passes over RECORDS records is timed
//! on its own, and the fastest and the median pass are printed. One thread,
//! no input to read or output to write: steadier than `omlet run` end to
//! end, whose CPU time swings by 10 % run to run on a 2-core VM. Alternate
//! the two builds a few times: the VM itself drifts by several percent over
//! minutes, so that only a difference seen in every pair counts. The guest
//! under test comes from `OMLET_GUEST` (the benches build with the
//! `test-guest` feature):
//!
//!     OMLET_GUEST=/tmp/new.wasm cargo run --release -p omlet-benches --example profile_nginx wasm 51200 9
//!
//! With `OMLET_PERFMAP=1` the engine writes a perf map, so that `perf report`
//! names the guest's functions. `OMLET_PROFILE_RULE=path.oml` evaluates
//! that rule instead of the example's, over the same records.
use std::sync::Arc;
use std::time::Instant;

use omlet_benches::peers::Zones;
use omlet_lang::eval::{Cell, Host, QueryError};

/// Answers the rule's one lookup (`lo_int <= ip and hi_int >= ip`) from the zone table.
struct ZoneHost(Arc<Zones>);

impl Host for ZoneHost {
    fn query(&mut self, _: u32, params: &[Cell]) -> Result<Option<Vec<Cell>>, QueryError> {
        let ip = match params.first() {
            Some(Cell::Integer(i)) => *i as u32,
            _ => return Ok(None),
        };
        Ok(self.0.find(ip).map(|(z, o)| vec![Cell::Text(z.into()), Cell::Text(o.into())]))
    }
    fn columns(&mut self, _: u32) -> Result<Vec<String>, QueryError> {
        Ok(vec!["zone".into(), "owner".into()])
    }
    fn now(&mut self) -> (i64, i32) {
        (0, 0)
    }
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "native".into());
    let n: usize = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let sizes = omlet_benches::Sizes { rows: 0, hot: 0, ops: 1024 };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (text, knowledge, records) = rt.block_on(omlet_benches::nginx(&sizes));
    // Another rule over the same records and knowledge, to profile one kind
    // of statement (say forty of them) in place of the example's.
    let text = match std::env::var_os("OMLET_PROFILE_RULE") {
        Some(path) => std::fs::read_to_string(&path).expect("OMLET_PROFILE_RULE names a readable rule"),
        None => text,
    };
    let runs: usize = std::env::args().nth(3).and_then(|s| s.parse().ok()).unwrap_or(1).max(1);
    let mut passes: Vec<f64> = Vec::with_capacity(runs);
    if mode == "native" {
        let program =
            omlet::build::compile(&[omlet::build::RuleSource { file: "nginx.oml".into(), text }]).expect("the example compiles");
        let mut host = ZoneHost(Arc::new(Zones::example()));
        for _ in 0..runs {
            let t = Instant::now();
            for i in 0..n {
                let fields = Vec::from(records[i % records.len()].clone());
                std::hint::black_box(omlet_lang::evaluate(&program, 0, fields, &mut host).unwrap());
            }
            passes.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
        }
    } else {
        // OMLET_PERFMAP=1: the guest's functions named for `perf report`
        // (build the guest with CARGO_PROFILE_WASM_STRIP=false to keep names).
        let perf_map = std::env::var_os("OMLET_PERFMAP").is_some();
        // OMLET_CODE_CACHE=dir: the compiled guest kept there (whose ELF
        // objdump can disassemble, for the samples perf took in it).
        let code_cache = std::env::var_os("OMLET_CODE_CACHE").map(std::path::PathBuf::from);
        let engine = omlet::Engine::with_config(&omlet::EngineConfig { perf_map, code_cache, ..Default::default() }).unwrap();
        let rule = rt.block_on(engine.load_source("nginx.oml", &text, &omlet::LoadOptions::new().knowledge(knowledge))).unwrap();
        for _ in 0..runs {
            let t = Instant::now();
            for i in 0..n / 256 {
                let chunk = &records[(i * 256) % records.len()..][..256];
                std::hint::black_box(rt.block_on(rule.evaluate_batch(chunk)).unwrap());
            }
            passes.push(t.elapsed().as_secs_f64() * 1e6 / (n / 256 * 256).max(1) as f64);
        }
    }
    let shown: Vec<String> = passes.iter().map(|p| format!("{p:.3}")).collect();
    passes.sort_by(f64::total_cmp);
    println!(
        "{mode}: {n} records, {runs} passes: fastest {:.3} µs/record, median {:.3} (every pass: {})",
        passes[0],
        passes[passes.len() / 2],
        shown.join(", ")
    );
}
