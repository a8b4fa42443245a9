//! A staging's progress as others see it: the state file rewritten while copying,
//! and the progress bar or log lines.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::fsutil;
use crate::progress::{self, ProgressMode, Reporter};
use crate::ticker::Ticker;

use super::StageOptions;
use super::copy::CopyCounters;
use super::plan::StagePlan;
use crate::cache::staging::{self, Phase, StageState};

/// The state a staging of `plan` starts from.
pub fn new_state(plan: &StagePlan, options: &StageOptions, phase: Phase) -> StageState {
    let now = crate::fsutil::now_unix();
    StageState {
        id: plan.id.clone(),
        name: plan.name.clone(),
        source: plan.source_root.display().to_string(),
        phase,
        files_done: 0,
        files_total: plan.files.len() as u64,
        bytes_done: 0,
        bytes_total: plan.files.iter().map(|f| f.size).sum(),
        bytes_copied: 0,
        bytes_per_second: 0.0,
        verify: options.verify,
        pid: fsutil::whoami().pid,
        host: fsutil::whoami().host.clone(),
        job_id: fsutil::whoami().job_id.clone(),
        started_unix: now,
        updated_unix: now,
    }
}

/// Rewrites the state file every half second while copying.
pub(super) fn state_ticker(
    dest: PathBuf,
    mut current: StageState,
    counters: Arc<CopyCounters>,
    files: u64,
    bytes: u64,
) -> Ticker {
    let started = Instant::now();
    Ticker::every(Duration::from_millis(500), move || {
        let copied = counters.bytes_done.load(Ordering::Relaxed);
        current.files_done = files + counters.files_done.load(Ordering::Relaxed);
        current.bytes_done = bytes + copied;
        current.bytes_copied = copied;
        current.bytes_per_second = copied as f64 / started.elapsed().as_secs_f64().max(1e-3);
        current.updated_unix = crate::fsutil::now_unix();
        if let Err(err) = staging::write(&dest, &current) {
            tracing::warn!(error = %err, "cannot update the staging state file");
        }
    })
}

pub(super) fn start_reporter(
    mode: ProgressMode,
    counters: Arc<CopyCounters>,
    files: u64,
    bytes: u64,
    files_before: u64,
    bytes_before: u64,
) -> Reporter {
    Reporter::start(mode, "stage", move |elapsed| {
        let copied = counters.bytes_done.load(Ordering::Relaxed);
        let done = bytes_before + copied;
        let line = format!(
            "{}/{} files, {}/{}, {}B/s, ETA {}",
            files_before + counters.files_done.load(Ordering::Relaxed),
            files,
            bytesize::ByteSize(done),
            bytesize::ByteSize(bytes),
            progress::per_second(copied, elapsed),
            progress::eta(copied, bytes - bytes_before, elapsed),
        );
        (done, bytes, line)
    })
}
