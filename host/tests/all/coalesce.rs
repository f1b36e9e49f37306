//! One-record calls: the fiber-less path, and coalescing concurrent callers
//! into batch calls. Each caller gets its own record's result or error,
//! whatever happens to the other records it was batched with.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use omlet::{Engine, EngineConfig, Error, Limit, Record};

fn rec(json: &str) -> Record {
    omlet::record::from_json_str(json).unwrap()
}

/// An engine without the core path, which ends coalescing once it is
/// ready (`core_abi.rs` tests that): these tests are about coalescing.
fn engine(f: impl FnOnce(&mut EngineConfig)) -> Engine {
    let mut c = EngineConfig { core_path: false, ..Default::default() };
    f(&mut c);
    Engine::with_config(&c).unwrap()
}

const ECHO: &str = "name : t\n---\nn = read(n) ;\nm = read(m) ;\n";

/// `tasks` tasks each evaluate `calls` records, `make(task, call)`, one per
/// call, yielding between calls as a server's request tasks do (a task that
/// never yields runs all its calls before the next task starts).
async fn fan_out(
    rule: &omlet::Rule,
    tasks: usize,
    calls: usize,
    make: impl Fn(usize, usize) -> Record + Send + Sync + 'static,
) -> Vec<Vec<(Record, omlet::Result<Record>)>> {
    let make = Arc::new(make);
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (rule, make) = (rule.clone(), make.clone());
            tokio::spawn(async move {
                let mut out = Vec::with_capacity(calls);
                for c in 0..calls {
                    let r = make(t, c);
                    let got = rule.evaluate(&r).await;
                    out.push((r, got));
                    tokio::task::yield_now().await;
                }
                out
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.push(h.await.unwrap());
    }
    all
}

/// Checks that each caller got its own record's result: call `c` of task `t`
/// fails with `limit` where `fails(t, c)`, and gives `want(t, c)` elsewhere.
/// The counts of records that came through and that failed.
fn each_own_result(
    all: &[Vec<(Record, omlet::Result<Record>)>],
    fails: impl Fn(usize, usize) -> bool,
    limit: Limit,
    want: impl Fn(usize, usize) -> String,
) -> (usize, usize) {
    let (mut ok, mut failed) = (0, 0);
    for (t, calls) in all.iter().enumerate() {
        for (c, (_, got)) in calls.iter().enumerate() {
            if fails(t, c) {
                assert!(matches!(got, Err(Error::Limit { limit: l, .. }) if *l == limit), "task {t} call {c}: {got:?}");
                failed += 1;
            } else {
                let got = got.as_ref().unwrap_or_else(|e| panic!("task {t} call {c}: {e}"));
                assert_eq!(got.to_json(), want(t, c), "task {t} call {c}");
                ok += 1;
            }
        }
    }
    (ok, failed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_callers_each_get_their_own_record() {
    // Coalescing is on by default: the tasks of a worker thread that call
    // together share a batch call.
    let rule = engine(|_| {}).load_source("t.oml", ECHO, &omlet::LoadOptions::new()).await.unwrap();
    let all = fan_out(&rule, 32, 200, |t, c| rec(&format!("{{\"n\":{},\"m\":\"t{t}\"}}", t * 1000 + c))).await;
    for (t, calls) in all.iter().enumerate() {
        for (c, (_, got)) in calls.iter().enumerate() {
            let got = got.as_ref().unwrap_or_else(|e| panic!("task {t} call {c}: {e}"));
            assert_eq!(got.to_json(), format!("{{\"n\":{},\"m\":\"t{t}\"}}", t * 1000 + c));
        }
    }
    assert!(rule.coalesced_records() > 0, "32 callers on two threads never shared a call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_lookups_each_get_their_own_row() {
    // 500 keys: the first calls miss the caches and go alone (on the async
    // path), later ones are answered by the caches inside gathered batches.
    use omlet::knowledge::Tables;
    let db = omlet::knowledge::sqlite::SqliteProvider::memory().await.unwrap();
    let rows: Vec<Vec<omlet_lang::Cell>> =
        (1..=500i64).map(|i| vec![omlet_lang::Cell::Integer(i), omlet_lang::Cell::Text(format!("v{i}"))]).collect();
    db.load_table("perf", &["id".into(), "value".into()], &["INTEGER PRIMARY KEY".into(), "TEXT".into()], &rows).await.unwrap();
    let k = Arc::new(omlet::Knowledge::new(Arc::new(db)));
    let text = "name : t\n---\nn = read(n) ;\nv = select value from perf where id = read(n) ;\n";
    let rule = engine(|_| {}).load_source("t.oml", text, &omlet::LoadOptions::new().knowledge(Some(k))).await.unwrap();
    let all = fan_out(&rule, 32, 100, |t, c| rec(&format!("{{\"n\":{}}}", (t * 100 + c) % 500 + 1))).await;
    for (t, calls) in all.iter().enumerate() {
        for (c, (_, got)) in calls.iter().enumerate() {
            let n = (t * 100 + c) % 500 + 1;
            let got = got.as_ref().unwrap_or_else(|e| panic!("task {t} call {c}: {e}"));
            assert_eq!(got.to_json(), format!("{{\"n\":{n},\"v\":\"v{n}\"}}"), "task {t} call {c}");
        }
    }
    assert!(rule.coalesced_records() > 0, "no lookup was coalesced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_fails_in_a_coalesced_batch_fails_alone() {
    // Every 7th record is too big for the instance's memory: the batch it
    // joins fails, its callers evaluate alone, and only that record fails.
    let rule = engine(|c| {
        c.coalesce = true;
        c.max_memory = 16 << 20;
    })
    .load_source("t.oml", ECHO, &omlet::LoadOptions::new())
    .await
    .unwrap();
    let big = Arc::new("M".repeat(12 << 20));
    let all = fan_out(&rule, 16, 15, move |t, c| {
        let m = if (t + c) % 7 == 0 { big.as_str() } else { "small" };
        rec(&format!("{{\"n\":{},\"m\":\"{m}\"}}", t * 1000 + c))
    })
    .await;
    let (ok, failed) = each_own_result(
        &all,
        |t, c| (t + c) % 7 == 0,
        Limit::Memory,
        |t, c| format!("{{\"n\":{},\"m\":\"small\"}}", t * 1000 + c),
    );
    assert_eq!(ok + failed, 16 * 15);
    assert!(failed > 0);
    assert!(rule.coalesced_records() > 0, "no record was coalesced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_traps_in_a_coalesced_batch_traps_alone() {
    // Every 5th record runs the regex over 20,000 letters, which takes more
    // fuel than a call has: its call traps (out of fuel), and only that
    // record gets the error; the others in its batch get their own results.
    let rule = engine(|c| {
        c.fuel = Some(30_000_000);
    })
    .load_source("t.oml", SLOW_REGEX, &omlet::LoadOptions::new())
    .await
    .unwrap();
    let all = fan_out(&rule, 16, 10, |t, c| {
        let m = if (t + c) % 5 == 0 { "a".repeat(20_000) } else { format!("t{t}c{c}") };
        rec(&format!("{{\"m\":\"{m}\"}}"))
    })
    .await;
    let (ok, trapped) = each_own_result(&all, |t, c| (t + c) % 5 == 0, Limit::Fuel, |_, _| r#"{"v":"no"}"#.to_string());
    assert_eq!((ok, trapped), (128, 32));
    assert!(rule.coalesced_records() > 0, "no record was coalesced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_coalescing_off_every_record_has_its_own_call() {
    let rule = engine(|c| c.coalesce = false).load_source("t.oml", ECHO, &omlet::LoadOptions::new()).await.unwrap();
    let all = fan_out(&rule, 32, 50, |t, c| rec(&format!("{{\"n\":{c},\"m\":\"t{t}\"}}"))).await;
    assert!(all.iter().flatten().all(|(_, got)| got.is_ok()));
    assert_eq!(rule.coalesced_records(), 0);
}

#[test]
fn blocking_callers_are_never_coalesced() {
    // Threads calling `evaluate_blocking` would park waiting for another's
    // batch: they each make their own calls.
    let rule = omlet::block_on(engine(|_| {}).load_source("t.oml", ECHO, &omlet::LoadOptions::new())).unwrap();
    std::thread::scope(|s| {
        for t in 0..8 {
            let rule = &rule;
            s.spawn(move || {
                for c in 0..200 {
                    let got = rule.evaluate_blocking(&rec(&format!("{{\"n\":{c},\"m\":\"t{t}\"}}"))).unwrap();
                    assert_eq!(got.to_json(), format!("{{\"n\":{c},\"m\":\"t{t}\"}}"));
                }
            });
        }
    });
    assert_eq!(rule.coalesced_records(), 0);
}

/// Polls `f` once, in the calling task, and checks that it is pending (a
/// first call that opened a gathering and yields).
async fn poll_once_pending<F: std::future::Future + Unpin>(f: &mut F, what: &str) {
    std::future::poll_fn(|cx| {
        assert!(std::pin::Pin::new(&mut *f).poll(cx).is_pending(), "{what}");
        std::task::Poll::Ready(())
    })
    .await;
}

/// On one thread: a first caller that opens a gathering and yields, three
/// spawned callers that run meanwhile, then the first caller either finishes
/// (`cancel` false) or is dropped. Each spawned caller's result, and the
/// records coalesced.
async fn three_join_one(cancel: bool) -> (Vec<omlet::Result<Record>>, u64) {
    let rule = engine(|_| {}).load_source("t.oml", ECHO, &omlet::LoadOptions::new()).await.unwrap();
    let callers: Vec<_> = (1..4)
        .map(|n| {
            let rule = rule.clone();
            tokio::spawn(async move { rule.evaluate(&rec(&format!("{{\"n\":{n},\"m\":\"x\"}}"))).await })
        })
        .collect();
    let own = rec(r#"{"n":0,"m":"x"}"#);
    let mut opener = Box::pin(rule.evaluate(&own));
    poll_once_pending(&mut opener, "the opener yields").await;
    // The spawned callers run now, while the opener waits.
    tokio::task::yield_now().await;
    if cancel {
        drop(opener);
    } else {
        assert_eq!(opener.await.unwrap().to_json(), r#"{"n":0,"m":"x"}"#);
    }
    let mut got = Vec::new();
    for c in callers {
        got.push(tokio::time::timeout(Duration::from_secs(10), c).await.expect("a caller waits for good").unwrap());
    }
    (got, rule.coalesced_records())
}

#[tokio::test(flavor = "current_thread")]
async fn the_callers_of_a_cancelled_gathering_evaluate_alone() {
    let (got, coalesced) = three_join_one(false).await;
    assert_eq!(coalesced, 3, "the three callers joined the opener's call");
    assert!(got.iter().all(|r| r.is_ok()));
    let (got, coalesced) = three_join_one(true).await;
    assert_eq!(coalesced, 0, "the gathering was never called");
    for (n, r) in (1..4).zip(got) {
        assert_eq!(r.unwrap().to_json(), format!("{{\"n\":{n},\"m\":\"x\"}}"));
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_task_does_not_join_the_gathering_it_opened() {
    // A first call polled once (it opens a gathering and yields) and then
    // left unpolled: a second call of the same task must not wait for it.
    let rule = engine(|_| {}).load_source("t.oml", ECHO, &omlet::LoadOptions::new()).await.unwrap();
    let first = rec(r#"{"n":1,"m":"x"}"#);
    let mut opener = Box::pin(rule.evaluate(&first));
    poll_once_pending(&mut opener, "the first call yields").await;
    let second = tokio::time::timeout(Duration::from_secs(10), rule.evaluate(&rec(r#"{"n":2,"m":"y"}"#)))
        .await
        .expect("the second call waited for the first, which its own task holds");
    assert_eq!(second.unwrap().to_json(), r#"{"n":2,"m":"y"}"#);
    assert_eq!(opener.await.unwrap().to_json(), r#"{"n":1,"m":"x"}"#);
}

#[tokio::test(flavor = "current_thread")]
async fn a_caller_does_not_wait_on_an_opener_nobody_polls() {
    // A first call polled once (it opens a gathering and yields) and then
    // kept without being polled while its task waits for another task whose
    // call joined that gathering: the other call must not wait for it.
    let rule = engine(|_| {}).load_source("t.oml", ECHO, &omlet::LoadOptions::new()).await.unwrap();
    let own = rec(r#"{"n":1,"m":"x"}"#);
    let mut opener = Box::pin(rule.evaluate(&own));
    poll_once_pending(&mut opener, "the first call yields").await;
    // Three other calls join it: the first watches it for the others.
    let joiners: Vec<_> = (2..5)
        .map(|n| {
            let rule = rule.clone();
            tokio::spawn(async move { rule.evaluate(&rec(&format!(r#"{{"n":{n},"m":"y"}}"#))).await })
        })
        .collect();
    for (n, joiner) in (2..5).zip(joiners) {
        let got = tokio::time::timeout(Duration::from_secs(10), joiner)
            .await
            .expect("another call waited on a gathering nobody closes")
            .unwrap();
        assert_eq!(got.unwrap().to_json(), format!(r#"{{"n":{n},"m":"y"}}"#));
    }
    // Polled again, the first call still gives its own result.
    assert_eq!(opener.await.unwrap().to_json(), r#"{"n":1,"m":"x"}"#);
}

#[tokio::test(flavor = "current_thread")]
async fn the_evaluate_future_stays_small() {
    // A future is copied whole when a caller pins or moves it: the common
    // call's state is kept small, and the rarer paths are boxed.
    let rule = engine(|_| {}).load_source("t.oml", ECHO, &omlet::LoadOptions::new()).await.unwrap();
    let r = rec(r#"{"n":1,"m":"x"}"#);
    let f = rule.evaluate(&r);
    let size = std::mem::size_of_val(&f);
    println!("the evaluate future takes {size} bytes");
    // 272 bytes on rustc 1.95; a match kept across the await once made it 304.
    assert!(size <= 280, "the evaluate future takes {size} bytes");
    f.await.unwrap();
}

/// A rule whose regex costs time proportional to the field's length.
const SLOW_REGEX: &str =
    "name : t\n---\nv = match read(m) {\n    regex_match('[a-z]{1,300}X') => chars(yes),\n    _ => chars(no),\n};\n";

#[tokio::test(flavor = "current_thread")]
async fn a_long_call_leaves_the_thread_to_other_tasks() {
    // One thread: a call that held it without yielding would starve the
    // ticker. A fiber-less call that computes past its budget is stopped and
    // made again on the async path, which yields between epoch ticks.
    let rule = Engine::new().unwrap().load_source("t.oml", SLOW_REGEX, &omlet::LoadOptions::new()).await.unwrap();
    let ticks = Arc::new(AtomicU64::new(0));
    let ticker = {
        let ticks = ticks.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(1)).await;
                ticks.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    tokio::task::yield_now().await;
    let slow = rec(&format!("{{\"m\":\"{}\"}}", "a".repeat(40_000)));
    let started = Instant::now();
    let out = rule.evaluate(&slow).await.unwrap();
    let took = started.elapsed();
    ticker.abort();
    assert_eq!(out.to_json(), r#"{"v":"no"}"#);
    assert!(took > Duration::from_millis(200), "the call took only {took:?}: make the record longer");
    let ticks = ticks.load(Ordering::Relaxed);
    assert!(ticks >= 5, "the ticker ran {ticks} times during a call of {took:?}");
}
