//! Fuzz bodies for `omlet-lang`: rule text through the compiler, and the
//! guest's frame reader. Depends on `omlet_lang` and `std` only, so that the
//! language's tests can include this file (`#[path]`).

use omlet_lang::eval::{Cell, Host, QueryError};
use omlet_lang::frame::{Reader, Writer};
use omlet_lang::value::{Field, Value};
use omlet_lang::{Program, Source};

const FILES: [&str; 4] = ["a.oml", "b.oml", "dir/c.oml", "d.oml"];

/// No knowledge, a fixed clock: lookups answer nothing, or one row.
struct Quiet(bool);

impl Host for Quiet {
    fn query(&mut self, _: u32, params: &[Cell]) -> Result<Option<Vec<Cell>>, QueryError> {
        if self.0 {
            Ok(Some(params.iter().cloned().chain([Cell::Integer(7), Cell::Text("x".into()), Cell::Null]).collect()))
        } else {
            Ok(None)
        }
    }
    fn columns(&mut self, _: u32) -> Result<Vec<String>, QueryError> {
        Ok(vec!["a".into(), "b".into()])
    }
    fn now(&mut self) -> (i64, i32) {
        (1_705_329_000_000_000_000, 8 * 3600)
    }
}

fn sample_record() -> Vec<Field<'static>> {
    vec![
        Field::new("a", Value::Chars("10.0.0.7".into())),
        Field::new("b", Value::Digit(-3)),
        Field::new("c", Value::Float(2.5)),
        Field::new("s", Value::Chars("GET /x?y=1 HTTP/1.1".into())),
        Field::new("t", Value::Chars("2024-01-15 14:30:00".into())),
        Field::new("o", Value::Obj(Box::new(vec![Field::new("k", Value::Bool(true)), Field::new("n", Value::Null)]))),
        Field::new("l", Value::Array(Box::new(vec![Field::new("", Value::Digit(1)), Field::new("", Value::Chars("2".into()))]))),
    ]
}

/// Target `parse_compile`: rule text → parser → checker → IR, then the IR
/// through its byte form and the evaluator, as `omlet build` and the guest
/// do.
///
/// The input is taken as UTF-8 (invalid bytes become U+FFFD, so that every
/// input reaches the parser); NUL bytes split it into up to four files of
/// one rule set, so that the set-wide checks (model names, overlapping rule
/// patterns and their work budget) are reached too. A program that compiles
/// must read back from its bytes and run over a small record (an
/// evaluation error is fine).
pub fn parse_compile(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let sources: Vec<Source<'_>> = text.splitn(FILES.len(), '\0').zip(FILES).map(|(text, file)| Source { file, text }).collect();
    let Ok(program) = omlet_lang::compile(&sources, (0, 0)) else { return };
    let bytes = program.to_bytes();
    let back = Program::from_bytes(&bytes).expect("a compiled program must read back from its bytes");
    assert_eq!(back.to_bytes(), bytes, "the IR's byte form must round-trip");
    for model in 0..back.models.len() {
        for knows in [false, true] {
            let _ = omlet_lang::evaluate(&back, model, sample_record(), &mut Quiet(knows));
        }
    }
}

/// Every record of `frame`, or the first error.
fn read_all(frame: &[u8]) -> Result<Vec<Vec<Field<'_>>>, &'static str> {
    let mut r = Reader::new(frame)?;
    let mut out = Vec::new();
    for i in 0..r.records() {
        let n = r.size(i)?;
        out.push(r.fields(n)?);
    }
    Ok(out)
}

fn write_all(records: &[Vec<Field<'_>>]) -> Vec<u8> {
    let mut w = Writer::default();
    for r in records {
        w.record(r);
    }
    w.finish()
}

/// Target `frame_guest`: bytes → `omlet_lang::frame::Reader`, the guest's
/// side of the boundary: node by node, then record by record. What reads
/// must write back to a frame that reads the same.
pub fn frame_guest(data: &[u8]) {
    if let Ok(mut r) = Reader::new(data) {
        let _ = r.records();
        let _ = r.size(r.records());
        while !r.done() {
            if r.node().is_err() {
                break;
            }
        }
    }
    let Ok(records) = read_all(data) else { return };
    // Objects come back sorted and without repeated names, so one write and
    // read makes a canonical frame: writing that again changes nothing.
    let canonical = write_all(&records);
    let again = read_all(&canonical).expect("a frame written from read records must read");
    assert_eq!(write_all(&again), canonical, "frame write/read is not stable");
}
