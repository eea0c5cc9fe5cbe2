//! `uswap run` and programs that close, reuse or replace descriptors (docs/SAFETY.md,
//! "Descriptors"): uswap's own descriptors (userfaultfds, the swap file, the handler's
//! eventfd, pagemap and /proc files) live high, registered, out of the program's way
//! (crates/fds). Each program pages out far more than its budget, plays its game, then
//! checks every word; and no file of the program's may receive a byte.
//!
//! Before: the shim's descriptors sat at 3-9. `closefrom(3)` read back 31.4M of 33.5M
//! words as zeros; a shell's `exec 4>>app.log` got the shell's heap pages written into the
//! log; Python's `os.closerange(3, 1024)` and a shell's `exec 5>/dev/null` segfaulted.

use std::process::Output;

mod common;
use common::{can_run, compile, uswap, TempDir};

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// `fd_games MODE` under 16M with no pool (every page out goes to the swap file): it
/// checks every word right, and its files (all in `dir`) are empty.
fn fd_game(mode: &str) -> (Output, TempDir) {
    let exe = compile("fd_games");
    let dir = TempDir::new(&format!("fd-{mode}"));
    let args =
        ["run", "--verbose", "--budget", "16M", "--zswap", "off", "--", exe.to_str().unwrap()];
    let out = uswap(&[&args[..], &[mode, dir.path()]].concat());
    let _ = std::fs::remove_file(&exe);
    (out, dir)
}

fn assert_game_kept_everything(mode: &str) {
    if !can_run() {
        return;
    }
    let (out, dir) = fd_game(mode);
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{mode}: {text}{err}");
    assert!(text.contains(&format!("fd_games {mode}: bad 0 of")), "{mode}: {text}{err}");
    let written: Vec<_> = dir.sizes().into_iter().filter(|(_, len)| *len > 0).collect();
    assert!(written.is_empty(), "{mode}: the program's files received {written:?}: {err}");
    assert!(!err.contains("was closed or replaced"), "{mode}: {err}");
    let pages_in: u64 = err
        .lines()
        .find(|l| l.contains("pages out:"))
        .and_then(|l| l.split("file ").last())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(pages_in > 1000, "{mode}: pages came back from the swap file after the game: {err}");
}

/// A shell's `echo x >> file` frees fd 1 and takes it back with `dup2`. The engine's file
/// work (the stats files, /proc reads) opened descriptors for a moment in the program's
/// table, took the freed number, and its `close` then closed the program's file: a build's
/// `echo ... >> .make-settings` failed with "I/O error" in one run of three.
#[test]
fn a_number_the_program_frees_and_takes_back_stays_its_own() {
    assert_fd_reuse_clean("16M", &[]);
}

/// The same in a forked child that does not exec (a shell's subshell), paging out all
/// along under a small budget. Its file work ran in the shared table, and its handler
/// opened /proc/self/status and the followed thread's stat file at their first read: each
/// sat at a freed number for a moment.
#[test]
fn a_forked_child_under_pressure_keeps_its_numbers_and_runs_on() {
    assert_fd_reuse_clean("8M", &["fork"]);
}

/// `run_programs/fd_reuse.c` for 3 s under `budget` and `--stats-every 0.01`, with
/// `extra` arguments: no round went wrong.
fn assert_fd_reuse_clean(budget: &str, extra: &[&str]) {
    if !can_run() {
        return;
    }
    let exe = compile("fd_reuse");
    let dir = TempDir::new("fd-reuse");
    let program = exe.to_str().unwrap();
    let args = ["run", "--budget", budget, "--stats-every", "0.01", "--", program, dir.path()];
    let out = uswap(&[&args[..], &["3"], extra].concat());
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{text}{err}");
    assert!(err.contains("fd_reuse: bad 0 of"), "{text}{err}");
}

/// Command substitutions of a shell holding more than its budget: each is a forked child
/// that starts its own file thread. That thread's first hand-off went through a std
/// channel, which wakes the receiving thread through its handle, allocated on glibc's heap:
/// in the child a managed page, paged out, and the child's fault handler that wrote it
/// waited for itself (the shell hung at its first few substitutions).
#[test]
fn a_shells_command_substitutions_under_a_small_budget_finish() {
    if !can_run() {
        return;
    }
    let script = "big=$(head -c 3000000 /dev/zero | tr '\\0' a); a=(); \
                  for i in $(seq 20000); do a+=(item$i); done; \
                  for i in $(seq 30); do x=$(echo ${#big} $i); y=$(echo ${a[$((i*50))]}); done; \
                  echo done $x $y";
    let args = ["run", "--budget", "8M", "--stats-every", "0.01", "--", "bash", "-c", script];
    let out = uswap(&args);
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{text}{err}");
    assert_eq!(text.trim(), "done 3000000 30 item1501", "{err}");
}

#[test]
fn closefrom_3_keeps_the_programs_data() {
    assert_game_kept_everything("closefrom");
}

#[test]
fn close_range_3_to_the_top_keeps_the_programs_data() {
    assert_game_kept_everything("close_range");
}

#[test]
fn a_close_loop_to_the_limit_keeps_the_programs_data() {
    assert_game_kept_everything("close_loop");
}

#[test]
fn dup2_onto_every_low_number_writes_nothing_into_the_file() {
    assert_game_kept_everything("dup2_low");
}

/// The program finds uswap's descriptors (the numbers in /proc/self/fd it did not open)
/// and dups its file onto each: uswap's move elsewhere first, the file stays empty.
#[test]
fn dup2_onto_uswaps_own_numbers_moves_them_and_writes_nothing() {
    assert_game_kept_everything("dup2_ours");
}

/// The figure after `key` on the summary's `pages out:` line.
fn pages_out_figure(err: &str, key: &str) -> u64 {
    let line = err.lines().find(|l| l.contains("pages out:")).unwrap_or_else(|| panic!("{err}"));
    let rest = line.split(key).nth(1).unwrap_or_else(|| panic!("{key} in {line}"));
    rest.trim_start().split([',', ')', ';', ' ']).next().unwrap().parse().unwrap()
}

/// A shell script that builds a few MiB of strings (20 MiB of words under an 8M budget),
/// sends descriptors 5 and 6 to /dev/null (`exec 5>/dev/null 6>/dev/null`), builds more,
/// redirects descriptors 3 to 9 to files of its own with `exec N>>file`, builds more and
/// prints a checksum of it all: the same output as without uswap, and empty files.
#[test]
fn a_shell_exec_onto_descriptors_3_to_9_keeps_its_data_and_files() {
    if !can_run() {
        return;
    }
    let script = "D=$1\n\
                  printf -v a '%s-' {1..60000}\n\
                  exec 5>/dev/null 6>/dev/null\n\
                  printf -v c '%s=' {1..30000}\n\
                  exec 3>>\"$D/f3\" 4>>\"$D/f4\" 5>>\"$D/f5\" 6>>\"$D/f6\" 7>>\"$D/f7\" \
                  8>>\"$D/f8\" 9>>\"$D/f9\"\n\
                  printf -v b '%s+' {60000..1}\n\
                  echo ${#a} ${#b} ${#c} $(printf '%s%s%s' \"$a\" \"$b\" \"$c\" | cksum)\n";
    let (plain_dir, dir) = (TempDir::new("sh-plain"), TempDir::new("sh"));
    let plain =
        std::process::Command::new("bash").args(["-c", script, "sh", plain_dir.path()]).output();
    let plain = plain.unwrap();
    assert!(plain.status.success());
    let out = uswap(&[
        "run",
        "--verbose",
        "--budget",
        "8M",
        "--",
        "bash",
        "-c",
        script,
        "sh",
        dir.path(),
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(stdout(&out), stdout(&plain), "{err}");
    assert!(pages_out_figure(&err, "file ") + pages_out_figure(&err, "pool ") > 1000, "{err}");
    let sizes = dir.sizes();
    assert_eq!(sizes.len(), 7, "{sizes:?}");
    assert!(sizes.iter().all(|(_, len)| *len == 0), "the shell's files received {sizes:?}");
}

/// Python closes descriptors 3 to 1023 (`os.closerange`, as `subprocess` and daemons do),
/// then 3 to its soft limit, around 48 MB of objects under 16M, opens files of its own, and
/// reads every object back.
#[test]
fn python_closerange_keeps_its_objects_and_files() {
    if !can_run() {
        return;
    }
    let Ok(py) = std::process::Command::new("python3").arg("--version").output() else {
        eprintln!("skipped: no python3");
        return;
    };
    assert!(py.status.success());
    let dir = TempDir::new("py");
    let script = "import os, resource, sys\n\
                  d = sys.argv[1]\n\
                  x = [bytes([i % 251]) * 4000 for i in range(12000)]\n\
                  os.closerange(3, 1024)\n\
                  os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n\
                  files = [open(os.path.join(d, 'f%d' % k), 'ab') for k in range(8)]\n\
                  y = [bytes([i % 251]) * 4000 for i in range(12000, 14000)]\n\
                  bad = sum(b != bytes([i % 251]) * 4000 for i, b in enumerate(x + y))\n\
                  print('objects', len(x + y), 'bad', bad)\n";
    let out =
        uswap(&["run", "--verbose", "--budget", "16M", "--", "python3", "-c", script, dir.path()]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(stdout(&out).trim(), "objects 14000 bad 0", "{err}");
    assert!(pages_out_figure(&err, "file ") + pages_out_figure(&err, "pool ") > 1000, "{err}");
    let sizes = dir.sizes();
    assert_eq!(sizes.len(), 8);
    assert!(sizes.iter().all(|(_, len)| *len == 0), "Python's files received {sizes:?}");
}

/// `fd_games raw_MODE`: the program closes one of uswap's descriptors with a raw system
/// call and puts a file of its own at its number, past every interposer. uswap finds it
/// replaced before its next transfer through it (one line says so): it takes it back from
/// its second reference (the keeper, crates/fds/src/keeper.rs) and carries on, every word
/// right; where io_uring is not there to keep one, the descriptor stays lost and the run
/// ends with SIGBUS, never reading other bytes. Either way the program's file gets nothing.
fn assert_raw_replacement_is_caught(mode: &str) {
    if !can_run() {
        return;
    }
    let (out, dir) = fd_game(mode);
    let (text, err) = (stdout(&out), stderr(&out));
    assert!(err.contains("was closed or replaced by a direct system call"), "{text}{err}");
    if err.contains("taken back from uswap's second reference") {
        assert!(out.status.success(), "{mode}: {text}{err}");
        assert!(text.contains(&format!("fd_games {mode}: bad 0 of")), "{mode}: {text}{err}");
    } else {
        let sigbus = out.status.code() == Some(128 + libc::SIGBUS);
        assert!(sigbus || text.contains("bad 0 of"), "{mode}: wrong data read: {text}{err}");
    }
    let written: Vec<_> = dir.sizes().into_iter().filter(|(_, len)| *len > 0).collect();
    assert!(written.is_empty(), "{mode}: the program's files received {written:?}: {err}");
}

#[test]
fn a_swap_file_replaced_by_a_raw_system_call_is_never_written() {
    assert_raw_replacement_is_caught("raw_swap");
}

/// The userfaultfd serving the program's memory, closed by a raw system call: without a
/// second reference the kernel would unregister every range, and pages out of the program
/// would read as zeros with no fault.
#[test]
fn a_userfaultfd_replaced_by_a_raw_system_call_never_reads_zeros() {
    assert_raw_replacement_is_caught("raw_uffd");
}
