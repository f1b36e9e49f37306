//! Profiling aid: one-record calls of the pure rule from `THREADS` plain
//! threads (`evaluate_blocking`), for `perf record`.
//! Usage: profile_single [CALLS] [THREADS]; `OMLET_COALESCE=0` turns coalescing off,
//! `OMLET_EMPTY=1` calls with empty records, `OMLET_CORE=0` keeps one-record
//! calls off the core path, `OMLET_PERFMAP=1` names the guest's functions for perf.
fn main() {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2_000_000);
    let threads: usize = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    let config = omlet::EngineConfig {
        coalesce: std::env::var("OMLET_COALESCE").map_or(true, |v| v != "0"),
        core_path: std::env::var("OMLET_CORE").map_or(true, |v| v != "0"),
        perf_map: std::env::var("OMLET_PERFMAP").is_ok_and(|v| v == "1"),
        ..Default::default()
    };
    let engine = omlet::Engine::with_config(&config).unwrap();
    let rule = omlet::block_on(engine.load_source("p.oml", "name : p\n---\nV = read(id) ;\n", &Default::default())).unwrap();
    rule.wait_core_path();
    let recs: Vec<omlet::Record> =
        (0..64).map(|i| omlet::Record::from_json(&format!("{{\"id\":{i},\"msg\":\"hello world\"}}")).unwrap()).collect();
    // `OMLET_EMPTY=1`: empty records, the shape of `baseline/empty_guest_call`.
    let recs = if std::env::var("OMLET_EMPTY").is_ok_and(|v| v == "1") { vec![omlet::Record::new(); 64] } else { recs };
    let t = std::time::Instant::now();
    std::thread::scope(|s| {
        for w in 0..threads {
            let (rule, recs) = (&rule, &recs);
            s.spawn(move || {
                for i in 0..n / threads {
                    std::hint::black_box(rule.evaluate_blocking(&recs[(w + i) % 64]).unwrap());
                }
            });
        }
    });
    let d = t.elapsed();
    println!(
        "{threads} threads: {n} calls in {d:?}: {:.2} M/s, coalesced {}",
        n as f64 / d.as_secs_f64() / 1e6,
        rule.coalesced_records()
    );
}
