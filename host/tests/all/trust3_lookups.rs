//! The third trust round's lookup bounds: batched and aggregate answers
//! bounded before they are held, and snapshot tables over their limit.

use std::sync::Arc;
use std::time::Duration;

use omlet::knowledge::config::AnyProvider;
use omlet::knowledge::memory::OverLimit;
use omlet::knowledge::{CacheMode, Knowledge, KnowledgeConfig, Limit, OnLookupError, ProviderError};
use omlet_lang::Cell;
use omlet_testdb::{MariaDb, Postgres};

fn text(s: &str) -> Cell {
    Cell::Text(s.into())
}

/// A knowledge on `url` whose answers are bounded at `max_answer` bytes, no cache.
async fn bounded(url: &str, max_answer: u64) -> Arc<Knowledge> {
    let p = match omlet::knowledge::config::connect(url, 4, Duration::from_secs(10)).await.unwrap() {
        AnyProvider::Sqlite(p) => AnyProvider::Sqlite(p.with_max_answer_bytes(max_answer)),
        AnyProvider::Postgres(p) => AnyProvider::Postgres(p.with_max_answer_bytes(max_answer)),
        AnyProvider::MySql(p) => AnyProvider::MySql(p.with_max_answer_bytes(max_answer)),
    };
    let mut config = KnowledgeConfig::for_url(url);
    config.cache.mode = CacheMode::Bypass;
    Arc::new(Knowledge::with_config(p.into_dyn(), config))
}

async fn bind(k: &Knowledge, sql: &str) -> omlet::knowledge::BoundStatement {
    k.bind(&[crate::databases::statement(sql, &["z"])]).await.unwrap().remove(0)
}

/// Zones `a`, `b`, `c` of 2,000 rows each (`lo` in a shuffled order, a
/// 100-byte `pad`), and `z0`..`z39` of one row with a 1000-byte `pad`.
async fn zones(k: &Knowledge) {
    k.provider()
        .execute(
            "create table r (zone varchar(20), lo bigint, pad varchar(2000));
             create index r_zone on r (zone);",
        )
        .await
        .unwrap();
    let mut rows = Vec::new();
    for zone in ["a", "b", "c"] {
        for i in 0..2000i64 {
            rows.push(format!("('{zone}', {}, '{}')", (i * 7919) % 2000, "p".repeat(100)));
        }
    }
    for z in 0..40 {
        rows.push(format!("('z{z}', {z}, '{}')", "q".repeat(1000)));
    }
    for chunk in rows.chunks(500) {
        k.provider().execute(&format!("insert into r values {}", chunk.join(", "))).await.unwrap();
    }
}

/// Trust round 3, item 2: a batch fetched every row of a repeated key and
/// dropped `limit 1`. Now it reads each key's first row in the statement's
/// order, as the statement alone answers, and its rows are bounded.
async fn batches_answer_as_one_key_does(url: &str) {
    let k = bounded(url, 16 << 10).await;
    zones(&k).await;
    let keys = vec![text("a"), text("b"), text("c"), text("none")];
    for sql in [
        "select lo from r where zone = :z order by lo desc limit 1",
        "select lo, zone from r where zone = :z order by lo",
        "select lo from r where zone = :z order by pad, lo desc limit 3",
        "select lo from r where zone = :z",
    ] {
        let stmt = bind(&k, sql).await;
        let plan = stmt.batch.as_ref().unwrap_or_else(|| panic!("{url}: `{sql}` is batched"));
        let rows = k.provider().query_many(plan, keys.clone()).await.unwrap_or_else(|e| panic!("{url}: `{sql}`: {e}"));
        assert_eq!(rows.len(), 3, "{url}: `{sql}`: one row a key");
        if sql.contains("order by") {
            for key in &keys {
                let alone = k.provider().query_first(&stmt, vec![key.clone()]).await.unwrap();
                let batched = rows.iter().find(|r| r[0] == *key).map(|r| r[1..].to_vec());
                assert_eq!(batched, alone, "{url}: `{sql}`: key {key:?}");
            }
        }
    }
    // 40 rows of 1 KB: past the batch's 16 KiB it stops reading.
    let stmt = bind(&k, "select pad from r where zone = :z").await;
    let many: Vec<Cell> = (0..40).map(|z| text(&format!("z{z}"))).collect();
    match k.provider().query_many(stmt.batch.as_ref().unwrap(), many).await {
        Err(ProviderError::Limit { limit: Limit::BatchAnswer, .. }) => {}
        other => panic!("{url}: {:?}", other.map(|r| r.len())),
    }
    // And lookups through the knowledge, concurrent enough to batch, all answer.
    let stmt = Arc::new(bind(&k, "select lo from r where zone = :z order by lo desc limit 1").await);
    let lookups: Vec<_> = (0..64)
        .map(|i| {
            let (k, stmt) = (k.clone(), stmt.clone());
            tokio::spawn(async move { k.query(&stmt, &[text(["a", "b", "c"][i % 3])]).await })
        })
        .collect();
    for l in lookups {
        assert_eq!(l.await.unwrap(), Ok(Some(vec![Cell::Integer(1999)])), "{url}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_answer_as_one_key_does_on_postgres() {
    let pg = Postgres::start();
    batches_answer_as_one_key_does(&pg.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_answer_as_one_key_does_on_mariadb() {
    let db = MariaDb::start();
    batches_answer_as_one_key_does(&db.url()).await;
}

/// Trust round 3, item 3: an aggregate's whole answer was held before the
/// guest refused it. Now the host stops at the answer bound, with an error
/// naming it, and the record fails as the policy says.
async fn an_aggregate_over_the_answer_bound_fails(url: &str, agg: &str) {
    let k = bounded(url, 64 << 10).await;
    zones(&k).await;
    let stmt = bind(&k, &format!("select {agg} from r where zone = :z")).await;
    match k.provider().query_first(&stmt, vec![text("a")]).await {
        Err(ProviderError::Limit { limit: Limit::AnswerBytes, message }) => assert!(message.contains("65536"), "{message}"),
        other => panic!("{url}: 200 KB in one value over a 64 KiB bound: {:?}", other.map(|r| r.map(|r| r.len()))),
    }
    let e = k.query(&stmt, &[text("b")]).await.expect_err("over the bound");
    assert!(e.message.contains("limit reached (lookup answer bytes)"), "{url}: {e:?}");
    let small = k.query(&stmt, &[text("z3")]).await.unwrap().unwrap();
    assert!(matches!(&small[0], Cell::Text(t) if t.len() == 1000), "{url}: {small:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aggregate_over_the_answer_bound_fails_on_postgres() {
    let pg = Postgres::start();
    an_aggregate_over_the_answer_bound_fails(&pg.url(), "string_agg(pad, ',')").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aggregate_over_the_answer_bound_fails_on_mariadb() {
    let db = MariaDb::start();
    an_aggregate_over_the_answer_bound_fails(&db.url(), "group_concat(pad)").await;
}

/// Trust round 3, item 1: a PostgreSQL snapshot table that grew past
/// `max_table_mb` kept its old rows. Now a reload follows `over_limit`:
/// `sql` answers from the database, `fail` fails each record naming the
/// table and the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_over_its_limit_is_never_stale_on_postgres() {
    let pg = Postgres::start();
    for over in [OverLimit::Sql, OverLimit::Fail] {
        let mut config = KnowledgeConfig::for_url(&pg.url());
        config.memory.snapshots = vec!["zs".into()];
        config.memory.max_table_mb = 1;
        config.memory.over_limit = over;
        config.on_lookup_error = OnLookupError::Fail;
        let k = config.open().await.unwrap();
        k.provider()
            .execute(
                "drop table if exists zs; create table zs (id bigint, zone text); insert into zs values (1, 'old'), (2, 'b');",
            )
            .await
            .unwrap();
        let rule = "name : t\n---\nzone = select zone from zs where id = read(id) ;\n";
        let rule = omlet::Engine::new()
            .unwrap()
            .load_source("s.oml", rule, &omlet::LoadOptions::new().knowledge(k.clone()))
            .await
            .unwrap();
        let rec = omlet::record::from_json_str(r#"{"id":1}"#).unwrap();
        assert_eq!(omlet::record::to_json_string(&rule.evaluate(&rec).await.unwrap()), r#"{"zone":"old"}"#);
        k.provider()
            .execute(
                "insert into zs select i, repeat('x', 100) from generate_series(10, 30000) i;
                 update zs set zone = 'new' where id = 1;",
            )
            .await
            .unwrap();
        let reloaded = k.reload_all().await;
        let out = rule.evaluate(&rec).await;
        match over {
            OverLimit::Sql => {
                assert!(reloaded.is_ok(), "{reloaded:?}");
                assert_eq!(
                    omlet::record::to_json_string(&out.unwrap()),
                    r#"{"zone":"new"}"#,
                    "from PostgreSQL, not the old snapshot"
                );
            }
            OverLimit::Fail => {
                assert!(
                    matches!(reloaded, Err(omlet::knowledge::Error::Limit { limit: Limit::TableMemory, .. })),
                    "{reloaded:?}"
                );
                let e = out.expect_err("the record fails, never answered from the old snapshot").to_string();
                assert!(e.contains("in-memory table size") && e.contains("zs"), "{e}");
            }
        }
    }
}

/// A knowdb loaded again whose table held in memory grew past
/// `max_table_mb`: with `over_limit = "fail"` the load is refused whole
/// (as at a start) and the old knowledge stays, instead of the table
/// moving quietly to SQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_knowdb_reload_over_the_table_limit_follows_fail() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("owner")).unwrap();
    let knowdb = "version = 2\n[[tables]]\nname = \"owner\"\ncolumns.by_header = [\"ip\", \"name\"]\n";
    std::fs::write(d.join("knowdb.toml"), knowdb).unwrap();
    std::fs::write(d.join("owner/create.sql"), "create table {table} (ip text, name text)").unwrap();
    std::fs::write(d.join("owner/insert.sql"), "insert into {table} values (?1, ?2)").unwrap();
    std::fs::write(d.join("owner/data.csv"), "ip,name\n10.0.0.1,alice\n").unwrap();
    let mut config = KnowledgeConfig { knowdb: Some(d.join("knowdb.toml")), ..Default::default() };
    config.memory.max_table_mb = 1;
    config.memory.over_limit = OverLimit::Fail;
    let k = config.open().await.unwrap();
    let rule = "name : t\n---\nwho = select name from owner where ip = read(ip) ;\n";
    let engine = omlet::Engine::new().unwrap();
    let rule = engine.load_source("t.oml", rule, &omlet::LoadOptions::new().knowledge(k.clone())).await.unwrap();
    let who = || async {
        let out = rule.evaluate(&omlet::record::from_json_str(r#"{"ip":"10.0.0.1"}"#).unwrap()).await.unwrap();
        omlet::record::to_json_string(&out)
    };
    assert_eq!(who().await, r#"{"who":"alice"}"#);
    let mut big = String::from("ip,name\n10.0.0.1,bob\n");
    for i in 0..40_000 {
        big.push_str(&format!("10.{}.{}.{},{:040}\n", i / 65536, (i / 256) % 256, i % 256, i));
    }
    std::fs::write(d.join("owner/data.csv"), big).unwrap();
    let e = k.reload_knowdb().await.unwrap_err();
    assert!(e.to_string().contains("in-memory table size") && e.to_string().contains("stays as it was"), "{e}");
    assert_eq!(who().await, r#"{"who":"alice"}"#, "the old knowledge answers");
    assert_eq!(k.memory_tables().await.len(), 1);
}
