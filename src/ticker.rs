//! A closure run every period on a background thread: the heartbeats of leases
//! and claims, and the state and progress files kept fresh while work runs.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

/// Runs a closure every `period` on a background thread until dropped. Used to
/// keep state files fresh.
pub struct Ticker {
    /// Dropped to stop the thread: it wakes at once, rather than at its next
    /// poll, so a finished command does not wait out a sleep.
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    pub fn every<F: FnMut() + Send + 'static>(period: Duration, mut tick: F) -> Ticker {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            loop {
                tick();
                if !still_running(&stopped, period) {
                    return;
                }
            }
        });
        Ticker { stop: Some(stop), thread: Some(thread) }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Waits up to `timeout` on a stop channel, whose sender the owner drops to stop
/// a background thread; false once it is dropped, at once rather than at the
/// next poll.
pub fn still_running(stopped: &Receiver<()>, timeout: Duration) -> bool {
    stopped.recv_timeout(timeout) == Err(RecvTimeoutError::Timeout)
}
