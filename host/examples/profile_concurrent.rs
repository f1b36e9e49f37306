//! Profiling aid: `c` tasks making one-record calls of the pure rule on a
//! two-worker runtime (`perf record`). Usage: profile_concurrent [C] [CALLS],
//! where C may list several concurrencies (`1,4,16,64`), run one after
//! another on the same rule, as the benches do; `OMLET_WORKERS=n` sets the
//! workers (0: a current-thread runtime), `OMLET_COALESCE=0` turns
//! coalescing off.
fn main() {
    let cs: Vec<usize> =
        std::env::args().nth(1).map(|s| s.split(',').filter_map(|c| c.parse().ok()).collect()).unwrap_or_else(|| vec![64]);
    let n: usize = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(2_000_000);
    let workers: usize = std::env::var("OMLET_WORKERS").ok().and_then(|s| s.parse().ok()).unwrap_or(2);
    let rt = if workers == 0 {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build().unwrap()
    };
    let config =
        omlet::EngineConfig { coalesce: std::env::var("OMLET_COALESCE").map_or(true, |v| v != "0"), ..Default::default() };
    let engine = omlet::Engine::with_config(&config).unwrap();
    let rule = rt.block_on(engine.load_source("p.oml", "name : p\n---\nV = read(id) ;\n", &Default::default())).unwrap();
    let recs: std::sync::Arc<Vec<omlet::Record>> = std::sync::Arc::new(
        (0..64).map(|i| omlet::Record::from_json(&format!("{{\"id\":{i},\"msg\":\"hello world\"}}")).unwrap()).collect(),
    );
    for c in cs {
        let before = rule.coalesced_records();
        let t = std::time::Instant::now();
        rt.block_on(async {
            let tasks: Vec<_> = (0..c)
                .map(|w| {
                    let (rule, recs) = (rule.clone(), recs.clone());
                    tokio::spawn(async move {
                        for i in 0..n / c {
                            std::hint::black_box(rule.evaluate(&recs[(w + i) % 64]).await.unwrap());
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        let d = t.elapsed();
        println!(
            "c={c}: {n} calls in {d:?}: {:.0} ns/call, {:.2} M/s, coalesced {}",
            d.as_nanos() as f64 / n as f64,
            n as f64 / d.as_secs_f64() / 1e6,
            rule.coalesced_records() - before
        );
    }
}
