//! `ferry daemon` (serve the node's socket) and `ferry request` (ask it once).

use std::path::PathBuf;

use crate::cache::layout::CacheLayout;
use crate::cli::DaemonArgs;
use crate::daemon::{DaemonConfig, DaemonLimits};
use crate::settings::Settings;

use super::UserError;

pub fn serve(settings: &Settings, cache: CacheLayout, args: DaemonArgs) -> anyhow::Result<()> {
    let limits = DaemonLimits {
        connections_per_user: args.connections_per_user,
        stagings_per_user: args.stagings_per_user,
        longest_wait: args.longest_wait,
        ..Default::default()
    };
    let config = DaemonConfig { cache, ferry: std::env::current_exe()?, idle_timeout: args.idle_timeout, limits };
    let metrics = settings.metrics(args.metrics).map(|s| s.value);
    crate::daemon::serve(&settings.socket(args.socket).value, metrics.as_deref(), config)
}

/// Sends one JSON request, prints the reply, and fails when the daemon refused.
pub fn request(settings: &Settings, json: &str, socket: Option<PathBuf>) -> anyhow::Result<()> {
    let request: serde_json::Value =
        serde_json::from_str(json).map_err(|err| UserError(format!("the request is not JSON: {err}")))?;
    let socket = settings.socket(socket).value;
    let reply = crate::daemon::client::request(&socket, &request, None)
        .map_err(|err| UserError(format!("no answer from a ferry daemon on {}: {err}", socket.display())))?;
    out!("{reply}")?;
    if reply["ok"] != true {
        anyhow::bail!(UserError(format!("the daemon refused: {}", reply["error"].as_str().unwrap_or("see the reply"))));
    }
    Ok(())
}
