//! `uswap run` and what programs and their callers do to the process around it (docs/RUN.md,
//! docs/SAFETY.md). Each test is named after the defect it guards against.

use std::io::BufRead;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{can_run, compile, shim, uswap, TempDir};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// `uswap ARGS` started with `TMPDIR` (if given) and its stdout piped.
fn spawn_uswap(args: &[&str], tmpdir: Option<&str>) -> Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_uswap"));
    command.args(args).env("USWAP_PRELOAD", shim()).stdout(Stdio::piped());
    if let Some(dir) = tmpdir {
        command.env("TMPDIR", dir);
    }
    command.spawn().unwrap()
}

/// Waits (at most `limit`) until `done` holds.
fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The children of process `pid` (from /proc/*/stat).
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some(after) = stat.rsplit_once(')').map(|(_, rest)| rest.to_string()) else {
            continue;
        };
        if after.split_whitespace().nth(1).and_then(|p| p.parse().ok()) == Some(pid) {
            out.push(child);
        }
    }
    out
}

/// Signals sent to `uswap run` reach the program: USR1, USR2, ALRM, PIPE, WINCH, HUP, each
/// trapped by a shell that says so, then TERM, on which it exits 3 (`uswap run`'s status).
/// Before, only INT, TERM, HUP and QUIT were forwarded: any other killed `uswap run` and
/// left the program running under init.
#[test]
fn signals_sent_to_uswap_run_reach_the_program() {
    if !can_run() {
        return;
    }
    let names = ["USR1", "USR2", "ALRM", "PIPE", "WINCH", "HUP"];
    let mut script = String::new();
    for name in names {
        script += &format!("trap 'echo got {name}' {name}\n");
    }
    script += "trap 'echo got TERM; exit 3' TERM\necho ready\n\
               i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done\n";
    let mut run = spawn_uswap(&["run", "--budget", "8M", "--", "sh", "-c", &script], None);
    let mut lines = std::io::BufReader::new(run.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    let pid = run.id() as libc::pid_t;
    let signals = [libc::SIGUSR1, libc::SIGUSR2, libc::SIGALRM, libc::SIGPIPE, libc::SIGWINCH];
    for (name, signal) in names.iter().zip(signals.into_iter().chain([libc::SIGHUP])) {
        // SAFETY: kill takes integers; the pid is our own child's.
        unsafe { libc::kill(pid, signal) };
        assert_eq!(lines.next().unwrap().unwrap(), format!("got {name}"));
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(lines.next().unwrap().unwrap(), "got TERM");
    let status = run.wait().unwrap();
    assert_eq!(status.code(), Some(3), "uswap run passes the program's status on");
}

/// `uswap run` killed by SIGKILL: the program goes on, managed by the engine inside it
/// (it pages out and in after, and checks every word), the idle pollers' process dies with
/// `uswap run`, and the program's exit, the run's last member out, removes the run
/// directory. Before, the directory stayed in /tmp for ever.
#[test]
fn uswap_run_killed_leaves_the_program_managed_and_the_last_member_removes_the_directory() {
    if !can_run() {
        return;
    }
    let (exe, tmp) = (compile("orphan_check"), TempDir::new("orphan"));
    let result = tmp.0.join("result");
    let args = ["run", "--budget", "8M", "--idle-poll", "on", "--", exe.to_str().unwrap()];
    let mut run = spawn_uswap(&[&args[..], &[result.to_str().unwrap()]].concat(), Some(tmp.path()));
    let mut lines = std::io::BufReader::new(run.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    let dirs = || -> Vec<String> {
        (std::fs::read_dir(&tmp.0).unwrap().flatten())
            .map(|e| e.file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with("uswap-run-"))
            .collect()
    };
    assert_eq!(dirs().len(), 1, "one run directory");
    let children = children_of(run.id());
    run.kill().unwrap();
    run.wait().unwrap();
    wait_until(Duration::from_secs(60), "the program's result", || {
        std::fs::read_to_string(&result).is_ok_and(|r| r.ends_with('\n'))
    });
    assert_eq!(std::fs::read_to_string(&result).unwrap(), "bad 0\n");
    wait_until(Duration::from_secs(10), "the run directory to go", || dirs().is_empty());
    for child in children {
        let proc = format!("/proc/{child}");
        wait_until(Duration::from_secs(10), "uswap run's children to end", || {
            !Path::new(&proc).exists()
                || std::fs::read_to_string(format!("{proc}/stat")).is_ok_and(|s| s.contains(") Z"))
        });
    }
    let _ = std::fs::remove_file(&exe);
}

/// Run directories left by runs whose members are all gone (all killed) are removed by the
/// next `uswap run`; one whose creator lives, or whose lock someone holds, is kept; and the
/// run's own directory is gone after it.
#[test]
fn a_later_run_removes_directories_whose_members_are_all_gone() {
    if !can_run() {
        return;
    }
    let tmp = TempDir::new("sweep");
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let make = |name: String, lock: bool| {
        let dir = tmp.0.join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("live-1"), "x").unwrap();
        lock.then(|| std::fs::File::create(dir.join("lock")).unwrap())
    };
    make(format!("uswap-run-{dead}-a-0"), true);
    make(format!("uswap-run-{dead}-b-0"), false);
    make(format!("uswap-run-{}-c-0", std::process::id()), true);
    let held = make(format!("uswap-run-{dead}-d-0"), true).unwrap();
    // SAFETY: flock on our own open file.
    assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_SH) }, 0);
    let run = spawn_uswap(&["run", "--budget", "8M", "--", "true"], Some(tmp.path()));
    assert!(run.wait_with_output().unwrap().status.success());
    let mut left: Vec<String> = (std::fs::read_dir(&tmp.0).unwrap().flatten())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    left.sort();
    let ours = format!("uswap-run-{}-c-0", std::process::id());
    assert_eq!(left, vec![ours, format!("uswap-run-{dead}-d-0")]);
}

/// `uswap run` with its stderr a pipe nobody reads (`... 2>&1 | true`): the summary cannot
/// be written, and the exit status is still the program's. Before, a panic on EPIPE made
/// it 101.
#[test]
fn a_closed_stderr_keeps_the_programs_exit_status() {
    if !can_run() {
        return;
    }
    let mut ends = [0; 2];
    // SAFETY: pipe2 writes two descriptors into `ends`.
    assert_eq!(unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: both ends are new descriptors, owned here.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    drop(read);
    let status = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(["run", "--budget", "8M", "--", "sh", "-c", "exit 7"])
        .env("USWAP_PRELOAD", shim())
        .stderr(Stdio::from(write))
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(7));
    let out = uswap(&["run", "--budget", "8M", "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
}
