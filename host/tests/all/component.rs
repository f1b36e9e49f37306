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
        let funcs: Vec<String> =
            inst.exports(&engine).filter(|(_, e)| !matches!(e.ty, ComponentItem::Type(_))).map(|(n, _)| n.to_string()).collect();
        match name {
            "omlet:rule/knowledge@0.6.0" => assert_eq!(funcs, ["query", "columns", "intranet-nets"]),
            "omlet:rule/clock@0.6.0" => assert_eq!(funcs, ["now"]),
            "omlet:rule/types@0.6.0" => assert!(funcs.is_empty(), "types exports only types"),
            other => panic!("foreign import {other}"),
        }
    }
    names.sort();
    assert_eq!(names, ["omlet:rule/clock@0.6.0", "omlet:rule/knowledge@0.6.0", "omlet:rule/types@0.6.0"]);
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
    async fn intranet_nets(&mut self) -> wasmtime::Result<Vec<knowledge::Network>> {
        // 10.0.0.0/8 only, as an IPv4-mapped prefix.
        Ok(vec![knowledge::Network { high: 0, low: 0xffff_0a00_0000, prefix: 104 }])
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

    // One record, {"id": 7}, encoded by hand as the WIT comment lays it out:
    // header (1 record, 17 node bytes, 2 text bytes), its node count (1), the
    // node (tag 1 = digit, name span 0..2, the i64), the text "id".
    let mut input = Vec::new();
    for x in [1u32, 17, 2, 1] {
        input.extend_from_slice(&x.to_le_bytes());
    }
    input.push(1);
    input.extend_from_slice(&0u32.to_le_bytes());
    input.extend_from_slice(&2u32.to_le_bytes());
    input.extend_from_slice(&7i64.to_le_bytes());
    input.extend_from_slice(b"id");
    let route = plain::exports::omlet::rule::evaluator::Route::Only;
    let out = rule.omlet_rule_evaluator().call_evaluate(&mut store, 1, &route, &input).await.unwrap().unwrap();
    let mut reader = omlet_lang::frame::Reader::new(&out).unwrap();
    assert_eq!((reader.records(), reader.size(0).unwrap()), (1, 2));
    let fields = reader.fields(2).unwrap();
    assert_eq!(fields[0].name, "at");
    // Local time: 14:30 UTC + 2 h.
    assert_eq!(fields[0].value, omlet_lang::value::Value::Time(1_705_329_000_000_000_000 + 7200 * 1_000_000_000));
    assert_eq!(fields[1].name, "v");
    assert_eq!(fields[1].value, omlet_lang::value::Value::Chars("seven".into()));
    assert!(reader.done());

    // Damaged frames are errors, not traps: a bad header fails the call's
    // record(s); a record whose nodes overrun the frame fails it and the rest.
    let err = rule.omlet_rule_evaluator().call_evaluate(&mut store, 1, &route, &input[..9].to_vec()).await.unwrap().unwrap_err();
    assert_eq!(err.message, "truncated frame");
    let mut two = omlet_lang::frame::Writer::default();
    let rec = omlet::record::from_json_str(r#"{"id": 7}"#).unwrap();
    let fields = Vec::from(rec.clone());
    two.record(&fields);
    two.record(&fields);
    let mut two = two.finish();
    two[12..16].copy_from_slice(&5u32.to_le_bytes()); // the first record claims 5 nodes
    let out = rule.omlet_rule_evaluator().call_evaluate_batch(&mut store, 1, &route, &two).await.unwrap();
    assert_eq!(out.errors.iter().map(|e| e.index).collect::<Vec<_>>(), [0, 1]);
    assert!(out.errors[0].error.message.starts_with("damaged frame:"), "{}", out.errors[0].error.message);
    let queries = &store.data().queries;
    assert_eq!(queries.len(), 1);
    assert_eq!(queries[0].0, 0);
    assert!(matches!(queries[0].1.as_slice(), [knowledge::Cell::Integer(7)]), "{:?}", queries[0].1);
}

#[test]
fn committed_guest_is_built_from_the_current_sources() {
    let current = omlet::guest::source_hash_of_tree(root()).unwrap();
    for (file, module) in
        [("omlet_guest.wasm", omlet::guest::embedded()), ("omlet_guest_core.wasm", omlet::guest::embedded_core())]
    {
        let stamped = omlet::guest::stamped_hash(module).unwrap_or_else(|| panic!("host/guest/{file} has no source stamp"));
        assert_eq!(
            stamped, current,
            "host/guest/{file} is stale: guest/ or wit/ changed since it was built; run scripts/build-guest.sh"
        );
    }
}

#[tokio::test]
async fn a_rule_compiled_for_another_ir_version_is_refused_clearly() {
    let program =
        omlet::build::compile(&[RuleSource { file: "t.oml".into(), text: "name : t\n---\nx = chars(1) ;\n".into() }]).unwrap();
    let mut ir = program.to_bytes();
    ir[6..10].copy_from_slice(&999u32.to_le_bytes());
    let core = omlet::guest::core_module().unwrap();
    let spliced = omlet::build::splice_ir(&core, &ir).unwrap();
    let component = wit_component::ComponentEncoder::default().module(&spliced).unwrap().validate(true).encode().unwrap();
    let err =
        omlet::Engine::new().unwrap().load_component(&component, &omlet::LoadOptions::new()).await.err().expect("load must fail");
    let msg = err.to_string();
    assert!(msg.contains("compiled for IR version 999"), "{msg}");
    assert!(msg.contains(&format!("reads version {}", omlet_lang::IR_VERSION)), "{msg}");
}

/// The guest's own `memcmp` (guest/component/src/mem.rs, eight bytes at a
/// time, also behind every `==` of text in the guest) agrees with byte
/// order: equal text around the 8-byte steps matches only itself, and object
/// members come out in byte order of their names whatever their lengths and
/// shared prefixes.
#[tokio::test]
async fn the_guests_byte_compares_agree_with_byte_order() {
    let rule = "name : t\n---\n\
        hit = match read(v) {\n\
            chars(abcdefgh) => chars(eight) ;\n\
            chars(abcdefghi) => chars(nine) ;\n\
            chars(abcdefgh12345678) => chars(sixteen) ;\n\
            chars(abcdefgh12345679) => chars(sixteen_b) ;\n\
            _ => chars(none) ;\n\
        } ;\n\
        o = read(o) ;\n";
    let engine = omlet::Engine::new().unwrap();
    let rule = engine.load_source("t.oml", rule, &omlet::LoadOptions::new()).await.unwrap();
    let keys =
        ["abcdefgh12345679", "abcdefgh12345678", "abcdefgh", "a", "abcdefgi", "\u{e9}t\u{e9}", "abcdefgh02345679", "b", ""];
    let mut sorted: Vec<&str> = keys.to_vec();
    sorted.sort();
    let members: Vec<String> = keys.iter().map(|k| format!("{k:?}:1")).collect();
    let cases = [
        ("abcdefgh", "eight"),
        ("abcdefgi", "none"),
        ("abcdefghi", "nine"),
        ("abcdefgh12345678", "sixteen"),
        ("abcdefgh12345679", "sixteen_b"),
        ("abcdefgh02345679", "none"),
        ("abcdefgh1234567", "none"),
        ("\u{e9}bcdefgh12345678", "none"),
        ("", "none"),
    ];
    for (v, want) in cases {
        let input = omlet::Record::from_json(&format!("{{\"v\":{v:?},\"o\":{{{}}}}}", members.join(","))).unwrap();
        let out = rule.evaluate(&input).await.unwrap();
        assert_eq!(out.get("hit"), Some(omlet::Value::Chars(want.into())), "{v:?}");
        let json: serde_json::Value = serde_json::from_str(&out.to_json()).unwrap();
        let names: Vec<&str> = json["o"].as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(names, sorted, "{v:?}");
    }
}

/// A component of an older WIT package (0.4.0, before the `intranet-nets`
/// import) is refused at load with what to do, not with a linker error.
#[tokio::test]
async fn a_component_of_an_older_wit_package_is_refused_with_rebuild() {
    let mut bytes = build("name : t\n---\nv = read(v) ;\n");
    // The names are strings of the same length in every section.
    let (new, old) = (b"omlet:rule/", b"@0.6.0");
    let mut patched = 0;
    for i in 0..bytes.len().saturating_sub(new.len() + 20) {
        if bytes[i..].starts_with(new)
            && let Some(at) = bytes[i..i + 40.min(bytes.len() - i)].windows(old.len()).position(|w| w == old)
        {
            bytes[i + at..i + at + old.len()].copy_from_slice(b"@0.4.0");
            patched += 1;
        }
    }
    assert!(patched > 0);
    let engine = omlet::Engine::new().unwrap();
    let err = match engine.load_component(&bytes, &omlet::LoadOptions::new()).await {
        Ok(_) => panic!("an older component must be refused"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("omlet:rule@0.4.0") && err.contains("rebuild"), "{err}");
}

/// Issue 33, item 5: compiled guest code is kept in the cache folder, a
/// second engine loads it from there, and a damaged entry is compiled again
/// rather than run.
#[tokio::test]
async fn compiled_code_is_cached_and_a_damaged_entry_is_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let config = omlet::EngineConfig { code_cache: Some(dir.path().join("code")), ..Default::default() };
    let rule = "name : t\n---\nn : digit = read(n) ;\n";
    let run = || async {
        let engine = omlet::Engine::with_config(&config).unwrap();
        let r = engine.load_source("t.oml", rule, &Default::default()).await.unwrap();
        r.evaluate(&omlet::Record::from_json(r#"{"n":"42"}"#).unwrap()).await.unwrap().to_json()
    };
    assert_eq!(run().await, r#"{"n":42}"#);
    let files: Vec<_> = std::fs::read_dir(dir.path().join("code")).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let written = std::fs::metadata(&files[0]).unwrap().len();
    assert!(written > 100_000, "machine code of the guest: {written} bytes");
    #[cfg(unix)]
    let inode = || std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&files[0]).unwrap());
    #[cfg(unix)]
    let first = inode();
    assert_eq!(run().await, r#"{"n":42}"#, "read back");
    // Read, not compiled and written again (a new entry is a new file renamed into place).
    #[cfg(unix)]
    assert_eq!(inode(), first, "the entry was read back, not rewritten");
    // Damaged in the middle of the code: the checksum catches it.
    let mut bytes = std::fs::read(&files[0]).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&files[0], &bytes).unwrap();
    assert_eq!(run().await, r#"{"n":42}"#);
    assert_eq!(std::fs::metadata(&files[0]).unwrap().len(), written, "rewritten whole");
}

/// Issue 33: `Rule::explain` gives the output `evaluate` gives and a trace
/// of how, through the component's `explain` export, with the host's layer
/// for each lookup.
#[tokio::test]
async fn explain_traces_a_record_through_the_component() {
    use omlet::knowledge::KnowledgeConfig;
    use omlet::trace::Event;
    let k = KnowledgeConfig::default().open().await.unwrap();
    k.provider()
        .execute("create table owners (ip text, name text); insert into owners values ('10.0.0.1', 'alice')")
        .await
        .unwrap();
    let rule = "name : fw\n---\n\
        port : digit = read(dest_port) ;\n\
        owner = select name from owners where ip = read(src_ip) ;\n\
        kind = match read(proto) { chars(tcp) => chars(stream) ; } ;\n";
    let rule = omlet::Engine::new().unwrap().load_source("fw.oml", rule, &omlet::LoadOptions::new().knowledge(k)).await.unwrap();
    let input = omlet::Record::from_json(r#"{"src_ip":"10.0.0.1","dst_port":"443","proto":"udp"}"#).unwrap();
    let plain = rule.evaluate(&input).await.unwrap();
    let e = rule.explain(&input).await.unwrap();
    assert_eq!(e.output.as_ref().unwrap().to_json(), plain.to_json());
    let text = e.trace.to_text();
    assert!(text.contains("line 3: port\n    read dest_port: absent\n    port not written: the value is absent"), "{text}");
    assert!(text.contains("match [chars \"udp\"]: no arm of 1, and no default"), "{text}");
    let layers: Vec<&str> = e
        .trace
        .steps
        .iter()
        .flat_map(|s| &s.events)
        .filter_map(|e| match e {
            Event::Lookup { layer, row, .. } => {
                assert_eq!(row.as_deref(), Some(&["'alice'".to_string()][..]));
                Some(layer.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(layers.len(), 1);
    assert!(["in-memory table", "shared cache", "database", "guest cache"].contains(&layers[0]), "{layers:?}");
    // The JSON form reads back as the same trace.
    let back: omlet::trace::Trace = serde_json::from_str(&e.trace.to_json()).unwrap();
    assert_eq!(back, e.trace);
}
