//! `memcmp` for the wasm guest, eight bytes at a time.
//!
//! compiler-builtins' version (a weak symbol, which this replaces) compares
//! one byte per loop turn, and in wasmtime every loop turn also pays the epoch
//! check of the call deadline. On wasm32 every `==` of two strings and every
//! name the evaluator resolves ends here (LLVM offers no `bcmp` on this
//! target). Plain loads and compares only: nothing here may compile back into
//! a call to `memcmp`. host/tests/all/component.rs
//! (`the_guests_byte_compares_agree_with_byte_order`) checks it through the
//! guest.

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
            // As big-endian numbers, the first byte that differs decides, as
            // in a byte-by-byte compare.
            return if u64::from_be(x) < u64::from_be(y) { -1 } else { 1 };
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
