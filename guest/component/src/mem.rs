//! `memcmp` and `bcmp` for the wasm guest, eight bytes at a time.
//!
//! compiler-builtins' versions (weak symbols, which these replace) compare one
//! byte per loop turn, and in wasmtime every loop turn also pays the epoch
//! check of the call deadline. Every `==` of two strings and every name the
//! evaluator looks up ends here. Plain loads and compares only: nothing here
//! may compile back into a call to `memcmp` or `bcmp`. Only in the wasm
//! build; host/tests/all/guest_mem.rs checks them through the guest.

/// The first `n` bytes of `a` and `b` compared as unsigned bytes: negative,
/// zero or positive as `a` sorts before, equal to or after `b`.
///
/// # Safety
/// `a` and `b` are valid for reads of `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: `i + 8 <= n`, and both are readable for `n` bytes.
        let (x, y) = unsafe { (a.add(i).cast::<u64>().read_unaligned(), b.add(i).cast::<u64>().read_unaligned()) };
        if x != y {
            // Byte order made big-endian, so that the first byte that differs
            // decides, as in a byte-by-byte compare.
            return if u64::from_be(x.to_le()) < u64::from_be(y.to_le()) { -1 } else { 1 };
        }
        i += 8;
    }
    while i < n {
        // SAFETY: `i < n`.
        let (x, y) = unsafe { (*a.add(i), *b.add(i)) };
        if x != y {
            return i32::from(x) - i32::from(y);
        }
        i += 1;
    }
    0
}

/// Zero when the first `n` bytes of `a` and `b` are equal, else not zero.
///
/// # Safety
/// As [`memcmp`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: as in `memcmp`.
        let (x, y) = unsafe { (a.add(i).cast::<u64>().read_unaligned(), b.add(i).cast::<u64>().read_unaligned()) };
        if x != y {
            return 1;
        }
        i += 8;
    }
    while i < n {
        // SAFETY: `i < n`.
        if unsafe { *a.add(i) != *b.add(i) } {
            return 1;
        }
        i += 1;
    }
    0
}
