//! The staging state file in the destination (`<dest>/.ferry/stage-<id>.json`):
//! phase, files and bytes done, rate, pid, host, job id. Rewritten atomically at
//! least every second while staging runs; read by `ferry status` and `ferry wait`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cache::destination::DestLayout;
use crate::fsutil;
use crate::fsutil::untrusted;

/// How far a staging is; a failed one carries why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// `--background` handed over to a detached process that has not started yet.
    Queued,
    Mirroring,
    Copying,
    Done,
    /// The error and its causes as one line.
    Failed {
        error: String,
    },
}

/// A phase as state files and `status --json` write it: two stable fields, `phase`
/// (its name) and `error` (null unless failed).
#[derive(Serialize, Deserialize)]
struct PhaseFields {
    phase: PhaseName,
    error: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum PhaseName {
    Queued,
    Mirroring,
    Copying,
    Done,
    Failed,
}

impl Serialize for Phase {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (phase, error) = match self {
            Phase::Queued => (PhaseName::Queued, None),
            Phase::Mirroring => (PhaseName::Mirroring, None),
            Phase::Copying => (PhaseName::Copying, None),
            Phase::Done => (PhaseName::Done, None),
            Phase::Failed { error } => (PhaseName::Failed, Some(error.clone())),
        };
        PhaseFields { phase, error }.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Phase {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let PhaseFields { phase, error } = PhaseFields::deserialize(deserializer)?;
        Ok(match phase {
            PhaseName::Queued => Phase::Queued,
            PhaseName::Mirroring => Phase::Mirroring,
            PhaseName::Copying => Phase::Copying,
            PhaseName::Done => Phase::Done,
            PhaseName::Failed => Phase::Failed { error: error.unwrap_or_default() },
        })
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::Queued => "queued",
            Phase::Mirroring => "mirroring",
            Phase::Copying => "copying",
            Phase::Done => "done",
            Phase::Failed { .. } => "failed",
        })
    }
}

impl Phase {
    pub fn is_final(&self) -> bool {
        matches!(self, Phase::Done | Phase::Failed { .. })
    }

    /// Why it failed, if it did.
    pub fn error(&self) -> Option<&str> {
        match self {
            Phase::Failed { error } => Some(error),
            _ => None,
        }
    }
}

/// The staging id of `--src` mode starts with this; an entry's is its short fingerprint.
pub const DROP_IN_PREFIX: &str = "dropin-";

/// The staging id of the drop-in files under `src`.
pub fn drop_in_id(src: &Path) -> String {
    format!("{DROP_IN_PREFIX}{}", &blake3::hash(src.as_os_str().as_encoded_bytes()).to_hex()[..16])
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageState {
    /// The entry's short fingerprint, or `dropin-<hash>` for `--src` mode.
    pub id: String,
    pub name: String,
    pub source: String,
    /// `phase` and `error` in the file (see `PhaseFields`).
    #[serde(flatten)]
    pub phase: Phase,
    pub files_done: u64,
    pub files_total: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
    /// Bytes copied by this run (the rest were already there).
    pub bytes_copied: u64,
    pub bytes_per_second: f64,
    pub verify: bool,
    pub pid: u32,
    pub host: String,
    pub job_id: Option<String>,
    pub started_unix: u64,
    pub updated_unix: u64,
}

impl StageState {
    /// Where the staged data is loaded from in `dest`: the entry's directory in
    /// the mirror, or `dest` itself for `--src` mode.
    pub fn loadable_path(&self, dest: &Path) -> PathBuf {
        if self.id.starts_with(DROP_IN_PREFIX) {
            dest.to_path_buf()
        } else {
            DestLayout::new(dest).mirror().entry(&self.id).root().to_path_buf()
        }
    }
}

impl StageState {
    /// Whether the process that owns this state is gone before finishing.
    pub fn owner_died(&self) -> bool {
        !self.phase.is_final() && self.host == fsutil::host_name() && !fsutil::process_alive(self.pid)
    }
}

/// `<dest>/.ferry`, ferry's own files in a destination (never inside an entry).
pub fn control_dir(dest: &Path) -> PathBuf {
    DestLayout::new(dest).control_dir()
}

pub fn state_path(dest: &Path, id: &str) -> PathBuf {
    DestLayout::new(dest).state_file(id)
}

pub fn lock_path(dest: &Path) -> PathBuf {
    DestLayout::new(dest).lock_file()
}

pub fn log_path(dest: &Path, id: &str) -> PathBuf {
    DestLayout::new(dest).log_file(id)
}

pub fn write(dest: &Path, state: &StageState) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(state).map_err(std::io::Error::other)?;
    fsutil::write_atomic_unsynced(&state_path(dest, &state.id), &bytes)
}

/// The largest state file read; ferry's are under 1 KiB plus an error message.
const MAX_STATE_BYTES: u64 = 1 << 20;

/// Reads a state file: only a regular file of bounded size (whoever owns the
/// destination could put a FIFO or a link to `/dev/zero` there).
pub fn read(path: &Path) -> Option<StageState> {
    serde_json::from_slice(&untrusted::read_regular(path, MAX_STATE_BYTES).ok()?).ok()
}

/// Every staging state in a destination.
pub fn read_all(dest: &Path) -> Vec<StageState> {
    let Ok(entries) = std::fs::read_dir(control_dir(dest)) else { return Vec::new() };
    let mut states: Vec<StageState> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("stage-"))
                && p.extension().is_some_and(|e| e == "json")
        })
        .filter_map(|p| read(&p))
        .collect();
    states.sort_by(|a, b| a.id.cmp(&b.id));
    states
}

/// Outcome of waiting for a destination's stagings.
#[derive(Debug)]
pub enum WaitOutcome {
    Done(Vec<StageState>),
    Failed(StageState),
    Nothing,
}

/// Blocks until every staging in `dest` (or only `id`) is done or failed.
/// A staging whose process died before finishing counts as failed.
pub fn wait(dest: &Path, id: Option<&str>, poll: Duration) -> WaitOutcome {
    loop {
        let states: Vec<StageState> =
            read_all(dest).into_iter().filter(|s| id.is_none_or(|id| s.id.starts_with(id))).collect();
        if states.is_empty() {
            return WaitOutcome::Nothing;
        }
        if let Some(failed) = states.iter().find(|s| matches!(s.phase, Phase::Failed { .. })) {
            return WaitOutcome::Failed(failed.clone());
        }
        if let Some(dead) = states.iter().find(|s| s.owner_died()) {
            // The owner may have just finished: read once more before calling it dead.
            match read(&state_path(dest, &dead.id)) {
                Some(latest) if latest.phase.is_final() => continue,
                _ => {
                    let mut failed = dead.clone();
                    let error = format!("the staging process {} on {} died before finishing", dead.pid, dead.host);
                    failed.phase = Phase::Failed { error };
                    return WaitOutcome::Failed(failed);
                }
            }
        }
        if states.iter().all(|s| s.phase == Phase::Done) {
            return WaitOutcome::Done(states);
        }
        std::thread::sleep(poll);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(phase: Phase) -> StageState {
        StageState {
            id: "0123456789abcdef".into(),
            name: "pile".into(),
            source: "/cache/entries/0123456789abcdef".into(),
            phase,
            files_done: 0,
            files_total: 1,
            bytes_done: 0,
            bytes_total: 1,
            bytes_copied: 0,
            bytes_per_second: 0.0,
            verify: false,
            pid: 1,
            host: "node".into(),
            job_id: None,
            started_unix: 0,
            updated_unix: 0,
        }
    }

    #[test]
    fn a_phase_is_written_as_the_documented_phase_and_error_fields() {
        let copying = serde_json::to_value(state(Phase::Copying)).unwrap();
        assert_eq!((&copying["phase"], &copying["error"]), (&"copying".into(), &serde_json::Value::Null));
        let failed = state(Phase::Failed { error: "disk full".into() });
        let written = serde_json::to_value(&failed).unwrap();
        assert_eq!((&written["phase"], &written["error"]), (&"failed".into(), &"disk full".into()));
        let read: StageState = serde_json::from_value(written).unwrap();
        assert_eq!(read.phase, failed.phase);
        assert_eq!(read.phase.error(), Some("disk full"));
    }
}
