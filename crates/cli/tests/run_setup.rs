//! `uswap run` before its program starts: bad input and config files refused in one line,
//! what it refuses to run (a `noexec` temporary directory, a static program, no kernel-mode
//! fault permission), and where it places the program and its own threads (`--cpus`, the
//! handler following the faulting thread, idle pollers).

use std::path::Path;
use std::process::Command;

mod common;
mod run_common;
use common::{can_run, compile, shim, BoundedOutput, TempDir};
use run_common::{stderr, uswap, uswap_alone, SmallDisk, CPUS};

#[test]
fn bad_input_is_one_line_and_nothing_runs() {
    let scratch = TempDir::new("marker");
    let marker = scratch.0.join("marker");
    let touch = ["/usr/bin/touch", marker.to_str().unwrap()];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["run", "--budget", "1K", "--"], "smaller than one folio"),
        (vec!["run", "--budget", "256X", "--"], "unknown suffix \"X\""),
        (vec!["run", "--budget", "64M"], "no program to run"),
        (
            vec!["run", "--budget", "64M", "--swap-file", "/proc/uswap-swap", "--"],
            "--swap-file /proc/uswap-swap",
        ),
        (vec!["run", "--zswap", "lz5", "--"], "--zswap lz5"),
        (vec!["run", "--zswap", "zstd:4", "--"], "--zswap zstd:4"),
        (vec!["run", "--zswap", "none", "--"], "--zswap none"),
        (vec!["run", "--", "/nonexistent/prog"], "no such file"),
        (vec!["run", "--budget", "32K", "--"], "lower --folio-order"),
        (vec!["run", "--folio-order", "10", "--"], "--folio-order 10: use 0..=9"),
        (vec!["run", "--large-folios", "maybe", "--"], "possible values: always, sequential"),
        (vec!["run", "--cpus", "3-1", "--"], "--cpus 3-1: range 3-1 runs backwards"),
        (vec!["run", "--cpus", "one", "--"], "is not a CPU number"),
        (vec!["run", "--cpus", "1023", "--"], "none of these CPUs is available here"),
        (vec!["run", "--reclaim-cpus", "3-1", "--"], "--reclaim-cpus 3-1: range 3-1 runs"),
        (vec!["run", "--reclaim-cpus", "1023", "--"], "CPU 1023 is not online"),
        (vec!["run", "--idle-poll", "sometimes", "--"], "--idle-poll sometimes: use auto"),
        (vec!["run", "--idle-poll", "on:0", "--"], "use a window of 1..=100000 microseconds"),
        (vec!["run", "--swap-file-cache", "sometimes", "--"], "possible values: keep, drop"),
        (vec!["run", "--pool-size", "1K", "--"], "--pool-size 1.00 KiB: use 64.0 KiB to"),
        (vec!["run", "--zswap", "off", "--pool-size", "64M", "--"], "no pool to size"),
        (vec!["run", "--swap-size", "100000T", "--"], "--swap-size 100000 TiB: use 2.00 MiB to"),
        (vec!["run", "--swap-size", "1M", "--"], "--swap-size 1.00 MiB: use 2.00 MiB to"),
    ];
    for (args, expect) in cases {
        let mut args = args.clone();
        if args.last() == Some(&"--") {
            args.extend(touch);
        }
        let out = uswap(&args);
        let err = stderr(&out);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(expect), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(!marker.exists(), "{args:?} started the program");
    }
}

#[test]
fn cpus_confine_the_program_and_its_handler_and_the_reclaimer_runs_beside() {
    if !can_run() {
        return;
    }
    // The shim's threads (the fault handler, the reclaimer) live in the program's process:
    // every task of it is confined with the program but the reclaimer, which runs on the
    // CPUs left outside the list (on a machine of one CPU, with the program).
    let script = "for t in /proc/$$/task/*; do echo \"$(cat $t/comm) \
                  $(grep Cpus_allowed_list $t/status | cut -f2)\"; done";
    let tasks = |extra: &[&str]| -> Vec<(String, String)> {
        let mut args = vec!["run", "--budget", "64M", "--cpus", "0"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "/bin/sh", "-c", script]);
        let out = uswap(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let tasks: Vec<(String, String)> = (stdout.lines())
            .filter_map(|l| l.rsplit_once(' ').map(|(c, l)| (c.to_string(), l.to_string())))
            .collect();
        assert!(tasks.iter().any(|(comm, _)| comm == "uswap-kswapd"), "{stdout}");
        tasks
    };
    let allowed = uffd::sys::process::allowed_cpus().unwrap();
    let others: Vec<usize> = allowed.iter().copied().filter(|&c| c != 0).collect();
    for (comm, cpus) in tasks(&[]) {
        let expect = match comm.as_str() {
            "uswap-kswapd" if !others.is_empty() => runstat::cpus::format_list(&others),
            _ => "0".to_string(),
        };
        assert_eq!(cpus, expect, "{comm}");
    }
    // Asked for, the reclaimer stays with the program.
    assert!(tasks(&["--reclaim-cpus", "0"]).iter().all(|(_, cpus)| cpus == "0"));
}

#[test]
fn the_handler_follows_the_faulting_thread_and_the_reclaimer_stays_off_its_cpu() {
    if !can_run() {
        return;
    }
    let exe = compile("follow_check");
    let exe = exe.to_str().unwrap();
    // The program looks where uswap's threads may run every 20 ms while it faults: "placed
    // K of N" counts the looks that found the handler on its CPU alone and the reclaimer
    // off it. The follower moves them every 10 ms, so a look may land between a migration
    // of the program and the next move: most looks, not all.
    let placed = |args: &[&str]| -> (u32, u32, String) {
        let mut all = vec!["run", "--budget", "8M"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--", exe]);
        let out = uswap(&all);
        assert!(out.status.success(), "{}", stderr(&out));
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let words: Vec<&str> = stdout.split_whitespace().collect();
        assert_eq!(words.first(), Some(&"placed"), "{stdout}");
        let (k, n) = (words[1].parse().unwrap(), words[3].parse().unwrap());
        assert!(n >= 20, "too few looks: {stdout}");
        (k, n, stderr(&out))
    };
    let cpus = uffd::sys::process::allowed_cpus().unwrap();
    let (k, n, err) = placed(&[]);
    if cpus.len() >= 2 {
        assert!(k * 2 > n, "placed {k} of {n} by default");
        assert!(err.contains("handler placement: moved"), "{err}");
    } else {
        assert_eq!(k, 0, "one CPU: nothing to place");
    }
    // Asked not to, or under SIGBUS delivery (the faulting thread serves itself): never
    // placed, and the summary says nothing of it.
    for args in [&["--handler-placement", "free"][..], &["--delivery", "sigbus"]] {
        let (k, _, err) = placed(args);
        assert_eq!(k, 0, "{args:?}");
        assert!(!err.contains("handler placement"), "{args:?}: {err}");
    }
}

#[test]
fn idle_pollers_spin_through_faults_on_two_cpus_and_not_on_one() {
    if !can_run() {
        return;
    }
    let exe = compile("exec_check");
    let exe = exe.to_str().unwrap();
    // Nice-19 pollers get little of a CPU others want: another test's program running on
    // both CPUs kept them from spinning at all (seen under CI's parallel tests).
    let _alone = CPUS.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    let cpus = uffd::sys::process::allowed_cpus().unwrap();
    if cpus.len() >= 2 {
        // Both images (before and after the exec) fault; each tells the pollers of
        // `uswap run`, which outlive them.
        let out = uswap_alone(&["run", "--budget", "8M", "--idle-poll", "on:500", "--", exe]);
        assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
        let err = stderr(&out);
        let line = err.lines().find(|l| l.contains("idle polling:")).expect(&err);
        let pollers = format!("idle polling: {} pollers spun", cpus.len());
        assert!(line.contains(&pollers), "{line}");
        let spun: f64 =
            line.split("spun ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
        assert!(spun > 0.0, "the pollers never spun: {line}");
    }
    // One CPU: nobody to wake on another, so no pollers even when asked for.
    let out =
        uswap_alone(&["run", "--budget", "8M", "--cpus", "0", "--idle-poll", "on", "--", exe]);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(!stderr(&out).contains("idle polling:"), "{}", stderr(&out));
}

/// The shim inside uswap is loaded from the run's directory, in TMPDIR: a TMPDIR mounted
/// noexec is refused before the program starts, in one line naming TMPDIR and
/// USWAP_PRELOAD; with USWAP_PRELOAD the run goes on there.
#[test]
fn a_noexec_tmpdir_is_refused_unless_the_shim_is_elsewhere() {
    if !can_run() {
        return;
    }
    let Some(disk) = SmallDisk::mount_with("64M", ",noexec") else { return };
    let scratch = TempDir::new("noexec-marker");
    let marker = scratch.0.join("ran");
    let run = |shim: Option<&Path>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_uswap"));
        command.args(["run", "--budget", "16M", "--", "/usr/bin/touch"]).arg(&marker);
        command.env("TMPDIR", &disk.0).env_remove("USWAP_PRELOAD");
        if let Some(shim) = shim {
            command.env("USWAP_PRELOAD", shim);
        }
        command.bounded_output()
    };
    let out = run(None);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("noexec") && err.contains("USWAP_PRELOAD"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(!marker.exists(), "the program started");
    let out = run(Some(shim()));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(marker.exists(), "the program ran with the shim elsewhere");
}

#[test]
fn a_statically_linked_program_is_refused_before_it_starts() {
    let scratch = TempDir::new("static");
    let src = scratch.0.join("static.c");
    std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
    let exe = src.with_extension("");
    let built = Command::new("cc").args(["-static", "-o"]).arg(&exe).arg(&src).status().unwrap();
    if !built.success() {
        eprintln!("skipped: no static libc to build a static program with");
        return;
    }
    let out = uswap(&["run", "--budget", "64M", "--", exe.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("statically linked"), "{}", stderr(&out));
}

#[test]
fn without_kernel_fault_permission_it_says_so_before_starting() {
    if setpriv_as_root().is_none() {
        eprintln!("skipped: setpriv not installed, or not root");
        return;
    }
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_uswap"))
        .args(["run", "--budget", "64M", "--", "/bin/true"])
        .env("USWAP_PRELOAD", shim())
        .bounded_output();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("uswap: userfaultfd:"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// `Some` when setpriv can drop to nobody (we are root and it is installed).
fn setpriv_as_root() -> Option<()> {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .any(|l| l.starts_with("Uid:\t0\t"));
    let has = Command::new("setpriv").arg("--help").output().is_ok_and(|o| o.status.success());
    (root && has).then_some(())
}

/// `uswap run` with `--config`, or the user's default file under `XDG_CONFIG_HOME`
/// (`config_home`); the output.
fn run_configured(config_home: &Path, args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(args)
        .env("USWAP_PRELOAD", shim())
        .env("XDG_CONFIG_HOME", config_home)
        .bounded_output();
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    out
}

#[test]
fn a_config_file_sets_what_the_command_line_does_not() {
    if !can_run() {
        return;
    }
    let home = TempDir::new("config-home");
    std::fs::create_dir(home.0.join("uswap")).unwrap();
    let default = home.0.join("uswap/config.toml");
    std::fs::write(&default, "[run]\nbudget = \"40M\"\nzswap = \"zstd\"\n").unwrap();
    let budget_of = |out: &std::process::Output| {
        let err = stderr(out);
        assert!(out.status.success(), "{err}");
        let line = err.lines().find(|l| l.starts_with("uswap: budget ")).unwrap_or_default();
        line.split(',').next().unwrap().trim_start_matches("uswap: budget ").to_string()
    };
    // The user's default file, found without a flag.
    assert_eq!(budget_of(&run_configured(&home.0, &["run", "--", "/bin/true"])), "40.0 MiB");
    // The command line wins over it.
    let out = run_configured(&home.0, &["run", "--budget", "48M", "--", "/bin/true"]);
    assert_eq!(budget_of(&out), "48.0 MiB");
    // --config names another file; /dev/null is none.
    let other = home.0.join("other.toml");
    std::fs::write(&other, "[run]\nbudget = \"24M\"\nverbose = true\n").unwrap();
    let out =
        run_configured(&home.0, &["run", "--config", other.to_str().unwrap(), "--", "/bin/true"]);
    assert_eq!(budget_of(&out), "24.0 MiB");
    assert!(stderr(&out).contains("pages out:"), "verbose from the file");
    let out = run_configured(&home.0, &["run", "--config", "/dev/null", "--", "/bin/true"]);
    assert_ne!(budget_of(&out), "40.0 MiB");
}

#[test]
fn a_bad_config_file_is_one_line_naming_it_and_nothing_runs() {
    let home = TempDir::new("config-bad");
    let marker = home.0.join("marker");
    let file = home.0.join("bad.toml");
    let cases = [
        ("[run]\nbudjet = \"40M\"\n", "budjet: not a flag of uswap run"),
        ("[run]\nzswap = \"brotli\"\n", "--zswap brotli"),
        ("[run]\nlarge-folios = \"maybe\"\n", "maybe"),
        ("[run]\nswap-file = \"x.swap\"\n", "swap-file: names one run's files"),
        ("[run\n", "not TOML"),
    ];
    for (text, expect) in cases {
        std::fs::write(&file, text).unwrap();
        let args = ["run", "--config", file.to_str().unwrap(), "--", "/usr/bin/touch"];
        let mut args = args.to_vec();
        args.push(marker.to_str().unwrap());
        let out = run_configured(&home.0, &args);
        let err = stderr(&out);
        assert!(!out.status.success(), "{text}");
        assert!(err.contains(expect), "{text}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(!marker.exists(), "{text} started the program");
    }
    let missing = home.0.join("missing.toml");
    let out =
        run_configured(&home.0, &["run", "--config", missing.to_str().unwrap(), "--", "/bin/true"]);
    assert!(stderr(&out).contains("missing.toml"), "{}", stderr(&out));
}
