//! `uswap run`: unmodified programs under a budget (docs/RUN.md). Each test runs the real
//! binary with the real shim (built here by `cargo build -p preload`, the same profile).
//! Tests that need userfaultfd with kernel-mode faults skip (with a message) without it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::{shim, target_dir};

fn uswap(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(args)
        .env("USWAP_PRELOAD", shim())
        .output()
        .unwrap();
    eprintln!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// Whether this machine lets `uswap run` work (root: kernel-mode faults, EVENT_FORK).
fn can_run() -> bool {
    let ok = uffd::probe()
        .is_ok_and(|p| p.require_kernel_faults().is_ok() && p.require_event_fork().is_ok());
    if !ok {
        eprintln!("skipped: userfaultfd without kernel-mode faults or EVENT_FORK here");
    }
    ok
}

fn compile(name: &str, extra: &[&str]) -> PathBuf {
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/run_programs").join(format!("{name}.c"));
    let out = std::env::temp_dir().join(format!("uswap-run-test-{}-{name}", std::process::id()));
    let status = Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .args(extra)
        .status()
        .unwrap();
    assert!(status.success(), "cc {name}.c");
    out
}

/// The peak resident set `uswap run` reported, in MiB.
fn peak_mib(err: &str) -> f64 {
    let line = err.lines().find(|l| l.contains("peak resident")).expect("summary line");
    let text = line.split("peak resident ").nth(1).unwrap();
    let mut words = text.split([' ', ',']);
    let value: f64 = words.next().unwrap().parse().unwrap();
    match words.next().unwrap() {
        "GiB" => value * 1024.0,
        "MiB" => value,
        "KiB" => value / 1024.0,
        other => panic!("unit {other}"),
    }
}

#[test]
fn bad_input_is_one_line_and_nothing_runs() {
    let marker = std::env::temp_dir().join(format!("uswap-run-marker-{}", std::process::id()));
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
        (vec!["run", "--zswap", "zstd", "--"], "--zswap zstd is not supported"),
        (vec!["run", "--", "/nonexistent/prog"], "no such file"),
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
fn a_statically_linked_program_is_refused_before_it_starts() {
    let src = std::env::temp_dir().join(format!("uswap-static-{}.c", std::process::id()));
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
        .output()
        .unwrap();
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

#[test]
fn a_c_program_keeps_its_data_and_exit_code() {
    if !can_run() {
        return;
    }
    let exe = compile("exec_check", &[]);
    let out = uswap(&["run", "--budget", "8M", "--", exe.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(5), "exit code of the exec'd image");
    assert!(String::from_utf8_lossy(&out.stdout).contains("exec ok"));
    let err = stderr(&out);
    assert!(err.contains("pages out:"), "{err}");
}

#[test]
fn a_forked_child_reads_its_parents_evicted_data() {
    if !can_run() {
        return;
    }
    let exe = compile("fork_check", &[]);
    let out = uswap(&["run", "--budget", "12M", "--", exe.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("child 0 parent 0"));
}

#[test]
fn freed_and_remapped_memory_reads_right() {
    if !can_run() {
        return;
    }
    let exe = compile("free_reuse", &[]);
    let out = uswap(&["run", "--budget", "8M", "--", exe.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
}

#[test]
fn eight_threads_keep_their_data() {
    if !can_run() {
        return;
    }
    let exe = compile("threads", &[]);
    let out =
        uswap(&["run", "--budget", "24M", "--stats-every", "0.5", "--", exe.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
}

fn python() -> Option<String> {
    let out =
        Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

const PY_OBJECTS: &str = "import hashlib, sys\n\
n = int(sys.argv[1])\n\
data = [(str(i) * 100).encode()[:1000] for i in range(n)]\n\
h = hashlib.sha256()\n\
for b in data:\n    h.update(b)\n\
print(h.hexdigest(), len(data))\n\
sys.exit(7)\n";

/// Python builds `objects` 1000-byte objects under `budget`: the same checksum as without
/// uswap, the exit code, and the whole process's peak resident set within the budget + 10%
/// (the interpreter's own memory included: the shim charges it to the budget).
fn python_under_budget(objects: &str, budget: &str, budget_mib: f64) {
    if !can_run() {
        return;
    }
    let Some(py) = python() else {
        eprintln!("skipped: no python3");
        return;
    };
    let plain = Command::new(&py).args(["-c", PY_OBJECTS, objects]).output().unwrap();
    assert_eq!(plain.status.code(), Some(7));
    let out = uswap(&["run", "--budget", budget, "--", &py, "-c", PY_OBJECTS, objects]);
    assert_eq!(out.status.code(), Some(7), "exit code preserved");
    assert_eq!(out.stdout, plain.stdout, "same checksum");
    let peak = peak_mib(&stderr(&out));
    assert!(peak <= budget_mib * 1.1, "peak {peak} MiB over budget {budget} + 10%");
}

#[test]
fn python_256mib_of_objects_under_64m() {
    python_under_budget("250000", "64M", 64.0);
}

/// The run: about 1 GiB of Python objects under 256 MiB (25-55 s here; recorded in
/// docs/benchmarks.md).
#[test]
fn python_1gib_of_objects_under_256m() {
    python_under_budget("1000000", "256M", 256.0);
}

/// `uswap run --record` writes a trace that `uswap sim` replays: the recorded faults run
/// through the real engine under the simulator's checker, every seed clean.
#[test]
fn a_recorded_run_replays_in_the_simulator() {
    if !can_run() {
        return;
    }
    let trace = std::env::temp_dir().join(format!("uswap-run-test-{}.trace", std::process::id()));
    let script = "x=[bytes([i%251])*4000 for i in range(6000)]; print(sum(len(b) for b in x))";
    let trace_arg = trace.to_str().unwrap();
    let out =
        uswap(&["run", "--budget", "8M", "--record", trace_arg, "--", "python3", "-c", script]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "24000000");
    let bytes = std::fs::metadata(&trace).unwrap().len();
    assert!(bytes > 32 * 100, "a trace of {bytes} bytes: no faults recorded");
    let mut sim = vec!["sim", "--workload", "replay", "--trace", trace_arg, "--seeds", "0..3"];
    if target_dir().ends_with("release") {
        sim.push("--allow-release");
    }
    let out = uswap(&sim);
    std::fs::remove_file(&trace).unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &stderr(&out);
    assert!(text.contains("3 seeds, 0 failed"), "{text}");
}

/// A real server under `uswap run`: redis-server with a 16 MiB budget loads 64 MiB of
/// values (4x the budget) and every one reads back verified, through `uswap bench
/// compare`'s redis client (its uswap side wraps the server in `uswap run`).
#[test]
fn redis_holds_four_times_its_budget_and_reads_it_all_back() {
    if !can_run() {
        return;
    }
    if Command::new("redis-server").arg("--version").output().is_err() {
        eprintln!("skipped: redis-server is not installed (.ci/setup-bench installs it)");
        return;
    }
    let args = ["bench", "compare", "--quick", "--workloads", "redis", "--json"];
    let args = [&args[..], &["--budget", "16M", "--size", "64M"]].concat();
    let out = uswap(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let redis = &json["workloads"][0];
    assert_eq!(redis["name"], "redis");
    assert!(redis["uswap_s"].as_f64().is_some(), "the uswap side did not run: {redis}");
    assert_eq!(redis["uswap_verify_errors"], 0, "{redis}");
    let detail = redis["uswap_detail"].as_str().unwrap();
    assert!(detail.contains("65536 keys x 1024 B"), "{detail}");
}
