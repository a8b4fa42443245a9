//! The daemon's protocol: one JSON object per line each way, over a Unix stream
//! socket. A request line may be at most `MAX_FRAME` bytes.
//!
//! Requests (`type` selects the kind):
//! - `{"type": "status"}` -> the node: host, cache summary, stagings the daemon runs.
//! - `{"type": "stage", "entry": "<fp prefix>", "dest": "<dir>", "cache": "<dir>"?,
//!   "verify": false, "uid": <uid>?}` -> `{"id": n, "pid": p}`; the copy runs as the
//!   requesting user (from the socket's peer credentials); only root may name `uid`.
//! - `{"type": "wait", "id": n}` -> when staging `n` ends: its phase and exit code.
//! - `{"type": "cancel", "id": n}` -> stops staging `n` (its owner or root).
//!
//! Every reply has `"ok": true|false`; failures carry `"error"`.

use serde::{Deserialize, Serialize};

/// Longest request line accepted; a longer one gets an error and the connection closes.
pub const MAX_FRAME: usize = 64 * 1024;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    Status,
    Stage {
        entry: String,
        dest: String,
        #[serde(default)]
        cache: Option<String>,
        #[serde(default)]
        verify: bool,
        #[serde(default)]
        uid: Option<u32>,
    },
    Wait {
        id: u64,
    },
    Cancel {
        id: u64,
    },
}

/// Where a staging the daemon started stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StagingPhase {
    Running,
    Done,
    Failed,
    Cancelled,
}

/// A staging the daemon started.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Staging {
    pub id: u64,
    pub entry: String,
    pub dest: String,
    pub uid: u32,
    pub pid: u32,
    pub phase: StagingPhase,
    pub exit_code: Option<i32>,
    pub bytes_copied: Option<u64>,
}

pub fn error_reply(message: impl Into<String>) -> serde_json::Value {
    serde_json::json!({"ok": false, "error": message.into()})
}
