//! The daemon's protocol: one JSON object per line each way, over a Unix stream
//! socket. A request line may be at most `MAX_FRAME` bytes.
//!
//! Requests (`type` selects the kind):
//! - `{"type": "status"}` -> the node: host, cache summary, and the stagings the
//!   daemon runs (all of them for root, the asker's own for anyone else).
//! - `{"type": "stage", "entry": "<fp prefix>", "dest": "<dir>", "cache": "<dir>"?,
//!   "verify": false, "uid": <uid>?}` -> `{"id": n, "pid": p}`; the copy runs as the
//!   requesting user (from the socket's peer credentials); only root may name `uid`.
//! - `{"type": "wait", "id": n}` -> when staging `n` ends: its phase and exit code
//!   (or, past the daemon's wait limit, an error saying it still runs: ask again).
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

impl std::fmt::Display for StagingPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StagingPhase::Running => "running",
            StagingPhase::Done => "done",
            StagingPhase::Failed => "failed",
            StagingPhase::Cancelled => "cancelled",
        })
    }
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

/// What the daemon knows of its cache.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CacheSummary {
    pub root: String,
    pub totals: crate::status::Totals,
    pub builds: usize,
}

/// The answer to `status`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeStatus {
    pub host: String,
    pub pid: u32,
    pub uptime_seconds: u64,
    pub cache: CacheSummary,
    pub stagings: Vec<Staging>,
}

/// Every reply: `ok`, then what was asked for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    #[serde(flatten)]
    pub body: ReplyBody,
}

/// The fields of a reply besides `ok`. Untagged: each kind has fields of its own.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ReplyBody {
    Status(NodeStatus),
    Started {
        id: u64,
        pid: u32,
    },
    /// A refusal or failure; `staging` when it concerns one (a `wait` past its limit).
    Error {
        error: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        staging: Option<Staging>,
    },
    Staging {
        staging: Staging,
    },
}

impl Reply {
    pub fn error(message: impl Into<String>) -> Reply {
        Reply { ok: false, body: ReplyBody::Error { error: message.into(), staging: None } }
    }

    /// A staging as it stands.
    pub fn staging(staging: Staging, ok: bool) -> Reply {
        Reply { ok, body: ReplyBody::Staging { staging } }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_keep_their_wire_shape_and_read_back() {
        let staging = Staging {
            id: 3,
            entry: "abcd".into(),
            dest: "/d".into(),
            uid: 1000,
            pid: 42,
            phase: StagingPhase::Done,
            exit_code: Some(0),
            bytes_copied: Some(10),
        };
        let replies = [
            (Reply { ok: true, body: ReplyBody::Started { id: 3, pid: 42 } }, r#"{"ok":true,"id":3,"pid":42}"#),
            (Reply::error("no staging 9"), r#"{"ok":false,"error":"no staging 9"}"#),
        ];
        for (reply, wire) in replies {
            assert_eq!(serde_json::to_string(&reply).unwrap(), wire);
        }
        let done = serde_json::to_value(Reply::staging(staging, true)).unwrap();
        assert_eq!(done["staging"]["phase"], "done");
        let read: Reply = serde_json::from_value(done).unwrap();
        assert!(matches!(read.body, ReplyBody::Staging { staging } if staging.bytes_copied == Some(10)));
    }
}
