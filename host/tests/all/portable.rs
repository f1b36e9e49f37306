//! Portability: the rule-set component omlet builds runs unchanged outside
//! omlet's host. examples/portable/host.mjs runs it under Node.js with jco,
//! `knowledge.query` answered in JavaScript by sql.js; its output must be
//! byte for byte what omlet's own host (wasmtime, sqlx) gives.
//!
//! Needs `node` and `npm` on the PATH (CI has them); the first run installs
//! examples/portable/node_modules with `npm ci`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use omlet::build::{RuleSource, build_component};
use omlet::knowledge::sqlite::SqliteProvider;
use omlet::{Engine, Error, Knowledge, Route, Rule};
use serde_json::Value as Json;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

fn portable_dir() -> PathBuf {
    root().join("examples/portable")
}

/// A record that gave no output: (1-based record number, kind, message).
type Lost = (u64, String, String);

/// What a host made of a JSONL input: output lines in order, and the records lost.
#[derive(Debug, Default)]
struct Outcome {
    lines: Vec<String>,
    lost: Vec<Lost>,
}

/// Evaluates every record of `jsonl` with omlet's host, one call per record,
/// routed by its `rule_path` field, as `omlet run --rule-path-field rule_path`
/// does: blank lines are not records, records are numbered from 1.
async fn omlet_outcome(rule: &Rule, jsonl: &str) -> Outcome {
    let mut out = Outcome::default();
    let lines = jsonl.lines().filter(|l| !l.trim().is_empty());
    for (number, line) in (1u64..).zip(lines) {
        let mut lose = |kind: &str, message: String| out.lost.push((number, kind.to_string(), message));
        let record = match omlet::Record::from_json(line) {
            Ok(r) => r,
            Err(e) => {
                let omlet::Error::Input { message, .. } = e else { panic!("not an input error: {e}") };
                lose("failed", message);
                continue;
            }
        };
        let path = match record.get("rule_path") {
            Some(omlet::Value::Chars(p)) => p,
            Some(_) => {
                lose("unrouted", "the rule-path field `rule_path` is not text".into());
                continue;
            }
            None => {
                lose("unrouted", "the record has no rule-path field `rule_path`".into());
                continue;
            }
        };
        match rule.evaluate_on(Route::Path(&path), &record).await {
            Ok(r) => out.lines.push(omlet::record::to_json_string(&r)),
            Err(Error::Unrouted { message, .. }) => lose("unrouted", message),
            Err(Error::Lookup { message, .. }) => lose("failed", format!("lookup failed: {message}")),
            Err(e) => panic!("record {number}: omlet's host failed: {e}"),
        }
    }
    out
}

/// Whether examples/portable/node_modules holds the exact versions package.json pins.
fn node_modules_current(dir: &Path) -> bool {
    let read = |p: PathBuf| -> Option<Json> { serde_json::from_str(&std::fs::read_to_string(p).ok()?).ok() };
    let Some(manifest) = read(dir.join("package.json")) else {
        panic!("cannot read {}", dir.join("package.json").display());
    };
    let deps = manifest["dependencies"].as_object().expect("package.json has no dependencies");
    deps.iter().all(|(name, pinned)| {
        let installed = read(dir.join("node_modules").join(name).join("package.json"));
        installed.is_some_and(|p| p["version"] == *pinned)
    })
}

/// Installs examples/portable/node_modules (`npm ci`) unless it is current.
fn node_host_ready() {
    static READY: Mutex<bool> = Mutex::new(false);
    let mut ready = READY.lock().unwrap_or_else(|e| e.into_inner());
    if *ready {
        return;
    }
    let node = Command::new("node").arg("--version").output();
    match node {
        Ok(o) if o.status.success() => {}
        _ => panic!(
            "this test runs examples/portable/host.mjs and needs Node.js (v20 or later) and npm on the PATH; \
             install them (CI has them)"
        ),
    }
    let dir = portable_dir();
    if !node_modules_current(&dir) {
        let started = std::time::Instant::now();
        let out = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run `npm ci` in {} (is npm installed? CI has it): {e}", dir.display()));
        assert!(
            out.status.success(),
            "`npm ci` in {} failed:\n{}\n{}",
            dir.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("npm ci in {} took {:.1} s", dir.display(), started.elapsed().as_secs_f64());
    }
    *ready = true;
}

/// Runs `node host.mjs component records knowdbs…`: its outcome and exit code.
async fn node_outcome(component: &Path, records: &Path, knowdbs: &[PathBuf]) -> (Outcome, Option<i32>) {
    node_host_ready();
    let mut cmd = Command::new("node");
    cmd.arg("host.mjs").arg(component).arg(records).args(knowdbs).current_dir(portable_dir());
    let out = tokio::task::spawn_blocking(move || cmd.output()).await.unwrap().expect("cannot run node");
    let stdout = String::from_utf8(out.stdout).expect("host.mjs wrote invalid UTF-8");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_ne!(out.status.code(), Some(2), "host.mjs could not run:\n{stderr}");
    let mut lost = Vec::new();
    for line in stderr.lines().filter(|l| l.starts_with('{')) {
        let j: Json = serde_json::from_str(line).unwrap_or_else(|e| panic!("bad error line from host.mjs ({e}): {line}"));
        lost.push((
            j["record"].as_u64().expect("error line without a record number"),
            j["kind"].as_str().expect("error line without a kind").to_string(),
            j["error"].as_str().expect("error line without a message").to_string(),
        ));
    }
    let lines = stdout.lines().map(str::to_string).collect();
    (Outcome { lines, lost }, out.status.code())
}

/// Asserts two hosts' output lines are equal, pointing at the first that differs.
fn assert_same_lines(node: &[String], omlet: &[String]) {
    for (i, (n, o)) in node.iter().zip(omlet).enumerate() {
        assert_eq!(n, o, "output line {} differs (left: node host.mjs, right: omlet)", i + 1);
    }
    assert_eq!(node.len(), omlet.len(), "node wrote {} output lines, omlet {}", node.len(), omlet.len());
}

#[tokio::test]
async fn example_rule_set_gives_the_same_output_under_node_as_under_omlet() {
    let sources = RuleSource::collect(&[root().join("examples")]).unwrap();
    let component = build_component(&sources).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("set.wasm");
    std::fs::write(&set, &component).unwrap();

    let knowdbs = [root().join("examples/nginx/knowdb/knowdb.toml"), root().join("examples/apt/knowdb/knowdb.toml")];
    let db = SqliteProvider::memory().await.unwrap();
    for k in &knowdbs {
        omlet::knowledge::knowdb::load(k, &db).await.unwrap();
    }
    let knowledge = Arc::new(Knowledge::new(Arc::new(db)));
    let rule = Engine::new().unwrap().load_component(&component, &omlet::LoadOptions::new().knowledge(knowledge)).await.unwrap();
    assert_eq!(rule.info().models.len(), 3);

    let records = root().join("examples/ruleset/records.jsonl");
    let omlet = omlet_outcome(&rule, &std::fs::read_to_string(&records).unwrap()).await;
    // The example set: ten records claimed by the three models, one path no model claims.
    assert_eq!(omlet.lines.len(), 10, "omlet's own output changed: {:#?}", omlet);
    assert_eq!(omlet.lost, vec![(11, "unrouted".to_string(), "no enabled model claims rule path `/firewall/deny`".to_string())]);
    // The lookups ran: zones from ip_zone, actors from apt_groups.
    assert!(omlet.lines[0].contains(r#""zone":"dmz","owner":"web-team""#), "{}", omlet.lines[0]);
    assert!(omlet.lines[2].contains(r#""actor_cn":"海莲花","country":"越南""#), "{}", omlet.lines[2]);

    let (node, code) = node_outcome(&set, &records, &knowdbs).await;
    assert_same_lines(&node.lines, &omlet.lines);
    assert_eq!(node.lost, omlet.lost, "records lost (left: node, right: omlet)");
    assert_eq!(code, Some(1), "like omlet run, host.mjs exits 1 when a record is unrouted");
}

/// One model producing every kind of value the frame carries: times (from
/// literals: OML does not convert chars to time) with 0, 3, 6 and 9 fraction
/// digits and before 1970, ipv4, ipv6 (compressed and IPv4-mapped), floats
/// with and without fractions and at the extremes, digits at the i64 limits,
/// null, nested objects and arrays, a hidden `__` field. The records also
/// exercise JSON reading: repeated keys, integer-like keys, `-0`, numbers
/// beyond i64, escapes, non-ASCII, a blank line, and records that cannot be
/// routed or read.
const KINDS_OML: &str = r#"name : portable/kinds
rule : /portable/kinds
---
micros = time(2024-02-29 23:59:59.123456) ;
millis = time(2024-03-02 08:15:42.117) ;
nanos = time(2024-01-01 00:00:00.000000001) ;
old = time(1900-01-01 00:00:00) ;
before_epoch = time(1969-12-31 23:59:59.000001) ;
addr4 : ip = take(a4) ;
addr6 = ip(2001:db8::8:800:200c:417a) ;
mapped = ip(::ffff:192.0.2.1) ;
loop6 = ip(::1) ;
ratio : float = take(r) ;
whole : float = take(w) ;
big : digit = take(big) ;
flag : bool = take(flag) ;
nothing = take(nothing) ;
__hidden = take(hidden) ;
nested = object {
    ip : ip = read(a4b) ;
    noon = time(2000-01-01 12:00:00) ;
} ;
* = take() ;
"#;

const KINDS_JSONL: &str = r#"{"rule_path":"/portable/kinds","ts":"2024-03-01T00:00:00.5","a4":"192.168.1.254","a4b":"10.0.0.1","r":"0.0000001","w":"1e21","big":"-9223372036854775808","flag":"true","nothing":null,"hidden":"x","arr":[1,2.5,-0.0,1e300,"s",null,true,{"b":1,"a":[]}],"obj":{"z":1,"a":{"y":-1.5e-9},"é":"accent","Z":2},"esc":"a\"b\\c\n\t\u0001\u007f€😀\ud83d\ude00","dup":1,"dup":2,"1":"integer-like key","huge":18446744073709551615,"neg0":-0,"f1":1.0,"e":5e-324}
{"rule_path":"/portable/kinds","a4":"0.0.0.0","r":"-2.5e-7","w":"-3","big":"9223372036854775807","flag":"false","hidden":"y"}

{"rule_path":"/portable/kinds","r":"nan","w":"inf","big":"12"}
{"rule_path":"/nowhere"}
{"rule_path":5}
{"no_path":1}
[1,2]
{"rule_path":"/portable/kinds", broken
{"rule_path":"/portable/kinds","x":01}
"#;

#[tokio::test]
async fn every_value_kind_and_every_lost_record_come_out_of_node_as_out_of_omlet() {
    let dir = tempfile::tempdir().unwrap();
    let oml = dir.path().join("kinds.oml");
    std::fs::write(&oml, KINDS_OML).unwrap();
    let records = dir.path().join("kinds.jsonl");
    std::fs::write(&records, KINDS_JSONL).unwrap();
    let component = build_component(&RuleSource::collect(&[oml]).unwrap()).unwrap();
    let set = dir.path().join("kinds.wasm");
    std::fs::write(&set, &component).unwrap();

    let rule = Engine::new().unwrap().load_component(&component, &omlet::LoadOptions::new()).await.unwrap();
    let omlet = omlet_outcome(&rule, KINDS_JSONL).await;
    assert_eq!(omlet.lines.len(), 3, "omlet's own output changed: {:#?}", omlet);
    // The model does produce the kinds this test is about.
    for want in [
        r#""micros":"2024-02-29 23:59:59.123456""#,
        r#""before_epoch":"1969-12-31 23:59:59.000001""#,
        r#""addr6":"2001:db8::8:800:200c:417a""#,
        r#""mapped":"::ffff:192.0.2.1""#,
        r#""ratio":0.0000001"#,
        r#""whole":1000000000000000000000.0"#,
        r#""neg0":-0.0"#,
    ] {
        assert!(omlet.lines[0].contains(want), "omlet's output lacks {want}: {}", omlet.lines[0]);
    }
    assert!(!omlet.lines[0].contains("__hidden"), "an ignore field is rendered: {}", omlet.lines[0]);
    let kinds: Vec<(u64, &str)> = omlet.lost.iter().map(|(n, k, _)| (*n, k.as_str())).collect();
    assert_eq!(kinds, [(4, "unrouted"), (5, "unrouted"), (6, "unrouted"), (7, "failed"), (8, "failed"), (9, "failed")]);

    let (node, code) = node_outcome(&set, &records, &[]).await;
    assert_same_lines(&node.lines, &omlet.lines);
    assert_eq!(node.lost.len(), omlet.lost.len(), "records lost (left: node, right: omlet): {:#?} {:#?}", node.lost, omlet.lost);
    for (n, o) in node.lost.iter().zip(&omlet.lost) {
        assert_eq!((n.0, &n.1), (o.0, &o.1), "record {} is lost differently (left: node, right: omlet)", o.0);
        // Both read JSON their own way: the reason is the same, the wording may not be.
        if o.2.starts_with("invalid JSON: ") {
            assert!(n.2.starts_with("invalid JSON: "), "record {}: {} vs {}", o.0, n.2, o.2);
        } else {
            assert_eq!(n.2, o.2, "record {} is lost for another reason (left: node, right: omlet)", o.0);
        }
    }
    assert_eq!(code, Some(1));
}
