//! Where things are and how much to use: the cache root and the worker count,
//! from flags, the environment (Slurm's included) and defaults.

use std::path::PathBuf;

/// The cache root: `--cache`, else `$FERRY_CACHE`, else `$SCRATCH/ferry`, else
/// `~/.cache/ferry`.
pub fn cache_root(flag: Option<PathBuf>) -> PathBuf {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    flag.or_else(|| env("FERRY_CACHE"))
        .or_else(|| env("SCRATCH").map(|scratch| scratch.join("ferry")))
        .or_else(|| env("HOME").map(|home| home.join(".cache").join("ferry")))
        .unwrap_or_else(|| PathBuf::from(".ferry-cache"))
}

/// Worker threads: `--jobs`, else `$SLURM_CPUS_PER_TASK`, else the cores this
/// process may use.
pub fn workers(flag: Option<usize>) -> usize {
    flag.filter(|n| *n > 0)
        .or_else(|| {
            std::env::var("SLURM_CPUS_PER_TASK").ok().and_then(|v| v.trim().parse().ok()).filter(|n: &usize| *n > 0)
        })
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
