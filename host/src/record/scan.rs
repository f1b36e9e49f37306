//! How many leading bytes of a text need no JSON escape, sixteen at a time.
//!
//! Why: every JSON line read is scanned for the end of each of its strings
//! (`json::flat`), and every output frame's text once, to know whether its
//! strings can be written without escapes (`frame::plain_text`). The
//! language's own scan ([`omlet_lang::pipes::clean_prefix`], which the guest
//! shares and which may not use `unsafe` or the CPU's vector unit) takes
//! eight bytes a step in general-purpose registers: about 3 % of the host's
//! and guest's work on a nginx record went there.
//!
//! What it replaces: that scan, on x86-64 only, for all but the last
//! fifteen bytes of a text, which it still scans. SSE2 is part of every
//! x86-64 CPU, so there is no run-time check; elsewhere the language's scan
//! runs alone.
//!
//! What it costs: a second implementation of one small function, held to
//! the first by a test over every byte value at every position.

/// The length of the longest prefix of `b` with no `"`, `\` or byte below
/// 0x20 (the bytes that end a JSON string's plain run): what
/// [`omlet_lang::pipes::clean_prefix`] gives.
#[cfg(target_arch = "x86_64")]
pub fn clean_prefix(b: &[u8]) -> usize {
    // SAFETY: SSE2 is part of the x86-64 baseline, so every CPU this code
    // runs on has the feature that `sse2_clean_prefix` enables.
    unsafe { sse2_clean_prefix(b) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn sse2_clean_prefix(b: &[u8]) -> usize {
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set_epi64x, _mm_set1_epi8};
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[at..at + 8]);
        i64::from_le_bytes(w)
    };
    let (quote, backslash, control) = (_mm_set1_epi8(b'"' as i8), _mm_set1_epi8(b'\\' as i8), _mm_set1_epi8(0x1f));
    let mut i = 0;
    while i + 16 <= b.len() {
        let v = _mm_set_epi64x(word(i + 8), word(i));
        // A byte is flagged when it is `"`, `\`, or at most 0x1f (unsigned).
        let hit = _mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
            _mm_cmpeq_epi8(_mm_min_epu8(v, control), v),
        );
        let mask = _mm_movemask_epi8(hit) as u32;
        if mask != 0 {
            return i + mask.trailing_zeros() as usize;
        }
        i += 16;
    }
    i + omlet_lang::pipes::clean_prefix(&b[i..])
}

/// See the x86-64 version.
#[cfg(not(target_arch = "x86_64"))]
pub fn clean_prefix(b: &[u8]) -> usize {
    omlet_lang::pipes::clean_prefix(b)
}

/// `b` as text, or std's error (which says where it stops being UTF-8).
///
/// Checked by simdutf8 (AVX2 or SSE4.2, chosen at run time), 64 bytes a
/// turn; std's check reads 16 a turn on ASCII. Text simdutf8 refuses goes
/// to std, which decides. The input lines' reader and the guest's JSON
/// lines use it.
pub fn utf8(b: &[u8]) -> Result<&str, std::str::Utf8Error> {
    simdutf8::basic::from_utf8(b).or_else(|_| std::str::from_utf8(b))
}

#[cfg(test)]
mod tests {
    use super::clean_prefix;

    /// Every byte value, at every place of texts of every length up to 40
    /// (so in the vector steps and in the tail), ends the prefix where the
    /// language's scan says.
    #[test]
    fn agrees_with_the_languages_scan() {
        for len in 0..40 {
            for at in 0..len {
                for byte in 0..=255u8 {
                    let mut text = vec![b'a'; len];
                    text[at] = byte;
                    assert_eq!(clean_prefix(&text), omlet_lang::pipes::clean_prefix(&text), "{len} bytes, {byte:#x} at {at}");
                }
            }
            let plain = vec![b'z'; len];
            assert_eq!(clean_prefix(&plain), len);
        }
    }
}
