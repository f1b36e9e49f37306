//! Differential test: for every rule of the conformance corpus and of
//! omlet's own cases (OML 1.25's forms and the additions beyond it among
//! them), generated records evaluate to the same output, or the same error,
//! through the wasm component and through the native build of the evaluator.

use std::path::PathBuf;
use std::sync::Arc;

use omlet::build::RuleSource;
use omlet_cli::conformance::{NativeHost, load_knowledge, read_cases};

use crate::root;
use omlet::record;

/// A record as the evaluator holds it.
type Fields = Vec<Field<'static>>;
use omlet_lang::value::{Field, Value, obj_insert};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

fn leaf() -> impl Strategy<Value = Value<'static>> {
    prop_oneof![
        "\\PC{0,6}".prop_map(|s| Value::Chars(s.into())),
        prop_oneof!["[0-9]{1,4}", "-?[0-9]{1,3}\\.[0-9]", "10\\.0\\.[0-9]\\.[0-9]{1,2}", "(true|false|)", "[a-c]{0,3}"]
            .prop_map(|s| Value::Chars(s.into())),
        // Text that OML 1.25's functions read: addresses of both families
        // (LAN and WAN), times with and without a zone, epochs.
        prop_oneof![
            "(192\\.168|100\\.64|8\\.8)\\.[0-9]\\.[0-9]{1,2}",
            " ?(fd00|2001:db8)::[0-9a-f]{1,3} ?",
            "20[0-9]{2}-0[1-9]-1[0-9][T ]0[0-9]:[0-5][0-9]:00(Z|\\+01:00)?",
            "1[0-9]/(Oct|Jan|Foo)/20[0-9]{2}:1[0-9]:[0-5][0-9]:00 [+-]0[0-9]00",
            "1[0-9]{9}(\\.[0-9]{1,3})?",
        ]
        .prop_map(|s| Value::Chars(s.into())),
        (-5i64..700).prop_map(Value::Digit),
        any::<i64>().prop_map(Value::Digit),
        prop_oneof![Just(0.0f64), Just(65.5), -1e6f64..1e6].prop_map(Value::Float),
        any::<bool>().prop_map(Value::Bool),
        any::<u32>().prop_map(|a| Value::Ip(std::net::IpAddr::V4(a.into()))),
        any::<u128>().prop_map(|a| Value::Ip(std::net::IpAddr::V6(a.into()))),
        // Integers past 64 bits, which cross the frame as their digits.
        (any::<bool>(), "[1-9][0-9]{19,40}").prop_map(|(neg, d)| Value::BigInt(if neg { format!("-{d}") } else { d }.into())),
        (0i64..2_000_000_000).prop_map(|s| Value::Time(s * 1_000_000_000)),
        Just(Value::Null),
    ]
}

fn value(names: Vec<String>) -> impl Strategy<Value = Value<'static>> {
    leaf().prop_recursive(2, 8, 3, move |inner| {
        let names = names.clone();
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3)
                .prop_map(|v| Value::Array(Box::new(v.into_iter().map(|x| Field::new("", x)).collect()))),
            prop::collection::vec((prop::sample::select(names), inner), 0..3).prop_map(|members| {
                let mut m = Vec::new();
                for (n, v) in members {
                    obj_insert(&mut m, Field::new(n, v));
                }
                Value::Obj(Box::new(m))
            }),
        ]
    })
}

fn records(names: Vec<String>) -> impl Strategy<Value = Fields> {
    prop::collection::vec((prop::sample::select(names.clone()), value(names)), 0..8)
        .prop_map(|fields| fields.into_iter().map(|(n, v)| Field::new(n, v)).collect())
}

/// Output as text plus each top-level field's kind (ip vs chars, ignore, …).
fn shape(r: &[Field<'_>]) -> (String, Vec<(String, &'static str)>) {
    (record::fields_json(r), r.iter().map(|f| (f.name.to_string(), f.value.kind().name())).collect())
}

#[test]
fn wasm_and_native_agree_on_generated_records() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let engine = omlet::Engine::new().unwrap();
    let mut files: Vec<PathBuf> = ["tests/conformance", "tests/cases"]
        .iter()
        .flat_map(|d| std::fs::read_dir(root().join(d)).unwrap().map(|e| e.unwrap().path()))
        .collect();
    files.sort();
    let mut rules_checked = 0;
    for file in files.iter().filter(|p| p.extension().is_some_and(|e| e == "toml")) {
        for case in read_cases(file).unwrap() {
            let src = [RuleSource { file: format!("{}.oml", case.name), text: case.oml.clone() }];
            let Ok(program) = omlet::build::compile(&src) else { continue };
            if program.uses_clock() {
                continue; // the two runs would read the clock at different instants
            }
            let knowledge = case.knowledge.as_ref().map(|k| rt.block_on(load_knowledge(k)).unwrap());
            let component = omlet::build::component_for(&program).unwrap();
            let mut options = omlet::LoadOptions::new().knowledge(knowledge.clone());
            if let Some(n) = &case.intranet_nets {
                options = options.intranet_nets(n.clone());
            }
            let rule = rt.block_on(engine.load_component(&component, &options)).unwrap();
            let bound = match &knowledge {
                Some(k) => rt.block_on(k.bind(&program.statements)).unwrap(),
                None => Vec::new(),
            };
            let program = Arc::new(program);

            let mut names: Vec<String> = program.names.clone();
            if let Ok(serde_json::Value::Object(m)) = serde_json::from_str::<serde_json::Value>(&case.input) {
                names.extend(m.keys().cloned());
            }
            names.extend(["other", "__tmp", "a", "x/y[0]"].map(String::from));
            names.sort();
            names.dedup();

            let mut runner = TestRunner::new(Config { cases: 24, failure_persistence: None, ..Config::default() });
            let outcome = runner.run(&records(names), |input| {
                let wasm = rt
                    .block_on(rule.evaluate(&omlet::Record::from(input.clone())))
                    .map(|r| shape(&Vec::from(r)))
                    .map_err(|e| e.to_string());
                let mut host = NativeHost::new(knowledge.clone(), bound.clone(), rt.handle().clone());
                if let Some(n) = &case.intranet_nets {
                    host.nets = n.effective().0;
                }
                let native =
                    omlet_lang::evaluate(&program, 0, input.clone(), &mut host).map(|r| shape(&r)).map_err(|e| e.to_string());
                if wasm != native {
                    return Err(TestCaseError::fail(format!(
                        "input {}\n  wasm:   {wasm:?}\n  native: {native:?}",
                        record::fields_json(&input)
                    )));
                }
                Ok(())
            });
            if let Err(e) = outcome {
                panic!("{}: {}: {e}", file.display(), case.name);
            }
            rules_checked += 1;
        }
    }
    assert!(rules_checked >= 200, "only {rules_checked} rules were checked");
}
