//! The unit files in systemd/ pass `systemd-analyze verify` without a single
//! diagnostic (it exits 0 even for unknown keys, so its output is checked too).

use std::path::Path;
use std::process::Command;

fn verify(units: &[(&str, String)]) -> Option<String> {
    if Command::new("systemd-analyze").arg("--version").output().is_err() {
        eprintln!("SKIPPED: systemd-analyze is not installed (scripts/test.sh installs systemd as root)");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<_> = units
        .iter()
        .map(|(name, text)| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        })
        .collect();
    let output = Command::new("systemd-analyze").arg("verify").args(&paths).output().unwrap();
    let diagnostics = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{diagnostics}");
    Some(diagnostics.trim().to_string())
}

/// The units with ExecStart pointed at the binary under test (verify checks it exists).
fn units() -> Vec<(&'static str, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd");
    ["ferry.service", "ferry-gc.service", "ferry-gc.timer"]
        .into_iter()
        .map(|name| {
            let text = std::fs::read_to_string(dir.join(name)).unwrap();
            (name, text.replace("/usr/local/bin/ferry", env!("CARGO_BIN_EXE_ferry")))
        })
        .collect()
}

#[test]
fn unit_files_pass_systemd_analyze_verify() {
    let units = units();
    assert!(
        units[0].1.contains("ProtectSystem=")
            && units[0].1.contains("RuntimeDirectory=ferry")
            && units[0].1.contains("Restart=")
    );
    assert!(units[2].1.contains("OnCalendar="));
    if let Some(diagnostics) = verify(&units) {
        assert!(diagnostics.is_empty(), "systemd-analyze verify complained:\n{diagnostics}");
    }
}

#[test]
fn the_check_catches_a_broken_unit() {
    let mut units = units();
    units[0].1 = units[0].1.replace("Restart=on-failure", "Restart=sometimes\nBogusKey=1");
    if let Some(diagnostics) = verify(&units) {
        assert!(diagnostics.contains("BogusKey"), "{diagnostics}");
    }
}
