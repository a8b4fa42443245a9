//! `ferry gc`: prints what was (or would be) removed and the space freed.

use std::path::Path;

use crate::cache::layout::CacheLayout;
use crate::gc::{self, GcPolicy, GcReport};

pub fn run(
    cache: &CacheLayout,
    dest: Option<&Path>,
    policy: &GcPolicy,
    dry_run: bool,
    as_json: bool,
) -> anyhow::Result<()> {
    let report = match dest {
        Some(dest) => gc::collect_destination(dest, policy, dry_run)?,
        None => gc::collect_cache(cache, policy, dry_run)?,
    };
    if as_json {
        out!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        print_report(&report)?;
    }
    Ok(())
}

fn print_report(report: &GcReport) -> std::io::Result<()> {
    let verb = if report.dry_run { "would remove" } else { "removed" };
    for action in &report.removed {
        let name = if action.name.is_empty() { String::new() } else { format!(" ({})", action.name) };
        out!("{verb} {} {}{name}: {}, {}", action.kind, action.path, bytesize::ByteSize(action.bytes), action.reason)?;
    }
    for short in &report.kept_in_use {
        out!("kept {short}: in use (a live stage or build holds a lease)")?;
    }
    let freed = if report.dry_run { "would free" } else { "freed" };
    out!("{freed} {}; {} remain", bytesize::ByteSize(report.freed_bytes), bytesize::ByteSize(report.remaining_bytes))?;
    Ok(())
}
