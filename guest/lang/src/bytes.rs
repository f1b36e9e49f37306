//! Byte searches eight bytes at a time.
//!
//! Why: in wasm every turn of a loop also pays the call deadline's check (a
//! load and a compare), so a scan a byte a turn costs about twenty
//! instructions a byte. The pipes that cut texts (`path`, `url`) scanned
//! every byte of a request path or a referer several times, which made
//! `url(host)` and `path(name)` among the costliest steps of the nginx rule.
//! A word of eight bytes is tested for a byte with a few arithmetic
//! operations (exactly: no borrow from one byte flags the next), so a scan
//! costs a few instructions a byte.
//!
//! What it replaces: `iter().position`, `rposition` and `any` over bytes
//! in those pipes; `contains(…)` match arms share [`eq_mask`]. What it
//! costs: the last word of a text is put together from loads that may
//! overlap, and its bytes past the end masked off.

const ONES: u64 = u64::from_ne_bytes([1; 8]);
const LOW7: u64 = ONES * 0x7f;
const HIGHS: u64 = ONES * 0x80;

/// The high bit of each byte of `x` that equals `b`, and no other bit.
#[inline(always)]
pub(crate) fn eq_mask(x: u64, b: u8) -> u64 {
    let y = x ^ (ONES * u64::from(b));
    // A byte's low seven bits plus 0x7f carry into its high bit unless they
    // are all zero; with the byte's own high bit, only a zero byte is left.
    !(((y & LOW7).wrapping_add(LOW7)) | y | LOW7)
}

/// The high bit of each byte of `x` in `A`..=`Z`.
#[inline(always)]
fn upper_mask(x: u64) -> u64 {
    // For a byte below 0x80: `+ (0x80 - 'A')` sets its high bit from 'A'
    // up, `+ (0x80 - 'Z' - 1)` from past 'Z' up; neither carries out of the
    // byte. Bytes from 0x80 are excluded by `!x`.
    let low = x & LOW7;
    let from_a = low.wrapping_add(ONES * u64::from(0x80 - b'A'));
    let past_z = low.wrapping_add(ONES * u64::from(0x80 - b'Z' - 1));
    (from_a & !past_z) & !x & HIGHS
}

/// The word at `i` of `s` (bytes past the end read as zero), and the high
/// bit of each byte of it that is in `s`.
#[inline(always)]
fn word_at(s: &[u8], i: usize) -> (u64, u64) {
    use crate::value::word;
    let n = s.len() - i;
    if n >= 8 {
        return (u64::from_le_bytes(word(s, i)), HIGHS);
    }
    // The last 1..=7 bytes, without a copy of run-time length (in wasm, a
    // call out of the guest): the last eight bytes shifted, or for a text
    // shorter than a word, two overlapping halves or its first, middle and
    // last bytes.
    let w = if s.len() >= 8 {
        u64::from_le_bytes(word(s, s.len() - 8)) >> (8 * (8 - n))
    } else if n >= 4 {
        let lo = u64::from(u32::from_le_bytes(word(s, i)));
        let hi = u64::from(u32::from_le_bytes(word(s, s.len() - 4)));
        lo | hi << (8 * (n - 4))
    } else {
        u64::from(s[i]) | u64::from(s[i + n / 2]) << (8 * (n / 2)) | u64::from(s[s.len() - 1]) << (8 * (n - 1))
    };
    (w, HIGHS >> (8 * (8 - n)))
}

/// Where the first byte of `s` that `test` flags is.
#[inline(always)]
fn first(s: &[u8], test: impl Fn(u64) -> u64) -> Option<usize> {
    let mut i = 0;
    while i < s.len() {
        let (w, valid) = word_at(s, i);
        let hit = test(w) & valid;
        if hit != 0 {
            return Some(i + (hit.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    None
}

/// Where the last byte of `s` that `test` flags is.
#[inline(always)]
fn last(s: &[u8], test: impl Fn(u64) -> u64) -> Option<usize> {
    let mut found = None;
    let mut i = 0;
    while i < s.len() {
        let (w, valid) = word_at(s, i);
        let hit = test(w) & valid;
        if hit != 0 {
            found = Some(i + (7 - hit.leading_zeros() / 8) as usize);
        }
        i += 8;
    }
    found
}

/// Where `b` first is in `s`.
#[inline]
pub fn find(s: &[u8], b: u8) -> Option<usize> {
    first(s, |w| eq_mask(w, b))
}

/// Where any of `a`, `b` and `c` first is in `s`.
#[inline]
pub fn find3(s: &[u8], a: u8, b: u8, c: u8) -> Option<usize> {
    first(s, |w| eq_mask(w, a) | eq_mask(w, b) | eq_mask(w, c))
}

/// Where `b` last is in `s`.
#[inline]
pub fn rfind(s: &[u8], b: u8) -> Option<usize> {
    last(s, |w| eq_mask(w, b))
}

/// Whether `s` holds an ASCII capital letter.
#[inline]
pub fn has_upper(s: &[u8]) -> bool {
    first(s, upper_mask).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    /// Texts of every length to 40 with the bytes of interest at every place,
    /// among neighbours one above and below them and bytes past 0x7f.
    fn texts() -> Vec<Vec<u8>> {
        let fill = [b'.', b'0', b'\\', b'/' + 1, b'/' - 1, b'@' + 1, b'Z' + 1, b'A' - 1, 0x80, 0xff, 0x2f ^ 0x80, 0, b'a', b'z'];
        let marks = [b'/', b'?', b'#', b'@', b':', b'\\', b'A', b'M', b'Z'];
        let mut out = Vec::new();
        for len in 0..40 {
            for (k, &f) in fill.iter().enumerate() {
                let base: Vec<u8> = (0..len).map(|i| if (i + k) % 3 == 0 { f } else { b'a' + (i % 26) as u8 }).collect();
                out.push(base.clone());
                for at in 0..len {
                    for &m in &marks {
                        let mut t = base.clone();
                        t[at] = m;
                        out.push(t.clone());
                        // A second one further on, for the last-place search.
                        if at + 3 < len {
                            t[at + 3] = m;
                            out.push(t);
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn searches_agree_with_a_byte_by_byte_scan() {
        for t in texts() {
            for b in [b'/', b'?', b'#', b'@', b':', b'\\', 0, 0x80, 0xff] {
                assert_eq!(find(&t, b), t.iter().position(|&c| c == b), "{t:?} {b}");
                assert_eq!(rfind(&t, b), t.iter().rposition(|&c| c == b), "{t:?} {b}");
            }
            assert_eq!(find3(&t, b'/', b'?', b'#'), t.iter().position(|c| matches!(c, b'/' | b'?' | b'#')), "{t:?}");
            assert_eq!(has_upper(&t), t.iter().any(u8::is_ascii_uppercase), "{t:?}");
        }
        // Every byte value, alone and in a word of others.
        for b in 0..=255u8 {
            let mut t = [b'x'; 11];
            t[9] = b;
            assert_eq!(has_upper(&t), b.is_ascii_uppercase(), "{b}");
            assert_eq!(find(&t, b), t.iter().position(|&c| c == b), "{b}");
        }
    }
}
