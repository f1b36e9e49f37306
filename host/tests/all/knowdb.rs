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
