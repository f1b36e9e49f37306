//! Which model of a rule set evaluates a record (spec §3.1).
//!
//! A model claims rule paths with its `rule :` patterns: `*` matches any
//! sequence (`/` included), `?` one character, everything else itself.
//! Disabled models claim nothing. The build rejects two enabled models whose
//! patterns can match one path ([`overlap`]), so a path has at most one
//! model and the order of models never decides.

use alloc::string::String;
use alloc::vec::Vec;

use crate::ir::Program;

/// How a caller names the model for a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'a> {
    /// The set's only model, enabled or not; an error when there are several.
    Only,
    /// The record's rule path, matched against the enabled models' patterns.
    Path(&'a str),
    /// A model by its `name`, enabled or not.
    Model(&'a str),
}

/// Why a route names no model. A record that no model claims is an error of
/// its own kind, so that a host can tell it from a failed evaluation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteError {
    /// No enabled model's pattern matches the path.
    Unclaimed(String),
    /// No model has that name.
    UnknownModel(String),
    /// [`Route::Only`] on a set of several models (or none).
    Ambiguous(usize),
}

impl core::fmt::Display for RouteError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RouteError::Unclaimed(p) => write!(f, "no enabled model claims rule path `{p}`"),
            RouteError::UnknownModel(m) => write!(f, "no model is named `{m}`"),
            RouteError::Ambiguous(n) => {
                write!(f, "this rule set has {n} models: name one, or pass the record's rule path")
            }
        }
    }
}

impl Program {
    /// The index of the model that `route` names.
    pub fn route(&self, route: Route<'_>) -> Result<usize, RouteError> {
        match route {
            Route::Only if self.models.len() == 1 => Ok(0),
            Route::Only => Err(RouteError::Ambiguous(self.models.len())),
            Route::Model(name) => {
                self.models.iter().position(|m| m.name == name).ok_or_else(|| RouteError::UnknownModel(name.into()))
            }
            Route::Path(path) => self
                .models
                .iter()
                .position(|m| m.enabled && m.patterns.iter().any(|p| matches(p, path)))
                .ok_or_else(|| RouteError::Unclaimed(path.into())),
        }
    }
}

/// Whether a rule pattern matches a rule path.
pub fn matches(pattern: &str, path: &str) -> bool {
    if path.is_ascii() {
        glob(pattern.as_bytes(), path.as_bytes(), |b| b)
    } else {
        let chars: Vec<char> = path.chars().collect();
        glob(pattern.as_bytes(), &chars, |b| b as char)
    }
}

/// Wildcard matching with one backtrack point (the last `*`), linear in
/// practice: a later `*` makes earlier choices final.
fn glob<T: Copy + PartialEq>(pat: &[u8], text: &[T], lift: impl Fn(u8) -> T) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pat.len() && pat[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pat.len() && (pat[p] == b'?' || lift(pat[p]) == text[t]) {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pat[p..].iter().all(|&c| c == b'*')
}

/// A rule path that both patterns match, if there is one.
///
/// O(|a|·|b|) time and bits of memory, without recursion: at the build's
/// pattern limit ([`crate::Limits::max_pattern_bytes`], 1024 bytes) about a
/// million steps and 128 KiB, whatever the wildcards. The build checks every
/// pair of patterns of two enabled models, within a budget for the whole set
/// of `(|a|+1)·(|b|+1)` per pair ([`crate::Limits::max_overlap_work`]).
pub fn overlap(a: &str, b: &str) -> Option<String> {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let meet = Meet::new(a, b);
    if !meet.get(0, 0) {
        return None;
    }
    // Walk the successful choices, writing the path they spell.
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        let (ca, cb) = (a.get(i).copied(), b.get(j).copied());
        if ca == Some(b'*') && meet.get(i + 1, j) {
            i += 1;
        } else if cb == Some(b'*') && meet.get(i, j + 1) {
            j += 1;
        } else if ca == Some(b'*') {
            out.push(spell(cb.unwrap_or(b'x')));
            j += 1;
        } else if cb == Some(b'*') {
            out.push(spell(ca.unwrap_or(b'x')));
            i += 1;
        } else {
            let c = if ca == Some(b'?') { cb } else { ca };
            out.push(spell(c.unwrap_or(b'x')));
            i += 1;
            j += 1;
        }
    }
    Some(out)
}

/// A concrete character for a pattern character (`?` becomes `x`).
fn spell(c: u8) -> char {
    if c == b'?' || c == b'*' { 'x' } else { c as char }
}

/// For every `i`, `j`: whether `a[i..]` and `b[j..]` match a common path,
/// one bit each, filled from the ends of both patterns backwards.
struct Meet {
    width: usize,
    bits: Bits,
}

/// The table's bits: inline for short patterns (most pairs the build
/// compares), so that a pair costs no allocation.
enum Bits {
    Inline([u64; 4]),
    Heap(Vec<u64>),
}

impl Bits {
    fn words(&self) -> &[u64] {
        match self {
            Bits::Inline(w) => w,
            Bits::Heap(w) => w,
        }
    }
    fn words_mut(&mut self) -> &mut [u64] {
        match self {
            Bits::Inline(w) => w,
            Bits::Heap(w) => w,
        }
    }
}

impl Meet {
    fn new(a: &[u8], b: &[u8]) -> Meet {
        let width = b.len() + 1;
        let words = ((a.len() + 1) * width).div_ceil(64);
        let bits = if words <= 4 { Bits::Inline([0; 4]) } else { Bits::Heap(alloc::vec![0; words]) };
        let mut m = Meet { width, bits };
        for i in (0..=a.len()).rev() {
            for j in (0..=b.len()).rev() {
                let (ca, cb) = (a.get(i).copied(), b.get(j).copied());
                let r = match (ca, cb) {
                    (None, None) => true,
                    (Some(b'*'), _) | (_, Some(b'*')) => {
                        // A star matches nothing, or eats one character the other side spells.
                        (ca == Some(b'*') && m.get(i + 1, j))
                            || (cb == Some(b'*') && m.get(i, j + 1))
                            || (ca == Some(b'*') && cb.is_some_and(|c| c != b'*') && m.get(i, j + 1))
                            || (cb == Some(b'*') && ca.is_some_and(|c| c != b'*') && m.get(i + 1, j))
                    }
                    (Some(x), Some(y)) => (x == y || x == b'?' || y == b'?') && m.get(i + 1, j + 1),
                    _ => false,
                };
                if r {
                    let k = i * width + j;
                    m.bits.words_mut()[k / 64] |= 1 << (k % 64);
                }
            }
        }
        m
    }

    fn get(&self, i: usize, j: usize) -> bool {
        let k = i * self.width + j;
        self.bits.words().get(k / 64).is_some_and(|w| (w >> (k % 64)) & 1 == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_paths() {
        assert!(matches("/nginx/access_log", "/nginx/access_log"));
        assert!(!matches("/nginx/access_log", "/nginx/access_logs"));
        assert!(matches("/nginx/*", "/nginx/access/extra"));
        assert!(matches("*", ""));
        assert!(matches("/a/?/c", "/a/b/c"));
        assert!(!matches("/a/?/c", "/a//c"));
        assert!(matches("/a/?", "/a/é"));
        assert!(matches("*/log*", "/x/y/logs"));
        assert!(!matches("*/log", "/x/y/logs"));
        assert!(matches("a*b*c", "aXbYbZc"));
        assert!(!matches("a*b*c", "aXbYbZ"));
    }

    #[test]
    fn overlaps_come_with_a_path_both_claim() {
        for (a, b) in [
            ("/nginx/*", "/nginx/access"),
            ("/nginx/access", "/nginx/access"),
            ("*/access", "/nginx/*"),
            ("/a/?x", "/a/y?"),
            ("*", "/anything"),
            ("a*", "*b"),
        ] {
            let w = overlap(a, b).unwrap_or_else(|| panic!("{a} and {b} overlap"));
            assert!(matches(a, &w) && matches(b, &w), "{w} should match {a} and {b}");
            assert!(overlap(b, a).is_some());
        }
        for (a, b) in [("/nginx/access", "/nginx/error"), ("/a/?", "/a/bc"), ("a*", "b*"), ("*a", "*b"), ("/x/*/y", "/x/z")] {
            assert_eq!(overlap(a, b), None, "{a} and {b} are disjoint");
        }
        // Long patterns: the table no longer fits inline.
        let long = format!("/a/{}", "x?".repeat(200));
        for (a, b) in [(format!("{long}*"), "*/y".to_string()), (long.clone(), format!("/a/*{}", "?x".repeat(10)))] {
            let w = overlap(&a, &b).unwrap_or_else(|| panic!("{a} and {b} overlap"));
            assert!(matches(&a, &w) && matches(&b, &w), "{w} should match {a} and {b}");
        }
        assert_eq!(overlap(&long, &format!("{long}?")), None);
        assert_eq!(overlap(&format!("{long}*"), &format!("/b/{long}")), None);
    }
}
