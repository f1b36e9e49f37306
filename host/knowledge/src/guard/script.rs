//! What a knowdb's own SQL files (`create.sql`, `insert.sql`, `clean.sql`,
//! an omlet knowdb's `create` and `insert`) may do: build and fill the
//! knowdb's tables, in the knowdb's database, and nothing else.
//!
//! Read statement by statement before the file runs, so that a refusal
//! names the statement and why. On SQLite the connection itself refuses
//! the same things whatever the text looks like (an authorizer, and no
//! room to attach a database: `sqlite::confine`); this check is what says
//! which statement it was. Refused:
//! - `ATTACH` and `DETACH`: they open other database files (a SQLite
//!   knowdb could read or write any file the process may);
//! - `VACUUM` (and `VACUUM INTO 'file'`, which writes the database out);
//! - a `PRAGMA` outside [`PRAGMAS`], or on a schema other than `main` or
//!   `temp`;
//! - the functions in [`FUNCTIONS`] (`load_extension` loads native code);
//! - a virtual table of a module outside [`MODULES`].

/// The pragmas a knowdb's SQL may run: reading the schema it built, and
/// settings of its own connection and database file.
pub const PRAGMAS: &[&str] = &[
    "analysis_limit",
    "application_id",
    "automatic_index",
    "cache_size",
    "case_sensitive_like",
    "defer_foreign_keys",
    "encoding",
    "foreign_key_check",
    "foreign_key_list",
    "foreign_keys",
    "index_info",
    "index_list",
    "index_xinfo",
    "integrity_check",
    "journal_mode",
    "optimize",
    "quick_check",
    "recursive_triggers",
    "synchronous",
    "table_info",
    "table_list",
    "table_xinfo",
    "temp_store",
    "user_version",
];

/// Functions a knowdb's SQL may not call: SQLite's `load_extension`
/// (native code), `fts3_tokenizer` (a pointer), and the shell's file
/// functions, should a build ever carry them.
pub const FUNCTIONS: &[&str] = &["load_extension", "fts3_tokenizer", "readfile", "writefile", "edit", "fsdir"];

/// The virtual-table modules a knowdb may create tables of: full-text and
/// spatial indexes, which live in the database itself.
pub const MODULES: &[&str] = &["fts3", "fts4", "fts5", "rtree", "rtree_i32", "geopoly"];

/// Why a statement of a knowdb's SQL file is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptRefusal {
    /// The statement, as written (trimmed, at most 200 characters).
    pub statement: String,
    /// Why.
    pub why: String,
}

impl std::fmt::Display for ScriptRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the statement `{}` is refused: {}", self.statement, self.why)
    }
}

#[derive(Debug, PartialEq)]
enum T<'s> {
    Word(&'s str),
    Dot,
    Open,
    Semi,
    Other,
}

/// The tokens of `sql` with the byte offset of each: words (unquoted
/// identifiers and keywords), `.`, `(`, `;`, and everything else as
/// `Other`; literals, quoted identifiers and comments are skipped whole.
fn tokens(sql: &str) -> Vec<(usize, T<'_>)> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let skip_to = |from: usize, end: u8| {
        let mut j = from;
        while j < b.len() {
            if b[j] == end {
                // A doubled quote is one quote inside it.
                if end != b']' && b.get(j + 1) == Some(&end) {
                    j += 2;
                    continue;
                }
                return j + 1;
            }
            j += 1;
        }
        b.len()
    };
    while i < b.len() {
        let c = b[i];
        let start = i;
        match c {
            b'\'' | b'"' | b'`' => {
                i = skip_to(i + 1, c);
                out.push((start, T::Other));
            }
            b'[' => {
                i = skip_to(i + 1, b']');
                out.push((start, T::Other));
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'#' => {
                // MySQL's line comment; SQLite has no `#` outside a literal.
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i = sql[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
            }
            b'.' => {
                i += 1;
                out.push((start, T::Dot));
            }
            b'(' => {
                i += 1;
                out.push((start, T::Open));
            }
            b';' => {
                i += 1;
                out.push((start, T::Semi));
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c >= 0x80 => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$' || b[i] >= 0x80) {
                    i += 1;
                }
                out.push((start, T::Word(&sql[start..i])));
            }
            c if c.is_ascii_whitespace() => i += 1,
            _ => {
                i += 1;
                out.push((start, T::Other));
            }
        }
    }
    out
}

fn is(w: &str, k: &str) -> bool {
    w.eq_ignore_ascii_case(k)
}

/// Checks a knowdb SQL file: `Ok` when no statement does what the module's
/// documentation refuses, else the first that does and why.
pub fn check_script(sql: &str) -> Result<(), ScriptRefusal> {
    let toks = tokens(sql);
    let mut from = 0;
    while from < toks.len() {
        let end = toks[from..].iter().position(|(_, t)| *t == T::Semi).map_or(toks.len(), |e| from + e);
        if let Some(why) = refusal(&toks[from..end]) {
            let start = toks[from].0;
            let stop = toks.get(end).map_or(sql.len(), |(at, _)| *at);
            let text: String = sql[start..stop].split_whitespace().collect::<Vec<_>>().join(" ");
            let statement = match text.char_indices().nth(200) {
                Some((cut, _)) => format!("{}…", &text[..cut]),
                None => text,
            };
            return Err(ScriptRefusal { statement, why });
        }
        from = end + 1;
    }
    Ok(())
}

/// Why one statement (its tokens, without the `;`) is refused, if it is.
fn refusal(st: &[(usize, T<'_>)]) -> Option<String> {
    let word = |i: usize| match st.get(i) {
        Some((_, T::Word(w))) => Some(*w),
        _ => None,
    };
    let first = word(0)?;
    if is(first, "attach") || is(first, "detach") {
        return Some(format!(
            "{} opens a database file outside the knowdb's own database; a knowdb's SQL builds its tables there only",
            first.to_ascii_uppercase()
        ));
    }
    if is(first, "vacuum") {
        return Some("VACUUM (and VACUUM INTO, which writes the database to another file) is not run from a knowdb".into());
    }
    if is(first, "pragma") {
        let (schema, name) = match (word(1), st.get(2).map(|t| &t.1), word(3)) {
            (Some(s), Some(T::Dot), Some(n)) => (Some(s), n),
            (Some(n), ..) => (None, n),
            _ => return Some("a PRAGMA without a name".into()),
        };
        if let Some(s) = schema.filter(|s| !is(s, "main") && !is(s, "temp")) {
            return Some(format!("PRAGMA on the schema `{s}`: a knowdb's SQL reaches its own database (`main`) only"));
        }
        if !PRAGMAS.iter().any(|p| is(name, p)) {
            return Some(format!("PRAGMA {name} is not among those a knowdb may run ({})", PRAGMAS.join(", ")));
        }
    }
    for (i, (_, t)) in st.iter().enumerate() {
        if let T::Word(w) = t {
            if FUNCTIONS.iter().any(|f| is(w, f)) && matches!(st.get(i + 1), Some((_, T::Open))) {
                return Some(format!("the function `{w}` is not called from a knowdb (it reaches outside the database)"));
            }
            if is(w, "using")
                && i > 0
                && st[..i].iter().any(|(_, t)| matches!(t, T::Word(v) if is(v, "virtual")))
                && let Some(m) = word(i + 1)
                && !MODULES.iter().any(|k| is(m, k))
            {
                return Some(format!(
                    "a virtual table of the module `{m}`: a knowdb may create those of {} only",
                    MODULES.join(", ")
                ));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_builds_tables_passes() {
        for sql in [
            "create table t (a text, attach text, pragma int); insert into t values ('attach x', 1, 2);",
            "-- ATTACH 'x' AS y;\ncreate index t_a on t(a); /* vacuum into 'x' */ pragma foreign_keys = on;",
            "PRAGMA main.table_info(t); create virtual table f using fts5(body); select load_extension from t;",
            "create trigger tr after insert on t begin update t set a = 'detach'; end;",
            "insert into t select * from t where a = 'load_extension(1)';",
        ] {
            assert_eq!(check_script(sql), Ok(()), "{sql}");
        }
    }

    #[test]
    fn what_reaches_outside_is_refused_by_statement() {
        for (sql, statement, why) in [
            ("create table t (a);\n  ATTACH   '/tmp/x.db' AS x;", "ATTACH '/tmp/x.db' AS x", "outside the knowdb's own database"),
            ("detach x", "detach x", "DETACH opens"),
            ("vacuum into '/tmp/copy.db';", "vacuum into '/tmp/copy.db'", "VACUUM INTO"),
            ("pragma writable_schema = 1", "pragma writable_schema = 1", "PRAGMA writable_schema is not among"),
            ("PRAGMA temp_store_directory = '/tmp'", "PRAGMA temp_store_directory = '/tmp'", "not among"),
            ("pragma x.table_info(t)", "pragma x.table_info(t)", "the schema `x`"),
            ("select load_extension('/tmp/evil.so')", "select load_extension('/tmp/evil.so')", "`load_extension`"),
            ("insert into t values (LOAD_EXTENSION ('e'))", "insert into t values (LOAD_EXTENSION ('e'))", "`LOAD_EXTENSION`"),
            ("create virtual table v using zipfile('/etc')", "create virtual table v using zipfile('/etc')", "module `zipfile`"),
        ] {
            let e = check_script(sql).unwrap_err();
            assert_eq!(e.statement, statement, "{sql}");
            assert!(e.why.contains(why), "{sql}: {e}");
        }
    }
}
