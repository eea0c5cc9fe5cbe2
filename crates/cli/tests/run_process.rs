//! `uswap run` and what programs and their callers do to the process around it (docs/RUN.md,
//! docs/SAFETY.md): signals sent to `uswap run`, `uswap run` killed, a closed stderr. Each
//! test is named after the defect it guards against.

use std::io::BufRead;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{can_run, compile, shim, uswap, BoundedOutput, TempDir};

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
    let mut run =
        spawn_uswap(&["run", "--verbose", "--budget", "8M", "--", "sh", "-c", &script], None);
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

/// `uswap run` killed by SIGKILL: the program goes on, managed by the engine inside it (it
/// pages out and in after, and checks every word), the idle pollers' process dies with
/// `uswap run`, and the program's exit, the run's last member out, removes the run
/// directory.
#[test]
fn uswap_run_killed_leaves_the_program_managed_and_the_last_member_removes_the_directory() {
    if !can_run() {
        return;
    }
    let (exe, tmp) = (compile("orphan_check"), TempDir::new("orphan"));
    let result = tmp.0.join("result");
    let args =
        ["run", "--verbose", "--budget", "8M", "--idle-poll", "on", "--", exe.to_str().unwrap()];
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
    wait_until(Duration::from_secs(60), "the run directory to go", || dirs().is_empty());
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
    let run = spawn_uswap(&["run", "--verbose", "--budget", "8M", "--", "true"], Some(tmp.path()));
    assert!(run.wait_with_output().unwrap().status.success());
    let mut left: Vec<String> = (std::fs::read_dir(&tmp.0).unwrap().flatten())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    left.sort();
    let ours = format!("uswap-run-{}-c-0", std::process::id());
    assert_eq!(left, vec![ours, format!("uswap-run-{dead}-d-0")]);
}

/// `uswap run` with its stderr a pipe nobody reads (`... 2>&1 | true`): the summary cannot
/// be written, and the exit status is still the program's.
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
        .args(["run", "--verbose", "--budget", "8M", "--", "sh", "-c", "exit 7"])
        .env("USWAP_PRELOAD", shim())
        .stderr(Stdio::from(write))
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(7));
    let out = uswap(&["run", "--verbose", "--budget", "8M", "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
}

/// The program starts with no signal blocked, as without uswap: given `uswap run`'s mask
/// (every forwarded signal and CHLD blocked, for its own `sigwaitinfo`), a shell never woke
/// from `wait` for a job it had put in the background, and the TERM that `uswap run`
/// forwarded to it waited, blocked, for ever.
#[test]
fn a_shell_waits_for_its_background_job_with_no_signal_blocked() {
    if !can_run() {
        return;
    }
    let script = "grep SigBlk /proc/$$/status; sleep 0.2 & wait; echo waited";
    let mut command = Command::new(env!("CARGO_BIN_EXE_uswap"));
    command.args(["run", "--budget", "8M", "--", "sh", "-c", script]);
    command.env("USWAP_PRELOAD", shim());
    let out = common::output_within(&mut command, Duration::from_secs(60));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}{}", stderr(&out));
    assert!(text.contains("SigBlk:\t0000000000000000"), "{text}");
    assert!(text.contains("waited"), "{text}");
}

/// Whether this test process is root (set-id files to make, setpriv to drop to nobody).
fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipped: not root (cannot make set-id files for other users)");
    }
    root
}

/// A copy of a dynamically linked program (the shell) at `dir/name`, mode `mode`, owned
/// by `uid:gid`.
fn set_id_copy(dir: &TempDir, name: &str, mode: u32, uid: u32, gid: u32) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.0.join(name);
    std::fs::copy("/bin/sh", &path).unwrap();
    std::os::unix::fs::chown(&path, Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path.to_str().unwrap().to_string()
}

/// Programs the loader runs in secure mode (AT_SECURE: it ignores LD_PRELOAD) are refused
/// in one line before they start: set-user-ID to another user, set-group-ID to another
/// group, a script whose interpreter is one of those or statically linked. A set-user-ID
/// program owned by the caller changes no id, and runs managed.
#[test]
fn a_secure_mode_program_is_refused_before_it_starts() {
    if !can_run() || !root() {
        return;
    }
    let dir = TempDir::new("secure");
    let setuid = set_id_copy(&dir, "setuid", 0o4755, 65534, 0);
    let setgid = set_id_copy(&dir, "setgid", 0o2755, 0, 65534);
    let own = set_id_copy(&dir, "own", 0o4755, 0, 0);
    let script = dir.0.join("script");
    std::fs::write(&script, format!("#!{setgid}\necho hi\n")).unwrap();
    let script = script.to_str().unwrap();
    let marker = dir.0.join("ran");
    let touch = format!("touch {}", marker.display());
    for (program, expect) in [
        (setuid.as_str(), "is set-user-ID (owner uid 65534)"),
        (setgid.as_str(), "is set-group-ID (group gid 65534)"),
        (script, "(the interpreter of"),
    ] {
        let out = uswap(&["run", "--verbose", "--budget", "64M", "--", program, "-c", &touch]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{program}: {err}");
        assert!(err.contains(expect) && err.contains("secure mode (AT_SECURE)"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(!marker.exists(), "{program} ran");
    }
    let out = uswap(&["run", "--verbose", "--budget", "64M", "--", &own, "-c", "exit 4"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("pages out:"), "managed: {}", stderr(&out));
}

/// A program with file capabilities that would raise the caller's (here nobody's)
/// permitted set is refused, before `uswap run` looks at userfaultfd.
#[test]
fn a_program_with_file_capabilities_is_refused_for_an_unprivileged_caller() {
    if !root() {
        return;
    }
    let has = |tool: &str| Command::new(tool).arg("--help").output().is_ok();
    if !has("setcap") || !has("setpriv") {
        eprintln!("skipped: setcap or setpriv not installed (.ci/setup installs libcap2-bin)");
        return;
    }
    let dir = TempDir::new("caps");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let capped = set_id_copy(&dir, "capped", 0o755, 0, 0);
    let set = Command::new("setcap").args(["cap_net_raw+ep", &capped]).status().unwrap();
    assert!(set.success(), "setcap");
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_uswap"))
        .args(["run", "--verbose", "--budget", "64M", "--", &capped, "-c", "true"])
        .env("USWAP_PRELOAD", shim())
        .bounded_output();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("given file capabilities") && err.contains("AT_SECURE"), "{err}");
}

/// A `#!` script whose interpreter is statically linked is refused as the interpreter
/// itself is (the loader that would load the shim never runs).
#[test]
fn a_script_whose_interpreter_is_static_is_refused() {
    let dir = TempDir::new("static-interp");
    let src = dir.0.join("s.c");
    std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
    let exe = dir.0.join("static");
    let built = Command::new("cc").args(["-static", "-o"]).arg(&exe).arg(&src).status();
    if !built.is_ok_and(|s| s.success()) {
        eprintln!("skipped: no static libc to build a static program with");
        return;
    }
    let script = dir.0.join("script");
    std::fs::write(&script, format!("#!{}\n", exe.display())).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = uswap(&["run", "--verbose", "--budget", "64M", "--", script.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("(the interpreter of") && err.contains("statically linked"), "{err}");
}

/// Budgets that cannot work are refused in one line before the program starts: below what
/// a process needs under the shim at all (6 MiB), and ones whose pool share the pool
/// refuses (64K-320K gave a pool under 64 KiB, 330G one over 64 GiB: the shim gave up
/// inside the program, exit 125; 1M-5M thrashed at about 100 faults a page).
#[test]
fn budgets_that_cannot_work_are_refused_before_the_program_starts() {
    let dir = TempDir::new("bounds");
    let marker = dir.0.join("ran");
    let touch = ["/usr/bin/touch", marker.to_str().unwrap()];
    let cases: [(&[&str], &str); 6] = [
        (&["--budget", "64K"], "is below 6.00 MiB, what a process needs"),
        (&["--budget", "320K"], "is below 6.00 MiB, what a process needs"),
        (&["--budget", "5M"], "is below 6.00 MiB, what a process needs"),
        (&["--budget", "330G"], "a pool of 66.0 GiB, and the pool takes 64.0 KiB to 64.0 GiB"),
        (&["--budget", "6M", "--pool-percent", "1"], "raise --budget or --pool-percent"),
        (&["--budget", "100G", "--pool-percent", "80"], "lower --pool-percent"),
    ];
    for (flags, expect) in cases {
        let args = [&["run"][..], flags, &["--"], &touch].concat();
        let out = uswap(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{flags:?}: {err}");
        assert!(err.contains(expect), "{flags:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(!marker.exists(), "{flags:?} started the program");
    }
    // The same budgets with the pool sized apart, or none, pass the pool's check.
    for flags in
        [&["--budget", "330G", "--zswap", "off"][..], &["--budget", "6M", "--pool-size", "1M"]]
    {
        let args = [&["run"][..], flags, &["--", "true"]].concat();
        let out = uswap(&args);
        assert!(out.status.success() || !can_run(), "{flags:?}: {}", stderr(&out));
    }
}

/// `uswap run` under an address-space limit, as `ulimit -v` sets: 4 GB runs (the shim's
/// arena is sized to a quarter of the limit), Python's objects come back whole; 195 MiB is
/// refused in one line.
#[test]
fn an_address_space_limit_is_kept_or_refused_in_one_line() {
    if !can_run() {
        return;
    }
    let uswap_bin = env!("CARGO_BIN_EXE_uswap");
    let script = "x=[bytes([i%251])*4000 for i in range(12000)]; \
                  print(sum(b == bytes([i%251])*4000 for i, b in enumerate(x)))";
    let run = |kib: u32, budget: &str| {
        let line = format!(
            "ulimit -v {kib} && exec {uswap_bin} run --verbose --budget {budget} -- \
             python3 -c \"{script}\""
        );
        let out = Command::new("bash").args(["-c", &line]).env("USWAP_PRELOAD", shim()).output();
        let out = out.unwrap();
        eprintln!("{}", stderr(&out));
        out
    };
    let out = run(4_000_000, "16M");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "12000");
    assert!(stderr(&out).contains("pages out:"), "{}", stderr(&out));
    let out = run(200_000, "16M");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("address-space limit (ulimit -v) of 195 MiB"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// A swap file that would live in memory (TMPDIR on a tmpfs) is said in one line naming
/// `--swap-file`; the run goes on.
#[test]
fn a_swap_file_in_memory_is_said() {
    if !can_run() {
        return;
    }
    let is_tmpfs = rustix::fs::statfs("/dev/shm").is_ok_and(|s| s.f_type as u64 == 0x0102_1994);
    if !is_tmpfs {
        eprintln!("skipped: /dev/shm is not a tmpfs here");
        return;
    }
    let dir = std::path::PathBuf::from(format!("/dev/shm/uswap-tmpfs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(["run", "--verbose", "--budget", "8M", "--", "true"])
        .env("USWAP_PRELOAD", shim())
        .env("TMPDIR", &dir)
        .bounded_output();
    let _ = std::fs::remove_dir_all(&dir);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let note = err.lines().filter(|l| l.contains("(a tmpfs)")).collect::<Vec<_>>();
    assert_eq!(note.len(), 1, "{err}");
    assert!(note[0].contains("give --swap-file on a disk"), "{err}");
}

/// The figure after `key` on the final summary's `pages out:` line.
fn pages_out_figure(err: &str, key: &str) -> u64 {
    let line = err.lines().find(|l| l.starts_with("uswap: pages out:"));
    let line = line.unwrap_or_else(|| panic!("{err}"));
    let rest = line.split(key).nth(1).unwrap_or_else(|| panic!("{key} in {line}"));
    rest.trim_start().split([',', ')', ';', ' ']).next().unwrap().parse().unwrap()
}

/// `--record` and `--stats-file` never write through a symbolic link, nor over an existing
/// file without `--force` (a root user could be made to overwrite any file through a link
/// planted in a shared directory); with `--force` the trace is replaced and the stats file
/// appended to; /dev/null is written as it is.
#[test]
fn files_written_for_the_user_refuse_links_and_existing_files() {
    let dir = TempDir::new("outputs");
    let victim = dir.0.join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let link = dir.0.join("link");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let (link, victim_s) = (link.to_str().unwrap(), victim.to_str().unwrap());
    for (flag, path, force, expect) in [
        ("--record", link, false, "is a symbolic link"),
        ("--record", link, true, "is a symbolic link"),
        ("--stats-file", link, true, "is a symbolic link"),
        ("--record", victim_s, false, "already exists: give --force"),
        ("--stats-file", victim_s, false, "already exists: give --force"),
        ("--plot", link, true, "is a symbolic link"),
        ("--plot", victim_s, false, "already exists: give --force"),
    ] {
        let mut args = vec!["run", "--verbose", "--budget", "8M", flag, path];
        if force {
            args.push("--force");
        }
        args.extend(["--", "true"]);
        let out = uswap(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(expect) && err.trim().lines().count() == 1, "{args:?}: {err}");
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n", "written through");
    if !can_run() {
        return;
    }
    let args = ["run", "--verbose", "--budget", "8M", "--force", "--stats-every", "0.05"];
    let out = uswap(&[&args[..], &["--stats-file", victim_s, "--", "sleep", "0.3"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&victim).unwrap();
    assert!(text.starts_with("precious\nuswap live at "), "appended to: {text}");
    // A file of another kind holds nothing to lose: written without --force.
    let args = [
        "run",
        "--verbose",
        "--budget",
        "8M",
        "--stats-every",
        "0.05",
        "--stats-file",
        "/dev/null",
    ];
    let out = uswap(&[&args[..], &["--", "sleep", "0.2"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
}

/// `--record` with a program that execs itself: every image's records are in the trace
/// (each appends to the file `uswap run` made, and flushes every handler pass), about as
/// many evictions as both images' page-outs.
#[test]
fn a_recorded_program_that_execs_keeps_every_images_records() {
    if !can_run() {
        return;
    }
    let (exe, dir) = (compile("exec_check"), TempDir::new("record-exec"));
    let trace = dir.0.join("t.trace");
    let args = ["run", "--verbose", "--budget", "8M", "--stats-every", "0.05", "--record"];
    let out = uswap(&[&args[..], &[trace.to_str().unwrap(), "--", exe.to_str().unwrap()]].concat());
    let _ = std::fs::remove_file(&exe);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{err}");
    let (_, records) = runstat::trace::decode(&std::fs::read(&trace).unwrap()).expect("a trace");
    let page = 4096;
    let evicted: u64 = records
        .iter()
        .filter(|r| r.kind == runstat::trace::RecordKind::Evict)
        .map(|r| r.len / page)
        .sum();
    let counted =
        ["zero ", "pool ", "file "].iter().map(|k| pages_out_figure(&err, k)).sum::<u64>()
            - pages_out_figure(&err, "written back ");
    // Each image writes 24 MiB under 8M: at least 16 MiB, 4096 pages, go out of each.
    assert!(counted >= 2 * 4096, "both images' page-outs counted: {err}");
    assert!(evicted * 10 >= counted * 9, "trace {evicted} pages, stats {counted}: {err}");
    let mut times: Vec<u64> = records.iter().map(|r| r.time_ns).collect();
    times.dedup();
    assert!(times.windows(2).filter(|w| w[1] < w[0]).count() < 16, "one time base for both");
}

/// `--stats-file` without `--stats-every` gets the tree's totals at exit (docs/RUN.md, "Stats
/// and traces"): both images' counters added up, the per-size ones included, and the
/// broker's figures, readable as one stats file.
#[test]
fn the_stats_file_gets_the_trees_totals_at_exit() {
    if !can_run() {
        return;
    }
    let (exe, dir) = (compile("exec_check"), TempDir::new("totals"));
    let stats = dir.0.join("stats");
    let args = ["run", "--budget", "8M", "--stats-file", stats.to_str().unwrap(), "--"];
    let out = uswap(&[&args[..], &[exe.to_str().unwrap()]].concat());
    let _ = std::fs::remove_file(&exe);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{err}");
    let text = std::fs::read_to_string(&stats).unwrap();
    let totals = runstat::StatsFile::parse(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let pages_out = totals.get("swpout_zero") + totals.get("zswpout") + totals.get("pswpout");
    // Each image writes 24 MiB under 8M: at least 16 MiB, 4096 pages, go out of each.
    assert!(pages_out >= 2 * 4096, "both images' page-outs: {text}");
    let folios: u64 = (0..=9).map(|order| totals.get(&format!("swpout_{}kB", 4 << order))).sum();
    assert!(folios > 0, "the per-size counters: {text}");
    assert_eq!(totals.get("tree_budget_bytes"), 8 << 20, "{text}");
    assert!(totals.get("tree_peak_bytes") > 0, "{text}");
}

/// `mlockall(MCL_CURRENT | MCL_FUTURE)` (chronyd, corosync, real-time audio programs) in a
/// program that paged out most of 48 MiB under 16M: every word reads back, what the program
/// locked stays resident (over the budget, which the summary says), and the shim's 16 GiB
/// arena reservation is not made resident (it is mapped with no access where unused).
/// After `munlockall` the engine pages out through the staging slots the call filled with
/// pages (a take into one read its page as the program's), and every word reads back.
#[test]
fn mlockall_locks_the_programs_memory_not_the_shims_reservation() {
    if !can_run() {
        return;
    }
    let exe = compile("mlock_check");
    let out = uswap(&["run", "--verbose", "--budget", "16M", "--", exe.to_str().unwrap()]);
    let _ = std::fs::remove_file(&exe);
    let (text, err) = (String::from_utf8_lossy(&out.stdout).to_string(), stderr(&out));
    assert!(out.status.success(), "{text}{err}");
    let words: Vec<&str> = text.split([' ', ',']).filter(|w| !w.is_empty()).collect();
    assert_eq!(&words[..3], ["mlock:", "bad", "0"], "{text}");
    let (locked, resident): (u64, u64) = (words[4].parse().unwrap(), words[7].parse().unwrap());
    assert!((56..256).contains(&locked) && resident < 256, "{text}{err}");
    assert!(err.contains("the program locked its memory (mlockall)"), "{err}");
    assert!(text.contains("unlocked: bad 0"), "{text}{err}");
}

/// 200 threads filling 1 MiB each under 48M with `--delivery sigbus`, twice: every word
/// reads back, no thread dies.
#[test]
fn many_exiting_threads_under_sigbus_delivery_keep_their_data() {
    if !can_run() {
        return;
    }
    let exe = compile("threads_many");
    for _ in 0..2 {
        let args = ["run", "--verbose", "--budget", "48M", "--delivery", "sigbus", "--"];
        let out = uswap(&[&args[..], &[exe.to_str().unwrap(), "200", "2"]].concat());
        let err = stderr(&out);
        assert!(out.status.success(), "{err}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "threads 200 bad 0", "{err}");
        assert!(!err.contains("internal error"), "{err}");
    }
    let _ = std::fs::remove_file(&exe);
}

/// 200 threads filling 1 MiB each (blocks glibc maps itself) under 48M with the handler
/// delivery: every word right, and a peak over the budget is said in the summary, with its
/// causes (pages filled before the scan adopted their mapping).
#[test]
fn many_threads_over_the_budget_are_told_why() {
    if !can_run() {
        return;
    }
    let exe = compile("threads_many");
    let args = ["run", "--verbose", "--budget", "48M", "--"];
    let out = uswap(&[&args[..], &[exe.to_str().unwrap(), "200", "1"]].concat());
    let _ = std::fs::remove_file(&exe);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "threads 200 bad 0", "{err}");
    let line = err.lines().find(|l| l.contains("peak resident")).expect("summary");
    let peak = line.split("peak resident ").nth(1).unwrap().split(' ').collect::<Vec<_>>();
    let mib: f64 = peak[0].parse().unwrap();
    let mib = if peak[1].starts_with("GiB") { mib * 1024.0 } else { mib };
    if mib > 51.0 {
        assert!(err.contains("the budget was exceeded (peak"), "{err}");
    }
}
