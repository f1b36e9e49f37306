//! How long a rule takes to load: `Engine::load_component`
//! of the nginx rule's component, compiled by Cranelift (`start/compiled`,
//! the code cache off) and read back from the code cache
//! (`start/cached`); and `Engine::load_sources` of its source, read back from
//! the code cache (`start/cached_sources`: what `omlet run nginx.oml` does,
//! the rule compiled to its program and the entry found by it, without
//! building the component). All include instantiating the guest and reading
//! its rule info, as every load does. `cargo bench -p omlet-benches --bench start`.
//!
//! `benches/start_e2e.py` measures the same from outside: the release
//! CLI's wall time, to a first record and over 200,000 records.

use criterion::{Criterion, criterion_group, criterion_main};
use omlet::{Engine, EngineConfig, LoadOptions};

fn start(c: &mut Criterion) {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/nginx"));
    let source = omlet::RuleSource::read(&root.join("nginx.oml")).unwrap();
    let component = omlet::build::build_component_with(std::slice::from_ref(&source), &Default::default()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let dir = std::env::temp_dir().join(format!("omlet-bench-start-{}", std::process::id()));
    let mut g = c.benchmark_group("start");
    g.sample_size(10);
    for (cell, cache) in [("compiled", None), ("cached", Some(dir.clone()))] {
        let engine = Engine::with_config(&EngineConfig { code_cache: cache, ..Default::default() }).unwrap();
        // The first load fills the cache; the cached cell reads it back.
        rt.block_on(engine.load_component(&component, &LoadOptions::new())).unwrap();
        g.bench_function(cell, |b| {
            b.iter(|| rt.block_on(engine.load_component(&component, &LoadOptions::new())).unwrap());
        });
    }
    let engine = Engine::with_config(&EngineConfig { code_cache: Some(dir.clone()), ..Default::default() }).unwrap();
    let sources = [source];
    rt.block_on(engine.load_sources(&sources, &LoadOptions::new())).unwrap();
    g.bench_function("cached_sources", |b| {
        b.iter(|| rt.block_on(engine.load_sources(&sources, &LoadOptions::new())).unwrap());
    });
    g.finish();
    let _ = std::fs::remove_dir_all(dir);
}

criterion_group!(benches, start);
criterion_main!(benches);
