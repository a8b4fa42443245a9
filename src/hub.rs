//! The local Hugging Face hub cache, read offline.
//!
//! Cluster users download models and datasets on a login node (`huggingface-cli
//! download`) and run offline on compute nodes. The files then sit in the hub cache as
//! `<type>s--ORG--NAME/refs/<branch>` (a commit hash) and
//! `snapshots/<commit>/<file>` (a symlink into `blobs/`). A spec names `ORG/NAME` and a
//! revision instead of a snapshot path that changes with every revision; this module
//! finds the files the way `huggingface_hub.try_to_load_from_cache` does, so both name
//! the same path. Nothing here touches the network.

use std::path::{Path, PathBuf};

use crate::errors::{Failure, Fault};
use crate::fsutil::untrusted;

/// What kind of repository: the hub keeps models and datasets in separate folders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepoType {
    Model,
    Dataset,
}

impl RepoType {
    /// The folder prefix: `models--ORG--NAME`, `datasets--ORG--NAME`.
    fn folder_prefix(self) -> &'static str {
        match self {
            RepoType::Model => "models",
            RepoType::Dataset => "datasets",
        }
    }

    /// The `huggingface-cli download` flag that selects this type.
    fn download_flag(self) -> &'static str {
        match self {
            RepoType::Model => "",
            RepoType::Dataset => " --repo-type dataset",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("hub repo {repo:?} is not a repo id: {problem}; write it as \"ORG/NAME\", as on the hub")]
    BadRepo { repo: String, problem: String },
    #[error("revision {revision:?} of hub repo {repo} is not a branch, tag or commit name: {problem}")]
    BadRevision { repo: String, revision: String, problem: String },
    #[error("file pattern {pattern:?} in hub repo {repo}: {problem}")]
    BadPattern { repo: String, pattern: String, problem: String },
    #[error(
        "{what} of hub repo {repo} at revision {revision} is not in the local Hugging Face hub cache \
         (searched {searched}); download it on a login node with `{command}`"
    )]
    NotCached { what: String, repo: String, revision: String, searched: String, command: String },
}

impl Failure for HubError {
    fn fault(&self) -> Fault {
        Fault::User
    }
}

/// The hub cache directory as `huggingface_hub` picks it: `$HF_HUB_CACHE`, else
/// `$HUGGINGFACE_HUB_CACHE`, else `$HF_HOME/hub`, else
/// `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`; with where it
/// came from, for messages.
pub fn cache_dir() -> (PathBuf, String) {
    let var = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty()).map(PathBuf::from);
    for name in ["HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"] {
        if let Some(dir) = var(name) {
            return (expand_home(&dir), format!("${name}"));
        }
    }
    if let Some(home) = var("HF_HOME") {
        return (expand_home(&home).join("hub"), "$HF_HOME/hub".into());
    }
    if let Some(xdg) = var("XDG_CACHE_HOME") {
        return (expand_home(&xdg).join("huggingface").join("hub"), "$XDG_CACHE_HOME/huggingface/hub".into());
    }
    let home = var("HOME").unwrap_or_else(|| PathBuf::from("."));
    (home.join(".cache").join("huggingface").join("hub"), "the default; HF_HUB_CACHE or HF_HOME choose another".into())
}

/// `~/x` as the shell would have it; `huggingface_hub` expands these too.
fn expand_home(path: &Path) -> PathBuf {
    match (path.strip_prefix("~"), std::env::var_os("HOME")) {
        (Ok(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => path.to_path_buf(),
    }
}

/// A repository at a revision, in one hub cache directory.
#[derive(Debug, Clone)]
pub struct HubRepo {
    repo: String,
    revision: String,
    repo_type: RepoType,
    cache: PathBuf,
    /// Where `cache` came from, for messages.
    cache_origin: String,
}

impl HubRepo {
    /// `repo` as on the hub (`ORG/NAME` or `NAME`), `revision` a branch, tag or commit
    /// (`main` when not given), in the cache directory `huggingface_hub` would use.
    pub fn new(repo: &str, revision: Option<&str>, repo_type: RepoType) -> Result<HubRepo, HubError> {
        let (cache, cache_origin) = cache_dir();
        Self::in_cache(repo, revision, repo_type, cache, cache_origin)
    }

    fn in_cache(
        repo: &str,
        revision: Option<&str>,
        repo_type: RepoType,
        cache: PathBuf,
        cache_origin: String,
    ) -> Result<HubRepo, HubError> {
        check_repo(repo).map_err(|problem| HubError::BadRepo { repo: repo.into(), problem })?;
        let revision = revision.unwrap_or("main");
        untrusted::check_relative(revision).map_err(|problem| HubError::BadRevision {
            repo: repo.into(),
            revision: revision.into(),
            problem,
        })?;
        Ok(HubRepo { repo: repo.into(), revision: revision.into(), repo_type, cache, cache_origin })
    }

    /// `ORG/NAME@revision`, for messages and source names.
    pub fn describe(&self) -> String {
        format!("hub {} {}@{}", self.repo_type.folder_prefix().trim_end_matches('s'), self.repo, self.revision)
    }

    fn repo_dir(&self) -> PathBuf {
        self.cache.join(format!("{}--{}", self.repo_type.folder_prefix(), self.repo.replace('/', "--")))
    }

    /// The snapshot folder of the revision: `refs/<revision>` names its commit when it
    /// is a branch or tag; otherwise the revision is taken as a commit.
    fn snapshot(&self) -> Option<PathBuf> {
        let repo_dir = self.repo_dir();
        // Bounded, and never a FIFO: a lab may share its hub cache. A ref holds 40 hex digits.
        let commit = match untrusted::read_regular(&repo_dir.join("refs").join(&self.revision), 1024) {
            Ok(commit) => String::from_utf8_lossy(&commit).trim().to_string(),
            Err(_) => self.revision.clone(),
        };
        untrusted::check_name(&commit).ok()?;
        let snapshot = repo_dir.join("snapshots").join(commit);
        snapshot.is_dir().then_some(snapshot)
    }

    /// The snapshot path of one file (a symlink into `blobs/`, which reading follows),
    /// or `None` when this revision's snapshot lacks it.
    pub fn file(&self, relative: &str) -> Option<PathBuf> {
        untrusted::check_relative(relative).ok()?;
        let path = self.snapshot()?.join(relative);
        path.is_file().then_some(path)
    }

    /// The file, or an error that says what is missing, where it looked and how to get it.
    pub fn require_file(&self, relative: &str) -> Result<PathBuf, HubError> {
        self.file(relative).ok_or_else(|| self.not_cached(relative, &format!(" {relative}")))
    }

    /// Every file of the snapshot matching `pattern` (a glob relative to the snapshot),
    /// sorted; an error when the snapshot is missing or nothing matches.
    pub fn files_matching(&self, pattern: &str) -> Result<Vec<PathBuf>, HubError> {
        let bad = |problem: String| HubError::BadPattern { repo: self.repo.clone(), pattern: pattern.into(), problem };
        if pattern.starts_with('/') || pattern.split('/').any(|component| component == "..") {
            return Err(bad("it must stay inside the repo: no leading '/' and no '..'".into()));
        }
        let what = format!("files matching {pattern:?}");
        let download = format!(" --include {pattern:?}");
        let snapshot = self.snapshot().ok_or_else(|| self.not_cached(&what, &download))?;
        let escaped = glob::Pattern::escape(&snapshot.to_string_lossy());
        let mut matches: Vec<PathBuf> = glob::glob(&format!("{escaped}/{pattern}"))
            .map_err(|err| bad(err.to_string()))?
            .filter_map(Result::ok)
            .filter(|path| path.is_file())
            .collect();
        if matches.is_empty() {
            return Err(self.not_cached(&what, &download));
        }
        matches.sort();
        Ok(matches)
    }

    /// The error for a file (or pattern) this revision's snapshot lacks; `download_args`
    /// are what `huggingface-cli download ORG/NAME` needs to fetch it.
    pub fn not_cached(&self, what: &str, download_args: &str) -> HubError {
        HubError::NotCached {
            what: what.into(),
            repo: self.repo.clone(),
            revision: self.revision.clone(),
            searched: format!("{} ({})", self.repo_dir().display(), self.cache_origin),
            command: format!(
                "huggingface-cli download {}{download_args} --revision {}{}",
                self.repo,
                self.revision,
                self.repo_type.download_flag()
            ),
        }
    }
}

/// A hub repo id: `NAME` or `ORG/NAME`, each part of letters, digits, `-`, `_`, `.`.
fn check_repo(repo: &str) -> Result<(), String> {
    let parts: Vec<&str> = repo.split('/').collect();
    if parts.len() > 2 {
        return Err("it has more than one '/'".into());
    }
    for part in parts {
        let plain = part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if part.is_empty() || part.starts_with('.') || part.contains("--") || !plain {
            return Err(format!(
                "{part:?} must be letters, digits, '-', '_' or '.', not start with '.' nor hold \"--\""
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A model repo with `main` at commit `c2` and an older commit `c1`, laid out as
    /// `huggingface_hub` lays it out.
    fn hub_cache() -> tempfile::TempDir {
        let cache = tempfile::tempdir().unwrap();
        let repo = cache.path().join("models--org--tok");
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::create_dir_all(repo.join("blobs")).unwrap();
        std::fs::write(repo.join("refs/main"), "c2").unwrap();
        for (commit, blob) in [("c1", "b1"), ("c2", "b2")] {
            std::fs::write(repo.join("blobs").join(blob), blob).unwrap();
            let snapshot = repo.join("snapshots").join(commit);
            std::fs::create_dir_all(&snapshot).unwrap();
            symlink(Path::new("../../blobs").join(blob), snapshot.join("tokenizer.json")).unwrap();
        }
        cache
    }

    fn repo(cache: &Path, revision: Option<&str>) -> HubRepo {
        HubRepo::in_cache("org/tok", revision, RepoType::Model, cache.to_path_buf(), "test".into()).unwrap()
    }

    #[test]
    fn a_branch_resolves_through_its_ref_and_a_commit_directly() {
        let cache = hub_cache();
        let main = repo(cache.path(), None).file("tokenizer.json").unwrap();
        assert_eq!(main, cache.path().join("models--org--tok/snapshots/c2/tokenizer.json"));
        assert_eq!(std::fs::read_to_string(main).unwrap(), "b2");
        let old = repo(cache.path(), Some("c1")).file("tokenizer.json").unwrap();
        assert_eq!(std::fs::read_to_string(old).unwrap(), "b1");
    }

    #[test]
    fn a_missing_file_names_repo_revision_cache_and_the_download_command() {
        let cache = hub_cache();
        let message = repo(cache.path(), Some("v2")).require_file("tokenizer.json").unwrap_err().to_string();
        for part in ["org/tok", "revision v2", "models--org--tok", "huggingface-cli download org/tok tokenizer.json"] {
            assert!(message.contains(part), "{part:?} missing from: {message}");
        }
    }

    #[test]
    fn repo_ids_and_revisions_stay_inside_the_cache() {
        let cache = tempfile::tempdir().unwrap();
        let make = |repo: &str, revision: &str| {
            HubRepo::in_cache(repo, Some(revision), RepoType::Model, cache.path().to_path_buf(), "test".into())
        };
        for bad_repo in ["../x", "a/b/c", "", "a--b/c", "/abs"] {
            assert!(make(bad_repo, "main").is_err(), "{bad_repo:?} accepted");
        }
        for bad_revision in ["../../etc", "", "/abs"] {
            assert!(make("org/tok", bad_revision).is_err(), "{bad_revision:?} accepted");
        }
        assert!(make("gpt2", "refs/pr/1").is_ok());
        let repo = make("org/tok", "main").unwrap();
        assert!(repo.files_matching("../*").is_err());
    }
}
