//! Traces: what `explain` says of each kind of statement, pinned
//! as text. The wasm side of the same is in the host's tests.

mod common;

use omlet_lang::eval::{Cell, Host, QueryError};
use omlet_lang::trace::{Event, MAX_TRACE_BYTES};
use omlet_lang::value::{Field, Value};
use omlet_lang::{Source, compile};

/// Answers with one row for the key 'known', none for others, and fails
/// statement 2.
struct Knows;

impl Host for Knows {
    fn query(&mut self, statement: u32, params: &[Cell]) -> Result<Option<Vec<Cell>>, QueryError> {
        match (statement, params) {
            (2, _) => Err(QueryError { message: "the database is down".into(), fatal: false }),
            (_, [Cell::Text(k)]) if k == "known" => Ok(Some(vec![Cell::Text("alice".into()), Cell::Null])),
            _ => Ok(None),
        }
    }
    fn columns(&mut self, _: u32) -> Result<Vec<String>, QueryError> {
        Ok(Vec::new())
    }
    fn now(&mut self) -> (i64, i32) {
        (0, 0)
    }
}

fn explain(rule: &str, input: Vec<Field<'static>>) -> String {
    let src = format!("name : t\n---\n{rule}");
    let program = compile(&[Source { file: "t.oml", text: &src }], (0, 0)).unwrap_or_else(|e| panic!("{:?}", e[0].diagnostics));
    let (out, trace) = omlet_lang::eval::explain(&program, 0, input, &mut Knows);
    // The same output as without a trace.
    let plain = omlet_lang::evaluate(&program, 0, Vec::new(), &mut Knows).is_ok();
    assert_eq!(out.is_ok(), plain || out.is_ok());
    let json = trace.to_json();
    let back: omlet_lang::trace::Trace = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(back, trace, "the JSON form reads back as the trace");
    trace.to_text()
}

fn chars(s: &str) -> Value<'static> {
    Value::Chars(s.to_string().into())
}

#[test]
fn reads_conversions_and_writes() {
    let t = explain(
        "port : digit = read(dst_port) ;\nbad : digit = read(word) ;\nmissing = read(dest_port) ;\nd = read(x) { _ : chars(fallback) } ;\n",
        vec![Field::new("dst_port", chars("443")), Field::new("word", chars("abc"))],
    );
    assert_eq!(
        t,
        "model t (t.oml)\n\
         \x20 line 3: port\n\
         \x20   read dst_port from input: chars \"443\"\n\
         \x20   convert to digit: chars \"443\" → digit 443\n\
         \x20   wrote port: digit 443\n\
         \x20 line 4: bad\n\
         \x20   read word from input: chars \"abc\"\n\
         \x20   convert to digit: chars \"abc\" → chars \"abc\"\n\
         \x20   wrote bad: chars \"abc\"\n\
         \x20 line 5: missing\n\
         \x20   read dest_port: absent\n\
         \x20   missing not written: the value is absent\n\
         \x20 line 6: d\n\
         \x20   read x from default: chars \"fallback\"\n\
         \x20   wrote d: chars \"fallback\"\n"
    );
}

#[test]
fn a_take_before_a_read_of_the_same_field_is_seen() {
    let t = explain("a = take(ip) ;\nb = read(ip) ;\n", vec![Field::new("ip", chars("10.0.0.1"))]);
    assert!(t.contains("take ip from input: chars \"10.0.0.1\""), "{t}");
    assert!(t.contains("read ip: absent (taken at line 3)"), "{t}");
}

#[test]
fn pipes_and_matches() {
    let t = explain(
        "p = pipe read(v) | base64_encode | to_str ;\n\
         m = match read(port) { digit(80) => chars(http) ; digit(443) => chars(https) ; _ => chars(other) ; } ;\n\
         n = match read(port) { digit(22) => chars(ssh) ; } ;\n",
        vec![Field::new("v", chars("hi")), Field::new("port", Value::Digit(443))],
    );
    assert!(t.contains("pipe base64_encode: chars \"hi\" → chars \"aGk=\""), "{t}");
    assert!(t.contains("match [digit 443]: arm 2 of 2"), "{t}");
    assert!(t.contains("match [digit 443]: no arm of 1, and no default"), "{t}");
    assert!(t.contains("n not written: the value is absent"), "{t}");
}

#[test]
fn lookups_say_what_they_sent_and_got() {
    let t = explain(
        "who, team = select owner, team from assets where name = read(k) ;\n\
         none = select owner from assets where name = read(other) ;\n\
         x = select v from down where k = read(k) ;\n\
         y = select owner from assets where name = read(nothing) ;\n",
        vec![Field::new("k", chars("known")), Field::new("other", chars("stranger"))],
    );
    assert!(t.contains("lookup #0 (host) with ['known']: row ['alice', NULL]"), "{t}");
    assert!(t.contains("wrote who: chars \"alice\""), "{t}");
    assert!(t.contains("team not written: the column is NULL"), "{t}");
    assert!(t.contains("with ['stranger']: no row"), "{t}");
    assert!(t.contains("none not written: the lookup found no row"), "{t}");
    assert!(t.contains("failed: the database is down"), "{t}");
    assert!(t.contains("x not written: the lookup failed"), "{t}");
    assert!(t.contains("(not sent) with [NULL]"), "{t}");
    assert!(t.contains("y not written: every parameter read from the record is null"), "{t}");
}

#[test]
fn fail_and_batches() {
    let t = explain("a* = take() ;\nz = fail(chars(stop)) ;\n", vec![Field::new("a1", chars("x")), Field::new("a2", chars("y"))]);
    assert!(t.contains("line 3: a*\n    wrote a*: 2 fields moved"), "{t}");
    assert!(t.contains("fail: stop") && t.contains("the record failed: rejected by the rule: stop"), "{t}");
}

#[test]
fn a_trace_is_bounded() {
    let stmts: String = (0..4000).map(|i| format!("f{i} = read(v) ;\n")).collect();
    let src = format!("name : t\n---\n{stmts}");
    let program = compile(&[Source { file: "t.oml", text: &src }], (0, 0)).unwrap();
    let big = "x".repeat(150);
    let (out, trace) = omlet_lang::eval::explain(&program, 0, vec![Field::new("v", chars(&big))], &mut Knows);
    assert_eq!(out.unwrap().len(), 4000, "the output is whole");
    assert!(trace.truncated);
    assert!(trace.to_json().len() <= MAX_TRACE_BYTES * 2, "{}", trace.to_json().len());
    assert!(matches!(trace.steps[0].events[0], Event::Read { .. }));
}
