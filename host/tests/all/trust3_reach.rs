//! The third trust round's reach: what a knowdb's SQL, the catalog guard
//! and a MariaDB provider may touch, and reloads of a knowdb by a relative
//! path.

use std::path::Path;
use std::sync::Arc;

use omlet::Engine;
use omlet::knowledge::KnowledgeConfig;
use omlet_testdb::MariaDb;

fn write(dir: &Path, name: &str, text: &str) {
    if let Some(parent) = dir.join(name).parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(dir.join(name), text).unwrap();
}

/// A knowdb held in a SQLite file, whose `create` is `create_sql`: what
/// opening it says (it must fail).
async fn open_err(dir: &Path, create_sql: &str) -> String {
    write(dir, "kb/knowdb.toml", "[[tables]]\nname = \"hosts\"\ncreate = \"hosts.sql\"\n");
    write(dir, "kb/hosts.sql", create_sql);
    let mut c = KnowledgeConfig::for_url(&format!("sqlite://{}", dir.join("kb.db").display()));
    c.knowdb = Some(dir.join("kb/knowdb.toml"));
    match c.open().await {
        Ok(_) => panic!("the knowdb must not load: {create_sql}"),
        Err(e) => e.to_string(),
    }
}

/// A knowdb's SQL file held in a SQLite file attached another database
/// file and wrote into it (or read it). Now every statement of its SQL
/// files is checked first: the load fails naming the file, the statement
/// and why, and nothing outside is touched; what the check would miss,
/// the connection refuses itself.
#[tokio::test]
async fn a_knowdbs_sql_reaches_its_own_database_only() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let outside = d.join("outside.db");
    let o = outside.display();
    for (sql, why) in [
        (
            format!("create table hosts (name text);\nATTACH '{o}' AS x;\ncreate table x.stolen (a);"),
            "ATTACH opens a database file",
        ),
        (format!("create table hosts (name text); vacuum into '{o}';"), "VACUUM INTO"),
        ("create table hosts (name text); pragma writable_schema = on;".into(), "PRAGMA writable_schema is not among"),
        ("create table hosts (name text); select load_extension('/tmp/evil');".into(), "`load_extension`"),
    ] {
        let e = open_err(d, &sql).await;
        assert!(e.contains("hosts.sql: the statement `") && e.contains("is refused") && e.contains(why), "{sql}: {e}");
        assert!(!outside.exists(), "{sql}");
    }
    // The same in Warp Parse's layout, for create.sql and insert.sql.
    write(d, "warp/knowdb.toml", "version = 2\n[[tables]]\nname = \"zone\"\ncolumns.by_header = [\"a\"]\n");
    write(d, "warp/zone/data.csv", "a\n1\n");
    write(d, "warp/zone/create.sql", "create table {table} (a text);");
    write(d, "warp/zone/insert.sql", &format!("insert into {{table}} values (?1); attach '{o}' as x"));
    let mut c = KnowledgeConfig::for_url(&format!("sqlite://{}", d.join("warp.db").display()));
    c.knowdb = Some(d.join("warp/knowdb.toml"));
    let e = c.open().await.err().expect("must not load").to_string();
    assert!(e.contains("insert.sql: the statement `attach '") && e.contains("outside the knowdb's own database"), "{e}");
    assert!(!outside.exists());
    // A knowdb that builds its own tables loads.
    write(d, "kb/knowdb.toml", "[[tables]]\nname = \"hosts\"\ncreate = \"hosts.sql\"\n");
    write(d, "kb/hosts.sql", "create table hosts (name text); insert into hosts values ('a'); pragma table_info(hosts);");
    let mut c = KnowledgeConfig::for_url(&format!("sqlite://{}", d.join("ok.db").display()));
    c.knowdb = Some(d.join("kb/knowdb.toml"));
    let k = c.open().await.unwrap();
    assert_eq!(k.provider().count("hosts").await.unwrap(), 1);
}

async fn load_err(k: Arc<omlet::Knowledge>, rule: &str) -> String {
    match Engine::new().unwrap().load_source("reach.oml", rule, &omlet::LoadOptions::new().knowledge(k)).await {
        Ok(_) => panic!("the load must fail: {rule}"),
        Err(e) => e.to_string(),
    }
}

/// A MariaDB provider read any database its user could (`otherdb.t`):
/// now it reads the one its URL names, by unqualified names; a qualified
/// name is refused at load, even when `tables` lists it, and the system
/// schemas stay catalog tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mariadb_provider_reads_only_its_urls_database() {
    let m = MariaDb::start();
    let k = KnowledgeConfig::for_url(&m.url()).open().await.unwrap();
    let p = k.provider();
    p.execute("create database other").await.unwrap();
    p.execute("create table other.secret (id bigint, v text)").await.unwrap();
    p.execute("insert into other.secret values (1, 'hidden')").await.unwrap();
    p.execute("create table mine (id bigint, v text)").await.unwrap();
    let rule = |table: &str| format!("name : t\n---\nv = select v from {table} where id = read(id) ;\n");
    let m_ = load_err(k.clone(), &rule("other.secret")).await;
    assert!(m_.starts_with("reach.oml:3:5:") && m_.contains("names the database `other`"), "{m_}");
    let mut c = KnowledgeConfig::for_url(&m.url());
    c.tables = Some(vec!["other.secret".into(), "mine".into()]);
    let listed = c.open().await.unwrap();
    let m_ = load_err(listed.clone(), &rule("other.secret")).await;
    assert!(m_.contains("names the database `other`") && m_.contains("even when `tables` lists it"), "{m_}");
    let m_ = load_err(listed.clone(), &rule("mysql.user")).await;
    assert!(m_.contains("catalog"), "{m_}");
    // Its own tables, unqualified, load.
    let opts = omlet::LoadOptions::new().knowledge(listed);
    Engine::new().unwrap().load_source("ok.oml", &rule("mine"), &opts).await.unwrap();
    // A database a knowdb names, whose lookups may be schema-qualified on
    // PostgreSQL: on MariaDB the schema would be another database.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "zone/create.sql", "create table {table} (ip text, zone text)");
    write(d, "zone/insert.sql", "insert into {table} values (?1, ?2)");
    write(d, "zone/data.csv", "ip,zone\n10.0.0.7,dmz\n");
    write(
        d,
        "knowdb.toml",
        &format!(
            "version = 2\n[[tables]]\nname = \"zone\"\ncolumns.by_header = [\"ip\", \"zone\"]\n\n\
             [[provider.sqldb]]\nname = \"asset\"\nkind = \"mysql\"\nconnection_uri = \"{}\"\n",
            m.url()
        ),
    );
    let routed = KnowledgeConfig { knowdb: Some(d.join("knowdb.toml")), ..Default::default() }.open().await.unwrap();
    let m_ = load_err(routed.clone(), &rule("asset.other.secret")).await;
    assert!(m_.contains("names the database `other`"), "{m_}");
    let opts = omlet::LoadOptions::new().knowledge(routed);
    Engine::new().unwrap().load_source("ok.oml", &rule("asset.mine"), &opts).await.unwrap();
}
