//! Progress reporting: a bar on a terminal; in non-interactive runs (Slurm logs),
//! one line at a steady interval (from the settings: `FERRY_PROGRESS_INTERVAL`).

use std::io::IsTerminal;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::ticker::still_running;

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// A bar when stderr is a terminal, else a line every `line_interval`.
    Auto { line_interval: Duration },
    /// Nothing (`--quiet`, tests).
    Hidden,
}

/// A running report. `snapshot` returns (done, total, line): the position for the
/// bar and the text for log lines. Stops when dropped.
pub struct Reporter {
    /// Dropped to stop the thread, which wakes at once rather than at its next poll.
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Reporter {
    pub fn start<F>(mode: ProgressMode, label: &'static str, snapshot: F) -> Reporter
    where
        F: Fn(Duration) -> (u64, u64, String) + Send + 'static,
    {
        let (stop, stopped) = mpsc::channel();
        let thread = match mode {
            ProgressMode::Hidden => None,
            ProgressMode::Auto { .. } if std::io::stderr().is_terminal() => Some(spawn_bar(stopped, label, snapshot)),
            ProgressMode::Auto { line_interval } => Some(spawn_lines(stopped, label, line_interval, snapshot)),
        };
        Reporter { stop: Some(stop), thread }
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn spawn_bar<F>(stopped: Receiver<()>, label: &'static str, snapshot: F) -> JoinHandle<()>
where
    F: Fn(Duration) -> (u64, u64, String) + Send + 'static,
{
    std::thread::spawn(move || {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{prefix} [{bar:30}] {percent:>3}% {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_prefix(label);
        let started = Instant::now();
        loop {
            let (done, total, line) = snapshot(started.elapsed());
            bar.set_length(total.max(1));
            bar.set_position(done);
            bar.set_message(line);
            if !still_running(&stopped, Duration::from_millis(200)) {
                break;
            }
        }
        bar.finish_and_clear();
    })
}

fn spawn_lines<F>(stopped: Receiver<()>, label: &'static str, interval: Duration, snapshot: F) -> JoinHandle<()>
where
    F: Fn(Duration) -> (u64, u64, String) + Send + 'static,
{
    std::thread::spawn(move || {
        let started = Instant::now();
        while still_running(&stopped, interval) {
            let (_, _, line) = snapshot(started.elapsed());
            eprintln!("{label}: {line}");
        }
    })
}

/// `eta` for `done` out of `total` after `elapsed`, as "1m 20s" (or "?").
pub fn eta(done: u64, total: u64, elapsed: Duration) -> String {
    if done == 0 || total <= done {
        return if total <= done { "0s".into() } else { "?".into() };
    }
    let remaining = elapsed.as_secs_f64() * (total - done) as f64 / done as f64;
    humantime::format_duration(Duration::from_secs(remaining.round() as u64)).to_string()
}

/// A rate per second with an SI prefix: "3.1 M".
pub fn per_second(count: u64, elapsed: Duration) -> String {
    let rate = count as f64 / elapsed.as_secs_f64().max(1e-3);
    si(rate)
}

/// A number with an SI prefix: "3.1 M".
pub fn si(value: f64) -> String {
    match value {
        v if v >= 1e9 => format!("{:.2} G", v / 1e9),
        v if v >= 1e6 => format!("{:.2} M", v / 1e6),
        v if v >= 1e3 => format!("{:.1} k", v / 1e3),
        v => format!("{v:.0} "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_and_rates_read_well() {
        assert_eq!(eta(1, 4, Duration::from_secs(10)), "30s");
        assert_eq!(eta(0, 4, Duration::from_secs(10)), "?");
        assert_eq!(per_second(3_100_000, Duration::from_secs(1)), "3.10 M");
        assert_eq!(si(950.0), "950 ");
    }
}
