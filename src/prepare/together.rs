//! The claims loop: every task building the same entry (processes, `srun` tasks,
//! nodes) tokenizes the shards it can claim, waits for the rest, and exactly one
//! publishes.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::cache::layout::CacheLayout;
use crate::cache::manifest::EncoderKind;
use crate::errors::IoError;
use crate::fingerprint::Fingerprint;
use crate::fsutil::{self, untrusted};

use super::shard::{self, ShardError, ShardRecord};
use super::{PrepareError, published_kind};
use crate::cache::claims::{self, ClaimGuard, Claims};
use crate::cache::manifest::EntryKind;

/// Whether the token store being built was published (by any task).
fn published(cache: &CacheLayout, fingerprint: &Fingerprint) -> Result<Option<()>, PrepareError> {
    Ok(published_kind(cache, fingerprint, EntryKind::Tokens)?.map(drop))
}

/// How this task's part of a shared build ended.
pub(super) enum Together<'a> {
    /// Every shard is done and this task holds the publish claim. `fast_off`: why
    /// the fast path was turned off during the build, where it was.
    Publish {
        records: Vec<ShardRecord>,
        tokenized_here: usize,
        kind: EncoderKind,
        fast_off: Option<String>,
        guard: ClaimGuard<'a>,
    },
    /// Another task published the entry.
    PublishedElsewhere { tokenized_here: usize },
}

/// How long a task waits between looks at shards other tasks are working on.
const POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// Tokenizes shards alongside every other task building the same entry (other
/// processes, `srun` tasks, nodes): each shard is claimed before it is tokenized,
/// finished shards are never redone, shards of dead tasks are taken over, and
/// exactly one task publishes.
pub(super) fn build_together<'a>(
    context: &shard::ShardContext,
    claims: &'a Claims,
    tasks: &[shard::ShardTask],
    pool: &rayon::ThreadPool,
    cache: &CacheLayout,
    fingerprint: &Fingerprint,
) -> Result<Together<'a>, PrepareError> {
    let build = context.build;
    let fast_disabled = build.root().join("fast-path-disabled");
    let order = work_order(tasks.len());
    let mut tokenized_here = 0;
    // Finished shards never change: each record is read once, not on every pass.
    let mut known: Vec<Option<ShardRecord>> = vec![None; tasks.len()];
    let mut known_kind = None;
    loop {
        if published(cache, fingerprint)?.is_some() {
            return Ok(Together::PublishedElsewhere { tokenized_here });
        }
        // Any entry by the flag's name turns the fast path off, a symlink too: the
        // check does not follow one that another user sharing the cache planted.
        let kind = match context.encoders.fast_kind() {
            Some(fast) if fast_disabled.symlink_metadata().is_err() => fast,
            _ => EncoderKind::Tokenizers,
        };
        if known_kind != Some(kind) {
            known.iter_mut().for_each(|record| *record = None);
            known_kind = Some(kind);
        }
        let unfinished: Vec<usize> = order.iter().copied().filter(|&index| known[index].is_none()).collect();
        match run_claimed_shards(context, claims, tasks, &unfinished, kind, pool) {
            Ok(count) => {
                tokenized_here += count;
                if kind.is_fast() && !context.encoders.fast_path_confirmed() {
                    // Rare: ferry read the vocabulary or merges otherwise than `tokenizers`.
                    disable_fast_path(&fast_disabled, VOCABULARY_READ_DIFFERENTLY)?;
                    continue;
                }
            }
            Err(PrepareError::Shard(ShardError::FastPathMismatch { path, record })) => {
                // Rare: the vocabulary looked equivalent but is not.
                let cause =
                    format!("the fast encoder disagreed with the tokenizer on record {record} of {}", path.display());
                disable_fast_path(&fast_disabled, &cause)?;
                continue;
            }
            // A straggler whose build was published meanwhile has nothing left to do.
            Err(_) if published(cache, fingerprint)?.is_some() => {
                return Ok(Together::PublishedElsewhere { tokenized_here });
            }
            Err(err) => return Err(err),
        }
        for &index in &unfinished {
            known[index] = context.finished_record(&tasks[index], kind);
        }
        let records: Option<Vec<ShardRecord>> = known.iter().cloned().collect();
        match records {
            Some(records) => {
                let publish_lock = build.publish_lock();
                if let Some(guard) = claims.try_claim(&publish_lock).map_err(IoError::at("claiming", &publish_lock))? {
                    if published(cache, fingerprint)?.is_some() {
                        return Ok(Together::PublishedElsewhere { tokenized_here });
                    }
                    let fast_off = (!kind.is_fast() && context.encoders.fast_available())
                        .then(|| why_fast_path_is_off(&fast_disabled));
                    return Ok(Together::Publish { records, tokenized_here, kind, fast_off, guard });
                }
            }
            None => tracing::debug!("waiting for shards other tasks are tokenizing"),
        }
        std::thread::sleep(POLL);
    }
}

const VOCABULARY_READ_DIFFERENTLY: &str = "the fast encoder read the tokenizer's vocabulary or merges otherwise than the tokenizer (for example two tokens on one id)";

/// The most of a reason read back from a build directory, which other users'
/// tasks sharing the cache may write.
const REASON_MAX_BYTES: u64 = 4096;

/// Turns the fast path off for every task building this entry, for `cause`: each
/// then encodes every shard again with the tokenizer, so the output stays
/// deterministic, and the manifest records the reason.
fn disable_fast_path(fast_disabled: &Path, cause: &str) -> Result<(), PrepareError> {
    tracing::warn!("{cause}; re-encoding every shard with the tokenizer");
    let reason = format!("{cause}; every shard was encoded with the tokenizer");
    fsutil::write_atomic(fast_disabled, reason.as_bytes())
        .map_err(|err| IoError::at("writing", fast_disabled)(err).into())
}

/// The reason `disable_fast_path` gave: read as a regular file of bounded size,
/// neither through a symlink nor blocking on a FIFO, and as text however it reads.
fn why_fast_path_is_off(fast_disabled: &Path) -> String {
    match untrusted::read_regular(fast_disabled, REASON_MAX_BYTES) {
        Ok(reason) if !reason.is_empty() => String::from_utf8_lossy(&reason).into_owned(),
        _ => "another task building this entry turned the fast path off; every shard was encoded with the tokenizer"
            .to_string(),
    }
}

/// The order this task visits shards in: under `srun`, task k starts at its own
/// k-th of the list, so tasks mostly work on different shards and meet only at the end.
fn work_order(count: usize) -> Vec<usize> {
    let offset = match claims::slurm_task() {
        Some((procid, ntasks)) => procid * count / ntasks,
        None => 0,
    };
    (0..count).map(|i| (i + offset) % count.max(1)).collect()
}

/// One pass over the shards: every free, unfinished shard is claimed and
/// tokenized, `workers` at a time, in this task's order. Returns how many.
fn run_claimed_shards(
    context: &shard::ShardContext,
    claims: &Claims,
    tasks: &[shard::ShardTask],
    order: &[usize],
    kind: EncoderKind,
    pool: &rayon::ThreadPool,
) -> Result<usize, PrepareError> {
    let cursor = AtomicUsize::new(0);
    let tokenized = AtomicUsize::new(0);
    let failure: Mutex<Option<PrepareError>> = Mutex::new(None);
    let failed = || failure.lock().unwrap_or_else(|e| e.into_inner()).is_some();
    let fail = |err: PrepareError| {
        failure.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(err);
    };
    pool.scope(|scope| {
        for _ in 0..pool.current_num_threads() {
            scope.spawn(|_| {
                while !failed() {
                    let Some(&index) = order.get(cursor.fetch_add(1, Ordering::Relaxed)) else { break };
                    let task = &tasks[index];
                    if context.finished_record(task, kind).is_some() {
                        continue;
                    }
                    let claim_path = context.build.claim(&task.split, task.shard);
                    let claim = match claims.try_claim(&claim_path) {
                        Ok(Some(claim)) => claim,
                        Ok(None) => continue,
                        Err(err) => return fail(IoError::at("claiming", &claim_path)(err).into()),
                    };
                    // Finished by another task between our look and our claim.
                    if context.finished_record(task, kind).is_some() {
                        continue;
                    }
                    match super::pipeline::tokenize(context, task, kind) {
                        Ok(_) => {
                            tokenized.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(err) => fail(err.into()),
                    }
                    drop(claim);
                }
            });
        }
    });
    match failure.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(err) => Err(err),
        None => Ok(tokenized.into_inner()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_the_fast_path_went_off_is_read_back_as_untrusted_text() {
        let dir = tempfile::tempdir().unwrap();
        let flag = dir.path().join("fast-path-disabled");
        let generic = |reason: String| assert!(reason.contains("another task"), "{reason}");
        generic(why_fast_path_is_off(&flag));
        disable_fast_path(&flag, VOCABULARY_READ_DIFFERENTLY).unwrap();
        assert_eq!(
            why_fast_path_is_off(&flag),
            format!("{VOCABULARY_READ_DIFFERENTLY}; every shard was encoded with the tokenizer")
        );
        // Written by someone else sharing the cache: not UTF-8, too long, a link, a FIFO.
        std::fs::write(&flag, b"bad \xff byte").unwrap();
        assert_eq!(why_fast_path_is_off(&flag), "bad \u{fffd} byte");
        std::fs::write(&flag, vec![b'x'; REASON_MAX_BYTES as usize + 1]).unwrap();
        generic(why_fast_path_is_off(&flag));
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, b"read through a link").unwrap();
        std::fs::remove_file(&flag).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &flag).unwrap();
        generic(why_fast_path_is_off(&flag));
        std::fs::remove_file(&flag).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &flag,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
            0,
        )
        .unwrap();
        generic(why_fast_path_is_off(&flag));
    }
}
