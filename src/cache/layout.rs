//! Every path of the cache and of an entry, in one place.
//!
//! ```text
//! <cache>/entries/<fp16>/            published entries, immutable: token stores (tokens/<split>/
//!                                    <shard>.bin and .idx) and views (Arrow files per split,
//!                                    and megatron/ and flat/ when the spec asks for them)
//! <cache>/by-name/<name>             symlink -> ../entries/<fp16>, newest entry of that name
//! <cache>/building/<fp16>/           an entry being built (shared by every task building it)
//! <cache>/memo/<key>                 input content hashes keyed by (path, size, mtime)
//! <cache>/memo/tokenizer-<key>       tokenizer identities keyed by the bytes of the tokenizer's files
//! <cache>/memo/tokenizer-confirmed-<key>  confirmations that `tokenizers` writes the canonical form
//!                                    ferry assembled, keyed by the tokenizer's text
//! <cache>/leases/<fp16>/<holder>     live users of an entry (builds, stagings)
//! <cache>/used/<fp16>                mtime = last use of the entry
//! <cache>/trash/                     entries being deleted
//! <cache>/layout-version             this layout's version, written by the first prepare
//! ```

use std::path::{Path, PathBuf};

use crate::cache::liveness::Liveness;
use crate::fsutil;
use crate::fsutil::untrusted::Dir;

/// Version of the cache layout; a cache root records it in `layout-version`.
pub const LAYOUT_VERSION: u32 = 1;

/// The directories of a cache root, by name (for `fsutil::untrusted::Dir`, which
/// opens them without following symlinks).
pub const ENTRIES_DIR: &str = "entries";
pub const BY_NAME_DIR: &str = "by-name";
pub const BUILDING_DIR: &str = "building";
pub const MEMO_DIR: &str = "memo";
pub const LEASES_DIR: &str = "leases";
pub const USED_DIR: &str = "used";
pub const TRASH_DIR: &str = "trash";

/// Paths below one cache root.
#[derive(Debug, Clone)]
pub struct CacheLayout {
    root: PathBuf,
    liveness: Liveness,
}

impl CacheLayout {
    /// The cache at `root`, with the default liveness timeouts.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into(), liveness: Liveness::default() }
    }

    /// The same cache, judging leases, claims and builders by these timeouts.
    pub fn with_liveness(self, liveness: Liveness) -> Self {
        Self { liveness, ..self }
    }

    /// The timeouts by which this process judges whether a holder is alive.
    pub fn liveness(&self) -> Liveness {
        self.liveness
    }

    /// The same cache seen through another path to its root (e.g. made absolute).
    pub fn at(&self, root: impl Into<PathBuf>) -> Self {
        Self { root: root.into(), liveness: self.liveness }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn entries_dir(&self) -> PathBuf {
        self.root.join(ENTRIES_DIR)
    }

    pub fn entry(&self, short_fingerprint: &str) -> EntryLayout {
        EntryLayout::new(self.entries_dir().join(short_fingerprint))
    }

    pub fn by_name_dir(&self) -> PathBuf {
        self.root.join(BY_NAME_DIR)
    }

    pub fn by_name(&self, name: &str) -> PathBuf {
        self.by_name_dir().join(name)
    }

    /// What a `by-name` link points at: relative, so the cache can be mounted anywhere.
    pub fn by_name_target(short_fingerprint: &str) -> PathBuf {
        Path::new("..").join(ENTRIES_DIR).join(short_fingerprint)
    }

    /// The entry a `by-name` link's target names, if it has the form ferry writes
    /// (`../entries/<fp16>`); anything else was not put there by ferry.
    pub fn by_name_entry(target: &Path) -> Option<&str> {
        let short = target.strip_prefix(Path::new("..").join(ENTRIES_DIR)).ok()?.to_str()?;
        is_short_fingerprint(short).then_some(short)
    }

    pub fn building_dir(&self) -> PathBuf {
        self.root.join(BUILDING_DIR)
    }

    pub fn build(&self, short_fingerprint: &str) -> BuildLayout {
        BuildLayout { root: self.building_dir().join(short_fingerprint) }
    }

    pub fn memo_dir(&self) -> PathBuf {
        self.root.join(MEMO_DIR)
    }

    pub fn leases_dir(&self) -> PathBuf {
        self.root.join(LEASES_DIR)
    }

    pub fn leases(&self, short_fingerprint: &str) -> PathBuf {
        self.leases_dir().join(short_fingerprint)
    }

    pub fn used_dir(&self) -> PathBuf {
        self.root.join(USED_DIR)
    }

    pub fn used_marker(&self, short_fingerprint: &str) -> PathBuf {
        self.used_dir().join(short_fingerprint)
    }

    pub fn trash_dir(&self) -> PathBuf {
        self.root.join(TRASH_DIR)
    }

    pub fn layout_version_file(&self) -> PathBuf {
        self.root.join("layout-version")
    }

    /// Creates (or opens) `dirs`, paths below the root, following no symlink below
    /// it. Builds, memo files, `entries/` and `by-name/` are then written by path: a
    /// cache writer who had put a symlink at `building`, say, would otherwise have
    /// another user's `prepare` create its files wherever the link points.
    pub fn create_own_dirs(&self, dirs: &[PathBuf]) -> std::io::Result<()> {
        for dir in dirs {
            let below = dir.strip_prefix(&self.root).map_err(|_| {
                std::io::Error::other(format!("{} is not inside the cache {}", dir.display(), self.root.display()))
            })?;
            // From the root each time: a directory handle met while settling may be stale.
            fsutil::retry_while_settling(|| {
                let mut names = below.iter().map(|name| name.to_string_lossy());
                let first = Dir::open(&self.root)?.create_dir(&names.next().unwrap_or_default())?;
                names.try_fold(first, |dir, name| dir.create_dir(&name)).map(drop)
            })?;
        }
        Ok(())
    }

    /// The top-level directories a build writes through.
    pub fn build_dirs(&self) -> Vec<PathBuf> {
        [BUILDING_DIR, ENTRIES_DIR, BY_NAME_DIR, MEMO_DIR, USED_DIR].map(|name| self.root.join(name)).to_vec()
    }

    /// Records this layout's version in a new cache, and refuses a cache laid out
    /// by an incompatible ferry (rather than misreading it).
    pub fn check_version(&self) -> std::io::Result<()> {
        let path = self.layout_version_file();
        let text = fsutil::retry_while_settling(|| match std::fs::read_to_string(&path) {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                fsutil::create_dir_all(&self.root)?;
                // Several first writers may race: the first file placed stays, and the
                // others read it back (it could come from another ferry's version).
                match fsutil::write_once(&path, format!("{LAYOUT_VERSION}\n").as_bytes())? {
                    true => Ok(format!("{LAYOUT_VERSION}\n")),
                    false => std::fs::read_to_string(&path),
                }
            }
            read => read,
        })?;
        if text.trim() == LAYOUT_VERSION.to_string() {
            return Ok(());
        }
        Err(std::io::Error::other(format!(
            "the cache has layout version {}, this ferry uses {LAYOUT_VERSION}; use another --cache, or move the old cache away",
            text.trim()
        )))
    }
}

/// Whether `name` can be an entry's directory: 16 lowercase hex digits. Anything
/// else in `entries/` was not put there by ferry.
pub fn is_short_fingerprint(name: &str) -> bool {
    name.len() == 16 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Paths inside one entry directory (published, or being assembled).
#[derive(Debug, Clone)]
pub struct EntryLayout {
    root: PathBuf,
}

impl EntryLayout {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn manifest(&self) -> PathBuf {
        self.root.join(MANIFEST_FILE)
    }

    pub fn dataset_dict(&self) -> PathBuf {
        self.root.join("dataset_dict.json")
    }

    pub fn split_dir(&self, split: &str) -> PathBuf {
        self.root.join(split)
    }
}

/// The manifest's file name inside an entry.
pub const MANIFEST_FILE: &str = "manifest.json";

/// Name of the `index`-th of `count` Arrow files of a split, as `datasets` names them.
pub fn data_file_name(index: usize, count: usize) -> String {
    format!("data-{index:05}-of-{count:05}.arrow")
}

/// A token store's document file for one input shard, relative to the entry:
/// `tokens/<split>/<shard>.<extension>` (`bin` holds the ids, `idx` Megatron's index).
pub fn token_store_file(split: &str, shard: usize, extension: &str) -> String {
    format!("{TOKENS_DIR}/{split}/{shard:06}.{extension}")
}

/// The folder of a token store that holds its documents.
pub const TOKENS_DIR: &str = "tokens";

/// A split's Megatron file relative to the entry: `megatron/<split>_text_document.<extension>`.
pub fn megatron_file(split: &str, extension: &str) -> String {
    format!("megatron/{split}_text_document.{extension}")
}

/// A mixture's Megatron blend relative to the entry: per split, the `--data-path`
/// weights and prefixes (relative to `megatron/`).
pub fn megatron_blend_file() -> &'static str {
    "megatron/blend.json"
}

/// A split's flat file relative to the entry: `flat/<split><suffix>`.
pub fn flat_file(split: &str, suffix: &str) -> String {
    format!("flat/{split}{suffix}")
}

/// Paths inside `building/<fp16>/`, shared by every task that builds the entry.
#[derive(Debug, Clone)]
pub struct BuildLayout {
    root: PathBuf,
}

impl BuildLayout {
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Finished per-shard outputs: `parts/<split>/<shard>-<part>.arrow` and the
    /// shard's record `parts/<split>/<shard>.done.json`, written last.
    pub fn parts_dir(&self, split: &str) -> PathBuf {
        self.root.join("parts").join(split)
    }

    pub fn part_file(&self, split: &str, shard: usize, part: usize) -> PathBuf {
        self.parts_dir(split).join(format!("{shard:06}-{part:04}.arrow"))
    }

    /// A shard's part for the extra formats: `parts/<split>/<shard>.<kind>`.
    pub fn format_part(&self, split: &str, shard: usize, kind: &str) -> PathBuf {
        self.parts_dir(split).join(format!("{shard:06}.{kind}"))
    }

    /// A shard's documents in a token store being built: `parts/<split>/<shard>.<extension>`.
    pub fn document_part(&self, split: &str, shard: usize, extension: &str) -> PathBuf {
        self.parts_dir(split).join(format!("{shard:06}.{extension}"))
    }

    /// The `part`-th Arrow file of a view's unit: the `chunk`-th run of rows made
    /// from input shard `shard` (or, shuffled, of the split's rows).
    pub fn view_part(&self, split: &str, unit: (usize, usize), part: usize) -> PathBuf {
        self.parts_dir(split).join(format!("{:06}.{:04}-{part:04}.arrow", unit.0, unit.1))
    }

    /// A view unit's part for the extra formats: `parts/<split>/<shard>.<chunk>.<kind>`.
    pub fn view_format_part(&self, split: &str, unit: (usize, usize), kind: &str) -> PathBuf {
        self.parts_dir(split).join(format!("{:06}.{:04}.{kind}", unit.0, unit.1))
    }

    pub fn shard_record(&self, split: &str, shard: usize) -> PathBuf {
        self.parts_dir(split).join(format!("{shard:06}.done.json"))
    }

    /// Claims on shards being tokenized right now, one file per shard.
    pub fn claims_dir(&self) -> PathBuf {
        self.root.join("claims")
    }

    pub fn claim(&self, split: &str, shard: usize) -> PathBuf {
        self.claims_dir().join(format!("{split}.{shard:06}"))
    }

    /// Where the publisher on `host` with `pid` assembles the entry before
    /// renaming it into `entries/`; named per task so that one never clears another's.
    pub fn assembly(&self, host: &str, pid: u32) -> EntryLayout {
        EntryLayout::new(self.root.join(format!("assembly.{host}.{pid}")))
    }

    /// Exclusive-create lock held by the one task that assembles and publishes.
    pub fn publish_lock(&self) -> PathBuf {
        self.root.join("publish.lock")
    }

    /// One builder's progress for `ferry status`, refreshed by a heartbeat:
    /// `progress.<host>.<pid>.json`.
    pub fn progress_file(&self, host: &str, pid: u32) -> PathBuf {
        self.root.join(format!("progress.{host}.{pid}.json"))
    }

    /// Every builder's progress file.
    pub fn progress_files(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.root) else { return Vec::new() };
        entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("progress.")))
            .collect()
    }

    /// Finished shard records across splits (a directory listing of the build only).
    pub fn count_shard_records(&self) -> u64 {
        let Ok(splits) = std::fs::read_dir(self.root.join("parts")) else { return 0 };
        splits
            .flatten()
            .filter_map(|split| std::fs::read_dir(split.path()).ok())
            .flat_map(|files| files.flatten())
            .filter(|f| f.file_name().to_string_lossy().ends_with(".done.json"))
            .count() as u64
    }
}
