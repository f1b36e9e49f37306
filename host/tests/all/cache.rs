//! The shared cache's semantics, on SQLite: TTL, capacity, reload,
//! negative caching, bypass; and the guest cache under the same rules. At
//! the end, the compiled-code cache: an entry runs only as the rule it was
//! written for, and a file changed under a running rule does not reach it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use omlet::knowledge::sqlite::SqliteProvider;
use omlet::knowledge::{BoundStatement, CacheMode, Knowledge, KnowledgeConfig, Tables};
use omlet_lang::Cell;

async fn setup(cfg: impl FnOnce(&mut KnowledgeConfig)) -> (Arc<Knowledge>, Vec<BoundStatement>) {
    let create = "create table perf (id integer primary key, value text);
                  insert into perf values (1, 'a'), (2, 'b'), (3, 'c');";
    knowledge_over(create, "perf", cfg).await
}

/// A knowledge base over the table `table (id, value)` that `create` makes,
/// configured by `cfg`, and its lookup `select value from TABLE where id = :id`.
async fn knowledge_over(
    create: &str,
    table: &str,
    cfg: impl FnOnce(&mut KnowledgeConfig),
) -> (Arc<Knowledge>, Vec<BoundStatement>) {
    let db = SqliteProvider::memory().await.unwrap();
    db.execute(create).await.unwrap();
    let mut c = KnowledgeConfig::default();
    cfg(&mut c);
    let k = Arc::new(Knowledge::with_config(Arc::new(db), c));
    let stmt = omlet_lang::ir::SqlStatement {
        sql: format!("select value from {table} where id = :id"),
        params: vec!["id".into()],
        table: table.into(),
        columns: vec!["value".into()],
        file: "t.oml".into(),
        line: 1,
        column: 1,
    };
    let bound = k.bind(&[stmt]).await.unwrap();
    (k, bound)
}

fn queries(k: &Knowledge) -> u64 {
    k.stats().queries.load(Ordering::Relaxed)
}

async fn get(k: &Knowledge, b: &[BoundStatement], id: i64) -> Option<Vec<Cell>> {
    k.query(&b[0], &[Cell::Integer(id)]).await.unwrap()
}

/// Waits for the next TTL period to begin, so that what follows has a
/// whole period before the generation (part of every cache key) moves on.
/// Periods start at fixed instants after the knowledge was made, so two
/// calls a millisecond apart can fall on either side of one: tests that
/// expect a hit between two calls wait for a fresh period, and check it
/// had not ended by the time the second call returned.
async fn next_period(k: &Knowledge) -> u64 {
    let now = k.generation();
    loop {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let g = k.generation();
        if g != now {
            return g;
        }
    }
}

/// Runs `pair` (two calls that should share one cache entry) at the start
/// of a fresh TTL period, again if a loaded machine let the period end
/// before it returned; returns how much `counter` grew in the pair that
/// fitted in one period.
async fn in_one_period<F, Fut>(k: &Knowledge, counter: impl Fn() -> u64, mut pair: F) -> u64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for _ in 0..5 {
        let g = next_period(k).await;
        let before = counter();
        pair().await;
        if k.generation() == g {
            return counter() - before;
        }
    }
    panic!("five pairs of calls each outlasted a TTL period");
}

#[tokio::test]
async fn hits_are_served_from_the_cache_until_the_ttl_expires() {
    let (k, b) = setup(|c| c.cache.ttl_ms = Some(300)).await;
    let queried = in_one_period(
        &k,
        || queries(&k),
        || async {
            assert_eq!(get(&k, &b, 1).await, Some(vec![Cell::Text("a".into())]));
            assert_eq!(get(&k, &b, 1).await, Some(vec![Cell::Text("a".into())]));
        },
    )
    .await;
    assert_eq!(queried, 1, "the second lookup is a hit");
    assert!(k.stats().hits.load(Ordering::Relaxed) >= 1);
    let before = queries(&k);
    tokio::time::sleep(Duration::from_millis(400)).await;
    get(&k, &b, 1).await;
    assert_eq!(queries(&k), before + 1, "the entry should have expired");
}

#[tokio::test]
async fn capacity_bounds_the_entries() {
    let (k, b) = setup(|c| c.cache.capacity = 2).await;
    for id in 1..=50 {
        get(&k, &b, id % 3 + 1).await;
        get(&k, &b, 1000 + id).await;
    }
    assert!(k.cached_entries().await <= 2, "{} entries", k.cached_entries().await);
}

#[tokio::test]
async fn reload_drops_every_cached_answer() {
    let (k, b) = setup(|_| {}).await;
    assert_eq!(get(&k, &b, 2).await, Some(vec![Cell::Text("b".into())]));
    k.provider().execute("update perf set value = 'B' where id = 2").await.unwrap();
    // Cached: the old answer until the knowledge is reloaded.
    assert_eq!(get(&k, &b, 2).await, Some(vec![Cell::Text("b".into())]));
    let g = k.generation();
    k.reload();
    assert!(k.generation() > g);
    assert_eq!(get(&k, &b, 2).await, Some(vec![Cell::Text("B".into())]));
    assert_eq!(queries(&k), 2);
}

#[tokio::test]
async fn no_row_answers_are_cached_only_when_negative_caching_is_on() {
    let (k, b) = setup(|_| {}).await;
    assert_eq!(get(&k, &b, 99).await, None);
    assert_eq!(get(&k, &b, 99).await, None);
    assert_eq!(queries(&k), 1);
    let (k, b) = setup(|c| c.cache.negative = false).await;
    assert_eq!(get(&k, &b, 99).await, None);
    assert_eq!(get(&k, &b, 99).await, None);
    assert_eq!(queries(&k), 2);
    // The guest cache keeps rows, but no "no row" answers, either.
    let rule = omlet::Engine::new()
        .unwrap()
        .load_source(
            "t.oml",
            "name : t\n---\nv = select value from perf where id = read(id) ;\n",
            &omlet::LoadOptions::new().knowledge(k.clone()),
        )
        .await
        .unwrap();
    for id in [99, 99, 1, 1] {
        let r = omlet::record::from_json_str(&format!(r#"{{"id":{id}}}"#)).unwrap();
        rule.evaluate(&r).await.unwrap();
    }
    assert_eq!(queries(&k), 2 + 2 + 1);
}

#[tokio::test]
async fn bypass_sends_every_lookup_to_the_database_and_guests_keep_nothing() {
    let (k, b) = setup(|c| c.cache.mode = CacheMode::Bypass).await;
    for _ in 0..3 {
        get(&k, &b, 1).await;
    }
    assert_eq!(queries(&k), 3);
    assert!(!k.cacheable());
    // Through a rule: the guest cache must not hold bypassed answers either.
    let rule = omlet::Engine::new()
        .unwrap()
        .load_source(
            "t.oml",
            "name : t\n---\nv = select value from perf where id = read(id) ;\n",
            &omlet::LoadOptions::new().knowledge(k.clone()),
        )
        .await
        .unwrap();
    let r = omlet::record::from_json_str(r#"{"id":3}"#).unwrap();
    for _ in 0..3 {
        assert_eq!(omlet::record::to_json_string(&rule.evaluate(&r).await.unwrap()), r#"{"v":"c"}"#);
    }
    assert_eq!(queries(&k), 6);
}

#[tokio::test]
async fn a_ttl_also_expires_the_guest_cache() {
    let (k, _) = setup(|c| c.cache.ttl_ms = Some(200)).await;
    let rule = omlet::Engine::new()
        .unwrap()
        .load_source(
            "t.oml",
            "name : t\n---\nv = select value from perf where id = read(id) ;\n",
            &omlet::LoadOptions::new().knowledge(k.clone()),
        )
        .await
        .unwrap();
    let r = omlet::record::from_json_str(r#"{"id":1}"#).unwrap();
    let lookups = || k.stats().lookups.load(Ordering::Relaxed);
    let reached = in_one_period(&k, lookups, || async {
        rule.evaluate(&r).await.unwrap();
        rule.evaluate(&r).await.unwrap();
    })
    .await;
    assert_eq!(reached, 1, "the guest cache answers the second");
    let before = lookups();
    tokio::time::sleep(Duration::from_millis(300)).await;
    rule.evaluate(&r).await.unwrap();
    assert_eq!(lookups(), before + 1, "a new TTL period reaches the host again");
}

#[tokio::test]
async fn with_the_guest_layer_off_every_lookup_reaches_the_shared_cache() {
    let (k, _) = setup(|c| c.cache.guest = false).await;
    let rule = omlet::Engine::new()
        .unwrap()
        .load_source(
            "t.oml",
            "name : t\n---\nv = select value from perf where id = read(id) ;\n",
            &omlet::LoadOptions::new().knowledge(k.clone()),
        )
        .await
        .unwrap();
    let r = omlet::record::from_json_str(r#"{"id":2}"#).unwrap();
    for _ in 0..4 {
        assert_eq!(omlet::record::to_json_string(&rule.evaluate(&r).await.unwrap()), r#"{"v":"b"}"#);
    }
    assert_eq!(k.stats().lookups.load(Ordering::Relaxed), 4);
    assert_eq!(k.stats().hits.load(Ordering::Relaxed), 3);
    assert_eq!(queries(&k), 1);
    let j = k.stats().to_json();
    assert!(j["shared_cache_hit_us"]["p50"].as_f64().unwrap() > 0.0, "{j}");
}

/// A call's lookups keep the generation the call started with: a reload in
/// the middle does not move the rest of the record's lookups to the new one.
#[tokio::test]
async fn lookups_of_one_call_stay_in_its_generation() {
    let (k, b) = setup(|_| {}).await;
    let started_at = k.generation();
    assert_eq!(k.query_at(started_at, &b[0], &[Cell::Integer(1)]).await.unwrap(), Some(vec![Cell::Text("a".into())]));
    k.reload();
    // The same call again: its generation's entry (written after the reload
    // emptied the cache) answers, not a query under the new generation.
    assert_eq!(k.query_at(started_at, &b[0], &[Cell::Integer(2)]).await.unwrap(), Some(vec![Cell::Text("b".into())]));
    assert_eq!(k.query_at(started_at, &b[0], &[Cell::Integer(2)]).await.unwrap(), Some(vec![Cell::Text("b".into())]));
    assert_eq!(queries(&k), 2);
    // A new call uses the new generation.
    assert_eq!(get(&k, &b, 2).await, Some(vec![Cell::Text("b".into())]));
    assert_eq!(queries(&k), 3);
}

/// 64 calls in flight while the knowledge is reloaded again and again: every
/// record comes out once, every lookup is answered, none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_in_the_middle_of_a_concurrent_run_lose_nothing() {
    let (k, _) = setup(|_| {}).await;
    let rule = omlet::Engine::new()
        .unwrap()
        .load_source(
            "t.oml",
            "name : t\n---\na = select value from perf where id = read(id) ;\nb = select value from perf where id = read(id) and value != 'none' ;\n",
            &omlet::LoadOptions::new().knowledge(k.clone()))
        .await
        .unwrap();
    let rule = Arc::new(rule);
    // The reloads come from the calling tasks themselves, every fifth record, so
    // how many run among the calls in flight does not depend on how the
    // scheduler happens to treat a separate reloading task (a yielding task
    // can sit behind 64 busy ones for the whole run on two workers).
    let reloads = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let tasks: Vec<_> = (0..64)
        .map(|t| {
            let (rule, k, reloads) = (rule.clone(), k.clone(), reloads.clone());
            tokio::spawn(async move {
                let mut out = Vec::new();
                for i in 0..50 {
                    if (t + i) % 5 == 0 {
                        k.reload();
                        reloads.fetch_add(1, Ordering::Relaxed);
                    }
                    let id = (t + i) % 3 + 1;
                    let rec = omlet::record::from_json_str(&format!("{{\"id\":{id}}}")).unwrap();
                    out.push((id, omlet::record::to_json_string(&rule.evaluate(&rec).await.unwrap())));
                }
                out
            })
        })
        .collect();
    let mut records = 0;
    for t in tasks {
        for (id, json) in t.await.unwrap() {
            let v = ["a", "b", "c"][id as usize - 1];
            assert_eq!(json, format!("{{\"a\":\"{v}\",\"b\":\"{v}\"}}"));
            records += 1;
        }
    }
    assert_eq!(records, 64 * 50);
    assert_eq!(reloads.load(Ordering::Relaxed), 64 * 10);
    assert_eq!(k.stats().errors.load(Ordering::Relaxed), 0);
}

/// A knowledge base over `big (id, value)`: ids 1 to 300 hold 100 KB of
/// text each, id 1000 holds 1.2 MB.
async fn big_rows(cfg: impl FnOnce(&mut KnowledgeConfig)) -> (Arc<Knowledge>, Vec<BoundStatement>) {
    let create = "create table big (id integer primary key, value text);
                  with recursive n(i) as (select 1 union all select i + 1 from n where i < 300)
                  insert into big select i, hex(zeroblob(50000)) from n;
                  insert into big values (1000, hex(zeroblob(600000)));";
    knowledge_over(create, "big", cfg).await
}

fn text_len(row: Option<Vec<Cell>>) -> usize {
    match row.as_deref() {
        Some([Cell::Text(t)]) => t.len(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn max_bytes_bounds_the_cache_by_the_size_of_its_rows() {
    let (k, b) = big_rows(|c| c.cache.max_bytes = 4 << 20).await;
    for id in 1..=300 {
        assert_eq!(text_len(get(&k, &b, id).await), 100_000);
    }
    let (entries, bytes) = (k.cached_entries().await, k.cached_bytes().await);
    assert!(bytes <= 4 << 20, "{bytes} bytes counted");
    assert!(entries * 100_000 <= 4 << 20, "{entries} entries of 100 KB");
    assert!(entries >= 10, "rows that fit are still cached: {entries}");
    // The default bound is 64 MiB, and the entry bound still holds.
    assert_eq!(KnowledgeConfig::default().cache.max_bytes, 64 << 20);
}

#[tokio::test]
async fn a_row_over_max_entry_bytes_is_answered_but_not_cached() {
    let (k, b) = big_rows(|_| {}).await;
    for _ in 0..2 {
        assert_eq!(text_len(get(&k, &b, 1000).await), 1_200_000);
    }
    assert_eq!(queries(&k), 2, "each lookup of the 1.2 MB row goes to the database");
    assert_eq!(k.cached_entries().await, 0);
    for _ in 0..2 {
        assert_eq!(text_len(get(&k, &b, 7).await), 100_000);
    }
    assert_eq!(queries(&k), 3, "a 100 KB row is cached");
    let (k, b) = big_rows(|c| c.cache.max_entry_bytes = 2 << 20).await;
    get(&k, &b, 1000).await;
    get(&k, &b, 1000).await;
    assert_eq!(queries(&k), 1, "under a higher max_entry_bytes it is cached");
}

// The compiled-code cache (`omlet::code_cache`).

/// Two rules on the same guest, differing only in the field they write.
const RULE_N: &str = "name : n\n---\nn : digit = read(n) ;\n";
const RULE_M: &str = "name : m\n---\nm : digit = read(n) ;\n";

fn code_config(dir: &std::path::Path) -> omlet::EngineConfig {
    omlet::EngineConfig { code_cache: Some(dir.to_path_buf()), ..Default::default() }
}

/// The entries in `dir`.
fn code_entries(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    v.sort();
    v
}

/// Loads `rule` with a new engine over the cache in `dir`; returns the
/// rule and the entry that holds its code: the one last used (a load marks
/// the entry it reads or writes).
async fn load_cached(dir: &std::path::Path, rule: &str) -> (omlet::Rule, std::path::PathBuf) {
    let engine = omlet::Engine::with_config(&code_config(dir)).unwrap();
    let r = engine.load_source("r.oml", rule, &Default::default()).await.unwrap();
    let newest =
        code_entries(dir).into_iter().max_by_key(|p| std::fs::metadata(p).unwrap().modified().unwrap()).expect("an entry");
    (r, newest)
}

fn record_42() -> omlet::Record {
    omlet::Record::from_json(r#"{"n":"42"}"#).unwrap()
}

/// Evaluates `rule` on 16 tasks at once (so that new instances are made,
/// from the code and data as loaded), 4 records each; every output must be
/// `want`.
async fn evaluate_everywhere(rule: &omlet::Rule, want: &str, when: &str) {
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let rule = rule.clone();
            tokio::spawn(async move {
                let mut out = Vec::new();
                for _ in 0..4 {
                    out.push(rule.evaluate(&record_42()).await.unwrap().to_json());
                }
                out
            })
        })
        .collect();
    for t in tasks {
        for json in t.await.unwrap() {
            assert_eq!(json, want, "{when}");
        }
    }
}

/// An entry renamed to another rule's name (a mix-up on a shared volume, a
/// careless copy) carries the key it was written for: the other rule is
/// compiled again, not run as the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_entry_renamed_to_another_rules_name_is_not_run_as_that_rule() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("code");
    let (_, entry_n) = load_cached(&dir, RULE_N).await;
    let (_, entry_m) = load_cached(&dir, RULE_M).await;
    assert_ne!(entry_n, entry_m);
    std::fs::rename(&entry_n, &entry_m).unwrap();
    let renamed = std::fs::read(&entry_m).unwrap();
    let (m, _) = load_cached(&dir, RULE_M).await;
    assert_eq!(m.evaluate(&record_42()).await.unwrap().to_json(), r#"{"m":42}"#, "run as the rule it names");
    assert_ne!(std::fs::read(&entry_m).unwrap(), renamed, "the entry was written again for its own rule");
    // And the rewritten entry is read back as itself.
    let (m, _) = load_cached(&dir, RULE_M).await;
    assert_eq!(m.evaluate(&record_42()).await.unwrap().to_json(), r#"{"m":42}"#);
}

/// Another rule's entry copied over the file (in place, as `cp` does) of a
/// rule that is running: the running rule keeps its own code and data, and
/// the next load does not take the copy for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_entry_copied_over_a_running_rules_entry_does_not_switch_it() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("code");
    let (_, entry_n) = load_cached(&dir, RULE_N).await;
    let (_, entry_m) = load_cached(&dir, RULE_M).await;
    // Read back from its entry, and running.
    let (m, entry) = load_cached(&dir, RULE_M).await;
    assert_eq!(entry, entry_m);
    evaluate_everywhere(&m, r#"{"m":42}"#, "before the copy").await;
    std::fs::copy(&entry_n, &entry_m).unwrap();
    evaluate_everywhere(&m, r#"{"m":42}"#, "the running rule, after the copy").await;
    let (m2, _) = load_cached(&dir, RULE_M).await;
    evaluate_everywhere(&m2, r#"{"m":42}"#, "loaded after the copy").await;
    evaluate_everywhere(&m, r#"{"m":42}"#, "the running rule, at the end").await;
}

/// The entry of a running rule truncated (in place): the rule keeps
/// evaluating records, and the process does not die of a SIGBUS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_entry_truncated_under_a_running_rule_does_not_stop_it() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("code");
    load_cached(&dir, RULE_N).await;
    let (n, entry) = load_cached(&dir, RULE_N).await;
    evaluate_everywhere(&n, r#"{"n":42}"#, "before the cut").await;
    for len in [4096, 0] {
        std::fs::OpenOptions::new().write(true).open(&entry).unwrap().set_len(len).unwrap();
        evaluate_everywhere(&n, r#"{"n":42}"#, &format!("cut to {len} bytes")).await;
    }
    // The cut entry is compiled again on the next load.
    let (n2, _) = load_cached(&dir, RULE_N).await;
    evaluate_everywhere(&n2, r#"{"n":42}"#, "loaded after the cut").await;
    assert!(std::fs::metadata(&entry).unwrap().len() > 100_000, "rewritten whole");
}
