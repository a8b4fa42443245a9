//! The pip route: the wheel scripts/build-wheel.sh makes installs offline into a
//! fresh venv, puts a `ferry` binary that needs glibc 2.17 at most on its PATH,
//! and `ferry.load` finds and loads staged (or cached) entries with `datasets`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{TestEnv, describe, gpt2_spec, python, python_script};
use ferry::cache::staging::Phase;
use rustix::process::{Pid, Signal, kill_process};

/// The wheel scripts/test.sh built with scripts/build-wheel.sh.
fn wheel() -> Option<PathBuf> {
    common::provided("FERRY_TEST_WHEEL", "FERRY_REQUIRE_WHEEL", "the ferry wheel (maturin and ziglang from PyPI)")
}

/// A fresh venv with only the wheel installed, from the wheel file alone (`--no-index`).
struct Venv {
    root: PathBuf,
}

impl Venv {
    /// Made by the test venv's interpreter so that the same Python version can
    /// borrow that venv's `datasets` (see `borrow_datasets`).
    fn install(base_python: &Path, wheel: &Path, root: PathBuf) -> Venv {
        run_ok(Command::new(base_python).args(["-m", "venv"]).arg(&root));
        let venv = Venv { root };
        run_ok(
            venv.command("python")
                .args(["-m", "pip", "install", "--no-index", "--disable-pip-version-check", "--quiet"])
                .arg(wheel),
        );
        venv
    }

    fn bin(&self) -> PathBuf {
        self.root.join("bin")
    }

    /// A program found on a PATH that starts with the venv's `bin` (as after `activate`),
    /// with no Slurm variables from outside.
    fn command(&self, program: &str) -> Command {
        let path = std::env::join_paths(
            std::iter::once(self.bin()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
        )
        .unwrap();
        let mut command = Command::new(program);
        command.env("PATH", path).env("RUST_LOG", "ferry=info").env_remove("FERRY_DEST").env_remove("FERRY_CACHE");
        for (name, _) in std::env::vars() {
            if name.starts_with("SLURM_") {
                command.env_remove(name);
            }
        }
        command
    }

    /// `datasets` is not in the wheel's dependencies (only `ferry.load` needs it) and a
    /// `--no-index` install cannot fetch it, so the venv reads the test venv's
    /// site-packages through a `.pth` file: the wheel itself is still the only thing
    /// installed, and the venv's own site-packages (the wheel's `ferry`) comes first.
    fn borrow_datasets(&self, base_python: &Path) {
        let site = |python: &Path, code: &str| {
            let output = Command::new(python).args(["-c", code]).output().unwrap();
            assert!(output.status.success(), "{}", describe(&output));
            String::from_utf8(output.stdout).unwrap().trim().to_string()
        };
        let theirs =
            site(base_python, "import datasets, os; print(os.path.dirname(os.path.dirname(datasets.__file__)))");
        let ours = site(&self.bin().join("python"), "import sysconfig; print(sysconfig.get_path('purelib'))");
        std::fs::write(Path::new(&ours).join("borrowed-datasets.pth"), format!("{theirs}\n")).unwrap();
    }

    /// `ferry.load(name, split)` through tests/python/load_with_ferry.py, which
    /// prints a JSON report of what it loaded.
    fn load_command(&self, name: &str, split: Option<&str>, cache: &Path, dest: Option<&Path>) -> Command {
        let mut command = self.command("python");
        command.arg(python_script("load_with_ferry.py")).arg(name).args(split).env("FERRY_CACHE", cache);
        if let Some(dest) = dest {
            command.env("FERRY_DEST", dest);
        }
        command
    }

    fn load(&self, name: &str, split: Option<&str>, cache: &Path, dest: Option<&Path>) -> serde_json::Value {
        let output = run_ok(&mut self.load_command(name, split, cache, dest));
        serde_json::from_str(&output).expect("load_with_ferry.py output")
    }
}

fn run_ok(command: &mut Command) -> String {
    let output = command.output().unwrap_or_else(|err| panic!("running {command:?}: {err}"));
    assert!(output.status.success(), "{command:?} failed:\n{}", describe(&output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn realpath(path: &Path) -> String {
    std::fs::canonicalize(path).unwrap().display().to_string()
}

/// Every file the loaded dataset reads, and every Arrow file of the entry when
/// `entry_path` returned, resolves under `root`.
fn assert_reads_only_under(report: &serde_json::Value, root: &Path) {
    let root = realpath(root) + "/";
    for key in ["cache_files", "files_at_return"] {
        let files = report[key].as_array().unwrap();
        assert!(!files.is_empty(), "no {key} in {report}");
        for file in files {
            assert!(file.as_str().unwrap().starts_with(&root), "{key}: {file} is not under {root}: {report}");
        }
    }
}

#[test]
fn wheel_installs_offline_and_its_ferry_loads_the_demo_entry() {
    let (Some(wheel), Some(base_python)) = (wheel(), python()) else { return };
    let env = TestEnv::new();
    let venv = Venv::install(&base_python, &wheel, env.path("venv"));

    // Without datasets, the package still imports and asks the binary.
    let probe = "import importlib.util, ferry; assert importlib.util.find_spec('datasets') is None; \
                 print(ferry.binary()); print(ferry.status()['totals']['entries'])";
    let output = run_ok(venv.command("python").args(["-c", probe]).env("FERRY_CACHE", env.cache()));
    assert_eq!(output, format!("{}\n0\n", venv.bin().join("ferry").display()));
    let found = run_ok(venv.command("sh").args(["-c", "command -v ferry"]));
    assert_eq!(found.trim(), venv.bin().join("ferry").display().to_string());
    // The man page and completions land where pip puts data files, as the binary makes them.
    for (installed, args) in [
        ("share/man/man1/ferry.1", &["manpage"][..]),
        ("share/bash-completion/completions/ferry", &["completions", "bash"]),
        ("share/zsh/site-functions/_ferry", &["completions", "zsh"]),
        ("share/fish/vendor_completions.d/ferry.fish", &["completions", "fish"]),
    ] {
        let file =
            std::fs::read_to_string(venv.root.join(installed)).unwrap_or_else(|err| panic!("{installed}: {err}"));
        assert_eq!(file, run_ok(venv.command("ferry").args(args)), "{installed} differs from ferry {args:?}");
    }

    let demo = env.path("demo");
    run_ok(venv.command("ferry").arg("demo").arg("--dir").arg(&demo).current_dir(env.dir.path()));
    venv.borrow_datasets(&base_python);
    let dest = demo.join("node-local");
    let report = venv.load("pile-demo-gpt2-1024", None, &demo.join("cache"), Some(&dest));
    assert_eq!(report["imported_datasets_early"], false);
    let module = report["ferry_module"].as_str().unwrap();
    assert!(module.starts_with(&(realpath(&venv.root) + "/")), "ferry imported from {module}, not the venv");
    let rows = &report["rows"];
    assert!(rows["train"].as_u64().unwrap() > 0 && rows["validation"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["columns"]["train"], serde_json::json!(["input_ids"]), "{report}");
    assert_reads_only_under(&report, &dest);
}

/// GLIBC_2.17 -> (2, 17).
fn glibc_versions(dynamic_symbols: &str) -> Vec<(u32, u32)> {
    dynamic_symbols
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .filter_map(|word| word.strip_prefix("GLIBC_"))
        .filter_map(|version| {
            let mut parts = version.split('.').map(|part| part.parse::<u32>());
            Some((parts.next()?.ok()?, parts.next()?.ok()?))
        })
        .collect()
}

#[test]
fn wheel_binary_needs_glibc_2_17_at_most_and_is_tagged_manylinux2014() {
    let (Some(wheel), Some(base_python)) = (wheel(), python()) else { return };
    let file_name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert!(file_name.contains("manylinux_2_17_x86_64") || file_name.contains("manylinux2014"), "{file_name}");
    let env = TestEnv::new();
    let binary = env.path("ferry");
    let extract = "import sys, zipfile\n\
                   wheel = zipfile.ZipFile(sys.argv[1])\n\
                   [name] = [n for n in wheel.namelist() if n.endswith('.data/scripts/ferry')]\n\
                   open(sys.argv[2], 'wb').write(wheel.read(name))\n\
                   [info] = [n for n in wheel.namelist() if n.endswith('.dist-info/WHEEL')]\n\
                   print(wheel.read(info).decode())";
    let metadata = run_ok(Command::new(&base_python).args(["-c", extract]).arg(&wheel).arg(&binary));
    let tags: Vec<&str> = metadata.lines().filter_map(|line| line.strip_prefix("Tag: ")).collect();
    assert!(tags.iter().any(|tag| tag.ends_with("manylinux_2_17_x86_64")), "{metadata}");
    let objdump = match Command::new("objdump").arg("-T").arg(&binary).output() {
        Ok(output) => output,
        Err(err) => return eprintln!("SKIPPED: objdump (binutils) cannot run: {err}"),
    };
    assert!(objdump.status.success(), "{}", describe(&objdump));
    let versions = glibc_versions(&String::from_utf8_lossy(&objdump.stdout));
    assert!(versions.len() > 10, "the binary should import glibc symbols: {}", describe(&objdump));
    let newest = versions.iter().max().unwrap();
    assert!(*newest <= (2, 17), "the binary needs GLIBC_{}.{}", newest.0, newest.1);
}

fn failed(output: &Output) -> String {
    assert!(!output.status.success(), "should have failed:\n{}", describe(output));
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn load_waits_for_a_background_stage_and_reads_node_local_files() {
    let (Some(wheel), Some(base_python)) = (wheel(), python()) else { return };
    let env = TestEnv::new();
    let venv = Venv::install(&base_python, &wheel, env.path("venv"));
    venv.borrow_datasets(&base_python);
    // Enough files that copying them takes a while after `--background` returns.
    env.shards("data", "train", 8, 400, 21);
    let spec =
        env.write("spec.toml", gpt2_spec("wheel-background", "data/train-*.jsonl.zst", "[sequence]\nseq_len = 64\n"));
    let cache = env.cache();
    let prepared = run_ok(venv.command("ferry").arg("prepare").arg(&spec).arg("--json").env("FERRY_CACHE", &cache));
    let prepared: serde_json::Value = serde_json::from_str(&prepared).unwrap();
    let fingerprint = prepared["fingerprint"].as_str().unwrap();

    // Nothing staged: the cache's entry, by name and by fingerprint prefix.
    let from_cache = venv.load("wheel-background", Some("train"), &cache, None);
    assert_reads_only_under(&from_cache, &cache);
    let by_prefix = venv.load(&fingerprint[..10], Some("train"), &cache, None);
    assert_eq!(by_prefix["rows"], from_cache["rows"]);

    // A background stage whose copier is paused (SIGSTOP) while `ferry.load` starts:
    // load must wait for it rather than read through the mirror's symlinks.
    let dest = env.path("node-local");
    let mut stage = venv.command("ferry");
    stage.arg("stage").arg(&spec).arg("--background").arg("--dest").arg(&dest).env("FERRY_CACHE", &cache);
    run_ok(&mut stage);
    let copier = ferry::cache::staging::read_all(&dest).pop().expect("a staging state after --background");
    let copier = Pid::from_raw(copier.pid as i32).expect("the copier's pid");
    let paused = kill_process(copier, Signal::STOP).is_ok();
    let copying = ferry::cache::staging::read_all(&dest).iter().any(|s| s.phase != Phase::Done);
    if !(paused && copying) {
        eprintln!("NOTE: the background copy finished before it could be paused; waiting is not exercised");
    }
    let mut load = venv.load_command("wheel-background", Some("train"), &cache, Some(&dest));
    let loading = load.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    // Long enough for a load that does not wait to have resolved the entry's files.
    std::thread::sleep(Duration::from_secs(2));
    if paused {
        kill_process(copier, Signal::CONT).unwrap();
    }
    let output = loading.wait_with_output().unwrap();
    assert!(output.status.success(), "ferry.load failed:\n{}", describe(&output));
    let staged: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_reads_only_under(&staged, &dest);
    assert_eq!(staged["rows"], from_cache["rows"]);
    assert_eq!(staged["rows"]["train"], prepared["totals"]["rows"], "{prepared}");

    let missing = venv
        .command("python")
        .args(["-c", "import ferry; ferry.load('no-such-dataset')"])
        .env("FERRY_CACHE", &cache)
        .env("FERRY_DEST", &dest)
        .output()
        .unwrap();
    let message = failed(&missing);
    assert!(message.contains("EntryNotFoundError") && message.contains("'no-such-dataset'"), "{message}");
}
