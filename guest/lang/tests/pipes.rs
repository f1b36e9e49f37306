//! Edge cases of each pipe function: empty input, the wrong kind, non-ASCII.

mod common;
use common::{chars, pipe};
use omlet_lang::value::{Field, Value};

#[test]
fn base64() {
    assert_eq!(pipe("base64_encode", chars("")), r#"{"x":""}"#);
    assert_eq!(pipe("base64_encode", chars("高危")), r#"{"x":"6auY5Y2x"}"#);
    assert_eq!(pipe("base64_encode", Value::Digit(5)), r#"{"x":5}"#);
    assert_eq!(pipe("base64_decode()", chars("6auY5Y2x")), r#"{"x":"高危"}"#);
    assert_eq!(pipe("base64_decode", chars("aGk=")), r#"{"x":"hi"}"#);
    assert_eq!(pipe("base64_decode()", chars("not base64!")), r#"{"x":""}"#);
    assert_eq!(pipe("base64_decode()", chars("")), r#"{"x":""}"#);
    assert_eq!(pipe("base64_decode()", chars("/w==")), "{\"x\":\"\u{fffd}\"}");
}

#[test]
fn html_and_json_escapes() {
    assert_eq!(
        pipe("html_escape", chars("<a href='/x'>&</a>")),
        r#"{"x":"&lt;a href=&#x27;&#x2F;x&#x27;&gt;&amp;&lt;&#x2F;a&gt;"}"#
    );
    assert_eq!(pipe("html_unescape", chars("&lt;é&#233;&#xE9;&copy;&bogus;")), r#"{"x":"<ééé©&bogus;"}"#);
    assert_eq!(pipe("html_unescape", chars("")), r#"{"x":""}"#);
    assert_eq!(pipe("json_escape", chars("a\"b\\c\n\u{1}é/")), r#"{"x":"a\\\"b\\\\c\\n\\u0001é/"}"#);
    assert_eq!(pipe("json_unescape", chars(r#"\u00e9\ud83d\ude00\/"#)), r#"{"x":"é😀/"}"#);
    assert_eq!(pipe("json_unescape", chars(r#"bad \q"#)), r#"{"x":"bad \\q"}"#);
    assert_eq!(pipe("json_escape", Value::Bool(true)), r#"{"x":true}"#);
    assert_eq!(pipe("str_escape", chars("a\t'é")), r#"{"x":"a\\t\\'\\u{e9}"}"#);
}

#[test]
fn time_functions() {
    let t = omlet_lang::time::parse_time("2024-01-15 14:30:00").unwrap();
    assert_eq!(pipe("Time::to_ts", Value::Time(t)), r#"{"x":1705300200}"#);
    assert_eq!(pipe("Time::to_ts_ms", Value::Time(t)), r#"{"x":1705300200000}"#);
    assert_eq!(pipe("Time::to_ts_us", Value::Time(t)), r#"{"x":1705300200000000}"#);
    assert_eq!(pipe("Time::to_ts_zone(0, ms)", Value::Time(t)), r#"{"x":1705329000000}"#);
    assert_eq!(pipe("Time::to_ts_zone(-5, s)", Value::Time(t)), r#"{"x":1705347000}"#);
    // Delta §6: the zone may be given to every function, and from_ts* go back.
    assert_eq!(pipe("Time::to_ts(0)", Value::Time(t)), r#"{"x":1705329000}"#);
    assert_eq!(pipe("Time::from_ts(0)", Value::Digit(1705329000)), r#"{"x":"2024-01-15 14:30:00"}"#);
    assert_eq!(pipe("Time::from_ts_us(-1)", Value::Digit(-1)), r#"{"x":"1969-12-31 22:59:59.999999"}"#);
    // Past the years a time holds, the number passes unchanged.
    assert_eq!(pipe("Time::from_ts_ms", Value::Digit(i64::MAX)), format!(r#"{{"x":{}}}"#, i64::MAX));
    assert_eq!(pipe("Time::from_ts", Value::Float(1.5)), r#"{"x":1.5}"#);
    // Text timestamps are not parsed (spec §9 note).
    assert_eq!(pipe("Time::to_ts", chars("2024-01-15 14:30:00")), r#"{"x":"2024-01-15 14:30:00"}"#);
}

#[test]
fn nth_and_get() {
    let arr = Value::Array(Box::new(vec![Field::new("", Value::Digit(1)), Field::new("", chars("二"))]));
    assert_eq!(pipe("nth(1)", arr.clone()), r#"{"x":"二"}"#);
    assert_eq!(pipe("nth(2)", arr.clone()), r#"{"x":[1,"二"]}"#);
    assert_eq!(pipe("nth(0)", chars("abc")), r#"{"x":"abc"}"#);
    let inner = Value::Obj(Box::new(vec![Field::new("b", Value::Digit(2))]));
    let obj = Value::Obj(Box::new(vec![Field::new("a", inner)]));
    assert_eq!(pipe("get(a/b)", obj.clone()), r#"{"x":2}"#);
    assert_eq!(pipe("get(zz/a)", obj.clone()), r#"{"x":{"b":2}}"#);
    assert_eq!(pipe("get(zz)", obj.clone()), r#"{"x":{"a":{"b":2}}}"#);
    assert_eq!(pipe("get(a)", Value::Digit(3)), r#"{"x":3}"#);
}

#[test]
fn path_and_url() {
    assert_eq!(pipe("path(name)", chars(r"C:\Windows\系统\cmd.exe")), r#"{"x":"cmd.exe"}"#);
    assert_eq!(pipe("path(path)", chars(r"C:\Windows\系统\cmd.exe")), r#"{"x":"C:/Windows/系统"}"#);
    assert_eq!(pipe("path(path)", chars("file.txt")), r#"{"x":""}"#);
    assert_eq!(pipe("path(name)", chars("")), r#"{"x":""}"#);
    assert_eq!(pipe("url(domain)", chars("https://Example.COM:443/a?b=1#f")), r#"{"x":"example.com"}"#);
    assert_eq!(pipe("url(host)", chars("http://example.com:8080/")), r#"{"x":"example.com:8080"}"#);
    assert_eq!(pipe("url(uri)", chars("https://example.com/a/b?q=中#f")), r#"{"x":"/a/b?q=中#f"}"#);
    assert_eq!(pipe("url(path)", chars("https://example.com")), r#"{"x":"/"}"#);
    assert_eq!(pipe("url(params)", chars("https://example.com/x")), r#"{"x":""}"#);
    assert_eq!(pipe("url(domain)", chars("http://10.0.0.1/x")), r#"{"x":"http://10.0.0.1/x"}"#);
    assert_eq!(pipe("url(host)", chars("/api/users?page=1")), r#"{"x":"/api/users?page=1"}"#);
    assert_eq!(pipe("url(host)", Value::Digit(1)), r#"{"x":1}"#);
}

#[test]
fn conversions_and_markers() {
    let ip = Value::Ip("10.0.0.1".parse().unwrap());
    assert_eq!(pipe("ip4_to_int", ip.clone()), r#"{"x":167772161}"#);
    // Delta §7: text is parsed; IPv6 and anything else is null, which stores nothing.
    assert_eq!(pipe("ip4_to_int", chars(" 10.0.0.1 ")), r#"{"x":167772161}"#);
    assert_eq!(pipe("ip4_to_int", chars("fe80::1")), r#"{}"#);
    assert_eq!(pipe("ip4_to_int", Value::Ip("::1".parse().unwrap())), r#"{}"#);
    assert_eq!(pipe("to_str", ip), r#"{"x":"10.0.0.1"}"#);
    assert_eq!(pipe("to_str", Value::Float(3.0)), r#"{"x":"3"}"#);
    assert_eq!(pipe("to_json", chars("é\"")), r#"{"x":"\"é\\\"\""}"#);
    assert_eq!(pipe("to_json", Value::Null), r#"{"x":"null"}"#);
    assert_eq!(pipe("skip_empty", chars("")), r#"{}"#);
    assert_eq!(pipe("skip_empty", Value::Digit(0)), r#"{}"#);
    assert_eq!(pipe("skip_empty", chars(" ")), r#"{"x":" "}"#);
    assert_eq!(pipe("starts_with('é')", chars("été")), r#"{"x":"été"}"#);
    assert_eq!(pipe("starts_with('é')", chars("ete")), r#"{}"#);
    assert_eq!(pipe("starts_with('1')", Value::Digit(1)), r#"{}"#);
    assert_eq!(pipe("starts_with('x') | map_to(1)", chars("y")), r#"{}"#);
    assert_eq!(pipe("map_to('是')", Value::Digit(0)), r#"{"x":"是"}"#);
    assert_eq!(pipe("map_to(2.5)", chars("")), r#"{"x":2.5}"#);
    assert_eq!(pipe("skip_empty | to_json", chars("")), r#"{"x":"\"\""}"#);
}
