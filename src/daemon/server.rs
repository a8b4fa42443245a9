//! The daemon's server: accepts connections on a Unix socket, answers requests,
//! runs stagings as child processes under the requesting user's uid/gid.
//! Each connection is its own task; a bad or stalled client only loses its own
//! connection.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Mutex, watch};

use uzers::os::unix::UserExt;

use super::protocol::{MAX_FRAME, Request, Staging, StagingPhase, error_reply};
use crate::cache::layout::CacheLayout;
use crate::fsutil;
use crate::stage::command::{StageCommand, StageSource};

/// What the server needs to know.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    pub cache: PathBuf,
    /// The `ferry` executable stagings run.
    pub ferry: PathBuf,
    /// A connection silent for this long is closed.
    pub idle_timeout: Duration,
}

/// Counters exported as Prometheus metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    pub requests: AtomicU64,
    pub bad_requests: AtomicU64,
    pub stagings_started: AtomicU64,
    pub stagings_failed: AtomicU64,
    pub bytes_staged: AtomicU64,
    /// Stagings that found every file already on the node.
    pub stagings_already_complete: AtomicU64,
}

struct Running {
    info: Staging,
    finished: watch::Receiver<bool>,
}

pub struct Daemon {
    config: DaemonConfig,
    stagings: Mutex<BTreeMap<u64, Running>>,
    next_id: AtomicU64,
    pub metrics: Metrics,
    started: Instant,
}

impl Daemon {
    pub fn new(config: DaemonConfig) -> Arc<Daemon> {
        Arc::new(Daemon {
            config,
            stagings: Mutex::new(BTreeMap::new()),
            next_id: AtomicU64::new(1),
            metrics: Metrics::default(),
            started: Instant::now(),
        })
    }

    pub async fn active_stagings(&self) -> usize {
        self.stagings.lock().await.values().filter(|s| s.info.phase == StagingPhase::Running).count()
    }
}

/// Serves until `shutdown` completes.
pub async fn run(listener: UnixListener, shutdown: impl Future<Output = ()>, daemon: Arc<Daemon>) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let daemon = daemon.clone();
                    tokio::spawn(async move { serve_connection(daemon, stream).await });
                }
                Err(err) => tracing::warn!(error = %err, "accept failed"),
            },
        }
    }
}

async fn serve_connection(daemon: Arc<Daemon>, stream: UnixStream) {
    let Ok(peer) = stream.peer_cred() else { return };
    let (uid, gid) = (peer.uid(), peer.gid());
    let (reader, mut writer) = stream.into_split();
    let mut reader = BufReader::new(reader);
    loop {
        let mut line = Vec::new();
        let mut limited = (&mut reader).take(MAX_FRAME as u64 + 1);
        let read = match tokio::time::timeout(daemon.config.idle_timeout, limited.read_until(b'\n', &mut line)).await {
            Ok(Ok(read)) => read,
            // Silent for too long, or a broken connection.
            Err(_) | Ok(Err(_)) => return,
        };
        if read == 0 {
            return;
        }
        let complete = line.ends_with(b"\n");
        if !complete && line.len() > MAX_FRAME {
            daemon.metrics.bad_requests.fetch_add(1, Ordering::Relaxed);
            let reply = error_reply(format!("request longer than {MAX_FRAME} bytes; closing"));
            let _ = writer.write_all(format!("{reply}\n").as_bytes()).await;
            return;
        }
        daemon.metrics.requests.fetch_add(1, Ordering::Relaxed);
        let reply = match serde_json::from_slice::<Request>(&line) {
            Ok(request) => handle(&daemon, request, uid, gid).await,
            Err(err) => {
                daemon.metrics.bad_requests.fetch_add(1, Ordering::Relaxed);
                error_reply(format!("bad request: {err}"))
            }
        };
        if writer.write_all(format!("{reply}\n").as_bytes()).await.is_err() || !complete {
            return;
        }
    }
}

async fn handle(daemon: &Arc<Daemon>, request: Request, uid: u32, gid: u32) -> Value {
    match request {
        Request::Status => status(daemon).await,
        Request::Stage { entry, dest, cache, verify, uid: for_uid } => {
            match start_staging(daemon, entry, dest, cache, verify, uid, gid, for_uid).await {
                Ok(reply) => reply,
                Err(message) => error_reply(message),
            }
        }
        Request::Wait { id } => wait(daemon, id, uid).await,
        Request::Cancel { id } => cancel(daemon, id, uid).await,
    }
}

async fn status(daemon: &Arc<Daemon>) -> Value {
    let cache = CacheLayout::new(&daemon.config.cache);
    // Reading manifests is blocking file I/O: keep it off the async workers.
    let summary = tokio::task::spawn_blocking(move || crate::status::cache_status(&cache)).await;
    let stagings: Vec<Staging> = daemon.stagings.lock().await.values().map(|s| s.info.clone()).collect();
    match summary {
        Ok(summary) => json!({
            "ok": true,
            "host": fsutil::host_name(),
            "pid": std::process::id(),
            "uptime_seconds": daemon.started.elapsed().as_secs(),
            "cache": {"root": summary.cache, "totals": summary.totals, "builds": summary.builds.len()},
            "stagings": stagings,
        }),
        Err(err) => error_reply(format!("status failed: {err}")),
    }
}

/// The primary group of `uid`, from the user database.
fn primary_gid(uid: u32) -> Option<u32> {
    uzers::get_user_by_uid(uid).map(|user| user.primary_group_id())
}

#[allow(clippy::too_many_arguments)]
async fn start_staging(
    daemon: &Arc<Daemon>,
    entry: String,
    dest: String,
    cache: Option<String>,
    verify: bool,
    peer_uid: u32,
    peer_gid: u32,
    for_uid: Option<u32>,
) -> Result<Value, String> {
    let target_uid = for_uid.unwrap_or(peer_uid);
    if target_uid != peer_uid && peer_uid != 0 {
        return Err(format!(
            "uid {peer_uid} may not stage for uid {target_uid}: only root may ask on behalf of another user"
        ));
    }
    let target_gid = if target_uid == peer_uid {
        peer_gid
    } else {
        primary_gid(target_uid).ok_or(format!("no user with uid {target_uid}"))?
    };
    let own_uid = rustix::process::getuid().as_raw();
    if own_uid != 0 && target_uid != own_uid {
        return Err(format!("this daemon runs as uid {own_uid} and cannot stage for uid {target_uid}"));
    }
    if !dest.starts_with('/') {
        return Err("dest must be an absolute path".into());
    }
    let cache = cache.map_or_else(|| daemon.config.cache.clone(), PathBuf::from);
    let stage = StageCommand {
        source: StageSource::Entry { entry: &entry, cache: &cache },
        dest: Path::new(&dest),
        verify,
        jobs: None,
        quiet: true,
    };
    let mut command = tokio::process::Command::new(&daemon.config.ferry);
    command.args(stage.args());
    if own_uid == 0 && target_uid != 0 {
        command.uid(target_uid).gid(target_gid);
        if let Some(user) = uzers::get_user_by_uid(target_uid) {
            command.env("HOME", user.home_dir()).env("USER", user.name());
        }
    }
    command.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
    let child = command.spawn().map_err(|err| format!("cannot start ferry stage: {err}"))?;
    let pid = child.id().unwrap_or(0);
    let id = daemon.next_id.fetch_add(1, Ordering::Relaxed);
    let (done, finished) = watch::channel(false);
    let info = Staging {
        id,
        entry: entry.clone(),
        dest: dest.clone(),
        uid: target_uid,
        pid,
        phase: StagingPhase::Running,
        exit_code: None,
        bytes_copied: None,
    };
    daemon.stagings.lock().await.insert(id, Running { info, finished });
    daemon.metrics.stagings_started.fetch_add(1, Ordering::Relaxed);
    tokio::spawn(watch_staging(daemon.clone(), child, id, entry, dest, done));
    Ok(json!({"ok": true, "id": id, "pid": pid}))
}

/// Waits for a started stage and records how it ended.
async fn watch_staging(
    daemon: Arc<Daemon>,
    mut child: tokio::process::Child,
    id: u64,
    entry: String,
    dest: String,
    done: watch::Sender<bool>,
) {
    let daemon_for_child = daemon;
    let mut stderr = child.stderr.take();
    let mut errors = Vec::new();
    if let Some(stderr) = stderr.as_mut() {
        let _ = stderr.take(16 * 1024).read_to_end(&mut errors).await;
    }
    let status = child.wait().await;
    let code = status.as_ref().ok().and_then(|s| s.code());
    let copied = crate::cache::staging::read_all(std::path::Path::new(&dest))
        .into_iter()
        .find(|s| entry.starts_with(&s.id) || s.id.starts_with(&entry))
        .map(|s| s.bytes_copied);
    let metrics = &daemon_for_child.metrics;
    let mut stagings = daemon_for_child.stagings.lock().await;
    if let Some(running) = stagings.get_mut(&id) {
        let cancelled = running.info.phase == StagingPhase::Cancelled;
        running.info.exit_code = code;
        running.info.bytes_copied = copied;
        if !cancelled {
            running.info.phase = if code == Some(0) { StagingPhase::Done } else { StagingPhase::Failed };
        }
        if code == Some(0) {
            metrics.bytes_staged.fetch_add(copied.unwrap_or(0), Ordering::Relaxed);
            if copied == Some(0) {
                metrics.stagings_already_complete.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            metrics.stagings_failed.fetch_add(1, Ordering::Relaxed);
            let message = String::from_utf8_lossy(&errors);
            tracing::warn!(id, code, error = %message.trim(), "staging failed");
        }
    }
    let _ = done.send(true);
}

async fn authorized(daemon: &Arc<Daemon>, id: u64, uid: u32) -> Result<watch::Receiver<bool>, String> {
    let stagings = daemon.stagings.lock().await;
    let running = stagings.get(&id).ok_or(format!("no staging {id}"))?;
    if uid != 0 && uid != running.info.uid {
        return Err(format!("staging {id} belongs to uid {}", running.info.uid));
    }
    Ok(running.finished.clone())
}

async fn wait(daemon: &Arc<Daemon>, id: u64, uid: u32) -> Value {
    let mut finished = match authorized(daemon, id, uid).await {
        Ok(finished) => finished,
        Err(message) => return error_reply(message),
    };
    while !*finished.borrow() {
        if finished.changed().await.is_err() {
            break;
        }
    }
    let stagings = daemon.stagings.lock().await;
    match stagings.get(&id) {
        Some(running) => json!({"ok": running.info.phase == StagingPhase::Done, "staging": running.info}),
        None => error_reply(format!("no staging {id}")),
    }
}

async fn cancel(daemon: &Arc<Daemon>, id: u64, uid: u32) -> Value {
    if let Err(message) = authorized(daemon, id, uid).await {
        return error_reply(message);
    }
    let mut stagings = daemon.stagings.lock().await;
    let Some(running) = stagings.get_mut(&id) else { return error_reply(format!("no staging {id}")) };
    if running.info.phase != StagingPhase::Running {
        return json!({"ok": true, "staging": running.info});
    }
    running.info.phase = StagingPhase::Cancelled;
    if let Some(pid) = rustix::process::Pid::from_raw(running.info.pid as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    json!({"ok": true, "staging": running.info})
}

/// The Prometheus text exposition of the daemon's counters.
pub async fn metrics_text(daemon: &Arc<Daemon>) -> String {
    let m = &daemon.metrics;
    let active = daemon.active_stagings().await;
    let lines = [
        ("ferry_requests_total", "counter", "Requests answered.", m.requests.load(Ordering::Relaxed)),
        (
            "ferry_bad_requests_total",
            "counter",
            "Malformed or oversized requests.",
            m.bad_requests.load(Ordering::Relaxed),
        ),
        ("ferry_stagings_started_total", "counter", "Stagings started.", m.stagings_started.load(Ordering::Relaxed)),
        ("ferry_stagings_active", "gauge", "Stagings running now.", active as u64),
        ("ferry_stagings_failed_total", "counter", "Stagings that failed.", m.stagings_failed.load(Ordering::Relaxed)),
        (
            "ferry_bytes_staged_total",
            "counter",
            "Bytes copied to this node by finished stagings.",
            m.bytes_staged.load(Ordering::Relaxed),
        ),
        (
            "ferry_stagings_already_complete_total",
            "counter",
            "Stagings that found every file already on the node (node cache hits).",
            m.stagings_already_complete.load(Ordering::Relaxed),
        ),
    ];
    lines
        .iter()
        .map(|(name, kind, help, value)| format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"))
        .collect()
}
