//! The indexes of an in-memory table: a hash of a column's cells, and sorted
//! spans for ranges (integers or address keys), searched a block at a time.

use hashbrown::HashTable;

/// One index over a table.
pub enum Index {
    /// Equality on `cols`: row numbers, found by the hash of their key.
    Hash {
        /// The key columns.
        cols: Vec<usize>,
        /// Row numbers; a repeated key keeps its first row only.
        rows: HashTable<u32>,
        /// The hasher.
        hasher: hashbrown::DefaultHashBuilder,
        /// Rows whose key was already taken by an earlier row.
        repeated: u64,
    },
    /// Ranges `[lo, hi]` of integers, sorted by `lo`, none overlapping.
    Ranges {
        /// The lower bound's column.
        lo: usize,
        /// The upper bound's column.
        hi: usize,
        /// The ranges, searched in two steps.
        spans: Spans,
    },
    /// IPv4 networks of one column (`cidr4_contains(:ip, col) = 1`), as
    /// ranges of addresses, none overlapping; rows whose text is no network
    /// are left out, as the helper never matches them.
    Cidr4 {
        /// The column of networks.
        col: usize,
        /// The networks' first and last addresses.
        spans: Spans,
    },
    /// Ranges `[lo, hi]` of `ip_key` texts (32 lower-case hex digits, as
    /// IPv6 and mixed-family tables hold them), none overlapping.
    KeyRanges {
        /// The lower bound's column.
        lo: usize,
        /// The upper bound's column.
        hi: usize,
        /// The ranges, as the keys' numbers.
        spans: Spans<u128>,
    },
}

/// The number of an `ip_key` text: exactly 32 lower-case hex digits, whose
/// byte order (SQLite's for text) is the numbers' order; `None` for any
/// other text.
pub(super) fn ip_key(s: &str) -> Option<u128> {
    if s.len() != 32 || !s.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)) {
        return None;
    }
    u128::from_str_radix(s, 16).ok()
}

/// How many lower bounds one entry of [`Spans::top`] stands for.
pub(super) const BLOCK: usize = 64;

/// Ranges that do not overlap, sorted by their lower bound, searched in two
/// steps: a plain binary search over a million 24-byte ranges touches about
/// 20 cache lines spread over 24 MB, and at distinct keys each one is a miss
/// (run/ranges/distinct ran at 0.56x the hot-key run with one). Here a
/// binary search over every 64th lower bound (8 bytes each: 128 KiB for a
/// million ranges, which the cache keeps) picks a block, and a search of
/// that block's 64 lower bounds (512 bytes) finds the range: a few misses
/// a lookup.
///
/// The bounds are integers (`i64`), or the 128-bit numbers of `ip_key`
/// texts (`u128`), whose order is the texts' order.
pub struct Spans<K = i64> {
    /// The lower bounds, sorted.
    pub(super) los: Vec<K>,
    /// The upper bound and the row of each, in the same order.
    pub(super) ends: Vec<(K, u32)>,
    /// `los[k * BLOCK]` for each k.
    pub(super) top: Vec<K>,
}

impl<K: Copy + Ord> Spans<K> {
    /// Spans of `sorted` (lo, hi, row), sorted by lo, none overlapping.
    pub(super) fn new(sorted: &[(K, K, u32)]) -> Spans<K> {
        let los: Vec<K> = sorted.iter().map(|s| s.0).collect();
        let top = los.iter().step_by(BLOCK).copied().collect();
        Spans { los, ends: sorted.iter().map(|s| (s.1, s.2)).collect(), top }
    }

    /// How many ranges.
    pub fn len(&self) -> usize {
        self.los.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.los.is_empty()
    }

    pub(super) fn bytes(&self) -> u64 {
        let k = std::mem::size_of::<K>();
        (self.los.capacity() * k + self.ends.capacity() * std::mem::size_of::<(K, u32)>() + self.top.capacity() * k) as u64
    }

    /// The upper bound and row of the last range whose lower bound admits
    /// `x` (`lo <= x`, or `lo < x` when `strict`); since none overlap, no
    /// other range can hold `x`.
    /// The row of the range that holds `x` (`strict` says whether the lower
    /// and the upper bound exclude it), if one does: the last range whose
    /// lower bound admits `x` is the only one that can, since none overlap.
    pub(super) fn holding(&self, x: K, (strict_lo, strict_hi): (bool, bool)) -> Option<u32> {
        let (h, row) = self.last_admitting(x, strict_lo)?;
        (if strict_hi { h > x } else { h >= x }).then_some(row)
    }

    pub(super) fn last_admitting(&self, x: K, strict: bool) -> Option<(K, u32)> {
        let admits = |l: &K| if strict { *l < x } else { *l <= x };
        let block = self.top.partition_point(admits).checked_sub(1)?;
        let start = block * BLOCK;
        let within = &self.los[start..(start + BLOCK).min(self.los.len())];
        // At least the block's first bound admits x (it is `top[block]`).
        let at = start + within.partition_point(admits) - 1;
        self.ends.get(at).copied()
    }
}

impl Index {
    /// Its estimated size in bytes.
    pub fn bytes(&self) -> u64 {
        match self {
            Index::Hash { rows, .. } => (rows.capacity() * (std::mem::size_of::<u32>() + 1)) as u64,
            Index::Ranges { spans, .. } => spans.bytes(),
            Index::KeyRanges { spans, .. } => spans.bytes(),
            Index::Cidr4 { spans, .. } => spans.bytes(),
        }
    }
}

/// How the database the rows come from compares a parameter with a
/// column, which an answer from memory must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compare {
    /// SQLite's: by column affinity, converting numeric text (`probe`).
    Sqlite,
    /// Another database's (a snapshot of PostgreSQL or MySQL): memory
    /// answers only an integer against an integer column, and text against
    /// a text column when `text` is true (PostgreSQL, whose default
    /// collations are deterministic; not MySQL, whose usual collations
    /// ignore case). Anything else goes to SQL, which converts as it does.
    Exact {
        /// Whether text compares as exactly as integers do (PostgreSQL).
        text: bool,
    },
}
