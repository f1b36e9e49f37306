//! The built component as any component host sees it: its imports, plain
//! wasmtime bindings (not omlet's API), the guest's freshness and the IR
//! version check.

use std::collections::HashMap;
use std::path::Path;

use omlet::build::RuleSource;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, Store};

mod plain {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "rule",
        imports: { default: async | trappable },
        exports: { default: async },
    });
}

use plain::omlet::rule::{clock, knowledge, types};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

fn build(text: &str) -> Vec<u8> {
    omlet::build::build_component(&[RuleSource { file: "t.oml".into(), text: text.into() }]).unwrap()
}

const LOOKUP_RULE: &str = "name : t\n---\nat = Now::time() ;\nv = select value from perf where id = read(id) ;\n";

#[test]
fn component_imports_only_omlets_interfaces() {
    let engine = Engine::default();
    let component = Component::from_binary(&engine, &build(LOOKUP_RULE)).unwrap();
    let ty = component.component_type();
    let mut names = Vec::new();
    for (name, item) in ty.imports(&engine) {
        names.push(name.to_string());
        let ComponentItem::ComponentInstance(inst) = item.ty else { panic!("unexpected import kind: {name}") };
        let funcs: Vec<String> = inst
            .exports(&engine)
            .filter(|(_, e)| !matches!(e.ty, ComponentItem::Type(_)))
            .map(|(n, _)| n.to_string())
            .collect();
        match name {
            "omlet:rule/knowledge@0.1.0" => assert_eq!(funcs, ["query", "columns"]),
            "omlet:rule/clock@0.1.0" => assert_eq!(funcs, ["now"]),
            "omlet:rule/types@0.1.0" => assert!(funcs.is_empty(), "types exports only types"),
            other => panic!("foreign import {other}"),
        }
    }
    names.sort();
    assert_eq!(names, ["omlet:rule/clock@0.1.0", "omlet:rule/knowledge@0.1.0", "omlet:rule/types@0.1.0"]);
    assert!(!names.iter().any(|n| n.starts_with("wasi")));
}

/// A host written with plain wasmtime bindings, answering from a HashMap.
struct MapHost {
    rows: HashMap<i64, String>,
    queries: Vec<(u32, Vec<knowledge::Cell>)>,
}

impl knowledge::Host for MapHost {
    async fn query(
        &mut self,
        statement: u32,
        params: Vec<knowledge::Cell>,
    ) -> wasmtime::Result<Result<knowledge::Answer, knowledge::QueryError>> {
        self.queries.push((statement, params.clone()));
        let row = match params.first() {
            Some(knowledge::Cell::Integer(i)) => self.rows.get(i).map(|v| vec![knowledge::Cell::Text(v.clone())]),
            _ => None,
        };
        Ok(Ok(knowledge::Answer { row, cacheable: false }))
    }
    async fn columns(&mut self, _: u32) -> wasmtime::Result<Result<Vec<String>, knowledge::QueryError>> {
        Ok(Ok(vec!["value".into()]))
    }
}

impl clock::Host for MapHost {
    async fn now(&mut self) -> wasmtime::Result<clock::Instant> {
        // 2024-01-15 14:30:00 UTC, at UTC+2.
        Ok(clock::Instant { unix_nanos: 1_705_329_000_000_000_000, utc_offset_seconds: 7200 })
    }
}

impl types::Host for MapHost {}

#[tokio::test]
async fn plain_wasmtime_host_runs_a_built_rule() {
    let engine = Engine::new(&Config::new()).unwrap();
    let component = Component::from_binary(&engine, &build(LOOKUP_RULE)).unwrap();
    let mut linker: Linker<MapHost> = Linker::new(&engine);
    plain::Rule::add_to_linker::<MapHost, HasSelf<MapHost>>(&mut linker, |s| s).unwrap();
    let host = MapHost { rows: HashMap::from([(7, "seven".to_string())]), queries: Vec::new() };
    let mut store = Store::new(&engine, host);
    let rule = plain::Rule::instantiate_async(&mut store, &component, &linker).await.unwrap();

    let info = rule.omlet_rule_meta().call_info(&mut store).await.unwrap().unwrap();
    assert_eq!(info.statements.len(), 1);
    assert_eq!(info.statements[0].sql, "select value from perf where id = :id");
    assert_eq!(info.statements[0].params, ["id"]);
    assert!(info.uses_clock);

    // One record: {"id": 7}, encoded by hand.
    let input = types::Record {
        text: b"id".to_vec(),
        nodes: vec![types::Node { name: types::Span { start: 0, len: 2 }, value: types::Value::Digit(7) }],
    };
    let route = plain::exports::omlet::rule::evaluator::Route::Only;
    let out = rule.omlet_rule_evaluator().call_evaluate(&mut store, 1, &route, &input).await.unwrap().unwrap();
    let name = |s: types::Span| std::str::from_utf8(&out.text[s.start as usize..(s.start + s.len) as usize]).unwrap().to_string();
    assert_eq!(out.nodes.len(), 2);
    assert_eq!(name(out.nodes[0].name), "at");
    // Local time: 14:30 UTC + 2 h.
    let types::Value::Time(t) = out.nodes[0].value else { panic!("at should be a time") };
    assert_eq!(t, 1_705_329_000_000_000_000 + 7200 * 1_000_000_000);
    assert_eq!(name(out.nodes[1].name), "v");
    let types::Value::Chars(v) = out.nodes[1].value else { panic!("v should be chars") };
    assert_eq!(name(v), "seven");
    let queries = &store.data().queries;
    assert_eq!(queries.len(), 1);
    assert_eq!(queries[0].0, 0);
    assert!(matches!(queries[0].1.as_slice(), [knowledge::Cell::Integer(7)]), "{:?}", queries[0].1);
}

#[test]
fn committed_guest_is_built_from_the_current_sources() {
    let stamped = omlet::guest::stamped_hash(omlet::guest::embedded()).expect("the committed guest has no source stamp");
    let current = omlet::guest::source_hash_of_tree(root()).unwrap();
    assert_eq!(
        stamped, current,
        "host/guest/omlet_guest.wasm is stale: guest/ or wit/ changed since it was built; run scripts/build-guest.sh"
    );
}

#[tokio::test]
async fn a_rule_compiled_for_another_ir_version_is_refused_clearly() {
    let program = omlet::build::compile(&[RuleSource { file: "t.oml".into(), text: "name : t\n---\nx = chars(1) ;\n".into() }]).unwrap();
    let mut ir = program.to_bytes();
    ir[6..10].copy_from_slice(&999u32.to_le_bytes());
    let core = omlet::guest::core_module().unwrap();
    let spliced = omlet::build::splice_ir(&core, &ir).unwrap();
    let component = wit_component::ComponentEncoder::default().module(&spliced).unwrap().validate(true).encode().unwrap();
    let err = omlet::Engine::new().unwrap().load(&component, None).await.err().expect("load must fail");
    let msg = err.to_string();
    assert!(msg.contains("compiled for IR version 999"), "{msg}");
    assert!(msg.contains(&format!("reads version {}", omlet_lang::IR_VERSION)), "{msg}");
}
