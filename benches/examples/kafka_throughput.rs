//! Records per second through Kafka with 1, 2 and 3 `omlet run` workers,
//! beside the broker's own producer and consumer perf tools on the same
//! broker (the physical limit of the machine). Prints one JSON line per
//! measurement; BENCHMARKS.md quotes them.
//!
//! ```sh
//! cargo build --release -p omlet-cli
//! cargo run --release -p omlet-benches --example kafka_throughput [RECORDS]
//! ```
//!
//! It starts its own broker (like the tests), fills a 6-partition topic with
//! RECORDS (default 200 000) nginx records, the benches' own
//! (`omlet_benches::nginx_jsonl`: 4096 client addresses), and runs examples/nginx/nginx.oml with its
//! knowdb (in-memory SQLite per worker). The rate of a run is taken from the
//! workers' own counters (`--metrics`), between 10% and 90% of the records
//! written, so that start-up and group joining are left out; the broker
//! holds the group's first assignment for 3 s, so that the workers that
//! start together join it at once and no rebalance falls inside the
//! measurement.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use omlet_testdb::Kafka;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let bin = std::env::var("OMLET_BIN").unwrap_or_else(|_| root.join("target/release/omlet").display().to_string());
    // The group's first assignment waits 3 s for the workers that start together, so that
    // no rebalance falls inside the measurement.
    let kafka = Kafka::start_with("group.initial.rebalance.delay.ms=3000");
    let b = kafka.brokers();
    kafka.create_topic("access", 6);
    let file = root.join("target/kafka-bench-nginx.jsonl");
    omlet_benches::nginx_jsonl(&file, n as usize).unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &b)
        .set("linger.ms", "20")
        .set("queue.buffering.max.messages", "2000000")
        .create()
        .unwrap();
    for (i, value) in text.lines().enumerate() {
        let key = i.to_string();
        let mut rec = BaseRecord::to("access").key(&key).payload(value);
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((_, r)) => {
                    rec = r;
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }
    }
    p.flush(Duration::from_secs(60)).unwrap();

    // The broker's own tools: what this machine moves without omlet.
    kafka.create_topic("perf", 6);
    let out = kafka
        .tool("org.apache.kafka.tools.ProducerPerformance")
        .args(["--topic", "perf", "--num-records", &n.to_string(), "--record-size", "300", "--throughput", "-1"])
        .arg("--producer-props")
        .arg(format!("bootstrap.servers={b}"))
        .arg("acks=all")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().rev().find(|l| l.contains("records/sec")).unwrap_or("").to_string();
    println!("{}", serde_json::json!({"tool": "kafka-producer-perf-test", "records": n, "summary": line}));
    // "N records sent, R records/sec (…)"
    let producer_rps: f64 = line.split(", ").nth(1).and_then(|x| x.split(' ').next()).and_then(|x| x.parse().ok()).unwrap_or(0.0);
    let out = kafka
        .tool("org.apache.kafka.tools.ConsumerPerformance")
        .args(["--bootstrap-server", &b, "--topic", "perf", "--messages", &n.to_string(), "--timeout", "60000"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    println!("{}", serde_json::json!({"tool": "kafka-consumer-perf-test", "records": n, "summary": text}));
    // A CSV header and one line: nMsg.sec is over the whole run (group join included),
    // fetch.nMsg.sec over the fetching only.
    let csv: Vec<Vec<&str>> = text.lines().map(|l| l.split(", ").collect()).collect();
    let column = |name: &str| -> f64 {
        let i = csv.first().and_then(|h| h.iter().position(|c| *c == name));
        i.and_then(|i| csv.get(1)?.get(i)?.trim().parse().ok()).unwrap_or(0.0)
    };
    let (consumer_rps, consumer_fetch_rps) = (column("nMsg.sec"), column("fetch.nMsg.sec"));
    let mut runs = Vec::new();

    for workers in 1..=3 {
        let topic = format!("out{workers}");
        kafka.create_topic(&topic, 6);
        let ports: Vec<u16> =
            (0..workers).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()).collect();
        let mut children: Vec<Child> = ports
            .iter()
            .map(|port| {
                Command::new(&bin)
                    .current_dir(&root)
                    .args(["run", "examples/nginx/nginx.oml", "--knowdb", "examples/nginx/knowdb/knowdb.toml", "-q"])
                    .arg("--from")
                    .arg(format!("kafka://{b}/access?group=bench{workers}"))
                    .arg("--to")
                    .arg(format!("kafka://{b}/{topic}"))
                    .arg("--metrics")
                    .arg(format!("127.0.0.1:{port}"))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        let (mut t10, mut t90) = (None, None);
        let deadline = Instant::now() + Duration::from_secs(600);
        while t90.is_none() && Instant::now() < deadline {
            let written: u64 = ports.iter().map(|&p| written(p)).sum();
            if t10.is_none() && written >= n / 10 {
                t10 = Some((Instant::now(), written));
            }
            if written >= n * 9 / 10 {
                t90 = Some((Instant::now(), written));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for c in &mut children {
            let _ = Command::new("kill").arg(c.id().to_string()).status();
            let _ = c.wait();
        }
        let ((a, wa), (z, wz)) = (t10.expect("10% written"), t90.expect("90% written"));
        let rate = (wz - wa) as f64 / (z - a).as_secs_f64();
        println!("{}", serde_json::json!({"omlet_workers": workers, "records": n, "records_per_second": rate.round()}));
        runs.push(serde_json::json!({"workers": workers, "records_per_second": rate.round()}));
    }
    let git = |args: &[&str]| {
        Command::new("git").args(args).current_dir(&root).output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let result = serde_json::json!({
        "commit": git(&["rev-parse", "--short", "HEAD"]).ok(),
        "measured_at": Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]).output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()),
        "records": n,
        "record_bytes_perf_tools": 300,
        "producer_perf_rps": producer_rps,
        "consumer_perf_rps": consumer_rps,
        "consumer_perf_fetch_rps": consumer_fetch_rps,
        "omlet": runs,
    });
    let path = root.join("benches/results/kafka.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, serde_json::to_string_pretty(&result).unwrap() + "\n").unwrap();
    eprintln!("wrote {}", path.display());
}

/// `omlet_records_written_total` of the worker whose metrics are on `port` (0 until it answers).
fn written(port: u16) -> u64 {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return 0 };
    let _ = s.write_all(b"GET / HTTP/1.1\r\n\r\n");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text.lines().find_map(|l| l.strip_prefix("omlet_records_written_total ")?.trim().parse().ok()).unwrap_or(0)
}
