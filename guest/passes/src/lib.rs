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

/// A section's contents with one more entry: its count, its entries as
/// they were, and `entry`.
pub fn appended(count: u32, entries: &[u8], entry: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(entries.len() + entry.len() + 5);
    leb128(&mut v, count + 1);
    v.extend_from_slice(entries);
    v.extend_from_slice(entry);
    v
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
