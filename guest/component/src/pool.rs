//! Small blocks kept by size for reuse, in front of dlmalloc.
//!
//! Why: a record's evaluation allocates a handful of small blocks (an
//! object's members, a `fmt` text, the cells of a cached lookup row: about
//! five a nginx record) and frees them when its output is written. In wasm
//! each pair costs a few hundred instructions through dlmalloc's `malloc`
//! and `free` and the `GlobalAlloc` shims: about 6 % of the guest's work on
//! a nginx record. A block popped from, or pushed onto, a list of free
//! blocks of its size costs a dozen.
//!
//! What it replaces: dlmalloc's own free lists, for blocks of at most
//! [`SMALL`] bytes aligned to at most [`ALIGN`]. Every kept block is one
//! dlmalloc gave (of its size class's full size), so a block may always go
//! back to dlmalloc; larger or more aligned blocks go to dlmalloc directly.
//!
//! What it costs: at most [`KEEP`] free blocks kept aside per size class
//! (1 MiB in all), which dlmalloc cannot hand out for other sizes
//! meanwhile; past that a freed block goes back to dlmalloc. A block is
//! rounded up to its class (a multiple of eight bytes), as dlmalloc rounds
//! it too. The guest is single-threaded, so the lists need no lock.

use core::alloc::Layout;
use core::ptr;

/// Where the pool's blocks come from and, past its bound, go back to.
///
/// # Safety
/// `malloc`, `calloc`, `realloc` and `free` behave as the `GlobalAlloc`
/// methods of the same layouts: a block they give is valid for its size and
/// aligned to its alignment until freed.
pub unsafe trait Backing {
    /// A block of `size` bytes aligned to `align`, or null.
    ///
    /// # Safety
    /// `size` is not zero; `align` is a power of two.
    unsafe fn malloc(&mut self, size: usize, align: usize) -> *mut u8;
    /// A zeroed block, as [`Backing::malloc`].
    ///
    /// # Safety
    /// As [`Backing::malloc`].
    unsafe fn calloc(&mut self, size: usize, align: usize) -> *mut u8;
    /// `ptr` (of `size` and `align`) moved to a block of `new_size` bytes.
    ///
    /// # Safety
    /// `ptr` came from this backing with that size and alignment.
    unsafe fn realloc(&mut self, ptr: *mut u8, size: usize, align: usize, new_size: usize) -> *mut u8;
    /// Gives `ptr` back.
    ///
    /// # Safety
    /// `ptr` came from this backing with that size and alignment, and is not
    /// used again.
    unsafe fn free(&mut self, ptr: *mut u8, size: usize, align: usize);
}

/// The largest block the pool keeps.
pub const SMALL: usize = 256;
/// The most alignment a kept block has (dlmalloc's own on wasm32).
pub const ALIGN: usize = 8;
/// Sizes are kept in classes of eight bytes: 8, 16, … [`SMALL`].
const CLASSES: usize = SMALL / 8;
/// The most free blocks kept per class: at most 256 × (8 + 16 + … + 256)
/// bytes, 1 MiB, in all. (A count, not bytes: a byte bound per class
/// cost a division on every free.)
pub const KEEP: u32 = 256;

/// Free blocks by size class over a [`Backing`].
pub struct Pool<B> {
    /// Per class, the first free block; each holds the address of the next
    /// in its first bytes (null ends the list).
    heads: [*mut u8; CLASSES],
    /// Per class, how many blocks its list holds.
    counts: [u32; CLASSES],
    backing: B,
}

/// The class of a block of `layout`, if the pool keeps such blocks.
#[inline(always)]
fn class(size: usize, align: usize) -> Option<usize> {
    // A zero size wraps round past every class.
    let c = size.wrapping_sub(1) >> 3;
    (c < CLASSES && align <= ALIGN).then_some(c)
}

/// The bytes of every block of class `c`.
#[inline(always)]
const fn class_bytes(c: usize) -> usize {
    (c + 1) * 8
}

impl<B: Backing> Pool<B> {
    pub const fn new(backing: B) -> Pool<B> {
        Pool { heads: [ptr::null_mut(); CLASSES], counts: [0; CLASSES], backing }
    }

    /// A block for `layout`, or null.
    ///
    /// # Safety
    /// As `GlobalAlloc::alloc`.
    #[inline(always)]
    pub unsafe fn alloc(&mut self, layout: Layout) -> *mut u8 {
        if let Some(c) = class(layout.size(), layout.align()) {
            let head = self.heads[c];
            if !head.is_null() {
                // SAFETY: a kept block holds the next one's address in its
                // first bytes (written by `dealloc`, which a block's
                // alignment allows).
                self.heads[c] = unsafe { head.cast::<*mut u8>().read() };
                self.counts[c] -= 1;
                return head;
            }
        }
        // SAFETY: the caller's contract.
        unsafe { self.alloc_slow(layout) }
    }

    /// [`Pool::alloc`] from the backing: kept apart, so that the path of a
    /// kept block saves no registers for dlmalloc's.
    #[cold]
    #[inline(never)]
    unsafe fn alloc_slow(&mut self, layout: Layout) -> *mut u8 {
        match class(layout.size(), layout.align()) {
            // SAFETY: a class's size is not zero, and 8 is a power of two.
            Some(c) => unsafe { self.backing.malloc(class_bytes(c), ALIGN) },
            // SAFETY: the caller's layout, passed on.
            None => unsafe { self.backing.malloc(layout.size(), layout.align()) },
        }
    }

    /// A zeroed block for `layout`, or null.
    ///
    /// # Safety
    /// As `GlobalAlloc::alloc_zeroed`.
    pub unsafe fn alloc_zeroed(&mut self, layout: Layout) -> *mut u8 {
        if class(layout.size(), layout.align()).is_none() {
            // SAFETY: the caller's layout, passed on.
            return unsafe { self.backing.calloc(layout.size(), layout.align()) };
        }
        // SAFETY: the caller's layout.
        let p = unsafe { self.alloc(layout) };
        if !p.is_null() {
            // SAFETY: the block is valid for at least `layout.size()` bytes.
            unsafe { p.write_bytes(0, layout.size()) };
        }
        p
    }

    /// Takes back `ptr`, given for `layout`.
    ///
    /// # Safety
    /// As `GlobalAlloc::dealloc`.
    #[inline(always)]
    pub unsafe fn dealloc(&mut self, ptr: *mut u8, layout: Layout) {
        if let Some(c) = class(layout.size(), layout.align())
            && self.counts[c] < KEEP
        {
            // SAFETY: the block is the caller's to give up, at least eight
            // bytes, aligned to eight: room for an address.
            unsafe { ptr.cast::<*mut u8>().write(self.heads[c]) };
            self.heads[c] = ptr;
            self.counts[c] += 1;
            return;
        }
        // SAFETY: the caller's contract.
        unsafe { self.dealloc_slow(ptr, layout) }
    }

    /// [`Pool::dealloc`] to the backing (see [`Pool::alloc_slow`]).
    #[cold]
    #[inline(never)]
    unsafe fn dealloc_slow(&mut self, ptr: *mut u8, layout: Layout) {
        match class(layout.size(), layout.align()) {
            // SAFETY: a kept class's block is its class's full size from the backing.
            Some(c) => unsafe { self.backing.free(ptr, class_bytes(c), ALIGN) },
            // SAFETY: given by the backing for this layout.
            None => unsafe { self.backing.free(ptr, layout.size(), layout.align()) },
        }
    }

    /// `ptr` (given for `layout`) moved to a block of `new_size` bytes.
    ///
    /// # Safety
    /// As `GlobalAlloc::realloc`.
    pub unsafe fn realloc(&mut self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let align = layout.align();
        match (class(layout.size(), align), class(new_size, align)) {
            // The block is already of the class the new size needs.
            (Some(a), Some(b)) if a == b => ptr,
            // SAFETY: neither size is kept here: the backing's own block.
            (None, None) => unsafe { self.backing.realloc(ptr, layout.size(), align, new_size) },
            _ => {
                // SAFETY: `GlobalAlloc::realloc` asks that the new layout be valid.
                let new = unsafe { self.alloc(Layout::from_size_align_unchecked(new_size, align)) };
                if !new.is_null() {
                    // SAFETY: both blocks hold at least the smaller size, and
                    // are distinct (the old one is still taken).
                    unsafe {
                        ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                }
                new
            }
        }
    }
}

/// The guest's allocator: dlmalloc behind the pool.
#[cfg(target_arch = "wasm32")]
pub mod global {
    use core::alloc::{GlobalAlloc, Layout};

    use super::{Backing, Pool};

    // SAFETY: dlmalloc's methods are its `GlobalAlloc`'s (dlmalloc::GlobalDlmalloc
    // calls the same ones).
    unsafe impl Backing for dlmalloc::Dlmalloc {
        #[inline(always)]
        unsafe fn malloc(&mut self, size: usize, align: usize) -> *mut u8 {
            // SAFETY: the pool's caller's contract.
            unsafe { dlmalloc::Dlmalloc::malloc(self, size, align) }
        }
        unsafe fn calloc(&mut self, size: usize, align: usize) -> *mut u8 {
            // SAFETY: as above.
            unsafe { dlmalloc::Dlmalloc::calloc(self, size, align) }
        }
        unsafe fn realloc(&mut self, ptr: *mut u8, size: usize, align: usize, new_size: usize) -> *mut u8 {
            // SAFETY: as above.
            unsafe { dlmalloc::Dlmalloc::realloc(self, ptr, size, align, new_size) }
        }
        #[inline(always)]
        unsafe fn free(&mut self, ptr: *mut u8, size: usize, align: usize) {
            // SAFETY: as above.
            unsafe { dlmalloc::Dlmalloc::free(self, ptr, size, align) }
        }
    }

    static mut POOL: Pool<dlmalloc::Dlmalloc> = Pool::new(dlmalloc::Dlmalloc::new());

    /// The pool, one `&mut` at a time.
    #[inline(always)]
    fn pool() -> &'static mut Pool<dlmalloc::Dlmalloc> {
        // SAFETY: wasm32 components run one call at a time on one thread,
        // and no allocator method calls back into another.
        unsafe { &mut *(&raw mut POOL) }
    }

    pub struct Pooled;

    // SAFETY: each method is the pool's, whose contract is `GlobalAlloc`'s.
    unsafe impl GlobalAlloc for Pooled {
        #[inline]
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: the caller's contract, passed on.
            unsafe { pool().alloc(layout) }
        }
        #[inline]
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: as above.
            unsafe { pool().dealloc(ptr, layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            // SAFETY: as above.
            unsafe { pool().alloc_zeroed(layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: as above.
            unsafe { pool().realloc(ptr, layout, new_size) }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use std::alloc::{GlobalAlloc, System};
    use std::collections::HashMap;
    use std::vec::Vec;

    use super::*;

    /// The system allocator, counting what it hands out and takes back.
    #[derive(Default)]
    struct Counted {
        live: HashMap<usize, (usize, usize)>,
        mallocs: usize,
        frees: usize,
    }

    // SAFETY: System's methods, with bookkeeping that checks each free
    // matches its block's size and alignment.
    unsafe impl Backing for Counted {
        unsafe fn malloc(&mut self, size: usize, align: usize) -> *mut u8 {
            // SAFETY: the trait's contract.
            let p = unsafe { System.alloc(Layout::from_size_align(size, align).unwrap()) };
            assert!(self.live.insert(p as usize, (size, align)).is_none());
            self.mallocs += 1;
            p
        }
        unsafe fn calloc(&mut self, size: usize, align: usize) -> *mut u8 {
            // SAFETY: as above.
            let p = unsafe { System.alloc_zeroed(Layout::from_size_align(size, align).unwrap()) };
            assert!(self.live.insert(p as usize, (size, align)).is_none());
            self.mallocs += 1;
            p
        }
        unsafe fn realloc(&mut self, ptr: *mut u8, size: usize, align: usize, new_size: usize) -> *mut u8 {
            assert_eq!(self.live.remove(&(ptr as usize)), Some((size, align)), "realloc of a block with another layout");
            // SAFETY: as above.
            let p = unsafe { System.realloc(ptr, Layout::from_size_align(size, align).unwrap(), new_size) };
            self.live.insert(p as usize, (new_size, align));
            p
        }
        unsafe fn free(&mut self, ptr: *mut u8, size: usize, align: usize) {
            assert_eq!(self.live.remove(&(ptr as usize)), Some((size, align)), "free of a block with another layout");
            self.frees += 1;
            // SAFETY: as above.
            unsafe { System.dealloc(ptr, Layout::from_size_align(size, align).unwrap()) };
        }
    }

    /// A block taken from the pool, filled with its own tag.
    struct Held {
        ptr: *mut u8,
        layout: Layout,
        tag: u8,
    }

    fn fill(h: &Held) {
        // SAFETY: the block is valid for its layout's size.
        unsafe { h.ptr.write_bytes(h.tag, h.layout.size()) };
    }

    fn check(h: &Held, upto: usize) {
        // SAFETY: as above.
        let bytes = unsafe { core::slice::from_raw_parts(h.ptr, upto) };
        assert!(bytes.iter().all(|&b| b == h.tag), "a block was written over while held ({:?})", h.layout);
    }

    #[test]
    fn blocks_are_never_shared_and_keep_their_bytes_through_realloc() {
        let mut pool = Pool::new(Counted::default());
        let mut held: Vec<Held> = Vec::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let aligns = [1, 2, 4, 8, 16, 32];
        for step in 0..40_000u32 {
            let tag = (step % 251) as u8 + 1;
            match next(10) {
                0..=3 => {
                    // Mostly small sizes, some past the pool's, every alignment.
                    let size = if next(8) == 0 { 1 + next(2000) as usize } else { 1 + next(SMALL as u64 + 16) as usize };
                    let layout = Layout::from_size_align(size, aligns[next(6) as usize]).unwrap();
                    let zeroed = next(4) == 0;
                    // SAFETY: a valid layout of non-zero size.
                    let ptr = unsafe { if zeroed { pool.alloc_zeroed(layout) } else { pool.alloc(layout) } };
                    assert!(!ptr.is_null() && (ptr as usize).is_multiple_of(layout.align()), "{layout:?} at {ptr:?}");
                    if zeroed {
                        // SAFETY: valid for its size.
                        assert!(unsafe { core::slice::from_raw_parts(ptr, size) }.iter().all(|&b| b == 0), "not zeroed");
                    }
                    let h = Held { ptr, layout, tag };
                    fill(&h);
                    held.push(h);
                }
                4..=6 if !held.is_empty() => {
                    let h = held.swap_remove(next(held.len() as u64) as usize);
                    check(&h, h.layout.size());
                    // SAFETY: taken from this pool with this layout.
                    unsafe { pool.dealloc(h.ptr, h.layout) };
                }
                7..=9 if !held.is_empty() => {
                    let i = next(held.len() as u64) as usize;
                    let h = &mut held[i];
                    check(h, h.layout.size());
                    let new_size = 1 + if next(3) == 0 { next(2000) } else { next(SMALL as u64 + 16) } as usize;
                    // SAFETY: taken from this pool with this layout; a valid new size.
                    let p = unsafe { pool.realloc(h.ptr, h.layout, new_size) };
                    assert!(!p.is_null() && (p as usize).is_multiple_of(h.layout.align()));
                    h.ptr = p;
                    let kept = h.layout.size().min(new_size);
                    h.layout = Layout::from_size_align(new_size, h.layout.align()).unwrap();
                    check(h, kept);
                    h.tag = tag;
                    fill(h);
                }
                _ => {}
            }
            if step % 4096 == 0 {
                for h in &held {
                    check(h, h.layout.size());
                }
            }
        }
        for h in held.drain(..) {
            check(&h, h.layout.size());
            // SAFETY: as above.
            unsafe { pool.dealloc(h.ptr, h.layout) };
        }
        // What the backing still has out is exactly what the lists keep, in
        // each class's own size, within the bound.
        let kept: usize = pool.counts.iter().map(|&n| n as usize).sum();
        assert_eq!(pool.backing.live.len(), kept);
        for (c, &n) in pool.counts.iter().enumerate() {
            assert!(n <= KEEP, "class {c} keeps {n}");
        }
        assert!(pool.backing.live.values().all(|&(size, align)| align == ALIGN && size % 8 == 0 && size <= SMALL));
    }

    #[test]
    fn a_freed_block_is_handed_out_again_and_the_bound_returns_the_rest() {
        let mut pool = Pool::new(Counted::default());
        let layout = Layout::from_size_align(40, 8).unwrap();
        // SAFETY: valid layouts; each block freed once, with its layout.
        unsafe {
            let a = pool.alloc(layout);
            pool.dealloc(a, layout);
            // Any size of the same class gets the same block, without the backing.
            let b = pool.alloc(Layout::from_size_align(33, 4).unwrap());
            assert_eq!(a, b);
            assert_eq!(pool.backing.mallocs, 1);
            // Growing within the class keeps the block; past it, moves it.
            assert_eq!(pool.realloc(b, Layout::from_size_align(33, 4).unwrap(), 40), b);
            let c = pool.realloc(b, layout, 41);
            assert_ne!(c, b);
            pool.dealloc(c, Layout::from_size_align(41, 8).unwrap());

            // More blocks freed than a class keeps: the rest go back.
            let keep = KEEP as usize;
            let blocks: Vec<*mut u8> = (0..keep + 10).map(|_| pool.alloc(layout)).collect();
            let frees = pool.backing.frees;
            for p in blocks {
                pool.dealloc(p, layout);
            }
            assert_eq!(pool.backing.frees - frees, 10);
            assert_eq!(pool.counts[4] as usize, keep);
        }
    }
}
