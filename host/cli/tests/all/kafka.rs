//! `omlet run` as workers of a Kafka consumer group, on a real
//! broker (KRaft, Maven Central's jars) and a real PostgreSQL, both started
//! here on loopback and stopped afterwards. One broker serves the four
//! scenarios, which run one after the other in one test (each on its own
//! topics and group):
//! 1. a clean run: 100 000 records, 6 partitions, 3 workers: every id out
//!    once, order kept within each partition;
//! 2. a worker killed with SIGKILL mid-run: nothing missing, duplicates
//!    bounded by the in-flight limits;
//! 3. the database stopped mid-run: `absent` and `fail` act as on files, and
//!    every record still ends in the output or the errors topic; the
//!    database stalled: the worker pauses and resumes, and partitions that
//!    left it while paused are read again when they come back;
//! 4. a knowledge row updated in PostgreSQL: every worker reloads (NOTIFY)
//!    and emits the new value within a second;
//! 5. records routed by a message header, and messages that are no record
//!    (not JSON, not UTF-8, no value, no routing header): one error line
//!    each, naming its partition and offset.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use omlet_testdb::{Kafka, Postgres};
use rdkafka::Message;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

const IDS_RULE: &str = "name : kafka_ids\n---\nid = read(id) ;\nseen = chars(yes) ;\n";
const LOOKUP_RULE: &str = "name : kafka_lookup\n---\nid = read(id) ;\nv = select v from kv where k = read(k) ;\n";

/// One `omlet run` worker process.
struct Worker {
    child: Child,
    log: PathBuf,
}

impl Worker {
    fn start(dir: &Path, name: &str, args: &[String]) -> Worker {
        let log = dir.join(format!("{name}.stderr"));
        let child = Command::new(env!("CARGO_BIN_EXE_omlet"))
            .arg("run")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Worker { child, log }
    }

    fn signal(&self, sig: &str) {
        Command::new("kill").arg(format!("-{sig}")).arg(self.child.id().to_string()).status().unwrap();
    }

    /// SIGTERM, then its exit status and summary (`--stats=json`'s last line).
    fn stop(mut self) -> (ExitStatus, serde_json::Value, String) {
        self.signal("TERM");
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "a worker did not stop within 60 s of SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        };
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let summary = log.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap_or(serde_json::Value::Null);
        (status, summary, log)
    }

    fn kill(mut self) {
        self.signal("KILL");
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn producer(brokers: &str) -> ThreadedProducer<DefaultProducerContext> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "5")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .unwrap()
}

/// Sends `{"id":i,"k":i mod 10}` for every i in `ids`, keyed by i (so spread over partitions).
fn produce(brokers: &str, topic: &str, ids: std::ops::Range<u64>) {
    let p = producer(brokers);
    for i in ids {
        let (key, value) = (i.to_string(), format!(r#"{{"id":{i},"k":{}}}"#, i % 10));
        let mut rec = BaseRecord::to(topic).key(&key).payload(&value);
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((_, r)) => {
                    rec = r;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
    p.flush(Duration::from_secs(30)).unwrap();
}

/// One message of an output topic.
struct Out {
    partition: i32,
    value: serde_json::Value,
    /// The `omlet-source` header: (input partition, input offset).
    source: Option<(i32, i64)>,
}

/// Every message of `topic` up to its current end.
fn read_topic(brokers: &str, topic: &str) -> Vec<Out> {
    let c: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", brokers).set("group.id", "omlet-test-reader").create().unwrap();
    let md = c.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
    let parts: Vec<i32> = md.topics()[0].partitions().iter().map(|p| p.id()).collect();
    let mut tpl = TopicPartitionList::new();
    let mut ends = HashMap::new();
    for &p in &parts {
        let (low, high) = c.fetch_watermarks(topic, p, Duration::from_secs(10)).unwrap();
        if high > low {
            ends.insert(p, high);
            tpl.add_partition_offset(topic, p, Offset::Offset(low)).unwrap();
        }
    }
    let mut out = Vec::new();
    if ends.is_empty() {
        return out;
    }
    c.assign(&tpl).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ends.is_empty() && Instant::now() < deadline {
        let Some(Ok(m)) = c.poll(Duration::from_millis(200)) else { continue };
        if ends.get(&m.partition()).is_some_and(|&h| m.offset() + 1 >= h) {
            ends.remove(&m.partition());
        }
        let source = m.headers().and_then(|h| {
            let v = h.iter().find(|x| x.key == "omlet-source")?.value?;
            let text = String::from_utf8_lossy(v).into_owned();
            let mut it = text.rsplitn(3, '/');
            let off = it.next()?.parse().ok()?;
            let part = it.next()?.parse().ok()?;
            Some((part, off))
        });
        let value = serde_json::from_slice(m.payload().unwrap_or_default()).unwrap_or(serde_json::Value::Null);
        out.push(Out { partition: m.partition(), value, source });
    }
    assert!(ends.is_empty(), "could not read {topic} to its end within 60 s");
    out
}

fn ids(outs: &[Out]) -> Vec<u64> {
    outs.iter().filter_map(|o| o.value["id"].as_u64()).collect()
}

/// The ids of error lines (their `input` is the record as read).
fn error_ids(outs: &[Out]) -> Vec<u64> {
    outs.iter()
        .filter_map(|o| serde_json::from_str::<serde_json::Value>(o.value["input"].as_str()?).ok()?["id"].as_u64())
        .collect()
}

/// Waits until `ok` holds, asking every 200 ms; fails with `what` after `within`.
fn wait_until(within: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until `topics` together hold `n` distinct ids.
fn wait_for_ids(brokers: &str, topics: &[&str], n: usize, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let mut seen = HashSet::new();
        for t in topics {
            let outs = read_topic(brokers, t);
            seen.extend(ids(&outs));
            seen.extend(error_ids(&outs));
        }
        if seen.len() >= n {
            return;
        }
        assert!(Instant::now() < deadline, "{topics:?}: {} of {n} ids after {within:?}", seen.len());
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn url(k: &Kafka, topic: &str, group: Option<&str>) -> String {
    match group {
        // Fast failover: a dead worker's partitions move after 6 s, not 45.
        Some(g) => format!("kafka://{}/{topic}?group={g}&session.timeout.ms=6000&heartbeat.interval.ms=1000", k.brokers()),
        None => format!("kafka://{}/{topic}", k.brokers()),
    }
}

/// A worker's arguments: `rule` from topic `input` (in `group`) to `output`
/// and `errors`, then `rest`.
fn args(k: &Kafka, rule: &Path, [input, group, output, errors]: [&str; 4], rest: &[&str]) -> Vec<String> {
    let (from, to, errors) = (url(k, input, Some(group)), url(k, output, None), url(k, errors, None));
    let mut a = vec![rule.display().to_string(), "--from".into(), from, "--to".into(), to, "--errors".into(), errors];
    a.extend(["--stats=json".to_string(), "-q".to_string()]);
    a.extend(rest.iter().map(|s| s.to_string()));
    a
}

fn topics(k: &Kafka, names: &[&str]) {
    for n in names {
        k.create_topic(n, 6);
    }
}

#[test]
fn workers_in_a_consumer_group() {
    let dir = tempfile::tempdir().unwrap();
    let kafka = Kafka::start();
    let b = kafka.brokers();
    let ids_rule = dir.path().join("ids.oml");
    std::fs::write(&ids_rule, IDS_RULE).unwrap();

    // 1. A clean run: the workers join first, then the records arrive; one
    // worker is stopped with SIGTERM in the middle and hands its partitions
    // over without a duplicate.
    topics(&kafka, &["in1", "out1", "err1"]);
    let ports = free_ports(3);
    let workers: Vec<Worker> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let metrics = format!("127.0.0.1:{port}");
            let a = args(&kafka, &ids_rule, ["in1", "g1", "out1", "err1"], &["--no-knowledge", "--metrics", &metrics]);
            Worker::start(dir.path(), &format!("w1-{i}"), &a)
        })
        .collect();
    // Each worker holds two of the six partitions before any record is written.
    wait_until(Duration::from_secs(90), "the group did not settle on 2 partitions per worker", || {
        ports.iter().all(|&p| try_metric(p, "omlet_assigned_partitions").as_deref() == Some("2"))
    });
    produce(&b, "in1", 0..100_000);
    let mut workers = workers.into_iter();
    wait_for_ids(&b, &["out1"], 30_000, Duration::from_secs(120));
    let (status, summary, log) = workers.next().unwrap().stop();
    assert!(status.success(), "SIGTERM mid-run: {status}\n{log}");
    let mut total_in = summary["records"].as_u64().unwrap();
    wait_for_ids(&b, &["out1"], 100_000, Duration::from_secs(240));
    for w in workers {
        let (status, summary, log) = w.stop();
        assert!(status.success(), "a worker did not exit 0 after SIGTERM: {status}\n{log}");
        total_in += summary["records"].as_u64().unwrap();
        assert_eq!(summary["duplicates"], 0, "{log}");
    }
    let out = read_topic(&b, "out1");
    let got = ids(&out);
    assert_eq!(got.iter().copied().collect::<HashSet<_>>(), (0..100_000).collect::<HashSet<_>>(), "an id is missing");
    assert_eq!(got.len(), 100_000, "duplicates in a clean run");
    assert_eq!(total_in, 100_000);
    assert!(read_topic(&b, "err1").is_empty());
    // Order within a partition: the outputs of each input partition come in input order.
    let mut last: BTreeMap<i32, i64> = BTreeMap::new();
    for o in &out {
        let (p, off) = o.source.expect("every output names its source");
        assert_eq!(o.partition, p, "input partition {p} went to output partition {}", o.partition);
        assert!(last.insert(p, off).is_none_or(|prev| prev < off), "partition {p}: offset {off} after a later one");
    }

    // 2. A worker killed mid-run.
    topics(&kafka, &["in2", "out2", "err2"]);
    let a = args(
        &kafka,
        &ids_rule,
        ["in2", "g2", "out2", "err2"],
        &[
            "--no-knowledge",
            "--max-in-flight",
            "2000",
            "--batch",
            "64",
            // Commits every 2 s (or at 1000 records waiting): a kill leaves records uncommitted.
            "--commit-interval-ms",
            "2000",
        ],
    );
    let mut workers: Vec<Worker> = (0..3).map(|i| Worker::start(dir.path(), &format!("w2-{i}"), &a)).collect();
    // The records arrive over about ten seconds, so that the kill falls in the middle of the stream.
    let feeder = {
        let b = b.clone();
        std::thread::spawn(move || {
            for start in (0..60_000).step_by(600) {
                produce(&b, "in2", start..start + 600);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    wait_for_ids(&b, &["out2"], 15_000, Duration::from_secs(120));
    workers.remove(0).kill();
    feeder.join().unwrap();
    wait_for_ids(&b, &["out2"], 60_000, Duration::from_secs(180));
    let mut reported = 0;
    for w in workers {
        let (status, summary, log) = w.stop();
        assert!(status.success(), "{status}\n{log}");
        reported += summary["duplicates"].as_u64().unwrap();
    }
    let got = ids(&read_topic(&b, "out2"));
    let distinct: HashSet<u64> = got.iter().copied().collect();
    assert_eq!(distinct, (0..60_000).collect::<HashSet<_>>(), "an id is missing after a SIGKILL");
    let duplicates = got.len() - distinct.len();
    eprintln!("kill test: {duplicates} duplicates in the output, {reported} reported by the surviving workers");
    // The killed worker's uncommitted records are at most --max-in-flight;
    // with cooperative rebalancing the survivors keep theirs in flight.
    assert!(duplicates <= 2000, "{duplicates} duplicates, more than the in-flight limit allows");
    // The survivors find exactly those in the output when they take the partitions over.
    assert_eq!(reported as usize, duplicates, "duplicates reported by the workers against those in the output");

    // 3. The database stops mid-run.
    let mut pg = Postgres::start();
    pg.psql("create table kv (k integer primary key, v text); insert into kv select g, 'old' from generate_series(0, 9) g;");
    let lookup_rule = dir.path().join("lookup.oml");
    std::fs::write(&lookup_rule, LOOKUP_RULE).unwrap();
    let pg_url = pg.url();
    let config = |name: &str, policy: &str, extra: &str| {
        let p = dir.path().join(name);
        std::fs::write(
            &p,
            format!(
                "url = \"{}\"\non_lookup_error = \"{policy}\"\nquery_timeout_ms = 500\nconnect_timeout_ms = 500\n\
                 tables = [\"kv\"]\n{extra}",
                pg_url
            ),
        )
        .unwrap();
        p.display().to_string()
    };
    // Bypass: every lookup reaches the database, so that its outage shows.
    let absent = config("absent.toml", "absent", "[cache]\nmode = \"bypass\"\n");
    let fail = config("fail.toml", "fail", "[cache]\nmode = \"bypass\"\n");
    topics(&kafka, &["in3", "out3a", "err3a", "out3b", "err3b"]);
    produce(&b, "in3", 0..5_000);
    let wa = Worker::start(
        dir.path(),
        "w3-absent",
        &args(&kafka, &lookup_rule, ["in3", "g3a", "out3a", "err3a"], &["--knowledge", &absent]),
    );
    let wf = Worker::start(
        dir.path(),
        "w3-fail",
        &args(&kafka, &lookup_rule, ["in3", "g3b", "out3b", "err3b"], &["--knowledge", &fail]),
    );
    wait_for_ids(&b, &["out3a"], 5_000, Duration::from_secs(120));
    wait_for_ids(&b, &["out3b", "err3b"], 5_000, Duration::from_secs(120));
    pg.stop();
    produce(&b, "in3", 5_000..10_000);
    wait_for_ids(&b, &["out3a"], 10_000, Duration::from_secs(120));
    wait_for_ids(&b, &["out3b", "err3b"], 10_000, Duration::from_secs(120));
    pg.resume();
    produce(&b, "in3", 10_000..15_000);
    wait_for_ids(&b, &["out3a"], 15_000, Duration::from_secs(120));
    wait_for_ids(&b, &["out3b", "err3b"], 15_000, Duration::from_secs(120));
    for w in [wa, wf] {
        let (status, _, log) = w.stop();
        assert!(status.success(), "{status}\n{log}");
    }
    let out_a = read_topic(&b, "out3a");
    let without_v = out_a.iter().filter(|o| o.value.get("v").is_none()).count();
    assert_eq!(ids(&out_a).len(), 15_000);
    assert!(read_topic(&b, "err3a").is_empty(), "absent: no record fails");
    assert!((5_000..=10_000).contains(&without_v), "absent: {without_v} records without v (the outage's 5000 expected)");
    let (out_b, err_b) = (read_topic(&b, "out3b"), read_topic(&b, "err3b"));
    let mut all: Vec<u64> = ids(&out_b);
    all.extend(error_ids(&err_b));
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 15_000, "fail: every record is in the output or the errors topic");
    assert!((5_000..=10_000).contains(&err_b.len()), "fail: {} error lines", err_b.len());
    assert!(err_b.iter().all(|e| e.value["error"].as_str().unwrap_or("").contains("lookup failed")));
    assert!(out_b.iter().all(|o| o.value["v"] == "old"), "fail: an output without its lookup");

    // 3b. A stalled database: lookups wait on a lock. The worker, out
    // of room, pauses its partitions and polls on, then resumes: nothing is
    // lost or repeated.
    let slow = dir.path().join("slow.toml");
    std::fs::write(
        &slow,
        format!("url = \"{pg_url}\"\nquery_timeout_ms = 20000\ntables = [\"kv\"]\n[cache]\nmode = \"bypass\"\n"),
    )
    .unwrap();
    topics(&kafka, &["in3c", "out3c", "err3c"]);
    let port = free_ports(1)[0];
    // A worker whose lookups reach the database every time, one small batch at a time.
    let slow_worker = |name: &str, topics: [&str; 4], port: u16| {
        let (knowledge, metrics) = (slow.display().to_string(), format!("127.0.0.1:{port}"));
        let rest = ["--knowledge", &knowledge, "--metrics", &metrics, "--batch", "16", "--concurrency", "1"];
        Worker::start(dir.path(), name, &args(&kafka, &lookup_rule, topics, &rest))
    };
    let w = slow_worker("w3-slow", ["in3c", "g3c", "out3c", "err3c"], port);
    produce(&b, "in3c", 0..1_000);
    wait_for_ids(&b, &["out3c"], 1_000, Duration::from_secs(120));
    // The lock is held from before the records are produced until the
    // worker has paused (a psql started on a thread 500 ms ahead of them
    // could, on a loaded machine, take the lock after they were done).
    let mut lock = pg.session();
    lock.run("begin; lock table kv in access exclusive mode;");
    produce(&b, "in3c", 1_000..2_000);
    wait_until(Duration::from_secs(60), "the worker did not pause while its lookups waited", || {
        try_metric(port, "omlet_pauses_total").is_some_and(|p| p != "0")
    });
    lock.run("commit;");
    drop(lock);
    wait_for_ids(&b, &["out3c"], 2_000, Duration::from_secs(120));
    let pauses: u64 = metric(port, "omlet_pauses_total").parse().unwrap();
    let (status, _, log) = w.stop();
    assert!(status.success(), "{status}\n{log}");
    let out = read_topic(&b, "out3c");
    assert_eq!(ids(&out).len(), 2_000, "a record was repeated");
    assert!(out.iter().all(|o| o.value["v"] == "old"), "a lookup did not wait for the lock");
    assert!(pauses >= 1, "the worker never paused while the database stalled");

    // 3c. Partitions that leave a worker while it is paused, and come back.
    // librdkafka keeps a partition's pause through its revoke and a later
    // assign: a worker that resumed only what it held then never read them
    // again (seen as a stalled partition after a worker was killed). Worker
    // A stalls on the lock and pauses; B joins and takes some of A's
    // partitions; B is killed; the lock goes; A resumes; B's partitions come
    // back to A, and every record still comes out.
    topics(&kafka, &["in3d", "out3d", "err3d"]);
    let ports = free_ports(2);
    let a = slow_worker("w3-a", ["in3d", "g3d", "out3d", "err3d"], ports[0]);
    wait_until(Duration::from_secs(90), "worker A did not take the six partitions", || {
        try_metric(ports[0], "omlet_assigned_partitions").as_deref() == Some("6")
    });
    let mut lock = pg.session();
    lock.run("begin; lock table kv in access exclusive mode;");
    produce(&b, "in3d", 0..600);
    wait_until(Duration::from_secs(60), "worker A did not pause while its lookups waited", || {
        try_metric(ports[0], "omlet_pauses_total").is_some_and(|p| p != "0")
    });
    // B needs no database (and loading a lookup would wait for the lock).
    let metrics = format!("127.0.0.1:{}", ports[1]);
    let b_worker = Worker::start(
        dir.path(),
        "w3-b",
        &args(&kafka, &ids_rule, ["in3d", "g3d", "out3d", "err3d"], &["--no-knowledge", "--metrics", &metrics]),
    );
    wait_until(Duration::from_secs(60), "worker B was given no partition", || {
        try_metric(ports[1], "omlet_assigned_partitions").is_some_and(|p| p != "0")
    });
    assert_ne!(metric(ports[0], "omlet_pauses_total"), "0");
    b_worker.kill();
    lock.run("commit;");
    drop(lock);
    // A resumes what it holds now; B's partitions come back to it after the session timeout.
    produce(&b, "in3d", 600..1_200);
    wait_for_ids(&b, &["out3d", "err3d"], 1_200, Duration::from_secs(90));
    let (status, _, log) = a.stop();
    assert!(status.success(), "{status}\n{log}");
    let got: HashSet<u64> = ids(&read_topic(&b, "out3d")).into_iter().collect();
    assert_eq!(got, (0..1_200).collect::<HashSet<_>>(), "a record is missing");

    // 4. A knowledge row changes: every worker's caches follow within a second.
    pg.psql(
        "create function kv_changed() returns trigger language plpgsql as $$ \
         begin perform pg_notify('knowledge.reload', ''); return null; end $$; \
         create trigger kv_reload after insert or update or delete or truncate on kv \
         for each statement execute function kv_changed();",
    );
    let reload = config("reload.toml", "absent", "[reload]\nchannel = \"knowledge.reload\"\n");
    topics(&kafka, &["in4", "out4", "err4"]);
    let ports = free_ports(3);
    let workers: Vec<Worker> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let metrics = format!("127.0.0.1:{port}");
            Worker::start(
                dir.path(),
                &format!("w4-{i}"),
                &args(&kafka, &lookup_rule, ["in4", "g4", "out4", "err4"], &["--knowledge", &reload, "--metrics", &metrics]),
            )
        })
        .collect();
    // A steady stream, k = 1 always, to every partition.
    let (stop, next) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let feeder = {
        let (stop, next, b) = (stop.clone(), next.clone(), b.clone());
        std::thread::spawn(move || {
            let p = producer(&b);
            while !stop.load(Ordering::Relaxed) {
                for part in 0..6 {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let value = format!(r#"{{"id":{i},"k":1}}"#);
                    let _ = p.send(BaseRecord::<(), _>::to("in4").partition(part).payload(&value));
                }
                p.flush(Duration::from_secs(5)).unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    // Every partition has answered with the old value, and every worker is
    // up: its metrics answer only after its LISTEN is in place. (Partitions
    // alone were not enough: under load a third worker could still be
    // starting, and one that loads its tables after the update never sees
    // the NOTIFY, so it stays at generation 1 with the new value.)
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let out = read_topic(&b, "out4");
        let parts: HashSet<i32> = out.iter().filter(|o| o.value["v"] == "old").map(|o| o.partition).collect();
        if parts.len() == 6 && ports.iter().all(|p| try_metric(*p, "omlet_knowledge_generation").is_some()) {
            break;
        }
        assert!(Instant::now() < deadline, "the old value did not come out of every partition, or a worker is not up");
        std::thread::sleep(Duration::from_millis(300));
    }
    pg.psql("update kv set v = 'new' where k = 1");
    // Every worker has had the NOTIFY and reloaded (a fixed second was not
    // always enough on a loaded machine); records produced from now on must
    // all get the new value.
    wait_until(Duration::from_secs(60), "a worker did not reload after the update", || {
        ports.iter().all(|p| try_metric(*p, "omlet_knowledge_generation").is_some_and(|g| g.parse::<u64>().is_ok_and(|g| g >= 2)))
    });
    let boundary = next.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    feeder.join().unwrap();
    let last = next.load(Ordering::Relaxed) as usize;
    wait_for_ids(&b, &["out4"], last, Duration::from_secs(60));
    let generations: Vec<String> = ports.iter().map(|p| metric(*p, "omlet_knowledge_generation")).collect();
    // Every worker reports its partitions' lag (librdkafka's statistics,
    // every second; a worker that joined late may need a few of them before
    // its partitions have offsets to measure from).
    for &p in &ports {
        let has_lag = |text: &str| text.contains("omlet_consumer_lag{topic=\"in4\",partition=");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = metrics_text(p).unwrap_or_default();
            if has_lag(&text) {
                break;
            }
            assert!(Instant::now() < deadline, "no lag from the worker on {p} within 30 s:\n{text}");
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    for w in workers {
        let (status, _, log) = w.stop();
        assert!(status.success(), "{status}\n{log}");
    }
    let out = read_topic(&b, "out4");
    let late: Vec<&Out> = out.iter().filter(|o| o.value["id"].as_u64().is_some_and(|i| i >= boundary)).collect();
    let stale: Vec<u64> = late.iter().filter(|o| o.value["v"] != "new").filter_map(|o| o.value["id"].as_u64()).collect();
    assert!(late.len() >= 6, "records were produced after the update");
    assert!(stale.is_empty(), "records produced after every worker reloaded still got the old value: {stale:?}");
    assert_eq!(late.iter().map(|o| o.partition).collect::<HashSet<_>>().len(), 6, "every partition saw the new value");
    for g in &generations {
        assert!(g.parse::<u64>().unwrap() >= 2, "a worker did not reload: generation {g}");
    }

    // 5. Routing by header, and messages that are no record.
    let set = dir.path().join("set");
    std::fs::create_dir(&set).unwrap();
    std::fs::write(set.join("a.oml"), "name : a\nrule : /a/*\n---\nid = read(id) ;\nwho = chars(a) ;\npad = read(pad) ;\n")
        .unwrap();
    std::fs::write(set.join("b.oml"), "name : b\nrule : /b/*\n---\nid = read(id) ;\nwho = chars(b) ;\n").unwrap();
    topics(&kafka, &["in5", "out5", "err5"]);
    {
        use rdkafka::message::{Header, OwnedHeaders};
        let p = producer(&b);
        let send = |value: Option<&[u8]>, path: Option<&str>| {
            let mut rec = BaseRecord::<(), [u8]>::to("in5").partition(0);
            if let Some(v) = value {
                rec = rec.payload(v);
            }
            if let Some(path) = path {
                rec = rec.headers(OwnedHeaders::new().insert(Header { key: "rule_path", value: Some(path) }));
            }
            p.send(rec).map_err(|(e, _)| e).unwrap();
        };
        for i in 0..10 {
            let path = if i % 2 == 0 { "/a/x" } else { "/b/y" };
            send(Some(format!(r#"{{"id":{i}}}"#).as_bytes()), Some(path));
        }
        send(Some(b"not json"), Some("/a/x"));
        send(Some(b"{\"id\":\"\xff\"}"), Some("/a/x"));
        send(None, Some("/a/x"));
        send(Some(br#"{"id":99}"#), None);
        // An output over the producer's message.max.bytes (2048 below): an error line, not a stop.
        send(Some(format!(r#"{{"id":20,"pad":"{}"}}"#, "x".repeat(3000)).as_bytes()), Some("/a/x"));
        p.flush(Duration::from_secs(10)).unwrap();
    }
    let w = Worker::start(
        dir.path(),
        "w5",
        &args(
            &kafka,
            &set,
            ["in5", "g5", "out5?message.max.bytes=2048", "err5"],
            &["--no-knowledge", "--route-header", "rule_path"],
        ),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while read_topic(&b, "out5").len() + read_topic(&b, "err5").len() < 15 {
        assert!(Instant::now() < deadline, "15 records did not come out");
        std::thread::sleep(Duration::from_millis(300));
    }
    let (status, summary, log) = w.stop();
    assert!(status.success(), "{status}\n{log}");
    let out = read_topic(&b, "out5");
    for o in &out {
        let id = o.value["id"].as_u64().unwrap();
        assert_eq!(o.value["who"], if id % 2 == 0 { "a" } else { "b" }, "record {id} took the wrong model");
    }
    assert_eq!(out.len(), 10);
    let errors: Vec<serde_json::Value> = read_topic(&b, "err5").into_iter().map(|o| o.value).collect();
    let offsets: Vec<u64> = errors.iter().map(|e| e["offset"].as_u64().unwrap()).collect();
    assert_eq!(offsets, [10, 11, 12, 13, 14], "{errors:?}");
    let texts: Vec<&str> = errors.iter().map(|e| e["error"].as_str().unwrap()).collect();
    assert!(texts[0].contains("invalid JSON") || texts[0].contains("JSON"), "{}", texts[0]);
    assert!(texts[1].contains("not UTF-8"), "{}", texts[1]);
    assert!(texts[2].contains("no value"), "{}", texts[2]);
    assert_eq!(errors[3]["kind"], "unrouted", "{}", errors[3]);
    assert!(texts[4].contains("output bytes"), "{}", texts[4]);
    assert!(errors.iter().all(|e| e["partition"] == 0 && e["source"] == "in5"));
    assert_eq!((summary["errors"].as_u64(), summary["unrouted"].as_u64()), (Some(4), Some(1)), "{summary}");
}

/// One metric's value from a worker's `--metrics` endpoint.
fn metric(port: u16, name: &str) -> String {
    try_metric(port, name).unwrap_or_else(|| panic!("{name} is not in the metrics of the worker on {port}"))
}

/// [`metric`], or `None` while the worker does not answer.
fn try_metric(port: u16, name: &str) -> Option<String> {
    metrics_text(port)?.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ').map(str::to_string))
}

/// A worker's whole metrics page.
fn metrics_text(port: u16) -> Option<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    Some(text)
}

fn free_ports(n: usize) -> Vec<u16> {
    // Held together, so that the n ports differ.
    let held: Vec<std::net::TcpListener> = (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    held.iter().map(|l| l.local_addr().unwrap().port()).collect()
}
