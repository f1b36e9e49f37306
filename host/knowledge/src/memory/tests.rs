//! In-memory tables against what SQLite answers for the same lookups.

use super::cells::sqlite_number;
use super::*;

fn term(column: &str, op: &str, param: &str) -> guard::Term {
    guard::Term { column: column.into(), op: op.into(), param: param.into() }
}

fn table(types: &[&str], rows: Vec<Vec<Cell>>) -> Arc<Table> {
    let columns = (0..types.len()).map(|i| format!("c{i}")).collect();
    let rows: Vec<Box<[Cell]>> = rows.into_iter().map(Vec::into_boxed_slice).collect();
    let bytes = rows.iter().map(|r| row_bytes(r)).sum();
    let data = TableData { columns, types: types.iter().map(|t| t.to_string()).collect(), rows, bytes };
    Arc::new(Table::new("t", data, Duration::ZERO))
}

#[test]
fn affinity_follows_sqlites_rules_in_order() {
    assert_eq!(Affinity::of("BIGINT"), Affinity::Integer);
    assert_eq!(Affinity::of("varchar(20)"), Affinity::Text);
    assert_eq!(Affinity::of(""), Affinity::Blob);
    assert_eq!(Affinity::of("DOUBLE PRECISION"), Affinity::Real);
    assert_eq!(Affinity::of("DECIMAL(10,2)"), Affinity::Numeric);
    // "FLOATING POINT" holds INT: SQLite's own example.
    assert_eq!(Affinity::of("FLOATING POINT"), Affinity::Integer);
}

#[test]
fn numeric_text_is_read_as_sqlite_reads_it() {
    assert_eq!(sqlite_number(" 42 "), Some(Cell::Integer(42)));
    assert_eq!(sqlite_number("-4.5e1"), Some(Cell::Real(-45.0)));
    assert_eq!(sqlite_number(".5"), Some(Cell::Real(0.5)));
    assert_eq!(sqlite_number("5."), Some(Cell::Real(5.0)));
    assert_eq!(sqlite_number("99999999999999999999"), Some(Cell::Real(1e20)));
    for no in ["", "+", "1e", "0x10", "inf", "nan", "1 2", "abc", "."] {
        assert_eq!(sqlite_number(no), None, "{no:?}");
    }
}

#[test]
fn a_hash_lookup_converts_by_affinity_and_keeps_the_first_repeated_row() {
    let t = table(
        &["INTEGER", "TEXT", "TEXT"],
        vec![
            vec![Cell::Integer(10), Cell::Text("a".into()), Cell::Text("first".into())],
            vec![Cell::Integer(10), Cell::Text("b".into()), Cell::Text("second".into())],
            vec![Cell::Integer(11), Cell::Text("7".into()), Cell::Text("seven".into())],
            vec![Cell::Null, Cell::Text("n".into()), Cell::Text("null key".into())],
        ],
    );
    let by_int = t.plan(&[term("c0", "=", "k")], &["k".into()], &["c2".into()]).unwrap();
    let ask = |l: &Lookup, c: Cell| l.answer(&[c]);
    assert_eq!(ask(&by_int, Cell::Integer(10)), Some(Some(vec![Cell::Text("first".into())])));
    assert_eq!(ask(&by_int, Cell::Text(" 10 ".into())), Some(Some(vec![Cell::Text("first".into())])));
    assert_eq!(ask(&by_int, Cell::Real(11.0)), Some(Some(vec![Cell::Text("seven".into())])));
    assert_eq!(ask(&by_int, Cell::Text("ten".into())), Some(None));
    assert_eq!(ask(&by_int, Cell::Null), Some(None));
    assert_eq!(ask(&by_int, Cell::Blob(vec![1])), Some(None), "a blob is compared as it is against a number");
    assert!(by_int.describe().contains("1 repeated"), "{}", by_int.describe());
    let by_text = t.plan(&[term("c1", "=", "k")], &["k".into()], &["c2".into()]).unwrap();
    assert_eq!(ask(&by_text, Cell::Integer(7)), Some(Some(vec![Cell::Text("seven".into())])));
    assert_eq!(ask(&by_text, Cell::Real(7.0)), None, "a real against text: SQL decides");
    let both = t.plan(&[term("c0", "=", "a"), term("c1", "=", "b")], &["a".into(), "b".into()], &["c2".into()]).unwrap();
    assert_eq!(both.answer(&[Cell::Integer(10), Cell::Text("b".into())]), Some(Some(vec![Cell::Text("second".into())])));
}

#[test]
fn a_range_lookup_finds_the_one_range_that_holds_the_value() {
    let rows = [(1, 5, "a"), (10, 20, "b"), (6, 9, "c"), (30, 29, "empty")];
    let t = table(
        &["INTEGER", "INTEGER", "TEXT"],
        rows.iter().map(|&(l, h, z)| vec![Cell::Integer(l), Cell::Integer(h), Cell::Text(z.into())]).collect(),
    );
    let l = t.plan(&[term("c0", "<=", "x"), term("c1", ">=", "x_2")], &["x".into(), "x_2".into()], &["c2".into()]).unwrap();
    let at = |x: Cell| l.answer(&[x.clone(), x]);
    let zone = |z: &str| Some(Some(vec![Cell::Text(z.into())]));
    assert_eq!(at(Cell::Integer(1)), zone("a"));
    assert_eq!(at(Cell::Integer(5)), zone("a"));
    assert_eq!(at(Cell::Integer(7)), zone("c"));
    assert_eq!(at(Cell::Text("20".into())), zone("b"));
    assert_eq!(at(Cell::Integer(0)), Some(None));
    assert_eq!(at(Cell::Integer(25)), Some(None));
    assert_eq!(at(Cell::Integer(29)), Some(None));
    assert_eq!(at(Cell::Text("x".into())), Some(None));
    assert_eq!(at(Cell::Real(7.5)), None, "a fraction: SQL answers");
    assert_eq!(l.answer(&[Cell::Integer(7), Cell::Integer(8)]), None, "two values: SQL answers");
    let strict = t.plan(&[term("c0", "<", "x"), term("c1", ">", "x")], &["x".into()], &["c2".into()]).unwrap();
    assert_eq!(strict.answer(&[Cell::Integer(5)]), Some(None));
    assert_eq!(strict.answer(&[Cell::Integer(4)]), zone("a"));
}

#[test]
fn ip_key_ranges_answer_ipv6_and_mapped_ipv4_lookups() {
    let k = |s: &str| Cell::Text(s.into());
    let rows = vec![
        vec![k("20010db8000000000000000000000000"), k("20010db8ffffffffffffffffffffffff"), k("XX")],
        vec![k("00000000000000000000ffff0a000000"), k("00000000000000000000ffff0affffff"), k("LAN")],
        vec![Cell::Null, k("00000000000000000000ffff0bffffff"), k("half")],
    ];
    let t = table(&["TEXT", "TEXT", "TEXT"], rows);
    let l = t.plan(&[term("c0", "<=", "x"), term("c1", ">=", "x")], &["x".into()], &["c2".into()]).unwrap();
    assert!(l.describe().starts_with("memory: ip_key ranges c0..c1"), "{}", l.describe());
    let zone = |z: &str| Some(Some(vec![Cell::Text(z.into())]));
    assert_eq!(l.answer(&[k("20010db8000000000000000000000007")]), zone("XX"));
    assert_eq!(l.answer(&[k("00000000000000000000ffff0a090807")]), zone("LAN"));
    assert_eq!(l.answer(&[k("00000000000000000000ffff0b000001")]), Some(None), "a NULL bound matches nothing");
    assert_eq!(l.answer(&[k("ffffffffffffffffffffffffffffffff")]), Some(None));
    assert_eq!(l.answer(&[Cell::Null]), Some(None));
    assert_eq!(l.answer(&[k("2001")]), None, "text that is no key: SQL answers");
    assert_eq!(l.answer(&[k("20010DB8000000000000000000000007")]), None, "upper case sorts otherwise: SQL answers");
    let bad = table(&["TEXT", "TEXT", "TEXT"], vec![vec![k("a"), k("b"), k("c")]]);
    let e = bad.plan(&[term("c0", "<=", "x"), term("c1", ">=", "x")], &["x".into()], &["c2".into()]).unwrap_err();
    assert!(matches!(e, Unplanned::BadBound { row: 1, .. }), "{e:?}");
    assert!(e.to_string().contains("not an ip_key"), "{e}");
}

#[test]
fn the_two_step_search_finds_what_a_plain_search_finds() {
    // Ranges of 3 with gaps of 2, over several blocks, and values in
    // the ranges, the gaps, before and after them.
    let sorted: Vec<(i64, i64, u32)> = (0..1000).map(|i| (i * 5, i * 5 + 2, i as u32)).collect();
    let spans = Spans::new(&sorted);
    for x in -3..5010 {
        for strict in [false, true] {
            let n = sorted.partition_point(|s| if strict { s.0 < x } else { s.0 <= x });
            let plain = n.checked_sub(1).map(|i| (sorted[i].1, sorted[i].2));
            assert_eq!(spans.last_admitting(x, strict), plain, "{x} {strict}");
        }
    }
}

#[test]
fn overlapping_ranges_and_other_shapes_stay_in_sql() {
    let t = table(
        &["INTEGER", "INTEGER", "TEXT"],
        vec![
            vec![Cell::Integer(1), Cell::Integer(10), Cell::Text("a".into())],
            vec![Cell::Integer(5), Cell::Integer(6), Cell::Text("b".into())],
        ],
    );
    let e = t.plan(&[term("c0", "<=", "x"), term("c1", ">=", "x")], &["x".into()], &["c2".into()]).unwrap_err();
    assert_eq!(e, Unplanned::Overlap(1, 2));
    assert!(e.to_string().contains("overlap"), "{e}");
    assert_eq!(t.plan(&[term("c0", "!=", "x")], &["x".into()], &["c2".into()]).unwrap_err(), Unplanned::NotListOrRange);
    assert_eq!(
        t.plan(&[term("c0", "=", "x"), term("c1", ">=", "y")], &["x".into(), "y".into()], &["c2".into()]).unwrap_err(),
        Unplanned::NotListOrRange
    );
}
