use super::expr::*;
use super::*;
use crate::ir::NO_REPEAT;
use crate::{Source, compile};
use alloc::format;
use alloc::vec;

/// The short-text `contains` agrees with `str::contains`: needles at
/// the start, the end, overlapping, absent, empty, longer than the
/// text, non-ASCII, and past its length limits.
#[test]
fn contains_agrees_with_str_contains() {
    let long = "x".repeat(300) + "bot";
    let hays = ["", "b", "bot", "Googlebot/2.1", "Mozilla/5.0", "aab", "abab", "ébot", "botté", "spidey spider", &long];
    let needles = ["", "b", "bot", "Bot", "spider", "ab", "aab", "é", "té", "2.1", "Mozilla/5.0 (X11)", "0123456789abcdefX"];
    for h in hays {
        for n in needles {
            assert_eq!(contains(h, n), h.contains(n), "{h:?} contains {n:?}");
        }
    }
    // The word-at-a-time scan: every text length 0-40, the needle (or a
    // near miss, or its first byte alone) at every place, among bytes
    // one above and one below its first (a borrow between bytes must
    // not make a place), and bytes past 0x7f.
    for len in 0..=40 {
        for fill in [b'a', b'c', 0x80, 0xff] {
            for needle in [&b"b"[..], b"bo", b"bot", b"bxt", b"bottom-of-the-sea"] {
                for place in 0..=len {
                    let mut h = alloc::vec![fill; len];
                    for (k, &c) in needle.iter().enumerate() {
                        if let Some(b) = h.get_mut(place + k) {
                            *b = c;
                        }
                    }
                    let (h, n) = (String::from_utf8_lossy(&h).into_owned(), core::str::from_utf8(needle).unwrap());
                    for probe in [n, "bot", "b", "ot", "bott"] {
                        assert_eq!(contains(&h, probe), h.contains(probe), "{h:?} contains {probe:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn wildcards_match_the_same_on_bytes_and_on_characters() {
    let cases = [
        ("*", "", true),
        ("*", "anything/at all", true),
        ("a*", "abc", true),
        ("a*", "ba", false),
        ("*c", "abc", true),
        ("a?c", "abc", true),
        ("a?c", "ac", false),
        ("a*b*c", "axxbyyc", true),
        ("a*b*c", "axxbyy", false),
        ("**", "x", true),
        ("", "", true),
        ("", "x", false),
        ("h?llo*", "héllo wörld", true),
        ("*ö*", "héllo wörld", true),
        ("*ö", "héllo wörld", false),
    ];
    for (p, n, want) in cases {
        assert_eq!(wildcard(p, n), want, "{p:?} against {n:?}");
        let (pc, nc): (Vec<char>, Vec<char>) = (p.chars().collect(), n.chars().collect());
        assert_eq!(glob(&pc, &nc, '*', '?'), want, "{p:?} against {n:?}, by characters");
    }
}

fn run<'a>(program: &'a Program, input: Vec<Field<'a>>) -> Vec<(String, Value<'a>)> {
    let out = evaluate(program, 0, input, &mut Offline::at((0, 0))).unwrap();
    out.into_iter().map(|f| (f.name.into_owned(), f.value)).collect()
}

#[test]
fn only_fields_that_own_nothing_are_forgotten() {
    let plain = [
        Value::Chars(Cow::Borrowed("x")),
        Value::BigInt(Cow::Borrowed("123456789012345678901234567890")),
        Value::Digit(1),
        Value::Float(1.5),
        Value::Bool(true),
        Value::Ip(IpAddr::from([10, 0, 0, 1])),
        Value::Time(0),
        Value::Null,
        Value::Ignore,
    ];
    for v in &plain {
        assert!(owns_nothing(&Field::new("a", v.clone())), "{v:?}");
        assert!(!owns_nothing(&Field::new(String::from("a"), v.clone())), "an owned name, {v:?}");
    }
    let owning = [
        Value::Chars(Cow::Owned(String::from("x"))),
        Value::BigInt(Cow::Owned(String::from("123456789012345678901234567890"))),
        Value::Obj(Box::default()),
        Value::Array(Box::new(vec![Field::new("0", Value::Digit(1))])),
        // An object of both kinds of members (tests/give_back.rs counts
        // that what the owning ones hold is freed).
        Value::Obj(Box::new(vec![
            Field::new("a", Value::Digit(1)),
            Field::new("b", Value::Chars(Cow::Owned(String::from("y")))),
            Field::new(String::from("c"), Value::Null),
            Field::new("d", Value::Array(Box::new(vec![Field::new("0", Value::Chars(Cow::Owned(String::from("z"))))]))),
        ])),
    ];
    for v in &owning {
        assert!(!owns_nothing(&Field::new("a", v.clone())), "{v:?}");
    }
    // Emptied either way (tests/give_back.rs counts the blocks freed).
    let mut fields: Vec<Field> = plain.iter().chain(&owning).map(|v| Field::new("a", v.clone())).collect();
    clear_fields(&mut fields);
    assert!(fields.is_empty() && fields.capacity() >= plain.len() + owning.len());
}

/// The slots remembered between records are hints: records whose names
/// move between places, names of one length at one place, names the
/// program does not know, and a second program with other slots (a
/// reload) all get the slot `resolve` gives, through one `Recent`.
#[test]
fn remembered_slots_are_only_hints() {
    let a = compile(&[Source { file: "a.oml", text: "name : t\n---\nv = read(ab) ;\nw = read(cd) ;\n" }], (0, 0)).unwrap();
    let b = compile(&[Source { file: "b.oml", text: "name : t\n---\nx = read(aa) ;\ny = read(cd) ;\nz = read(ab) ;\n" }], (0, 0))
        .unwrap();
    let shapes: [&[&str]; 5] =
        [&["ab", "cd"], &["cd", "ab"], &["zz", "ab", "cd"], &["ab", "cd", "ab"], &["aa", "cd", "ab", "q", "ab"]];
    let mut recent = Recent::new();
    for round in 0..3 {
        for program in [&a, &b] {
            for shape in shapes {
                for (i, name) in shape.iter().enumerate() {
                    assert_eq!(recent.slot(program, i, name), program.resolve(name), "round {round}, {shape:?}, field {i}");
                }
            }
        }
    }
    // Past 16 places and 16 bytes, keys are shared: still only hints.
    let long: Vec<String> = (0..40).map(|i| format!("{}{i}", "n".repeat(i % 20))).collect();
    let src = format!("name : t\n---\n{}", long.iter().map(|n| format!("o_{n} = read({n}) ;\n")).collect::<String>());
    let c = compile(&[Source { file: "c.oml", text: &src }], (0, 0)).unwrap();
    for _ in 0..2 {
        for (i, name) in long.iter().chain(long.iter().rev()).enumerate() {
            assert_eq!(recent.slot(&c, i, name), c.resolve(name), "{name} at {i}");
        }
    }
}

/// A `Spare` carries the field vectors from record to record: the same
/// outputs as `evaluate`, with the input's and the output's buffers kept
/// (so the next record allocates neither), and a buffer past
/// `KEEP_FIELDS` let go.
#[test]
fn a_spare_keeps_the_field_vectors_between_records() {
    let src = "name : t\n---\nV = read(id) ;\nW = read(x) ;\n* = take() ;\n";
    let program = compile(&[Source { file: "t.oml", text: src }], (0, 0)).unwrap();
    let record =
        |i: i64| vec![Field::new("id", Value::Digit(i)), Field::new("x", Value::chars("a")), Field::new("y", Value::Null)];
    let mut spare = Spare::new();
    for i in 0..3 {
        let mut input = spare.fields();
        assert!(i == 0 || input.capacity() >= 3, "record {i}: the input's buffer was not kept");
        input.extend(record(i));
        let out = evaluate_with(&program, 0, input, &mut Offline::at((0, 0)), &mut spare).unwrap();
        assert_eq!(out, evaluate(&program, 0, record(i), &mut Offline::at((0, 0))).unwrap());
        let at = out.as_ptr() as usize;
        spare.give_back(out);
        // The output's buffer is kept, and is the next output's.
        assert!(spare.dst.capacity() >= 3, "record {i}: the output's buffer was not kept");
        let next = evaluate_with(&program, 0, record(i), &mut Offline::at((0, 0)), &mut spare).unwrap();
        assert_eq!(next.as_ptr() as usize, at, "record {i}: the next output has another buffer");
        spare.give_back(next);
    }
    let names: Vec<String> = (0..=Spare::KEEP_FIELDS).map(|i| format!("f{i}")).collect();
    let mut big = spare.fields();
    big.extend(names.iter().map(|n| Field::new(n.as_str(), Value::Digit(1))));
    let out = evaluate_with(&program, 0, big, &mut Offline::at((0, 0)), &mut spare).unwrap();
    assert_eq!(spare.src.capacity(), 0, "a huge input's buffer is let go");
    spare.give_back(out);
    assert_eq!(spare.dst.capacity(), 0, "a huge output's buffer is let go");
}

/// 200 000 top-level fields. Each lookup is O(1) amortised (a slot index
/// once a record passes `INDEX_FROM` fields) and the batch statement's
/// same-name check is a slot or a set lookup, so the whole record is
/// O(n log n): well under a second in release. It used to scan the output
/// for every field moved (O(n²), minutes).
#[test]
fn a_record_of_200_000_fields_is_linear_work() {
    let src = "name : t\n---\nfirst = read(f0) ;\nlast = take(f199999) ;\nagain = read(f199999) ;\n\
               opt = take(option:[nope, f5]) ;\n__tmp = read(f7) ;\n* = take() ;\nafter = read(f9) ;\n";
    let program = compile(&[Source { file: "t.oml", text: src }], (0, 0)).unwrap();
    let n = 200_000;
    let names: Vec<String> = (0..n).map(|i| format!("f{i}")).collect();
    let mut input: Vec<Field<'_>> =
        names.iter().enumerate().map(|(i, s)| Field::new(s.as_str(), Value::Digit(i as i64))).collect();
    // Duplicates: of an unknown name (compared by name) and of a target
    // (compared by slot), which the batch statement does not move.
    input.push(Field::new("f3", Value::Digit(-3)));
    input.push(Field::new("first", Value::Digit(-1)));
    input.push(Field::new("f0", Value::Digit(-2)));
    let out = run(&program, input);
    assert_eq!(out.len(), 4 + (n - 2) + 1, "first, last, opt, __tmp, f0..f199998 but f5, after");
    assert_eq!(out[0], ("first".into(), Value::Digit(0)));
    assert_eq!(out[1], ("last".into(), Value::Digit(199_999)));
    assert_eq!(out[2], ("opt".into(), Value::Digit(5)));
    assert_eq!(out[3], ("__tmp".into(), Value::Ignore));
    // The batch moved the rest in input order, each name once.
    let moved: Vec<&str> = out[4..out.len() - 1].iter().map(|(n, _)| n.as_str()).collect();
    let want: Vec<&str> = names.iter().map(String::as_str).filter(|n| !matches!(*n, "f5" | "f199999")).collect();
    assert_eq!(moved, want);
    assert_eq!(out[4 + 3].1, Value::Digit(3));
    assert_eq!(out.last(), Some(&("after".into(), Value::Digit(9))));
}

/// The key and `fresh` flag of every read and take of `program`, in the
/// order `ir::prepare` visits them; with `clear`, each flag set to false.
/// Reads and takes found by [`Positions`] find what scanning finds:
/// names read from the input and from the output, takes of both,
/// typed takes whose conversion fails or meets a null, two input
/// fields of one name (the table gives up for the record), a take of
/// a field a statement wrote (positions move; the table gives up from
/// there), options, defaults, `fmt` of present and absent names,
/// objects, batch statements over names the output has, and the
/// lookup's parameters.
#[test]
fn positions_find_what_scans_find() {
    let src = "name : t\n---\n\
               a : digit = take(n) ;\nb = read(s) ;\nc = take(option:[zz, s]) ;\nd = read(s) { _ : chars(none) } ;\n\
               e : ip = take(ip) ;\nf = take(dup) ;\ng = take(dup) ;\nh = read(a) ;\na = take(a) ;\ni = read(a) ;\n\
               j = fmt(\"{b}/{e}/{q}\", @b, @e, @q) ;\nk = object { x = read(b) ; y = read(nul) ; z = read(w) ; } ;\n\
               l : digit = take(nul) ;\nm = match read(n2) { in (digit(1), digit(5)) => chars(low) ; _ => chars(high) ; } ;\n\
               o, p = select x, y from t where k = ip4_int(read(e)) ;\nw = read(w) ;\n* = take() ;\n";
    // The same without the take of a written field, so that the batch
    // statement runs with the table.
    let kept = "name : t\n---\nb = read(s) ;\nw = read(w) ;\nc = take(s) ;\nv : digit = take(n) ;\n* = take() ;\n";
    let records: Vec<Vec<Field<'static>>> = vec![
        vec![
            Field::new("n", Value::chars("42")),
            Field::new("s", Value::chars("text")),
            Field::new("ip", Value::chars("10.1.2.3")),
            Field::new("dup", Value::Digit(1)),
            Field::new("w", Value::Bool(true)),
            Field::new("n2", Value::Digit(3)),
            Field::new("nul", Value::Null),
            Field::new("other", Value::Digit(9)),
        ],
        vec![
            Field::new("n", Value::chars("not a number")),
            Field::new("dup", Value::Digit(1)),
            Field::new("dup", Value::Digit(2)),
            Field::new("ip", Value::chars("nope")),
            Field::new("n2", Value::Digit(30)),
        ],
        vec![Field::new("s", Value::chars("")), Field::new("zz", Value::chars("")), Field::new("a", Value::Digit(5))],
        vec![],
    ];
    for text in [src, kept] {
        let program = compile(&[Source { file: "t.oml", text }], (0, 0)).unwrap();
        for (i, record) in records.iter().enumerate() {
            let mut outs = Vec::new();
            for scan in [false, true] {
                let mut spare = Spare::new();
                spare.scan = scan;
                let out = evaluate_with(&program, 0, record.clone(), &mut Offline::at((0, 0)), &mut spare).unwrap();
                outs.push(out);
            }
            assert_eq!(outs[0], outs[1], "record {i} of {text}");
        }
    }
}

/// The guest's path (`Spare::writer_hides`, then `Writer::record_hiding`)
/// writes the frame that `evaluate_with` and `Writer::record` write.
#[test]
fn hiding_while_writing_writes_what_hiding_first_writes() {
    let src = "name : t\n---\n__a = read(x) ;\nb = read(__a) ;\n__c = object { d = chars(1) ; } ;\n* = take() ;\n";
    let program = compile(&[Source { file: "t.oml", text: src }], (0, 0)).unwrap();
    let record =
        || vec![Field::new("x", Value::chars("v")), Field::new("__in", Value::Digit(1)), Field::new("y", Value::Digit(2))];
    let (mut first, mut writing) = (crate::frame::Writer::new(), crate::frame::Writer::new());
    let out = evaluate_with(&program, 0, record(), &mut Offline::at((0, 0)), &mut Spare::new()).unwrap();
    first.record(&out);
    let mut spare = Spare::new();
    spare.writer_hides(true);
    let out = evaluate_with(&program, 0, record(), &mut Offline::at((0, 0)), &mut spare).unwrap();
    assert!(out.iter().any(|f| f.name == "__a" && f.value == Value::chars("v")));
    writing.record_hiding(&out);
    let (first, writing) = (first.take_frame(), writing.take_frame());
    assert_eq!(first, writing);
    let mut r = crate::frame::Reader::new(&writing).unwrap();
    let fields = r.fields(r.size(0).unwrap()).unwrap();
    let ignored: Vec<&str> = fields.iter().filter(|f| f.value == Value::Ignore).map(|f| &*f.name).collect();
    assert_eq!(ignored, ["__a", "__c", "__in"]);
}

fn fresh_flags(program: &mut Program, clear: bool) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for m in &mut program.models {
        crate::ir::visit_model(m, &mut |n| {
            if let crate::ir::Named::Key(a) = n {
                out.push((a.key.clone(), a.fresh));
                a.fresh &= !clear;
            }
        });
    }
    out
}

/// An access is `fresh` (the output is not searched) only where no
/// earlier statement can have written its name, and what fresh accesses
/// give is what searching both gives.
#[test]
fn fresh_accesses_are_those_no_earlier_statement_writes_and_change_nothing() {
    let src = "name : t\n---\na = read(x) ;\nx = chars(1) ;\nb = read(x) ;\nc = take(y) ;\nd = read(c) ;\n\
               g* = take() ;\ne = read(gz) ;\nf = object { m = read(q) ; } ;\nq = read(x) ;\n";
    let mut program = compile(&[Source { file: "t.oml", text: src }], (0, 0)).unwrap();
    let fresh = fresh_flags(&mut program, false);
    let want = [("x", true), ("x", false), ("y", true), ("c", false), ("gz", false), ("q", true), ("x", false)];
    assert_eq!(fresh, want.map(|(k, f)| (String::from(k), f)));
    let record = || {
        vec![
            Field::new("x", Value::Digit(7)),
            Field::new("y", Value::chars("why")),
            Field::new("c", Value::chars("in")),
            Field::new("gz", Value::Digit(1)),
            Field::new("q", Value::Digit(2)),
        ]
    };
    let mut plain = program.clone();
    fresh_flags(&mut plain, true);
    assert!(fresh_flags(&mut plain, false).iter().all(|(_, f)| !f));
    let with = run(&program, record());
    assert_eq!(with, run(&plain, record()));
    assert_eq!(with.iter().find(|(n, _)| n == "b").map(|(_, v)| v), Some(&Value::chars("1")));
}

/// A batch statement moves the first input field of each name that the
/// output does not hold yet, names the program knows or not, with the
/// index or without it.
#[test]
fn a_batch_moves_each_name_once_and_not_over_the_output() {
    // Narrow, with the index (padded past INDEX_FROM), and wide (many
    // input fields and many output fields) under INDEX_FROM.
    for (pad, consts) in [(0, 0), (INDEX_FROM + 1, 0), (16, 20)] {
        assert!(pad == INDEX_FROM + 1 || pad + 6 + consts + 2 <= INDEX_FROM);
        let filler: String = (0..consts).map(|i| format!("c{i} = chars(c) ;\n")).collect();
        let src = format!("name : t\n---\n{filler}a = chars(1) ;\nq = read(b) ;\n* = take() ;\n");
        let program = compile(&[Source { file: "t.oml", text: &src }], (0, 0)).unwrap();
        let mut input = vec![
            Field::new("a", Value::chars("x")),
            Field::new("b", Value::Digit(1)),
            Field::new("zz", Value::Digit(3)),
            Field::new("b", Value::Digit(2)),
            Field::new("zz", Value::Digit(4)),
            Field::new("a", Value::chars("y")),
        ];
        input.extend((0..pad).map(|_| Field::new("pad", Value::Null)));
        let out: Vec<_> = run(&program, input).into_iter().filter(|(n, _)| n != "pad" && !n.starts_with('c')).collect();
        let want = vec![
            ("a".into(), Value::chars("1")),
            ("q".into(), Value::Digit(1)),
            ("b".into(), Value::Digit(1)),
            ("zz".into(), Value::Digit(3)),
        ];
        assert_eq!(out, want, "padding {pad}, {consts} statements before");
    }
}

/// An object whose members all have different names is put in name
/// order by the members' ranks, as sorting by name puts it, whichever
/// members are absent; with a name twice it is sorted by name.
#[test]
fn objects_in_rank_order_are_objects_in_name_order() {
    let src = "name : t\n---\no = object { u = read(u) ; b = read(b) ; m = read(m) ; a2 = read(a) ; } ;\n\
               p = object { z = read(u) ; z = read(b) ; a = read(m) ; } ;\n";
    let program = compile(&[Source { file: "t.oml", text: src }], (0, 0)).unwrap();
    let mut by_name = program.clone();
    let mut ranked = Vec::new();
    for s in &mut by_name.models[0].stmts {
        if let Stmt::Assign { target, expr: Expr::Object(members) } = s {
            ranked.push((target.name.clone(), members.iter().map(|m| m.rank).collect::<Vec<_>>()));
            members.iter_mut().for_each(|m| m.rank = crate::ir::NO_RANK);
        }
    }
    let no = crate::ir::NO_RANK;
    assert_eq!(ranked, vec![(String::from("o"), vec![3, 1, 2, 0]), (String::from("p"), vec![no, no, no])]);
    let all = ["u", "b", "m", "a"];
    for mask in 0..16u32 {
        let input: Vec<Field> = all
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & 1 << i != 0)
            .map(|(i, n)| Field::new(*n, Value::Digit(i as i64)))
            .collect();
        assert_eq!(run(&program, input.clone()), run(&by_name, input), "fields {mask:04b}");
    }
}

/// `fmt` with its pieces' arguments known by position writes what
/// finding them by name writes: absent arguments, names no argument
/// has, takes; with `option:` names or a repeated key it finds them by
/// name.
#[test]
fn fmt_by_position_writes_what_fmt_by_name_writes() {
    let src = "name : t\n---\na = fmt(\"{x}-{y}\", @x, @y) ;\nb = fmt(\"{x}-{z}\", @x, @z) ;\n\
               c = fmt(\"{x}{x}\", take(x), read(x)) ;\nd = fmt(\"{y}/{q}\", read(option:[q, y]), @q) ;\n\
               e = fmt(\"<{w}>\", @w) ;\nf = fmt(\"{x}:{nope}\", @x) ;\n\
               g = fmt(\"{y}+{x}\", take(y), @x) ;\nh = fmt(\"{y}\", @y) ;\n";
    let program = compile(&[Source { file: "t.oml", text: src }], (0, 0)).unwrap();
    let mut by_name = program.clone();
    let mut indexed = Vec::new();
    for s in &mut by_name.models[0].stmts {
        if let Stmt::Assign { target, expr: Expr::Fmt { index, .. } } = s {
            indexed.push((target.name.clone(), !index.is_empty()));
            index.clear();
        }
    }
    let want = [("a", true), ("b", true), ("c", false), ("d", false), ("e", true), ("f", true), ("g", true), ("h", true)];
    assert_eq!(indexed, want.map(|(n, i)| (String::from(n), i)));
    let records = [
        vec![Field::new("x", Value::Digit(1)), Field::new("y", Value::chars("why")), Field::new("q", Value::Bool(true))],
        vec![Field::new("x", Value::Digit(1))],
        vec![Field::new("y", Value::chars("y1")), Field::new("y", Value::chars("y2")), Field::new("w", Value::Digit(3))],
        vec![],
    ];
    for r in records {
        let got = run(&program, r.clone());
        assert_eq!(got, run(&by_name, r.clone()), "{r:?}");
        if r.len() == 3 && r[0].name == "x" {
            assert_eq!(got[0], (String::from("a"), Value::chars("1-why")));
        }
    }
}

/// Answers a lookup with the sum of its integer parameters, and keeps
/// the parameters it was given.
struct Sums(Vec<Vec<Cell>>);

impl Host for Sums {
    fn query(&mut self, _: u32, params: &[Cell]) -> Result<Option<Vec<Cell>>, QueryError> {
        self.0.push(params.to_vec());
        let sum = params.iter().map(|c| if let Cell::Integer(i) = c { *i } else { 0 }).sum();
        Ok(Some(vec![Cell::Integer(sum)]))
    }
    fn columns(&mut self, _: u32) -> Result<Vec<String>, QueryError> {
        Ok(vec!["s".into()])
    }
    fn now(&mut self) -> (i64, i32) {
        (0, 0)
    }
}

/// A parameter that reads what an earlier one read takes its value;
/// with a take among them, each is read in turn.
#[test]
fn a_lookups_repeated_reads_are_read_once_and_bind_the_same() {
    let lookup = |params: &str| {
        let src = format!("name : t\n---\ns = select s from t where lo <= {params} ;\n");
        let mut program = compile(&[Source { file: "t.oml", text: &src }], (0, 0)).unwrap();
        let Stmt::Lookup { lookup, .. } = &mut program.models[0].stmts[0] else { panic!("not a lookup") };
        let repeats = lookup.repeats.clone();
        let mut host = Sums(Vec::new());
        let input = vec![Field::new("ip", Value::chars("10.0.0.1")), Field::new("ip", Value::chars("10.0.0.2"))];
        evaluate(&program, 0, input, &mut host).unwrap();
        (repeats, host.0)
    };
    let ip = |last: i64| Cell::Integer((10 << 24) + last);
    let (repeats, sent) = lookup("ip4_int(read(ip)) and hi >= ip4_int(read(ip))");
    assert_eq!(repeats, vec![NO_REPEAT, 0]);
    assert_eq!(sent, vec![vec![ip(1), ip(1)]]);
    let (repeats, sent) = lookup("ip4_int(take(ip)) and hi >= ip4_int(read(ip))");
    assert!(repeats.is_empty());
    assert_eq!(sent, vec![vec![ip(1), ip(2)]]);
}

/// The same rules over small records (scanned) and large ones (indexed)
/// give the same fields.
#[test]
fn lookups_agree_with_and_without_the_index() {
    let src = "name : t\n---\na = read(k) ;\nb = take(k) ;\nc = take(k) ;\nd = read(option:[e, k]) ;\n\
               e = take(option:[z, k]) ;\nk = read(a) ;\nf = read(k) ;\ng* = take() ;\nh = read(g1) ;\n";
    let program = compile(&[Source { file: "t.oml", text: src }], (0, 0)).unwrap();
    for pad in [0, INDEX_FROM + 1] {
        let mut input = vec![
            Field::new("k", Value::Chars("".into())),
            Field::new("k", Value::Digit(2)),
            Field::new("g1", Value::Digit(3)),
            Field::new("k", Value::Digit(4)),
            Field::new("g1", Value::Digit(5)),
            Field::new("k", Value::Digit(6)),
        ];
        input.extend((0..pad).map(|_| Field::new("pad", Value::Null)));
        let out = run(&program, input);
        let want = vec![
            ("a".into(), Value::Chars("".into())),
            ("b".into(), Value::Chars("".into())),
            ("c".into(), Value::Digit(2)),
            ("d".into(), Value::Digit(4)),
            ("e".into(), Value::Digit(4)),
            ("k".into(), Value::Chars("".into())),
            ("f".into(), Value::Chars("".into())),
            ("g1".into(), Value::Digit(3)),
            ("h".into(), Value::Digit(3)),
        ];
        assert_eq!(out, want, "padding {pad}");
    }
}
