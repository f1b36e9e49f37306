//! The core ABI (docs/abi.md) as a host without the component model sees
//! it: the module `omlet build --target core` writes, instantiated with
//! wasmtime's core API and imports written here from the document alone.

use omlet::build::{RuleSource, Target};
use omlet_lang::frame::{Reader, Writer};
use omlet_lang::lines::LineWriter;
use omlet_lang::value::{Field, Value};
use wasmtime::{Caller, Engine, Extern, Instance, Linker, Module, Store};

const RULE: &str = "name : t\n---\nn : digit = read(n) ;\nzone = select zone from ip_zone where ip = read(ip) ;\n";

/// What the imports saw and answer.
#[derive(Default)]
struct Host {
    /// The zone every lookup answers.
    zone: String,
    /// An answer the guest has not fetched with `take` yet.
    held: Vec<u8>,
    /// Each query's statement and raw parameter bytes.
    queries: Vec<(u32, Vec<u8>)>,
    /// The calls of `tick`.
    ticks: usize,
}

fn memory(caller: &mut Caller<'_, Host>) -> wasmtime::Memory {
    match caller.get_export("memory") {
        Some(Extern::Memory(m)) => m,
        _ => panic!("the module exports no memory"),
    }
}

/// Writes `answer` at `buf` when it fits in `cap`, else holds it: its length.
fn answer(caller: &mut Caller<'_, Host>, answer: Vec<u8>, buf: u32, cap: u32) -> u32 {
    let n = answer.len() as u32;
    if n <= cap {
        memory(caller).write(&mut *caller, buf as usize, &answer).unwrap();
    } else {
        caller.data_mut().held = answer;
    }
    n
}

fn instance(module: &[u8], zone: &str) -> (Store<Host>, Instance) {
    let engine = Engine::default();
    let module = Module::new(&engine, module).unwrap();
    let mut linker = Linker::<Host>::new(&engine);
    linker
        .func_wrap("omlet:core@1", "query", |mut c: Caller<'_, Host>, st: u32, p: u32, plen: u32, buf: u32, cap: u32| {
            let mut params = vec![0; plen as usize];
            memory(&mut c).read(&c, p as usize, &mut params).unwrap();
            c.data_mut().queries.push((st, params));
            let zone = c.data().zone.clone();
            // A row of one text cell, cacheable.
            let mut a = vec![0u8, 1];
            a.extend_from_slice(&1u32.to_le_bytes());
            a.push(3);
            a.extend_from_slice(&(zone.len() as u32).to_le_bytes());
            a.extend_from_slice(zone.as_bytes());
            answer(&mut c, a, buf, cap)
        })
        .unwrap();
    linker
        .func_wrap("omlet:core@1", "columns", |mut c: Caller<'_, Host>, _st: u32, buf: u32, cap: u32| {
            answer(&mut c, vec![2, 3, 0, 0, 0, 0, 0], buf, cap)
        })
        .unwrap();
    linker
        .func_wrap("omlet:core@1", "intranet_nets", |mut c: Caller<'_, Host>, buf: u32, cap: u32| {
            answer(&mut c, vec![0; 4], buf, cap)
        })
        .unwrap();
    linker
        .func_wrap("omlet:core@1", "take", |mut c: Caller<'_, Host>, buf: u32, len: u32| {
            let held = std::mem::take(&mut c.data_mut().held);
            assert_eq!(held.len(), len as usize, "take asks for the held answer's length");
            memory(&mut c).write(&mut c, buf as usize, &held).unwrap();
        })
        .unwrap();
    linker
        .func_wrap("omlet:core@1", "now", |mut c: Caller<'_, Host>, out: u32| {
            memory(&mut c).write(&mut c, out as usize, &[0; 12]).unwrap();
        })
        .unwrap();
    linker
        .func_wrap("omlet:core@1", "tick", |mut c: Caller<'_, Host>| {
            c.data_mut().ticks += 1;
            1_000u32
        })
        .unwrap();
    let mut store = Store::new(&engine, Host { zone: zone.to_string(), ..Host::default() });
    let instance = linker.instantiate(&mut store, &module).unwrap();
    (store, instance)
}

/// Writes route text and frame to the input buffer and calls `export`: the
/// status and the answer's bytes.
fn call(store: &mut Store<Host>, inst: &Instance, export: &str, route: (u32, &str), frame: &[u8]) -> (u32, Vec<u8>) {
    let mem = inst.get_memory(&mut *store, "memory").unwrap();
    let input = inst.get_typed_func::<u32, u32>(&mut *store, "omlet_input").unwrap();
    let at = input.call(&mut *store, (route.1.len() + frame.len()) as u32).unwrap();
    assert_ne!(at, 0);
    mem.write(&mut *store, at as usize, route.1.as_bytes()).unwrap();
    mem.write(&mut *store, at as usize + route.1.len(), frame).unwrap();
    let f = inst.get_typed_func::<(u64, u32, u32, u32), ()>(&mut *store, export).unwrap();
    f.call(&mut *store, (1, route.0, route.1.len() as u32, frame.len() as u32)).unwrap();
    returned(store, inst, &mem)
}

fn returned(store: &mut Store<Host>, inst: &Instance, mem: &wasmtime::Memory) -> (u32, Vec<u8>) {
    let area = inst.get_typed_func::<(), u32>(&mut *store, "omlet_return_area").unwrap().call(&mut *store, ()).unwrap();
    let mut ret = [0u8; 12];
    mem.read(&*store, area as usize, &mut ret).unwrap();
    let word = |i: usize| u32::from_le_bytes(ret[i..i + 4].try_into().unwrap());
    let mut bytes = vec![0; word(8) as usize];
    mem.read(&*store, word(4) as usize, &mut bytes).unwrap();
    (word(0), bytes)
}

fn frame(records: &[&[Field<'_>]]) -> Vec<u8> {
    let mut w = Writer::new();
    for r in records {
        w.record(r);
    }
    w.finish()
}

fn line(frame: &[u8]) -> String {
    let mut reader = Reader::new(frame).unwrap();
    let mut w = LineWriter::with_capacity(0);
    for i in 0..reader.records() {
        let size = reader.size(i).unwrap();
        let fields = reader.fields_in(size, Vec::new()).unwrap();
        w.line_hiding(&fields).unwrap();
    }
    String::from_utf8(w.take().0).unwrap()
}

fn core_module() -> Vec<u8> {
    let sources = [RuleSource { file: "t.oml".into(), text: RULE.into() }];
    omlet::build::build_artifact_with(&sources, &Default::default(), Target::Core).unwrap()
}

#[test]
fn a_core_module_evaluates_through_the_documented_abi() {
    let module = core_module();
    assert!(omlet::build::is_core_module(&module));
    let (mut store, inst) = instance(&module, "dmz");
    let version = inst.get_typed_func::<(), u32>(&mut store, "omlet_abi_version").unwrap().call(&mut store, ()).unwrap();
    assert_eq!(version, 1);

    // The description: one statement, on the table the rule names.
    inst.get_typed_func::<(), ()>(&mut store, "omlet_info").unwrap().call(&mut store, ()).unwrap();
    let mem = inst.get_memory(&mut store, "memory").unwrap();
    let (status, info) = returned(&mut store, &inst, &mem);
    let info: serde_json::Value = serde_json::from_slice(&info).unwrap();
    assert_eq!((status, &info["abi"], &info["statements"][0]["table"]), (0, &1.into(), &"ip_zone".into()), "{info}");
    assert_eq!(info["models"][0]["name"], "t");

    // One record: its output frame, and the lookup's parameter as a text cell.
    let input = frame(&[&[Field::new("n", Value::chars("42")), Field::new("ip", Value::chars("10.0.0.7"))]]);
    let (status, out) = call(&mut store, &inst, "omlet_evaluate", (0, ""), &input);
    assert_eq!((status, line(&out)), (0, "{\"n\":42,\"zone\":\"dmz\"}\n".to_string()));
    let (statement, params) = &store.data().queries[0];
    let mut want = 1u32.to_le_bytes().to_vec();
    want.push(3);
    want.extend_from_slice(&8u32.to_le_bytes());
    want.extend_from_slice(b"10.0.0.7");
    assert_eq!((*statement, params), (0, &want));

    // A batch as JSON lines: the second record's lookup is the guest cache's.
    let two = frame(&[
        &[Field::new("n", Value::chars("1"))],
        &[Field::new("n", Value::chars("x")), Field::new("ip", Value::chars("10.0.0.7"))],
    ]);
    let (status, out) = call(&mut store, &inst, "omlet_evaluate_lines", (1, "whatever"), &two);
    // Route 1 names a path no model claims: every record is unrouted.
    let errors_at = 4 + u32::from_le_bytes(out[..4].try_into().unwrap()) as usize;
    assert_eq!(status, 0);
    assert_eq!(u32::from_le_bytes(out[errors_at..errors_at + 4].try_into().unwrap()), 0, "no line");
    let n_errors = u32::from_le_bytes(out[errors_at + 4..errors_at + 8].try_into().unwrap());
    assert_eq!(n_errors, 2);
    let (status, out) = call(&mut store, &inst, "omlet_evaluate_lines", (2, "t"), &two);
    let text_len = u32::from_le_bytes(out[..4].try_into().unwrap()) as usize;
    assert_eq!(status, 0);
    assert_eq!(std::str::from_utf8(&out[4..4 + text_len]).unwrap(), "{\"n\":1}\n{\"n\":\"x\",\"zone\":\"dmz\"}\n");
    assert_eq!(store.data().queries.len(), 1, "the repeated lookup was the guest cache's");
    // A batch call passes its yield point before it starts, and the module's
    // loop headers call tick once their budget is spent.
    assert!(store.data().ticks >= 2, "{} ticks", store.data().ticks);
    let budget = inst.get_global(&mut store, omlet::build::BUDGET_EXPORT).expect("the budget global");
    assert!(budget.get(&mut store).i32().unwrap() > 0);
}

#[test]
fn a_large_answer_comes_through_take_and_a_bad_call_is_refused() {
    let zone = "z".repeat(5000);
    let (mut store, inst) = instance(&core_module(), &zone);
    let input = frame(&[&[Field::new("ip", Value::chars("::1"))]]);
    let (status, out) = call(&mut store, &inst, "omlet_evaluate", (0, ""), &input);
    assert_eq!((status, line(&out)), (0, format!("{{\"zone\":\"{zone}\"}}\n")));

    // The explain answer: status, output, then the trace naming the lookup.
    let (status, out) = call(&mut store, &inst, "omlet_explain", (0, ""), &input);
    let out_len = u32::from_le_bytes(out[4..8].try_into().unwrap()) as usize;
    let trace: serde_json::Value = serde_json::from_slice(&out[8 + out_len..]).unwrap();
    assert_eq!((status, u32::from_le_bytes(out[..4].try_into().unwrap())), (0, 0));
    assert_eq!(trace["model"], "t", "{trace}");

    // Lengths past the input buffer: status 3 and a message, no trap.
    let mem = inst.get_memory(&mut store, "memory").unwrap();
    let f = inst.get_typed_func::<(u64, u32, u32, u32), ()>(&mut store, "omlet_evaluate").unwrap();
    f.call(&mut store, (1, 0, 0, u32::MAX)).unwrap();
    let (status, message) = returned(&mut store, &inst, &mem);
    assert_eq!(status, 3);
    assert!(String::from_utf8(message).unwrap().contains("past the input buffer"));
    // An unknown route kind, likewise.
    let (status, message) = call(&mut store, &inst, "omlet_evaluate", (9, ""), &input);
    assert_eq!(status, 3);
    assert!(String::from_utf8(message).unwrap().contains("unknown route kind 9"));
}

#[tokio::test]
async fn the_rust_host_runs_a_core_module_as_it_runs_the_component() {
    let engine = omlet::Engine::new().unwrap();
    let sources = [RuleSource { file: "t.oml".into(), text: "name : t\n---\nn : digit = read(n) ;\n".into() }];
    let core = omlet::build::build_artifact_with(&sources, &Default::default(), Target::Core).unwrap();
    let component = omlet::build::build_artifact_with(&sources, &Default::default(), Target::Component).unwrap();
    let record = omlet::Record::from_json(r#"{"n":"7"}"#).unwrap();
    let mut outs = Vec::new();
    for artifact in [&core, &component] {
        let rule = engine.load_component(artifact, &omlet::LoadOptions::new()).await.unwrap();
        outs.push(rule.evaluate(&record).await.unwrap().to_json());
    }
    assert_eq!(outs, [r#"{"n":7}"#, r#"{"n":7}"#]);
    // A module that is not omlet's is refused by name.
    let err = omlet::build::ir_of(&wat_free_module()).unwrap_err();
    assert!(err.to_string().contains("omlet_abi_version"), "{err}");
}

/// The smallest core module: a header and nothing else.
fn wat_free_module() -> Vec<u8> {
    b"\0asm\x01\0\0\0".to_vec()
}

#[tokio::test]
async fn one_record_calls_take_the_core_path_with_the_same_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    {
        use sqlx::Connection;
        let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", db.display())).await.unwrap();
        sqlx::query("create table ip_zone (ip text, zone text)").execute(&mut c).await.unwrap();
        sqlx::query("insert into ip_zone values ('10.0.0.7', 'dmz')").execute(&mut c).await.unwrap();
    }
    let knowledge = omlet::KnowledgeConfig::for_url(&format!("sqlite://{}", db.display())).open().await.unwrap();
    let engine = omlet::Engine::with_config(&omlet::EngineConfig { coalesce: false, ..Default::default() }).unwrap();
    let text =
        format!("{RULE}x = chars(y) ;\ncheck = match read(n) {{ digit(13) => fail(\"thirteen\") ; _ => chars(ok) ; }} ;\n");
    let options = omlet::LoadOptions::new().knowledge(knowledge);
    let rule = engine.load_source("t.oml", &text, &options).await.unwrap();
    let records = [r#"{"n":"1","ip":"10.0.0.7"}"#, r#"{"n":"2","ip":"10.9.9.9"}"#, r#"{"n":"13"}"#];
    let outcome = |r: omlet::Result<omlet::Record>| match r {
        Ok(out) => out.to_json(),
        Err(e) => format!("error: {e}"),
    };
    let mut before = Vec::new();
    for r in records {
        before.push(outcome(rule.evaluate(&omlet::Record::from_json(r).unwrap()).await));
    }
    assert!(rule.wait_core_path(), "a rule loaded from its sources has a core path");
    let mut after = Vec::new();
    for _ in 0..2 {
        after.clear();
        for r in records {
            after.push(outcome(rule.evaluate(&omlet::Record::from_json(r).unwrap()).await));
        }
    }
    assert_eq!(before, after);
    assert!(before[0].contains(r#""zone":"dmz""#), "{before:?}");
    assert!(before[2].contains("thirteen"), "{before:?}");
    // The first round's lookups missed the shared cache and went async; the
    // second's were answered on the core path.
    assert!(rule.core_path_calls() >= 3, "{} core calls", rule.core_path_calls());

    // A component's bytes carry no program at hand: no core path.
    let component = omlet::build::build_artifact_with(
        &[RuleSource { file: "t.oml".into(), text: "name : t\n---\nn = read(n) ;\n".into() }],
        &Default::default(),
        Target::Component,
    )
    .unwrap();
    let rule = engine.load_component(&component, &omlet::LoadOptions::new()).await.unwrap();
    assert!(!rule.wait_core_path());
}

/// Coalescing is on by default, but once a rule's core path is ready its
/// concurrent one-record calls each take it: none is gathered into a batch.
/// Before, the same calls are coalesced, and they count toward the core path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_core_path_ready_one_record_calls_are_not_coalesced() {
    let engine = omlet::Engine::new().unwrap();
    let rule = engine.load_source("t.oml", "name : t\n---\nn = read(n) ;\n", &omlet::LoadOptions::new()).await.unwrap();
    let round = |rule: &omlet::Rule| {
        let tasks: Vec<_> = (0..16)
            .map(|t| {
                let rule = rule.clone();
                tokio::spawn(async move {
                    for c in 0..100 {
                        let n = t * 1000 + c;
                        let out = rule.evaluate(&omlet::Record::from_json(&format!("{{\"n\":{n}}}")).unwrap()).await;
                        assert_eq!(out.unwrap().to_json(), format!("{{\"n\":{n}}}"));
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        async move {
            for t in tasks {
                t.await.unwrap();
            }
        }
    };
    round(&rule).await;
    let coalesced = rule.coalesced_records();
    assert!(coalesced > 0, "16 callers on two threads never shared a call before the core path");
    assert!(rule.wait_core_path());
    round(&rule).await;
    assert_eq!(rule.coalesced_records(), coalesced, "calls were coalesced with the core path ready");
    assert_eq!(rule.core_path_calls(), 1600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_core_path_a_record_too_big_or_too_slow_fails_alone() {
    use omlet::{Error, Limit};
    let config = omlet::EngineConfig {
        max_memory: 16 << 20,
        call_deadline: std::time::Duration::from_millis(200),
        coalesce: false,
        ..Default::default()
    };
    let engine = omlet::Engine::with_config(&config).unwrap();
    let slow = "name : t\n---\nseq = read(seq) ;\nv = match read(m) {\n    regex_match('[a-z]{1,300}X') => chars(yes),\n    _ => chars(no),\n};\n";
    let rule = engine.load_source("t.oml", slow, &omlet::LoadOptions::new()).await.unwrap();
    assert!(rule.wait_core_path());
    let rec = |seq: usize, m: &str| omlet::Record::from_json(&format!("{{\"seq\":{seq},\"m\":\"{m}\"}}")).unwrap();
    assert_eq!(rule.evaluate(&rec(0, "ab")).await.unwrap().to_json(), r#"{"seq":0,"v":"no"}"#);
    match rule.evaluate(&rec(1, &"M".repeat(15 << 20))).await {
        Err(Error::Limit { limit: Limit::Memory, .. }) => {}
        other => panic!("expected a memory limit, got {:?}", other.map(|r| r.to_json().len())),
    }
    // A computation past the deadline: stopped on the sync paths (past their
    // budget it moves to the async path), failed there by the deadline.
    match rule.evaluate(&rec(2, &"a".repeat(200_000))).await {
        Err(Error::Limit { limit: Limit::Deadline, .. }) => {}
        other => panic!("expected the deadline, got {:?}", other.map(|r| r.to_json().len())),
    }
    // The rule goes on, on the core path.
    let before = rule.core_path_calls();
    assert_eq!(rule.evaluate(&rec(3, "ab")).await.unwrap().to_json(), r#"{"seq":3,"v":"no"}"#);
    assert_eq!(rule.core_path_calls(), before + 1);
}
