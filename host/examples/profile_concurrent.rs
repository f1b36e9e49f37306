//! Profiling aid: `c` tasks making one-record calls of the pure rule (or,
//! with `OMLET_RULE=lookup`, a lookup of a 128-key hot set in a 10,000-row
//! SQLite table, as the benches' lookup cells) on a two-worker runtime
//! (`perf record`). Usage: profile_concurrent [C] [CALLS],
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
    let lookup = std::env::var("OMLET_RULE").is_ok_and(|r| r == "lookup");
    let rule = rt
        .block_on(async {
            if lookup {
                use omlet::knowledge::Tables;
                let db = omlet::knowledge::sqlite::SqliteProvider::memory().await.unwrap();
                let rows: Vec<Vec<omlet_lang::Cell>> = (1..=10_000i64)
                    .map(|i| vec![omlet_lang::Cell::Integer(i), omlet_lang::Cell::Text(format!("value-{i}"))])
                    .collect();
                let (names, types) = (["id".into(), "value".into()], ["INTEGER PRIMARY KEY".into(), "TEXT".into()]);
                db.load_table("perf", &names, &types, &rows).await.unwrap();
                let k = std::sync::Arc::new(omlet::Knowledge::new(std::sync::Arc::new(db)));
                let text = "name : l\n---\nV = select value from perf where id = read(id) ;\n";
                engine.load_source("l.oml", text, &omlet::LoadOptions::new().knowledge(Some(k))).await
            } else {
                engine.load_source("p.oml", "name : p\n---\nV = read(id) ;\n", &Default::default()).await
            }
        })
        .unwrap();
    let recs: std::sync::Arc<Vec<omlet::Record>> = std::sync::Arc::new(
        (0..128).map(|i| omlet::Record::from_json(&format!("{{\"id\":{},\"msg\":\"hello world\"}}", i + 1)).unwrap()).collect(),
    );
    for c in cs {
        let before = rule.coalesced_records();
        let t = std::time::Instant::now();
        rt.block_on(async {
            let tasks: Vec<_> = (0..c)
                .map(|w| {
                    let (rule, recs) = (rule.clone(), recs.clone());
                    tokio::spawn(async move {
                        let lat_on = std::env::var_os("OMLET_LAT").is_some();
                        let mut lat: Vec<u32> = Vec::with_capacity(if lat_on { n / c } else { 0 });
                        let mut prev = std::time::Instant::now();
                        for i in 0..n / c {
                            std::hint::black_box(rule.evaluate(&recs[(w * 7 + i) % 128]).await.unwrap());
                            if lat_on {
                                let now = std::time::Instant::now();
                                lat.push((now - prev).as_nanos() as u32);
                                prev = now;
                            }
                        }
                        std::hint::black_box(lat);
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
