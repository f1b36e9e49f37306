//! Fuzz findings and hostile inputs, replayed through the same bodies the
//! fuzz targets run (`fuzz/src/lang.rs`, included below): each input must
//! be refused or read cleanly, never panic.
//!
//! Every file under `tests/fuzz-regressions/parse_compile/` and
//! `tests/fuzz-regressions/frame_guest/` at the repository root is a
//! finding of that target (`scripts/fuzz.sh`; fuzz/README.md): to add one,
//! copy the fuzzer's `crash-*` file there once its cause is fixed.

#[path = "../../../fuzz/src/lang.rs"]
mod harness;

#[path = "../../../fuzz/src/replay.rs"]
mod replay;

use replay::survives;

use std::path::PathBuf;

use omlet_lang::frame::{Reader, Writer};
use omlet_lang::value::{Field, Value};

/// The saved findings of one fuzz target, by file name.
fn findings(target: &str) -> Vec<(String, Vec<u8>)> {
    replay::findings(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fuzz-regressions"), target)
}

fn rule(statements: &str) -> Vec<u8> {
    format!("name : t\n---\n{statements}\n").into_bytes()
}

#[test]
fn saved_parse_compile_findings_do_not_panic() {
    for (name, input) in findings("parse_compile") {
        survives(&name, &input, harness::parse_compile);
    }
}

#[test]
fn saved_frame_guest_findings_do_not_panic() {
    for (name, input) in findings("frame_guest") {
        survives(&name, &input, harness::frame_guest);
    }
}

/// The first `parse_compile` finding, minimised: a field name in
/// `read(…)` followed by a multi-byte character. The error message sliced
/// the source up to the first byte of that character
/// (guest/lang/src/parse.rs, `accessor`, "invalid character in field name").
#[test]
fn a_multibyte_character_after_a_field_name_is_an_error_not_a_panic() {
    for text in [
        "x = read(aé) ;",
        "x = take(a海) ;",
        "x = read(a😀, b) ;",
        "x = match read(o\u{fffd}ion:[a]) { chars(1) => chars(2) ; } ;",
        "x = read(aé",
        "x = read(a\u{0301}) ;",
    ] {
        survives(text, &rule(text), harness::parse_compile);
    }
}

/// The second `parse_compile` finding, minimised: an unclosed quote at the
/// end of a statement that fails. Error recovery skipped the quoted text to
/// the end of the input and then one byte more, so the next message sliced
/// the source past its end (guest/lang/src/parse.rs, `recover`; the panic
/// is in `here`).
#[test]
fn an_unclosed_quote_at_the_end_is_an_error_not_a_panic() {
    for text in [
        "name:e\n---static{\"",
        "name : t\n---\nstatic { \"",
        "name : t\n---\nstatic { 'abc",
        "name : t\n---\nstatic { \"\\",
        "name : t\n---\nx = \"",
        "name : t\n---\nx = \"\\",
        "name : t\n---\nx = read(a) { _ : \"",
        "name : t\n---\nx = ( \"",
        "name : t\n---\n\"",
    ] {
        survives(text, text.as_bytes(), harness::parse_compile);
    }
}

/// Rule text cut at every byte, including inside multi-byte characters and
/// in the middle of each construct.
#[test]
fn rule_text_cut_anywhere_does_not_panic() {
    let full = "name : m/é\nrule : /a/*\n---\nstatic { s = object { k = chars(海) } ; }\n\
                a : ip = read(option:[x, y]) { _ : ip(127.0.0.1) } ;\n\
                b = match read(a) { ip(10.0.0.0/8) => chars(内网) ; in (digit(1), digit(2)) => chars(é) ; _ => chars(x) ; } ;\n\
                c = select z from t where k = read(a) ;\n\
                d = read(s) | to_json | base64_encode ;\n\
                e = fmt(\"{}-{}\", read(a), read(b)) ;\n\
                f : time = Now::time() ;\n";
    let bytes = full.as_bytes();
    for cut in 0..=bytes.len() {
        survives(&format!("cut at {cut}"), &bytes[..cut], harness::parse_compile);
    }
}

/// Deep nesting, huge numbers, odd bytes.
#[test]
fn hostile_rule_text_does_not_panic() {
    let deep = |open: &str, close: &str, d: usize| format!("x = {}chars(1){} ;", open.repeat(d), close.repeat(d));
    let mut inputs: Vec<Vec<u8>> = vec![
        rule(&deep("object { a = ", " }", 200)),
        rule(&deep("match read(a) { chars(1) => ", " }", 200)),
        rule(&deep("read(a) { _ : ", " }", 200)),
        rule(&format!("x = select a from t where {}k = read(v){} ;", "(".repeat(500), ")".repeat(500))),
        rule(&format!("x = select a from t where {}k = read(v) ;", "not ".repeat(500))),
        rule("x = digit(99999999999999999999999999999999) ;"),
        rule("x = digit(-9223372036854775809) ;"),
        rule("x = digit(-9223372036854775808) ;"),
        rule("x = float(1e99999) ;"),
        rule("x = float(-0.0) ; y = float(NaN) ; z = float(inf) ;"),
        rule("x = time(99999-99-99 99:99:99) ;"),
        rule("x = ip(999.1.1.1) ; y = ip(::ffff:1.2.3.4) ; z = ip(1:2:3:4:5:6:7:8:9) ;"),
        rule("x = read(a) | substr(18446744073709551615, 18446744073709551615) ;"),
        rule("x = read(a) | nth(-9223372036854775808) ;"),
        rule("x = chars(\u{0}) ;"),
        rule("x = \"\\u{110000}\" ;"),
        rule("x = read(a) | regex_match(\"(((((((((((((((((((a*)*)*)*)*)*)*)*)*)*)*)*)*)*)*)*)*)*)*)*\") ;"),
        rule("x = read(a) | regex_match(\"[\") ;"),
        rule(&format!("x = read(a) | regex_match(\"{}\") ;", "a{1000}".repeat(50))),
        format!("name : t\nrule : {}\n---\nx = read() ;\n", "/*".repeat(2000)).into_bytes(),
        format!("name : {}\n---\nx = read() ;\n", "n".repeat(100_000)).into_bytes(),
        b"name : t\n---\nx = read(\xff\xfe) ;\n".to_vec(),
        b"\xef\xbb\xbfname : t\r\n---\r\nx = read() ;\r\n".to_vec(),
        b"".to_vec(),
        b"\0\0\0\0\0".to_vec(),
        b"---".to_vec(),
        b"name : t\n---\n".to_vec(),
        b"name : t\n---\nx = read() ;\n\0name : t\n---\ny = read() ;\n".to_vec(),
        b"name : a\nrule : /x/*\n---\nx = read() ;\n\0name : b\nrule : /x/*y\n---\ny = read() ;\n".to_vec(),
    ];
    // Copies that multiply: two names per level.
    let mut e = String::from("chars(1)");
    for _ in 0..40 {
        e = format!("object {{ a, b = {e} }}");
    }
    inputs.push(rule(&format!("x = {e} ;")));
    for input in &inputs {
        survives("hostile rule", input, harness::parse_compile);
    }
}

/// `Reader::size` with an index far past the records: `i * 4` and
/// `at + 4` overflowed (guest/lang/src/frame.rs, `size` and `u32_at`), a
/// panic in debug builds. Found by the `frame_guest` target's first
/// version, which probed such an index.
#[test]
fn a_record_index_past_the_end_is_an_error_not_an_overflow() {
    let bytes = frame(&[vec![Field::new("a", Value::Null)]]);
    let r = Reader::new(&bytes).unwrap();
    for i in [1, usize::MAX / 4, usize::MAX / 4 + 1, usize::MAX] {
        assert!(std::panic::catch_unwind(|| r.size(i)).is_ok_and(|s| s.is_err()), "size({i})");
    }
}

fn frame(records: &[Vec<Field<'_>>]) -> Vec<u8> {
    let mut w = Writer::default();
    for r in records {
        w.record(r);
    }
    w.finish()
}

/// Truncated and damaged frames, absurd counts, text that is not UTF-8,
/// nesting past the limit.
#[test]
fn hostile_frames_do_not_panic() {
    let sample = vec![
        Field::new("s", Value::Chars("héllo 海".into())),
        Field::new("d", Value::Digit(i64::MIN)),
        Field::new("f", Value::Float(f64::NAN)),
        Field::new("b", Value::Bool(true)),
        Field::new("v4", Value::Ip("10.0.0.1".parse().unwrap())),
        Field::new("v6", Value::Ip("2001:db8::1".parse().unwrap())),
        Field::new("t", Value::Time(i64::MAX)),
        Field::new("n", Value::Null),
        Field::new("i", Value::Ignore),
        Field::new(
            "o",
            Value::Obj(Box::new(vec![
                Field::new("z", Value::Null),
                Field::new("a", Value::Array(Box::new(vec![Field::new("", Value::Digit(1))]))),
                Field::new("z", Value::Digit(2)),
            ])),
        ),
    ];
    let good = frame(&[sample.clone(), vec![], sample[..3].to_vec()]);
    for cut in 0..=good.len() {
        survives("truncated frame", &good[..cut], harness::frame_guest);
    }
    for i in 0..good.len() {
        for b in [0u8, 1, 9, 10, 0x7f, 0x80, 0xff] {
            let mut bad = good.clone();
            bad[i] = b;
            survives("damaged frame", &bad, harness::frame_guest);
        }
    }
    let header = |records: u32, nodes: u32, text: u32| {
        let mut v = Vec::new();
        for n in [records, nodes, text] {
            v.extend_from_slice(&n.to_le_bytes());
        }
        v
    };
    let mut inputs = vec![
        header(u32::MAX, u32::MAX, u32::MAX),
        header(0, 0, 0),
        header(1, 0, 0),
        [header(1, 0, 0), u32::MAX.to_le_bytes().to_vec()].concat(),
        // One obj node claiming u32::MAX members.
        [header(1, 13, 0), 1u32.to_le_bytes().to_vec(), vec![9], vec![0; 8], u32::MAX.to_le_bytes().to_vec()].concat(),
        // A chars node whose span ends past the text, and one that overflows.
        [
            header(1, 17, 1),
            1u32.to_le_bytes().to_vec(),
            vec![0],
            vec![0; 8],
            0u32.to_le_bytes().to_vec(),
            2u32.to_le_bytes().to_vec(),
            b"a".to_vec(),
        ]
        .concat(),
        [
            header(1, 17, 1),
            1u32.to_le_bytes().to_vec(),
            vec![0],
            vec![0; 8],
            u32::MAX.to_le_bytes().to_vec(),
            u32::MAX.to_le_bytes().to_vec(),
            b"a".to_vec(),
        ]
        .concat(),
        // Text that is not UTF-8, and text cut inside a character.
        [header(0, 0, 2), vec![0xc3, 0x28]].concat(),
        [header(0, 0, 1), vec![0xe6]].concat(),
    ];
    // A span that starts inside a multi-byte character of valid text.
    inputs.push(
        [
            header(1, 17, 3),
            1u32.to_le_bytes().to_vec(),
            vec![0],
            vec![0; 8],
            1u32.to_le_bytes().to_vec(),
            1u32.to_le_bytes().to_vec(),
            "海".as_bytes().to_vec(),
        ]
        .concat(),
    );
    // Nesting at and past the limit.
    for depth in [127, 128, 129, 1000] {
        let mut f = Field::new("x", Value::Null);
        for _ in 0..depth {
            f = Field::new("x", Value::Array(Box::new(vec![f])));
        }
        inputs.push(frame(&[vec![f]]));
    }
    for input in &inputs {
        survives("hostile frame", input, harness::frame_guest);
    }
}
