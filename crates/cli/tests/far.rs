//! `uswap run --far`: the swap device in a memcached cluster (docs/RUN.md, "The far tier").
//! Each test starts its own servers on loopback (far's `testing::Memcached`, killed when the
//! test ends, panics included), runs a real program under the real shim, and kills or
//! restarts servers while the program runs. Skips, saying so, without userfaultfd's
//! kernel-mode faults (root) or without memcached (.ci/setup installs it).

use far::testing::{url, Memcached};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;
use common::{compile, shim, BoundedOutput};

/// The longest one step of a test may take.
const DEADLINE: Duration = Duration::from_secs(120);

fn can_run() -> bool {
    let ok = uffd::probe().is_ok_and(|p| p.require_kernel_faults().is_ok());
    if !ok {
        eprintln!("skipped: userfaultfd without kernel-mode faults here");
    } else if !Memcached::available() {
        eprintln!("skipped: memcached is not installed (.ci/setup installs it)");
        return false;
    }
    ok
}

fn servers(n: usize) -> Vec<Memcached> {
    servers_of(n, 256)
}

fn servers_of(n: usize, memory_mb: u32) -> Vec<Memcached> {
    (0..n).map(|_| Memcached::start(memory_mb).expect("memcached starts")).collect()
}

fn compile_with(name: &str, extra: &[&str]) -> common::Program {
    common::compile_with("run_programs", name, extra)
}

/// `uswap run` of a program that talks on stdin/stdout; killed on drop.
struct Run {
    child: Child,
    lines: mpsc::Receiver<String>,
    errors: Option<std::thread::JoinHandle<String>>,
}

impl Run {
    fn start(far: &str, program: &[&str]) -> Run {
        let mut child = Command::new(env!("CARGO_BIN_EXE_uswap"))
            .args(["run", "--verbose", "--budget", "32M", "--pool-size", "8M", "--far", far])
            .args(["--idle-poll", "off", "--stats-every", "0.2", "--stats-file", "/dev/null"])
            .arg("--")
            .args(program)
            .env("USWAP_PRELOAD", shim())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (stdout, mut stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let _ = tx.send(line.unwrap_or_default());
            }
        });
        let errors = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Run { child, lines, errors: Some(errors) }
    }

    /// The program's next line (None: it ended).
    fn line(&self) -> Option<String> {
        self.lines.recv_timeout(DEADLINE).ok()
    }

    fn send(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
    }

    /// Every counter of the live stats (`uswap stat --all`).
    fn stats(&self) -> HashMap<String, u64> {
        let out = Command::new(env!("CARGO_BIN_EXE_uswap"))
            .args(["stat", "--all", &self.child.id().to_string()])
            .bounded_output();
        let text = String::from_utf8_lossy(&out.stdout);
        // `name value` lines, indented under `tree` and `pid N` (this run has one process).
        text.lines()
            .filter_map(|l| l.trim_start().split_once(' '))
            .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
            .collect()
    }

    /// Waits until the live stats satisfy `done`, at most [`DEADLINE`].
    fn wait_stats(&self, what: &str, done: impl Fn(&HashMap<String, u64>) -> bool) {
        let start = Instant::now();
        loop {
            let stats = self.stats();
            if done(&stats) {
                return;
            }
            assert!(start.elapsed() < DEADLINE, "{what}: not within {DEADLINE:?}: {stats:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for the end: exit status and stderr.
    fn finish(mut self) -> (ExitStatus, String) {
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(start.elapsed() < DEADLINE, "the run did not end");
            std::thread::sleep(Duration::from_millis(20));
        };
        let err = self.errors.take().unwrap().join().unwrap();
        eprintln!("{err}");
        (status, err)
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn get(stats: &HashMap<String, u64>, name: &str) -> u64 {
    stats.get(name).copied().unwrap_or(0)
}

/// 96 MiB of pages that do not compress under 32 MiB and a pool of 8 MiB: most of them
/// live in the far tier. Returns the run, at "ready", with the pages written out.
fn started(servers: &[Memcached], program: &Path) -> Run {
    let run = Run::start(&url(servers), &[program.to_str().unwrap(), "96"]);
    assert_eq!(run.line().as_deref(), Some("ready"));
    run.wait_stats("pages flushed to the servers", |s| {
        get(s, "far_pages_flushed") >= 8192 && get(s, "far_staged_pages") == 0
    });
    run
}

#[test]
fn one_server_killed_mid_run_every_page_verified_from_replicas() {
    if !can_run() {
        return;
    }
    let mut servers = servers(3);
    let program = compile("pages_check");
    let mut run = started(&servers, &program);
    servers[1].kill();
    run.send("check");
    assert_eq!(run.line().as_deref(), Some("verified"));
    run.wait_stats("reads from replicas and copies re-created", |s| {
        get(s, "far_replica_reads") > 0 && get(s, "far_rereplications") > 0
    });
    run.send("check"); // again, with pages written while a server is gone
    assert_eq!(run.line().as_deref(), Some("verified"));
    run.send("exit");
    assert_eq!(run.line().as_deref(), Some("ok"));
    let (status, err) = run.finish();
    assert!(status.success(), "{err}");
    assert!(err.contains("far tier: 3 servers (2 up)"), "{err}");
    assert!(err.contains("0 pages lost"), "{err}");
}

/// A child forked without exec, and its own child, read every page their parent had put
/// in the far tier: through connections of their own, from the slots the parent keeps
/// for them; the parent's pages stay right after they exit.
#[test]
fn forked_children_read_their_parents_far_pages() {
    if !can_run() {
        return;
    }
    // The child and the grandchild each page out up to the program's size to a far tier of
    // their own, which stays on the servers until the run ends: room for three.
    let servers = servers_of(2, 512);
    let program = compile("pages_check");
    let mut run = started(&servers, &program);
    run.send("fork");
    assert_eq!(run.line().as_deref(), Some("forked verified"));
    run.send("check");
    assert_eq!(run.line().as_deref(), Some("verified"));
    run.send("exit");
    assert_eq!(run.line().as_deref(), Some("ok"));
    let (status, err) = run.finish();
    assert!(status.success(), "{err}");
    assert!(err.contains("0 pages lost"), "{err}");
}

/// The copies of a run (the parent's, and those of the far tiers its forked child and
/// grandchild start) are deleted when the run ends: the servers hold nothing after it.
#[test]
fn a_runs_far_copies_are_deleted_when_it_ends() {
    if !can_run() {
        return;
    }
    let servers = servers_of(2, 512);
    let items = || -> u64 { servers.iter().map(|s| s.stat("curr_items").unwrap()).sum() };
    let program = compile("pages_check");
    let mut run = started(&servers, &program);
    assert!(items() >= 2 * 8192, "two copies of every page flushed: {}", items());
    run.send("fork");
    assert_eq!(run.line().as_deref(), Some("forked verified"));
    run.send("exit");
    assert_eq!(run.line().as_deref(), Some("ok"));
    let (status, err) = run.finish();
    assert!(status.success(), "{err}");
    // `uswap run` deletes before it exits; the deadline only bounds a slow server.
    let start = Instant::now();
    while items() != 0 {
        assert!(start.elapsed() < DEADLINE, "{} items left on the servers: {err}", items());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!err.contains("copies stay"), "{err}");
}

#[test]
fn every_server_killed_raises_sigbus_naming_the_tier_never_wrong_data() {
    if !can_run() {
        return;
    }
    let mut servers = servers(2);
    let program = compile("pages_check");
    let mut run = started(&servers, &program);
    for server in &mut servers {
        server.kill();
    }
    run.send("check");
    let line = run.line();
    let (status, err) = run.finish();
    assert_eq!(line, None, "the program read every page with no server: {err}");
    use std::os::unix::process::ExitStatusExt;
    // uswap run ends as its program did: killed by SIGBUS is 128 + 7.
    assert_eq!(status.code(), Some(128 + libc::SIGBUS), "{status:?}: {err}");
    assert!(!err.contains("is wrong"), "wrong data was read: {err}");
    assert!(err.contains("far tier (memcached): page at slot"), "{err}");
    assert!(err.contains("its access raises SIGBUS"), "{err}");
    let _ = status.signal();
}

#[test]
fn a_server_restarted_empty_mid_run_is_detected_and_its_copies_recreated() {
    if !can_run() {
        return;
    }
    let mut servers = servers(3);
    let program = compile("pages_check");
    let mut run = started(&servers, &program);
    let before = get(&run.stats(), "far_rereplications");
    servers[2].restart_empty().unwrap();
    run.wait_stats("the restart seen and copies re-created", |s| {
        get(s, "far_restarts") + get(s, "far_down_events") >= 1
            && get(s, "far_rereplications") > before
            && get(s, "far_servers_up") == 3
    });
    run.send("check");
    assert_eq!(run.line().as_deref(), Some("verified"));
    run.send("exit");
    assert_eq!(run.line().as_deref(), Some("ok"));
    let (status, err) = run.finish();
    assert!(status.success(), "{err}");
    assert!(err.contains("0 pages lost"), "{err}");
}

/// The far tier's threads (flushers, repairer) and the fault path's requests never call
/// glibc's `malloc` once the shim manages the program: run_programs/malloc_check.c,
/// preloaded after the shim, counts the calls of threads named `uswap-*`.
#[test]
fn far_tier_threads_never_call_malloc() {
    if !can_run() {
        return;
    }
    let servers = servers(2);
    let check = compile_with("malloc_check", &["-g", "-shared", "-fPIC"]);
    let err = pages_check_in_far(&servers, &["--verbose"], Some(&check));
    let report = err
        .lines()
        .find_map(|l| l.strip_prefix("uswap-malloc-check: engine-thread calls "))
        .expect("the interposer reported");
    let mut numbers = report.split(|c: char| !c.is_ascii_digit()).filter(|w| !w.is_empty());
    let engine_calls: u64 = numbers.next().unwrap().parse().unwrap();
    let checked: u64 = numbers.next().unwrap().parse().unwrap();
    assert!(checked > 0, "the interposer was not live: {report}");
    assert_eq!(engine_calls, 0, "engine threads called malloc: {report}");
    assert!(err.contains("far tier: 2 servers (2 up)"), "{err}");
}

/// The write-behind buffer is bounded by the budget (an eighth of it): a buffer as large
/// as the budget, resident once filled and beyond the engine's reach, would keep the run
/// at twice its budget.
#[test]
fn a_small_budget_is_not_doubled_by_the_write_behind_buffer() {
    if !can_run() {
        return;
    }
    let servers = servers(2);
    let err = pages_check_in_far(&servers, &[], None);
    let peak_mib: f64 = err
        .split(", peak ")
        .nth(1)
        .and_then(|rest| rest.split(" MiB").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no peak in the summary: {err}"));
    assert!(peak_mib < 16.0 + 8.0, "peak {peak_mib} MiB under a 16 MiB budget: {err}");
}

/// `uswap run ARGS` of `pages_check 48` (48 MiB checked and written back) under 16M with a
/// 1 MiB pool, its far tier on `servers`, with `preload` loaded after the shim; asserts the
/// program verified every page and exited 0, and returns what `uswap run` printed on
/// stderr.
fn pages_check_in_far(servers: &[Memcached], args: &[&str], preload: Option<&Path>) -> String {
    let program = compile("pages_check");
    let mut command = Command::new(env!("CARGO_BIN_EXE_uswap"));
    command
        .arg("run")
        .args(args)
        .args(["--budget", "16M", "--pool-size", "1M", "--far", &url(servers)])
        .args(["--idle-poll", "off", "--"])
        .arg(&program)
        .arg("48")
        .env("USWAP_PRELOAD", shim())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(preload) = preload {
        command.env("LD_PRELOAD", preload);
    }
    let mut child = command.spawn().unwrap();
    child.stdin.take().unwrap().write_all(b"check\nexit\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    eprintln!("{err}");
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ready\nverified\nok\n");
    err
}

fn python() -> Option<String> {
    let out =
        Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// examples/python_objects.py with `objects` objects under --budget 128M and a pool of 1M
/// beside it (its objects compress twentyfold: a larger pool would hold them all), three
/// servers of `server_mb` each: the same checksum as without uswap, most pages out in the
/// far tier, every one sealed.
fn python_objects_in_the_far_tier(objects: &str, server_mb: u32) {
    if !can_run() {
        return;
    }
    let Some(py) = python() else {
        eprintln!("skipped: no python3");
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/python_objects.py");
    let script = script.to_str().unwrap();
    let plain = Command::new(&py).args([script, objects]).output().unwrap();
    assert!(plain.status.success());
    let servers = servers_of(3, server_mb);
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args([
            "run",
            "--verbose",
            "--budget",
            "128M",
            "--pool-size",
            "1M",
            "--far",
            &url(&servers),
        ])
        .args(["--idle-poll", "off", "--", &py, script, objects])
        .env("USWAP_PRELOAD", shim())
        .bounded_output();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("{err}\n{objects} objects in {:.1} s", started.elapsed().as_secs_f64());
    assert!(out.status.success(), "{err}");
    assert_eq!(out.stdout, plain.stdout, "same checksum");
    let line = err.lines().find(|l| l.contains("pages out:")).unwrap();
    let file: u64 = line.split("file ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(file > 20_000, "pages went to the far tier: {line}");
    assert!(err.contains("far tier: 3 servers (3 up)"), "{err}");
    assert!(err.contains("0 pages lost"), "{err}");
    let sealed = err.lines().find(|l| l.contains("encryption (AES-256-GCM): ")).expect(&err);
    let pages: u64 = sealed.split(": ").nth(2).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(pages >= file, "every page sent to the servers was sealed: {sealed}");
}

#[test]
fn far_without_encryption_or_with_a_bad_url_is_refused_before_the_program_starts() {
    let cases = [
        (vec!["--far", "memcached://127.0.0.1:1", "--encrypt", "off"], "always encrypted"),
        (vec!["--far", "redis://127.0.0.1:1"], "not memcached://"),
        (vec!["--far", "memcached://127.0.0.1:1", "--far-replicas", "2"], "use 1..=1"),
        (vec!["--far", "memcached://127.0.0.1:1", "--far-replicas", "1"], "does not answer"),
        (vec!["--far", "memcached://127.0.0.1:1"], "--far-replicas 2: use 1..=1"),
    ];
    for (flags, expect) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_uswap"))
            .arg("run")
            .args(&flags)
            .args(["--", "/bin/true"])
            .env("USWAP_PRELOAD", shim())
            .bounded_output();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flags:?}");
        assert!(err.contains(expect), "{flags:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
}

#[test]
fn python_300k_objects_in_the_far_tier() {
    python_objects_in_the_far_tier("300000", 512);
}

/// The README's run: a million Python objects, 638 MiB (longer than CI should spend; run
/// with `--ignored`).
#[test]
#[ignore]
fn python_a_million_objects_in_the_far_tier() {
    python_objects_in_the_far_tier("1000000", 1536);
}
