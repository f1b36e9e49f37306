//! End to end through the real wasm component: compile the example rule,
//! evaluate records with SQLite lookups, compare the output.

use std::path::Path;
use std::sync::Arc;

use omlet::knowledge::sqlite::SqliteProvider;
use omlet::{Engine, Knowledge};

/// The guest of an omlet built before the `lines` export (tests/fixtures/README.md).
const BEFORE_LINES: &[u8] = include_bytes!("../fixtures/guest-before-lines.wasm");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

async fn example_knowledge() -> Arc<Knowledge> {
    let db = SqliteProvider::memory().await.unwrap();
    omlet::knowledge::knowdb::load(&root().join("examples/nginx/knowdb/knowdb.toml"), &db).await.unwrap();
    Arc::new(Knowledge::new(Arc::new(db)))
}

fn records(jsonl: &str) -> Vec<omlet::Record> {
    jsonl.lines().filter(|l| !l.trim().is_empty()).map(|l| omlet::record::from_json_str(l).unwrap()).collect()
}

/// The hand-checked outputs in examples/nginx/tests.toml, in input order.
fn expected_nginx() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("examples/nginx/tests.toml")).unwrap();
    let doc: toml::Value = toml::from_str(&text).unwrap();
    doc["case"].as_array().unwrap().iter().map(|c| c["expected"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn example_rule_enriches_records_one_by_one_and_in_a_batch() {
    let knowledge = example_knowledge().await;
    let engine = Engine::new().unwrap();
    let rule = engine
        .load_path(&root().join("examples/nginx/nginx.oml"), &omlet::LoadOptions::new().knowledge(knowledge.clone()))
        .await
        .unwrap();
    assert_eq!(rule.info().statements.len(), 1);
    assert_eq!(
        rule.info().statements[0].sql,
        "select zone,owner from ip_zone where lo_int <= :client_ip and hi_int >= :client_ip_2"
    );

    let input = records(&std::fs::read_to_string(root().join("examples/nginx/access.jsonl")).unwrap());
    let expected = expected_nginx();
    assert_eq!(input.len(), expected.len());
    for (rec, want) in input.iter().zip(&expected) {
        let out = rule.evaluate(rec).await.unwrap();
        assert_eq!(omlet::record::to_json_string(&out), *want);
    }
    let batch = rule.evaluate_batch(&input).await.unwrap();
    let got: Vec<String> = batch.into_iter().map(|r| omlet::record::to_json_string(&r.unwrap())).collect();
    assert_eq!(got, expected);
    // The guest cache answers repeated keys: the batch's lookups were all
    // served by the (single, reused) instance's cache.
    let lookups = || knowledge.stats().lookups.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(lookups(), 4, "the guest cache should have served the batch");
    // After a reload the generation changes and the guest asks again.
    knowledge.reload();
    rule.evaluate(&input[0]).await.unwrap();
    assert_eq!(lookups(), 5);
}

#[test]
fn blocking_api_works_without_a_runtime() {
    let engine = Engine::new().unwrap();
    let rule = omlet::block_on(engine.load_source(
        "inline.oml",
        "name : t\n---\nn : digit = read(n) ;\ns = chars(ok) ;\n",
        &omlet::LoadOptions::new(),
    ))
    .unwrap();
    let out = rule.evaluate_blocking(&records(r#"{"n":"42"}"#)[0]).unwrap();
    assert_eq!(omlet::record::to_json_string(&out), r#"{"n":42,"s":"ok"}"#);
    let outs = rule.evaluate_batch_blocking(&records("{\"n\":\"1\"}\n{\"n\":\"x\"}")).unwrap();
    let got: Vec<String> = outs.into_iter().map(|r| omlet::record::to_json_string(&r.unwrap())).collect();
    assert_eq!(got, vec![r#"{"n":1,"s":"ok"}"#, r#"{"n":"x","s":"ok"}"#]);
}

#[tokio::test]
async fn lookup_against_a_missing_table_fails_the_load_with_file_and_line() {
    let knowledge = example_knowledge().await;
    let engine = Engine::new().unwrap();
    let err = engine
        .load_source(
            "bad.oml",
            "name : t\n---\na = chars(x) ;\nz = select zone from nowhere where ip = read(ip) ;\n",
            &omlet::LoadOptions::new().knowledge(knowledge),
        )
        .await
        .err()
        .expect("load must fail");
    let msg = err.to_string();
    assert!(msg.starts_with("bad.oml:4:5: lookup `select zone from nowhere where ip = :ip`"), "{msg}");
    assert!(msg.contains("no such table"), "{msg}");
}

#[tokio::test]
async fn compile_errors_point_at_line_and_column() {
    let engine = Engine::new().unwrap();
    let err = engine
        .load_source("r.oml", "name : t\n---\nx : int = read(a) ;\ny = digit(abc) ;\n", &omlet::LoadOptions::new())
        .await
        .err()
        .expect("compile must fail");
    let msg = err.to_string();
    assert!(msg.contains("r.oml:3:5: error: unknown type name `int`"), "{msg}");
    assert!(msg.contains("r.oml:4:5: error: digit literal does not parse"), "{msg}");
    assert!(msg.contains("    ^^^"), "a caret line is expected:\n{msg}");
}

#[tokio::test]
async fn a_rule_without_knowledge_gets_absent_lookups() {
    let engine = Engine::new().unwrap();
    let rule = engine
        .load_source(
            "r.oml",
            "name : t\n---\nv = select value from perf where id = read(id) ;\nk = chars(k) ;\n",
            &omlet::LoadOptions::new(),
        )
        .await
        .unwrap();
    let out = rule.evaluate(&records(r#"{"id":1}"#)[0]).await.unwrap();
    assert_eq!(omlet::record::to_json_string(&out), r#"{"k":"k"}"#);
}

/// `stream::run_json` gets each output as the JSON line the guest rendered
/// (`evaluate-batch-lines`), or renders it from the guest's frame; `run`
/// builds the `Record`. A stream's consumer must not be able to tell them
/// apart: every outcome in the same order, each line the text of the
/// `Record`'s `to_json`, each error the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_json_writes_the_lines_run_s_records_render_to() {
    use omlet::stream::{self, Format, Outcome, RunOptions};
    let two_by_two = || RunOptions { batch: 2, concurrency: 2, ..Default::default() };
    let rule_text = r#"name : kinds
---
ip : ip = take(ip) ;
when : time = take(when) ;
ratio : float = take(ratio) ;
n : digit = take(n) ;
ok = bool(true) ;
tags = collect read(keys:[tag1, tag2]) ;
nested = object {
    text = read(text) ;
    n : digit = read(n) ;
    zero : float = float(0) ;
} ;
line = fmt("{text}|{n}", @text, @n) ;
__hidden = take(secret) ;
* = take() ;
"#;
    let input = concat!(
        r#"{"ip":"10.0.0.7","when":"2024-03-01 12:30:45","ratio":"0.25","n":"42","tag1":"a","tag2":"b","text":"quote \" backslash \\ tab \t é ✓ \u0001","secret":"s","extra":null,"deep":{"z":[1,2.5,{"y":"x"}],"a":false}}"#,
        "\n",
        "not json\n",
        r#"{"ip":"2001:db8::1","n":"-7","text":"","ratio":"1e300"}"#,
        "\n",
        r#"{}"#,
        "\n",
    );
    let knowledge = example_knowledge().await;
    let engine = Engine::new().unwrap();
    let options = omlet::LoadOptions::new().knowledge(knowledge);
    for (file, text) in [
        ("kinds.oml", rule_text.to_string()),
        ("nginx.oml", std::fs::read_to_string(root().join("examples/nginx/nginx.oml")).unwrap()),
    ] {
        let mut jsonl = input.to_string();
        if file == "nginx.oml" {
            jsonl.push_str(&std::fs::read_to_string(root().join("examples/nginx/access.jsonl")).unwrap());
        }
        let rule = engine.load_source(file, &text, &options).await.unwrap();
        assert!(rule.guest_renders_lines(), "{file}: the shipped guest renders lines, on the fiber-less path");
        // The same rule in a component built before the guest could render
        // lines (tests/fixtures/README.md): it still loads, and `run_json`
        // takes the frame path, with the same lines.
        let program = omlet::build::compile(&[omlet::build::RuleSource { file: file.into(), text: text.clone() }]).unwrap();
        let earlier = omlet::build::splice_ir(BEFORE_LINES, &program.to_bytes()).unwrap();
        let earlier = wit_component::ComponentEncoder::default().module(&earlier).unwrap().encode().unwrap();
        let earlier = engine.load_component(&earlier, &options).await.unwrap();
        assert!(!earlier.guest_renders_lines(), "{file}: a guest without the `lines` export");
        let reader = |t: &str| -> Box<dyn std::io::BufRead + Send> { Box::new(std::io::Cursor::new(t.as_bytes().to_vec())) };
        let mut built = Vec::new();
        stream::run(rule.clone(), stream::read(reader(&jsonl), Format::Jsonl), &two_by_two(), |d| {
            built.push(match d.outcome {
                Outcome::Ok(r) => Ok(r.to_json()),
                Outcome::Failed(e) | Outcome::Unrouted(e) => Err(e.to_string()),
            });
            Ok(())
        })
        .await
        .unwrap();
        for rule in [rule, earlier] {
            let mut rendered = Vec::new();
            stream::run_json(rule, stream::read(reader(&jsonl), Format::Jsonl), &two_by_two(), |d| {
                rendered.push(match d.outcome {
                    Outcome::Ok(line) => Ok(line),
                    Outcome::Failed(e) | Outcome::Unrouted(e) => Err(e.to_string()),
                });
                Ok(())
            })
            .await
            .unwrap();
            assert_eq!(rendered, built, "{file}");
        }
        let oks = built.iter().filter(|r| r.is_ok()).count();
        assert!(oks >= 3 && built.len() > oks, "{file}: the input must give outputs and errors: {built:?}");
        if file == "kinds.oml" {
            let first = built[0].as_ref().unwrap();
            for part in [
                r#""ip":"10.0.0.7""#,
                r#""tags":["a","b"]"#,
                r#""nested":{"n":42,"#,
                r#""deep":{"a":false,"z":[1,2.5,{"y":"x"}]}"#,
                r#""extra":null"#,
            ] {
                assert!(first.contains(part), "{part} missing from {first}");
            }
            assert!(!first.contains("hidden"), "{first}");
        }
    }
}
