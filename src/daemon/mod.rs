//! `ferry daemon`: the optional per-node agent. It answers status queries and
//! stage requests over a Unix socket (see `protocol`), exports Prometheus
//! metrics on a loopback port, and stops cleanly on SIGTERM. tokio lives here
//! and only here; the layers below are called through `spawn_blocking` or child
//! processes.

pub mod client;
mod config;
pub mod protocol;
pub mod server;
mod stagings;

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::errors::{Failure, Fault};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;

pub use config::{DaemonConfig, DaemonLimits, Metrics};
pub use server::Daemon;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("another ferry daemon answers on {0}; stop it first")]
    AlreadyRunning(PathBuf),
    #[error("{doing} {path}")]
    Io { doing: &'static str, path: PathBuf, source: std::io::Error },
    #[error("metrics address {0} is not a loopback address; metrics are served on 127.0.0.1 or ::1 only")]
    NotLoopback(String),
}

/// Binds the socket: refuses when another daemon answers on it; removes a stale
/// socket file left by a daemon that died. Anyone may connect; requests are
/// authorized by the peer's credentials.
pub fn bind(socket: &Path) -> Result<UnixListener, DaemonError> {
    if socket.exists() {
        if std::os::unix::net::UnixStream::connect(socket).is_ok() {
            return Err(DaemonError::AlreadyRunning(socket.to_path_buf()));
        }
        tracing::info!(socket = %socket.display(), "removing a stale socket");
        std::fs::remove_file(socket).map_err(|source| DaemonError::Io {
            doing: "removing",
            path: socket.to_path_buf(),
            source,
        })?;
    }
    if let Some(parent) = socket.parent() {
        std::fs::create_dir_all(parent).map_err(|source| DaemonError::Io {
            doing: "creating",
            path: parent.to_path_buf(),
            source,
        })?;
    }
    let listener = UnixListener::bind(socket).map_err(|source| DaemonError::Io {
        doing: "binding",
        path: socket.to_path_buf(),
        source,
    })?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o666)).map_err(|source| DaemonError::Io {
        doing: "opening up",
        path: socket.to_path_buf(),
        source,
    })?;
    Ok(listener)
}

/// Runs the daemon until SIGTERM or SIGINT.
pub fn serve(socket: &Path, metrics: Option<&str>, config: DaemonConfig) -> anyhow::Result<()> {
    let metrics_addr = match metrics {
        Some(text) => {
            let addr: SocketAddr = text.parse().map_err(|_| DaemonError::NotLoopback(text.to_string()))?;
            if !addr.ip().is_loopback() {
                return Err(DaemonError::NotLoopback(text.to_string()).into());
            }
            Some(addr)
        }
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(async {
        let listener = bind(socket)?;
        let daemon = Daemon::new(config);
        if let Some(addr) = metrics_addr {
            let listener = tokio::net::TcpListener::bind(addr).await?;
            tokio::spawn(serve_metrics(listener, daemon.clone()));
        }
        tracing::info!(socket = %socket.display(), "ferry daemon listening");
        let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let shutdown = async move {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        };
        server::run(listener, shutdown, daemon).await;
        let _ = std::fs::remove_file(socket);
        tracing::info!("ferry daemon stopped");
        Ok::<(), anyhow::Error>(())
    })
}

/// Minimal HTTP for Prometheus scrapes: any request gets the metrics.
async fn serve_metrics(listener: tokio::net::TcpListener, daemon: Arc<Daemon>) {
    let mut backoff = server::Backoff::new();
    loop {
        let mut stream = match listener.accept().await {
            Ok((stream, _)) => {
                backoff.succeeded();
                stream
            }
            Err(err) => {
                backoff.failed(&err).await;
                continue;
            }
        };
        let daemon = daemon.clone();
        tokio::spawn(async move {
            let mut head = [0u8; 1024];
            let _ = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut head)).await;
            let body = server::metrics_text(&daemon).await;
            let response = format!(
                "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        });
    }
}

/// Every daemon error is about the socket or address the user named.
impl Failure for DaemonError {
    fn fault(&self) -> Fault {
        Fault::User
    }
}
