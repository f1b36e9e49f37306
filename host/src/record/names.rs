//! Field names of records (the guest's outputs, and JSON input's keys,
//! `record::from_json_str`), shared rather than allocated per field.
//!
//! A rule writes the same few names into every record, so decoding them into
//! a fresh `String` each time was a large share of the host's allocations.
//! Names are kept for the life of the process (they must be `'static` in a
//! [`Record`]); to bound that memory, only names up to [`MAX_LEN`] bytes are
//! kept, and at most [`MAX_NAMES`] of them, after which further new names are
//! allocated per field as before. Each thread looks names up in its own
//! table first, so the shared one is locked only for a name it has not seen.

use omlet_lang::fnv::FnvBuild;
use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

pub(super) const MAX_LEN: usize = 64;
pub(super) const MAX_NAMES: usize = 4096;

// FNV (omlet_lang::fnv): names are short, and a lookup per field must be cheap.
type Table = HashMap<&'static [u8], &'static str, FnvBuild>;

static SHARED: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
/// The shared table is full: a name a thread has not seen is not looked
/// for there (no lock per field once input keys have filled the table).
static FULL: AtomicBool = AtomicBool::new(false);

/// Slots of the per-thread front cache (a power of two).
const FRONT: usize = 256;

thread_local! {
    static LOCAL: RefCell<Table> = RefCell::new(Table::default());
    /// A direct-mapped cache in front of `LOCAL`, by length and first and
    /// last bytes: records repeat the same few names, and this finds
    /// them with one compare instead of hashing every byte.
    static FRONT_CACHE: [Cell<&'static str>; FRONT] = const { [const { Cell::new("") }; FRONT] };
}

/// A name's slot in the front cache (not empty: `""` marks a free slot).
pub(super) fn front_slot(name: &[u8]) -> usize {
    let (first, last) = (name[0] as usize, name[name.len() - 1] as usize);
    (name.len().wrapping_mul(31) ^ first.wrapping_mul(7) ^ last.wrapping_mul(131)) & (FRONT - 1)
}

/// The shared copy of `name`, if it is (or can still be) kept.
pub(crate) fn get(name: &[u8]) -> Option<&'static str> {
    if name.len() > MAX_LEN {
        return None;
    }
    if name.is_empty() {
        return kept(name);
    }
    let slot = front_slot(name);
    let hit = FRONT_CACHE.with(|f| f[slot].get());
    if hit.as_bytes() == name {
        return Some(hit);
    }
    let found = kept(name)?;
    FRONT_CACHE.with(|f| f[slot].set(found));
    Some(found)
}

/// [`get`] past the front cache: this thread's table, then the shared one.
fn kept(name: &[u8]) -> Option<&'static str> {
    if let Some(hit) = LOCAL.with(|t| t.borrow().get(name).copied()) {
        return Some(hit);
    }
    if FULL.load(Ordering::Relaxed) {
        return None;
    }
    let text = std::str::from_utf8(name).ok()?;
    let kept = {
        let mut shared = SHARED.lock().ok()?;
        let set = shared.get_or_insert_with(HashSet::new);
        match set.get(text) {
            Some(k) => *k,
            None if set.len() < MAX_NAMES => {
                let k: &'static str = Box::leak(text.into());
                set.insert(k);
                k
            }
            None => {
                FULL.store(true, Ordering::Relaxed);
                return None;
            }
        }
    };
    LOCAL.with(|t| t.borrow_mut().insert(kept.as_bytes(), kept));
    Some(kept)
}

/// Tests that need the shared table in a known state take this lock and
/// [`reset`] it, so that a test filling the table (its bound is tested,
/// and very wide records fill it) cannot run beside them.
#[cfg(test)]
pub(crate) static TEST_LOCK: Mutex<()> = Mutex::new(());

/// Empties the shared table and this thread's caches (names handed out
/// stay valid: they are never freed).
#[cfg(test)]
pub(crate) fn reset() {
    if let Ok(mut shared) = SHARED.lock() {
        *shared = None;
    }
    FULL.store(false, Ordering::Relaxed);
    LOCAL.with(|t| t.borrow_mut().clear());
    FRONT_CACHE.with(|f| f.iter().for_each(|c| c.set("")));
}

/// `name` as a field name: the shared copy, or else its own.
pub(crate) fn cow(name: &str) -> Cow<'static, str> {
    get(name.as_bytes()).map_or_else(|| Cow::Owned(name.to_string()), Cow::Borrowed)
}
