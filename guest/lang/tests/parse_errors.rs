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
fn a_missing_semicolon_is_reported_at_the_next_token_and_parsing_goes_on() {
    let d = errors("name : t\n---\na = read(a)\nb = read(b) ;\nc = digit(q) ;\n");
    assert_eq!(d.len(), 2, "{d:#?}");
    assert_eq!((d[0].line, d[0].column), (4, 1));
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
    // A literal cannot be piped: the `|` after `chars(高危)` is at character 15.
    let last = d.last().unwrap();
    assert_eq!((last.line, last.column), (4, 15), "{d:#?}");
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
