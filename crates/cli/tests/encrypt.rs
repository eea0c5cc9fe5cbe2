//! `uswap run --encrypt`: the swap file holds no plaintext of the program's memory.
//!
//! A C program writes a secret into every page of 64 MiB under a 16 MiB budget with no
//! pool, so most pages go to the swap file, then waits while the test reads the file
//! through the program's own descriptor (the file is unlinked) and counts the secret's
//! copies: none with `--encrypt on`, thousands with `--encrypt off` (so the scan can see
//! them). Then the program checks every page. Needs userfaultfd with kernel-mode faults
//! (root): skips with a message otherwise.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;
use common::{compile_with, shim, Program, TempDir};

/// The longest a run may take before the test kills it.
const DEADLINE: Duration = Duration::from_secs(120);

fn can_run() -> bool {
    let ok = uffd::probe().is_ok_and(|p| p.require_kernel_faults().is_ok());
    if !ok {
        eprintln!("skipped: userfaultfd without kernel-mode faults here");
    }
    ok
}

fn compile(name: &str, extra: &[&str]) -> Program {
    compile_with("run_programs", name, extra)
}

/// A `uswap run` child, killed on drop if still running.
struct Run(Child);

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `/proc/PID/fd/N` link of the process holding `path` (deleted) open.
fn descriptor_of(path: &Path) -> Option<PathBuf> {
    let target = format!("{} (deleted)", path.display());
    for proc in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(fds) = std::fs::read_dir(proc.path().join("fd")) else { continue };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == target) {
                return Some(fd.path());
            }
        }
    }
    None
}

/// Copies of `needle` in the file behind `fd`, and its pages that are not all zeros.
fn scan(fd: &Path, needle: &[u8]) -> (usize, usize) {
    let mut file = std::fs::File::open(fd).unwrap();
    let mut page = vec![0u8; 4096];
    let (mut copies, mut data_pages) = (0, 0);
    // Copies never straddle pages: the program writes whole copies inside each page.
    while file.read_exact(&mut page).is_ok() {
        if page.iter().any(|&b| b != 0) {
            data_pages += 1;
            copies += page.windows(needle.len()).filter(|w| *w == needle).count();
        }
    }
    (copies, data_pages)
}

/// Runs the program under `--encrypt mode`; returns (copies of the secret in the swap file,
/// its pages holding data).
fn run_and_scan(program: &Path, mode: &str) -> (usize, usize) {
    let secret = format!("uswap-secret-{}-{mode}-0123456789", std::process::id());
    let scratch = TempDir::new(&format!("enc-{mode}"));
    let swap = scratch.0.join("swap");
    let mut child = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(["run", "--budget", "16M", "--zswap", "off", "--swap-size", "256M"])
        .args(["--idle-poll", "off", "--encrypt", mode, "--swap-file"])
        .arg(&swap)
        .arg("--")
        .arg(program)
        .args([secret.as_str(), "64"])
        .env("USWAP_PRELOAD", shim())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (stdout, mut stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let mut run = Run(child);
    let (tx, rx) = mpsc::channel();
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
    let started = Instant::now();
    let ready = rx.recv_timeout(DEADLINE).expect("the program said nothing in time");
    assert_eq!(ready, "ready");
    let fd = descriptor_of(&swap).expect("a process holds the swap file open");
    let (copies, data_pages) = scan(&fd, secret.as_bytes());
    run.0.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    let rest = DEADLINE.saturating_sub(started.elapsed());
    let done = rx.recv_timeout(rest).expect("the program did not finish in time");
    let status = run.0.wait().unwrap();
    let err = errors.join().unwrap();
    eprintln!("--encrypt {mode}: {copies} copies in {data_pages} pages of data\n{err}");
    assert_eq!(done, "ok", "the program's pages came back intact: {err}");
    assert!(status.success(), "{err}");
    assert!(!swap.exists(), "the swap file is removed");
    (copies, data_pages)
}

#[test]
fn the_swap_file_holds_no_plaintext_with_encryption_and_does_without() {
    if !can_run() {
        return;
    }
    let program = compile("secret_pages", &[]);
    // 64 MiB under 16 MiB: at least 32 MiB (8,192 pages) went to the file.
    let (copies, data_pages) = run_and_scan(&program, "on");
    assert!(data_pages >= 8192, "only {data_pages} pages reached the file");
    assert_eq!(copies, 0, "the secret is in the encrypted swap file");
    let (copies, data_pages) = run_and_scan(&program, "off");
    assert!(data_pages >= 8192, "only {data_pages} pages reached the file");
    assert!(copies >= 8192 * 50, "the scan found {copies} copies in the plain file");
}

/// The crypt layer (ring's AES-GCM) on the engine's threads never calls glibc's `malloc`:
/// run_programs/malloc_check.c, preloaded after the shim, counts the calls made on threads
/// named `uswap-*` once the shim manages the program (crates/preload/src/lib.rs essay).
/// With no pool every page out is sealed on the reclaimer and every page in opened on the
/// handler.
#[test]
fn sealing_and_opening_pages_never_call_malloc_on_engine_threads() {
    if !can_run() {
        return;
    }
    let program = compile("secret_pages", &[]);
    let check = compile("malloc_check", &["-g", "-shared", "-fPIC"]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(["run", "--verbose", "--budget", "16M", "--zswap", "off", "--swap-size", "256M"])
        .args(["--idle-poll", "off", "--encrypt", "on", "--"])
        .arg(&program)
        .args(["uswap-malloc-secret", "48"])
        .env("USWAP_PRELOAD", shim())
        .env("LD_PRELOAD", &check)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Named so its threads are not taken for the engine's (`uswap-*`); the program reads
    // its line once its pages are written: give it at once.
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    eprintln!("{err}");
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ready\nok\n");
    let report = err
        .lines()
        .find_map(|l| l.strip_prefix("uswap-malloc-check: engine-thread calls "))
        .expect("the interposer reported");
    let mut numbers = report.split(|c: char| !c.is_ascii_digit()).filter(|w| !w.is_empty());
    let engine_calls: u64 = numbers.next().unwrap().parse().unwrap();
    let checked: u64 = numbers.next().unwrap().parse().unwrap();
    assert!(checked > 0, "the interposer was not live: {report}");
    assert_eq!(engine_calls, 0, "engine threads called malloc: {report}");
    let sealed = err.lines().find(|l| l.contains("encryption (AES-256-GCM): ")).expect(&err);
    let pages: u64 = sealed.split(": ").nth(2).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(pages >= 4096, "{sealed}");
}
