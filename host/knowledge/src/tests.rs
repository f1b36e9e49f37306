//! Knowledge on its own: binding, the cache, routing, rewriting.

use super::*;
use crate::sql_provider::MAX_ANSWER_BYTES;
use std::time::Duration;

/// The key the stand-in database refuses.
const POISON: i64 = 13;

/// The key at which the stand-in database is down (as if the connection
/// broke under it).
const DOWN: i64 = 66;

/// The key whose batch the stand-in database cuts at its bound (as if the
/// batch's rows took more than the provider reads).
const CUT: i64 = 77;

/// A provider whose queries wait at a gate, counting what reaches it.
/// (A stand-in for a database, to hold queries in flight on purpose.)
struct Gated {
    slots: usize,
    gate: tokio::sync::Semaphore,
    first: AtomicU64,
    many: Mutex<Vec<usize>>,
}

impl Gated {
    fn new(slots: usize) -> Arc<Gated> {
        Arc::new(Gated { slots, gate: tokio::sync::Semaphore::new(0), first: AtomicU64::new(0), many: Mutex::new(Vec::new()) })
    }
    async fn pass(&self) {
        self.gate.acquire().await.unwrap().forget();
    }
}

impl Provider for Gated {
    fn kind(&self) -> &'static str {
        "gated"
    }
    fn placeholders(&self) -> Placeholders {
        Placeholders::Question
    }
    fn lookup_connections(&self) -> usize {
        self.slots
    }
    fn prepare<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Prepared, ProviderError>> {
        Box::pin(async { Ok(Prepared { columns: vec!["value".into()], params: Vec::new() }) })
    }
    fn query_first<'a>(
        &'a self,
        _: &'a BoundStatement,
        params: Vec<Cell>,
    ) -> BoxFuture<'a, Result<Option<Vec<Cell>>, ProviderError>> {
        Box::pin(async move {
            self.first.fetch_add(1, Ordering::SeqCst);
            self.pass().await;
            if params[0] == Cell::Integer(POISON) {
                return Err(ProviderError::Refused("the database refuses this key".into()));
            }
            if params[0] == Cell::Integer(DOWN) {
                return Err(ProviderError::Unavailable("the connection broke".into()));
            }
            Ok(Some(vec![Cell::Text(format!("v{:?}", params[0]))]))
        })
    }
    fn query_many<'a>(&'a self, _: &'a BatchPlan, keys: Vec<Cell>) -> BoxFuture<'a, Result<Vec<Vec<Cell>>, ProviderError>> {
        Box::pin(async move {
            self.many.lock().unwrap().push(keys.len());
            self.pass().await;
            // Like PostgreSQL's `= ANY($1)`: one bad key fails the whole query.
            if keys.contains(&Cell::Integer(POISON)) {
                return Err(ProviderError::Refused("the database refuses a key of this batch".into()));
            }
            if keys.contains(&Cell::Integer(DOWN)) {
                return Err(ProviderError::Unavailable("the connection broke".into()));
            }
            if keys.contains(&Cell::Integer(CUT)) {
                return Err(ProviderError::limit(Limit::BatchAnswer, "the rows take more than the bound"));
            }
            Ok(keys.into_iter().map(|k| vec![k.clone(), Cell::Text(format!("v{k:?}"))]).collect())
        })
    }
    fn prepare_many<'a>(&'a self, _: &'a BatchPlan) -> BoxFuture<'a, Result<(), ProviderError>> {
        Box::pin(async { Ok(()) })
    }
    fn close<'a>(&'a self) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

impl Tables for Gated {}

async fn gated(slots: usize) -> (Arc<Gated>, Arc<Knowledge>, Arc<BoundStatement>) {
    let p = Gated::new(slots);
    let mut config = KnowledgeConfig::default();
    config.cache.mode = CacheMode::Bypass;
    let k = Arc::new(Knowledge::with_config(p.clone(), config));
    let stmt = SqlStatement {
        sql: "select value from perf where id = :id".into(),
        params: vec!["id".into()],
        table: "perf".into(),
        columns: vec!["value".into()],
        file: "t.oml".into(),
        line: 1,
        column: 1,
    };
    let bound = k.bind(&[stmt]).await.unwrap().remove(0);
    assert!(bound.batch.is_some());
    (p, k, Arc::new(bound))
}

/// Waits until `what` holds, for up to 30 s of wall time (not a count of
/// sleeps, which a loaded machine stretches unevenly).
async fn until(what: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if what() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("timed out waiting");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misses_run_at_once_up_to_the_connections_then_queue_into_one_batch() {
    let (p, k, stmt) = gated(2).await;
    let lookups: Vec<_> = (1..=10i64)
        .map(|i| {
            let (k, stmt) = (k.clone(), stmt.clone());
            tokio::spawn(async move { (i, k.query(&stmt, &[Cell::Integer(i)]).await) })
        })
        .collect();
    // Two go to the database at once, alone; the other eight wait for a slot.
    until(|| {
        p.first.load(Ordering::SeqCst) == 2 && k.pending.lock().unwrap().values().map(|q| q.queue.len()).sum::<usize>() == 8
    })
    .await;
    assert!(p.many.lock().unwrap().is_empty());
    p.gate.add_permits(100);
    for l in lookups {
        let (i, row) = l.await.unwrap();
        assert_eq!(row, Ok(Some(vec![Cell::Text(format!("v{:?}", Cell::Integer(i)))])), "key {i}");
    }
    // The first slot to free takes all eight waiting misses in one query.
    assert_eq!(*p.many.lock().unwrap(), vec![8]);
    assert_eq!(p.first.load(Ordering::SeqCst), 2);
    assert_eq!(k.stats().batched.load(Ordering::SeqCst), 8);
    assert_eq!(k.pending.lock().unwrap().values().map(|q| q.in_flight).sum::<usize>(), 0, "every slot is given back");
}

/// Keys 10 and 11 take both of the gated provider's slots; then `batched`
/// queue behind them and go in one batch once the gate opens. Each key's
/// answer, in that order.
async fn queued_behind_two(
    batched: std::ops::RangeInclusive<i64>,
) -> (Arc<Gated>, Arc<Knowledge>, Vec<(i64, Result<Option<Vec<Cell>>, LookupError>)>) {
    let (p, k, stmt) = gated(2).await;
    let spawn = |i: i64| {
        let (k, stmt) = (k.clone(), stmt.clone());
        tokio::spawn(async move { (i, k.query(&stmt, &[Cell::Integer(i)]).await) })
    };
    let mut lookups = vec![spawn(10), spawn(11)];
    until(|| p.first.load(Ordering::SeqCst) == 2).await;
    let queued = batched.clone().count();
    lookups.extend(batched.map(spawn));
    until(|| k.pending.lock().unwrap().values().map(|q| q.queue.len()).sum::<usize>() == queued).await;
    p.gate.add_permits(1000);
    let mut answers = Vec::new();
    for l in lookups {
        answers.push(l.await.unwrap());
    }
    (p, k, answers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_refused_for_one_key_fails_only_that_key() {
    // The nine queued keys, the refused one among them, go in one batch.
    let (p, _, answers) = queued_behind_two(12..=20).await;
    for (i, row) in answers {
        if i == POISON {
            assert!(row.is_err(), "the refused key fails");
        } else {
            assert_eq!(row, Ok(Some(vec![Cell::Text(format!("v{:?}", Cell::Integer(i)))])), "key {i} is innocent");
        }
    }
    assert_eq!(*p.many.lock().unwrap(), vec![9], "one batch was tried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_finds_the_database_down_is_not_asked_again_key_by_key() {
    let (p, _, answers) = queued_behind_two(60..=68).await;
    for (i, row) in answers {
        if i >= 60 {
            let e = row.expect_err("every key of the batch fails");
            assert_eq!(e.kind, LookupErrorKind::Unavailable, "key {i}: {e:?}");
        } else {
            assert!(row.is_ok(), "key {i} went alone, before the outage");
        }
    }
    assert_eq!(*p.many.lock().unwrap(), vec![9], "one batch was tried");
    assert_eq!(p.first.load(Ordering::SeqCst), 2, "and no key was asked again alone");
}

/// A batch cut at its bound is no failure: its keys are asked one by one,
/// each gets its own answer, and no lookup error is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_cut_at_its_bound_asks_its_keys_one_by_one() {
    let (p, k, answers) = queued_behind_two(72..=80).await;
    for (i, row) in answers {
        assert_eq!(row, Ok(Some(vec![Cell::Text(format!("v{:?}", Cell::Integer(i)))])), "key {i}");
    }
    assert_eq!(*p.many.lock().unwrap(), vec![9], "one batch was tried");
    assert_eq!(p.first.load(Ordering::SeqCst), 2 + 9, "then its nine keys alone");
    assert_eq!(k.stats().errors.load(Ordering::SeqCst), 0, "a cut batch is no lookup error");
}

/// SQLite in memory with a table `r`: zones `a`, `b` and `c` of 300 rows
/// each (`lo` 0..300, a 100-byte `pad`), and `z0`..`z39` of one row each
/// with a 1000-byte `pad`; answers bounded at `max_answer` bytes.
async fn zones(max_answer: u64) -> Arc<Knowledge> {
    let p = sqlite::SqliteProvider::memory().await.unwrap().with_max_answer_bytes(max_answer);
    let mut rows: Vec<Vec<Cell>> = Vec::new();
    for zone in ["a", "b", "c"] {
        for lo in 0..300 {
            rows.push(vec![Cell::Text(zone.into()), Cell::Integer((lo * 7) % 300), Cell::Text("p".repeat(100))]);
        }
    }
    for z in 0..40 {
        rows.push(vec![Cell::Text(format!("z{z}")), Cell::Integer(z), Cell::Text("q".repeat(1000))]);
    }
    let columns = ["zone".to_string(), "lo".into(), "pad".into()];
    p.load_table("r", &columns, &["TEXT".into(), "INTEGER".into(), "TEXT".into()], &rows).await.unwrap();
    let mut config = KnowledgeConfig::default();
    config.cache.mode = CacheMode::Bypass;
    Arc::new(Knowledge::with_config(Arc::new(p), config))
}

async fn bind_one(k: &Knowledge, sql: &str) -> BoundStatement {
    let params = vec!["z".to_string()];
    let stmt = SqlStatement {
        sql: sql.into(),
        params,
        table: String::new(),
        columns: Vec::new(),
        file: "t.oml".into(),
        line: 1,
        column: 1,
    };
    k.bind(&[stmt]).await.unwrap().remove(0)
}

fn text(s: &str) -> Cell {
    Cell::Text(s.into())
}

/// Trust round 3: a batch fetched every row of a repeated key, ignoring
/// `limit 1`. Now it fetches each key's first row in the statement's
/// order, the row the single-key statement answers, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_fetches_each_keys_first_row_in_the_statements_order() {
    let k = zones(MAX_ANSWER_BYTES).await;
    let keys = vec![text("a"), text("b"), text("c"), text("none")];
    for sql in [
        "select lo from r where zone = :z order by lo desc limit 1",
        "select lo from r where zone = :z order by lo",
        "select zone, lo from r where zone = :z order by pad, lo desc limit 5",
    ] {
        let stmt = bind_one(&k, sql).await;
        let plan = stmt.batch.as_ref().expect("batched");
        let rows = k.provider().query_many(plan, keys.clone()).await.unwrap();
        assert_eq!(rows.len(), 3, "{sql}: one row a key that has rows: {:?}", &rows[..rows.len().min(5)]);
        for key in &keys {
            let alone = k.provider().query_first(&stmt, vec![key.clone()]).await.unwrap();
            let batched = rows.iter().find(|r| r[0] == *key).map(|r| r[1..].to_vec());
            assert_eq!(batched, alone, "{sql}: key {key:?}");
        }
    }
    let unordered = bind_one(&k, "select lo from r where zone = :z").await;
    let rows = k.provider().query_many(unordered.batch.as_ref().unwrap(), keys).await.unwrap();
    assert_eq!(rows.len(), 3, "without `order by`, one row a key too");
    let none = bind_one(&k, "select lo from r where zone = :z limit 0").await;
    assert!(!batching::keeps_first_row(&none.sql), "`limit 0` answers nothing, and is not batched");
}

/// The rows a batch reads are bounded while it reads them: past the
/// bound it stops with a typed error (and the knowledge asks its keys one
/// by one, each bounded as one answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_stops_reading_at_its_bound() {
    let k = zones(16 << 10).await;
    let stmt = bind_one(&k, "select pad from r where zone = :z").await;
    let keys: Vec<Cell> = (0..40).map(|z| text(&format!("z{z}"))).collect();
    match k.provider().query_many(stmt.batch.as_ref().unwrap(), keys.clone()).await {
        Err(ProviderError::Limit { limit: Limit::BatchAnswer, message }) => {
            assert!(message.contains("batched lookup rows and bytes"), "{message}")
        }
        other => panic!("40 rows of 1 KB read past a bound of 16 KiB: {:?}", other.map(|r| r.len())),
    }
    // Fewer keys fit, and each answers.
    let rows = k.provider().query_many(stmt.batch.as_ref().unwrap(), keys[..4].to_vec()).await.unwrap();
    assert_eq!(rows.len(), 4);
}

/// Trust round 3: an aggregate's whole answer was read and held before the
/// guest refused it. Now the host stops at the answer bound with a typed
/// error naming it; a smaller answer still comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_its_bound_fails_with_the_bound_named() {
    let k = zones(16 << 10).await;
    let stmt = bind_one(&k, "select group_concat(pad) from r where zone = :z").await;
    assert!(stmt.batch.is_none());
    match k.provider().query_first(&stmt, vec![text("a")]).await {
        Err(ProviderError::Limit { limit: Limit::AnswerBytes, .. }) => {}
        other => panic!("300 rows of 100 bytes in one value, over 16 KiB: {:?}", other.map(|r| r.map(|r| r.len()))),
    }
    let e = k.query(&stmt, &[text("b")]).await.expect_err("over the bound");
    assert!(e.message.contains("limit reached (lookup answer bytes)"), "{e:?}");
    let small = k.query(&stmt, &[text("z1")]).await.unwrap().unwrap();
    assert!(matches!(&small[0], Cell::Text(t) if t.len() == 1000));
    // The connection that was cut was dropped; the next lookup has another.
    let again = k.query(&stmt, &[text("z2")]).await.unwrap();
    assert!(again.is_some());
}

/// Trust round 3: a snapshot table that grew past `max_table_mb` kept its
/// old rows. Now a reload follows `over_limit`: `sql` answers from the
/// database, `fail` fails the lookups with the limit and the table named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_over_its_limit_goes_to_sql_or_fails_never_stale() {
    for over in [memory::OverLimit::Sql, memory::OverLimit::Fail] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = KnowledgeConfig::for_url(&format!("sqlite://{}", dir.path().join("k.db").display()));
        config.memory.snapshots = vec!["zt".into()];
        config.memory.max_table_mb = 1;
        config.memory.over_limit = over;
        let k = config.open().await.unwrap();
        k.provider()
            .execute("create table zt (k integer, zone text); insert into zt values (1, 'old'), (2, 'b');")
            .await
            .unwrap();
        let stmt = SqlStatement {
            sql: "select zone from zt where k = :k".into(),
            params: vec!["k".into()],
            table: String::new(),
            columns: Vec::new(),
            file: "t.oml".into(),
            line: 1,
            column: 1,
        };
        let stmt = k.bind(&[stmt]).await.unwrap().remove(0);
        assert!(stmt.path.starts_with("memory"), "{}", stmt.path);
        assert_eq!(k.query(&stmt, &[Cell::Integer(1)]).await, Ok(Some(vec![text("old")])));
        // The table grows past 1 MiB, and its row changes.
        k.provider()
            .execute(
                "with recursive n(i) as (select 10 union all select i + 1 from n where i < 20000)
                 insert into zt select i, printf('%0100d', i) from n;
                 update zt set zone = 'new' where k = 1;",
            )
            .await
            .unwrap();
        let reloaded = k.reload_all().await;
        let answer = k.query(&stmt, &[Cell::Integer(1)]).await;
        match over {
            memory::OverLimit::Sql => {
                assert!(reloaded.is_ok(), "{reloaded:?}");
                assert_eq!(answer, Ok(Some(vec![text("new")])), "from the database, not the old snapshot");
            }
            memory::OverLimit::Fail => {
                assert!(matches!(reloaded, Err(Error::Limit { limit: Limit::TableMemory, .. })), "{reloaded:?}");
                let e = answer.expect_err("the lookup fails, never answers from the old snapshot");
                assert!(e.message.contains("limit reached (in-memory table size)") && e.message.contains("zt"), "{e:?}");
                assert!(k.query_cached(k.generation(), &stmt, &[Cell::Integer(1)]).is_none());
                // Back within the limit, the next reload holds it again.
                k.provider().execute("delete from zt where k >= 10").await.unwrap();
                k.reload_all().await.unwrap();
                assert_eq!(k.query(&stmt, &[Cell::Integer(1)]).await, Ok(Some(vec![text("new")])));
                assert!(stmt.memory.as_ref().unwrap().describe().starts_with("memory"));
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_lookup_frees_its_slot_and_tells_those_queued_behind_it() {
    let (p, k, stmt) = gated(1).await;
    let spawn = |i: i64| {
        let (k, stmt) = (k.clone(), stmt.clone());
        tokio::spawn(async move { k.query(&stmt, &[Cell::Integer(i)]).await })
    };
    let running = spawn(1);
    until(|| p.first.load(Ordering::SeqCst) == 1).await;
    let queued = spawn(2);
    until(|| k.pending.lock().unwrap().values().any(|q| q.queue.len() == 1)).await;
    running.abort();
    let told = queued.await.unwrap();
    assert!(told.as_ref().is_err_and(|e| e.message.contains("cancelled")), "{told:?}");
    // The slot is free again: the next miss runs at once.
    p.gate.add_permits(10);
    assert_eq!(spawn(3).await.unwrap(), Ok(Some(vec![Cell::Text(format!("v{:?}", Cell::Integer(3)))])));
}

#[test]
fn placeholders_follow_occurrences() {
    let params = vec!["ip".to_string(), "name".to_string()];
    let (sql, order) = rewrite_placeholders(
        "select a from t where (lo <= :ip and hi >= :ip) or n = ':ip' or m = :name",
        &params,
        Placeholders::Dollar,
    );
    assert_eq!(sql, "select a from t where (lo <= $1 and hi >= $2) or n = ':ip' or m = $3");
    assert_eq!(order, vec![0, 0, 1]);
    let (sql, _) = rewrite_placeholders("x = :name", &params, Placeholders::Question);
    assert_eq!(sql, "x = ?");
}

#[test]
fn helpers_are_qualified_outside_quotes_only() {
    assert_eq!(
        qualify_helpers("select a from t where cidr4_contains($1, c) = $2 and n = 'ip4_int(x)' and my_ip4_int(c) = 1", "pg_temp")
            .unwrap(),
        "select a from t where pg_temp.cidr4_contains($1, c) = $2 and n = 'ip4_int(x)' and my_ip4_int(c) = 1"
    );
}

#[test]
fn helper_calls_are_rewritten_inside_out_with_their_arguments() {
    let seen = |name: &str, args: &[String]| format!("<{name}|{}>", args.join("|"));
    assert_eq!(
        rewrite_helper_calls(
            "select a from t where ip4_between(:ip, cidr4_min(c), f(x, ')')) = 1 and n = 'ip4_int(x)' and trim_quotes ( b )",
            &seen
        )
        .unwrap(),
        "select a from t where <ip4_between|:ip|<cidr4_min|c>|f(x, ')')> = 1 and n = 'ip4_int(x)' and <trim_quotes|b>"
    );
    // An unclosed call is left for the database to reject.
    assert_eq!(rewrite_helper_calls("select ip4_int(a from t", &seen).unwrap(), "select ip4_int(a from t");
    // A parameter that the rewrite repeats gets a placeholder each time.
    let sql = rewrite_helper_calls("x = ip4_int(:ip)", &|_, a| format!("f({0}, {0})", a[0])).unwrap();
    let (sql, order) = rewrite_placeholders(&sql, &["ip".to_string()], Placeholders::Dollar);
    assert_eq!((sql.as_str(), order), ("x = f($1, $2)", vec![0, 0]));
}

#[test]
fn coercion_follows_sqlite_affinity() {
    assert_eq!(coerce(Cell::Text("1001".into()), ParamType::Int64), Cell::Integer(1001));
    assert_eq!(coerce(Cell::Text(" 7.0 ".into()), ParamType::Int32), Cell::Integer(7));
    assert_eq!(coerce(Cell::Text("abc".into()), ParamType::Int64), Cell::Null);
    assert_eq!(coerce(Cell::Integer(70_000), ParamType::Int16), Cell::Null);
    assert_eq!(coerce(Cell::Integer(5), ParamType::Text), Cell::Text("5".into()));
    assert_eq!(coerce(Cell::Integer(5), ParamType::Float), Cell::Real(5.0));
    assert_eq!(coerce(Cell::Real(2.5), ParamType::Int64), Cell::Null);
    assert_eq!(coerce(Cell::Text("x".into()), ParamType::Any), Cell::Text("x".into()));
}

#[test]
fn histogram_quantiles() {
    let mut h = Histogram::default();
    for us in [3u64, 3, 3, 100] {
        h.record(Duration::from_micros(us));
    }
    assert_eq!(h.quantile_us(0.5), 4.0);
    assert_eq!(h.quantile_us(0.99), 128.0);
}
