//! Fuzz findings and hostile inputs of the host's readers, replayed through
//! the same bodies the fuzz targets run (`fuzz/src/host.rs`, included
//! below): the frame decoder, JSONL/CSV input and JSON records, the knowdb
//! loader. Each input must be refused or read cleanly, never panic.
//!
//! Every file under `tests/fuzz-regressions/{frame_host,jsonl_csv,knowdb}/`
//! at the repository root is a finding of that target (`scripts/fuzz.sh`;
//! fuzz/README.md): to add one, copy the fuzzer's `crash-*` file there once
//! its cause is fixed.
//!
//! The host's frame decoders are reached through `omlet::fuzzing` (the
//! `fuzzing` feature, which this crate's tests turn on).

#[path = "../../../fuzz/src/host.rs"]
mod harness;

#[path = "../../../fuzz/src/replay.rs"]
mod replay;

use replay::survives;

use std::path::PathBuf;

use omlet_lang::frame::Writer;
use omlet_lang::value::{Field, Value};

/// The saved findings of one fuzz target, by file name.
fn findings(target: &str) -> Vec<(String, Vec<u8>)> {
    replay::findings(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fuzz-regressions"), target)
}

#[test]
fn saved_findings_do_not_panic() {
    for (target, body) in
        [("frame_host", harness::frame_host as fn(&[u8])), ("jsonl_csv", harness::jsonl_csv), ("knowdb", harness::knowdb)]
    {
        for (name, input) in findings(target) {
            survives(&format!("{target}/{name}"), &input, body);
        }
    }
}

/// Every combination of limits and buffer size (the `jsonl_csv` target's
/// first byte) over `input`.
fn every_shape(what: &str, input: &[u8]) {
    for head in 0u8..64 {
        let data = [&[head][..], input].concat();
        survives(&format!("{what} (shape {head})"), &data, harness::jsonl_csv);
    }
}

#[test]
fn hostile_jsonl_and_csv_do_not_panic() {
    let deep_json = format!("{{\"a\":{}1{}}}", "[".repeat(300), "]".repeat(300));
    let deep_obj = format!("{}1{}", "{\"a\":".repeat(200), "}".repeat(200));
    let inputs: Vec<(&str, Vec<u8>)> = vec![
        ("empty", b"".to_vec()),
        ("newlines", b"\n\n\r\n\r\r\n".to_vec()),
        ("cr only", b"\r".to_vec()),
        ("json records", b"{\"a\":1,\"a\":[1,{\"z\":2,\"b\":null}],\"c\":18446744073709551615}\r\n \n[1]\n{\"x\":".to_vec()),
        (
            "huge numbers",
            b"{\"a\":1e999,\"b\":-1e999,\"c\":123456789012345678901234567890,\"d\":-9223372036854775809}\n".to_vec(),
        ),
        ("escapes", b"{\"\\ud800\":\"\\udfff\",\"\\u0000\":\"\\\"\"}\n{\"a\":\"\\uZZZZ\"}\n".to_vec()),
        ("deep array", deep_json.into_bytes()),
        ("deep object", deep_obj.into_bytes()),
        ("invalid utf-8", b"{\"a\":\"\xff\xfe\"}\n\xc3\n\xe6\xb5\n{\"b\":\"\xe6\xb5\xb7\"}\n".to_vec()),
        ("utf-8 across lines", "{\"海\":\"é\"}\n".repeat(40).into_bytes()),
        ("long line", [vec![b'{'; 5000], b"\n{}\n".to_vec()].concat()),
        ("long multibyte line", "海".repeat(3000).into_bytes()),
        ("csv", b"ip,status\n10.0.0.1,200\n\"10.0.0.2\",\"a,b\"\n10.0.0.3\n".to_vec()),
        ("csv quotes", b"a,b\r\n\"1\n2\",3\n\"open\n4,5\n\n\xff\xfe,x\n".to_vec()),
        ("csv open quote at end", b"a,b\n1,\"2".to_vec()),
        ("csv only quotes", "\"".repeat(1000).into_bytes()),
        ("csv header only", b"a,b,c".to_vec()),
        ("csv bad header", b"\"a\n\"b\nc,d\n1,2\n".to_vec()),
        ("csv many columns", [",".repeat(5000).into_bytes(), b"\n".to_vec(), ",".repeat(5000).into_bytes()].concat()),
        ("nul bytes", vec![0; 100]),
    ];
    for (what, input) in &inputs {
        every_shape(what, input);
    }
    // Every cut of a mixed input, under one small shape.
    let mixed = "a,\"b\"\n{\"海\":[1,2,{\"x\":null}]}\n\"x\ny\",2\r\n".as_bytes();
    for cut in 0..=mixed.len() {
        survives(&format!("cut at {cut}"), &[&[0x11][..], &mixed[..cut]].concat(), harness::jsonl_csv);
    }
}

#[test]
fn hostile_frames_do_not_panic_on_the_host() {
    let sample = vec![
        Field::new("s", Value::Chars("héllo 海".into())),
        Field::new("d", Value::Digit(i64::MIN)),
        Field::new("f", Value::Float(f64::NAN)),
        Field::new("b", Value::Bool(true)),
        Field::new("v6", Value::Ip("2001:db8::1".parse().unwrap())),
        Field::new("n", Value::Null),
        Field::new("o", Value::Obj(Box::new(vec![Field::new("z", Value::Null), Field::new("z", Value::Digit(2))]))),
        Field::new("i", Value::Ignore),
        // Ignored values inside containers render as `""` (array) and `null` (object).
        Field::new("a", Value::Array(Box::new(vec![Field::new("", Value::Ignore), Field::new("", Value::Digit(1))]))),
        Field::new("oi", Value::Obj(Box::new(vec![Field::new("g", Value::Ignore)]))),
        Field::new("t", Value::Time(1_700_000_000_123_456_789)),
        Field::new("v4", Value::Ip("10.0.0.7".parse().unwrap())),
    ];
    let mut w = Writer::default();
    w.record(&sample);
    let one = w.finish();
    let mut w = Writer::default();
    w.record(&sample);
    w.record(&[]);
    w.record(&sample[..2]);
    let three = w.finish();
    for good in [&one, &three] {
        for head in [0x00u8, 0x01, 0x03, 0x13, 0x33, 0xf4, 0x0f] {
            for cut in 0..=good.len() {
                survives("truncated frame", &[&[head][..], &good[..cut]].concat(), harness::frame_host);
            }
            for i in 0..good.len() {
                for b in [0u8, 8, 9, 10, 0xff] {
                    let mut bad = good.clone();
                    bad[i] = b;
                    survives("damaged frame", &[&[head][..], &bad[..]].concat(), harness::frame_host);
                }
            }
        }
    }
    // Nesting at and past the limit; a container claiming u32::MAX members.
    for depth in [127, 128, 129, 1000] {
        let mut f = Field::new("x", Value::Null);
        for _ in 0..depth {
            f = Field::new("x", Value::Obj(Box::new(vec![f])));
        }
        let mut w = Writer::default();
        w.record(&[f]);
        survives("deep frame", &[&[1u8][..], &w.finish()].concat(), harness::frame_host);
    }
    let mut huge = Vec::new();
    for n in [1u32, 13, 0, 1] {
        huge.extend_from_slice(&n.to_le_bytes());
    }
    huge.extend_from_slice(&[10, 0, 0, 0, 0, 0, 0, 0, 0]);
    huge.extend_from_slice(&u32::MAX.to_le_bytes());
    survives("huge array", &[&[1u8][..], &huge].concat(), harness::frame_host);
}

#[test]
fn hostile_knowdb_files_do_not_panic() {
    let inputs: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"\xff\xfe".to_vec(),
        b"[[tables]]\nname = \"t\"\ncsv = \"t.csv\"\ntypes = [\"TEXT\"]\ncreate = \"c.sql\"\ninsert = \"i.sql\"\nexpected_rows = 4\non_error = \"skip\"\n"
            .to_vec(),
        b"[[tables]]\nname = \"t\"\nexpected_rows = -1\n".to_vec(),
        b"[[tables]]\nname = \"t\"\nexpected_rows = 18446744073709551616\n".to_vec(),
        b"[[tables]]\nname = \"t\"\non_error = \"maybe\"\n".to_vec(),
        b"[[tables]]\nname = \"t\"\nunknown = 1\n".to_vec(),
        b"tables = 1\n".to_vec(),
        b"[[tables]]\nname = \"\\uD800\"\n".to_vec(),
        b"[[tables]]\nname = \"t\"\ncsv = \"\\u0000\"\n".to_vec(),
        format!("a = {}1{}\n", "[".repeat(10_000), "]".repeat(10_000)).into_bytes(),
        format!("a = {}1{}\n", "{b = ".repeat(10_000), "}".repeat(10_000)).into_bytes(),
        format!("{}\n", "[a.".repeat(5000)).into_bytes(),
        "[[tables]]\nname = \"t\"\n".repeat(2000).into_bytes(),
    ];
    for input in &inputs {
        survives("hostile knowdb.toml", input, harness::knowdb);
    }
}
