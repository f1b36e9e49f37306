//! The parser reports every broken statement, with positions and hints.

mod common;
use common::errors;

#[test]
fn several_errors_in_one_file_are_all_reported() {
    let d = errors(
        "name : t\n---\na = digit(x) ;\nb = read(a) | nope ;\nc = chars(ok) ;\nd : int = read(d) ;\ne = match read(a) { _ => chars(z) ; } ;\n",
    );
    let lines: Vec<(u32, u32)> = d.iter().map(|d| (d.line, d.column)).collect();
    assert_eq!(lines, vec![(3, 5), (4, 15), (6, 5), (7, 5)], "{d:#?}");
    assert!(d[0].message.contains("digit literal does not parse"));
    assert!(d[1].message.contains("unknown pipe function `nope`"));
    assert!(d[2].message.contains("unknown type name `int`"));
    assert!(d[3].message.contains("at least one non-default arm"));
}

#[test]
fn a_missing_semicolon_is_reported_where_it_is_missing_and_parsing_goes_on() {
    let d = errors("name : t\n---\na = read(a)\nb = read(b) ;\nc = digit(q) ;\n");
    assert_eq!(d.len(), 2, "{d:#?}");
    // Right after `read(a)`, the end of the statement that lacks the `;`.
    assert_eq!((d[0].line, d[0].column), (3, 12));
    assert!(d[0].message.contains("expected `;`"));
    assert_eq!(d[0].hint.as_deref(), Some("every statement ends with `;`"));
    assert_eq!((d[1].line, d[1].column), (5, 5));
}

#[test]
fn header_errors_name_the_problem() {
    assert!(errors("name : t\nx = chars(1) ;\n")[0].message.contains("missing `---`"));
    assert!(errors("name : t\ncolour : red\n---\nx = chars(1) ;\n")[0].message.contains("unknown header key `colour`"));
    assert!(errors("name : t\n---\n")[0].message.contains("at least one statement"));
    assert!(errors("nom : t\n---\nx = chars(1) ;\n")[0].message.contains("must start with its name"));
}

#[test]
fn columns_count_characters_not_bytes() {
    let d = errors("name : t\n---\n名字 = chars(ok) ;\nx = chars(高危) | bad ;\n");
    // `名字` is not a target name: the error is at column 1 of line 3.
    assert_eq!((d[0].line, d[0].column), (3, 1), "{d:#?}");
    // A literal cannot be piped: the statement should end after `chars(高危)`,
    // whose `)` is character 13, so the missing `;` is at character 14.
    let last = d.last().unwrap();
    assert_eq!((last.line, last.column), (4, 14), "{d:#?}");
    assert!(last.message.contains("found `|`"));
}

#[test]
fn rendering_shows_the_line_and_a_caret() {
    let src = "name : t\n---\nx = read(src-ip) ;\n";
    let d = errors(src);
    let text = omlet_lang::diag::render_all(&d, "r.oml", src);
    assert!(text.starts_with("r.oml:3:10: error: invalid character in field name"), "{text}");
    assert!(text.contains("3 | x = read(src-ip) ;"), "{text}");
    assert!(text.contains("  |          ^^^^"), "{text}");
    assert!(text.contains("hint: a field key uses letters"), "{text}");
}

#[test]
fn reference_quirks_are_rejected_with_a_reason() {
    assert!(errors("name : t\n---\nx = read(a, b) ;\n")[0].message.contains("one field name"));
    assert!(errors("name : t\n---\nx = @a ;\n")[0].message.contains("`@name` cannot be a whole statement"));
    assert!(errors("name : t\n---\nx = pipe read(t) | Time::to_ts_zone(+8, s) ;\n")[0].message.contains("Time::to_ts_zone"));
    assert!(errors("name : t\n---\nx = read(a) | nth(-1) ;\n")[0].message.contains("nth"));
    assert!(
        errors("name : t\n---\nx = read(a) | base64_decode(Latin1) ;\n")[0].message.contains("unknown base64_decode encoding")
    );
    assert!(errors("name : t\n---\na* = chars(x) ;\n")[0].message.contains("batch"));
    assert!(errors("name : t\n---\nx = ip(300.1.1.1) ;\n")[0].message.contains("ip literal"));
}

/// Found by fuzzing (parse_compile): a non-ASCII character right after a
/// field name sliced the source inside the character (a panic).
#[test]
fn a_non_ascii_character_in_a_field_name_is_an_error_not_a_panic() {
    for text in
        ["name : t\n---\nx = read(o\u{fffd}ion) ;\n", "name : t\n---\nx = read(a海) ;\n", "name : t\n---\nx = take(é) ;\n"]
    {
        let errors = omlet_lang::compile(&[omlet_lang::Source { file: "t.oml", text }], (0, 0)).unwrap_err();
        let message = &errors[0].diagnostics[0].message;
        assert!(message.starts_with("invalid character in field name") || message.contains("expected"), "{message}");
    }
}

/// Issue 17: one mistake gives one error, and the error names the fix.
#[test]
fn typos_get_one_error_that_suggests_the_name() {
    let one = |src: &str| {
        let e = errors(src);
        assert_eq!(e.len(), 1, "{e:#?}");
        e.into_iter().next().unwrap()
    };
    let d = one("name : t\n---\nx = match read(a) { contain('x') => chars(y) ; _ => chars(z) ; } ;\ny = read(b) ;\n");
    assert!(d.message.contains("did you mean `contains`"), "{d:?}");
    let d = one("name : t\n---\nx = pipe read(a) | base64_encod ;\n");
    assert!(d.message.contains("did you mean `base64_encode`"), "{d:?}");
    let d = one("name : t\n---\nx = tak(a) ;\n");
    assert!(d.message.contains("did you mean `take(…)`"), "{d:?}");
    for (ty, want) in [("int", "digit"), ("string", "chars"), ("boolean", "bool")] {
        let d = one(&format!("name : t\n---\nx : {ty} = read(a) ;\n"));
        assert!(d.hint.as_deref().unwrap_or("").contains(&format!("`{want}`")), "{d:?}");
    }
}

#[test]
fn a_wildcard_in_a_tuple_arm_says_so() {
    let e = errors("name : t\n---\nx = match (read(a), read(b)) { (_, chars(y)) => chars(1) ; _ => chars(2) ; } ;\n");
    assert_eq!(e.len(), 1, "{e:#?}");
    assert!(e[0].message.contains("tuple arm"), "{:?}", e[0]);
    assert!(!e[0].message.contains("static"), "{:?}", e[0]);
}
