//! `ferry config`: the effective settings and their sources.

use serde_json::json;

use crate::settings::{Setting, Settings, Source};

pub fn run(settings: &Settings, as_json: bool) -> anyhow::Result<()> {
    let policy = settings.gc_policy(None, None, None)?;
    let show = |setting: Option<Setting<String>>| match setting {
        Some(s) => (s.value, s.source),
        None => ("(unset)".to_string(), Source::Default),
    };
    let path = |s: Setting<std::path::PathBuf>| Setting { value: s.value.display().to_string(), source: s.source };
    let number = |s: Setting<usize>| Setting { value: s.value.to_string(), source: s.source };
    let [size_source, age_source, keep_source] = settings.gc_sources();
    let duration = |s: Setting<std::time::Duration>| (humantime::format_duration(s.value).to_string(), s.source);
    let [heartbeat, stale_age] = settings.liveness()?;
    let rows: Vec<(&str, (String, Source))> = vec![
        ("cache", show(Some(path(settings.cache(None))))),
        ("dest", show(settings.dest(None).map(path))),
        ("jobs", show(Some(number(settings.jobs(None))))),
        ("stage_jobs", show(Some(number(settings.stage_jobs(None))))),
        ("progress_interval", duration(settings.progress_interval())),
        ("gc.max_size", (policy.max_size.map_or("(unset)".into(), |b| bytesize::ByteSize(b).to_string()), size_source)),
        (
            "gc.max_age",
            (policy.max_age.map_or("(unset)".into(), |d| humantime::format_duration(d).to_string()), age_source),
        ),
        ("gc.keep", (policy.keep.map_or("(unset)".into(), |k| k.to_string()), keep_source)),
        ("daemon.socket", show(Some(path(settings.socket(None))))),
        ("daemon.metrics", show(settings.metrics(None))),
        ("liveness.heartbeat_interval", duration(heartbeat)),
        ("liveness.stale_age", duration(stale_age)),
    ];
    // Who may use the cache: on a lab's shared cache, its group and mode say it.
    let cache_access = crate::errors::access_of(&settings.cache(None).value);
    if as_json {
        let map: serde_json::Map<String, serde_json::Value> = rows
            .into_iter()
            .map(|(name, (value, source))| (name.to_string(), json!({"value": value, "source": source})))
            .collect();
        let config = settings.config_path().map(|p| p.display().to_string());
        let report = json!({"config_file": config, "settings": map, "cache_access": cache_access});
        out!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        match settings.config_path() {
            Some(path) => out!("config file: {}", path.display())?,
            None => out!("config file: none ($FERRY_CONFIG unset, {} absent)", crate::settings::DEFAULT_CONFIG)?,
        }
        for (name, (value, source)) in rows {
            out!("{name:<27} {value:<40} ({source})")?;
        }
        out!("cache access: {}", cache_access.as_deref().unwrap_or("nothing of the cache's path exists"))?;
    }
    Ok(())
}
