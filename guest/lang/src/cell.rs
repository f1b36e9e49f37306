//! SQL cells: the values that cross to and from the knowledge provider,
//! how a value becomes one, and the exact byte key of a parameter list that
//! the lookup caches (the guest's and the host's) use.

use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;

use crate::value::Value;

/// A SQL value crossing to or from the knowledge provider.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

/// Parameter mapping (spec §8.11.2).
pub fn cell_of(v: &Value<'_>) -> Cell {
    match v {
        Value::Digit(d) => Cell::Integer(*d),
        // Exactly: as an integer when it fits, else as its digits (the
        // database reads them against its numeric column; WIT has no wider
        // integer cell).
        Value::BigInt(s) => match s.parse::<i64>() {
            Ok(i) => Cell::Integer(i),
            Err(_) => Cell::Text(s.clone().into_owned()),
        },
        Value::Float(f) => Cell::Real(*f),
        Value::Bool(b) => Cell::Integer(*b as i64),
        Value::Null | Value::Ignore => Cell::Null,
        other => Cell::Text(other.raw_text().into_owned()),
    }
}

/// Appends an exact byte key for a parameter list, for lookup caches (the
/// guest's and the host's): each cell as [`push_cell`] writes it.
pub fn push_cells_key(params: &[Cell], out: &mut Vec<u8>) {
    for p in params {
        push_cell(out, p);
    }
}

/// Appends one cell as the core ABI carries it (docs/abi.md), which is also
/// its part of a cache key: a tag byte, then `0` null; `1` integer (i64);
/// `2` real (f64 bits); `3` text and `4` blob (u32 length, bytes), all
/// little-endian.
pub fn push_cell(out: &mut Vec<u8>, c: &Cell) {
    match c {
        Cell::Null => out.push(0),
        Cell::Integer(i) => {
            out.push(1);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Cell::Real(f) => {
            out.push(2);
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Cell::Text(s) => {
            out.push(3);
            out.extend_from_slice(&(s.len() as u32).to_le_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        Cell::Blob(b) => {
            out.push(4);
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
    }
}

/// Reads one cell as [`push_cell`] wrote it from the front of `b`, which it
/// advances; `None` when the bytes do not hold one (cut short, an unknown
/// tag, text that is not UTF-8).
pub fn read_cell(b: &mut &[u8]) -> Option<Cell> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = b.split_at_checked(n)?;
        *b = rest;
        Some(head)
    }
    let len = |b: &mut &[u8]| Some(u32::from_le_bytes(take(b, 4)?.try_into().ok()?) as usize);
    Some(match take(b, 1)?[0] {
        0 => Cell::Null,
        1 => Cell::Integer(i64::from_le_bytes(take(b, 8)?.try_into().ok()?)),
        2 => Cell::Real(f64::from_bits(u64::from_le_bytes(take(b, 8)?.try_into().ok()?))),
        3 => {
            let n = len(b)?;
            Cell::Text(String::from(core::str::from_utf8(take(b, n)?).ok()?))
        }
        4 => {
            let n = len(b)?;
            Cell::Blob(take(b, n)?.to_vec())
        }
        _ => return None,
    })
}

/// Column mapping (spec §8.11.3).
pub fn value_of_cell(c: Cell) -> Value<'static> {
    match c {
        Cell::Null => Value::Null,
        Cell::Integer(i) => Value::Digit(i),
        Cell::Real(f) => Value::Float(f),
        Cell::Text(s) => Value::Chars(Cow::Owned(s)),
        Cell::Blob(b) => Value::Chars(Cow::Owned(String::from_utf8_lossy(&b).into_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn key(params: &[Cell]) -> Vec<u8> {
        let mut k = Vec::new();
        push_cells_key(params, &mut k);
        k
    }

    #[test]
    fn keys_tell_kinds_and_boundaries_apart() {
        // The same bytes under different kinds, or split differently, are different keys.
        let keys = [
            key(&[Cell::Integer(1)]),
            key(&[Cell::Real(1.0)]),
            key(&[Cell::Text("1".into())]),
            key(&[Cell::Blob(b"1".to_vec())]),
            key(&[Cell::Null]),
            key(&[Cell::Text("ab".into()), Cell::Text("c".into())]),
            key(&[Cell::Text("a".into()), Cell::Text("bc".into())]),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(key(&[Cell::Integer(7), Cell::Null]), key(&[Cell::Integer(7), Cell::Null]));
    }

    #[test]
    fn values_map_to_cells_as_the_spec_says() {
        assert_eq!(cell_of(&Value::Digit(3)), Cell::Integer(3));
        assert_eq!(cell_of(&Value::Bool(true)), Cell::Integer(1));
        assert_eq!(cell_of(&Value::Null), Cell::Null);
        assert_eq!(cell_of(&Value::Chars("x".into())), Cell::Text("x".into()));
        assert_eq!(value_of_cell(Cell::Blob(vec![b'h', b'i'])), Value::Chars("hi".into()));
    }
}
