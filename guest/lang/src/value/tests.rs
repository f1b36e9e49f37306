use super::*;

/// `convert_in_place` leaves in its slot what `convert` returns, for
/// every kind asked of values of every kind (texts that convert and
/// texts that do not).
#[test]
fn converting_in_place_is_converting() {
    use alloc::vec;
    let values = vec![
        Value::chars("42"),
        Value::chars(" 7 "),
        Value::chars("4.5"),
        Value::chars("true"),
        Value::chars("10.0.0.1"),
        Value::chars(" 2001:db8::1 "),
        Value::chars("no"),
        Value::chars(""),
        Value::Digit(-3),
        Value::Float(2.5),
        Value::Bool(false),
        Value::Ip("10.1.2.3".parse().unwrap()),
        Value::Time(1_700_000_000_000_000_000),
        Value::BigInt("123456789012345678901234567890".into()),
        Value::BigInt("12".into()),
        Value::Null,
        Value::Ignore,
        Value::Obj(Box::new(vec![Field::new("a", Value::Digit(1))])),
        Value::Array(Box::new(vec![Field::new("", Value::Digit(1))])),
    ];
    let kinds = [
        Kind::Chars,
        Kind::Digit,
        Kind::Float,
        Kind::Bool,
        Kind::Ip,
        Kind::Time,
        Kind::Obj,
        Kind::Array,
        Kind::Null,
        Kind::Ignore,
        Kind::BigInt,
    ];
    let types = kinds.iter().map(|k| Type::Kind(*k)).chain([Type::Auto]);
    for ty in types {
        for v in &values {
            let mut slot = v.clone();
            convert_in_place(&mut slot, &ty);
            assert_eq!(slot, convert(v.clone(), &ty), "{v:?} to {ty:?}");
        }
    }
}

/// `append` (and its path for short slices, which only wasm takes)
/// writes what `extend_from_slice` would, at every length around its
/// cases, after text of every length up to a word.
#[test]
fn append_is_extend_from_slice() {
    let src: Vec<u8> = (0..40u8).map(|b| b.wrapping_mul(37).wrapping_add(11)).collect();
    for before in 0..9 {
        for n in 0..=src.len() {
            let start: Vec<u8> = (0..before as u8).collect();
            let mut want = start.clone();
            want.extend_from_slice(&src[..n]);
            let mut v = start.clone();
            append(&mut v, &src[..n]);
            assert_eq!(v, want, "{before} bytes before, {n} appended");
            if n <= 16 {
                let mut v = start.clone();
                append_short(&mut v, &src[..n]);
                assert_eq!(v, want, "short: {before} bytes before, {n} appended");
            }
        }
    }
}

/// The IPv4 reader that spares core's parser accepts what core's does
/// and reads it the same; what it leaves, core's parser decides.
#[test]
fn dotted_quads_read_as_core_reads_them() {
    let mut texts: Vec<String> = [
        "0.0.0.0",
        "255.255.255.255",
        "10.0.0.7",
        "192.168.9.4",
        "256.0.0.1",
        "1.2.3.256",
        "01.2.3.4",
        "1.02.3.4",
        "1.2.3.04",
        "1.2.3.0",
        "1.2.3",
        "1.2.3.4.5",
        "1..2.3",
        ".1.2.3",
        "1.2.3.",
        " 1.2.3.4",
        "1.2.3.4 ",
        "1.2.3.4\n",
        "1234.1.1.1",
        "1.1.1.1234",
        "1.2.3.-4",
        "+1.2.3.4",
        "1.2.3.4a",
        "a.b.c.d",
        "1.2.3.4/24",
        "::1",
        "::ffff:1.2.3.4",
        "2001:db8::1",
        "",
        "1.2.3.4.",
        "999.999.999.999",
        "100.200.300.40",
        "1.1.1.1 1",
    ]
    .iter()
    .map(|t| t.to_string())
    .collect();
    let mut x = 0x9e37_79b9u32;
    for _ in 0..5000 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let o = x.to_le_bytes();
        texts.push(format!("{}.{}.{}.{}", o[0], o[1], o[2], o[3]));
        texts.push(format!("{}.{}.{}.{:02}", o[0], o[1], o[2], o[3] % 100));
    }
    for t in &texts {
        assert_eq!(parse_ipv4(t), t.parse::<Ipv4Addr>().ok(), "{t:?}");
        assert_eq!(parse_ip(t), t.trim().parse::<IpAddr>().ok(), "{t:?}");
        if let Some(a) = dotted_quad(t.as_bytes()) {
            assert_eq!(Some(a), t.parse::<Ipv4Addr>().ok(), "{t:?}");
        }
    }
}

/// The plain-decimal reader gives core's float, bit for bit, and
/// leaves to core's parser whatever it does not read.
#[test]
fn plain_decimals_read_as_core_reads_them() {
    let mut texts: Vec<String> = [
        "0",
        "-0",
        "0.0",
        "-0.0",
        "0.012",
        "2.5",
        "1.0",
        "007",
        "1.",
        ".5",
        "-.5",
        "-",
        "",
        "1e3",
        "1.5e-3",
        "inf",
        "NaN",
        "1.2.3",
        "1,5",
        " 1",
        "1 ",
        "+1.5",
        "--1",
        "123456789012345",
        "1234567890123456",
        "0.000000000000001",
        "9007199254740993",
        "99999999999999.9",
        "0.1",
        "0.2",
        "0.3",
        "1.7976931348623157",
        "4.9406564584124654",
    ]
    .iter()
    .map(|t| t.to_string())
    .collect();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..20000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let digits = (x % 16) as usize + 1;
        let m = (x >> 8) % 10u64.pow(digits.min(15) as u32);
        let mut t = format!("{m:0digits$}");
        let point = ((x >> 40) as usize) % (digits + 1);
        if point > 0 && point < t.len() {
            t.insert(point, '.');
        }
        if x & (1 << 63) != 0 {
            t.insert(0, '-');
        }
        texts.push(t);
    }
    for t in &texts {
        let core = if t.is_empty() || t.bytes().any(|c| c.is_ascii_whitespace()) { None } else { t.parse::<f64>().ok() };
        assert_eq!(parse_float(t).map(f64::to_bits), core.map(f64::to_bits), "{t:?}");
    }
}

/// `same_bytes` agrees with `==` on every pair of a set of texts made
/// to hit its edges: each length up to past 16, near-misses at the start
/// and at the end, non-ASCII.
#[test]
fn same_bytes_agrees_with_eq() {
    let mut texts: Vec<alloc::string::String> =
        ["", "a", "b", "é", "aé"].iter().map(|s| alloc::string::String::from(*s)).collect();
    for n in 1..=20 {
        texts.push("x".repeat(n));
        texts.push("x".repeat(n - 1) + "y");
        texts.push(alloc::string::String::from("y") + &"x".repeat(n - 1));
    }
    for a in &texts {
        for b in &texts {
            assert_eq!(same_bytes(a.as_bytes(), b.as_bytes()), a == b, "{a:?} == {b:?}");
        }
    }
}

#[test]
fn json_floats_are_written_as_json_float_writes_them() {
    let mut values = alloc::vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        0.012,
        2.5,
        0.1,
        0.3,
        1e-5,
        1e-6,
        1e-7,
        123456.789,
        1e15,
        1e16,
        1e17,
        1e21,
        1e22,
        1e300,
        5e-324,
        f64::MAX,
        f64::MIN,
        f64::MIN_POSITIVE,
        f64::EPSILON,
        9007199254740993.0,
    ];
    // Arbitrary bit patterns, and decimals as logs hold them, from a fixed xorshift.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..50_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let bits = f64::from_bits(x);
        if bits.is_finite() {
            values.push(bits);
        }
        values.push((x % 10_000_000) as f64 / 1000.0);
        values.push((x % 1_000_000) as f64 * 10f64.powi((x % 40) as i32 - 20));
    }
    for v in values {
        let mut out = String::new();
        push_json_float(&mut out, v);
        assert_eq!(out, alloc::format!("{}", JsonFloat(v)), "{v:e}");
    }
}

#[test]
fn digits_and_addresses_are_written_as_display_writes_them() {
    for d in [0, 1, -1, 9, 10, 99, 100, 255, 256, -1000, 123_456_789, i64::MAX, i64::MIN] {
        let mut out = String::from("x");
        push_digit(&mut out, d);
        assert_eq!(out, alloc::format!("x{d}"));
    }
    let mut octets: Vec<u8> = (0..=255).collect();
    octets.extend([0, 9, 10, 99, 100, 199, 200, 255]);
    for w in octets.windows(4).step_by(3) {
        let ip = IpAddr::V4(Ipv4Addr::new(w[0], w[1], w[2], w[3]));
        let mut out = String::new();
        push_ip(&mut out, &ip);
        assert_eq!(out, alloc::format!("{ip}"));
    }
    for text in ["::", "::1", "2001:db8::7", "::ffff:10.0.0.1", "fe80::1:2:3:4"] {
        let ip: IpAddr = text.parse().unwrap();
        let mut out = String::new();
        push_ip(&mut out, &ip);
        assert_eq!(out, alloc::format!("{ip}"));
    }
}

#[test]
fn big_integers_are_canonical_and_ordered_by_value() {
    assert_eq!(parse_bigint("+000"), Some("0".into()));
    assert_eq!(parse_bigint("-0"), Some("0".into()));
    assert_eq!(parse_bigint("-00123"), Some("-123".into()));
    assert_eq!(parse_bigint("12a"), None);
    assert_eq!(parse_bigint(""), None);
    assert_eq!(parse_bigint("-"), None);
    for c in ["0", "-1", "340282366920938463463374607431768211457"] {
        assert!(is_canonical_bigint(c), "{c}");
    }
    for c in ["", "-0", "007", "+1", "1 ", "-"] {
        assert!(!is_canonical_bigint(c), "{c}");
    }
    let sorted = ["-100000000000000000000", "-99", "-1", "0", "5", "18446744073709551616", "99999999999999999999999"];
    for (i, a) in sorted.iter().enumerate() {
        for (j, b) in sorted.iter().enumerate() {
            assert_eq!(compare_bigint(a, b), i.cmp(&j), "{a} {b}");
        }
    }
    assert_eq!(integer_value("42".into()), Value::Digit(42));
    assert_eq!(integer_value("9223372036854775808".into()), Value::BigInt("9223372036854775808".into()));
    let big = Value::BigInt("18446744073709551616".into());
    assert_eq!(convert(big.clone(), &Type::Kind(Kind::Digit)), big);
    assert_eq!(convert(big.clone(), &Type::Kind(Kind::Chars)), Value::Chars("18446744073709551616".into()));
    assert_eq!(convert(Value::Chars("-0012".into()), &Type::Kind(Kind::BigInt)), Value::BigInt("-12".into()));
    assert_eq!(convert(Value::BigInt("12".into()), &Type::Kind(Kind::Digit)), Value::Digit(12));
}

#[test]
fn obj_from_is_repeated_obj_insert() {
    let names = ["b", "a", "c", "a", "", "b", "é", "a", "e", "c"];
    for len in 0..=names.len() {
        let fields: Vec<Field<'_>> =
            names[..len].iter().enumerate().map(|(i, n)| Field::new(*n, Value::Digit(i as i64))).collect();
        let mut want = Vec::new();
        for f in fields.clone() {
            obj_insert(&mut want, f);
        }
        assert_eq!(obj_from(fields), want);
    }
}

#[test]
fn an_object_of_200_000_members_is_sorted_in_n_log_n() {
    // Inserting each member into a sorted vector moves half of it: for
    // members arriving in reverse order, about n²/2 moves (minutes).
    let n = 200_000;
    let names: Vec<String> = (0..n).map(|i| alloc::format!("m{i:06}")).collect();
    let members: Vec<Field<'_>> = names.iter().rev().map(|s| Field::new(s.as_str(), Value::Null)).collect();
    let obj = obj_from(members);
    assert_eq!(obj.len(), n);
    assert!(obj.windows(2).all(|w| w[0].name < w[1].name));
}
