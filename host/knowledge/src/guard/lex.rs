//! The guard's tokens: SQL text split into words, numbers, text literals,
//! parameters, operators and punctuation; a character with no place in a
//! lookup is refused here.

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok<'s> {
    Word(&'s str),
    /// A parameter, by its name (without the `:`).
    Param(&'s str),
    Text,
    /// A number, as written.
    Number(&'s str),
    /// A comparison: `=`, `!=`, `<>`, `<`, `<=`, `>` or `>=`.
    Op(&'s str),
    Open,
    Close,
    Comma,
    Star,
    /// `||`, in a `like` pattern.
    Concat,
}

pub(super) fn tokens(sql: &str) -> Result<Vec<Tok<'_>>, String> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        match c {
            b' ' | b'\t' | b'\n' | b'\r' => {
                i += 1;
                continue;
            }
            b'\'' => {
                i += 1;
                loop {
                    match b.get(i) {
                        None => return Err("an unterminated text literal".into()),
                        Some(b'\'') if b.get(i + 1) == Some(&b'\'') => i += 2,
                        Some(b'\'') => {
                            i += 1;
                            break;
                        }
                        Some(_) => i += 1,
                    }
                }
                out.push(Tok::Text);
            }
            b':' => {
                i += 1;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                if i == start + 1 {
                    return Err("a `:` without a parameter name".into());
                }
                out.push(Tok::Param(&sql[start + 1..i]));
            }
            b'0'..=b'9' | b'-' | b'.' => {
                i += 1;
                while i < b.len()
                    && (b[i].is_ascii_digit()
                        || b[i] == b'.'
                        || ((b[i] == b'e' || b[i] == b'E') && i > start)
                        || (matches!(b[i], b'+' | b'-') && matches!(b[i - 1], b'e' | b'E')))
                {
                    i += 1;
                }
                if !sql[start..i].bytes().any(|d| d.is_ascii_digit()) {
                    return Err(format!("`{}` is not a number", &sql[start..i]));
                }
                out.push(Tok::Number(&sql[start..i]));
            }
            b'=' | b'(' | b')' | b',' | b'*' => {
                i += 1;
                out.push(match c {
                    b'(' => Tok::Open,
                    b')' => Tok::Close,
                    b',' => Tok::Comma,
                    b'*' => Tok::Star,
                    _ => Tok::Op("="),
                });
            }
            b'|' if b.get(i + 1) == Some(&b'|') => {
                i += 2;
                out.push(Tok::Concat);
            }
            b'!' | b'<' | b'>' => {
                i += 1;
                if matches!(b.get(i), Some(b'=')) || (c == b'<' && b.get(i) == Some(&b'>')) {
                    i += 1;
                } else if c == b'!' {
                    return Err("`!` alone".into());
                }
                out.push(Tok::Op(&sql[start..i]));
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                    i += 1;
                }
                out.push(Tok::Word(&sql[start..i]));
            }
            _ => {
                let ch = sql[start..].chars().next().unwrap_or('?');
                return Err(format!("the character `{ch}` has no place in a lookup"));
            }
        }
    }
    Ok(out)
}
