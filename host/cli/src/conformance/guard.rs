//! What `omlet test` refuses or cuts short, because a case file may come
//! from anybody (a pull request's CI run): the files a case names must lie
//! inside the case file's folder (or a folder given to `omlet test`), every
//! file is read with a bound, an inline table's names and types are checked
//! before they reach SQL, and what a failing case prints is clipped.

use std::path::{Path, PathBuf};

use omlet::knowledge::files::folder;
use omlet::{Error, Result};

/// The most one value a failure shows (an expected or actual record, a
/// field's value, a record error): past it, `… (N bytes more)`.
pub const MAX_SHOWN_BYTES: usize = 4096;

/// The most one case's failure text may take; past it, clipped as values are.
pub const MAX_FAILURE_BYTES: usize = 16 * 1024;

/// The most the failures and traces of one case file may take together;
/// past it, the failures that follow are counted but their text is left out.
pub const MAX_REPORT_BYTES: usize = 1 << 20;

/// The most bytes of a case's rendered output record (the same bound as a
/// record crossing into the guest, `EngineConfig::max_record_bytes` by
/// default); a bigger one fails the case, in either mode.
pub const MAX_OUTPUT_BYTES: usize = 16 << 20;

/// `text`, cut at `max` bytes (on a character boundary) with
/// `… (N bytes more)` after it when it is longer.
pub fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes more)", &text[..end], text.len() - end)
}

/// The canonical folders the files a case file names may lie in: the case
/// file's own folder and `extra` (the folders given to `omlet test`).
pub fn roots(case_file: &Path, extra: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let dir = folder(case_file);
    let mut out = vec![dir.canonicalize().map_err(|e| Error::Io { path: dir.into(), source: e })?];
    for r in extra {
        out.push(r.canonicalize().map_err(|e| Error::Io { path: r.clone(), source: e })?);
    }
    Ok(out)
}

/// `named` (the value of `key` in case `case` of `case_file`), relative to
/// the case file's folder, resolved with its links followed; refused unless
/// it lies inside one of `roots`. Returns the resolved path, which is what
/// is read (so a link swapped afterwards is not followed again). The error
/// names the key and the path, and shows nothing of the file.
pub fn confine(case_file: &Path, case: &str, key: &str, named: &Path, roots: &[PathBuf]) -> Result<PathBuf> {
    let joined = folder(case_file).join(named);
    let real = joined.canonicalize().map_err(|e| Error::Io { path: joined.clone(), source: e })?;
    if roots.iter().any(|r| real.starts_with(r)) {
        return Ok(real);
    }
    let inside: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
    Err(Error::Input {
        what: case_file.display().to_string(),
        message: format!(
            "case {case}: `{key}` names {}, which is {}, outside {}: a case file may only name files inside its own \
             folder or a folder given to `omlet test` (give `omlet test` a folder that holds both)",
            named.display(),
            real.display(),
            inside.join(" and ")
        ),
    })
}

/// The longest inline table or column name (PostgreSQL's identifier limit).
const MAX_NAME_BYTES: usize = 63;

/// Whether `name` may name a column of a case's inline table:
/// `[A-Za-z_][A-Za-z0-9_]*`, at most 63 bytes.
pub fn is_column_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b'A'..=b'Z' | b'a'..=b'z' | b'_'))
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && name.len() <= MAX_NAME_BYTES
}

/// Checks an inline table's name, columns and types (the knowdb's own
/// checks: [`omlet::knowledge::knowdb::is_table_name`] and
/// [`column_type`](omlet::knowledge::knowdb::column_type)); returns the
/// types as SQL receives them, built from fixed words only.
pub fn table(name: &str, columns: &[String], types: &[String]) -> std::result::Result<Vec<String>, String> {
    if !omlet::knowledge::knowdb::is_table_name(name) {
        return Err(format!(
            "table name `{}` is refused: a table name must be a lower-case identifier ([a-z_][a-z0-9_]*, at most \
             {MAX_NAME_BYTES} bytes)",
            name.escape_debug()
        ));
    }
    if let Some(c) = columns.iter().find(|c| !is_column_name(c)) {
        return Err(format!(
            "table {name}: column name `{}` is refused: a column name must be an identifier ([A-Za-z_][A-Za-z0-9_]*, \
             at most {MAX_NAME_BYTES} bytes)",
            c.escape_debug()
        ));
    }
    if types.len() > columns.len() {
        return Err(format!("table {name}: {} types for {} columns", types.len(), columns.len()));
    }
    types
        .iter()
        .map(|t| {
            omlet::knowledge::knowdb::column_type(t).ok_or_else(|| {
                format!(
                    "table {name}: column type `{}` is not one omlet knows (TEXT, INTEGER, REAL, NUMERIC, BLOB, or INT, \
                     BIGINT, SMALLINT, BOOLEAN, FLOAT, DOUBLE, DECIMAL, VARCHAR, CHAR, BYTEA; optionally followed by \
                     PRIMARY KEY)",
                    t.escape_debug()
                )
            })
        })
        .collect()
}

/// For `omlet test --knowledge sqlite://FILE`: the file must be an existing
/// regular file (links followed), so that a test run never creates a
/// database file. Other URLs pass unchanged.
pub fn existing_sqlite(url: &str) -> Result<()> {
    let Some(file) = url.strip_prefix("sqlite://") else { return Ok(()) };
    let refuse = |why: String| {
        Err(Error::Input {
            what: "--knowledge".into(),
            message: format!(
                "sqlite://{file}: {why}; `omlet test` loads the cases' tables into an existing SQLite file only, and \
                 never creates one (create it first, or leave out --knowledge for a fresh in-memory database per case)"
            ),
        })
    };
    match std::fs::metadata(file) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(_) => refuse("not a regular file".into()),
        Err(e) => refuse(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipping_keeps_characters_whole_and_says_how_much_is_left_out() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcdef", 4), "abcd… (2 bytes more)");
        assert_eq!(clip("ééé", 3), "é… (4 bytes more)");
    }

    #[test]
    fn inline_tables_take_identifiers_and_known_types_only() {
        let cols = |c: &[&str]| c.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            table("t", &cols(&["a", "B_1"]), &cols(&["text", "int primary key"])).unwrap(),
            ["TEXT", "INTEGER PRIMARY KEY"]
        );
        let e = table("t", &cols(&["a"]), &cols(&["TEXT); DROP TABLE x; --"])).unwrap_err();
        assert!(e.contains("is not one omlet knows"), "{e}");
        assert!(table("t\"; drop", &cols(&["a"]), &[]).unwrap_err().contains("table name"));
        assert!(table("t", &cols(&["a\" text); --"]), &[]).unwrap_err().contains("column name"));
        assert!(table("t", &cols(&["a"]), &cols(&["TEXT", "TEXT"])).is_err());
    }
}
