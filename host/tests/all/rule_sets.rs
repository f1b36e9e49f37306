//! Rule sets through the wasm component: several models in one component,
//! records routed by rule path or model name (spec §3.1).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use omlet::build::RuleSource;
use omlet::knowledge::sqlite::SqliteProvider;
use omlet::{Engine, Error, Knowledge, Route, Rule};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

async fn example_set() -> Rule {
    let db = SqliteProvider::memory().await.unwrap();
    for k in ["examples/nginx/knowdb/knowdb.toml", "examples/apt/knowdb/knowdb.toml"] {
        omlet::knowledge::knowdb::load(&root().join(k), &db).await.unwrap();
    }
    let sources = RuleSource::collect(&[root().join("examples")]).unwrap();
    assert_eq!(sources.len(), 3, "the three example models");
    Engine::new()
        .unwrap()
        .load_sources(&sources, &omlet::LoadOptions::new().knowledge(Arc::new(Knowledge::new(Arc::new(db)))))
        .await
        .unwrap()
}

fn record(json: &str) -> omlet::Record {
    omlet::record::from_json_str(json).unwrap()
}

fn json(r: &omlet::Record) -> String {
    omlet::record::to_json_string(r)
}

#[tokio::test]
async fn each_record_goes_to_the_model_claiming_its_rule_path() {
    let set = example_set().await;
    let names: Vec<&str> = set.info().models.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["ids/apt_alert", "nginx/access", "windows/sysmon"]);
    // Each model carries only its own statements.
    let nginx = &set.info().models[1];
    assert_eq!(nginx.statements.len(), 1);
    let s = &set.info().statements[nginx.statements[0] as usize];
    assert!(s.sql.contains("ip_zone") && s.file.ends_with("nginx.oml"), "{s:?}");
    assert!(set.info().models[2].statements.is_empty());

    let nginx_in = record(
        r#"{"client_ip":"10.0.1.20","status":"404","method":"GET","request_uri":"/missing.html","user_agent":"Googlebot/2.1"}"#,
    );
    let out = set.evaluate_on(Route::Path("/nginx/access_log"), &nginx_in).await.unwrap();
    assert!(json(&out).contains(r#""zone":"office","owner":"it-desk""#), "{}", json(&out));
    // The same record by model name gives the same output.
    let by_name = set.evaluate_on(Route::Model("nginx/access"), &nginx_in).await.unwrap();
    assert_eq!(json(&by_name), json(&out));

    let sysmon = set
        .evaluate_on(Route::Path("/windows/sysmon/process_create"), &record(r#"{"EventID":1,"Image":"C:\\x\\cmd.exe"}"#))
        .await
        .unwrap();
    assert!(json(&sysmon).starts_with(r#"{"event_id":1,"event_type":"process_create""#), "{}", json(&sysmon));
}

#[tokio::test]
async fn a_record_no_model_claims_is_unrouted_and_untouched() {
    let set = example_set().await;
    match set.evaluate_on(Route::Path("/firewall/deny"), &record(r#"{"a":1}"#)).await {
        Err(Error::Unrouted { index: 0, message }) => {
            assert_eq!(message, "no enabled model claims rule path `/firewall/deny`")
        }
        other => panic!("expected an unrouted error, got {other:?}"),
    }
    match set.evaluate_on(Route::Model("nope"), &record("{}")).await {
        Err(Error::Unrouted { message, .. }) => assert_eq!(message, "no model is named `nope`"),
        other => panic!("{other:?}"),
    }
    // A set of several models has no default model.
    match set.evaluate(&record("{}")).await {
        Err(Error::Unrouted { message, .. }) => assert!(message.contains("3 models"), "{message}"),
        other => panic!("{other:?}"),
    }
    // In a batch, every record of an unclaimed route is unrouted, none is lost.
    let out = set.evaluate_batch_on(Route::Path("/nowhere"), &[record("{}"), record(r#"{"b":2}"#)]).await.unwrap();
    assert_eq!(out.len(), 2);
    assert!(out.iter().enumerate().all(|(i, r)| matches!(r, Err(Error::Unrouted { index, .. }) if *index == i)));
}

#[tokio::test]
async fn batches_follow_their_route_and_the_blocking_facade_too() {
    let set = example_set().await;
    let recs: Vec<_> = (0..3).map(|i| record(&format!(r#"{{"EventID":{},"Image":"a.exe"}}"#, i + 1))).collect();
    let out = set.evaluate_batch_on(Route::Path("/windows/sysmon/x"), &recs).await.unwrap();
    let ids: Vec<String> = out.iter().map(|r| json(r.as_ref().unwrap())[..14].to_string()).collect();
    assert_eq!(ids, [r#"{"event_id":1,"#, r#"{"event_id":2,"#, r#"{"event_id":3,"#]);
    let set = Arc::new(set);
    let s2 = set.clone();
    let r = std::thread::spawn(move || s2.evaluate_on_blocking(Route::Model("windows/sysmon"), &record(r#"{"EventID":3}"#)))
        .join()
        .unwrap()
        .unwrap();
    assert!(json(&r).starts_with(r#"{"event_id":3,"event_type":"network_connect""#), "{}", json(&r));
}

#[test]
fn overlapping_claims_fail_the_build_naming_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.oml");
    let b = dir.path().join("b.oml");
    std::fs::write(&a, "name : all\nrule : /nginx/*\n---\nx = chars(1) ;\n").unwrap();
    std::fs::write(&b, "name : access\nrule :\n    /nginx/access_log\n---\nx = chars(2) ;\n").unwrap();
    let sources = RuleSource::collect(&[dir.path().to_path_buf()]).unwrap();
    let Err(err) = omlet::build::build_component(&sources) else { panic!("the build must fail") };
    let text = err.to_string();
    let (fa, fb) = (a.display().to_string(), b.display().to_string());
    assert!(
        text.contains(&format!(
            "{fb}:3:5: error: rule path `/nginx/access_log` is claimed both by this model and by model `all` in {fa}"
        )),
        "{text}"
    );
    // Disabling one of them makes a valid set.
    std::fs::write(&a, "name : all\nrule : /nginx/*\nenable : false\n---\nx = chars(1) ;\n").unwrap();
    let sources = RuleSource::collect(&[PathBuf::from(dir.path())]).unwrap();
    assert!(omlet::build::build_component(&sources).is_ok());
}

/// Issue 33: `Route::Field` routes one record, or each record of a batch,
/// by the rule path in one of its fields, as `omlet run --rule-path-field`
/// does; a record without the field is unrouted, in its place.
#[tokio::test]
async fn a_record_routes_by_the_rule_path_in_its_own_field() {
    let set = example_set().await;
    let nginx = record(r#"{"rule_path":"/nginx/access_log","client_ip":"10.0.1.20","status":"404"}"#);
    let sysmon = record(r#"{"rule_path":"/windows/sysmon/process_create","EventID":1,"Image":"C:\\x\\cmd.exe"}"#);
    let none = record(r#"{"EventID":1}"#);
    let by_path = set.evaluate_on(Route::Path("/nginx/access_log"), &nginx).await.unwrap();
    let by_field = set.evaluate_on(Route::Field("rule_path"), &nginx).await.unwrap();
    assert_eq!(json(&by_field), json(&by_path));
    assert!(matches!(set.evaluate_on(Route::Field("rule_path"), &none).await, Err(Error::Unrouted { .. })));
    let batch = set.evaluate_batch_on(Route::Field("rule_path"), &[nginx.clone(), none, sysmon.clone(), nginx]).await.unwrap();
    assert_eq!(json(batch[0].as_ref().unwrap()), json(&by_path));
    assert!(matches!(&batch[1], Err(Error::Unrouted { index: 1, .. })), "{:?}", batch[1]);
    assert!(json(batch[2].as_ref().unwrap()).starts_with(r#"{"event_id":1"#), "{:?}", batch[2]);
    assert_eq!(json(batch[3].as_ref().unwrap()), json(&by_path));
    // The blocking facade, from a thread of its own (it refuses a runtime's).
    let alone = std::thread::scope(|s| s.spawn(|| set.evaluate_on_blocking(Route::Field("rule_path"), &sysmon)).join().unwrap());
    assert_eq!(json(&alone.unwrap()), json(batch[2].as_ref().unwrap()));
}

/// Issue 33, item 6: a watched rule set is loaded again when its files
/// change and swapped in; one that no longer compiles keeps the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watched_rule_set_is_swapped_in_and_a_broken_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.oml");
    std::fs::write(&file, "name : t\n---\nx = chars(one) ;\n").unwrap();
    let engine = Engine::new().unwrap();
    let live = omlet::stream::LiveRule::new(engine.load_path(&file, &omlet::LoadOptions::new()).await.unwrap());
    let told = Arc::new(std::sync::Mutex::new(Vec::new()));
    let heard = told.clone();
    let _w = live
        .watch(
            engine,
            dir.path().to_path_buf(),
            omlet::LoadOptions::new(),
            std::time::Duration::from_millis(20),
            |_| Ok(()),
            move |r| {
                heard.lock().unwrap().push(r.map_err(|e| e.to_string()));
            },
        )
        .unwrap();
    let x = |live: &omlet::stream::LiveRule| {
        let rule = live.current();
        async move { rule.evaluate(&record("{}")).await.unwrap().to_json() }
    };
    assert_eq!(x(&live).await, r#"{"x":"one"}"#);
    std::fs::write(&file, "name : t\n---\nx = chars(two) ;\n").unwrap();
    for _ in 0..500 {
        if live.reloads().0 == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(x(&live).await, r#"{"x":"two"}"#, "{:?}", told.lock().unwrap());
    std::fs::write(&file, "name : t\n---\nx = chars(three\n").unwrap();
    for _ in 0..500 {
        if live.reloads().1 == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(live.reloads(), (1, 1));
    assert_eq!(x(&live).await, r#"{"x":"two"}"#, "the old rule keeps running");
    let said = told.lock().unwrap();
    assert!(said[1].as_ref().is_err_and(|e| e.contains("t.oml:3")), "{said:?}");
}
