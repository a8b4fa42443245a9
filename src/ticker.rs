//! A closure run every period on a background thread: the heartbeats of leases
//! and claims, and the state and progress files kept fresh while work runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Runs a closure every `period` on a background thread (and once more when
/// stopped), until dropped. Used to keep state files fresh.
pub struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    pub fn every<F: FnMut() + Send + 'static>(period: Duration, mut tick: F) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            loop {
                tick();
                let next = Instant::now() + period;
                while Instant::now() < next {
                    if flag.load(Ordering::Relaxed) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(50).min(period));
                }
            }
        });
        Ticker { stop, thread: Some(thread) }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
