//! Issue 30 ("trust, round two") in the library: large lookup values do not
//! fill the guest's memory.

use std::sync::Arc;

use omlet::knowledge::Tables;
use omlet::knowledge::sqlite::SqliteProvider;
use omlet::{Engine, Knowledge};

/// Rows of 500 KB, each looked up once: the guest cache was bounded by
/// entries only (4096), so about every 127th record filled the instance's
/// 64 MiB and failed, although it passed alone. It is bounded by bytes now,
/// and a row that large is not kept in it at all.
#[tokio::test]
async fn large_lookup_values_do_not_fill_the_guest_memory() {
    let db = SqliteProvider::memory().await.unwrap();
    db.execute(
        "create table big (id integer primary key, blob text);
         with recursive n(i) as (select 1 union all select i + 1 from n where i < 300)
         insert into big select i, printf('%.*c', 500000, 'x') from n;",
    )
    .await
    .unwrap();
    let knowledge = Arc::new(Knowledge::new(Arc::new(db)));
    let engine = Engine::new().unwrap();
    let rule = engine
        .load_source(
            "big.oml",
            "name : t\n---\nv = select blob from big where id = read(id) ;\nid = read(id) ;\n",
            &omlet::LoadOptions::new().knowledge(knowledge),
        )
        .await
        .unwrap();
    let records: Vec<omlet::Record> =
        (1..=300).map(|i| omlet::record::from_json_str(&format!("{{\"id\":{i}}}")).unwrap()).collect();
    let mut failed = Vec::new();
    for (i, rec) in records.iter().enumerate() {
        match rule.evaluate(rec).await {
            Ok(out) => assert!(omlet::record::to_json_string(&out).len() > 500_000),
            Err(e) => failed.push(format!("record {}: {e}", i + 1)),
        }
    }
    assert!(failed.is_empty(), "{} of 300 failed, first: {}", failed.len(), failed[0]);
}

/// JSON integers past 64 bits used to become floats, even through
/// `* = take()`; they keep every digit now, through the wasm component and
/// the frame both ways.
#[tokio::test]
async fn integers_past_64_bits_keep_their_digits_through_the_guest() {
    let engine = Engine::new().unwrap();
    let rule = engine
        .load_source("take.oml", "name : t\n---\n* = take() ;\nt : chars = read(id) ;\n", &omlet::LoadOptions::new())
        .await
        .unwrap();
    let input = r#"{"id":340282366920938463463374607431768211457,"neg":-9223372036854775809,"u":18446744073709551615}"#;
    let out = rule.evaluate(&omlet::record::from_json_str(input).unwrap()).await.unwrap();
    assert_eq!(
        omlet::record::to_json_string(&out),
        r#"{"id":340282366920938463463374607431768211457,"neg":-9223372036854775809,"u":18446744073709551615,"t":"340282366920938463463374607431768211457"}"#
    );
    assert_eq!(out.get("u"), Some(omlet::Value::BigInt("18446744073709551615".into())));
}
