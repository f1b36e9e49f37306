//! The soak run of RELIABILITY.md: 64 callers evaluate records with a
//! lookup against a throwaway PostgreSQL for a while (default 10 minutes),
//! the knowledge is reloaded every 10 s, and the database is restarted once
//! half-way. Every second it records the process's RSS and the counts; at the
//! end it checks that records in equal records out (outputs plus errors).
//!
//! ```sh
//! cargo run --release -p omlet-benches --bin soak -- [SECONDS]   # default 600
//! ```
//!
//! Writes `target/soak/samples.csv` (second, rss_kib, records_in,
//! records_out, errors, absent) and `target/soak/summary.json`, which
//! `benches/reliability.py` turns into RELIABILITY.md. Exits non-zero when a
//! record is lost.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use omlet::knowledge::KnowledgeConfig;
use omlet::{Engine, Record};
use omlet_testdb::Postgres;

const CALLERS: usize = 64;
const BATCH: usize = 16;
const ROWS: i64 = 10_000;
const RULE: &str = "name : soak\n---\nzone = select value from perf where id = read(id) ;\nid = read(id) ;\nseq = read(seq) ;\n";

#[derive(Default)]
struct Counts {
    records_in: AtomicU64,
    records_out: AtomicU64,
    errors: AtomicU64,
    absent: AtomicU64,
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()))
        .unwrap_or(0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: u64 = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(600);
    let out_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/soak");
    std::fs::create_dir_all(&out_dir)?;

    let mut pg = Postgres::start();
    let admin = KnowledgeConfig::for_url(&pg.url()).open().await?;
    admin
        .provider()
        .execute(&format!(
            "create table perf (id bigint primary key, value text); insert into perf select i, 'z' || i from generate_series(1, {ROWS}) i;"
        ))
        .await?;
    let mut config = KnowledgeConfig::for_url(&pg.url());
    config.pool_size = 8;
    config.query_timeout_ms = 1000;
    config.connect_timeout_ms = 1000;
    let knowledge = config.open().await?;
    let rule = Engine::new()?.load_source("soak.oml", RULE, &omlet::LoadOptions::new().knowledge(knowledge.clone())).await?;

    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut callers = Vec::new();
    for c in 0..CALLERS {
        let (rule, counts, stop) = (rule.clone(), counts.clone(), stop.clone());
        callers.push(tokio::spawn(async move {
            let mut seq = c as u64;
            while !stop.load(Ordering::Relaxed) {
                let records: Vec<Record> = (0..BATCH)
                    .map(|_| {
                        seq = seq.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        let id = (seq >> 33) as i64 % (ROWS * 2) + 1; // half of them miss
                        omlet::record::from_json_str(&format!("{{\"id\":{id},\"seq\":{}}}", seq >> 40)).unwrap()
                    })
                    .collect();
                counts.records_in.fetch_add(BATCH as u64, Ordering::Relaxed);
                match rule.evaluate_batch(&records).await {
                    Ok(results) => {
                        for r in results {
                            counts.records_out.fetch_add(1, Ordering::Relaxed);
                            match r {
                                Ok(rec) if !rec.contains("zone") => {
                                    counts.absent.fetch_add(1, Ordering::Relaxed);
                                }
                                Ok(_) => {}
                                Err(_) => {
                                    counts.errors.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                    }
                    // The whole call failed: every record of it is an error, none is lost.
                    Err(_) => {
                        counts.records_out.fetch_add(BATCH as u64, Ordering::Relaxed);
                        counts.errors.fetch_add(BATCH as u64, Ordering::Relaxed);
                    }
                }
            }
        }));
    }

    let mut samples = std::fs::File::create(out_dir.join("samples.csv"))?;
    writeln!(samples, "second,rss_kib,records_in,records_out,errors,absent")?;
    let (mut reloads, mut restart_at, mut restart_took_ms) = (0u64, None, 0u128);
    let mut max_rss = 0;
    let first_rss = rss_kib();
    for second in 1..=seconds {
        tokio::time::sleep_until((started + Duration::from_secs(second)).into()).await;
        if second % 10 == 0 {
            knowledge.reload();
            reloads += 1;
        }
        if second == seconds / 2 {
            // One restart: stopped for 3 s, then back on the same port.
            let t = Instant::now();
            pg.stop();
            // Caches forget, so lookups meet the outage instead of cached answers.
            knowledge.reload();
            reloads += 1;
            tokio::time::sleep(Duration::from_secs(3)).await;
            pg.resume();
            restart_at = Some(second);
            restart_took_ms = t.elapsed().as_millis();
        }
        let rss = rss_kib();
        max_rss = max_rss.max(rss);
        writeln!(
            samples,
            "{second},{rss},{},{},{},{}",
            counts.records_in.load(Ordering::Relaxed),
            counts.records_out.load(Ordering::Relaxed),
            counts.errors.load(Ordering::Relaxed),
            counts.absent.load(Ordering::Relaxed)
        )?;
    }
    stop.store(true, Ordering::Relaxed);
    for c in callers {
        c.await?;
    }
    let (records_in, records_out) = (counts.records_in.load(Ordering::Relaxed), counts.records_out.load(Ordering::Relaxed));
    let stats = knowledge.stats().to_json();
    let summary = format!(
        "{{\"seconds\":{seconds},\"callers\":{CALLERS},\"batch\":{BATCH},\"records_in\":{records_in},\"records_out\":{records_out},\
         \"errors\":{},\"absent\":{},\"reloads\":{reloads},\"restart_at_second\":{},\"restart_took_ms\":{restart_took_ms},\
         \"rss_first_kib\":{first_rss},\"rss_last_kib\":{},\"rss_max_kib\":{max_rss},\"lookup_errors\":{},\"queries\":{}}}",
        counts.errors.load(Ordering::Relaxed),
        counts.absent.load(Ordering::Relaxed),
        restart_at.unwrap_or(0),
        rss_kib(),
        stats["errors"],
        stats["queries"],
    );
    std::fs::write(out_dir.join("summary.json"), &summary)?;
    println!("{summary}");
    if records_in != records_out {
        eprintln!("soak: {} records lost", records_in - records_out);
        std::process::exit(1);
    }
    Ok(())
}
