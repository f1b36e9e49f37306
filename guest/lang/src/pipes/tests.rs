use super::*;
use crate::value::Field;
use alloc::boxed::Box;
use alloc::vec;

#[test]
fn url_parts_of_borrowed_text_are_borrowed_where_they_can_be() {
    use UrlPart::*;
    let cases: &[(&str, UrlPart, &str, bool)] = &[
        ("https://shop.example.com:8443/cart?x=1#top", Host, "shop.example.com:8443", true),
        ("https://shop.example.com:08443/cart", Host, "shop.example.com:8443", false),
        ("https://shop.example.com:+8443/cart", Host, "shop.example.com:8443", false),
        ("https://Shop.example.com:8443/cart", Host, "shop.example.com:8443", false),
        ("http://[::1]:8080/x", Host, "[::1]:8080", true),
        ("http://u:p@h.example:0/x", Host, "h.example:0", true),
        ("https://shop.example.com:443/cart", Host, "shop.example.com", true),
        ("HTTP://Example.COM/a", Host, "example.com", false),
        ("http://example.com", Domain, "example.com", true),
        ("http://10.0.0.1:8080/x", Domain, "http://10.0.0.1:8080/x", true),
        ("http://u:p@example.com/a/b?q=1#f", Uri, "/a/b?q=1#f", true),
        ("http://example.com?q=1#f", Uri, "/?q=1#f", false),
        ("http://example.com#f?x", Params, "", true),
        ("http://example.com/p?a=1&b=2#f", Params, "a=1&b=2", true),
        ("http://example.com", Path, "/", true),
        ("  http://example.com/a/b?q  ", Path, "/a/b", true),
        ("ftp://files.example.com:21/x", Host, "files.example.com", true),
        ("not a url", Host, "not a url", true),
        // Delimiters more than once, or in each other's parts.
        ("http://a@b@c:1/x", Host, "c:1", true),
        ("http://a@b@c:1/x", Domain, "c", true),
        ("http://h:1:2/x", Host, "h:1:2", true),
        ("http://h/p#f?q", Params, "", true),
        ("http://h/p#f?q", Path, "/p", true),
        ("http://h?q1?q2#f", Params, "q1?q2", true),
        ("http://h?q1?q2#f", Path, "/", true),
        ("http://u@[::1]:8/x?y#z", Host, "[::1]:8", true),
        ("http://[::1@x]/", Host, "x]", true),
    ];
    for &(text, part, want, borrowed) in cases {
        let got = url_part(Cow::Borrowed(text), Some(part));
        assert_eq!(got, Value::Chars(Cow::Borrowed(want)), "{text} {part:?}");
        assert_eq!(url_part(Cow::Owned(text.to_string()), Some(part)), got, "{text} {part:?}");
        assert_eq!(matches!(got, Value::Chars(Cow::Borrowed(_))), borrowed, "{text} {part:?}: borrowed?");
    }
}

#[test]
fn path_parts_of_borrowed_text_are_borrowed_and_the_same_as_of_owned_text() {
    let cases = [
        ("/var/log/app.log", "app.log", "/var/log"),
        ("/x", "x", "/"),
        ("x", "x", ""),
        ("a/b/", "b", "a"),
        ("/", "/", "/"),
        ("", "", ""),
        ("c:\\dir\\f.txt", "f.txt", "c:/dir"),
    ];
    for (text, name, path) in cases {
        for (part, want) in [(PathPart::Name, name), (PathPart::Path, path)] {
            let borrowed = path_part(Cow::Borrowed(text), Some(part));
            let owned = path_part(Cow::Owned(text.to_string()), Some(part));
            assert_eq!(borrowed, Value::Chars(Cow::Borrowed(want)), "{text} {part:?}");
            assert_eq!(owned, borrowed, "{text} {part:?}");
            if !text.contains('\\') {
                assert!(matches!(borrowed, Value::Chars(Cow::Borrowed(_))), "{text} {part:?} was copied");
            }
        }
    }
}

#[test]
fn base64_round_trips_and_refuses_garbage() {
    for bytes in [&b""[..], b"f", b"fo", b"foo", b"\x00\xff\x10"] {
        assert_eq!(base64_decode(&base64_encode(bytes)).as_deref(), Some(bytes));
    }
    assert_eq!(base64_encode(b"foo"), "Zm9v");
    assert_eq!(base64_decode("Zm9v!"), None);
}

#[test]
fn json_text_escapes_quotes_and_controls() {
    let mut out = String::new();
    json_escape_into("a\"b\\c\nd\u{1}", &mut out);
    assert_eq!(out, "a\\\"b\\\\c\\nd\\u0001");
}

#[test]
fn the_clean_prefix_stops_at_the_first_byte_to_escape() {
    // Every position of every kind of byte to escape, at every offset
    // into a word, after ASCII and multi-byte text.
    let base = "héllo wörld, ∑ plain text of some length";
    assert_eq!(clean_prefix(base.as_bytes()), base.len());
    for special in ['"', '\\', '\n', '\u{0}', '\u{1f}'] {
        for at in 0..=base.len() {
            if !base.is_char_boundary(at) {
                continue;
            }
            let text = alloc::format!("{}{special}{}", &base[..at], &base[at..]);
            assert_eq!(clean_prefix(text.as_bytes()), at, "{text:?}");
            // And the escaped text is what a byte-by-byte escape gives.
            let mut fast = String::new();
            json_escape_into(&text, &mut fast);
            let slow: String = text
                .chars()
                .map(|c| match c {
                    '"' => "\\\"".into(),
                    '\\' => "\\\\".into(),
                    '\n' => "\\n".into(),
                    c if (c as u32) < 0x20 => alloc::format!("\\u{:04x}", c as u32),
                    c => c.into(),
                })
                .collect();
            assert_eq!(fast, slow);
        }
    }
    // Every byte value at every offset of two words: the prefix ends at
    // the first byte that needs an escape, whatever the word around it.
    for b in 0..=255u8 {
        for at in 0..16 {
            let mut bytes = [b'x'; 24];
            bytes[at] = b;
            let want = if needs_escape(b) { at } else { 24 };
            assert_eq!(clean_prefix(&bytes), want, "byte {b:#04x} at {at}");
        }
    }
    assert_eq!((0..=255u8).filter(|&b| needs_escape(b)).count(), 34);
}

#[test]
fn json_values_follow_the_output_rules() {
    let render = |v: &Value<'_>| {
        let mut s = String::new();
        write_json(v, &mut s, false);
        s
    };
    assert_eq!(render(&Value::Float(1.0)), "1.0");
    assert_eq!(render(&Value::Float(f64::NAN)), "null");
    assert_eq!(render(&Value::Ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)))), "\"10.0.0.1\"");
    // An ignored element of an array renders as "", elsewhere as null.
    let arr = Value::Array(Box::new(vec![Field::new("", Value::Ignore), Field::new("", Value::Digit(2))]));
    assert_eq!(render(&arr), "[\"\",2]");
    assert_eq!(render(&Value::Ignore), "null");
}

#[test]
fn pipes_pick_and_convert() {
    let arr = Value::Array(Box::new(vec![Field::new("", Value::Digit(7)), Field::new("", Value::Digit(8))]));
    assert_eq!(apply(&PipeFn::Nth(1), arr), Value::Digit(8));
    assert_eq!(apply(&PipeFn::Base64Encode, Value::Chars("foo".into())), Value::Chars("Zm9v".into()));
    assert_eq!(apply(&PipeFn::Ip4ToInt, Value::Ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)))), Value::Digit(167_772_161));
    let big = |v| apply(&PipeFn::IpToBigUint, v);
    assert_eq!(big(Value::Ip(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9)))), Value::BigInt("3405803785".into()));
    let v6 = |s: &str| Value::Ip(IpAddr::V6(s.parse().unwrap()));
    assert_eq!(big(v6("::1")), Value::BigInt("340282366920938463463374607431768211457".into()));
    assert_eq!(big(v6("::")), Value::BigInt("340282366920938463463374607431768211456".into()));
    assert_eq!(
        big(v6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")),
        Value::BigInt("680564733841876926926749214863536422911".into())
    );
    assert_eq!(big(v6("::ffff:10.0.0.1")), Value::BigInt("340282366920938463463374888902617726977".into()));
    assert_eq!(big(Value::Chars("10.0.0.1".into())), Value::Null, "text is not parsed");
    assert_eq!(big(Value::Null), Value::Null);
    assert_eq!(big(Value::Ignore), Value::Ignore, "an ignore passes every pipe");
}

#[test]
fn sql_helpers_compute_like_the_databases() {
    let t = |s: &str| Cell::Text(s.to_string());
    assert_eq!(helper(Helper::Ip4Int, &[t("10.0.0.1")]), Cell::Integer(167_772_161));
    assert_eq!(helper(Helper::Ip4Int, &[t("not an ip")]), Cell::Integer(0));
    assert_eq!(helper(Helper::Cidr4Contains, &[t("10.1.2.3"), t("10.0.0.0/8")]), Cell::Integer(1));
    assert_eq!(helper(Helper::Cidr4Contains, &[t("11.1.2.3"), t("10.0.0.0/8")]), Cell::Integer(0));
    assert_eq!(helper(Helper::TrimQuotes, &[t("'x'")]), t("x"));
    assert_eq!(helper(Helper::TrimQuotes, &[t("'x\"")]), t("'x\""));
}

#[test]
fn ip_keys_order_both_families_as_text() {
    let t = |s: &str| Cell::Text(s.to_string());
    assert_eq!(helper(Helper::IpKey, &[t(" 2001:DB8::7 ")]), t("20010db8000000000000000000000007"));
    assert_eq!(helper(Helper::IpKey, &[t("10.0.0.1")]), t("00000000000000000000ffff0a000001"));
    assert_eq!(helper(Helper::IpKey, &[t("::ffff:10.0.0.1")]), helper(Helper::IpKey, &[t("10.0.0.1")]));
    assert_eq!(helper(Helper::IpKey, &[Cell::Integer(167_772_161)]), helper(Helper::IpKey, &[t("10.0.0.1")]));
    assert_eq!(helper(Helper::IpKey, &[t("x")]), Cell::Null);
    assert_eq!(helper(Helper::CidrMinKey, &[t("2001:db8::/32")]), t("20010db8000000000000000000000000"));
    assert_eq!(helper(Helper::CidrMaxKey, &[t("2001:db8::/32")]), t("20010db8ffffffffffffffffffffffff"));
    assert_eq!(helper(Helper::CidrMaxKey, &[t("10.0.0.0/8")]), t("00000000000000000000ffff0affffff"));
    assert_eq!(helper(Helper::CidrMinKey, &[t("::/0")]), t("00000000000000000000000000000000"));
    assert_eq!(helper(Helper::CidrMaxKey, &[t("2001:db8::7")]), Cell::Null, "an address is no network");
    assert_eq!(helper(Helper::CidrMaxKey, &[t("2001:db8::7/128")]), t("20010db8000000000000000000000007"), "one host");
    assert_eq!(helper(Helper::CidrMaxKey, &[t("10.0.0.7/32")]), t("00000000000000000000ffff0a000007"));
    assert_eq!(helper(Helper::CidrContains, &[t("2001:db8::7"), t("2001:db8::/32")]), Cell::Integer(1));
    assert_eq!(helper(Helper::CidrContains, &[t("2001:db9::7"), t("2001:db8::/32")]), Cell::Integer(0));
    assert_eq!(helper(Helper::CidrContains, &[t("10.1.2.3"), t("10.0.0.0/8")]), Cell::Integer(1));
    assert_eq!(helper(Helper::CidrContains, &[t("10.1.2.3"), t("bogus")]), Cell::Integer(0));
    let (a, b) = (helper(Helper::IpKey, &[t("9.255.255.255")]), helper(Helper::IpKey, &[t("10.0.0.0")]));
    assert!(matches!((a, b), (Cell::Text(a), Cell::Text(b)) if a < b), "text order is address order");
}
