//! The per-node daemon: in-process server tests, and the real binary for peer
//! credentials, stale sockets, SIGTERM and a 64-client load.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{TestEnv, describe, gpt2_spec};
use ferry::daemon::{Daemon, DaemonConfig, client};
use serde_json::json;

/// Runs the server in-process on a socket in a temp dir until the returned sender is dropped.
fn in_process(cache: &Path, idle_timeout: Duration) -> (PathBuf, tempfile::TempDir, std::sync::mpsc::Sender<()>) {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("ferry.sock");
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let config = DaemonConfig {
        cache: ferry::cache::layout::CacheLayout::new(cache),
        ferry: PathBuf::from(env!("CARGO_BIN_EXE_ferry")),
        idle_timeout,
        limits: Default::default(),
    };
    let socket_for_server = socket.clone();
    let (ready, is_ready) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async move {
            let listener = ferry::daemon::bind(&socket_for_server).unwrap();
            ready.send(()).unwrap();
            let shutdown = async move {
                let _ = tokio::task::spawn_blocking(move || stopped.recv()).await;
            };
            ferry::daemon::server::run(listener, shutdown, Daemon::new(config)).await;
        });
    });
    is_ready.recv().unwrap();
    (socket, dir, stop)
}

fn ask(socket: &Path, request: serde_json::Value) -> serde_json::Value {
    client::request(socket, &request, Some(Duration::from_secs(30))).unwrap()
}

#[test]
fn status_and_stage_over_the_socket() {
    let env = TestEnv::new();
    env.shards("data", "train", 2, 60, 1);
    let spec = env.write("spec.toml", gpt2_spec("d", "data/*.jsonl.zst", "[sequence]\nseq_len = 64\n"));
    let short = env.prepare(&spec, &[])["fingerprint"].as_str().unwrap()[..16].to_string();
    let (socket, _dir, _stop) = in_process(&env.cache(), Duration::from_secs(30));

    let status = ask(&socket, json!({"type": "status"}));
    assert_eq!(status["ok"], true, "{status}");
    assert_eq!(status["cache"]["totals"]["entries"], 2, "a token store and its view");
    assert_eq!(status["cache"]["totals"]["token_stores"], 1);

    let dest = env.path("node/ferry");
    let started = ask(&socket, json!({"type": "stage", "entry": short, "dest": dest}));
    assert_eq!(started["ok"], true, "{started}");
    let done = ask(&socket, json!({"type": "wait", "id": started["id"]}));
    assert_eq!(done["ok"], true, "{done}");
    assert_eq!(done["staging"]["phase"], "done");
    assert!(dest.join("by-name/d/train/data-00000-of-00002.arrow").symlink_metadata().unwrap().is_file());
    let status = ask(&socket, json!({"type": "status"}));
    assert_eq!(status["stagings"][0]["phase"], "done", "{status}");
}

#[test]
fn bad_requests_get_error_replies_and_never_stop_the_server() {
    let env = TestEnv::new();
    let (socket, _dir, _stop) = in_process(&env.cache(), Duration::from_secs(1));
    let mut stream = UnixStream::connect(&socket).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut roundtrip = |line: &[u8]| -> serde_json::Value {
        stream.write_all(line).unwrap();
        let mut reply = String::new();
        reader.read_line(&mut reply).unwrap();
        serde_json::from_str(&reply).unwrap()
    };
    let malformed = roundtrip(b"{not json\n");
    assert_eq!(malformed["ok"], false);
    assert!(malformed["error"].as_str().unwrap().contains("bad request"));
    let unknown = roundtrip(b"{\"type\": \"reboot\"}\n");
    assert!(unknown["error"].as_str().unwrap().contains("unknown variant"), "{unknown}");
    // The same connection still works after errors.
    assert_eq!(roundtrip(b"{\"type\": \"status\"}\n")["ok"], true);
    let refused = roundtrip(b"{\"type\": \"wait\", \"id\": 99}\n");
    assert!(refused["error"].as_str().unwrap().contains("no staging 99"));

    // An oversized frame: an error, then the connection closes.
    let mut big = UnixStream::connect(&socket).unwrap();
    big.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = big.write_all(&vec![b'x'; 100 * 1024]);
    let mut reply = String::new();
    BufReader::new(big.try_clone().unwrap()).read_line(&mut reply).unwrap();
    assert!(reply.contains("longer than"), "{reply}");
    let mut rest = Vec::new();
    assert_eq!(big.read_to_end(&mut rest).unwrap_or(0), 0, "closed after an oversized frame");

    // A client that stalls mid-line is dropped after the idle timeout; others are served meanwhile.
    let mut staller = UnixStream::connect(&socket).unwrap();
    staller.write_all(b"{\"type\": \"sta").unwrap();
    assert_eq!(ask(&socket, json!({"type": "status"}))["ok"], true);
    staller.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let started = Instant::now();
    let mut buffer = [0u8; 16];
    assert_eq!(staller.read(&mut buffer).unwrap_or(0), 0, "stalled connection closed");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// The real binary as a daemon on `socket`.
fn spawn_daemon(env: &TestEnv, socket: &Path, extra: &[&str]) -> Child {
    let child = env
        .ferry()
        .args(["daemon", "--socket", socket.to_str().unwrap(), "--cache", env.cache().to_str().unwrap()])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while client::request(socket, &json!({"type": "status"}), Some(Duration::from_secs(1))).is_err() {
        assert!(Instant::now() < deadline, "the daemon did not answer");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn terminate(mut child: Child) -> std::process::Output {
    rustix::process::kill_process(rustix::process::Pid::from_child(&child), rustix::process::Signal::TERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the daemon ignored SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn stale_socket_is_replaced_a_live_daemon_is_not_and_sigterm_stops_cleanly() {
    let env = TestEnv::new();
    let socket = env.path("run/ferry.sock");
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(socket.exists(), "a stale socket file is left behind");
    let daemon = spawn_daemon(&env, &socket, &[]);
    let second = env.run(&["daemon", "--socket", socket.to_str().unwrap()]);
    assert_eq!(second.status.code(), Some(1), "{}", describe(&second));
    assert!(String::from_utf8_lossy(&second.stderr).contains("another ferry daemon answers"));
    assert_eq!(ask(&socket, json!({"type": "status"}))["ok"], true, "the first daemon still answers");
    let output = terminate(daemon);
    assert!(output.status.success(), "{}", describe(&output));
    assert!(!socket.exists(), "the socket is removed on shutdown");
}

const USER: &str = "ferrytest";

/// An unprivileged user for peer-credential tests (root only).
fn unprivileged_user() -> Option<u32> {
    if !rustix::process::getuid().is_root() {
        eprintln!("SKIPPED: peer-credential tests need root to create a user");
        return None;
    }
    if uzers::get_user_by_name(USER).is_none() {
        let created = Command::new("useradd").args(["--no-create-home", "--shell", "/usr/sbin/nologin", USER]).status();
        if !created.is_ok_and(|s| s.success()) {
            eprintln!("SKIPPED: could not create user {USER}");
            return None;
        }
    }
    uzers::get_user_by_name(USER).map(|u| u.uid())
}

fn as_user(socket: &Path, request: serde_json::Value) -> std::process::Output {
    Command::new("runuser")
        .args([
            "-u",
            USER,
            "--",
            env!("CARGO_BIN_EXE_ferry"),
            "request",
            "--socket",
            socket.to_str().unwrap(),
            &request.to_string(),
        ])
        .env_remove("FERRY_CACHE")
        .output()
        .unwrap()
}

#[test]
fn stage_requests_run_as_the_requesting_user_and_others_uids_are_refused() {
    let Some(uid) = unprivileged_user() else { return };
    let env = TestEnv::new();
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    env.shards("data", "train", 2, 40, 2);
    let spec = env.write("spec.toml", gpt2_spec("u", "data/*.jsonl.zst", "[sequence]\nseq_len = 64\n"));
    let short = env.prepare(&spec, &[])["fingerprint"].as_str().unwrap()[..16].to_string();
    let nodes = env.path("nodes");
    std::fs::create_dir(&nodes).unwrap();
    std::fs::set_permissions(&nodes, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let socket = env.path("ferry.sock");
    let daemon = spawn_daemon(&env, &socket, &[]);

    let dest = nodes.join("user-dest");
    let output = as_user(&socket, json!({"type": "stage", "entry": short, "dest": dest}));
    assert!(output.status.success(), "{}", describe(&output));
    let reply: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let done = as_user(&socket, json!({"type": "wait", "id": reply["id"]}));
    assert!(done.status.success(), "{}", describe(&done));
    let staged = dest.join("by-name/u/train/data-00000-of-00002.arrow");
    let meta = staged.symlink_metadata().unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.uid(), uid, "the copy belongs to the requesting user");

    // A user may not ask on behalf of another uid; root may.
    let refused = as_user(&socket, json!({"type": "stage", "entry": short, "dest": nodes.join("root-dest"), "uid": 0}));
    assert_eq!(refused.status.code(), Some(1), "{}", describe(&refused));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("only root may ask"), "{}", describe(&refused));
    let for_user =
        ask(&socket, json!({"type": "stage", "entry": short, "dest": nodes.join("prolog-dest"), "uid": uid}));
    assert_eq!(ask(&socket, json!({"type": "wait", "id": for_user["id"]}))["ok"], true);
    assert_eq!(nodes.join("prolog-dest/by-name/u/dataset_dict.json").metadata().unwrap().uid(), uid);
    // And a user may not wait on or cancel someone else's staging.
    let other = as_user(&socket, json!({"type": "cancel", "id": 99}));
    assert_eq!(other.status.code(), Some(1));
    terminate(daemon);
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)).unwrap().parse().unwrap()
}

/// 64 clients x 100 status requests, several rounds: every reply correct, p99 printed,
/// and the daemon's memory flat across rounds. (Timing is reported, not asserted.)
#[test]
fn sixty_four_clients_are_all_answered_and_memory_stays_flat() {
    let env = TestEnv::new();
    env.shards("data", "train", 1, 20, 3);
    let spec = env.write("spec.toml", gpt2_spec("load", "data/*.jsonl.zst", "[sequence]\nseq_len = 32\n"));
    env.prepare(&spec, &[]);
    let socket = env.path("ferry.sock");
    let daemon = spawn_daemon(&env, &socket, &[]);
    let pid = daemon.id();
    let mut rss = Vec::new();
    for round in 0..4 {
        let latencies: Vec<Duration> = std::thread::scope(|scope| {
            let clients: Vec<_> = (0..64)
                .map(|_| {
                    scope.spawn(|| {
                        let mut stream = UnixStream::connect(&socket).unwrap();
                        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                        let mut reader = BufReader::new(stream.try_clone().unwrap());
                        (0..100)
                            .map(|_| {
                                let started = Instant::now();
                                stream.write_all(b"{\"type\": \"status\"}\n").unwrap();
                                let mut line = String::new();
                                reader.read_line(&mut line).unwrap();
                                let reply: serde_json::Value = serde_json::from_str(&line).unwrap();
                                assert_eq!(reply["ok"], true);
                                assert_eq!(reply["cache"]["totals"]["entries"], 2);
                                started.elapsed()
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            clients.into_iter().flat_map(|c| c.join().unwrap()).collect()
        });
        assert_eq!(latencies.len(), 6400);
        let mut sorted = latencies;
        sorted.sort();
        eprintln!(
            "round {round}: p50 {:?}, p99 {:?}, max {:?}, daemon RSS {} KiB",
            sorted[3200],
            sorted[6335],
            sorted[6399],
            rss_kib(pid)
        );
        rss.push(rss_kib(pid));
    }
    // After the first round warms the allocator, memory does not keep growing.
    assert!(rss[3] <= rss[1] + 4096, "RSS grew across rounds: {rss:?} KiB");
    terminate(daemon);
}
