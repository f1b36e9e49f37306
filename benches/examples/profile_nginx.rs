//! Profiling aid for the real rule (`perf record`): examples/nginx/nginx.oml
//! on the example's records, natively with the zone lookup answered from an
//! in-memory table (`native`), or in wasm, batches of 256 (`wasm`).
//! Usage: profile_nginx native|wasm [RECORDS]
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
    let t = Instant::now();
    if mode == "native" {
        let program =
            omlet::build::compile(&[omlet::build::RuleSource { file: "nginx.oml".into(), text }]).expect("the example compiles");
        let mut host = ZoneHost(Arc::new(Zones::example()));
        for i in 0..n {
            let fields = records[i % records.len()].clone().into_fields();
            std::hint::black_box(omlet_lang::evaluate(&program, 0, fields, &mut host).unwrap());
        }
    } else {
        let engine = omlet::Engine::new().unwrap();
        let rule = rt.block_on(engine.load_source("nginx.oml", &text, &omlet::LoadOptions::new().knowledge(knowledge))).unwrap();
        for i in 0..n / 256 {
            let chunk = &records[(i * 256) % records.len()..][..256];
            std::hint::black_box(rt.block_on(rule.evaluate_batch(chunk)).unwrap());
        }
    }
    let d = t.elapsed();
    println!("{mode}: {n} records in {d:?}: {:.2} µs/record", d.as_secs_f64() * 1e6 / n as f64);
}
