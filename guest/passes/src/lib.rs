//! Rewrites of a built guest module, below what the compilers do:
//! [`copies::lower_short_copies`], which `scripts/build-guest.sh` runs on
//! the committed guests, and the section helpers that the host's own
//! rewrites (the IR splice, the yield points of `omlet build --target
//! core`) share with it.
//!
//! It is a crate of its own so that the guest's build runs it without
//! building the host and its engine, and it lives under guest/ so that a
//! change to it makes the committed guests stale (their source stamp
//! covers guest/).

use wasm_encoder::{Module, RawSection, SectionId};
use wasmparser::{FromReader, FunctionBody, Operator, SectionLimited};

pub mod copies;

/// A module this crate cannot rewrite: a parse error, or a shape it does
/// not handle.
#[derive(Debug)]
pub struct PassError(pub String);

impl std::fmt::Display for PassError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PassError {}

impl From<wasmparser::BinaryReaderError> for PassError {
    fn from(e: wasmparser::BinaryReaderError) -> Self {
        PassError(e.to_string())
    }
}

/// Writes to `out` the section `id` that `reader` read from `core` with one
/// entry more: its entries as they were, then `entry` (its bytes).
pub fn push_with_entry<'a, T: FromReader<'a>>(
    out: &mut Module,
    core: &'a [u8],
    id: SectionId,
    reader: &SectionLimited<'a, T>,
    entry: &[u8],
) -> Result<(), PassError> {
    let end = reader.range().end;
    let start = match reader.clone().into_iter_with_offsets().next() {
        Some(first) => first?.0,
        None => end,
    };
    let mut data = Vec::with_capacity(end - start + entry.len() + 5);
    leb128(&mut data, reader.count() + 1);
    data.extend_from_slice(&core[start..end]);
    data.extend_from_slice(entry);
    out.section(&RawSection { id: id as u8, data: &data });
    Ok(())
}

/// What [`edit_body`] does at an operator.
pub enum Edit<'b> {
    /// Puts these bytes (whole instructions) after it.
    After(&'b [u8]),
    /// Puts these bytes in its place.
    Replace(&'b [u8]),
}

/// The bytes of a function body of `core` (without its length), with each
/// operator that `edit` answers for edited so.
pub fn edit_body<'b>(
    core: &[u8],
    body: &FunctionBody<'_>,
    mut edit: impl FnMut(&Operator<'_>) -> Option<Edit<'b>>,
) -> Result<Vec<u8>, PassError> {
    let range = body.range();
    let mut ops = body.get_operators_reader()?;
    let mut bytes = Vec::with_capacity(range.len() + 16);
    let mut from = range.start;
    while !ops.eof() {
        let at = ops.original_position();
        let op = ops.read()?;
        match edit(&op) {
            Some(Edit::After(insert)) => {
                let after = ops.original_position();
                bytes.extend_from_slice(&core[from..after]);
                bytes.extend_from_slice(insert);
                from = after;
            }
            Some(Edit::Replace(with)) => {
                bytes.extend_from_slice(&core[from..at]);
                bytes.extend_from_slice(with);
                from = ops.original_position();
            }
            None => {}
        }
    }
    bytes.extend_from_slice(&core[from..range.end]);
    Ok(bytes)
}

/// Appends `v` as an unsigned LEB128.
pub fn leb128(out: &mut Vec<u8>, mut v: u32) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}
