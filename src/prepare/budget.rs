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

    /// Takes a slot, waiting for one if needed, running queued work meanwhile
    /// (often the very batches it is waiting on; see `wait_running_queued_work`).
    pub fn acquire(&self) -> Slot<'_> {
        wait_running_queued_work(|wait| {
            if let Some(timeout) = wait {
                let free = self.free.lock().unwrap_or_else(|e| e.into_inner());
                if *free == 0 {
                    let _ = self.freed.wait_timeout(free, timeout);
                }
            }
            // Made only once taken: a dropped `Slot` gives its place back.
            self.try_take().then(|| Slot { budget: self })
        })
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

/// How long a waiting pool thread blocks before it looks for queued work again.
const POLL: Duration = Duration::from_millis(1);

/// Waits for `ready` to give a value, running the pool's queued work meanwhile,
/// so that a pool thread that waits never leaves its core idle. `ready(None)`
/// only looks; once there is no queued work, `ready(Some(timeout))` may block that
/// long. Timed, so that work queued by others meanwhile is picked up.
pub fn wait_running_queued_work<T>(mut ready: impl FnMut(Option<Duration>) -> Option<T>) -> T {
    loop {
        if let Some(value) = ready(None) {
            return value;
        }
        if let Some(rayon::Yield::Executed) = rayon::yield_now() {
            continue;
        }
        if let Some(value) = ready(Some(POLL)) {
            return value;
        }
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

    #[test]
    fn waiting_for_a_slot_adds_none() {
        let budget = Budget::new(1);
        let held = budget.acquire();
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| budget.acquire());
            // Long enough for the waiter to look and wait many times over.
            std::thread::sleep(Duration::from_millis(50));
            drop(held);
            let taken = waiter.join().unwrap();
            assert!(!budget.try_take(), "the one slot is the waiter's");
            drop(taken);
        });
        assert!(budget.try_take() && !budget.try_take(), "one slot, as made");
    }
}
