//! The stagings the daemon runs: each one a `ferry stage` child process under the
//! requesting user's uid, gid and supplementary groups. The task that waits for a
//! child is the only one that signals it, so a cancel never reaches a process that
//! was already reaped (whose pid another process may have by now). Finished
//! stagings are kept a while for `wait` and `status`, then pruned.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::sync::{Mutex, watch};

use super::config::{DaemonLimits, Metrics};
use super::protocol::{Staging, StagingPhase};
use crate::stage::command::{StageCommand, StageSource};

/// What a stager prints to stdout with `--json` is a few hundred bytes.
const MAX_REPORT_BYTES: u64 = 1 << 20;
/// What a failed stager says on stderr, kept for the log.
const MAX_ERROR_BYTES: u64 = 16 << 10;

pub(super) struct Running {
    pub(super) info: Staging,
    /// Becomes true when the staging has ended.
    finished: watch::Receiver<bool>,
    /// Set to ask the staging's watcher to stop it.
    cancel: watch::Sender<bool>,
    ended: Option<Instant>,
}

/// Every staging the daemon started and has not pruned.
#[derive(Default)]
struct Table {
    by_id: BTreeMap<u64, Running>,
}

impl Table {
    /// The stagings `uid` may see: all of them for root, else its own.
    fn visible_to(&self, uid: u32) -> Vec<Staging> {
        self.by_id.values().filter(|s| uid == 0 || s.info.uid == uid).map(|s| s.info.clone()).collect()
    }

    fn running(&self) -> usize {
        self.by_id.values().filter(|s| s.info.phase == StagingPhase::Running).count()
    }

    fn running_for(&self, uid: u32) -> usize {
        self.by_id.values().filter(|s| s.info.uid == uid && s.info.phase == StagingPhase::Running).count()
    }

    /// Forgets finished stagings older than `keep`, and any beyond the newest
    /// `per_user` finished ones of each user.
    fn prune(&mut self, keep: Duration, per_user: usize) {
        self.by_id.retain(|_, s| s.ended.is_none_or(|ended| ended.elapsed() < keep));
        let mut finished_per_user: BTreeMap<u32, usize> = BTreeMap::new();
        let ids: Vec<u64> = self.by_id.keys().rev().copied().collect();
        for id in ids {
            let Some(staging) = self.by_id.get(&id) else { continue };
            if staging.ended.is_some() {
                let count = finished_per_user.entry(staging.info.uid).or_default();
                *count += 1;
                if *count > per_user {
                    self.by_id.remove(&id);
                }
            }
        }
    }
}

/// Who a staging runs as: the requester, or the user root names.
pub(super) struct RunAs {
    pub uid: u32,
    pub gid: u32,
}

/// The daemon's stagings: what runs, what ended, and the limits they keep to.
pub(super) struct Stagings {
    table: Mutex<Table>,
    next_id: AtomicU64,
    /// The `ferry` executable each staging runs.
    ferry: PathBuf,
    limits: DaemonLimits,
    metrics: Arc<Metrics>,
}

impl Stagings {
    pub(super) fn new(ferry: PathBuf, limits: DaemonLimits, metrics: Arc<Metrics>) -> Arc<Stagings> {
        Arc::new(Stagings { table: Mutex::default(), next_id: AtomicU64::new(1), ferry, limits, metrics })
    }

    /// The stagings `uid` may see: all of them for root, else its own.
    pub(super) async fn visible_to(&self, uid: u32) -> Vec<Staging> {
        self.table.lock().await.visible_to(uid)
    }

    pub(super) async fn running(&self) -> usize {
        self.table.lock().await.running()
    }

    /// Starts `ferry stage` as `run_as`; returns its id and pid.
    pub(super) async fn start(
        self: &Arc<Self>,
        entry: String,
        dest: String,
        cache: &Path,
        verify: bool,
        run_as: RunAs,
    ) -> Result<(u64, u32), String> {
        let limits = &self.limits;
        {
            let mut stagings = self.table.lock().await;
            stagings.prune(limits.finished_kept_for, limits.finished_kept_per_user);
            if stagings.running_for(run_as.uid) >= limits.stagings_per_user {
                return Err(format!(
                    "uid {} already has {} stagings running, the most this daemon runs for one user; wait for one to end",
                    run_as.uid, limits.stagings_per_user
                ));
            }
        }
        let stage = StageCommand {
            source: StageSource::Entry { entry: &entry, cache },
            dest: Path::new(&dest),
            verify,
            jobs: None,
            quiet: true,
            json: true,
        };
        let mut command = tokio::process::Command::from(stage.command(&self.ferry));
        as_user(&mut command, &run_as)?;
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let child = command.spawn().map_err(|err| format!("cannot start ferry stage: {err}"))?;
        let pid = child.id().unwrap_or(0);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (done, finished) = watch::channel(false);
        let (cancel, cancelled) = watch::channel(false);
        let info = Staging {
            id,
            entry,
            dest,
            uid: run_as.uid,
            pid,
            phase: StagingPhase::Running,
            exit_code: None,
            bytes_copied: None,
        };
        self.table.lock().await.by_id.insert(id, Running { info, finished, cancel, ended: None });
        self.metrics.stagings_started.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(watch(self.clone(), child, id, done, cancelled));
        Ok((id, pid))
    }

    /// Records how staging `id` ended, from its exit code and its own report.
    async fn record_end(&self, id: u64, code: Option<i32>, copied: Option<u64>, errors: &[u8]) {
        let metrics = &self.metrics;
        let mut stagings = self.table.lock().await;
        let Some(running) = stagings.by_id.get_mut(&id) else { return };
        running.ended = Some(Instant::now());
        running.info.exit_code = code;
        running.info.bytes_copied = copied;
        if running.info.phase != StagingPhase::Cancelled {
            running.info.phase = if code == Some(0) { StagingPhase::Done } else { StagingPhase::Failed };
        }
        if code == Some(0) {
            metrics.bytes_staged.fetch_add(copied.unwrap_or(0), Ordering::Relaxed);
            if copied == Some(0) {
                metrics.stagings_already_complete.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            metrics.stagings_failed.fetch_add(1, Ordering::Relaxed);
            let message = String::from_utf8_lossy(errors);
            tracing::warn!(id, code, error = ?message.trim(), "staging failed");
        }
    }

    /// The staging `id` if `uid` may see it (its owner or root): its end signal.
    async fn authorized(&self, id: u64, uid: u32) -> Result<watch::Receiver<bool>, String> {
        let stagings = self.table.lock().await;
        let running = stagings.by_id.get(&id).ok_or(format!("no staging {id}"))?;
        if uid != 0 && uid != running.info.uid {
            return Err(format!("staging {id} belongs to uid {}", running.info.uid));
        }
        Ok(running.finished.clone())
    }

    /// Waits until staging `id` ends, at most the daemon's wait limit. Returns it,
    /// and whether it ended.
    pub(super) async fn wait(&self, id: u64, uid: u32) -> Result<(Staging, bool), String> {
        let mut finished = self.authorized(id, uid).await?;
        let ended = tokio::time::timeout(self.limits.longest_wait, finished.wait_for(|done| *done)).await.is_ok();
        let stagings = self.table.lock().await;
        let running = stagings.by_id.get(&id).ok_or(format!("no staging {id}"))?;
        Ok((running.info.clone(), ended))
    }

    /// Asks staging `id`'s watcher to stop it; returns it as it stands.
    pub(super) async fn cancel(&self, id: u64, uid: u32) -> Result<Staging, String> {
        self.authorized(id, uid).await?;
        let mut stagings = self.table.lock().await;
        let running = stagings.by_id.get_mut(&id).ok_or(format!("no staging {id}"))?;
        if running.info.phase == StagingPhase::Running {
            running.info.phase = StagingPhase::Cancelled;
            let _ = running.cancel.send(true);
        }
        Ok(running.info.clone())
    }
}

/// Runs the child as `run_as` with the user's supplementary groups. std's own
/// uid switch would clear them (and runs `pre_exec` only after it), so the
/// switch is done here, groups first, then gid, then uid.
fn as_user(command: &mut tokio::process::Command, run_as: &RunAs) -> Result<(), String> {
    let own_uid = rustix::process::getuid().as_raw();
    if own_uid != 0 || run_as.uid == 0 {
        return Ok(());
    }
    let user = uzers::get_user_by_uid(run_as.uid).ok_or(format!("no user with uid {}", run_as.uid))?;
    let groups: Vec<rustix::process::Gid> = uzers::get_user_groups(user.name(), run_as.gid)
        .unwrap_or_default()
        .iter()
        .map(|group| rustix::process::Gid::from_raw(group.gid()))
        .collect();
    use uzers::os::unix::UserExt;
    command.env("HOME", user.home_dir()).env("USER", user.name());
    let (uid, gid) = (rustix::process::Uid::from_raw(run_as.uid), rustix::process::Gid::from_raw(run_as.gid));
    // SAFETY: between fork and exec only async-signal-safe work is allowed: these are
    // three raw system calls on memory prepared before the fork.
    unsafe {
        command.pre_exec(move || {
            rustix::thread::set_thread_groups(&groups)?;
            rustix::thread::set_thread_res_gid(gid, gid, gid)?;
            rustix::thread::set_thread_res_uid(uid, uid, uid)?;
            Ok(())
        });
    }
    Ok(())
}

/// Waits for a staging's child and records how it ended; stops it when asked.
/// Only this task holds the child, so a pid it signals is never one already reaped.
async fn watch(
    stagings: Arc<Stagings>,
    mut child: tokio::process::Child,
    id: u64,
    done: watch::Sender<bool>,
    mut cancelled: watch::Receiver<bool>,
) {
    let (mut stdout, mut stderr) = (child.stdout.take(), child.stderr.take());
    let (mut report, mut errors) = (Vec::new(), Vec::new());
    let read_output = async {
        if let Some(stdout) = stdout.as_mut() {
            let _ = stdout.take(MAX_REPORT_BYTES).read_to_end(&mut report).await;
        }
        if let Some(stderr) = stderr.as_mut() {
            let _ = stderr.take(MAX_ERROR_BYTES).read_to_end(&mut errors).await;
        }
    };
    let status = tokio::select! {
        (_, status) = async { tokio::join!(read_output, child.wait()) } => status,
        _ = async {
            // A closed channel is no request to cancel.
            if cancelled.wait_for(|cancel| *cancel).await.is_err() {
                std::future::pending::<()>().await;
            }
        } => {
            // Still ours and not reaped: SIGTERM lets the stager release its lease.
            if let Some(pid) = child.id().and_then(|pid| rustix::process::Pid::from_raw(pid as i32)) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            child.wait().await
        }
    };
    let code = status.as_ref().ok().and_then(|s| s.code());
    // The stager's own report, never a file in the user's destination: the daemon
    // runs as root, and what a user controls it does not read.
    let copied = serde_json::from_slice::<serde_json::Value>(&report).ok().and_then(|r| r["bytes_copied"].as_u64());
    stagings.record_end(id, code, copied, &errors).await;
    let _ = done.send(true);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staging(id: u64, uid: u32, ended: Option<Duration>) -> Running {
        let (_, finished) = watch::channel(false);
        let (cancel, _) = watch::channel(false);
        let info = Staging {
            id,
            entry: "e".into(),
            dest: "/d".into(),
            uid,
            pid: 1,
            phase: if ended.is_some() { StagingPhase::Done } else { StagingPhase::Running },
            exit_code: None,
            bytes_copied: None,
        };
        Running { info, finished, cancel, ended: ended.map(|ago| Instant::now() - ago) }
    }

    #[test]
    fn pruning_forgets_old_and_surplus_finished_stagings_only() {
        let mut stagings = Table::default();
        stagings.by_id.insert(1, staging(1, 7, Some(Duration::from_secs(3600))));
        for id in 2..=6 {
            stagings.by_id.insert(id, staging(id, 7, Some(Duration::from_secs(1))));
        }
        stagings.by_id.insert(7, staging(7, 7, None));
        stagings.by_id.insert(8, staging(8, 9, Some(Duration::from_secs(1))));
        stagings.prune(Duration::from_secs(600), 3);
        let kept: Vec<u64> = stagings.by_id.keys().copied().collect();
        assert_eq!(kept, [4, 5, 6, 7, 8], "the oldest and the surplus finished go; running ones stay");
        assert_eq!(stagings.visible_to(9).len(), 1);
        assert_eq!(stagings.visible_to(0).len(), 5);
    }
}
