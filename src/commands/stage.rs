//! `ferry stage` and `ferry wait`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};

use super::UserError;
use crate::cache::destination::DestLayout;
use crate::cache::layout::CacheLayout;
use crate::cache::staging::{self, Phase, WaitOutcome};
use crate::mixture::{self, AnySpec};
use crate::prepare;
use crate::progress::ProgressMode;
use crate::stage::command::{StageCommand, StageSource};
use crate::stage::{self, PlanKind, StageOptions, StagePlan, StageReport};

/// What to stage, as the flags name it.
pub enum StageTarget {
    /// `--src DIR --files-from LIST`: files of an existing cache directory.
    DropIn { src: PathBuf, files_from: PathBuf },
    /// `--entry FINGERPRINT`: a published entry, by fingerprint prefix.
    Entry(String),
    /// `SPEC`: the published entry of a spec.
    Spec(PathBuf),
}

impl StageTarget {
    /// The target the flags name: drop-in when both `--src` and `--files-from` are given,
    /// else `--entry`, else the spec.
    pub fn from_flags(
        spec: Option<PathBuf>,
        entry: Option<String>,
        src: Option<PathBuf>,
        files_from: Option<PathBuf>,
    ) -> anyhow::Result<StageTarget> {
        Ok(match (src, files_from, entry, spec) {
            (Some(src), Some(files_from), _, _) => StageTarget::DropIn { src, files_from },
            (_, _, Some(entry), _) => StageTarget::Entry(entry),
            (_, _, None, Some(spec)) => StageTarget::Spec(spec),
            _ => bail!(UserError("a spec, --entry or --src with --files-from is required".into())),
        })
    }
}

/// A resolved `ferry stage`.
pub struct StageRequest {
    pub target: StageTarget,
    pub verify: bool,
    pub background: bool,
    /// Send the files to the job's nodes instead of staging here.
    pub broadcast: bool,
    pub json: bool,
}

pub fn run(
    request: StageRequest,
    cache: &CacheLayout,
    dest: PathBuf,
    jobs: usize,
    progress: ProgressMode,
) -> anyhow::Result<()> {
    let plan = match &request.target {
        StageTarget::DropIn { src, files_from } => stage::plan_drop_in(src, &read_list(files_from)?, &dest, jobs)?,
        StageTarget::Entry(prefix) => {
            stage::plan_entry(cache, &crate::cache::lookup::find_entry(cache, prefix)?, &dest)?
        }
        StageTarget::Spec(spec_path) => plan_spec(cache, spec_path, &dest)?,
    };
    let options = StageOptions { dest: dest.clone(), jobs, verify: request.verify, progress };
    if let PlanKind::Entry { .. } = plan.kind {
        prepare::mark_used(cache, &plan.id);
    }
    if request.background {
        return start_background(&plan, &options, cache);
    }
    if request.broadcast {
        return broadcast(&plan, &dest, request.json);
    }
    let report = stage::stage(&plan, &options).with_context(|| format!("staging into {}", dest.display()))?;
    if request.json {
        out!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        print_report(&report)?;
    }
    Ok(())
}

/// `--broadcast`: sends the entry to every node of the job, under a lease so gc
/// keeps it meanwhile.
fn broadcast(plan: &StagePlan, dest: &Path, json: bool) -> anyhow::Result<()> {
    let pack_below = match std::env::var("FERRY_BROADCAST_PACK_BELOW") {
        Ok(text) => parse_size::parse_size(&text).map_err(|err| {
            UserError(format!("FERRY_BROADCAST_PACK_BELOW={text:?}: {err}; write a size such as 16MiB"))
        })?,
        Err(_) => stage::broadcast::PACK_BELOW,
    };
    let _lease = stage::take_lease(plan, "broadcast")?;
    let report = stage::broadcast::send(plan, dest, pack_below)
        .with_context(|| format!("broadcasting {} ({}) to the job's nodes", plan.name, plan.id))?;
    if json {
        out!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        out!(
            "sent {} ({}) to every node of the job: {} files ({} packed), {} in {} sbcast call(s), {:.2} s",
            report.name,
            report.id,
            report.files,
            report.files_packed,
            bytesize::ByteSize(report.bytes),
            report.sbcast_calls,
            report.seconds
        )?;
        out!("arrived in {}; `srun --ntasks-per-node=1 ferry stage` lands it on each node", report.incoming.display())?;
    }
    Ok(())
}

/// The plan for a spec's published entry; a spec not prepared yet is the user's to prepare.
fn plan_spec(cache: &CacheLayout, spec_path: &Path, dest: &Path) -> anyhow::Result<StagePlan> {
    let fingerprint = match AnySpec::load(spec_path)? {
        AnySpec::Pipeline(spec) => prepare::locate(&spec, cache)?.view,
        AnySpec::Mixture(mixture) => mixture::locate(&mixture, cache)?.fingerprint,
    };
    let Some((_, manifest)) = prepare::published(cache, &fingerprint)? else {
        bail!(UserError(format!(
            "the entry of {} ({}) is not in {}; run `ferry prepare {}` first",
            spec_path.display(),
            fingerprint.short(),
            cache.root().display(),
            spec_path.display()
        )));
    };
    Ok(stage::plan_entry(cache, &manifest, dest)?)
}

fn read_list(path: &Path) -> anyhow::Result<String> {
    let mut text = String::new();
    if path == Path::new("-") {
        std::io::stdin().read_to_string(&mut text).context("reading --files-from from stdin")?;
    } else {
        text = fs_err::read_to_string(path)?;
    }
    Ok(text)
}

/// Mirrors now, then leaves the copy to a detached `ferry stage` that takes the
/// destination lock as soon as this process releases it.
fn start_background(plan: &StagePlan, options: &StageOptions, cache: &CacheLayout) -> anyhow::Result<()> {
    let dest = &options.dest;
    let lock = stage::lock_destination(dest)?;
    let missing: Vec<&str> = stage::pending_files(plan, options.verify).iter().map(|f| f.relative.as_str()).collect();
    stage::build_mirror(plan, dest, &missing)?;
    let exe = std::env::current_exe().context("finding the ferry executable")?;
    let cache_root = std::path::absolute(cache.root())?;
    let list_path = DestLayout::new(dest).files_list(&plan.id);
    let source = match &plan.kind {
        PlanKind::Entry { .. } => StageSource::Entry { entry: &plan.id, cache: &cache_root },
        PlanKind::DropIn => {
            let list: String = plan.files.iter().map(|f| format!("{}\n", f.relative)).collect();
            crate::fsutil::write_atomic(&list_path, list.as_bytes())?;
            StageSource::DropIn { src: &plan.source_root, files_from: &list_path }
        }
    };
    let stage =
        StageCommand { source, dest, verify: options.verify, jobs: Some(options.jobs), quiet: false, json: false };
    let mut child = stage.command(&exe);
    let log_path = staging::log_path(dest, &plan.id);
    let log = fs_err::File::create(&log_path)?;
    use std::os::unix::process::CommandExt;
    let spawned = child
        .stdin(Stdio::null())
        .stdout(log.try_clone()?.into_parts().0)
        .stderr(log.into_parts().0)
        // Its own process group: a Ctrl-C on the terminal does not stop the copy.
        .process_group(0)
        .spawn()
        .context("starting the background copy")?;
    let mut queued = stage::new_state(plan, options, Phase::Queued);
    queued.pid = spawned.id();
    staging::write(dest, &queued)?;
    drop(lock);
    out!("mirror ready: {}", plan.dest_root.display())?;
    out!(
        "copying in the background (pid {}, log {}); `ferry wait --dest {}` blocks until done",
        spawned.id(),
        log_path.display(),
        dest.display()
    )?;
    Ok(())
}

pub fn wait(dest: PathBuf, entry: Option<&str>, as_json: bool) -> anyhow::Result<()> {
    match staging::wait(&dest, entry, Duration::from_millis(200)) {
        WaitOutcome::Done(states) if as_json => {
            out!("{}", serde_json::to_string_pretty(&staged_json(&dest, &states))?)?;
            Ok(())
        }
        WaitOutcome::Done(states) => {
            for s in states {
                out!("{} ({}) staged: {} files, {}", s.name, s.id, s.files_total, bytesize::ByteSize(s.bytes_total))?;
            }
            Ok(())
        }
        WaitOutcome::Failed(s) => bail!(UserError(format!(
            "staging {} ({}) into {} failed: {}",
            s.name,
            s.id,
            dest.display(),
            s.phase.error().unwrap_or_default()
        ))),
        WaitOutcome::Nothing => bail!(UserError(format!("nothing was staged into {}", dest.display()))),
    }
}

/// `wait --json`: the destination and each finished staging with the path to load
/// (`entries/<id>` in the destination; the destination itself for `--src` mode).
fn staged_json(dest: &Path, states: &[staging::StageState]) -> serde_json::Value {
    let staged: Vec<serde_json::Value> =
        states.iter().map(|s| serde_json::json!({"path": s.loadable_path(dest), "state": s})).collect();
    serde_json::json!({"dest": dest, "staged": staged})
}

fn print_report(report: &StageReport) -> std::io::Result<()> {
    let s = &report.state;
    let copied = bytesize::ByteSize(s.bytes_copied);
    out!("staged {} ({}) into {}", s.name, s.id, report.dest_root.display())?;
    out!(
        "{} files copied{}, {}{} already there; {} in {:.2} s ({}/s){}",
        report.files_copied,
        match report.files_received {
            0 => String::new(),
            received => format!(" ({received} from the broadcast)"),
        },
        match report.files_linked {
            0 => String::new(),
            linked => format!("{linked} hard-linked to an identical copy, "),
        },
        report.files_skipped,
        copied,
        report.seconds,
        bytesize::ByteSize(s.bytes_per_second as u64),
        if report.waited_for_another_stager { "; waited for another stager" } else { "" },
    )?;
    Ok(())
}
