//! Where a pre-tokenizer's pieces go: a leaf module, so that the scanners and
//! the pre-tokenizer that calls them can both name it.

/// What a text's pre-tokens go to, as byte ranges in order. Any `FnMut(usize,
/// usize)` is one. The encoder's own is a type whose method is always inlined:
/// LLVM kept a closure's body out of line, as a call with its own prologue for
/// every piece, where the common case is a few instructions.
pub trait PieceSink {
    fn take(&mut self, start: usize, end: usize);

    /// The pieces from `start` to `base` plus the place of each bit of `ends`,
    /// from the lowest, each ending where the next starts; returns the last end.
    #[inline(always)]
    fn take_run(&mut self, mut start: usize, base: usize, mut ends: u64) -> usize {
        while ends != 0 {
            let end = base + ends.trailing_zeros() as usize;
            ends &= ends - 1;
            self.take(start, end);
            start = end;
        }
        start
    }
}

impl<F: FnMut(usize, usize)> PieceSink for F {
    #[inline(always)]
    fn take(&mut self, start: usize, end: usize) {
        self(start, end)
    }
}
