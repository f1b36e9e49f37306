//! The knowdb loader: CSV with inferred or given types, create/insert SQL
//! files, expected row counts and the on_error policy.

use omlet::knowledge::Tables;
use omlet::knowledge::sqlite::SqliteProvider;

fn write(dir: &std::path::Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

#[tokio::test]
async fn create_sql_csv_insert_sql_and_skipped_rows() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "hosts.sql", "create table hosts (name text not null, owner text not null, tier integer);");
    write(d, "more.sql", "insert into hosts values ('gw-1', 'carol', 0);");
    write(
        d,
        "knowdb.toml",
        "[[tables]]\nname = \"hosts\"\ncreate = \"hosts.sql\"\ncsv = \"hosts.csv\"\ntypes = [\"TEXT\", \"TEXT\", \"INTEGER\"]\n\
         insert = \"more.sql\"\non_error = \"skip\"\nexpected_rows = 3\n",
    );
    // The malformed second record is skipped; the SQL file adds a third row.
    write(d, "hosts.csv", "name,owner,tier\nweb-1,alice,1\nbroken\ndb-1,bob,3\n");
    let db = SqliteProvider::memory().await.unwrap();
    omlet::knowledge::knowdb::load(&d.join("knowdb.toml"), &db).await.unwrap();
    assert_eq!(db.count("hosts").await.unwrap(), 3);
}

#[tokio::test]
async fn a_bad_row_fails_the_load_by_default_naming_file_and_record() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "t.csv", "a,b\n1,2\n3\n");
    write(d, "knowdb.toml", "[[tables]]\nname = \"t\"\ncsv = \"t.csv\"\n");
    let db = SqliteProvider::memory().await.unwrap();
    let err = omlet::knowledge::knowdb::load(&d.join("knowdb.toml"), &db).await.unwrap_err().to_string();
    assert!(err.contains("t.csv record 2"), "{err}");
}

#[tokio::test]
async fn a_wrong_row_count_fails_the_load() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "t.csv", "a,b\n1,2\n3,4\n");
    write(d, "knowdb.toml", "[[tables]]\nname = \"t\"\ncsv = \"t.csv\"\nexpected_rows = 5\n");
    let db = SqliteProvider::memory().await.unwrap();
    let err = omlet::knowledge::knowdb::load(&d.join("knowdb.toml"), &db).await.unwrap_err().to_string();
    assert!(err.contains("table t has 2 rows, expected 5"), "{err}");
}

#[tokio::test]
async fn rows_the_database_rejects_are_skipped_and_counted() {
    let db = SqliteProvider::memory().await.unwrap();
    db.execute("create table t (a integer not null)").await.unwrap();
    let rows = vec![vec![omlet_lang::Cell::Integer(1)], vec![omlet_lang::Cell::Null], vec![omlet_lang::Cell::Integer(3)]];
    let (inserted, skipped) = db.insert_rows("t", &["a".into()], &rows, true).await.unwrap();
    assert_eq!((inserted, skipped), (2, 1));
    let err = db.insert_rows("t", &["a".into()], &rows, false).await.unwrap_err().to_string();
    assert!(err.contains("table t, row 2"), "{err}");
    assert_eq!(db.count("t").await.unwrap(), 2, "a failed strict load inserts nothing");
}

/// A knowdb in `dir/kb` whose table `t` reads the CSV at `csv` (as written).
fn knowdb_reading(dir: &std::path::Path, csv: &str) -> std::path::PathBuf {
    let kb = dir.join("kb");
    std::fs::create_dir_all(&kb).unwrap();
    write(&kb, "knowdb.toml", &format!("# a comment\n[[tables]]\nname = \"t\"\ncsv = {csv:?}\n"));
    kb.join("knowdb.toml")
}

#[tokio::test]
async fn files_outside_the_knowdb_folder_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("outside")).unwrap();
    write(&d.join("outside"), "secret.csv", "k,v\nroot,x\n");
    let outside = d.join("outside/secret.csv");
    let kb = knowdb_reading(d, "x.csv");
    std::os::unix::fs::symlink(&outside, kb.parent().unwrap().join("link.csv")).unwrap();
    for csv in ["../outside/secret.csv", outside.to_str().unwrap(), "link.csv", "../../../../../../../../etc/passwd"] {
        let kb = knowdb_reading(d, csv);
        let db = SqliteProvider::memory().await.unwrap();
        let err = omlet::knowledge::knowdb::load(&kb, &db).await.unwrap_err().to_string();
        assert!(err.contains("knowdb.toml:3: table t: csv") && err.contains("outside the knowdb's folder"), "{csv}: {err}");
        assert!(db.count("t").await.is_err(), "{csv}: nothing was loaded");
    }
    // A folder the loader is given (the knowledge config's `knowdb_roots`) may be read.
    let kb = knowdb_reading(d, "../outside/secret.csv");
    let db = SqliteProvider::memory().await.unwrap();
    omlet::knowledge::knowdb::load_with(&kb, &db, &[d.join("outside")]).await.unwrap();
    assert_eq!(db.count("t").await.unwrap(), 1);
    // `create` and `insert` files too.
    let kb_dir = d.join("kb");
    write(&kb_dir, "knowdb.toml", "[[tables]]\nname = \"t\"\ncreate = \"../outside/c.sql\"\n");
    write(&d.join("outside"), "c.sql", "create table t (a text);");
    let db = SqliteProvider::memory().await.unwrap();
    let err = omlet::knowledge::knowdb::load(&kb_dir.join("knowdb.toml"), &db).await.unwrap_err().to_string();
    assert!(err.contains("knowdb.toml:2: table t: create") && err.contains("outside"), "{err}");
}

#[tokio::test]
async fn a_knowledge_config_can_name_more_knowdb_folders() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("shared")).unwrap();
    write(&d.join("shared"), "zones.csv", "k,v\na,1\nb,2\n");
    knowdb_reading(d, "../shared/zones.csv");
    write(d, "knowledge.toml", "knowdb = \"kb/knowdb.toml\"\n");
    let err = omlet::KnowledgeConfig::read(d.join("knowledge.toml")).unwrap().open().await.err().unwrap().to_string();
    assert!(err.contains("outside the knowdb's folder"), "{err}");
    write(d, "knowledge.toml", "knowdb = \"kb/knowdb.toml\"\nknowdb_roots = [\"shared\"]\n");
    let k = omlet::KnowledgeConfig::read(d.join("knowledge.toml")).unwrap().open().await.unwrap();
    assert_eq!(k.provider().count("t").await.unwrap(), 2);
}

#[tokio::test]
async fn column_types_are_never_pasted_into_sql() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "t.csv", "a\n1\n");
    write(d, "knowdb.toml", "[[tables]]\nname = \"t\"\ncsv = \"t.csv\"\ntypes = [\n  \"TEXT); DROP TABLE x; --\",\n]\n");
    let db = SqliteProvider::memory().await.unwrap();
    db.execute("create table x (a text)").await.unwrap();
    let err = omlet::knowledge::knowdb::load(&d.join("knowdb.toml"), &db).await.unwrap_err().to_string();
    assert!(err.contains("knowdb.toml:5: table t: column type `TEXT); DROP TABLE x; --`"), "{err}");
    assert_eq!(db.count("x").await.unwrap(), 0, "the table x is still there");
    // Aliases are read as the SQLite types they stand for.
    write(d, "knowdb.toml", "[[tables]]\nname = \"t\"\ncsv = \"t.csv\"\ntypes = [\"bigint primary key\"]\n");
    omlet::knowledge::knowdb::load(&d.join("knowdb.toml"), &db).await.unwrap();
    assert_eq!(db.count("t").await.unwrap(), 1);
}

#[tokio::test]
async fn table_names_must_be_lower_case_identifiers() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "t.csv", "a\n1\n");
    for name in ["SECRETS", "Ip_Zone", "t; drop table x", "pg\\u0000x"] {
        write(
            d,
            "knowdb.toml",
            &format!("[[tables]]\nname = \"ok\"\ncsv = \"t.csv\"\n\n[[tables]]\nname = \"{name}\"\ncsv = \"t.csv\"\n"),
        );
        let err = omlet::knowledge::knowdb::read(&d.join("knowdb.toml")).unwrap_err().to_string();
        assert!(err.contains("knowdb.toml:6: table name") && err.contains("lower-case identifier"), "{name}: {err}");
    }
}

/// Issue 31: a lookup of a knowdb table gets an index on the columns it
/// compares (equalities, then one range), so that a miss searches the table
/// instead of scanning it; a table omlet did not load gets none.
#[tokio::test]
async fn lookups_of_knowdb_tables_get_indexes_on_what_they_compare() {
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let hosts: String = (0..2000).map(|i| format!("10.0.{}.{},h{i},z{}\n", i / 256, i % 256, i % 7)).collect();
    write(d, "hosts.csv", &format!("ip,name,zone\n{hosts}"));
    let ranges: String = (0..2000).map(|i| format!("{},{},r{i}\n", i * 10, i * 10 + 9)).collect();
    write(d, "ranges.csv", &format!("lo,hi,label\n{ranges}"));
    write(
        d,
        "knowdb.toml",
        "[[tables]]\nname = \"hosts\"\ncsv = \"hosts.csv\"\n\n[[tables]]\nname = \"ranges\"\ncsv = \"ranges.csv\"\n",
    );
    let db = Arc::new(SqliteProvider::memory().await.unwrap());
    let tables = omlet::knowledge::knowdb::load(&d.join("knowdb.toml"), db.as_ref()).await.unwrap();
    db.execute("create table own (k text, v text)").await.unwrap();
    let mut all = tables.clone();
    all.push("own".into());
    let config = omlet::knowledge::KnowledgeConfig { tables: Some(all), knowdb_tables: tables, ..Default::default() };
    let k = omlet::knowledge::Knowledge::with_config(db.clone(), config);
    let stmt = crate::databases::statement;
    k.bind(&[
        stmt("select name from hosts where ip = :ip and zone = :z", &["ip", "z"]),
        stmt("select label from ranges where lo <= :n and hi >= :n_2", &["n", "n_2"]),
        stmt("select name from hosts where ip = :ip or name = :n", &["ip", "n"]),
        stmt("select v from own where k = :k", &["k"]),
    ])
    .await
    .unwrap();
    let indexes: Vec<(String, String)> =
        sqlx::query_as("select name, tbl_name from sqlite_master where type = 'index' and name like 'omlet_%' order by name")
            .fetch_all(db.pool())
            .await
            .unwrap();
    assert_eq!(
        indexes,
        [("omlet_hosts_ip_zone".to_string(), "hosts".to_string()), ("omlet_ranges_lo".to_string(), "ranges".to_string())]
    );
    // SQLite now searches instead of scanning.
    let plan: Vec<(i64, i64, i64, String)> =
        sqlx::query_as("explain query plan select name from hosts where ip = '10.0.1.1' and zone = 'z3'")
            .fetch_all(db.pool())
            .await
            .unwrap();
    assert!(plan.iter().any(|p| p.3.contains("USING INDEX omlet_hosts_ip_zone")), "{plan:?}");
    // Binding again asks for nothing new.
    k.bind(&[stmt("select name from hosts where ip = :ip and zone = :z", &["ip", "z"])]).await.unwrap();
}

/// Issue 31: `index = [...]` in a knowdb creates the indexes it names (one
/// per entry, `"a, b"` for a composite one); a name that is no identifier is
/// refused with the file and line.
#[tokio::test]
async fn a_knowdb_names_its_own_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "geo.csv", "lo,hi,country\n0,9,aa\n10,19,bb\n");
    write(d, "knowdb.toml", "[[tables]]\nname = \"geo\"\ncsv = \"geo.csv\"\nindex = [\"country\", \"lo, hi\"]\n");
    let db = SqliteProvider::memory().await.unwrap();
    omlet::knowledge::knowdb::load(&d.join("knowdb.toml"), &db).await.unwrap();
    let names: Vec<(String,)> =
        sqlx::query_as("select name from sqlite_master where type = 'index' and tbl_name = 'geo' order by name")
            .fetch_all(db.pool())
            .await
            .unwrap();
    assert_eq!(names, [("omlet_geo_country".to_string(),), ("omlet_geo_lo_hi".to_string(),)]);

    write(d, "bad.toml", "[[tables]]\nname = \"geo2\"\ncsv = \"geo.csv\"\nindex = [\"lo); drop table geo; --\"]\n");
    let err = omlet::knowledge::knowdb::load(&d.join("bad.toml"), &db).await.unwrap_err().to_string();
    assert!(err.contains("bad.toml:4") && err.contains("index"), "{err}");
    write(d, "missing.toml", "[[tables]]\nname = \"geo3\"\ncsv = \"geo.csv\"\nindex = [\"nope\"]\n");
    let err = omlet::knowledge::knowdb::load(&d.join("missing.toml"), &db).await.unwrap_err().to_string();
    assert!(err.contains("missing.toml:2: table geo3"), "{err}");
}

/// Issue 31: lookups of knowdb tables are answered from memory (a hash
/// index for `=`, an interval index for `lo <= :x and hi >= :x`), and every
/// answer given there is the one SQLite gives for the same statement and
/// parameters: values of every storage class in the table, parameters of
/// every kind, repeated keys, NULLs, empty ranges. What memory cannot be
/// sure of (overlapping ranges, a real against a text column) goes to SQL.
#[tokio::test]
async fn in_memory_answers_are_sqlites_answers() {
    use omlet::knowledge::{Knowledge, KnowledgeConfig, Provider};
    use omlet_lang::Cell;
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(
        d,
        "mixed.sql",
        "create table mixed (n integer, t text, r real, u numeric, b, v text);\n\
         insert into mixed values (1, '1', 1.0, 1, 1, 'one'), (1, 'one', 1.5, '1.0', '1', 'one again'),\n\
         ('2', '02', 2.5, 2.5, x'02', 'two'), ('x', 'X', null, 'abc', null, 'text in n'),\n\
         (null, null, null, null, null, 'nulls'), (9007199254740993, '9007199254740993', 1e20, 1e20, 3.0, 'big'),\n\
         (-7, ' 7', -0.0, -7, '-7', 'minus seven'), (8, '8', 8, 8, 8, 'eight');\n",
    );
    let ranges: String = (0..300).map(|i| format!("{},{},r{i}\n", i * 10, i * 10 + 4 + (i % 3))).collect();
    write(d, "ranges.csv", &format!("lo,hi,label\n{ranges}5000,4000,empty\n,4100,null lo\n"));
    write(d, "overlap.csv", "lo,hi,label\n0,100,wide\n10,20,narrow\n");
    write(d, "nets.csv", "cidr,zone\n10.1.0.0/16,lab\n10.2.0.0/15,corp\nbogus,never\n192.168.0.0/24,home\n");
    write(
        d,
        "keys.csv",
        "lo,hi,label\n20010db8000000000000000000000000,20010db8ffffffffffffffffffffffff,v6\n\
         00000000000000000000ffff0a000000,00000000000000000000ffff0affffff,v4\n",
    );
    write(
        d,
        "knowdb.toml",
        "[[tables]]\nname = \"mixed\"\ncreate = \"mixed.sql\"\n\n[[tables]]\nname = \"ranges\"\ncsv = \"ranges.csv\"\n\n\
         [[tables]]\nname = \"overlap\"\ncsv = \"overlap.csv\"\n\n[[tables]]\nname = \"keys\"\ncsv = \"keys.csv\"\n\
         types = [\"TEXT\", \"TEXT\", \"TEXT\"]\n\n[[tables]]\nname = \"nets\"\ncsv = \"nets.csv\"\n",
    );
    let db = Arc::new(SqliteProvider::memory().await.unwrap());
    let tables = omlet::knowledge::knowdb::load(&d.join("knowdb.toml"), db.as_ref()).await.unwrap();
    let config = KnowledgeConfig { tables: Some(tables.clone()), knowdb_tables: tables, ..Default::default() };
    let k = Knowledge::with_config(db.clone(), config);
    let stmt = crate::databases::statement;
    let bound = k
        .bind(&[
            stmt("select v from mixed where n = :k", &["k"]),
            stmt("select v, n from mixed where t = :k", &["k"]),
            stmt("select * from mixed where r = :k", &["k"]),
            stmt("select v from mixed where u = :k", &["k"]),
            stmt("select v from mixed where b = :k", &["k"]),
            stmt("select v from mixed where n = :k and t = :k_2", &["k", "k_2"]),
            stmt("select label from ranges where lo <= :x and hi >= :x_2", &["x", "x_2"]),
            stmt("select label from ranges where :x > lo and :x < hi", &["x"]),
            stmt("select label from overlap where lo <= :x and hi >= :x_2", &["x", "x_2"]),
            stmt("select label from ranges where lo <= :x or hi >= :x_2", &["x", "x_2"]),
            stmt("select label from keys where lo <= :x and hi >= :x_2", &["x", "x_2"]),
            stmt("select zone from nets where cidr4_contains(:x, cidr) = 1", &["x"]),
        ])
        .await
        .unwrap();
    let paths: Vec<&str> = bound.iter().map(|b| b.path.as_str()).collect();
    for (i, p) in paths.iter().enumerate().take(8) {
        assert!(p.starts_with("memory: "), "statement {i}: {p}");
    }
    assert!(paths[8].starts_with("sql: ") && paths[8].contains("overlap"), "{}", paths[8]);
    assert!(paths[9].starts_with("sql: "), "{}", paths[9]);
    assert!(paths[10].starts_with("memory: ip_key ranges"), "{}", paths[10]);
    assert!(paths[11].starts_with("memory: cidr4 networks of nets.cidr"), "{}", paths[11]);
    let mut values = vec![
        Cell::Null,
        Cell::Blob(vec![2]),
        Cell::Blob(b"1".to_vec()),
        Cell::Real(1.0),
        Cell::Real(-0.0),
        Cell::Real(1e20),
        Cell::Real(9007199254740992.0),
        Cell::Integer(9007199254740993),
        Cell::Real(f64::NAN),
    ];
    for t in
        ["1", "1.0", " 1 ", "01", "one", "02", "2", "2.5", "x", "X", "abc", "1e20", " 7", "-7", "8", "5.", "9007199254740993"]
    {
        values.push(Cell::Text(t.into()));
    }
    for key in [
        "20010db8000000000000000000000007",
        "20010db8ffffffffffffffffffffffff",
        "20010db9000000000000000000000000",
        "00000000000000000000ffff0a010203",
        "00000000000000000000ffff09ffffff",
        "20010DB8000000000000000000000007",
        "2001",
        "",
        "10.1.2.3",
        " 10.3.255.255 ",
        "10.4.0.0",
        "192.168.0.77",
        "0.0.0.0",
    ] {
        values.push(Cell::Text(key.into()));
    }
    values.push(Cell::Integer(167837955));
    for i in [-7, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 1004, 1006, 2995, 2999, 3000, 4050, 4100] {
        values.push(Cell::Integer(i));
        values.push(Cell::Real(i as f64 + 0.5));
        values.push(Cell::Text(i.to_string()));
    }
    let (mut from_memory, mut compared) = (0, 0);
    for b in &bound {
        for v in &values {
            for w in [v, &Cell::Text("one".into()), &Cell::Integer(1)] {
                let params = vec![v.clone(), w.clone()];
                let sql_params: Vec<Cell> = b.order.iter().map(|&i| params[i].clone()).collect();
                let by_sql = db.query_first(b, sql_params).await.unwrap();
                compared += 1;
                if let Some(m) = &b.memory
                    && let Some(answer) = m.answer(&params)
                {
                    from_memory += 1;
                    assert_eq!(answer, by_sql, "`{}` with {params:?}", b.sql);
                }
                // What the knowledge answers, by whichever path, is SQLite's.
                assert_eq!(k.query(b, &params).await.unwrap(), by_sql, "`{}` with {params:?}", b.sql);
            }
        }
    }
    // Most answers came from memory: those of 8 of the 10 statements, but
    // for the ranges given two values and the conversions left to SQL.
    assert!(from_memory * 2 > compared, "{from_memory} of {compared} from memory");
    assert!(k.stats().memory.load(std::sync::atomic::Ordering::Relaxed) > 0);
}

/// Issue 31: a knowdb in Warp Parse's layout loads as it is: `version = 2`,
/// `base_dir`, one folder per table with `create.sql` (its `{table}` and a
/// `CREATE INDEX`), `insert.sql` with `?1..?N` calling the OML helpers,
/// `clean.sql`, `data.csv` or `data_file`, `columns.by_header` and
/// `by_index`, `expected_rows`, `[csv]`, `[default]`, `[cache]`, and the
/// sections omlet ignores with a warning (Redis, `[fun.*]`,
/// `[intranet_nets]`). Its lookups are then answered from memory.
#[tokio::test]
async fn a_warp_parse_knowdb_loads_as_it_is() {
    use omlet::knowledge::KnowledgeConfig;
    use omlet_lang::Cell;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("models/knowledge");
    for t in ["zone", "hosts", "words"] {
        std::fs::create_dir_all(d.join(t)).unwrap();
    }
    write(
        &d,
        "knowdb.toml",
        r#"version = 2
base_dir = "."

[default]
transaction = true
batch_size = 500
on_error = "fail"

[csv]
has_header = true
delimiter = ","
encoding = "utf-8"
trim = true

[cache]
enabled = true
capacity = 2048
ttl_ms = 60000

[[tables]]
name = "zone"
columns.by_header = ["start", "end", "zone"]
[tables.expected_rows]
min = 2
max = 10

[[tables]]
name = "hosts"
dir = "hosts"
data_file = "inventory.csv"
columns.by_header = ["ip", "owner"]

[[tables]]
name = "words"
columns.by_index = [1]

[[tables]]
name = "old"
enabled = false

[provider.redis]
connection_uri = "redis://127.0.0.1:6379"

[fun.weak_password]
call = "bf_exists"
key = "weak_passwords"

[intranet_nets]
enable = true
nets = ["100.64.0.0/10"]
"#,
    );
    let z = d.join("zone");
    write(
        &z,
        "create.sql",
        "CREATE TABLE IF NOT EXISTS {table} (id INTEGER PRIMARY KEY, ip_start_int INTEGER, ip_end_int INTEGER, zone TEXT);\n\
         CREATE INDEX IF NOT EXISTS {table}_start ON {table} (ip_start_int);\n",
    );
    write(
        &z,
        "insert.sql",
        "INSERT INTO {table} (ip_start_int, ip_end_int, zone)\nVALUES (ip4_int(?1), ip4_int(?2), trim_quotes(?3));\n",
    );
    write(
        &z,
        "data.csv",
        "start,end,zone\n10.0.0.0 , 10.0.0.255,'dmz'\n10.0.1.0,10.0.1.255,\"office\"\n192.168.0.0,192.168.255.255,lab\n",
    );
    let h = d.join("hosts");
    write(&h, "create.sql", "create table {table} (ip text, owner text)");
    write(&h, "insert.sql", "insert into {table} (owner, ip) values (?2, ?1)");
    write(&h, "clean.sql", "delete from {table} where 1 = 1");
    write(&h, "inventory.csv", "owner,ip,extra\nalice,10.0.0.7,x\nbob,10.0.1.20,y\n");
    let w = d.join("words");
    write(&w, "create.sql", "create table {table} (word text)");
    write(&w, "insert.sql", "insert into {table} (word) values (lower(?1))");
    write(&w, "data.csv", "n,word\n1,Alpha\n2,Beta\n");
    let config = KnowledgeConfig { knowdb: Some(d.join("knowdb.toml")), ..Default::default() };
    let k = config.open().await.unwrap();
    assert_eq!(k.config().knowdb_tables, ["zone", "hosts", "words"], "the disabled table is not loaded");
    assert_eq!(k.config().cache.capacity, 2048);
    assert_eq!(k.config().cache.ttl_ms, Some(60_000));
    let stmt = crate::databases::statement;
    let bound = k
        .bind(&[
            stmt("select zone from zone where ip_start_int <= :n and ip_end_int >= :n_2", &["n", "n_2"]),
            stmt("select owner from hosts where ip = :ip", &["ip"]),
            stmt("select word from words where word = :w", &["w"]),
        ])
        .await
        .unwrap();
    assert!(bound.iter().all(|b| b.memory.is_some()), "{:?}", bound.iter().map(|b| &b.path).collect::<Vec<_>>());
    let at = |ip: &str| {
        let n: u32 = ip.parse::<std::net::Ipv4Addr>().unwrap().into();
        vec![Cell::Integer(n.into()), Cell::Integer(n.into())]
    };
    assert_eq!(k.query(&bound[0], &at("10.0.1.9")).await.unwrap(), Some(vec![Cell::Text("office".into())]));
    assert_eq!(k.query(&bound[0], &at("10.0.0.255")).await.unwrap(), Some(vec![Cell::Text("dmz".into())]));
    assert_eq!(k.query(&bound[0], &at("10.0.2.1")).await.unwrap(), None);
    assert_eq!(k.query(&bound[1], &[Cell::Text("10.0.1.20".into())]).await.unwrap(), Some(vec![Cell::Text("bob".into())]));
    assert_eq!(k.query(&bound[2], &[Cell::Text("beta".into())]).await.unwrap(), Some(vec![Cell::Text("beta".into())]));
}

/// Issue 31: a malformed Warp Parse knowdb is an error naming the file (and
/// the line, for the TOML), and no knowledge comes of it.
#[tokio::test]
async fn a_malformed_warp_parse_knowdb_names_the_file() {
    use omlet::knowledge::KnowledgeConfig;
    // (knowdb.toml, the files beside it, what the error says)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        ("version = 2\n[[tables]]\nname = \"t\"\ncolumns.by_header = [\"a\"]\nfolder = \"x\"\n", &[], "line 5"),
        ("version = 3\n", &[], "knowdb.toml:1: knowdb version 3"),
        ("version = 2\n[[tables]]\nname = \"t\"\ncolumns.by_header = [\"a\"]\n", &[], "knowdb.toml:3: table t:"),
        (
            "version = 2\n[[tables]]\nname = \"t\"\ncolumns.by_header = [\"a\"]\n",
            &[
                ("t/create.sql", "create tabel {table} (a text)"),
                ("t/insert.sql", "insert into {table} values (?1)"),
                ("t/data.csv", "a\n1\n"),
            ],
            "create.sql",
        ),
        (
            "version = 2\n[[tables]]\nname = \"t\"\ncolumns.by_header = [\"b\"]\n",
            &[
                ("t/create.sql", "create table {table} (a text)"),
                ("t/insert.sql", "insert into {table} values (?1)"),
                ("t/data.csv", "a\n1\n"),
            ],
            "no column `b` in its header (a)",
        ),
        (
            "version = 2\n[[tables]]\nname = \"t\"\ncolumns.by_header = [\"a\"]\nexpected_rows = { min = 5 }\n",
            &[
                ("t/create.sql", "create table {table} (a text)"),
                ("t/insert.sql", "insert into {table} values (?1)"),
                ("t/data.csv", "a\n1\n"),
            ],
            "1 rows loaded, fewer than expected_rows.min = 5",
        ),
        (
            "version = 2\n[[tables]]\nname = \"t\"\ncolumns.by_header = [\"a\"]\n",
            &[
                ("t/create.sql", "create table {table} (a integer not null)"),
                ("t/insert.sql", "insert into {table} values (nullif(?1, 'x'))"),
                ("t/data.csv", "a\n1\nx\n"),
            ],
            "row 2",
        ),
    ];
    for (toml, files, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("t")).unwrap();
        write(d, "knowdb.toml", toml);
        for (name, text) in files.iter() {
            write(d, name, text);
        }
        let config = KnowledgeConfig { knowdb: Some(d.join("knowdb.toml")), ..Default::default() };
        let err = match config.open().await {
            Ok(_) => panic!("{toml} loaded"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("knowdb.toml") && err.contains(expected), "{toml}: {err}");
    }
}

/// Issue 31: with `[reload] knowdb = true`, a changed Warp Parse knowdb is
/// loaded again and swapped in whole (its in-memory copy too); one that no
/// longer loads, or now declares other tables, is refused naming the file,
/// and the previous knowledge stays in use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_knowdb_is_loaded_again_and_a_broken_one_leaves_the_old_in_use() {
    use omlet::knowledge::KnowledgeConfig;
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("owner")).unwrap();
    let knowdb = "version = 2\n[[tables]]\nname = \"owner\"\ncolumns.by_header = [\"ip\", \"name\"]\n\
                  expected_rows = { min = 1, max = 100 }\n";
    write(d, "knowdb.toml", knowdb);
    write(&d.join("owner"), "create.sql", "create table {table} (ip text, name text)");
    write(&d.join("owner"), "insert.sql", "insert into {table} values (?1, ?2)");
    write(&d.join("owner"), "data.csv", "ip,name\n10.0.0.1,alice\n");
    let mut config = KnowledgeConfig { knowdb: Some(d.join("knowdb.toml")), ..Default::default() };
    config.reload.knowdb = true;
    config.reload.poll_ms = 20;
    let k = config.open().await.unwrap();
    let rule = "name : t\n---\nwho = select name from owner where ip = read(ip) ;\n";
    let rule =
        omlet::Engine::new().unwrap().load_source("t.oml", rule, &omlet::LoadOptions::new().knowledge(k.clone())).await.unwrap();
    let who = || async {
        let out = rule.evaluate(&omlet::record::from_json_str(r#"{"ip":"10.0.0.1"}"#).unwrap()).await.unwrap();
        omlet::record::to_json_string(&out)
    };
    assert_eq!(who().await, r#"{"who":"alice"}"#);
    assert_eq!(k.memory_tables().await.len(), 1, "the table is held in memory");
    let _watcher = omlet::knowledge::reload::watch(&k).await.unwrap().expect("a watcher");
    let until = |what: &'static str, done: &dyn Fn() -> bool| {
        for _ in 0..500 {
            if done() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("timed out waiting for {what}: {}", k.stats().to_json());
    };
    // A change: the new rows answer, from memory, once loaded.
    write(&d.join("owner"), "data.csv", "ip,name\n10.0.0.1,bob\n");
    until("the reload", &|| k.stats().knowdb_loads.load(Ordering::SeqCst) == 1);
    assert_eq!(who().await, r#"{"who":"bob"}"#);
    assert_eq!(k.memory_tables().await.len(), 1);
    // A broken knowdb (no rows, under expected_rows.min): the old one stays.
    write(&d.join("owner"), "data.csv", "ip,name\n");
    until("the refusal", &|| k.stats().knowdb_load_failures.load(Ordering::SeqCst) == 1);
    assert_eq!(who().await, r#"{"who":"bob"}"#);
    // Refused directly, naming the file: other tables, a missing folder.
    // The watcher stops first, so that it cannot load the new rows under the
    // old knowdb.toml between the two writes.
    drop(_watcher);
    write(&d.join("owner"), "data.csv", "ip,name\n10.0.0.1,carol\n");
    write(d, "knowdb.toml", &format!("{knowdb}\n[[tables]]\nname = \"more\"\n"));
    let e = k.reload_knowdb().await.unwrap_err().to_string();
    assert!(e.contains("knowdb.toml") && e.contains("more"), "{e}");
    assert_eq!(who().await, r#"{"who":"bob"}"#);
    write(d, "knowdb.toml", knowdb);
    k.reload_knowdb().await.unwrap();
    assert_eq!(who().await, r#"{"who":"carol"}"#);
}
