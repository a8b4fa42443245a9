//! Transparent huge pages for the encoder's large, long-lived tables: its merges,
//! its vocabulary by bytes and the generations of its pre-token cache. They span
//! megabytes and are read at random, so with 4 KiB pages a lookup that misses the
//! CPU's caches misses the TLB too. In huge pages, the fast core ran 8-11% faster
//! on one thread for GPT-2 and 13-14% for GPT-4o (50 MB of code and docs, cold),
//! and `prepare --jobs 2` on 100 MB took 3.5-6% less CPU (GPT-2, Llama-3, GPT-4o).
//!
//! Only these tables ask for them: the rest of a build's memory is batches of text
//! and ids, taken and freed all the time, where huge pages lost (each is zeroed
//! whole at its first touch and split when part of it goes back; see `main.rs`,
//! which keeps them from everything that does not ask). A table's size does not
//! change: past a few megabytes its pages are all touched anyway.
//!
//! A table of at least `HUGE_PAGE` bytes gets a mapping of its own, aligned to a
//! huge page and advised as `MADV_HUGEPAGE`; anything smaller comes from the
//! global allocator. Which of the two an allocation came from follows from its
//! size, which the caller gives back when it frees it.

use std::alloc::Layout;
use std::ptr::NonNull;

use allocator_api2::alloc::{AllocError, Allocator, Global};

/// A huge page on x86-64 and most of aarch64's configurations.
const HUGE_PAGE: usize = 2 << 20;

/// Keeps transparent huge pages from the process's memory but the blocks mapped
/// here (see the module doc). Linux 6.18 and later take that as a setting of the
/// process (`PR_THP_DISABLE_EXCEPT_ADVISED`). Before, a system that gives huge pages
/// to all memory (`always`) can only be refused them for the whole process, these
/// tables included, as ferry did for all; one that gives them where advised
/// (`madvise`) or never needs nothing. Where the setting cannot be read, the whole
/// process goes without.
pub fn only_where_advised() {
    #[cfg(target_os = "linux")]
    {
        /// `PR_SET_THP_DISABLE`'s flag for "except where advised" (`linux/prctl.h`, 6.18).
        const PR_THP_DISABLE_EXCEPT_ADVISED: libc::c_ulong = 1 << 1;
        // SAFETY: this prctl takes integers and only sets this process's flag.
        let except_advised =
            unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1 as libc::c_ulong, PR_THP_DISABLE_EXCEPT_ADVISED, 0, 0) };
        if except_advised == 0 {
            return;
        }
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
        if !(mode.contains("[madvise]") || mode.contains("[never]")) {
            // Fails only on kernels older than 3.15, which then keep huge pages.
            let _ = rustix::thread::disable_transparent_huge_pages(true);
        }
    }
}

/// A hash map with the Fx hash whose table is in huge pages once large.
pub type HugeMap<K, V> = hashbrown::HashMap<K, V, rustc_hash::FxBuildHasher, HugePages>;

/// An empty `HugeMap` with room for `capacity` entries.
pub fn huge_map_with_capacity<K, V>(capacity: usize) -> HugeMap<K, V> {
    HugeMap::with_capacity_and_hasher_in(capacity, rustc_hash::FxBuildHasher, HugePages)
}

/// The allocator of `HugeMap` (see the module doc).
#[derive(Clone, Copy, Debug, Default)]
pub struct HugePages;

/// Whether an allocation of `layout` gets a mapping of its own.
fn mapped(layout: Layout) -> bool {
    cfg!(target_os = "linux") && layout.size() >= HUGE_PAGE && layout.align() <= HUGE_PAGE
}

// SAFETY: a block is either the global allocator's, or a mapping of its own that
// stays valid until `deallocate` unmaps it; which one depends only on the layout,
// which the caller of `deallocate` gives as it was given to `allocate`.
unsafe impl Allocator for HugePages {
    fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if !mapped(layout) {
            return Global.allocate(layout);
        }
        let start = map(layout.size()).ok_or(AllocError)?;
        Ok(NonNull::slice_from_raw_parts(start, layout.size()))
    }

    fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<[u8]>, AllocError> {
        if !mapped(layout) {
            return Global.allocate_zeroed(layout);
        }
        // A new anonymous mapping reads as zeros.
        self.allocate(layout)
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, layout: Layout) {
        if !mapped(layout) {
            // SAFETY: the block came from `Global.allocate` with this layout (above).
            return unsafe { Global.deallocate(ptr, layout) };
        }
        unmap(ptr, layout.size());
    }
}

/// Bytes mapped for a block of `size` bytes: whole huge pages.
fn mapped_len(size: usize) -> usize {
    size.next_multiple_of(HUGE_PAGE)
}

/// A new mapping of `mapped_len(size)` bytes that starts on a huge page's boundary
/// (only whole aligned huge pages can be huge), advised as huge pages.
#[cfg(target_os = "linux")]
fn map(size: usize) -> Option<NonNull<u8>> {
    use rustix::mm::{Advice, MapFlags, ProtFlags, madvise, mmap_anonymous};
    let len = mapped_len(size);
    // One huge page more than needed, so that an aligned start is within it.
    let spare = len.checked_add(HUGE_PAGE)?;
    // SAFETY: a new private anonymous mapping, at an address the kernel picks, aliases nothing.
    let raw =
        unsafe { mmap_anonymous(std::ptr::null_mut(), spare, ProtFlags::READ | ProtFlags::WRITE, MapFlags::PRIVATE) }
            .ok()?;
    let head = raw.addr().next_multiple_of(HUGE_PAGE) - raw.addr();
    // SAFETY: `head < HUGE_PAGE` bytes from the start of the mapping just made.
    let start = unsafe { raw.byte_add(head) };
    // The pages before the aligned start and after its `len` bytes are given back.
    // SAFETY: both ranges are within the mapping just made and outside the block.
    unsafe {
        if head > 0 {
            let _ = rustix::mm::munmap(raw, head);
        }
        // `head < HUGE_PAGE`, so some pages are always left after the block.
        let _ = rustix::mm::munmap(start.byte_add(len), HUGE_PAGE - head);
    }
    // A kernel without transparent huge pages refuses the advice and keeps small
    // pages, which still work.
    // SAFETY: advice on the block's own pages, which nothing else uses.
    let _ = unsafe { madvise(start, len, Advice::LinuxHugepage) };
    NonNull::new(start.cast())
}

#[cfg(not(target_os = "linux"))]
fn map(_size: usize) -> Option<NonNull<u8>> {
    None
}

/// Unmaps a block `map` made for `size` bytes.
fn unmap(start: NonNull<u8>, size: usize) {
    #[cfg(target_os = "linux")]
    // SAFETY: the block's own mapping, of `mapped_len(size)` bytes from `start`,
    // which its owner no longer uses.
    unsafe {
        let _ = rustix::mm::munmap(start.as_ptr().cast(), mapped_len(size));
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, size);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_table_is_mapped_on_a_huge_page_boundary_and_holds_its_entries() {
        let mut map: HugeMap<u64, u64> = HugeMap::default();
        // Grown from a few slots past several huge pages: each growth allocates,
        // copies and frees, through both kinds of block.
        for key in 0..600_000u64 {
            map.insert(key, key * 3);
        }
        assert!(map.allocation_size() >= 4 * HUGE_PAGE);
        assert!((0..600_000u64).all(|key| map.get(&key) == Some(&(key * 3))));
        let layout = Layout::from_size_align(3 * HUGE_PAGE + 1, 64).unwrap();
        let block = HugePages.allocate_zeroed(layout).unwrap();
        if cfg!(target_os = "linux") {
            assert_eq!(block.cast::<u8>().as_ptr().addr() % HUGE_PAGE, 0);
        }
        // SAFETY: the block is `layout.size()` bytes, allocated just above.
        let bytes = unsafe { std::slice::from_raw_parts_mut(block.cast::<u8>().as_ptr(), layout.size()) };
        assert!(bytes.iter().all(|&byte| byte == 0));
        bytes.fill(7);
        // SAFETY: the block and layout `allocate_zeroed` was given.
        unsafe { HugePages.deallocate(block.cast(), layout) };
    }

    #[test]
    fn a_small_block_comes_from_the_global_allocator() {
        let layout = Layout::from_size_align(4096, 8).unwrap();
        assert!(!mapped(layout));
        assert!(!mapped(Layout::from_size_align(HUGE_PAGE, 2 * HUGE_PAGE).unwrap()));
        let block = HugePages.allocate(layout).unwrap();
        // SAFETY: the block and layout `allocate` was given.
        unsafe { HugePages.deallocate(block.cast(), layout) };
    }
}
