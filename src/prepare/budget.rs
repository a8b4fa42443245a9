//! A build-wide limit on batches in flight (read but not yet written), so memory
//! stays bounded by the thread count whatever the shard sizes and count.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// Batches in flight per worker thread: enough to keep every thread encoding
/// while the reader and the writer run ahead and behind.
const SLOTS_PER_THREAD: usize = 2;

/// Counting semaphore of batch slots shared by every shard of a build.
#[derive(Debug)]
pub struct Budget {
    free: Mutex<usize>,
    freed: Condvar,
}

impl Budget {
    /// Slots for a build running on `threads` worker threads.
    pub fn for_threads(threads: usize) -> Budget {
        Budget::new(SLOTS_PER_THREAD * threads.max(1) + 2)
    }

    pub fn new(slots: usize) -> Budget {
        Budget { free: Mutex::new(slots.max(1)), freed: Condvar::new() }
    }

    /// Takes a slot, waiting for one if needed. A worker thread that waits
    /// runs other queued work meanwhile (often the very batches it is waiting on),
    /// so a reader on a pool thread never leaves its core idle.
    pub fn acquire(&self) -> Slot<'_> {
        loop {
            if self.try_take() {
                return Slot { budget: self };
            }
            if let Some(rayon::Yield::Executed) = rayon::yield_now() {
                continue;
            }
            let free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            if *free == 0 {
                // Timed, so that work queued by others while waiting is picked up.
                let _ = self.freed.wait_timeout(free, Duration::from_millis(1));
            }
        }
    }

    fn try_take(&self) -> bool {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        if *free == 0 {
            return false;
        }
        *free -= 1;
        true
    }
}

/// One batch's place in the budget, given back when dropped (written or discarded).
#[derive(Debug)]
pub struct Slot<'a> {
    budget: &'a Budget,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        *self.budget.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.budget.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_come_back_when_dropped() {
        let budget = Budget::new(2);
        let first = budget.acquire();
        let second = budget.acquire();
        assert!(!budget.try_take());
        drop(first);
        let third = budget.acquire();
        drop((second, third));
        assert!(budget.try_take() && budget.try_take() && !budget.try_take());
    }

    #[test]
    fn a_waiter_gets_the_slot_another_thread_frees() {
        let budget = Budget::new(1);
        let held = budget.acquire();
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| drop(budget.acquire()));
            std::thread::sleep(Duration::from_millis(20));
            drop(held);
            waiter.join().unwrap();
        });
    }
}
