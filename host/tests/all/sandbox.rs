//! The sandbox: hostile records and rules cost their own record, never the
//! run. Traps and limits are typed errors, the trapped instance is dropped,
//! the rule goes on, and a batch that fails is retried record by record.

use std::io::BufRead;
use std::time::{Duration, Instant};

use omlet::Limit;
use omlet::stream::{self, Format, Outcome, RunOptions};
use omlet::{Engine, EngineConfig, Error, Record};

const TRIVIAL: &str = "name : t\n---\nseq = read(seq) ;\nm = read(m) ;\n";

/// A rule whose regex costs time proportional to the field's length times
/// the repetition bound: minutes on a few megabytes.
const SLOW_REGEX: &str =
    "name : t\n---\nv = match read(m) {\n    regex_match('[a-z]{1,300}X') => chars(yes),\n    _ => chars(no),\n};\n";

fn rec(json: &str) -> Record {
    omlet::record::from_json_str(json).unwrap()
}

fn big(seq: usize, bytes: usize) -> Record {
    rec(&format!("{{\"seq\":{seq},\"m\":\"{}\"}}", "M".repeat(bytes)))
}

fn engine(f: impl FnOnce(&mut EngineConfig)) -> Engine {
    let mut c = EngineConfig::default();
    f(&mut c);
    Engine::with_config(&c).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_runs_out_of_memory_is_retried_record_by_record() {
    // 24 records of 1 MB: one frame of 24 MB cannot fit 16 MiB, each record can.
    let e = engine(|c| c.max_memory = 16 << 20);
    let rule = e.load_source("t.oml", TRIVIAL, &omlet::LoadOptions::new()).await.unwrap();
    let records: Vec<Record> = (0..24).map(|i| big(i, 1 << 20)).collect();
    let out = rule.evaluate_batch(&records).await.unwrap();
    assert_eq!(out.len(), 24);
    for (i, r) in out.iter().enumerate() {
        let r = r.as_ref().unwrap_or_else(|e| panic!("record {i}: {e}"));
        let json = omlet::record::to_json_string(r);
        assert!(json.starts_with(&format!("{{\"seq\":{i},\"m\":\"MMM")) && json.len() > 1 << 20, "record {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_too_big_for_the_instance_fails_alone_with_a_memory_limit() {
    let e = engine(|c| c.max_memory = 16 << 20);
    let rule = e.load_source("t.oml", TRIVIAL, &omlet::LoadOptions::new()).await.unwrap();
    let records = vec![big(0, 10), big(1, 12 << 20), big(2, 10)];
    let out = rule.evaluate_batch(&records).await.unwrap();
    assert!(out[0].is_ok() && out[2].is_ok(), "{out:?}");
    match &out[1] {
        Err(Error::Limit { limit: Limit::Memory, .. }) => {}
        other => panic!("expected a memory limit, got {other:?}"),
    }
    // The rule goes on with fresh instances.
    assert!(rule.evaluate(&big(3, 10)).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_over_the_byte_limit_is_refused_before_the_call() {
    let e = engine(|c| c.max_record_bytes = 1 << 20);
    let rule = e.load_source("t.oml", TRIVIAL, &omlet::LoadOptions::new()).await.unwrap();
    match rule.evaluate(&big(0, 2 << 20)).await {
        Err(Error::Limit { limit: Limit::RecordBytes, .. }) => {}
        other => panic!("expected a record-bytes limit, got {other:?}"),
    }
    let out = rule.evaluate_batch(&[big(0, 10), big(1, 2 << 20), big(2, 10)]).await.unwrap();
    assert!(out[0].is_ok() && out[2].is_ok());
    assert!(matches!(out[1], Err(Error::Limit { limit: Limit::RecordBytes, .. })), "{:?}", out[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_deadline_fails_and_the_rule_goes_on() {
    let e = engine(|c| c.call_deadline = Duration::from_millis(200));
    let rule = e.load_source("t.oml", SLOW_REGEX, &omlet::LoadOptions::new()).await.unwrap();
    let slow = rec(&format!("{{\"m\":\"{}\"}}", "a".repeat(2 << 20)));
    let started = Instant::now();
    match rule.evaluate(&slow).await {
        Err(Error::Limit { limit: Limit::Deadline, .. }) => {}
        other => panic!("expected the deadline, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10), "stopped after {:?}", started.elapsed());
    let fast = rec(r#"{"m":"abcX"}"#);
    assert_eq!(omlet::record::to_json_string(&rule.evaluate(&fast).await.unwrap()), r#"{"v":"yes"}"#);
    // In a batch, only the slow record fails.
    let out = rule.evaluate_batch(&[fast.clone(), slow, fast]).await.unwrap();
    assert!(out[0].is_ok() && out[2].is_ok(), "{out:?}");
    assert!(matches!(out[1], Err(Error::Limit { limit: Limit::Deadline, .. })), "{:?}", out[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuel_bounds_a_call_deterministically() {
    let e = engine(|c| c.fuel = Some(20_000_000));
    let rule = e.load_source("t.oml", SLOW_REGEX, &omlet::LoadOptions::new()).await.unwrap();
    assert!(rule.evaluate(&rec(r#"{"m":"abcX"}"#)).await.is_ok());
    let slow = rec(&format!("{{\"m\":\"{}\"}}", "a".repeat(100_000)));
    match rule.evaluate(&slow).await {
        Err(Error::Limit { limit: Limit::Fuel, .. }) => {}
        other => panic!("expected fuel to run out, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_past_the_instance_limit_wait_for_an_instance() {
    let e = engine(|c| c.max_instances = 3);
    let rule = e.load_source("t.oml", TRIVIAL, &omlet::LoadOptions::new()).await.unwrap();
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let rule = rule.clone();
            tokio::spawn(async move { rule.evaluate(&big(i, 50_000)).await })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    // A second rule on the same engine takes instances from the first's idle pool.
    let other = e.load_source("u.oml", TRIVIAL, &omlet::LoadOptions::new()).await.unwrap();
    assert!(other.evaluate(&big(0, 10)).await.is_ok());
}

fn reader(bytes: Vec<u8>) -> Box<dyn BufRead + Send> {
    Box::new(std::io::Cursor::new(bytes))
}

/// Runs `input` through `rule` as `omlet run` does; (outputs, failures).
async fn run(rule: omlet::Rule, input: Vec<u8>, format: Format, batch: usize) -> (Vec<u64>, Vec<(u64, String)>) {
    let (mut ok, mut failed) = (Vec::new(), Vec::new());
    let inputs = stream::read(reader(input), format);
    stream::run(rule, inputs, &RunOptions { batch, concurrency: 2, ..Default::default() }, |d| {
        match d.outcome {
            Outcome::Ok(_) => ok.push(d.input.number),
            Outcome::Failed(e) | Outcome::Unrouted(e) => failed.push((d.input.number, e.to_string())),
        }
        Ok(())
    })
    .await
    .unwrap();
    (ok, failed)
}

/// The issue's probe: 600 records of 70 KB, in batches of 256, used to end
/// the run with nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_hundred_records_of_seventy_kilobytes_all_come_out() {
    let rule = Engine::new().unwrap().load_source("t.oml", TRIVIAL, &omlet::LoadOptions::new()).await.unwrap();
    let mut input = Vec::new();
    for i in 0..600 {
        input.extend_from_slice(format!("{{\"seq\":{i},\"m\":\"{}\"}}\n", "M".repeat(70_000)).as_bytes());
    }
    let (ok, failed) = run(rule, input, Format::Jsonl, 256).await;
    assert!(failed.is_empty(), "{:?}", &failed[..failed.len().min(3)]);
    assert_eq!(ok, (1..=600).collect::<Vec<u64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_that_is_not_utf8_is_one_error_line() {
    let rule = Engine::new().unwrap().load_source("t.oml", TRIVIAL, &omlet::LoadOptions::new()).await.unwrap();
    let (ok, failed) = run(rule, b"{\"seq\":1}\n{\"seq\":\"\xff\"}\n{\"seq\":3}\n".to_vec(), Format::Jsonl, 256).await;
    assert_eq!(ok, [1, 3]);
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].0, 2);
    assert!(failed[0].1.contains("not UTF-8"), "{}", failed[0].1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_in_a_run_costs_only_its_records() {
    // Every tenth record is too slow for the deadline; the others come out.
    let e = engine(|c| c.call_deadline = Duration::from_millis(100));
    let rule = e.load_source("t.oml", SLOW_REGEX, &omlet::LoadOptions::new()).await.unwrap();
    let mut input = Vec::new();
    for i in 1..=50 {
        let m = if i % 10 == 0 { "a".repeat(1 << 20) } else { "abcX".to_string() };
        input.extend_from_slice(format!("{{\"m\":\"{m}\"}}\n").as_bytes());
    }
    let (ok, failed) = run(rule, input, Format::Jsonl, 16).await;
    assert_eq!(ok.len(), 45);
    assert_eq!(failed.iter().map(|f| f.0).collect::<Vec<_>>(), [10, 20, 30, 40, 50]);
    assert!(failed.iter().all(|f| f.1.contains("call deadline")), "{failed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbalanced_quote_costs_one_csv_row() {
    let rule = Engine::new()
        .unwrap()
        .load_source("t.oml", "name : t\n---\nseq = read(seq) ;\n", &omlet::LoadOptions::new())
        .await
        .unwrap();
    let mut input = String::from("seq,m\n");
    for i in 1..=1000 {
        if i == 11 {
            input.push_str(&format!("{i},\"never closed\n"));
        } else {
            input.push_str(&format!("{i},x\n"));
        }
    }
    let (ok, failed) = run(rule, input.into_bytes(), Format::Csv, 256).await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].0, 11);
    assert!(failed[0].1.contains("unbalanced quote"), "{}", failed[0].1);
    assert_eq!(ok.len(), 999);
}

/// A rule at the size limits either works or is refused by the build:
/// `omlet build` never says "built" for a component that then cannot load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_at_the_size_limits_work_and_bigger_ones_are_refused() {
    let engine = Engine::new().unwrap();
    // Nearly 1 MiB of match arms: it builds, loads, and evaluates.
    let mut arms = String::new();
    let mut n = 0;
    while arms.len() < 1_000_000 {
        arms.push_str(&format!("    chars(k{n}) => chars(v{n}),\n"));
        n += 1;
    }
    let rule = format!("name : t\n---\nv = match read(k) {{\n{arms}    _ => chars(none),\n}};\n");
    assert!(rule.len() < 1 << 20);
    let loaded = engine.load_source("big.oml", &rule, &omlet::LoadOptions::new()).await.unwrap_or_else(|e| panic!("{e}"));
    let out = loaded.evaluate(&rec(&format!("{{\"k\":\"k{}\"}}", n - 1))).await.unwrap();
    assert_eq!(omlet::record::to_json_string(&out), format!("{{\"v\":\"v{}\"}}", n - 1));
    // A 10 MB literal, or a 200,000-arm match: refused with a clear error.
    let literal = format!("name : t\n---\nv = chars({}) ;\n", "x".repeat(10 << 20));
    let e = engine.load_source("lit.oml", &literal, &omlet::LoadOptions::new()).await.err().expect("refused");
    assert!(e.to_string().contains("limit"), "{e}");
    let many: String = (0..200_000).map(|i| format!("    chars(k{i}) => chars(v{i}),\n")).collect();
    let e = engine
        .load_source("arms.oml", &format!("name : t\n---\nv = match read(k) {{\n{many}}};\n"), &omlet::LoadOptions::new())
        .await
        .err()
        .expect("refused");
    assert!(e.to_string().contains("limit"), "{e}");
}

/// The build limits are the engine's to set: compile limits and rule size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn build_limits_are_configurable_through_the_engine() {
    let nested = "name : t\n---\nv = object { a = object { b = object { c = chars(1) ; } ; } ; } ;\n";
    assert!(Engine::new().unwrap().load_source("n.oml", nested, &omlet::LoadOptions::new()).await.is_ok());
    let tight = engine(|c| c.build.compile.max_depth = 2);
    let e = tight.load_source("n.oml", nested, &omlet::LoadOptions::new()).await.err().expect("too deep for the engine's limit");
    assert!(e.to_string().contains("nesting deeper than 2 levels"), "{e}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.oml");
    std::fs::write(&file, TRIVIAL).unwrap();
    let small = engine(|c| c.build.max_rule_file_bytes = 10);
    match small.load_path(&file, &omlet::LoadOptions::new()).await {
        Err(Error::Limit { limit: Limit::RuleBytes, .. }) => {}
        Err(e) => panic!("expected a rule-bytes limit, got {e}"),
        Ok(_) => panic!("expected a rule-bytes limit"),
    }
    let tiny_ir = engine(|c| c.build.max_ir_bytes = 16);
    assert!(matches!(
        tiny_ir.load_source("t.oml", TRIVIAL, &omlet::LoadOptions::new()).await,
        Err(Error::Limit { limit: Limit::RuleBytes, .. })
    ));
}

/// What a load gave: the limit it reached, or what else happened.
fn load_outcome(r: omlet::Result<omlet::Rule>) -> Result<(), String> {
    match r {
        Ok(_) => Ok(()),
        Err(Error::Limit { limit: Limit::ComponentBytes, message }) => Err(message),
        Err(e) => panic!("expected a component-bytes limit, got {e}"),
    }
}

/// A component over `max_component_bytes` is refused with a typed error
/// before wasmtime compiles it, and a file by its length, before it is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_over_the_byte_limit_are_refused_before_compiling() {
    let options = omlet::LoadOptions::new();
    let sources = [omlet::RuleSource { file: "t.oml".into(), text: TRIVIAL.into() }];
    let built = omlet::build::build_component_with(&sources, &Default::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.wasm");
    std::fs::write(&file, &built).unwrap();
    let small = engine(|c| c.max_component_bytes = built.len() - 1);
    let exact = engine(|c| c.max_component_bytes = built.len());
    let m = load_outcome(small.load_component(&built, &options).await).unwrap_err();
    assert!(m.contains(&format!("takes {} bytes", built.len())), "{m}");
    load_outcome(exact.load_component(&built, &options).await).unwrap();
    let m = load_outcome(small.load_path(&file, &options).await).unwrap_err();
    assert!(m.contains("t.wasm"), "{m}");
    load_outcome(exact.load_path(&file, &options).await).unwrap();
    // Rules compiled here are bounded by the build limits instead.
    load_outcome(small.load_source("t.oml", TRIVIAL, &options).await).unwrap();

    // A 1 GiB file (sparse: it takes no disk) is refused by its length under
    // the default limit; reading it first would take a gigabyte of memory.
    let huge = dir.path().join("huge.wasm");
    std::fs::File::create(&huge).unwrap().set_len(1 << 30).unwrap();
    let started = Instant::now();
    let m = load_outcome(Engine::new().unwrap().load_path(&huge, &options).await).unwrap_err();
    assert!(m.contains("takes 1073741824 bytes") && m.contains(&format!("({};", 16 << 20)), "{m}");
    assert!(started.elapsed() < Duration::from_secs(5), "refused without reading: {:?}", started.elapsed());
    assert_eq!(EngineConfig::default().max_component_bytes, 16 << 20);
}

/// Inputs `1..=n` as read records (`{"seq":i}`), then, if `fail`, a failure to read.
fn numbered(n: u64, fail: bool) -> impl Iterator<Item = omlet::Result<stream::Input>> + Send + 'static {
    let records = (1..=n).map(|i| {
        let raw = format!("{{\"seq\":{i}}}");
        Ok(stream::Input { number: i, line: i, record: Ok(rec(&raw)), raw })
    });
    let failure = fail.then(|| Err(Error::Io { path: "input".into(), source: std::io::Error::other("the disk went away") }));
    records.chain(failure)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_failure_ends_the_run_after_every_record_read_before_it() {
    // The reading thread hands over 1000 records, then fails: each of the
    // 1000 comes out, in order, and then the run returns the failure.
    let rule = Engine::new().unwrap().load_source("t.oml", TRIVIAL, &omlet::LoadOptions::new()).await.unwrap();
    let mut seen = Vec::new();
    let result = stream::run(rule, numbered(1000, true), &RunOptions { batch: 64, concurrency: 3, ..Default::default() }, |d| {
        assert!(matches!(d.outcome, Outcome::Ok(_)), "record {}", d.input.number);
        seen.push(d.input.number);
        Ok(())
    })
    .await;
    assert_eq!(seen, (1..=1000).collect::<Vec<u64>>());
    assert!(matches!(result, Err(Error::Io { .. })), "{result:?}");
}

/// Sets its flag when dropped: the reading thread drops its input when it ends.
struct Dropped(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_sink_stops_the_reading_thread() {
    // An endless input: once the sink fails, the run returns its error, and
    // the reading thread ends (it drops its input) within its read-ahead.
    let rule = Engine::new().unwrap().load_source("t.oml", TRIVIAL, &omlet::LoadOptions::new()).await.unwrap();
    let pulled = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (counter, guard) = (pulled.clone(), Dropped(dropped.clone()));
    let endless = (1..).map(move |i: u64| {
        let _alive = &guard; // owned by the iterator: dropped with it
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let raw = format!("{{\"seq\":{i}}}");
        Ok(stream::Input { number: i, line: i, record: Ok(rec(&raw)), raw })
    });
    let (batch, concurrency) = (16, 2);
    let result = stream::run(rule, endless, &RunOptions { batch, concurrency, ..Default::default() }, |d| {
        if d.input.number == 40 { Err(Error::Config("the sink is full".into())) } else { Ok(()) }
    })
    .await;
    assert!(matches!(result, Err(Error::Config(_))), "{result:?}");
    let t = Instant::now();
    while !dropped.load(std::sync::atomic::Ordering::SeqCst) && t.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(dropped.load(std::sync::atomic::Ordering::SeqCst), "the reading thread did not end");
    let read = pulled.load(std::sync::atomic::Ordering::Relaxed);
    // Read: up to the failing chunk, those in flight and those waiting, and the one being filled.
    assert!(read <= (40 / batch as u64 + 1 + 2 * concurrency as u64 + 1) * batch as u64, "{read} records read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reading_thread_that_panics_fails_the_run() {
    // The input panics after 100 records: the chunks handed over before come
    // out, and the run fails rather than end as if the input had ended.
    let rule = Engine::new().unwrap().load_source("t.oml", TRIVIAL, &omlet::LoadOptions::new()).await.unwrap();
    let broken = numbered(100, false).chain(std::iter::from_fn(|| panic!("a reader bug")));
    let mut seen = Vec::new();
    let result = stream::run(rule, broken, &RunOptions { batch: 16, concurrency: 2, ..Default::default() }, |d| {
        seen.push(d.input.number);
        Ok(())
    })
    .await;
    assert!(matches!(result, Err(Error::Internal(_))), "{result:?}");
    assert_eq!(seen, (1..=96).collect::<Vec<u64>>(), "the six full chunks come out");
}
