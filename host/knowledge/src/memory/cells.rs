//! Cells as SQLite compares them: column affinity, the number a text reads as,
//! equality and hashing that agree with it.

use omlet_lang::Cell;
use std::hash::{Hash, Hasher};

/// SQLite's column affinity (its manual, "Determination Of Column Affinity").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Affinity {
    /// Declared with `INT` in the type.
    Integer,
    /// `CHAR`, `CLOB` or `TEXT`.
    Text,
    /// `BLOB`, or no type: values are compared as they are.
    Blob,
    /// `REAL`, `FLOA` or `DOUB`.
    Real,
    /// Anything else.
    Numeric,
}

impl Affinity {
    /// The affinity of a declared type, by SQLite's rules in their order.
    pub fn of(declared: &str) -> Affinity {
        let t = declared.to_ascii_uppercase();
        if t.contains("INT") {
            Affinity::Integer
        } else if t.contains("CHAR") || t.contains("CLOB") || t.contains("TEXT") {
            Affinity::Text
        } else if t.contains("BLOB") || t.trim().is_empty() {
            Affinity::Blob
        } else if t.contains("REAL") || t.contains("FLOA") || t.contains("DOUB") {
            Affinity::Real
        } else {
            Affinity::Numeric
        }
    }

    pub(super) fn numeric(self) -> bool {
        matches!(self, Affinity::Integer | Affinity::Real | Affinity::Numeric)
    }
}

/// A parameter as SQLite compares it with a column of some affinity.
pub(super) enum Probe {
    /// The value, converted as SQLite converts it.
    Value(Cell),
    /// NULL: it matches no row.
    Null,
    /// A conversion this module does not reproduce (a real or a blob
    /// against a text column): SQL answers.
    Unsure,
}

/// How SQLite converts a parameter (which has no affinity) before comparing
/// it with a column of affinity `a`.
pub(super) fn probe(c: &Cell, a: Affinity) -> Probe {
    match (c, a) {
        (Cell::Null, _) => Probe::Null,
        (c, Affinity::Blob) => Probe::Value(c.clone()),
        (Cell::Text(s), a) if a.numeric() => Probe::Value(sqlite_number(s).unwrap_or_else(|| c.clone())),
        // Numeric affinity leaves numbers and blobs as they are.
        (Cell::Integer(_) | Cell::Real(_) | Cell::Blob(_), a) if a.numeric() => Probe::Value(c.clone()),
        (Cell::Text(_), Affinity::Text) => Probe::Value(c.clone()),
        (Cell::Integer(i), Affinity::Text) => Probe::Value(Cell::Text(i.to_string())),
        _ => Probe::Unsure,
    }
}

/// Text that SQLite's numeric affinity turns into a number: a well-formed
/// integer or real literal, spaces around it allowed; an integer past
/// 64 bits becomes a real.
pub(super) fn sqlite_number(s: &str) -> Option<Cell> {
    let t = s.trim_matches(|c: char| c.is_ascii_whitespace());
    let b = t.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i - start
    };
    let mut n = digits(&mut i);
    let mut integer = true;
    if b.get(i) == Some(&b'.') {
        i += 1;
        n += digits(&mut i);
        integer = false;
    }
    if n == 0 {
        return None;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return None;
        }
        integer = false;
    }
    if i != b.len() {
        return None;
    }
    if integer && let Ok(v) = t.parse::<i64>() {
        return Some(Cell::Integer(v));
    }
    t.parse::<f64>().ok().filter(|f| f.is_finite()).map(Cell::Real)
}

/// A real that equals an integer, as that integer.
pub(super) fn real_int(f: f64) -> Option<i64> {
    // 2^63 is exact in f64; every integral f64 in [-2^63, 2^63) is an i64.
    (f.fract() == 0.0 && (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&f)).then_some(f as i64)
}

/// Equality as SQLite's `=` decides it between values of storage classes
/// (integers and reals compare as numbers; text and blobs bytewise, with
/// the default BINARY collation).
pub(super) fn same(a: &Cell, b: &Cell) -> bool {
    match (a, b) {
        (Cell::Integer(x), Cell::Integer(y)) => x == y,
        (Cell::Integer(i), Cell::Real(f)) | (Cell::Real(f), Cell::Integer(i)) => real_int(*f) == Some(*i),
        (Cell::Real(x), Cell::Real(y)) => x == y,
        (Cell::Text(x), Cell::Text(y)) => x == y,
        (Cell::Blob(x), Cell::Blob(y)) => x == y,
        _ => false,
    }
}

/// A hash that agrees with [`same`].
pub(super) fn hash_cell(c: &Cell, h: &mut impl Hasher) {
    match c {
        Cell::Integer(i) => (0u8, *i).hash(h),
        Cell::Real(f) => match real_int(*f) {
            Some(i) => (0u8, i).hash(h),
            None => (1u8, f.to_bits()).hash(h),
        },
        Cell::Text(t) => (2u8, t.as_bytes()).hash(h),
        Cell::Blob(b) => (3u8, b.as_slice()).hash(h),
        Cell::Null => 4u8.hash(h),
    }
}
