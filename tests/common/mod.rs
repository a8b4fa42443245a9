//! A temporary tree with corpora, specs and a cache, and the real `ferry` binary
//! run inside it.
#![allow(dead_code)]

pub mod observe;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub struct TestEnv {
    pub dir: tempfile::TempDir,
}

impl TestEnv {
    pub fn new() -> TestEnv {
        TestEnv { dir: tempfile::tempdir().expect("temp dir") }
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    pub fn cache(&self) -> PathBuf {
        self.path("cache")
    }

    /// Pile-style `.jsonl.zst` shards under `relative`.
    pub fn shards(&self, relative: &str, prefix: &str, shards: usize, documents: usize, seed: u64) -> Vec<PathBuf> {
        ferry::corpus::write_pile_shards(&self.path(relative), prefix, shards, documents, seed).expect("write shards")
    }

    pub fn write(&self, relative: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, contents).unwrap();
        path
    }

    /// `ferry` with the cache in this tree and no Slurm variables from outside.
    pub fn ferry(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ferry"));
        command.current_dir(self.dir.path()).env("FERRY_CACHE", self.cache()).env("RUST_LOG", "ferry=info");
        for (name, _) in std::env::vars() {
            if name.starts_with("SLURM_") {
                command.env_remove(name);
            }
        }
        command
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.ferry().args(args).output().expect("run ferry")
    }

    /// Runs ferry and asserts it succeeded; returns stdout.
    pub fn run_ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(output.status.success(), "ferry {args:?} failed:\n{}", describe(&output));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Runs ferry, asserts it succeeded and parses its stdout as JSON (`--json` output).
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let stdout = self.run_ok(args);
        serde_json::from_str(&stdout).unwrap_or_else(|err| panic!("ferry {args:?} printed no JSON ({err}):\n{stdout}"))
    }

    /// Writes `entry`'s corpus (unless there) and its GPT-2 spec, and prepares it:
    /// returns the spec's path and the `prepare --json` summary.
    pub fn prepare_entry(&self, entry: &SmallEntry) -> (PathBuf, serde_json::Value) {
        let SmallEntry { name, dir, shards, documents, seq_len, seed } = *entry;
        if !self.path(dir).exists() {
            self.shards(dir, "train", shards, documents, seed);
        }
        let spec = self.write(
            &format!("{name}-{seq_len}.toml"),
            gpt2_spec(name, &format!("{dir}/*.jsonl.zst"), &format!("[sequence]\nseq_len = {seq_len}\n")),
        );
        let prepared = self.prepare(&spec, &[]);
        (spec, prepared)
    }

    /// `prepare --json` on a spec; returns the parsed summary.
    pub fn prepare(&self, spec: &Path, extra: &[&str]) -> serde_json::Value {
        let spec = spec.to_str().unwrap();
        let mut args = vec!["prepare", spec, "--json"];
        args.extend_from_slice(extra);
        serde_json::from_str(&self.run_ok(&args)).expect("prepare --json output")
    }
}

/// A small entry on Pile-style shards with the embedded GPT-2 tokenizer.
#[derive(Debug, Clone, Copy)]
pub struct SmallEntry<'a> {
    pub name: &'a str,
    /// The corpus folder in the test tree; written once, shared by specs that name it.
    pub dir: &'a str,
    pub shards: usize,
    pub documents: usize,
    pub seq_len: u32,
    pub seed: u64,
}

/// `command` started with its output captured, for several at once.
pub fn spawn_piped(command: &mut Command) -> std::process::Child {
    command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("start ferry")
}

/// Waits for a `--json` run, asserts it succeeded, and parses what it printed.
pub fn finished_json(child: std::process::Child) -> serde_json::Value {
    let output = child.wait_with_output().expect("wait for ferry");
    assert!(output.status.success(), "{}", describe(&output));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| panic!("no JSON ({err}):\n{}", describe(&output)))
}

/// An entry's `manifest.json` (of the cache or a destination), parsed.
pub fn read_manifest(entry: &Path) -> serde_json::Value {
    let path = entry.join("manifest.json");
    let bytes = read_retrying_stale(&path).unwrap_or_else(|err| panic!("reading {}: {err}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|err| panic!("parsing {}: {err}", path.display()))
}

pub fn describe(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A spec with the embedded GPT-2 tokenizer; `extra` is appended (more sections).
pub fn gpt2_spec(name: &str, train_glob: &str, extra: &str) -> String {
    format!("name = \"{name}\"\n[splits]\ntrain = [\"{train_glob}\"]\n[tokenizer]\nbuiltin = \"gpt2\"\n{extra}")
}

/// The entry's Arrow files and split metadata, for byte comparisons.
pub fn entry_data_files(entry: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for split in std::fs::read_dir(entry).unwrap() {
        let split = split.unwrap().path();
        if !split.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(&split).unwrap() {
            let file = file.unwrap().path();
            let name = file.strip_prefix(entry).unwrap().display().to_string();
            let bytes = read_retrying_stale(&file).unwrap_or_else(|err| panic!("reading {}: {err}", file.display()));
            files.push((name, bytes));
        }
    }
    files.sort();
    files
}

/// Reads `path`, looking it up again for a few seconds while a network filesystem's
/// client answers "stale file handle". The kernel retries that error while it
/// resolves a path but not on the read that follows; GlusterFS's FUSE client gave it
/// once in CI on a file of an entry published moments before by another node, whose
/// ferry had succeeded. A file that is really gone or changed still fails or differs
/// on the next look.
pub fn read_retrying_stale(path: &Path) -> std::io::Result<Vec<u8>> {
    let stale = |err: &std::io::Error| {
        (err.kind() == std::io::ErrorKind::StaleNetworkFileHandle).then_some(std::time::Duration::from_secs(5))
    };
    ferry::fsutil::retry_while(stale, || std::fs::read(path))
}

/// Every `input_ids` row of an entry (int32 tokens), in the entry's file order.
pub fn entry_rows(entry: &Path) -> Vec<Vec<u32>> {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int32Type;
    let mut rows = Vec::new();
    for (name, bytes) in entry_data_files(entry) {
        if !name.ends_with(".arrow") {
            continue;
        }
        let reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
        for batch in reader {
            let lists = batch.unwrap().column_by_name("input_ids").unwrap().as_list::<i32>().clone();
            for row in 0..lists.len() {
                let values = lists.value(row);
                rows.push(values.as_primitive::<Int32Type>().values().iter().map(|&id| id as u32).collect());
            }
        }
    }
    rows
}

/// A path the test script provides in `variable`, or None with a SKIPPED message
/// when it could not (no root, no package). When the script says it set the
/// thing up (`require` is set), a missing path fails instead of skipping.
pub fn provided(variable: &str, require: &str, what: &str) -> Option<PathBuf> {
    match std::env::var_os(variable) {
        Some(value) => Some(PathBuf::from(value)),
        None if std::env::var_os(require).is_some() => panic!("{require} is set but {variable} is not"),
        None => {
            eprintln!("SKIPPED: {what} is not available (scripts/test.sh provides it)");
            None
        }
    }
}

/// Python with `datasets` from the test script's venv.
pub fn python() -> Option<PathBuf> {
    provided("FERRY_TEST_PYTHON", "FERRY_REQUIRE_PYTHON", "Python with datasets")
}

/// Waits until `stager` (a `ferry stage` that will wait for its destination) holds a
/// lease on the entry `short` in `cache`; fails if it ends first or takes over 60 s.
pub fn wait_for_lease(cache: &Path, short: &str, stager: &mut std::process::Child) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::read_dir(cache.join("leases").join(short)).map_or(true, |mut d| d.next().is_none()) {
        if let Some(status) = stager.try_wait().unwrap() {
            panic!("the stage ended ({status}) before taking its lease");
        }
        assert!(std::time::Instant::now() < deadline, "the stage never took its lease");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

pub fn python_script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("python").join(name)
}
pub mod users;
