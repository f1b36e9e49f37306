//! FNV-1a, the hash of omlet's small tables: field names and lookup keys are
//! short, and FNV costs one multiply per byte with no setup. Its seed is
//! fixed, so a hostile input can aim for collisions; the tables it serves are
//! bounded (the guest's lookup cache holds at most 4096 keys), which bounds
//! what such collisions can cost.

use core::hash::{BuildHasher, Hasher};

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0100_0000_01b3;

/// FNV-1a over the bytes written.
#[derive(Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(OFFSET)
    }
}

impl Hasher for Fnv {
    /// The FNV state, mixed (the finaliser of MurmurHash3's 64-bit hash):
    /// FNV's last bytes reach only its low bits, and on 32-bit targets a hash
    /// table uses the low 32 bits alone, so keys that differ in their last
    /// byte would crowd together.
    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        for &b in bytes {
            h = (h ^ b as u64).wrapping_mul(PRIME);
        }
        self.0 = h;
    }
}

/// Builds [`Fnv`] hashers (a unit value, so a table can be a `const` or a static).
#[derive(Clone, Copy, Default)]
pub struct FnvBuild;

impl BuildHasher for FnvBuild {
    type Hasher = Fnv;

    fn build_hasher(&self) -> Fnv {
        Fnv::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The FNV-1a state after `bytes`, before `finish` mixes it.
    fn hash(bytes: &[u8]) -> u64 {
        let mut h = Fnv::default();
        h.write(bytes);
        h.0
    }

    #[test]
    fn known_values() {
        // The published FNV-1a 64-bit test vectors.
        assert_eq!(hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(hash(b"foobar"), 0x8594_4171_f739_67e8);
        // Written in pieces or whole: the same state.
        let mut h = FnvBuild.build_hasher();
        h.write(b"foo");
        h.write(b"bar");
        assert_eq!(h.0, hash(b"foobar"));
    }

    #[test]
    fn keys_that_differ_in_their_last_byte_get_different_tags() {
        // hashbrown on wasm32 takes a bucket from the low bits and a tag from
        // bits 25-31 of the hash's low 32 bits: 256 keys differing only in
        // their last byte must not share those bits.
        let tags: alloc::collections::BTreeSet<u64> = (0..=255u8)
            .map(|b| {
                let mut h = FnvBuild.build_hasher();
                h.write(b"statement 7, 10.0.0.");
                h.write(&[b]);
                (h.finish() >> 25) & 0x7f
            })
            .collect();
        assert!(tags.len() > 100, "{} distinct tags", tags.len());
    }
}
