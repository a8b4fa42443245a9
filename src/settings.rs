//! Effective settings and where each comes from. Precedence: command-line flag >
//! environment (`FERRY_*`, then Slurm's) > site config file (`$FERRY_CONFIG`, else
//! `/etc/ferry/ferry.toml`) > built-in default.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::errors::{Failure, Fault};
use crate::gc::GcPolicy;

pub const DEFAULT_CONFIG: &str = "/etc/ferry/ferry.toml";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading config {path}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("invalid config {path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("invalid liveness timeouts ({origin}): {message}")]
    Liveness { origin: String, message: String },
}

/// The site config file. Paths may use `$VAR` (`cache = "$SCRATCH/ferry"`); a path
/// whose variable is unset counts as not configured.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SiteConfig {
    pub cache: Option<String>,
    pub dest: Option<String>,
    /// Tokenizer workers for `prepare`.
    pub jobs: Option<usize>,
    /// Copies in flight for `stage`.
    pub stage_jobs: Option<usize>,
    #[serde(default)]
    pub gc: GcConfig,
    #[serde(default)]
    pub daemon: DaemonConfig,
    #[serde(default)]
    pub liveness: LivenessConfig,
}

/// How fast a holder on another host that stopped heartbeating counts as dead.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LivenessConfig {
    /// How often leases and shard claims are refreshed ("10s").
    pub heartbeat_interval: Option<String>,
    /// A heartbeat older than this is dead ("2m"); must exceed the interval.
    pub stale_age: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GcConfig {
    pub max_size: Option<String>,
    pub max_age: Option<String>,
    pub keep: Option<usize>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    pub socket: Option<String>,
    /// `127.0.0.1:9184` to serve Prometheus metrics.
    pub metrics: Option<String>,
}

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "name", rename_all = "snake_case")]
pub enum Source {
    Flag(String),
    Env(String),
    Config(PathBuf),
    Default,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Flag(flag) => write!(f, "flag {flag}"),
            Source::Env(name) => write!(f, "environment {name}"),
            Source::Config(path) => write!(f, "config {}", path.display()),
            Source::Default => f.write_str("default"),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Setting<T> {
    pub value: T,
    pub source: Source,
}

/// The config file in effect: `$FERRY_CONFIG` (must exist), else the default path if present.
pub fn load_config() -> Result<(SiteConfig, Option<PathBuf>), ConfigError> {
    let path = match std::env::var_os("FERRY_CONFIG").filter(|v| !v.is_empty()) {
        Some(path) => PathBuf::from(path),
        None if Path::new(DEFAULT_CONFIG).exists() => PathBuf::from(DEFAULT_CONFIG),
        None => return Ok((SiteConfig::default(), None)),
    };
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read { path: path.clone(), source })?;
    let config = toml::from_str(&text)
        .map_err(|err| ConfigError::Invalid { path: path.clone(), message: err.to_string().trim_end().to_string() })?;
    Ok((config, Some(path)))
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The CPUs this process may use (its CPU affinity and cgroup quota), at least one:
/// the default `jobs`.
pub fn usable_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A count of at least one; zero means "not set".
fn positive(count: Option<usize>) -> Option<usize> {
    count.filter(|n| *n > 0)
}

fn expand(text: &str) -> Option<PathBuf> {
    shellexpand::full(text).ok().map(|expanded| PathBuf::from(expanded.as_ref()))
}

/// All settings, resolved from flags (as given), the environment and the config.
pub struct Settings {
    config: SiteConfig,
    config_path: Option<PathBuf>,
}

impl Settings {
    pub fn load() -> Result<Settings, ConfigError> {
        let (config, config_path) = load_config()?;
        Ok(Settings { config, config_path })
    }

    fn config_source(&self) -> Source {
        Source::Config(self.config_path.clone().unwrap_or_default())
    }

    pub fn config_path(&self) -> Option<&Path> {
        self.config_path.as_deref()
    }

    /// The first of: the flag, the environment variables in order (each read by
    /// `from_env`, which may refuse a value), the config file's value.
    fn first<T>(
        &self,
        flag: Option<T>,
        flag_name: &str,
        env_names: &[&str],
        from_env: impl Fn(&str, String) -> Option<T>,
        configured: Option<T>,
    ) -> Option<Setting<T>> {
        if let Some(value) = flag {
            return Some(Setting { value, source: Source::Flag(flag_name.into()) });
        }
        for name in env_names {
            if let Some(value) = env(name).and_then(|text| from_env(name, text)) {
                return Some(Setting { value, source: Source::Env((*name).into()) });
            }
        }
        configured.map(|value| Setting { value, source: self.config_source() })
    }

    pub fn cache(&self, flag: Option<PathBuf>) -> Setting<PathBuf> {
        let configured = self.config.cache.as_deref().and_then(expand);
        self.first(flag, "--cache", &["FERRY_CACHE"], |_, text| Some(text.into()), configured).unwrap_or_else(|| {
            if let Some(scratch) = env("SCRATCH") {
                return Setting { value: Path::new(&scratch).join("ferry"), source: Source::Env("SCRATCH".into()) };
            }
            let home = env("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
            Setting { value: home.join(".cache").join("ferry"), source: Source::Default }
        })
    }

    pub fn dest(&self, flag: Option<PathBuf>) -> Option<Setting<PathBuf>> {
        let from_env = |name: &str, text: String| {
            Some(if name == "SLURM_TMPDIR" { Path::new(&text).join("ferry") } else { text.into() })
        };
        let configured = self.config.dest.as_deref().and_then(expand);
        self.first(flag, "--dest", &["FERRY_DEST", "SLURM_TMPDIR"], from_env, configured)
    }

    /// Tokenizer workers for `prepare`.
    pub fn jobs(&self, flag: Option<usize>) -> Setting<usize> {
        let envs = ["FERRY_JOBS", "SLURM_CPUS_PER_TASK"];
        self.first(
            positive(flag),
            "--jobs",
            &envs,
            |_, text| positive(text.trim().parse().ok()),
            positive(self.config.jobs),
        )
        .unwrap_or_else(|| Setting { value: usable_cpus(), source: Source::Default })
    }

    /// Copies in flight for `stage`: staging is bound by I/O latency, so several per core.
    /// How often a run without a terminal prints a progress line: the
    /// `FERRY_PROGRESS_INTERVAL` seconds (fractions allowed), else 30 s.
    pub fn progress_interval(&self) -> Setting<Duration> {
        let seconds = |_: &str, text: String| {
            let seconds = text.trim().parse::<f64>().ok().filter(|s| s.is_finite() && *s > 0.0)?;
            Duration::try_from_secs_f64(seconds).ok()
        };
        self.first(None, "", &["FERRY_PROGRESS_INTERVAL"], seconds, None)
            .unwrap_or(Setting { value: Duration::from_secs(30), source: Source::Default })
    }

    pub fn stage_jobs(&self, flag: Option<usize>) -> Setting<usize> {
        let configured = positive(self.config.stage_jobs);
        self.first(
            positive(flag),
            "--jobs",
            &["FERRY_STAGE_JOBS"],
            |_, text| positive(text.trim().parse().ok()),
            configured,
        )
        .unwrap_or_else(|| {
            let per_core = self.jobs(None);
            Setting { value: (per_core.value * 16).clamp(16, 64), source: per_core.source }
        })
    }

    /// The gc policy: each bound from its flag, `FERRY_GC_*`, or the config's `[gc]`.
    pub fn gc_policy(
        &self,
        max_size: Option<u64>,
        max_age: Option<Duration>,
        keep: Option<usize>,
    ) -> Result<GcPolicy, ConfigError> {
        let invalid =
            |message: String| ConfigError::Invalid { path: self.config_path.clone().unwrap_or_default(), message };
        let [size_text, age_text, keep_setting] = self.gc_bounds();
        let max_size = match (max_size, size_text) {
            (Some(size), _) => Some(size),
            (None, Some(Setting { value: text, .. })) => {
                Some(parse_size::parse_size(&text).map_err(|e| invalid(format!("gc.max_size {text:?}: {e}")))?)
            }
            (None, None) => None,
        };
        let max_age = match (max_age, age_text) {
            (Some(age), _) => Some(age),
            (None, Some(Setting { value: text, .. })) => {
                Some(humantime::parse_duration(&text).map_err(|e| invalid(format!("gc.max_age {text:?}: {e}")))?)
            }
            (None, None) => None,
        };
        let keep = keep.or_else(|| keep_setting.and_then(|s| s.value.parse().ok()));
        Ok(GcPolicy { max_size, max_age, keep })
    }

    /// Where each gc bound (max_size, max_age, keep) comes from when no flag is given.
    pub fn gc_sources(&self) -> [Source; 3] {
        self.gc_bounds().map(|bound| bound.map_or(Source::Default, |setting| setting.source))
    }

    /// Each gc bound's text from `FERRY_GC_*` or the config's `[gc]` (an unparsable
    /// `FERRY_GC_KEEP` is ignored, as a count of zero is elsewhere).
    fn gc_bounds(&self) -> [Option<Setting<String>>; 3] {
        let gc = &self.config.gc;
        let text =
            |name: &str, configured: Option<String>| self.first(None, "", &[name], |_, text| Some(text), configured);
        let keep_text = |_: &str, text: String| text.parse::<usize>().is_ok().then_some(text);
        [
            text("FERRY_GC_MAX_SIZE", gc.max_size.clone()),
            text("FERRY_GC_MAX_AGE", gc.max_age.clone()),
            self.first(None, "", &["FERRY_GC_KEEP"], keep_text, gc.keep.map(|keep| keep.to_string())),
        ]
    }

    /// The daemon's socket: `--socket`, `$FERRY_SOCKET`, config, else `/run/ferry/ferry.sock` as
    /// root or `$XDG_RUNTIME_DIR/ferry.sock`.
    pub fn socket(&self, flag: Option<PathBuf>) -> Setting<PathBuf> {
        let configured = self.config.daemon.socket.as_deref().and_then(expand);
        self.first(flag, "--socket", &["FERRY_SOCKET"], |_, text| Some(text.into()), configured).unwrap_or_else(|| {
            let value = if rustix::process::getuid().is_root() {
                PathBuf::from("/run/ferry/ferry.sock")
            } else {
                env("XDG_RUNTIME_DIR").map_or_else(std::env::temp_dir, PathBuf::from).join("ferry.sock")
            };
            Setting { value, source: Source::Default }
        })
    }

    pub fn metrics(&self, flag: Option<String>) -> Option<Setting<String>> {
        self.first(flag, "--metrics", &["FERRY_METRICS"], |_, text| Some(text), self.config.daemon.metrics.clone())
    }
}

impl Settings {
    /// The heartbeat interval and stale age, each from `FERRY_HEARTBEAT_INTERVAL` /
    /// `FERRY_STALE_AGE`, the config's `[liveness]`, or the default. Durations are
    /// "30s", "2m" or a bare number of seconds.
    pub fn liveness(&self) -> Result<[Setting<Duration>; 2], ConfigError> {
        let defaults = crate::cache::liveness::Liveness::default();
        let section = &self.config.liveness;
        let resolve = |name: &str, configured: Option<String>, default: Duration| match self.first(
            None,
            "",
            &[name],
            |_, text| Some(text),
            configured,
        ) {
            None => Ok(Setting { value: default, source: Source::Default }),
            Some(Setting { value: text, source }) => match parse_duration(&text) {
                Some(value) if !value.is_zero() => Ok(Setting { value, source }),
                _ => Err(ConfigError::Liveness {
                    origin: source.to_string(),
                    message: format!("{text:?} is not a positive duration such as \"10s\" or \"2m\""),
                }),
            },
        };
        let heartbeat = resolve("FERRY_HEARTBEAT_INTERVAL", section.heartbeat_interval.clone(), defaults.heartbeat)?;
        let stale = resolve("FERRY_STALE_AGE", section.stale_age.clone(), defaults.stale_age)?;
        if stale.value <= heartbeat.value {
            return Err(ConfigError::Liveness {
                origin: format!("{} and {}", heartbeat.source, stale.source),
                message: format!(
                    "the stale age ({}) must exceed the heartbeat interval ({}), or live holders would look dead",
                    humantime::format_duration(stale.value),
                    humantime::format_duration(heartbeat.value)
                ),
            });
        }
        Ok([heartbeat, stale])
    }
}

/// "30s", "2m 30s" or a bare number of seconds.
fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    text.parse::<u64>().map(Duration::from_secs).ok().or_else(|| humantime::parse_duration(text).ok())
}

impl Failure for ConfigError {
    fn fault(&self) -> Fault {
        Fault::User
    }
}
