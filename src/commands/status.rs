//! `ferry status`: a table of entries and builds, and this node's staging.

use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use anyhow::Context;
use serde_json::json;

use crate::cache::layout::CacheLayout;
use crate::cache::manifest::EntryKind;
use crate::cache::staging::StageState;
use crate::daemon::protocol::{Reply, ReplyBody};
use crate::status::{self, CacheStatus, EntryState, EntryStatus};

/// `dest_named`: the destination was given with `--dest`, so a missing one is a
/// wrong path rather than a node where nothing was staged yet.
pub fn run(
    cache: &CacheLayout,
    dest: Option<PathBuf>,
    dest_named: bool,
    socket: &Path,
    as_json: bool,
) -> anyhow::Result<()> {
    if let Some(dest) = dest.as_ref().filter(|_| dest_named) {
        // A cache that does not exist yet is empty, but a named destination that does not exist is a wrong path.
        std::fs::metadata(dest).with_context(|| format!("reading the staging state of {}", dest.display()))?;
    }
    let report = status::cache_status(cache);
    let staging = dest.as_deref().map(status::staging).unwrap_or_default();
    // The node's daemon, when one answers quickly.
    let daemon = socket
        .exists()
        .then(|| {
            crate::daemon::client::request(socket, &json!({"type": "status"}), Some(Duration::from_millis(500))).ok()
        })
        .flatten()
        .and_then(|reply| serde_json::from_value::<Reply>(reply).ok())
        .and_then(|reply| match reply.body {
            ReplyBody::Status(node) => Some(node),
            _ => None,
        });
    if as_json {
        let value = json!({
            "cache": report.cache,
            "entries": report.entries,
            "builds": report.builds,
            "totals": report.totals,
            "dest": dest,
            "staging": staging,
            "daemon": daemon,
        });
        out!("{}", serde_json::to_string_pretty(&value)?)?;
    } else {
        print_cache(&report)?;
        if let Some(dest) = &dest {
            print_staging(dest, &staging)?;
        }
        if let Some(daemon) = &daemon {
            out!("\ndaemon on {} (pid {}, up {} s)", daemon.host, daemon.pid, daemon.uptime_seconds)?;
            for s in &daemon.stagings {
                out!("  staging {} of {} into {} for uid {}: {}", s.id, s.entry, s.dest, s.uid, s.phase)?;
            }
        }
    }
    Ok(())
}

/// "2026-11-22 05:40" in UTC.
fn date(unix: u64) -> String {
    let text = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(unix)).to_string();
    text.get(..16).unwrap_or(&text).replace('T', " ")
}

fn print_cache(report: &CacheStatus) -> std::io::Result<()> {
    out!("cache {}", report.cache)?;
    if report.entries.is_empty() && report.builds.is_empty() {
        out!("  (empty)")?;
    }
    if !report.entries.is_empty() {
        out!(
            "{:<24} {:<16} {:<24} {:<18} {:>10} {:>14} {:>10}  {:<16}  {:<16}  STATE",
            "NAME",
            "FINGERPRINT",
            "KIND",
            "SPLITS",
            "ROWS",
            "TOKENS",
            "SIZE",
            "CREATED (UTC)",
            "LAST USED (UTC)"
        )?;
    }
    for e in &report.entries {
        let state = match (e.state, e.in_use) {
            (EntryState::Ready, 0) => "ready".to_string(),
            (EntryState::Ready, n) => format!("ready, in use ({n})"),
            (EntryState::Invalid, _) => format!("invalid: {}", e.problem.as_deref().unwrap_or("")),
        };
        out!(
            "{:<24} {:<16} {:<24} {:<18} {:>10} {:>14} {:>10}  {:<16}  {:<16}  {}",
            e.name,
            e.short,
            kind(e),
            e.splits.join(","),
            e.rows,
            e.tokens,
            bytesize::ByteSize(e.bytes).to_string(),
            date(e.created_unix),
            date(e.last_used_unix),
            state
        )?;
    }
    for b in &report.builds {
        let who = if b.builders.is_empty() { "no live builder".to_string() } else { b.builders.join(", ") };
        out!(
            "{:<24} {:<16} {} {}/{} shards ({}), updated {}",
            b.name,
            b.short,
            b.state,
            b.shards_done,
            b.shards_total,
            who,
            date(b.updated_unix)
        )?;
    }
    let t = &report.totals;
    out!(
        "total: {} entries ({} token stores, {} views), {} tokens in views' rows, {}; {} builds",
        t.entries,
        t.token_stores,
        t.entries - t.token_stores,
        t.tokens,
        bytesize::ByteSize(t.bytes),
        t.builds
    )?;
    Ok(())
}

/// "tokens", "view of <store>" (marked when the store is gone), or "entry" for one
/// made before token stores.
fn kind(entry: &EntryStatus) -> String {
    if !entry.mixture_of.is_empty() {
        let stores: Vec<String> = entry
            .mixture_of
            .iter()
            .map(|store| {
                let short = store.fingerprint.get(..16).unwrap_or(&store.fingerprint);
                if store.present { short.to_string() } else { format!("{short} (gone)") }
            })
            .collect();
        return format!("mixture of {}", stores.join(", "));
    }
    match (entry.kind, &entry.token_store, entry.token_store_present) {
        (EntryKind::Tokens, _, _) => "tokens".into(),
        (EntryKind::View, Some(store), Some(false)) => format!("view of {} (gone)", &store[..16]),
        (EntryKind::View, Some(store), _) => format!("view of {}", &store[..16]),
        (EntryKind::View, None, _) => "entry".into(),
    }
}

fn print_staging(dest: &Path, staging: &[StageState]) -> std::io::Result<()> {
    out!("\nstaging into {}", dest.display())?;
    if staging.is_empty() {
        out!("  (nothing staged)")?;
    }
    for s in staging {
        let percent = if s.bytes_total == 0 { 100.0 } else { 100.0 * s.bytes_done as f64 / s.bytes_total as f64 };
        out!(
            "  {:<24} {:<16} {}: {}/{} files, {}/{} ({percent:.0}%), {}/s, pid {} on {}{}",
            s.name,
            s.id,
            s.phase,
            s.files_done,
            s.files_total,
            bytesize::ByteSize(s.bytes_done),
            bytesize::ByteSize(s.bytes_total),
            bytesize::ByteSize(s.bytes_per_second as u64),
            s.pid,
            s.host,
            s.phase.error().map(|e| format!(": {e}")).unwrap_or_default()
        )?;
    }
    Ok(())
}
