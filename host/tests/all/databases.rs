//! Knowledge against real databases: throwaway PostgreSQL 15 and MariaDB
//! servers on loopback. The statement check at load, what a rule may reach,
//! batching, failures (the database stops mid-run, faults through a proxy).
//! The SQL conformance cases on these databases are in the CLI crate's tests
//! (they use its test-case runner).

use std::sync::Arc;

use omlet::knowledge::{CacheMode, KnowledgeConfig, OnLookupError};
use omlet::{Engine, Knowledge};
use omlet_testdb::{Fault, FaultProxy, MariaDb, Postgres};

fn root() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// A statement as a component hands it over. Its table and columns are left
/// empty: `Knowledge::bind` reads them from the SQL itself.
pub(crate) fn statement(sql: &str, params: &[&str]) -> omlet_lang::ir::SqlStatement {
    omlet_lang::ir::SqlStatement {
        sql: sql.into(),
        params: params.iter().map(|p| p.to_string()).collect(),
        table: String::new(),
        columns: Vec::new(),
        file: "t.oml".into(),
        line: 1,
        column: 1,
    }
}

const PERF_RULE: &str = "name : t\n---\nv = select value from perf where id = read(id) ;\nk = chars(k) ;\n";

async fn perf_table(k: &Knowledge, rows: i64) {
    let p = k.provider();
    let data: Vec<Vec<omlet_lang::Cell>> =
        (1..=rows).map(|i| vec![omlet_lang::Cell::Integer(i), omlet_lang::Cell::Text(format!("v{i}"))]).collect();
    p.load_table("perf", &["id".into(), "value".into()], &["INTEGER PRIMARY KEY".into(), "TEXT".into()], &data).await.unwrap();
}

fn rec(id: i64) -> omlet::Record {
    omlet::record::from_json_str(&format!("{{\"id\":{id}}}")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_on_a_missing_column_fails_the_load_on_postgres() {
    let pg = Postgres::start();
    let k = KnowledgeConfig::for_url(&pg.url()).open().await.unwrap();
    perf_table(&k, 3).await;
    let err = Engine::new()
        .unwrap()
        .load_source(
            "bad.oml",
            "name : t\n---\n\nv = select nope from perf where id = read(id) ;\n",
            &omlet::LoadOptions::new().knowledge(k),
        )
        .await
        .err()
        .expect("load must fail");
    let msg = err.to_string();
    assert!(msg.starts_with("bad.oml:4:5: lookup `select nope from perf where id = :id`"), "{msg}");
    assert!(msg.contains("nope"), "{msg}");
}

/// A server that cannot be reached is named, host and port, with the cause,
/// at once and not after the pool's timeout; the URL's secret never shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_named_with_its_cause() {
    // Port 1 (tcpmux), which nothing here serves: a port that a listener
    // bound to 0 was given and let go could be given next to another
    // test's server, which would then answer.
    let port = 1;
    for scheme in ["postgres", "mysql"] {
        let mut config = KnowledgeConfig::for_url(&format!("{scheme}://bob:s3cret@127.0.0.1:{port}/db"));
        config.connect_timeout_ms = 60_000;
        let started = std::time::Instant::now();
        let e = config.open().await.err().expect("a closed port opened").to_string();
        assert!(e.contains(&format!("cannot connect to 127.0.0.1:{port}")) && e.contains("connection refused"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(30), "waited for the pool: {:?}", started.elapsed());
    }
    // A server that answers and refuses: its own words, and where it is.
    let pg = Postgres::start();
    let url = pg.url();
    let (base, _) = url.rsplit_once('/').unwrap();
    let server = base.rsplit_once('@').unwrap().1;
    for (url, words) in [
        (format!("{base}/no_such_db"), "the server refused: database \"no_such_db\" does not exist"),
        (url.replace("://postgres@", "://nobody@"), "authentication failed: role \"nobody\" does not exist"),
    ] {
        let e = KnowledgeConfig::for_url(&url).open().await.err().expect("a refused connection opened").to_string();
        assert!(e.contains(&format!("cannot connect to {server}: {words}")), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_parameters_meet_integer_columns_on_postgres() {
    // SQLite's affinity makes `int_col = '2'` true; PostgreSQL gets the parameter coerced.
    let pg = Postgres::start();
    let k = KnowledgeConfig::for_url(&pg.url()).open().await.unwrap();
    perf_table(&k, 3).await;
    let rule = Engine::new().unwrap().load_source("t.oml", PERF_RULE, &omlet::LoadOptions::new().knowledge(k)).await.unwrap();
    let input = omlet::record::from_json_str(r#"{"id":"2"}"#).unwrap();
    let out = rule.evaluate(&input).await.unwrap();
    assert_eq!(omlet::record::to_json_string(&out), r#"{"v":"v2","k":"k"}"#);
    let input = omlet::record::from_json_str(r#"{"id":"two"}"#).unwrap();
    let out = rule.evaluate(&input).await.unwrap();
    assert_eq!(omlet::record::to_json_string(&out), r#"{"k":"k"}"#);
}

fn outage_config(url: &str, policy: OnLookupError) -> KnowledgeConfig {
    let mut c = KnowledgeConfig::for_url(url);
    c.cache.mode = CacheMode::Bypass;
    c.on_lookup_error = policy;
    c.connect_timeout_ms = 1000;
    c.query_timeout_ms = 1000;
    c.pool_size = 2;
    c
}

/// A server the outage test can stop and start again.
trait Stoppable {
    fn url(&self) -> String;
    fn stop(&mut self);
    fn resume(&mut self);
}

impl Stoppable for Postgres {
    fn url(&self) -> String {
        Postgres::url(self)
    }
    fn stop(&mut self) {
        Postgres::stop(self)
    }
    fn resume(&mut self) {
        Postgres::resume(self)
    }
}

impl Stoppable for MariaDb {
    fn url(&self) -> String {
        MariaDb::url(self)
    }
    fn stop(&mut self) {
        MariaDb::stop(self)
    }
    fn resume(&mut self) {
        MariaDb::resume(self)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outage_follows_the_policy_and_lookups_recover() {
    outage(&mut Postgres::start(), "$1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_outage_follows_the_policy_and_lookups_recover() {
    outage(&mut MariaDb::start(), "?").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restart_between_lookups_costs_no_lookup() {
    restart_between_lookups(&mut Postgres::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_restart_between_lookups_costs_no_lookup() {
    restart_between_lookups(&mut MariaDb::start()).await;
}

/// The server restarts while the provider's connections sit idle: the first
/// lookups after it find their connections dead, drop them and run again on
/// new ones, so not one lookup fails (with the `fail` policy, which would
/// show it).
async fn restart_between_lookups(db: &mut dyn Stoppable) {
    let k = outage_config(&db.url(), OnLookupError::Fail).open().await.unwrap();
    perf_table(&k, 10).await;
    let engine = Engine::new().unwrap();
    let rule = engine.load_source("t.oml", PERF_RULE, &omlet::LoadOptions::new().knowledge(k.clone())).await.unwrap();
    let batch: Vec<omlet::Record> = (1..=6).map(rec).collect();
    // Two lookups at once, so that both connections of the pool are open and idle.
    let (a, b) = tokio::join!(rule.evaluate_batch(&batch[..3]), rule.evaluate_batch(&batch[3..]));
    assert!(a.unwrap().iter().chain(b.unwrap().iter()).all(|r| r.as_ref().unwrap().len() == 2));
    let queries = k.stats().queries.load(std::sync::atomic::Ordering::Relaxed);

    db.stop();
    db.resume();
    for round in 0..2 {
        let (a, b) = tokio::join!(rule.evaluate_batch(&batch[..3]), rule.evaluate_batch(&batch[3..]));
        for r in a.unwrap().iter().chain(b.unwrap().iter()) {
            assert_eq!(r.as_ref().map(|r| r.len()).map_err(|e| e.to_string()), Ok(2), "round {round}");
        }
    }
    assert!(k.stats().queries.load(std::sync::atomic::Ordering::Relaxed) > queries);
    assert_eq!(k.stats().errors.load(std::sync::atomic::Ordering::Relaxed), 0);
}

/// Stops the database mid-run: no record is lost or duplicated, the policy
/// holds (absent or fail), and lookups recover once it is back.
async fn outage(pg: &mut dyn Stoppable, placeholder: &str) {
    let k = outage_config(&pg.url(), OnLookupError::Absent).open().await.unwrap();
    perf_table(&k, 10).await;
    let strict = outage_config(&pg.url(), OnLookupError::Fail).open().await.unwrap();
    let engine = Engine::new().unwrap();
    let rule = engine.load_source("t.oml", PERF_RULE, &omlet::LoadOptions::new().knowledge(k.clone())).await.unwrap();
    let strict_rule = engine.load_source("t.oml", PERF_RULE, &omlet::LoadOptions::new().knowledge(strict.clone())).await.unwrap();
    let batch: Vec<omlet::Record> = (1..=6).map(rec).collect();

    let out = rule.evaluate_batch(&batch).await.unwrap();
    assert!(out.iter().all(|r| r.as_ref().unwrap().len() == 2));
    let bound = k.bind(&[statement("select value from perf where id = :id", &["id"])]).await.unwrap();

    pg.stop();
    // The provider tells a database that is gone from one that refuses.
    let e = k.query(&bound[0], &[omlet_lang::Cell::Integer(3)]).await.unwrap_err();
    assert_eq!(e.kind, omlet::knowledge::LookupErrorKind::Unavailable, "{e:?}");
    // Absent: every record still comes out, without the lookup's field.
    let out = rule.evaluate_batch(&batch).await.unwrap();
    assert_eq!(out.len(), 6);
    for r in &out {
        assert_eq!(omlet::record::to_json_string(r.as_ref().unwrap()), r#"{"k":"k"}"#);
    }
    assert!(k.stats().errors.load(std::sync::atomic::Ordering::Relaxed) >= 6);
    // Fail: each record fails, with its index and the statement.
    let out = strict_rule.evaluate_batch(&batch).await.unwrap();
    assert_eq!(out.len(), 6);
    for (i, r) in out.iter().enumerate() {
        let Err(e) = r else { panic!("the record must fail") };
        assert!(matches!(e, omlet::Error::Lookup { index, .. } if *index == i), "{e:?}");
        let e = e.to_string();
        assert!(e.starts_with(&format!("lookup failed: `select value from perf where id = {placeholder}`")), "{e}");
    }

    pg.resume();
    // The pool reconnects by itself: within a few tries every lookup answers again.
    let mut recovered = false;
    for _ in 0..50 {
        let out = rule.evaluate_batch(&batch).await.unwrap();
        if out.iter().all(|r| r.as_ref().is_ok_and(|r| r.len() == 2)) {
            recovered = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(recovered, "lookups did not recover after the restart");
    let out = rule.evaluate(&rec(3)).await.unwrap();
    assert_eq!(omlet::record::to_json_string(&out), r#"{"v":"v3","k":"k"}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_misses_make_one_query_at_the_database() {
    let pg = Postgres::start();
    let admin = KnowledgeConfig::for_url(&pg.url()).open().await.unwrap();
    admin.provider().execute("create extension if not exists pg_stat_statements").await.unwrap();
    perf_table(&admin, 10).await;
    let k = KnowledgeConfig::for_url(&pg.url()).open().await.unwrap();
    let bound = Arc::new(k.bind(&[statement("select value from perf where id = :id", &["id"])]).await.unwrap());
    admin.provider().execute("select pg_stat_statements_reset()").await.unwrap();
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (k, bound) = (k.clone(), bound.clone());
            tokio::spawn(async move { k.query(&bound[0], &[omlet_lang::Cell::Integer(7)]).await.unwrap() })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), Some(vec![omlet_lang::Cell::Text("v7".into())]));
    }
    let calls = count_calls(&pg.url(), "from perf where id").await;
    assert_eq!(calls, 1, "the database saw {calls} executions");
    assert_eq!(k.stats().queries.load(std::sync::atomic::Ordering::Relaxed), 1);
}

async fn count_calls(url: &str, pattern: &str) -> i64 {
    use sqlx::Row;
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "select coalesce(sum(calls), 0)::bigint from pg_stat_statements where query like '%{pattern}%' and query not like '%pg_stat_statements%'"
    )))
    .fetch_one(&pool)
    .await
    .unwrap();
    row.get::<i64, _>(0)
}

/// 64 concurrent misses on distinct keys: batched into few queries, each
/// lookup still gets its own row (and none for a missing key).
async fn misses_are_batched(url: &str, count_at_db: bool) {
    let admin = KnowledgeConfig::for_url(url).open().await.unwrap();
    if count_at_db {
        admin.provider().execute("create extension if not exists pg_stat_statements").await.unwrap();
    }
    perf_table(&admin, 100).await;
    let k = KnowledgeConfig::for_url(url).open().await.unwrap();
    let bound = Arc::new(k.bind(&[statement("select value from perf where id = :id", &["id"])]).await.unwrap());
    assert!(bound[0].batch.is_some(), "a single-key lookup should be batchable");
    if count_at_db {
        admin.provider().execute("select pg_stat_statements_reset()").await.unwrap();
    }
    let tasks: Vec<_> = (1..=64)
        .map(|i: i64| {
            let (k, bound) = (k.clone(), bound.clone());
            // Every eighth key is missing; some keys come as text.
            let id = if i % 8 == 0 { 1000 + i } else { i };
            let key = if i % 3 == 0 { omlet_lang::Cell::Text(id.to_string()) } else { omlet_lang::Cell::Integer(id) };
            tokio::spawn(async move { (id, k.query(&bound[0], &[key]).await.unwrap()) })
        })
        .collect();
    for t in tasks {
        let (id, row) = t.await.unwrap();
        let want = if id > 1000 { None } else { Some(vec![omlet_lang::Cell::Text(format!("v{id}"))]) };
        assert_eq!(row, want, "key {id}");
    }
    let queries = k.stats().queries.load(std::sync::atomic::Ordering::Relaxed);
    assert!(queries < 32, "{queries} queries for 64 misses");
    assert!(k.stats().batched.load(std::sync::atomic::Ordering::Relaxed) > 0);
    if count_at_db {
        let calls = count_calls(url, "from perf where id").await;
        assert_eq!(calls as u64, queries, "the database saw {calls} executions");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misses_are_batched_on_postgres() {
    let pg = Postgres::start();
    misses_are_batched(&pg.url(), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misses_are_batched_on_mariadb() {
    let m = MariaDb::start();
    misses_are_batched(&m.url(), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misses_are_batched_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    misses_are_batched(&format!("sqlite://{}", dir.path().join("k.db").display()), false).await;
}

/// Helper functions applied to columns, with the guest's semantics: on
/// PostgreSQL they are temporary functions of each connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helper_functions_apply_to_columns_on_postgres() {
    let pg = Postgres::start();
    helper_functions_apply_to_columns(&pg.url()).await;
}

/// On MariaDB the helpers are written out inline as expressions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helper_functions_apply_to_columns_on_mariadb() {
    let db = MariaDb::start();
    helper_functions_apply_to_columns(&db.url()).await;
}

/// On SQLite they are functions registered on each connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helper_functions_apply_to_columns_on_sqlite() {
    helper_functions_apply_to_columns("sqlite::memory:").await;
}

async fn helper_functions_apply_to_columns(url: &str) {
    let k = KnowledgeConfig::for_url(url).open().await.unwrap();
    k.provider()
        .execute(
            "create table nets (cidr text, zone text);
             insert into nets values ('10.1.0.0/16', 'lab'), ('10.0.0.0/8', 'corp'), ('bogus', 'x');
             create table hosts (addr text, name text, n bigint);
             insert into hosts values ('\"192.168.0.9\"', 'quoted', 1), ('10.1.2.3', 'db-1', 167838211), ('999.1.1.1', 'bad', 0);",
        )
        .await
        .unwrap();
    let rule = Engine::new()
        .unwrap()
        .load_source(
            "h.oml",
            "name : t\n---\n\
             zone = select zone from nets where cidr4_contains(read(ip), cidr) = 1 ;\n\
             host = select name from hosts where ip4_int(addr) = ip4_int(read(ip)) ;\n\
             quoted = select name from hosts where trim_quotes(addr) = '192.168.0.9' ;\n\
             by_int = select name from hosts where ip4_int(n) = ip4_int(read(ip)) and n > 0 ;\n\
             bad = select name from hosts where ip4_int(addr) = 0 ;\n\
             lo = select zone from nets where cidr4_min(cidr) <= ip4_int(read(ip)) and cidr4_max(cidr) >= ip4_int(read(ip)) ;\n\
             between = select name from hosts where ip4_between(read(ip), addr, '10.1.2.9') = 1 ;\n\
             text = select name from hosts where ip4_text(n) = '10.1.2.3' ;\n\
             nested = select zone from nets where ip4_between(read(ip), cidr4_min(cidr), cidr4_max(cidr)) = 1 and zone <> 'lab' ;\n",
            &omlet::LoadOptions::new().knowledge(k))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let out = rule.evaluate(&omlet::record::from_json_str(r#"{"ip":"10.1.2.3"}"#).unwrap()).await.unwrap();
    assert_eq!(
        omlet::record::to_json_string(&out),
        r#"{"zone":"lab","host":"db-1","quoted":"quoted","by_int":"db-1","bad":"quoted","lo":"lab","between":"db-1","text":"db-1","nested":"corp"}"#
    );
}

/// OML 1.25's SQL forms (delta §13.6–§13.8): aggregates in the select
/// list, a sub-query as the source, `like` with a pattern built from the
/// record, and `in` lists, each through the guard and on the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregates_sub_queries_and_like_on_postgres() {
    let pg = Postgres::start();
    sql_forms_of_oml_1_25(&pg.url(), "string_agg(distinct kind, ',')").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregates_sub_queries_and_like_on_mariadb() {
    let db = MariaDb::start();
    sql_forms_of_oml_1_25(&db.url(), "group_concat(distinct kind)").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregates_sub_queries_and_like_on_sqlite() {
    sql_forms_of_oml_1_25("sqlite::memory:", "group_concat(distinct kind)").await;
}

async fn sql_forms_of_oml_1_25(url: &str, concat: &str) {
    let k = KnowledgeConfig::for_url(url).open().await.unwrap();
    k.provider()
        .execute(
            "create table assets (ip varchar(40), owner varchar(20), team varchar(20), kind varchar(20));
             insert into assets values ('10.0.0.1', 'ana', 'net-ops', 'router'), ('10.0.0.2', 'li', 'net-ops', 'switch'),
               ('10.0.0.3', 'bo', 'data', 'router'), ('10.0.0.4', 'cy', 'net-ops', 'router');",
        )
        .await
        .unwrap();
    let rule = format!(
        "name : t
---
         n = select count(ip) from assets where ip in (@sip, @dip) ;
         kinds = select {concat} from assets where team = read(team) ;
         top = select max(owner) from assets where team like '%@unit%' ;
         who = select owner from (select owner, ip from assets) a where ip = read(sip) ;
         pat = select owner from assets where team like @team_pat and kind = 'switch' ;
         none = select max(owner) from assets where team = read(nobody) ;
         lit = select count(*) from assets where kind like 'rout%' ;
"
    );
    let rule = Engine::new()
        .unwrap()
        .load_source("f.oml", &rule, &omlet::LoadOptions::new().knowledge(k))
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let input = r#"{"sip":"10.0.0.1","dip":"10.0.0.3","team":"net-ops","unit":"ops","team_pat":"net%","nobody":"x"}"#;
    let out = rule.evaluate(&omlet::record::from_json_str(input).unwrap()).await.unwrap();
    let json: serde_json::Value = serde_json::from_str(&omlet::record::to_json_string(&out)).unwrap();
    assert_eq!(json["n"], 2, "{url}: {json}");
    let mut kinds: Vec<&str> = json["kinds"].as_str().unwrap().split(',').collect();
    kinds.sort();
    assert_eq!(kinds, ["router", "switch"], "{url}");
    assert_eq!(json["top"], "li", "{url}");
    assert_eq!(json["who"], "ana", "{url}");
    assert_eq!(json["pat"], "li", "{url}");
    assert!(json.get("none").is_none(), "{url}: an aggregate over no row is NULL, which stores nothing: {json}");
    assert_eq!(json["lit"], 3, "{url}");
}

/// Issue 31: tables of PostgreSQL and MariaDB held in memory as snapshots.
/// Their lookups are answered from memory; a change reaches them within a
/// second of its NOTIFY (or of the poll that sees it), and no lookup fails
/// or comes back empty while the snapshot is read again and swapped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_follow_changes_on_postgres() {
    let pg = Postgres::start();
    snapshots_follow_changes(&pg.url(), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_follow_changes_on_mariadb() {
    let db = MariaDb::start();
    snapshots_follow_changes(&db.url(), false).await;
}

async fn snapshots_follow_changes(url: &str, notify: bool) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let mut config = KnowledgeConfig::for_url(url);
    config.memory.snapshots = vec!["zones".into()];
    if notify {
        config.reload.channel = Some("kb".into());
    } else {
        config.reload.poll_query = Some("select v from kb_version".into());
        config.reload.poll_ms = 100;
    }
    let k = config.open().await.unwrap();
    k.provider()
        .execute(
            "create table zones (lo bigint, hi bigint, zone varchar(20));
             insert into zones values (167772160, 167837695, 'a'), (167837696, 167903231, 'b');
             create table kb_version (v int);
             insert into kb_version values (1);",
        )
        .await
        .unwrap();
    let _watcher = omlet::knowledge::reload::watch(&k).await.unwrap();
    let rule = "name : t\n---\nzone = select zone from zones where lo <= ip4_int(read(ip)) and hi >= ip4_int(read(ip)) ;\n";
    let rule = Engine::new().unwrap().load_source("s.oml", rule, &omlet::LoadOptions::new().knowledge(k.clone())).await.unwrap();
    let rec = omlet::record::from_json_str(r#"{"ip":"10.0.0.9"}"#).unwrap();
    let zone = |out: omlet::Record| omlet::record::to_json_string(&out);
    assert_eq!(zone(rule.evaluate(&rec).await.unwrap()), r#"{"zone":"a"}"#, "{url}");
    let from_memory = k.stats().memory.load(Ordering::Relaxed);
    assert!(from_memory > 0, "{url}: the lookup was not answered from the snapshot");

    // Readers all through the change: every answer is the old row or the new.
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (rule, rec, stop, answered) = (rule.clone(), rec.clone(), stop.clone(), answered.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let out = omlet::record::to_json_string(&rule.evaluate(&rec).await.unwrap());
                    assert!(out == r#"{"zone":"a"}"# || out == r#"{"zone":"new"}"#, "{out}");
                    answered.fetch_add(1, Ordering::Relaxed);
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let change = if notify {
        "update zones set zone = 'new' where zone = 'a'; notify kb;"
    } else {
        "update zones set zone = 'new' where zone = 'a'; update kb_version set v = 2;"
    };
    k.provider().execute(change).await.unwrap();
    let changed = std::time::Instant::now();
    loop {
        if zone(rule.evaluate(&rec).await.unwrap()) == r#"{"zone":"new"}"# {
            break;
        }
        assert!(changed.elapsed() < REACHES_WITHIN, "{url}: the change did not reach lookups within {REACHES_WITHIN:?}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let took = changed.elapsed();
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.await.unwrap();
    }
    assert!(answered.load(Ordering::Relaxed) > 0);
    assert!(k.stats().memory.load(Ordering::Relaxed) > from_memory, "{url}: answered from the new snapshot too");
    let kind = if notify { "postgres (NOTIFY)" } else { "mariadb (poll every 100 ms)" };
    eprintln!("{kind}: the change reached lookups in {took:?}");
}

/// `order by … limit`: the upstream form of an IP-range lookup
/// over overlapping ranges picks the narrowest, and lookups of a repeated
/// key get the first row in the statement's order, alone or batched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_by_and_limit_on_postgres() {
    let pg = Postgres::start();
    order_by_and_limit(&pg.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_by_and_limit_on_mariadb() {
    let db = MariaDb::start();
    order_by_and_limit(&db.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_by_and_limit_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    order_by_and_limit(&format!("sqlite://{}", dir.path().join("k.db").display())).await;
}

async fn order_by_and_limit(url: &str) {
    let k = KnowledgeConfig::for_url(url).open().await.unwrap();
    let mut rows: Vec<String> = vec![
        "(167772160, 184549375, 'wide')".into(),
        "(167837696, 167903231, 'narrow')".into(),
        "(167837952, 167838207, 'tiny')".into(),
    ];
    rows.extend((0..40).map(|i| format!("({i}, {i}, 'k{}')", i % 8)));
    k.provider()
        .execute(&format!(
            "create table r (lo bigint, hi bigint, zone varchar(20));
insert into r values {};",
            rows.join(", ")
        ))
        .await
        .unwrap();
    let rule = "name : t\n---\n\
                zone = select zone from r where lo <= ip4_int(read(ip)) and hi >= ip4_int(read(ip)) order by lo desc limit 1 ;\n\
                last = select lo from r where zone = read(z) order by lo desc ;\n\
                first = select lo from r where zone = read(z) order by zone, lo asc limit 1 ;\n";
    let rule = Engine::new()
        .unwrap()
        .load_source("o.oml", rule, &omlet::LoadOptions::new().knowledge(k))
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let zone = |ip: &str, z: &str| omlet::record::from_json_str(&format!(r#"{{"ip":"{ip}","z":"{z}"}}"#)).unwrap();
    let out = rule.evaluate(&zone("10.1.1.9", "k3")).await.unwrap();
    assert_eq!(omlet::record::to_json_string(&out), r#"{"zone":"tiny","last":35,"first":3}"#, "{url}");
    let out = rule.evaluate(&zone("10.1.9.9", "k0")).await.unwrap();
    assert_eq!(omlet::record::to_json_string(&out), r#"{"zone":"narrow","last":32,"first":0}"#, "{url}");
    // Concurrent misses of `last` and `first` may go batched: the same answers.
    let records: Vec<omlet::Record> = (0..64).map(|i| zone("10.9.9.9", &format!("k{}", i % 8))).collect();
    let outs = futures_util::future::join_all(records.iter().map(|r| rule.evaluate(r))).await;
    for (i, out) in outs.into_iter().enumerate() {
        let k = i % 8;
        let want = format!(r#"{{"zone":"wide","last":{},"first":{k}}}"#, 32 + k);
        assert_eq!(omlet::record::to_json_string(&out.unwrap()), want, "{url}: k{k}");
    }
}

/// IPv6 ranges and networks: a table keyed by `ip_key` text,
/// looked up with helpers of values (computed by the guest) on every
/// database; helpers of columns where the database has them, and a clear
/// refusal at load where it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_ranges_by_key_on_postgres() {
    let pg = Postgres::start();
    ipv6_ranges_by_key(&pg.url(), &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_ranges_by_key_on_mariadb() {
    let db = MariaDb::start();
    ipv6_ranges_by_key(&db.url(), &["ip_key"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_ranges_by_key_on_sqlite() {
    ipv6_ranges_by_key("sqlite::memory:", &["ip_key", "cidr_contains"]).await;
}

async fn ipv6_ranges_by_key(url: &str, on_columns: &[&str]) {
    let k = KnowledgeConfig::for_url(url).open().await.unwrap();
    k.provider()
        .execute(
            "create table geo (lo varchar(32), hi varchar(32), country varchar(8), net varchar(43), addr varchar(40));
             insert into geo values
               ('20010db8000000000000000000000000', '20010db8ffffffffffffffffffffffff', 'XX', '2001:db8::/32', '2001:db8::9'),
               ('00000000000000000000ffff0a000000', '00000000000000000000ffff0affffff', 'LAN', '10.0.0.0/8', '10.1.2.3');",
        )
        .await
        .unwrap();
    let engine = Engine::new().unwrap();
    let options = omlet::LoadOptions::new().knowledge(k);
    let rule = "name : t\n---\n\
                c = select country from geo where lo <= ip_key(read(ip)) and hi >= ip_key(read(ip)) ;\n\
                n = select country from geo where lo = cidr_min_key(read(net)) ;\n";
    let rule = engine.load_source("g.oml", rule, &options).await.unwrap_or_else(|e| panic!("{url}: {e}"));
    for (ip, want) in [("2001:DB8::7", "XX"), ("10.200.0.1", "LAN"), ("::ffff:10.0.0.1", "LAN")] {
        let input = format!(r#"{{"ip":"{ip}","net":"2001:db8:0:0::/32"}}"#);
        let out = rule.evaluate(&omlet::record::from_json_str(&input).unwrap()).await.unwrap();
        assert_eq!(omlet::record::to_json_string(&out), format!(r#"{{"c":"{want}","n":"XX"}}"#), "{url}: {ip}");
    }
    let on_column = [
        ("ip_key", "c = select country from geo where ip_key(addr) = ip_key(read(ip)) ;", r#"{"c":"XX"}"#),
        ("cidr_contains", "c = select country from geo where cidr_contains(read(ip), net) = 1 ;", r#"{"c":"XX"}"#),
    ];
    for (helper, stmt, want) in on_column {
        let loaded = engine.load_source("g.oml", &format!("name : t\n---\n{stmt}\n"), &options).await;
        if on_columns.contains(&helper) {
            let rule = loaded.unwrap_or_else(|e| panic!("{url}: {e}"));
            let out = rule.evaluate(&omlet::record::from_json_str(r#"{"ip":"2001:db8::9"}"#).unwrap()).await.unwrap();
            assert_eq!(omlet::record::to_json_string(&out), want, "{url}: {helper}");
        } else {
            let err = loaded.err().unwrap_or_else(|| panic!("{url}: {helper} on a column must be refused")).to_string();
            assert!(err.contains(&format!("`{helper}` is applied to a column")), "{url}: {err}");
        }
    }
}

/// The README's embedding example (host/examples/embed_postgres.rs), run as
/// its own program against a throwaway server holding the nginx example's
/// table, loaded with psql as examples/embed-postgres/README.md says.
#[test]
fn the_postgres_embedding_example_enriches_a_record() {
    // The README's command names the package whose examples/ holds the program.
    let readme = std::fs::read_to_string(root().join("examples/embed-postgres/README.md")).unwrap();
    let manifest = std::fs::read_to_string(root().join("host/Cargo.toml")).unwrap();
    let package = manifest.lines().find_map(|l| l.strip_prefix("name = ")).unwrap().trim_matches('"');
    assert!(root().join("host/examples/embed_postgres.rs").exists());
    let command = format!("cargo run -q -p {package} --example embed_postgres");
    assert!(readme.contains(&command), "examples/embed-postgres/README.md does not say `{command}`");
    let pg = Postgres::start();
    let csv = root().join("examples/nginx/knowdb/ip_zone.csv");
    let load = format!(
        "create table ip_zone (cidr text, lo_int bigint, hi_int bigint, zone text, owner text);\n\\copy ip_zone from '{}' csv header\n",
        csv.display()
    );
    let mut psql = std::process::Command::new("psql")
        .args([pg.url().as_str(), "-v", "ON_ERROR_STOP=1", "-q"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(psql.stdin.as_mut().unwrap(), load.as_bytes()).unwrap();
    let out = psql.wait_with_output().unwrap();
    assert!(out.status.success(), "psql: {}", String::from_utf8_lossy(&out.stderr));
    // `cargo test` builds the examples next to the test binaries.
    let exe = std::env::current_exe().unwrap();
    let example = exe.parent().unwrap().parent().unwrap().join("examples").join("embed_postgres");
    assert!(example.exists(), "{} is missing: cargo test builds it", example.display());
    let out = std::process::Command::new(&example).env("OMLET_PG_URL", pg.url()).current_dir(root()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    let record: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!((record["zone"].as_str(), record["owner"].as_str()), (Some("dmz"), Some("web-team")), "{stdout}");
    let stats: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(stats["queries"], 1, "{stdout}");
}

// ----- the sandbox: what a rule may reach ----------------------------------------

async fn load_err(k: Arc<Knowledge>, rule: &str) -> String {
    match Engine::new().unwrap().load_source("evil.oml", rule, &omlet::LoadOptions::new().knowledge(k)).await {
        Ok(_) => panic!("the load must fail: {rule}"),
        Err(e) => e.to_string(),
    }
}

/// Catalogue tables, functions outside the allow-list and tables outside
/// `tables` fail the load with the rule's position, on a real server.
/// Catalogue tables are refused even when `tables` lists them.
async fn rules_reach_only_their_tables(url: &str, catalogue: &[&str], file_fn: &str) {
    let k = KnowledgeConfig::for_url(url).open().await.unwrap();
    perf_table(&k, 3).await;
    for table in catalogue {
        let rule = format!("name : t\n---\nv = select value from {table} where id = read(id) ;\n");
        let m = load_err(k.clone(), &rule).await;
        assert!(m.starts_with("evil.oml:3:5:") && m.contains("catalog"), "{m}");
        let mut c = KnowledgeConfig::for_url(url);
        c.tables = Some(vec![table.to_string(), "perf".into()]);
        let m = load_err(c.open().await.unwrap(), &rule).await;
        assert!(m.contains("catalog") && m.contains("even when `tables` lists it"), "{m}");
    }
    // The session's user is no column (it was a user-name oracle).
    let m = load_err(k.clone(), "name : t\n---\nv = select value from perf where current_user = read(u) ;\n").await;
    assert!(m.contains("`current_user` is not a column name"), "{m}");
    let m =
        load_err(k.clone(), &format!("name : t\n---\nv = select value from perf where value = {file_fn}(read(path)) ;\n")).await;
    assert!(m.contains(&format!("the function `{file_fn}` is not allowed")), "{m}");
    let m = load_err(k.clone(), "name : t\n---\nv = select value from perf where 1 = sleep(read(s)) ;\n").await;
    assert!(m.contains("`sleep` is not allowed"), "{m}");
    // With `tables` set, only those tables.
    let mut c = KnowledgeConfig::for_url(url);
    c.tables = Some(vec!["other".into()]);
    let m = load_err(c.open().await.unwrap(), PERF_RULE).await;
    assert!(m.contains("the table `perf` is not among"), "{m}");
    // A component built by hand can carry any SQL: the host reads it again.
    let err = k.bind(&[statement("select value from perf where id = :id union select usename from pg_user", &["id"])]).await;
    assert!(err.is_err_and(|e| e.to_string().contains("not a lookup omlet runs")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_reach_only_their_tables_on_postgres() {
    let pg = Postgres::start();
    rules_reach_only_their_tables(
        &pg.url(),
        &["pg_catalog.pg_authid", "pg_authid", "pg_shadow", "pg_settings", "pg_stat_activity", "information_schema.tables"],
        "pg_read_file",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rules_reach_only_their_tables_on_mariadb() {
    let m = MariaDb::start();
    rules_reach_only_their_tables(
        &m.url(),
        &["mysql.user", "performance_schema.threads", "sys.session", "information_schema.tables"],
        "load_file",
    )
    .await;
}

/// MariaDB reads `\` in a literal as an escape unless NO_BACKSLASH_ESCAPES is
/// on; omlet's SQL (and the guard) read it as a character, as standard SQL
/// does. Without the session mode, `'\'` never ends, and the statement
/// either fails or (with a quote later on) means something else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backslash_in_a_literal_is_a_character_on_mariadb() {
    let m = MariaDb::start();
    let k = KnowledgeConfig::for_url(&m.url()).open().await.unwrap();
    // The row's key is one backslash (inserted through the pool, also in that mode).
    k.provider().execute(BACKSLASH_TABLE).await.unwrap();
    backslash_is_a_character(&k, "union select user from mysql.user").await;
}

/// A table whose key `k` is one backslash.
const BACKSLASH_TABLE: &str =
    "create table bs (k text, v text); insert into bs values ('\\', 'one backslash'), ('x', 'escaped');";

/// The lookups of the backslash tests, on a knowledge base holding
/// [`BACKSLASH_TABLE`]: `'\'` is one backslash, and the issue's escape,
/// which would run `union` were `\` an escape, finds the row and no other.
async fn backslash_is_a_character(k: &Knowledge, union: &str) {
    let bound = k.bind(&[statement("select v from bs where k = '\\' and v != :p", &["p"])]).await.unwrap();
    let row = k.query(&bound[0], &[omlet_lang::Cell::Text("none".into())]).await.unwrap();
    assert_eq!(row, Some(vec![omlet_lang::Cell::Text("one backslash".into())]));
    let escape = format!("select v from bs where k = trim_quotes('\\') or k = ') {union} -- '");
    let bound = k.bind(&[statement(&escape, &[])]).await.unwrap();
    let row = k.query(&bound[0], &[]).await.unwrap();
    assert_eq!(row, Some(vec![omlet_lang::Cell::Text("one backslash".into())]), "no row from `{union}`");
}

/// PostgreSQL reads `\` in a literal as an escape when
/// `standard_conforming_strings` is off, which a server, database or role
/// may set: `'\'` then never ends where the guard saw it end, and
/// the rest of the statement can be a UNION. Every connection sets it on
/// (and `backslash_quote` off) whatever the role says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backslash_in_a_literal_is_a_character_on_postgres() {
    let pg = Postgres::start();
    let admin = KnowledgeConfig::for_url(&pg.url()).open().await.unwrap();
    admin
        .provider()
        .execute(&format!(
            "{BACKSLASH_TABLE} alter role current_user set standard_conforming_strings = off;
                 alter role current_user set backslash_quote = on;"
        ))
        .await
        .unwrap();
    admin.provider().close().await;
    // New sessions of the role start with backslash escapes on.
    let k = KnowledgeConfig::for_url(&pg.url()).open().await.unwrap();
    backslash_is_a_character(&k, "union select usename::text from pg_user").await;
    // A lookup connection says so itself.
    let settings = omlet::knowledge::BoundStatement {
        sql: "select current_setting('standard_conforming_strings') || ' ' || current_setting('backslash_quote')".into(),
        order: Vec::new(),
        param_types: Vec::new(),
        columns: Vec::new(),
        stats: 0,
        source: 0,
        batch: None,
        memory: None,
        path: "sql".into(),
    };
    let row = k.provider().query_first(&settings, Vec::new()).await.unwrap();
    assert_eq!(row, Some(vec![omlet_lang::Cell::Text("on off".into())]));
}

/// SQLite never reads `\` as an escape; the same lookups as on the servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backslash_in_a_literal_is_a_character_on_sqlite() {
    let k = KnowledgeConfig::for_url("sqlite::memory:").open().await.unwrap();
    k.provider().execute(BACKSLASH_TABLE).await.unwrap();
    backslash_is_a_character(&k, "union select name from sqlite_master").await;
}

/// A statement nesting 50,000 parentheses overflowed the guard's stack at
/// load and aborted the process: now the load fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_lookups_fail_the_load_not_the_process() {
    let k = KnowledgeConfig::for_url("sqlite::memory:").open().await.unwrap();
    perf_table(&k, 3).await;
    let nested = |n: usize| format!("select value from perf where {}id = :id{}", "(".repeat(n), ")".repeat(n));
    let err = k.bind(&[statement(&nested(50_000), &["id"])]).await.unwrap_err();
    assert!(matches!(err, omlet::knowledge::Error::Limit { limit: omlet::knowledge::Limit::StatementBytes, .. }), "{err}");
    assert!(err.to_string().contains("t.oml:1:1"), "{err}");
    let err = k.bind(&[statement(&nested(30_000), &["id"])]).await.unwrap_err();
    assert!(err.to_string().contains("nested more than 64 deep"), "{err}");
    assert!(k.bind(&[statement(&nested(64), &["id"])]).await.is_ok());
}

/// On MySQL and MariaDB each helper call is written out inline and copies
/// its argument up to fifteen times: `ip4_int` nested nine deep took 763 MB
/// at load. The rewrite stops at 64 KiB with a typed error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_helpers_stop_at_the_size_bound_on_mariadb() {
    let m = MariaDb::start();
    let k = KnowledgeConfig::for_url(&m.url()).open().await.unwrap();
    perf_table(&k, 3).await;
    let mut arg = "value".to_string();
    for _ in 0..12 {
        arg = format!("ip4_int({arg})");
    }
    let started = std::time::Instant::now();
    let err = k.bind(&[statement(&format!("select value from perf where {arg} = :id"), &["id"])]).await.unwrap_err();
    assert!(matches!(err, omlet::knowledge::Error::Limit { limit: omlet::knowledge::Limit::StatementBytes, .. }), "{err}");
    assert!(err.to_string().contains("longer than 65536 bytes"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
    // Two deep is fine, and runs.
    let bound = k.bind(&[statement("select value from perf where ip4_int(ip4_int(id)) = :id", &["id"])]).await.unwrap();
    let row = k.query(&bound[0], &[omlet_lang::Cell::Integer(2)]).await.unwrap();
    assert_eq!(row, Some(vec![omlet_lang::Cell::Text("v2".into())]));
}

/// The guard reads function names in any case; the rewrite now does too, so
/// `IP4_INT(…)` is omlet's helper, never a function of that name that the
/// database's users created.
async fn upper_case_helpers_are_omlets_own(url: &str, impostor: &str) {
    let k = KnowledgeConfig::for_url(url).open().await.unwrap();
    k.provider()
        .execute(&format!(
            "create table hosts (addr text, name text); insert into hosts values ('10.1.2.3', 'db-1'), ('bogus', 'x'); {impostor}"
        ))
        .await
        .unwrap();
    let bound = k
        .bind(&[
            statement("select name from hosts where IP4_INT(addr) = :n", &["n"]),
            statement("select name from hosts where Ip4_Int(addr) = 42 and name = :n", &["n"]),
        ])
        .await
        .unwrap();
    let row = k.query(&bound[0], &[omlet_lang::Cell::Integer(167838211)]).await.unwrap();
    assert_eq!(row, Some(vec![omlet_lang::Cell::Text("db-1".into())]));
    let row = k.query(&bound[1], &[omlet_lang::Cell::Text("db-1".into())]).await.unwrap();
    assert_eq!(row, None, "the database's own ip4_int ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upper_case_helpers_are_omlets_own_on_postgres() {
    let pg = Postgres::start();
    let impostor = "create function public.ip4_int(t text) returns bigint language sql as $$ select 42::bigint $$;";
    upper_case_helpers_are_omlets_own(&pg.url(), impostor).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upper_case_helpers_are_omlets_own_on_mariadb() {
    let m = MariaDb::start();
    let impostor = "create function ip4_int(t text) returns bigint deterministic return 42;";
    upper_case_helpers_are_omlets_own(&m.url(), impostor).await;
}

/// With a system schema as the URL's database, every unqualified table a
/// lookup names would be a catalog table (`user` is `mysql.user`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_system_schema_as_the_database_is_refused_on_mariadb() {
    let m = MariaDb::start();
    for db in ["mysql", "sys", "performance_schema"] {
        let url = format!("mysql://root@127.0.0.1:{}/{db}", m.port);
        let err = KnowledgeConfig::for_url(&url).open().await.err().expect("the open must fail");
        assert!(err.to_string().contains("system schema"), "{err}");
    }
}

/// A lookup cut by omlet's timeout is cancelled in the server too.
async fn timed_out_lookups_stop_in_the_server(url: &str, slow_fn: &str, running: &str) {
    let admin = KnowledgeConfig::for_url(url).open().await.unwrap();
    perf_table(&admin, 3).await;
    admin.provider().execute(slow_fn).await.unwrap();
    let mut c = KnowledgeConfig::for_url(url);
    c.cache.mode = CacheMode::Bypass;
    c.query_timeout_ms = 300;
    c.functions = vec!["slow".into()];
    let k = c.open().await.unwrap();
    let rule = Engine::new()
        .unwrap()
        .load_source(
            "slow.oml",
            "name : t\n---\nv = select value from perf where value = slow(read(k)) ;\n",
            &omlet::LoadOptions::new().knowledge(k.clone()),
        )
        .await
        .map(Arc::new)
        .unwrap();
    let started = std::time::Instant::now();
    let tasks: Vec<_> = (0..4)
        .map(|i| {
            let rule = rule.clone();
            tokio::spawn(
                async move { rule.evaluate(&omlet::record::from_json_str(&format!("{{\"k\":\"v{i}\"}}")).unwrap()).await },
            )
        })
        .collect();
    for t in tasks {
        // `absent`: the record is written without the lookup's value.
        assert_eq!(omlet::record::to_json_string(&t.await.unwrap().unwrap()), "{}");
    }
    // Well below the 30 s the function sleeps, with room for a loaded machine.
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "the lookups waited {:?}", started.elapsed());
    // The server gives up too (well before the 30 s the function sleeps).
    let mut left = i64::MAX;
    for _ in 0..50 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        left = count_running(url, running).await;
        if left == 0 {
            break;
        }
    }
    assert_eq!(left, 0, "lookups still running in the server");
}

async fn count_running(url: &str, sql: &str) -> i64 {
    use sqlx::{Connection, Row};
    if url.starts_with("postgres") {
        let mut c = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(sql.to_string())).fetch_one(&mut c).await.unwrap().get::<i64, _>(0)
    } else {
        let mut c = sqlx::MySqlConnection::connect(url).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(sql.to_string())).fetch_one(&mut c).await.unwrap().get::<i64, _>(0)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_lookups_stop_in_the_server_on_postgres() {
    let pg = Postgres::start();
    timed_out_lookups_stop_in_the_server(
        &pg.url(),
        "create function slow(k text) returns text language sql as $$ select pg_sleep(30)::text || k $$",
        "select count(*)::bigint from pg_stat_activity where state = 'active' and query like '%slow(%' and pid <> pg_backend_pid()",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_lookups_stop_in_the_server_on_mariadb() {
    let m = MariaDb::start();
    timed_out_lookups_stop_in_the_server(
        &m.url(),
        "create function slow(k text) returns text not deterministic begin do sleep(30); return k; end",
        "select cast(count(*) as signed) from information_schema.processlist where info like '%slow(%' and id <> connection_id()",
    )
    .await;
}

/// With every eighth key containing a NUL byte (which PostgreSQL refuses in
/// text), batched misses fail only for those keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_fails_only_its_own_lookup_in_a_batch_on_postgres() {
    let pg = Postgres::start();
    let mut c = outage_config(&pg.url(), OnLookupError::Fail);
    c.query_timeout_ms = 5000;
    let k = c.open().await.unwrap();
    k.provider().execute("create table names (name text primary key, v text); insert into names select 'n' || i, 'v' || i from generate_series(1, 64) i;").await.unwrap();
    let bound = Arc::new(k.bind(&[statement("select v from names where name = :name", &["name"])]).await.unwrap());
    assert!(bound[0].batch.is_some());
    let tasks: Vec<_> = (1..=64)
        .map(|i: i64| {
            let (k, bound) = (k.clone(), bound.clone());
            let key = if i % 8 == 0 { format!("n\u{0}{i}") } else { format!("n{i}") };
            tokio::spawn(async move { (i, k.query(&bound[0], &[omlet_lang::Cell::Text(key)]).await) })
        })
        .collect();
    let mut failed = Vec::new();
    for t in tasks {
        let (i, row) = t.await.unwrap();
        match row {
            Ok(row) => assert_eq!(row, Some(vec![omlet_lang::Cell::Text(format!("v{i}"))]), "key {i}"),
            Err(_) => failed.push(i),
        }
    }
    assert_eq!(failed, (1..=8).map(|i| i * 8).collect::<Vec<_>>(), "only the NUL keys fail");
    assert!(k.stats().batched.load(std::sync::atomic::Ordering::Relaxed) > 0, "some misses were batched");
}

/// docs/deployment.md's read-only role: lookups work through it, and the
/// role can neither write nor read a table it was not granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_role_serves_lookups_on_postgres() {
    let pg = Postgres::start();
    let admin = KnowledgeConfig::for_url(&pg.url()).open().await.unwrap();
    perf_table(&admin, 3).await;
    admin
        .provider()
        .execute(
            "create table secrets (id integer, value text);
             create role omlet_ro login password 'ro-pass';
             grant connect on database postgres to omlet_ro;
             grant usage on schema public to omlet_ro;
             grant select on perf to omlet_ro;
             alter role omlet_ro set default_transaction_read_only = on;",
        )
        .await
        .unwrap();
    let url = format!("postgres://omlet_ro:ro-pass@127.0.0.1:{}/postgres", pg.port);
    read_only_role_serves_lookups(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_role_serves_lookups_on_mariadb() {
    let m = MariaDb::start();
    let admin = KnowledgeConfig::for_url(&m.url()).open().await.unwrap();
    perf_table(&admin, 3).await;
    admin
        .provider()
        .execute(
            "create table secrets (id integer, value text);
             create user 'omlet_ro'@'%' identified by 'ro-pass';
             grant select on demo.perf to 'omlet_ro'@'%';",
        )
        .await
        .unwrap();
    let url = format!("mysql://omlet_ro:ro-pass@127.0.0.1:{}/demo", m.port);
    read_only_role_serves_lookups(&url).await;
}

async fn read_only_role_serves_lookups(url: &str) {
    let mut c = KnowledgeConfig::for_url(url);
    c.tables = Some(vec!["perf".into(), "secrets".into()]);
    let k = c.open().await.unwrap();
    let rule =
        Engine::new().unwrap().load_source("t.oml", PERF_RULE, &omlet::LoadOptions::new().knowledge(k.clone())).await.unwrap();
    assert_eq!(omlet::record::to_json_string(&rule.evaluate(&rec(2)).await.unwrap()), r#"{"v":"v2","k":"k"}"#);
    assert!(k.provider().execute("insert into perf values (9, 'v9')").await.is_err(), "the role must not write");
    // Allowed by omlet's config here, refused by the server's grants.
    let secret = "name : t\n---\nv = select value from secrets where id = read(id) ;\n";
    let refused = match Engine::new().unwrap().load_source("t.oml", secret, &omlet::LoadOptions::new().knowledge(k.clone())).await
    {
        Err(_) => true,
        Ok(rule) => rule.evaluate(&rec(1)).await.map(|r| omlet::record::to_json_string(&r) == "{}").unwrap_or(true),
    };
    assert!(refused, "the role must not read `secrets`");
}

// ----- faults between omlet and the database -------------------------------------

/// Latency, stalls and resets between omlet and the server, under both
/// failure policies: a fault within the timeout costs time only; past it,
/// every lookup ends within the timeout (absent, or the record fails); after
/// a reset, lookups recover. Prints one `FAULT` line per cell (RELIABILITY.md).
async fn fault_matrix(db: &str, url: &str, server_port: u16) {
    let admin = KnowledgeConfig::for_url(url).open().await.unwrap();
    perf_table(&admin, 3).await;
    let proxy = FaultProxy::start(server_port);
    for policy in [OnLookupError::Absent, OnLookupError::Fail] {
        let mut c = outage_config(&proxy.url(url, server_port), policy);
        c.query_timeout_ms = 500;
        c.connect_timeout_ms = 500;
        let k = c.open().await.unwrap();
        let rule = Engine::new()
            .unwrap()
            .load_source("t.oml", PERF_RULE, &omlet::LoadOptions::new().knowledge(k.clone()))
            .await
            .unwrap();
        let cells: [(Fault, &str, bool); 6] = [
            (Fault::Pass, "pass", true),
            (Fault::Latency(50), "latency 50 ms", true),
            (Fault::Latency(2000), "latency 2 s", false),
            (Fault::Stall, "stall", false),
            (Fault::Reset, "reset", false),
            (Fault::Pass, "pass again", true),
        ];
        for (fault, name, answered) in cells {
            proxy.set(fault);
            let started = std::time::Instant::now();
            // After a fault, the first lookup may find its connection dead: give it a few tries.
            let mut got = rule.evaluate(&rec(2)).await;
            if answered {
                for _ in 0..20 {
                    if got.as_ref().is_ok_and(|r| omlet::record::to_json_string(r).contains("v2")) {
                        break;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    got = rule.evaluate(&rec(2)).await;
                }
            }
            let ms = started.elapsed().as_millis();
            let outcome = match &got {
                Ok(r) if omlet::record::to_json_string(r).contains("v2") => "answered",
                Ok(_) => "absent",
                Err(_) => "record failed",
            };
            eprintln!("FAULT {db} | {name} | {policy:?} | {outcome} | {ms} ms");
            let want = match (answered, policy) {
                (true, _) => "answered",
                (false, OnLookupError::Absent) => "absent",
                (false, OnLookupError::Fail) => "record failed",
            };
            assert_eq!(outcome, want, "{db}, {name}, {policy:?}: {got:?}");
            // No lookup waits forever: query timeout plus connect timeout, with room.
            assert!(ms < 4000, "{db}, {name}, {policy:?}: {ms} ms");
        }
        proxy.set(Fault::Pass);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_between_omlet_and_postgres() {
    let pg = Postgres::start();
    fault_matrix("PostgreSQL", &pg.url(), pg.port).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_between_omlet_and_mariadb() {
    let m = MariaDb::start();
    fault_matrix("MariaDB", &m.url(), m.port).await;
}

/// How long a test waits for a change to reach lookups before it fails:
/// long enough that only a reload that never comes fails, on however loaded
/// a machine. How fast it comes (within a second here) is what the tests
/// print, not what they assert.
const REACHES_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// Evaluates `id` through `rule` until `want` comes out, for at most `within`;
/// returns how long it took.
async fn until_value(rule: &omlet::Rule, id: i64, want: &str, within: std::time::Duration) -> std::time::Duration {
    let start = std::time::Instant::now();
    loop {
        let out = rule.evaluate(&rec(id)).await.unwrap();
        if out.to_json().contains(&format!("\"v\":\"{want}\"")) {
            return start.elapsed();
        }
        assert!(start.elapsed() < within, "still {} after {within:?}", out.to_json());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A change in PostgreSQL reaches both caches (shared and guest) through a
/// NOTIFY from a trigger, as docs/deployment.md shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notify_reloads_the_caches_on_postgres() {
    let pg = Postgres::start();
    let mut c = KnowledgeConfig::for_url(&pg.url());
    c.reload.channel = Some("knowledge.reload".into());
    let k = c.open().await.unwrap();
    perf_table(&k, 10).await;
    k.provider()
        .execute(
            "create function knowledge_changed() returns trigger language plpgsql as $$ \
             begin perform pg_notify('knowledge.reload', ''); return null; end $$",
        )
        .await
        .unwrap();
    k.provider()
        .execute(
            "create trigger perf_reload after insert or update or delete or truncate on perf \
             for each statement execute function knowledge_changed()",
        )
        .await
        .unwrap();
    let _watcher = omlet::knowledge::reload::watch(&k).await.unwrap().expect("a watcher");
    let rule =
        Engine::new().unwrap().load_source("t.oml", PERF_RULE, &omlet::LoadOptions::new().knowledge(k.clone())).await.unwrap();
    until_value(&rule, 3, "v3", REACHES_WITHIN).await;
    // Cached now: without the reload the old value would stay.
    let generation = k.generation();
    k.provider().execute("update perf set value = 'changed' where id = 3").await.unwrap();
    let took = until_value(&rule, 3, "changed", REACHES_WITHIN).await;
    assert!(k.generation() > generation);
    eprintln!("NOTIFY reload seen after {took:?}");
}

/// MariaDB has no LISTEN: a version row read every `poll_ms` does the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_version_row_reloads_the_caches_on_mariadb() {
    let db = MariaDb::start();
    let mut c = KnowledgeConfig::for_url(&db.url());
    c.reload.poll_query = Some("select version from knowledge_version".into());
    c.reload.poll_ms = 200;
    let k = c.open().await.unwrap();
    perf_table(&k, 10).await;
    k.provider().execute("create table knowledge_version (version bigint not null)").await.unwrap();
    k.provider().execute("insert into knowledge_version values (1)").await.unwrap();
    let _watcher = omlet::knowledge::reload::watch(&k).await.unwrap().expect("a watcher");
    let rule =
        Engine::new().unwrap().load_source("t.oml", PERF_RULE, &omlet::LoadOptions::new().knowledge(k.clone())).await.unwrap();
    until_value(&rule, 3, "v3", REACHES_WITHIN).await;
    k.provider().execute("update perf set value = 'changed' where id = 3").await.unwrap();
    // The row changed but the version did not: the cached answer stays.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(rule.evaluate(&rec(3)).await.unwrap().to_json().contains("\"v\":\"v3\""));
    k.provider().execute("update knowledge_version set version = version + 1").await.unwrap();
    let took = until_value(&rule, 3, "changed", REACHES_WITHIN).await;
    eprintln!("version-row reload seen after {took:?}");
}

/// A bad `[reload]` fails at start, not later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_reload_setting_fails_when_the_watcher_starts() {
    let mut c = KnowledgeConfig::for_url("sqlite::memory:");
    c.reload.channel = Some("x".into());
    let k = c.open().await.unwrap();
    let e = omlet::knowledge::reload::watch(&k).await.err().expect("LISTEN needs PostgreSQL").to_string();
    assert!(e.contains("PostgreSQL"), "{e}");
    let mut c = KnowledgeConfig::for_url("sqlite::memory:");
    c.reload.poll_query = Some("select version from no_such_table".into());
    let k = c.open().await.unwrap();
    let e = omlet::knowledge::reload::watch(&k).await.err().expect("a failing poll query").to_string();
    assert!(e.contains("no_such_table"), "{e}");
}

/// Issue 31, delta §13.9: a Warp Parse knowdb with local tables beside
/// named databases (`[[provider.sqldb]]`). Each lookup goes where its first
/// table says: a local table to the knowdb's SQLite, `geo.public.…` to
/// PostgreSQL and `asset.…` to MariaDB with the prefix removed, and a lone
/// unnamed database takes what names no local table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_are_routed_by_their_first_table_among_a_knowdbs_databases() {
    let (pg, maria) = (Postgres::start(), MariaDb::start());
    let admin = KnowledgeConfig::for_url(&pg.url()).open().await.unwrap();
    admin
        .provider()
        .execute(
            "create table public.ip_geo_city (ip text primary key, country text, city text); \
             insert into public.ip_geo_city values ('10.0.0.7', 'FR', 'Lyon'), ('10.9.9.9', 'JP', 'Osaka')",
        )
        .await
        .unwrap();
    let admin_m = KnowledgeConfig::for_url(&maria.url()).open().await.unwrap();
    admin_m.provider().execute("create table inventory (ip varchar(64) primary key, owner text)").await.unwrap();
    admin_m.provider().execute("insert into inventory values ('10.0.0.7', 'alice')").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("zone")).unwrap();
    std::fs::write(d.join("zone/create.sql"), "create table {table} (ip text, zone text)").unwrap();
    std::fs::write(d.join("zone/insert.sql"), "insert into {table} values (?1, ?2)").unwrap();
    std::fs::write(d.join("zone/data.csv"), "ip,zone\n10.0.0.7,dmz\n").unwrap();
    let tables = "version = 2\n[[tables]]\nname = \"zone\"\ncolumns.by_header = [\"ip\", \"zone\"]\n";
    std::fs::write(
        d.join("knowdb.toml"),
        format!(
            "{tables}\n[[provider.sqldb]]\nname = \"geo\"\nkind = \"postgres\"\nconnection_uri = \"{}\"\n\n\
             [[provider.sqldb]]\nname = \"asset\"\nkind = \"mysql\"\nconnection_uri = \"{}\"\npool_size = 2\n",
            pg.url(),
            maria.url()
        ),
    )
    .unwrap();
    let k = KnowledgeConfig { knowdb: Some(d.join("knowdb.toml")), ..Default::default() }.open().await.unwrap();
    let rule = "name : t\n---\n\
        zone = select zone from zone where ip = read(ip) ;\n\
        country, city = select country, city from geo.public.ip_geo_city where ip = read(ip) ;\n\
        owner = select owner from asset.inventory where ip = read(ip) ;\n";
    let opts = omlet::LoadOptions::new().knowledge(k.clone());
    let rule = Engine::new().unwrap().load_source("t.oml", rule, &opts).await.unwrap();
    let out = rule.evaluate(&omlet::record::from_json_str(r#"{"ip":"10.0.0.7"}"#).unwrap()).await.unwrap();
    assert_eq!(omlet::record::to_json_string(&out), r#"{"zone":"dmz","country":"FR","city":"Lyon","owner":"alice"}"#);
    let out = rule.evaluate(&omlet::record::from_json_str(r#"{"ip":"10.9.9.9"}"#).unwrap()).await.unwrap();
    assert_eq!(omlet::record::to_json_string(&out), r#"{"country":"JP","city":"Osaka"}"#);
    let stats = k.stats().to_json();
    let databases: Vec<_> = stats["statements"].as_array().unwrap().iter().map(|s| s["database"].clone()).collect();
    assert!(databases.contains(&serde_json::json!("geo")) && databases.contains(&serde_json::json!("asset")), "{stats}");
    // What a routed lookup may read: the catalog stays out of reach, and an
    // unknown prefix is no database (the local one refuses a qualified name).
    let refused = |sql: &'static str| {
        let k = k.clone();
        async move {
            let stmt = statement(sql, &["a"]);
            match k.bind(&[stmt]).await {
                Ok(_) => panic!("{sql} was bound"),
                Err(e) => e.to_string(),
            }
        }
    };
    let e = refused("select usename from geo.pg_catalog.pg_user where usename = :a").await;
    assert!(e.contains("on the database `geo`") && e.contains("catalog"), "{e}");
    let e = refused("select a from other.t where a = :a").await;
    assert!(e.contains("`other` is no database of the knowdb: geo, asset"), "{e}");
    let e = refused("select owner from asset.mysql.user where owner = :a").await;
    assert!(e.contains("catalog"), "{e}");
    // A column the routed table lacks: the error shows the lookup as the
    // rule wrote it, prefix and all, and the column it meant.
    let e = refused("select contry from geo.public.ip_geo_city where ip = :a").await;
    assert!(e.contains("select contry from geo.public.ip_geo_city") && e.contains("did you mean `country`"), "{e}");

    // One unnamed database beside local tables: it takes every lookup that
    // names no local table.
    std::fs::write(
        d.join("knowdb.toml"),
        format!("{tables}\n[provider.sqldb]\nkind = \"postgres\"\nconnection_uri = \"{}\"\n", pg.url()),
    )
    .unwrap();
    let k = KnowledgeConfig { knowdb: Some(d.join("knowdb.toml")), ..Default::default() }.open().await.unwrap();
    let bound = k
        .bind(&[
            statement("select zone from zone where ip = :a", &["a"]),
            statement("select city from ip_geo_city where ip = :a", &["a"]),
        ])
        .await
        .unwrap();
    assert_eq!((bound[0].source, bound[1].source), (0, 1));
    let ip = [omlet_lang::Cell::Text("10.0.0.7".into())];
    assert_eq!(k.query(&bound[0], &ip).await.unwrap(), Some(vec![omlet_lang::Cell::Text("dmz".into())]));
    assert_eq!(k.query(&bound[1], &ip).await.unwrap(), Some(vec![omlet_lang::Cell::Text("Lyon".into())]));
    assert!(bound[1].path.contains("sql") && bound[1].path.contains("`default`"), "{}", bound[1].path);
}
