//! The daemon's server: accepts connections on a Unix socket and answers requests.
//! Each connection is its own task; a bad, stalled or greedy client only loses
//! its own connections: each user has a bounded number of them and of stagings,
//! file work runs off the async workers under a deadline, and accept errors
//! (out of file descriptors) back off instead of spinning.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as SyncMutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Mutex;

use super::config::{DaemonConfig, Metrics};
use super::protocol::{CacheSummary, MAX_FRAME, NodeStatus, Reply, ReplyBody, Request};
use super::stagings::{RunAs, Stagings};
use crate::fsutil;

/// The running daemon: its settings, its stagings, its counters and connections.
pub struct Daemon {
    pub(super) config: DaemonConfig,
    stagings: Arc<Stagings>,
    pub metrics: Arc<Metrics>,
    started: Instant,
    /// Open connections per uid.
    connections: SyncMutex<HashMap<u32, usize>>,
    /// The last cache summary and when it was made; one refresh at a time.
    summary: Arc<Mutex<Option<(Instant, CacheSummary)>>>,
}

impl Daemon {
    pub fn new(config: DaemonConfig) -> Arc<Daemon> {
        let metrics = Arc::new(Metrics::default());
        let stagings = Stagings::new(config.ferry.clone(), config.limits.clone(), metrics.clone());
        Arc::new(Daemon {
            config,
            stagings,
            metrics,
            started: Instant::now(),
            connections: SyncMutex::new(HashMap::new()),
            summary: Arc::new(Mutex::new(None)),
        })
    }

    pub async fn active_stagings(&self) -> usize {
        self.stagings.running().await
    }

    /// Counts a connection of `uid`, unless it has as many open as allowed.
    fn admit(self: &Arc<Daemon>, uid: u32) -> Option<Admitted> {
        let mut open = self.connections.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(uid).or_default();
        if *count >= self.config.limits.connections_per_user {
            return None;
        }
        *count += 1;
        Some(Admitted { daemon: self.clone(), uid })
    }
}

/// One admitted connection; uncounted when dropped.
struct Admitted {
    daemon: Arc<Daemon>,
    uid: u32,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.daemon.connections.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.uid) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.uid);
            }
        }
    }
}

/// Waits after a failed `accept` (most often: out of file descriptors), doubling
/// up to a second, so a full table costs a few wake-ups a second, not a spin.
pub(super) struct Backoff {
    delay: Duration,
}

impl Backoff {
    pub(super) fn new() -> Backoff {
        Backoff { delay: Duration::ZERO }
    }

    pub(super) fn succeeded(&mut self) {
        self.delay = Duration::ZERO;
    }

    pub(super) async fn failed(&mut self, error: &std::io::Error) {
        if self.delay.is_zero() {
            // Once per run of failures, not once per try.
            tracing::warn!(error = %error, "accept failed; backing off");
        }
        self.delay = (self.delay * 2).clamp(Duration::from_millis(50), Duration::from_secs(1));
        tokio::time::sleep(self.delay).await;
    }
}

/// Serves until `shutdown` completes.
pub async fn run(listener: UnixListener, shutdown: impl Future<Output = ()>, daemon: Arc<Daemon>) {
    tokio::pin!(shutdown);
    let mut backoff = Backoff::new();
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    backoff.succeeded();
                    // Counted here, in accept order, not in the spawned task: tasks
                    // start in any order, and a later connection must not take the
                    // place of one accepted before it.
                    let Ok(peer) = stream.peer_cred() else { continue };
                    let peer = (peer.uid(), peer.gid());
                    let admitted = daemon.admit(peer.0);
                    let daemon = daemon.clone();
                    tokio::spawn(async move { serve_connection(daemon, stream, peer, admitted).await });
                }
                Err(err) => backoff.failed(&err).await,
            },
        }
    }
}

async fn serve_connection(
    daemon: Arc<Daemon>,
    mut stream: UnixStream,
    (uid, gid): (u32, u32),
    admitted: Option<Admitted>,
) {
    let Some(_admitted) = admitted else {
        daemon.metrics.connections_refused.fetch_add(1, Ordering::Relaxed);
        let limit = daemon.config.limits.connections_per_user;
        let reply = Reply::error(format!("uid {uid} has {limit} connections open, the most allowed; close some"));
        let _ = tokio::time::timeout(Duration::from_secs(1), send(&mut stream, &reply)).await;
        return;
    };
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
            let _ = send(&mut writer, &Reply::error(format!("request longer than {MAX_FRAME} bytes; closing"))).await;
            return;
        }
        daemon.metrics.requests.fetch_add(1, Ordering::Relaxed);
        let reply = match serde_json::from_slice::<Request>(&line) {
            Ok(request) => handle(&daemon, request, uid, gid).await,
            Err(err) => {
                daemon.metrics.bad_requests.fetch_add(1, Ordering::Relaxed);
                Reply::error(format!("bad request: {err}"))
            }
        };
        if send(&mut writer, &reply).await.is_err() || !complete {
            return;
        }
    }
}

async fn send(writer: &mut (impl AsyncWriteExt + Unpin), reply: &Reply) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(reply).map_err(std::io::Error::other)?;
    line.push(b'\n');
    writer.write_all(&line).await
}

async fn handle(daemon: &Arc<Daemon>, request: Request, uid: u32, gid: u32) -> Reply {
    let result = match request {
        Request::Status => status(daemon, uid).await.map(|node| Reply { ok: true, body: ReplyBody::Status(node) }),
        Request::Stage { entry, dest, cache, verify, uid: for_uid } => {
            start_staging(daemon, entry, dest, cache, verify, (uid, gid), for_uid).await
        }
        Request::Wait { id } => daemon.stagings.wait(id, uid).await.map(|(staging, ended)| match ended {
            true => {
                let done = staging.phase == super::protocol::StagingPhase::Done;
                Reply::staging(staging, done)
            }
            false => {
                let seconds = daemon.config.limits.longest_wait.as_secs();
                let error = format!("staging {id} is still running after {seconds} s; wait again");
                Reply { ok: false, body: ReplyBody::Error { error, staging: Some(staging) } }
            }
        }),
        Request::Cancel { id } => daemon.stagings.cancel(id, uid).await.map(|staging| Reply::staging(staging, true)),
    };
    result.unwrap_or_else(Reply::error)
}

async fn status(daemon: &Arc<Daemon>, uid: u32) -> Result<NodeStatus, String> {
    let cache = cache_summary(daemon).await?;
    let stagings = daemon.stagings.visible_to(uid).await;
    Ok(NodeStatus {
        host: fsutil::whoami().host.clone(),
        pid: fsutil::whoami().pid,
        uptime_seconds: daemon.started.elapsed().as_secs(),
        cache,
        stagings,
    })
}

/// The cache's summary, at most a second old. Reading manifests is blocking file
/// work on a shared filesystem that may hang: it runs on the blocking pool, one
/// refresh at a time, and a request waits for it at most the status deadline.
async fn cache_summary(daemon: &Arc<Daemon>) -> Result<CacheSummary, String> {
    const FRESH: Duration = Duration::from_secs(1);
    let deadline = daemon.config.limits.status_deadline;
    let unanswered =
        || format!("the cache {} did not answer within {deadline:?}", daemon.config.cache.root().display());
    let mut latest =
        tokio::time::timeout(deadline, daemon.summary.clone().lock_owned()).await.map_err(|_| unanswered())?;
    if let Some((made, summary)) = latest.as_ref()
        && made.elapsed() < FRESH
    {
        return Ok(summary.clone());
    }
    let cache = daemon.config.cache.clone();
    let mut refresh = tokio::task::spawn_blocking(move || {
        let status = crate::status::cache_status(&cache);
        CacheSummary { root: status.cache, totals: status.totals, builds: status.builds.len() }
    });
    match tokio::time::timeout(deadline, &mut refresh).await {
        Ok(Ok(summary)) => {
            *latest = Some((Instant::now(), summary.clone()));
            Ok(summary)
        }
        Ok(Err(err)) => Err(format!("status failed: {err}")),
        Err(_) => {
            // Keep the refresh locked until the filesystem answers, so a hung one
            // holds one blocking thread, not one per request.
            tokio::spawn(async move {
                if let Ok(summary) = refresh.await {
                    *latest = Some((Instant::now(), summary));
                }
            });
            Err(unanswered())
        }
    }
}

/// The primary group of `uid`, from the user database.
fn primary_gid(uid: u32) -> Option<u32> {
    uzers::get_user_by_uid(uid).map(|user| user.primary_group_id())
}

async fn start_staging(
    daemon: &Arc<Daemon>,
    entry: String,
    dest: String,
    cache: Option<String>,
    verify: bool,
    (peer_uid, peer_gid): (u32, u32),
    for_uid: Option<u32>,
) -> Result<Reply, String> {
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
    // Values from the socket end up in logs and command lines: no control characters.
    for (what, value) in [("entry", &entry), ("dest", &dest)].into_iter().chain(cache.iter().map(|c| ("cache", c))) {
        if value.is_empty() || value.chars().any(char::is_control) {
            return Err(format!("{what} {value:?} is empty or has control characters"));
        }
    }
    let cache = cache.map_or_else(|| daemon.config.cache.root().to_path_buf(), PathBuf::from);
    tracing::info!(uid = target_uid, entry = ?entry, dest = ?dest, "staging");
    let run_as = RunAs { uid: target_uid, gid: target_gid };
    let (id, pid) = daemon.stagings.start(entry, dest, &cache, verify, run_as).await?;
    Ok(Reply { ok: true, body: ReplyBody::Started { id, pid } })
}

/// The Prometheus text exposition of the daemon's counters.
pub async fn metrics_text(daemon: &Arc<Daemon>) -> String {
    let m = &daemon.metrics;
    let active = daemon.active_stagings().await;
    let counter = |value: &AtomicU64| value.load(Ordering::Relaxed);
    let lines = [
        ("ferry_requests_total", "counter", "Requests answered.", counter(&m.requests)),
        ("ferry_bad_requests_total", "counter", "Malformed or oversized requests.", counter(&m.bad_requests)),
        ("ferry_stagings_started_total", "counter", "Stagings started.", counter(&m.stagings_started)),
        ("ferry_stagings_active", "gauge", "Stagings running now.", active as u64),
        ("ferry_stagings_failed_total", "counter", "Stagings that failed.", counter(&m.stagings_failed)),
        (
            "ferry_bytes_staged_total",
            "counter",
            "Bytes copied to this node by finished stagings.",
            counter(&m.bytes_staged),
        ),
        (
            "ferry_stagings_already_complete_total",
            "counter",
            "Stagings that found every file already on the node (node cache hits).",
            counter(&m.stagings_already_complete),
        ),
        (
            "ferry_connections_refused_total",
            "counter",
            "Connections refused because their user had the most allowed open.",
            counter(&m.connections_refused),
        ),
    ];
    lines
        .iter()
        .map(|(name, kind, help, value)| format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"))
        .collect()
}
