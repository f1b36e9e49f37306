//! Rewriting a rule's SQL for a provider: helper calls (qualified, or written
//! out inline), and `:name` parameters into the provider's placeholders.

use super::Placeholders;

/// The SQL helper functions of spec §8.11.4.
pub const HELPER_FUNCTIONS: &[&str] =
    &["ip4_int", "ip4_between", "cidr4_min", "cidr4_max", "cidr4_contains", "ip4_text", "trim_quotes"];

/// Copies `sql`, passing quoted strings through untouched; everywhere else
/// `at(sql, i, out)` may write a replacement for what starts at byte `i` and
/// return where to go on, or `None` to copy the character as it is.
fn rewrite_outside_quotes(sql: &str, mut at: impl FnMut(&str, usize, &mut String) -> Option<usize>) -> String {
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len() + 16);
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'\'' || c == b'"' {
            let end = sql[i + 1..].find(c as char).map(|e| i + 1 + e + 1).unwrap_or(b.len());
            out.push_str(&sql[i..end]);
            i = end;
        } else if let Some(next) = at(sql, i, &mut out) {
            i = next;
        } else {
            let ch = sql[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Rewrites every call of a helper function (outside quotes) to
/// `write(name, args)`, where each argument has had its own calls rewritten
/// first. A call whose parentheses do not close is left as it is, for the
/// database to reject with its own message.
pub fn rewrite_helper_calls(sql: &str, write: &dyn Fn(&str, &[String]) -> String) -> String {
    rewrite_outside_quotes(sql, |sql, i, out| {
        let b = sql.as_bytes();
        if i > 0 && (is_ident(b[i - 1]) || b[i - 1] == b'.') {
            return None;
        }
        let name =
            HELPER_FUNCTIONS.iter().find(|n| sql[i..].starts_with(**n) && sql[i + n.len()..].trim_start().starts_with('('))?;
        let open = i + name.len() + (sql[i + name.len()..].len() - sql[i + name.len()..].trim_start().len());
        let (args, end) = call_arguments(sql, open + 1)?;
        let args: Vec<String> = args.iter().map(|a| rewrite_helper_calls(a, write)).collect();
        out.push_str(&write(name, &args));
        Some(end)
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

/// Prefixes calls of the helper functions with `schema.` (outside quotes).
pub fn qualify_helpers(sql: &str, schema: &str) -> String {
    rewrite_helper_calls(sql, &|name, args| format!("{schema}.{name}({})", args.join(", ")))
}

/// Rewrites `:name` parameters to positional placeholders. Returns the new
/// SQL and, per placeholder, the index of the parameter in `params`. Quoted
/// strings are left alone.
pub fn rewrite_placeholders(sql: &str, params: &[String], style: Placeholders) -> (String, Vec<usize>) {
    let mut order = Vec::new();
    let out = rewrite_outside_quotes(sql, |sql, i, out| {
        let b = sql.as_bytes();
        if b[i] != b':' || !b.get(i + 1).copied().is_some_and(is_ident) {
            return None;
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
        Some(end)
    });
    (out, order)
}
