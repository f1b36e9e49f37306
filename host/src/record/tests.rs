//! Records and their JSON form, both ways.

use super::*;

#[test]
fn integers_past_64_bits_keep_their_digits() {
    let text = r#"{"s":"q\"1e99 \\","a":18446744073709551616,"b":-9223372036854775809,"c":[1,2.5,123456789012345678901234567890],"d":1e20,"e":"99999999999999999999","u":18446744073709551615,"z":-0}"#;
    let rec = from_json_str(text).unwrap();
    assert_eq!(
        rec.to_json(),
        r#"{"s":"q\"1e99 \\","a":18446744073709551616,"b":-9223372036854775809,"c":[1,2.5,123456789012345678901234567890],"d":100000000000000000000.0,"e":"99999999999999999999","u":18446744073709551615,"z":-0.0}"#
    );
    assert_eq!(rec.get("a"), Some(Value::BigInt("18446744073709551616".into())));
    assert_eq!(rec.get("u"), Some(Value::BigInt("18446744073709551615".into())));
    // The next record, without one, is read the usual way.
    assert_eq!(from_json_str(r#"{"f":1e300}"#).unwrap().get("f"), Some(Value::Float(1e300)));
}

#[test]
fn direct_parsing_reads_what_the_json_value_path_reads() {
    for text in [
        r#"{"a":1,"b":-2.5,"c":"x\u00e9\n","d":null,"e":true,"f":[1,"two",[3],{"z":1,"a":2}],"g":{"y":{"k":[]},"b":0.0}}"#,
        r#"{"big":18446744073709551615,"neg":-9223372036854775808,"exp":1e3,"tiny":5e-324}"#,
        r#"{"dup":1,"other":2,"dup":3}"#,
        r#"  {"nested":{"dup":1,"dup":2}}  "#,
        r#"{}"#,
        r#"{"海":"莲花","":""}"#,
    ] {
        let json: Json = serde_json::from_str(text).unwrap();
        let via_value = from_json(&json).unwrap();
        let direct = from_json_str(text).unwrap();
        assert_eq!(format!("{direct:?}"), format!("{via_value:?}"), "{text}");
    }
    assert_eq!(from_json_str("[1]").unwrap_err(), JsonError::NotAnObject);
    assert_eq!(from_json_str("[1]").unwrap_err().to_string(), "a record must be a JSON object");
    assert!(matches!(from_json_str(r#"{"a":}"#).unwrap_err(), JsonError::Invalid { line: 1, column: 6, .. }));
    assert!(from_json_str(r#"{"a":}"#).unwrap_err().to_string().starts_with("invalid JSON: "));
    assert!(from_json_str(r#"{"a":1} x"#).unwrap_err().to_string().starts_with("invalid JSON: trailing characters"));
}

#[test]
fn values_round_trip_through_records_and_serde() {
    let text = r#"{"s":"x","d":-3,"f":2.5,"b":true,"n":null,"a":[1,"two",[3.0]],"o":{"z":1,"a":{"k":"v"}}}"#;
    let r = Record::from_json(text).unwrap();
    assert_eq!(r.to_json(), r#"{"s":"x","d":-3,"f":2.5,"b":true,"n":null,"a":[1,"two",[3.0]],"o":{"a":{"k":"v"},"z":1}}"#);
    // serde's form is the same JSON, and reads back to the same record.
    let via_serde = serde_json::to_string(&r).unwrap();
    assert_eq!(via_serde, r.to_json());
    let back: Record = serde_json::from_str(&via_serde).unwrap();
    assert_eq!(back, r);
    // The JSON value is the JSON text, parsed.
    assert_eq!(r.to_json_value(), serde_json::from_str::<Json>(&r.to_json()).unwrap());
    // Typed values out, and in again.
    assert_eq!(r.get("d"), Some(Value::Digit(-3)));
    assert_eq!(r.get("a"), Some(Value::Array(vec![1.into(), "two".into(), Value::Array(vec![3.0.into()])])));
    let Some(Value::Object(o)) = r.get("o") else { panic!("o is an object") };
    assert_eq!(o.keys().collect::<Vec<_>>(), ["a", "z"]);
    let rebuilt: Record = r.iter().map(|(n, v)| (n.to_string(), v)).collect();
    assert_eq!(rebuilt.to_json(), r.to_json());
    // IPs and times render as the spec's strings.
    let mut t = Record::new();
    t.insert("ip", std::net::Ipv4Addr::new(10, 0, 0, 7));
    t.insert("at", Value::Time(86_400_000_000_000));
    assert_eq!(t.to_json(), r#"{"ip":"10.0.0.7","at":"1970-01-02 00:00:00"}"#);
    assert_eq!(serde_json::to_string(&t).unwrap(), t.to_json());
    // insert replaces in place; remove takes out.
    assert_eq!(t.insert("ip", "gone"), Some(Value::Ip("10.0.0.7".parse().unwrap())));
    assert_eq!(t.names().collect::<Vec<_>>(), ["ip", "at"]);
    assert_eq!(t.remove("ip"), Some(Value::Chars("gone".into())));
    assert_eq!(t.len(), 1);
    // Ignored fields are kept but not shown.
    let hidden = Record::from_fields(vec![
        Field::new(Cow::Borrowed("__x"), LangValue::Ignore),
        Field::new(Cow::Borrowed("y"), LangValue::Digit(1)),
    ]);
    assert_eq!((hidden.len(), hidden.get("__x"), hidden.to_json()), (1, None, r#"{"y":1}"#.to_string()));
    assert!(matches!(Record::from_json("[1]"), Err(Error::Input { .. })));
}

#[test]
fn json_keys_are_shared_between_records() {
    let _table = crate::record::names::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    crate::record::names::reset();
    let a = from_json_str(r#"{"a_key_of_this_test":1,"a\u0062c":2}"#).unwrap();
    let b = from_json_str(r#"{"a_key_of_this_test":3}"#).unwrap();
    assert_eq!(a.names().collect::<Vec<_>>(), ["a_key_of_this_test", "abc"], "an escaped key reads unescaped");
    match (&a.fields()[0].name, &b.fields()[0].name) {
        (Cow::Borrowed(x), Cow::Borrowed(y)) => assert!(std::ptr::eq(*x, *y), "one shared copy"),
        other => panic!("a key was not shared though the table had room: {other:?}"),
    }
}

#[test]
fn wide_records_with_repeated_keys_read_like_small_ones() {
    // Its 200,000 keys fill the shared table of names: not beside the tests of that table.
    let _table = crate::record::names::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    // Past the index threshold: repeated keys keep their first place and last value.
    let mut text = String::from("{");
    for i in 0..100 {
        text.push_str(&format!("\"k{i}\":{i},"));
    }
    text.push_str("\"k3\":\"again\",\"k99\":null,\"new\":1}");
    let json: Json = serde_json::from_str(&text).unwrap();
    assert_eq!(format!("{:?}", from_json_str(&text).unwrap()), format!("{:?}", from_json(&json).unwrap()));
    // 200,000 distinct fields: linear, so this takes milliseconds, not minutes.
    let mut wide = String::from("{");
    for i in 0..200_000 {
        wide.push_str(&format!("\"f{i}\":{i},"));
    }
    wide.push_str("\"f0\":\"last\"}");
    let r = from_json_str(&wide).unwrap();
    assert_eq!(r.len(), 200_000);
    let r = r.fields();
    assert_eq!(fields_json(&r[..1]), r#"{"f0":"last"}"#);
}

/// A JSONL line read straight into a frame is the record `from_json_str`
/// reads, field for field, and goes into a batch as the same bytes; lines
/// the direct read leaves alone (escaped or repeated keys, big integers,
/// wide records, text that is not an object) are read the usual way.
#[test]
fn a_line_read_into_a_frame_is_the_record_read_into_fields() {
    let wide = format!("{{{}}}", (0..40).map(|i| format!("\"k{i}\":{i}")).collect::<Vec<_>>().join(","));
    let lines: Vec<(String, bool)> = [
        (r#"{"remote_addr":"10.0.0.7","status":"200","request_time":"0.012","message":"10.0.0.7 - - GET / 200"}"#, true),
        (r#"{"a":1,"b":-2.5,"c":"x\u00e9\n\"q\"","d":null,"e":true,"f":[1,"two",[3],{"z":1,"a":2}],"g":{"y":{"k":[]},"b":0.0}}"#, true),
        (r#"{"max":9223372036854775807,"u":18446744073709551615,"min":-9223372036854775808,"exp":1e3,"z":-0,"tiny":5e-324}"#, true),
        (r#"  {"海":"莲花","":"", "spaced" : [ ] }  "#, true),
        (r#"{}"#, true),
        (r#"{"dup":1,"other":2,"dup":3}"#, false),
        (r#"{"esc\"aped":1}"#, false),
        (r#"{"past":18446744073709551616}"#, false),
        (r#"{"f":1e20}"#, false),
        (&wide, false),
    ]
    .into_iter()
    .map(|(t, direct)| (t.to_string(), direct))
    .collect();
    for (text, direct) in &lines {
        assert_eq!(json::frame_from_json_str(text).is_some(), *direct, "direct read of {text}");
        let line = from_json_line(text).unwrap();
        let usual = from_json_str(text).unwrap();
        assert_eq!(line.fields(), usual.fields(), "{text}");
        let (mut a, mut b) = (omlet_lang::frame::Writer::new(), omlet_lang::frame::Writer::new());
        from_json_line(text).unwrap().write_frame(&mut a);
        b.record(usual.fields());
        assert_eq!(a.finish(), b.finish(), "frame of {text}");
    }
    // What is not a record fails with the usual words.
    for text in [r#"[1]"#, r#"{"a":1"#, r#"{"a":1} x"#, r#"{"a":1e400}"#, "nope"] {
        assert!(json::frame_from_json_str(text).is_none(), "{text}");
        assert_eq!(from_json_line(text).err(), from_json_str(text).err(), "{text}");
    }
    // A changed record is its fields: the frame it was read into is dropped.
    let mut r = from_json_line(r#"{"a":"1"}"#).unwrap();
    r.insert("b", 2);
    let mut w = omlet_lang::frame::Writer::new();
    r.write_frame(&mut w);
    let mut want = omlet_lang::frame::Writer::new();
    want.record(from_json_str(r#"{"a":"1","b":2}"#).unwrap().fields());
    assert_eq!(w.finish(), want.finish());
    assert_eq!(r, from_json_str(r#"{"a":"1","b":2}"#).unwrap());
}

/// The flat read (no serde) takes the simple lines and gives up on the
/// others, and where it reads a line it writes the frame serde's read does.
#[test]
fn the_flat_read_writes_what_serde_writes_and_leaves_the_rest() {
    use json::{Read, read_frame};
    let flat = [
        r#"{"remote_addr":"10.0.0.7","status":"200","body_bytes_sent":"5120","method":"GET","user_agent":"Mozilla/5.0"}"#,
        r#"{"a":1,"b":-2,"c":0,"d":true,"e":false,"f":null,"g":"","h":"é海 x"}"#,
        r#" { "max" : 9223372036854775807 ,	"min":-9223372036854775808 }  "#,
        r#"{}"#,
        "{ }",
    ];
    for text in flat {
        let got = read_frame(text, Read::Flat);
        assert!(got.is_some(), "the flat read takes {text}");
        assert_eq!(got, read_frame(text, Read::Serde), "{text}");
    }
    let not_flat = [
        r#"{"a":1.5}"#,
        r#"{"a":1e3}"#,
        r#"{"a":-0}"#,
        r#"{"a":01}"#,
        r#"{"a":9223372036854775808}"#,
        r#"{"a":-9223372036854775809}"#,
        r#"{"a":"x"y"}"#,
        r#"{"a
":1}"#,
        r#"{"a":[1]}"#,
        r#"{"a":{}}"#,
        r#"{"a":1,"a":2}"#,
        r#"{"a":tru}"#,
        r#"{"a":truex}"#,
        r#"{"a":1,}"#,
        r#"{"a" 1}"#,
        r#"{"a":1} x"#,
        r#"{"a":1"#,
        "{\"a\":\"tab\there\"}",
    ];
    for text in not_flat {
        assert!(read_frame(text, Read::Flat).is_none(), "the flat read leaves {text}");
        assert_eq!(read_frame(text, Read::Any), read_frame(text, Read::Serde), "{text}");
    }
    let wide = format!("{{{}}}", (0..=json::INDEX_FROM).map(|i| format!("\"k{i}\":{i}")).collect::<Vec<_>>().join(","));
    assert!(read_frame(&wide, Read::Flat).is_none(), "past {} members", json::INDEX_FROM);
}

/// `--input-types` naming no field of a record changes nothing, and the
/// record keeps the frame it was read into; one that types a field drops it.
#[test]
fn a_retype_that_changes_nothing_keeps_the_frame() {
    let types: BTreeMap<String, String> = [("src".to_string(), "ip".to_string())].into();
    let mut r = from_json_line(r#"{"a":"1"}"#).unwrap();
    r.retype(&types).unwrap();
    assert!(r.frame.is_some(), "no field to type: the frame stays");
    let mut r = from_json_line(r#"{"a":"1","src":"10.0.0.1"}"#).unwrap();
    r.retype(&types).unwrap();
    assert!(r.frame.is_none(), "a typed field: the frame no longer says the record");
    assert_eq!(r.get("src"), Some(Value::Ip("10.0.0.1".parse().unwrap())));
}

/// Random JSONL lines (a fixed seed): read straight into a frame or the
/// usual way, each gives the record `from_json_str` gives, and the same frame.
#[test]
fn random_lines_read_into_frames_as_into_fields() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    fn text(next: &mut impl FnMut(u64) -> u64) -> String {
        const PIECES: [&str; 10] = ["a", "status", "é", "海", "\\\"", "\\n", "\\u00e9", " ", "bot", "\\\\"];
        let mut s = String::from("\"");
        for _ in 0..next(5) {
            s.push_str(PIECES[next(PIECES.len() as u64) as usize]);
        }
        s.push('"');
        s
    }
    fn value(next: &mut impl FnMut(u64) -> u64, depth: u32) -> String {
        match next(if depth > 2 { 9 } else { 11 }) {
            0 => "null".into(),
            1 => "true".into(),
            2 => format!("{}", next(1000) as i64 - 500),
            3 => ["9223372036854775807", "-9223372036854775808", "18446744073709551615", "18446744073709551616", "-0"]
                [next(5) as usize]
                .into(),
            4 => ["0.5", "-1.25e3", "1e20", "5e-324", "123.0"][next(5) as usize].into(),
            5..=8 => text(next),
            9 => format!("[{}]", (0..next(4)).map(|_| value(next, depth + 1)).collect::<Vec<_>>().join(",")),
            _ => format!(
                "{{{}}}",
                (0..next(4)).map(|_| format!("{}:{}", text(next), value(next, depth + 1))).collect::<Vec<_>>().join(",")
            ),
        }
    }
    let (mut direct, mut usual) = (0, 0);
    for _ in 0..3000 {
        let n = if next(20) == 0 { 40 } else { next(8) };
        let members: Vec<String> = (0..n).map(|_| format!("{}:{}", text(&mut next), value(&mut next, 0))).collect();
        let line = format!("{{{}}}", members.join(","));
        match json::frame_from_json_str(&line) {
            Some(_) => direct += 1,
            None => usual += 1,
        }
        let want = from_json_str(&line).unwrap();
        let got = from_json_line(&line).unwrap();
        assert_eq!(got.fields(), want.fields(), "{line}");
        let (mut a, mut b) = (omlet_lang::frame::Writer::new(), omlet_lang::frame::Writer::new());
        from_json_line(&line).unwrap().write_frame(&mut a);
        b.record(want.fields());
        assert_eq!(a.finish(), b.finish(), "frame of {line}");
    }
    // Both paths were taken often enough to mean something.
    assert!(direct > 500 && usual > 500, "{direct} read directly, {usual} the usual way");
}

#[test]
fn records_read_into_a_chunk_are_the_records_read_alone() {
    let lines = [
        r#"{"a":"1","n":2,"ok":true}"#,
        r#"{"nested":{"x":[1,"two"]},"f":1.5}"#,
        // A key with an escape is read the usual way, outside the chunk.
        r#"{"k\"ey":"v"}"#,
        r#"{"b":"\u00e9t\u00e9","z":null}"#,
    ];
    let mut chunks = chunk::ChunkWriter::new();
    let read: Vec<Record> = lines.iter().map(|l| chunks.read_line(l).unwrap()).collect();
    chunks.seal();
    let alone: Vec<Record> = lines.iter().map(|l| from_json_str(l).unwrap()).collect();
    let places: Vec<Option<u32>> = read.iter().map(|r| r.chunk().map(|(_, i)| i)).collect();
    assert_eq!(places, [Some(0), Some(1), None, Some(2)]);
    for (r, a) in read.iter().zip(&alone) {
        assert_eq!(r.fields(), a.fields());
        let (mut w, mut want) = (omlet_lang::frame::Writer::new(), omlet_lang::frame::Writer::new());
        r.write_frame(&mut w);
        want.record(a.fields());
        assert_eq!(w.finish(), want.finish());
    }
    // The whole chunk, in order, is the chunk's own frame; any other
    // batch is joined from the records' parts. Both are the frame of
    // the same records written one by one.
    let batch = |rs: &[&Record]| {
        let mut w = omlet_lang::frame::Writer::new();
        rs.iter().for_each(|r| w.record(r.fields()));
        w.finish()
    };
    let whole = [&read[0], &read[1], &read[3]];
    let frame = crate::record::frame::encode_frame(whole.iter().copied());
    assert!(matches!(frame, crate::record::frame::BatchFrame::Chunk(_)));
    assert_eq!(frame.bytes(), batch(&whole));
    for some in [vec![&read[1], &read[0]], vec![&read[3]], vec![&read[0], &read[2], &read[3]]] {
        let frame = crate::record::frame::encode_frame(some.iter().copied());
        assert!(matches!(frame, crate::record::frame::BatchFrame::Own(_)));
        assert_eq!(frame.bytes(), batch(&some));
    }
    // The next chunk starts again at 0, in a frame of its own.
    let next = chunks.read_line(lines[0]).unwrap();
    chunks.seal();
    let (cell, at) = next.chunk().unwrap();
    assert_eq!(at, 0);
    assert!(!std::sync::Arc::ptr_eq(cell, read[0].chunk().unwrap().0));
    assert_eq!(next.fields(), alone[0].fields());

    // A record looked at before its chunk is handed over (an input map
    // that retypes its records) seals the chunk there and then, on the
    // reading thread or any other; the records after it start a new chunk.
    let mut chunks = chunk::ChunkWriter::new();
    let early = chunks.read_line(r#"{"ts":"2024-05-01 12:00:00"}"#).unwrap();
    assert_eq!(early.get("ts"), Some(Value::Chars("2024-05-01 12:00:00".into())));
    let moved = chunks.read_line(r#"{"a":"1"}"#).unwrap();
    assert_eq!(moved.chunk().map(|(_, i)| i), Some(0), "a new chunk after the early seal");
    let moved = std::thread::spawn(move || {
        assert_eq!(moved.get("a"), Some(Value::Chars("1".into())), "sealed from another thread");
        moved
    })
    .join()
    .unwrap();
    // Still open when the writer is dropped: sealed then.
    let open = chunks.read_line(r#"{"b":2}"#).unwrap();
    drop(chunks);
    assert_eq!(early, from_json_str(r#"{"ts":"2024-05-01 12:00:00"}"#).unwrap());
    assert_eq!(moved, from_json_str(r#"{"a":"1"}"#).unwrap());
    assert_eq!(open.get("b"), Some(Value::Digit(2)));
    // Outside a chunk, on any thread, a record keeps a frame of its own:
    // `from_json_line` reads the same way everywhere.
    assert!(from_json_line(r#"{"a":"1"}"#).unwrap().own_frame().is_some());
}
