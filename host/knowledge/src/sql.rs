//! Rewriting a rule's SQL for a provider: helper calls (qualified, or written
//! out inline), and `:name` parameters into the provider's placeholders.

use super::Placeholders;
use omlet_lang::ir::Helper;

use super::guard::{MAX_DEPTH, MAX_STATEMENT_BYTES};

/// The SQL helper functions of spec §8.11.4, by name ([`Helper::name`]).
pub const HELPER_FUNCTIONS: [&str; Helper::ALL.len()] = {
    let mut names = [""; Helper::ALL.len()];
    let mut i = 0;
    while i < names.len() {
        names[i] = Helper::ALL[i].name();
        i += 1;
    }
    names
};

/// Copies `sql`, passing quoted strings through untouched; everywhere else
/// `at(sql, i, out)` may write a replacement for what starts at byte `i` and
/// return where to go on, or `None` to copy the character as it is; an error
/// stops the copy.
pub(super) fn rewrite_outside_quotes<E>(
    sql: &str,
    mut at: impl FnMut(&str, usize, &mut String) -> Result<Option<usize>, E>,
) -> Result<String, E> {
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len() + 16);
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'\'' || c == b'"' {
            let end = sql[i + 1..].find(c as char).map(|e| i + 1 + e + 1).unwrap_or(b.len());
            out.push_str(&sql[i..end]);
            i = end;
        } else if let Some(next) = at(sql, i, &mut out)? {
            i = next;
        } else {
            let ch = sql[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    Ok(out)
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The IPv6 helpers that `database` (a provider's kind) cannot compute on
/// its own columns: the guest computes every helper on values, and SQLite
/// registers them all, but PostgreSQL has none of them and MySQL only
/// `ip_key`. A statement that still calls one (so on a column: `calls` is
/// the guard's [`Checked::calls`](super::guard::Checked::calls)) is refused
/// at load with this name, rather than failing in the database.
pub fn helper_missing_in(calls: &[String], database: &str) -> Option<&'static str> {
    let missing: &[&'static str] = match database {
        "postgres" => &["ip_key", "cidr_min_key", "cidr_max_key", "cidr_contains"],
        "mysql" => &["cidr_min_key", "cidr_max_key", "cidr_contains"],
        _ => return None,
    };
    calls.iter().find_map(|c| missing.iter().copied().find(|m| m == c))
}

/// The helper whose call starts at byte `i` of `sql` (its name in any case,
/// as the guard reads names, then `(`), by its own lower-case name.
fn helper_at(sql: &str, i: usize) -> Option<&'static str> {
    let b = sql.as_bytes();
    if i > 0 && (is_ident(b[i - 1]) || b[i - 1] == b'.') {
        return None;
    }
    HELPER_FUNCTIONS.iter().copied().find(|n| {
        sql.get(i..i + n.len()).is_some_and(|w| w.eq_ignore_ascii_case(n)) && sql[i + n.len()..].trim_start().starts_with('(')
    })
}

/// Rewrites every call of a helper function (outside quotes, its name in
/// any case) to `write(name, args)`, with the helper's lower-case name and
/// each argument's own calls rewritten first. A call whose parentheses do
/// not close is left as it is, for the database to reject with its own
/// message.
///
/// `write` may repeat an argument (MySQL's inline helpers do), so helper
/// calls nested in helper calls can grow the statement exponentially: the
/// rewrite stops with an error as soon as its text would pass
/// [`MAX_STATEMENT_BYTES`], or its calls nest deeper than [`MAX_DEPTH`],
/// before it holds more than a small multiple of that bound.
pub fn rewrite_helper_calls(sql: &str, write: &dyn Fn(&str, &[String]) -> String) -> Result<String, RewriteError> {
    rewrite_nested(sql, write, 0)
}

/// Why [`rewrite_helper_calls`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RewriteError {
    /// Written out, the statement would pass [`MAX_STATEMENT_BYTES`].
    #[error(
        "written out for the database, the lookup would be longer than {MAX_STATEMENT_BYTES} bytes \
         (a helper call may copy its arguments, so helper calls nested in helper calls multiply)"
    )]
    TooLong,
    /// Helper calls nest deeper than [`MAX_DEPTH`].
    #[error("helper calls nested more than {MAX_DEPTH} deep")]
    TooDeep,
}

fn rewrite_nested(sql: &str, write: &dyn Fn(&str, &[String]) -> String, depth: usize) -> Result<String, RewriteError> {
    if sql.len() > MAX_STATEMENT_BYTES {
        return Err(RewriteError::TooLong);
    }
    if depth > MAX_DEPTH {
        return Err(RewriteError::TooDeep);
    }
    rewrite_outside_quotes(sql, |sql, i, out| {
        let Some(name) = helper_at(sql, i) else { return Ok(None) };
        let rest = &sql[i + name.len()..];
        let open = i + name.len() + (rest.len() - rest.trim_start().len());
        let Some((args, end)) = call_arguments(sql, open + 1) else { return Ok(None) };
        let args = args.iter().map(|a| rewrite_nested(a, write, depth + 1)).collect::<Result<Vec<String>, RewriteError>>()?;
        out.push_str(&write(name, &args));
        if out.len() > MAX_STATEMENT_BYTES {
            return Err(RewriteError::TooLong);
        }
        Ok(Some(end))
    })
}

/// Splits the arguments of a call whose `(` ends just before `start`, at
/// top-level commas; returns them trimmed and the index after the `)`.
fn call_arguments(sql: &str, start: usize) -> Option<(Vec<&str>, usize)> {
    let b = sql.as_bytes();
    let (mut depth, mut from, mut i) = (0usize, start, start);
    let mut args = Vec::new();
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"') => i += sql[i + 1..].find(q as char)? + 1,
            b'(' => depth += 1,
            b')' if depth > 0 => depth -= 1,
            b')' => {
                let last = sql[from..i].trim();
                if !last.is_empty() || !args.is_empty() {
                    args.push(last);
                }
                return Some((args, i + 1));
            }
            b',' if depth == 0 => {
                args.push(sql[from..i].trim());
                from = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Prefixes calls of the helper functions with `schema.` (outside quotes),
/// their names in lower case; fails as [`rewrite_helper_calls`] does.
pub fn qualify_helpers(sql: &str, schema: &str) -> Result<String, RewriteError> {
    rewrite_helper_calls(sql, &|name, args| format!("{schema}.{name}({})", args.join(", ")))
}

/// Rewrites `:name` parameters to positional placeholders. Returns the new
/// SQL and, per placeholder, the index of the parameter in `params`. Quoted
/// strings are left alone.
pub fn rewrite_placeholders(sql: &str, params: &[String], style: Placeholders) -> (String, Vec<usize>) {
    let mut order = Vec::new();
    let out = rewrite_outside_quotes(sql, |sql, i, out| -> Result<_, std::convert::Infallible> {
        let b = sql.as_bytes();
        if b[i] != b':' || !b.get(i + 1).copied().is_some_and(is_ident) {
            return Ok(None);
        }
        let end = i + 1 + b[i + 1..].iter().take_while(|c| is_ident(**c)).count();
        match params.iter().position(|p| *p == sql[i + 1..end]) {
            Some(idx) => {
                order.push(idx);
                match style {
                    Placeholders::Question => out.push('?'),
                    Placeholders::Dollar => out.push_str(&format!("${}", order.len())),
                }
            }
            None => out.push_str(&sql[i..end]),
        }
        Ok(Some(end))
    });
    let Ok(out) = out;
    (out, order)
}

/// An `INSERT … VALUES (…)` statement with numbered parameters `?1..?N`
/// (Warp Parse's `insert.sql`) written for `rows` rows at once: the tuple
/// after `VALUES` repeated, row r's parameters renumbered from `r * N + 1`.
/// `None` when the statement is not of that plain form (a bare `?`, a
/// `SELECT` source, an `ON CONFLICT` tail, a second statement): it then
/// runs once per row.
pub fn values_for_rows(sql: &str, width: usize, rows: usize) -> Option<String> {
    let body = sql.trim_end().trim_end_matches(';').trim_end();
    let lower = body.to_ascii_lowercase();
    if !lower.trim_start().starts_with("insert") || body.contains('\'') || body.contains('"') || body.contains("--") {
        return None;
    }
    let at = lower.rfind("values")?;
    let tuple = body[at + "values".len()..].trim();
    // One balanced parenthesis, and nothing after it.
    let mut depth = 0usize;
    for (i, c) in tuple.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 && i + 1 != tuple.len() {
                    return None;
                }
            }
            ';' => return None,
            _ => {}
        }
    }
    if depth != 0 || !tuple.starts_with('(') {
        return None;
    }
    // Every `?` numbered, none past `width`.
    let b = tuple.as_bytes();
    let mut pieces: Vec<(usize, usize, usize)> = Vec::new(); // (start, end, number)
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'?' {
            let start = i;
            i += 1;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            let n: usize = tuple[start + 1..i].parse().ok()?;
            if n == 0 || n > width {
                return None;
            }
            pieces.push((start, i, n));
        } else {
            i += 1;
        }
    }
    let mut out = String::with_capacity(at + rows * (tuple.len() + 8));
    out.push_str(&body[..at + "values".len()]);
    for r in 0..rows {
        out.push_str(if r == 0 { " " } else { ", " });
        let mut last = 0;
        for &(start, end, n) in &pieces {
            out.push_str(&tuple[last..start]);
            out.push_str(&format!("?{}", r * width + n));
            last = end;
        }
        out.push_str(&tuple[last..]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_insert_is_written_for_many_rows_and_anything_else_is_not() {
        assert_eq!(
            values_for_rows("INSERT INTO t (lo, hi, zone)\nVALUES (ip4_int(?1), ip4_int(?2), trim_quotes(?3));\n", 3, 2)
                .as_deref(),
            Some(
                "INSERT INTO t (lo, hi, zone)\nVALUES (ip4_int(?1), ip4_int(?2), trim_quotes(?3)), (ip4_int(?4), ip4_int(?5), trim_quotes(?6))"
            )
        );
        assert_eq!(
            values_for_rows("insert into t values (?2, ?1)", 2, 2).as_deref(),
            Some("insert into t values (?2, ?1), (?4, ?3)")
        );
        for no in [
            "insert into t values (?, ?)",
            "insert into t values (?1, ?3)",
            "insert into t select ?1, ?2",
            "insert into t values (?1, ?2) on conflict do nothing",
            "insert into t values (?1, 'a;b')",
            "insert into t values (?1, ?2); delete from t",
            "update t set a = ?1",
        ] {
            assert_eq!(values_for_rows(no, 2, 2), None, "{no}");
        }
    }

    #[test]
    fn the_rewrite_is_bounded_in_size_and_depth() {
        let copy5 = |name: &str, args: &[String]| format!("{name}[{}]", vec![args.join(","); 5].join(","));
        let mut sql = "x".to_string();
        for _ in 0..12 {
            sql = format!("ip4_int({sql})");
        }
        let err = rewrite_helper_calls(&sql, &copy5).unwrap_err();
        assert_eq!(err, RewriteError::TooLong);
        assert!(err.to_string().contains("longer than 65536 bytes"), "{err}");
        let keep = |name: &str, args: &[String]| format!("{name}({})", args.join(","));
        let deep = format!("{}x{}", "trim_quotes(".repeat(100), ")".repeat(100));
        let err = rewrite_helper_calls(&deep, &keep).unwrap_err();
        assert_eq!(err, RewriteError::TooDeep);
        assert!(err.to_string().contains("nested more than 64 deep"));
        let long = format!("a = '{}'", "x".repeat(MAX_STATEMENT_BYTES));
        assert_eq!(rewrite_helper_calls(&long, &keep), Err(RewriteError::TooLong));
    }

    #[test]
    fn helper_names_are_read_in_any_case() {
        let keep = |name: &str, args: &[String]| format!("<{name}({})>", args.join(","));
        assert_eq!(
            rewrite_helper_calls(
                "IP4_INT(a) = Trim_Quotes (b) and xIP4_INT(c) = t.ip4_int(d) and 'IP4_INT(e)' = ip4_intx(f)",
                &keep
            )
            .unwrap(),
            "<ip4_int(a)> = <trim_quotes(b)> and xIP4_INT(c) = t.ip4_int(d) and 'IP4_INT(e)' = ip4_intx(f)"
        );
    }
}
