//! `uswap run` over a process tree (docs/RUN.md, "A process tree under one budget"): every
//! process that loads the shim joins the run's broker and runs its own engine under a
//! share of one budget. Each test runs the real binary with the real shim; every
//! checksum must equal the unmanaged run's, and the tree's peak (the broker's sampled sum
//! of its processes' memory, summary line 2) stays within the budget + 10%. Tests that
//! need userfaultfd with kernel-mode faults skip (with a message) without it.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{can_run, output_within, shim, within, Group, TempDir};

/// The longest any one command of these tests may take (a tree under a small budget on a
/// loaded machine takes tens of seconds; past this it hangs).
const LIMIT: Duration = Duration::from_secs(300);

/// One tree at a time: each takes both CPUs, and a peak measured beside another test's
/// program is not this tree's.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn uswap(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_uswap"));
    let out = output_within(command.args(args).env("USWAP_PRELOAD", shim()), LIMIT);
    eprintln!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    out
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

fn python() -> Option<String> {
    let mut command = Command::new("python3");
    let out = output_within(command.args(["-c", "import sys; print(sys.executable)"]), LIMIT);
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn program(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tree_programs").join(name)
}

/// `sh -c CMD` with `{py}` and `{objects}` filled in, unmanaged and under `uswap run
/// --budget BUDGET`: both outputs (none where the test cannot run: a note says why).
fn both(budget: &str, cmd: &str) -> Option<(Output, Output)> {
    both_with(&["--budget", budget], cmd)
}

/// [`both`] with `flags` for `uswap run`.
fn both_with(flags: &[&str], cmd: &str) -> Option<(Output, Output)> {
    if !can_run() {
        return None;
    }
    let Some(py) = python() else {
        eprintln!("skipped: no python3");
        return None;
    };
    let objects = program("objects.py").display().to_string();
    let cmd = cmd.replace("{py}", &py).replace("{objects}", &objects);
    let _alone = alone();
    let plain = output_within(Command::new("sh").args(["-c", &cmd]), LIMIT);
    assert!(plain.status.success(), "{}", stderr(&plain));
    let args = [&["run"], flags, &["--", "sh", "-c", &cmd]].concat();
    let out = uswap(&args);
    Some((plain, out))
}

/// The size after `key` on the summary's second line, in MiB.
fn summary_mib(err: &str, key: &str) -> f64 {
    let line = err.lines().find(|l| l.starts_with("uswap: budget ")).expect("summary line 2");
    let text = line.split(key).nth(1).unwrap_or_else(|| panic!("{key} in {line}"));
    let mut words = text.split([' ', ',']);
    let value: f64 = words.next().unwrap().parse().unwrap();
    match words.next().unwrap() {
        "GiB" => value * 1024.0,
        "MiB" => value,
        "KiB" => value / 1024.0,
        "B" => value / 1048576.0,
        other => panic!("unit {other}"),
    }
}

/// The tree's peak stays within `budget_mib` + 10%.
fn assert_peak_within(err: &str, budget_mib: f64) {
    let peak = summary_mib(err, "peak ");
    eprintln!("tree peak {peak:.1} MiB for a budget of {budget_mib} MiB");
    assert!(peak <= budget_mib * 1.1, "peak {peak} MiB over {budget_mib} MiB + 10%: {err}");
}

fn sorted_lines(out: &Output) -> Vec<String> {
    let mut lines: Vec<String> =
        String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
    lines.sort();
    lines
}

/// The tree: sh -> python3 -> a subprocess python3, each building ~200 MiB of
/// objects under 96M; the parent's objects go cold while its child works, and come back
/// for its checksum.
#[test]
fn a_three_level_tree_keeps_its_checksums_under_one_budget() {
    let flags = ["--verbose", "--budget", "96M"];
    let Some((plain, out)) = both_with(&flags, "{py} {objects} 200000 1") else { return };
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(out.stdout, plain.stdout, "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);
    assert_peak_within(&err, 96.0);
    let lines = err.lines().filter(|l| l.starts_with("uswap:   ") && l.contains("python3"));
    assert_eq!(lines.count(), 2, "a line per python: {err}");
    assert!(!err.contains("unmanaged"), "{err}");
}

/// A pipeline: python's output through cat, both members.
#[test]
fn a_pipeline_keeps_its_checksum() {
    let flags = ["--verbose", "--budget", "96M"];
    let Some((plain, out)) = both_with(&flags, "{py} {objects} 200000 | cat") else { return };
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(out.stdout, plain.stdout, "{err}");
    assert_peak_within(&err, 96.0);
    assert!(err.lines().any(|l| l.starts_with("uswap:   ") && l.contains(" cat:")), "{err}");
}

/// Two children side by side (`cmd & cmd & wait`), each with a share of the one budget.
#[test]
fn two_concurrent_children_keep_their_checksums() {
    let cmd = "{py} {objects} 150000 & {py} {objects} 150000 & wait";
    let Some((plain, out)) = both("96M", cmd) else { return };
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(sorted_lines(&out), sorted_lines(&plain), "{err}");
    assert_peak_within(&err, 96.0);
}

/// A `multiprocessing` pool of 2 workers (forked, no exec), each building its own objects:
/// every worker carries on with its own copy of its parent's engine and joins the broker
/// as a member of its own from its fork handler, so what it allocates is managed under a
/// share of the one budget, and the tree's peak stays within it.
#[test]
fn a_multiprocessing_pool_keeps_its_checksums_under_the_budget() {
    let Some((plain, out)) = both("96M", "{py} {objects} 100000 0 pool") else { return };
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(sorted_lines(&out), sorted_lines(&plain), "{err}");
    assert_peak_within(&err, 96.0);
}

/// The pool's workers are members: each has its line in the summary beside its parent's,
/// and none is named as running unmanaged.
#[test]
fn a_multiprocessing_pools_workers_are_members() {
    let flags = ["--verbose", "--budget", "96M"];
    let Some((plain, out)) = both_with(&flags, "{py} {objects} 100000 0 pool") else { return };
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(sorted_lines(&out), sorted_lines(&plain), "{err}");
    let lines = err.lines().filter(|l| l.starts_with("uswap:   ") && l.contains("python3"));
    assert!(lines.count() >= 3, "a line for the parent and each worker: {err}");
    assert!(!err.contains("unmanaged"), "{err}");
}

/// A statically linked program the shell starts runs (it is not refused: only a static
/// CMD is), unmanaged, and the summary names it with a warning line.
#[test]
fn a_static_descendant_runs_and_is_named() {
    if !can_run() {
        return;
    }
    let scratch = TempDir::new("tree-static");
    let exe = scratch.0.join("uswap-tree-static");
    let mut cc = Command::new("cc");
    cc.args(["-O2", "-static", "-o"]).arg(&exe).arg(program("managed_check.c"));
    if !output_within(&mut cc, LIMIT).status.success() {
        eprintln!("skipped: no static libc to build a static program with");
        return;
    }
    let _alone = alone();
    let cmd = format!("{} 400; echo done", exe.display());
    let out = uswap(&["run", "--budget", "64M", "--", "sh", "-c", &cmd]);
    let (stdout, err) = (String::from_utf8_lossy(&out.stdout).to_string(), stderr(&out));
    assert!(out.status.success(), "{err}");
    assert_eq!(stdout, "managing 0\ndone\n");
    let warning = err.lines().find(|l| l.contains("ran unmanaged (statically linked"));
    let warning = warning.unwrap_or_else(|| panic!("no warning line: {err}"));
    assert!(warning.starts_with("uswap: warning: ") && warning.contains("uswap-tree-static"));
}

/// A program that closes the shim's connection to its broker and puts a socket of its
/// own under the same number (a daemon closing every descriptor) gets nothing written
/// into it and keeps it open: the member sees the number is not its socket any more and
/// forgets it, never sending a report there nor closing it.
#[test]
fn a_program_that_takes_the_connections_number_keeps_its_socket() {
    if !can_run() {
        return;
    }
    let scratch = TempDir::new("tree-reuse");
    let exe = scratch.0.join("socket_reuse");
    let mut cc = Command::new("cc");
    cc.args(["-O2", "-o"]).arg(&exe).arg(program("socket_reuse.c"));
    assert!(output_within(&mut cc, LIMIT).status.success(), "cc socket_reuse.c");
    let _alone = alone();
    let out = uswap(&["run", "--budget", "32M", "--", exe.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stdout.starts_with("socket -1 "), "no socket found: {stdout}");
    assert!(stdout.ends_with("injected 0 kept 1\n"), "{stdout}");
}

/// A member SIGKILLed with its memory paged out (to the swap file: no pool) does not
/// disturb the broker or the other member, and its swap space is given back (the broker
/// frees the row of a member whose connection closed; a killed process never frees its
/// own).
#[test]
fn a_member_killed_mid_run_disturbs_nobody() {
    let cmd = "{py} {objects} 150000 0 die & {py} {objects} 150000; wait";
    let flags = ["--verbose", "--budget", "96M", "--zswap", "off"];
    let Some((plain, out)) = both_with(&flags, cmd) else { return };
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(out.stdout, plain.stdout, "{err}");
    let swap = err.lines().find(|l| l.starts_with("uswap: swap space: ")).expect("verbose");
    assert!(swap.ends_with(", 0 B at the end"), "{swap}");
    assert!(!swap.starts_with("uswap: swap space: 0 B of"), "nothing reached the disk: {swap}");
}

/// `--swap-size` bounds the tree's swap files together: two members that page out more
/// than it holds (no pool: every page out goes to a file) reserve at most the bound
/// between them, the pages the files cannot take stay in memory (the tree then over its
/// budget, and the summary says the swap space was full), and no checksum changes.
#[test]
fn the_trees_swap_files_share_one_bound() {
    let cmd = "{py} {objects} 120000 & {py} {objects} 120000 & wait";
    let flags = ["--verbose", "--budget", "48M", "--zswap", "off", "--swap-size", "64M"];
    let Some((plain, out)) = both_with(&flags, cmd) else { return };
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(sorted_lines(&out), sorted_lines(&plain), "{err}");
    let swap = err.lines().find(|l| l.starts_with("uswap: swap space: ")).expect("verbose");
    let reserved = swap.trim_start_matches("uswap: swap space: ");
    let (value, unit) = reserved.split_once(' ').unwrap();
    let mib =
        value.parse::<f64>().unwrap() * if unit.starts_with("KiB") { 1.0 / 1024.0 } else { 1.0 };
    assert!(unit.starts_with("MiB") || unit.starts_with("KiB"), "{swap}");
    assert!(mib > 32.0 && mib <= 64.0, "reserved {mib} MiB of 64: {swap}");
    assert!(swap.contains(" of 64.0 MiB reserved at most"), "{swap}");
    assert!(err.contains("the swap space was full (raise --swap-size)"), "{err}");
}

/// `uswap stat` on a pid outside any run: one line, exit status 1.
#[test]
fn uswap_stat_of_a_pid_outside_any_run_says_so() {
    let me = std::process::id().to_string();
    for pid in ["1", me.as_str(), "4194304"] {
        let out = uswap(&["stat", pid]);
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(stderr(&out).trim(), format!("uswap: pid {pid} is not running under uswap"));
    }
}

/// The default summary: three lines (four over budget), sizes in B, KiB, MiB
/// or GiB, no counter names; --verbose adds the detail.
#[test]
fn the_summary_is_three_lines_in_a_persons_units() {
    if !can_run() {
        return;
    }
    let Some(py) = python() else {
        eprintln!("skipped: no python3");
        return;
    };
    let _alone = alone();
    let script = "x = [bytes([i % 251]) * 4000 for i in range(8000)]; print(len(x))";
    let out = uswap(&["run", "--budget", "16M", "--", &py, "-c", script]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("uswap: ")).collect();
    let over = lines.iter().any(|l| l.starts_with("uswap: warning: the tree went"));
    assert_eq!(lines.len(), if over { 4 } else { 3 }, "{err}");
    assert!(lines[0].contains(" exited with status 0 after "), "{err}");
    assert!(lines[1].starts_with("uswap: budget 16.0 MiB, peak "), "{err}");
    assert!(lines[2].starts_with("uswap: paged out "), "{err}");
    for line in &lines {
        assert!(!line.contains('_'), "a counter name: {line}");
    }
    assert!(lines[0].contains(" s"), "the time it ran, in seconds: {err}");
    for line in &lines[1..] {
        assert_every_figure_has_its_unit(line);
    }
    let out = uswap(&["run", "--verbose", "--budget", "16M", "--", &py, "-c", script]);
    let err = stderr(&out);
    assert!(err.contains("uswap: pages out: zero "), "{err}");
    assert!(err.contains("uswap: budget source: --budget"), "{err}");
}

/// Every number on a summary line is a size in B, KiB, MiB or GiB, a time in seconds, a
/// percentage or a ratio (`3.4:1`, `3.1x`): none is a bare count.
fn assert_every_figure_has_its_unit(line: &str) {
    let words: Vec<&str> = line.split_whitespace().collect();
    for (i, word) in words.iter().enumerate() {
        let figure = word.trim_start_matches('(').trim_end_matches([',', ':', ';', ')']);
        if !figure.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let ratio = figure.ends_with('x') || figure.contains(':') || figure.ends_with('%');
        let unit = words.get(i + 1).map(|w| w.trim_end_matches([',', ':', ';', ')']));
        let sized = unit.is_some_and(|u| ["B", "KiB", "MiB", "GiB", "s"].contains(&u));
        assert!(ratio || sized, "{figure:?} without a unit: {line}");
    }
}

/// A process that inherited another run's environment is refused by that run's broker
/// and runs unmanaged: with its own run's token (another run's), and with the other
/// run's token too but not descending from it. The other run counts both refusals, and
/// this run names the process.
#[test]
fn a_member_cannot_join_another_runs_broker() {
    if !can_run() {
        return;
    }
    let scratch = TempDir::new("tree-check");
    let exe = scratch.0.join("managed_check");
    let mut cc = Command::new("cc");
    cc.args(["-O2", "-o"]).arg(&exe).arg(program("managed_check.c")).arg("-ldl");
    assert!(output_within(&mut cc, LIMIT).status.success(), "cc managed_check.c");
    let exe = exe.display().to_string();
    let _alone = alone();
    // Run B waits on its stdin, after saying where it is.
    let mut b = Group::spawn(
        Command::new(env!("CARGO_BIN_EXE_uswap"))
            .args(["run", "--verbose", "--budget", "32M", "--", "sh", "-c"])
            .arg("echo $USWAP_RUN_DIR $USWAP_RUN_TOKEN; read x")
            .env("USWAP_PRELOAD", shim())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    let stdout = b.child.stdout.take().unwrap();
    let line = within(LIMIT, "run B's first line", move || {
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    });
    let (dir, token) = line.trim().split_once(' ').unwrap();
    let into_b = format!("USWAP_RUN_DIR={dir} {exe} 300");
    let into_b_with_its_token = format!("USWAP_RUN_DIR={dir} USWAP_RUN_TOKEN={token} {exe} 300");
    let outs: Vec<Output> = [into_b, into_b_with_its_token]
        .iter()
        .map(|cmd| uswap(&["run", "--budget", "32M", "--", "sh", "-c", cmd]))
        .collect();
    drop(b.child.stdin.take());
    let b_stderr = b.child.stderr.take().unwrap();
    let b_err = within(LIMIT, "run B's summary", move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::BufReader::new(b_stderr), &mut text).unwrap();
        text
    });
    b.wait_within(LIMIT, "run B");
    for out in &outs {
        let err = stderr(out);
        assert!(out.status.success(), "{err}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "managing 0\n", "{err}");
        assert!(err.contains("its environment names another run"), "named: {err}");
    }
    assert!(b_err.contains(" joins, 2 refused;"), "run B refused both: {b_err}");
}

/// `uswap run` SIGKILLed while its member's pages are out: the member goes on alone under
/// its last share and reads every page back (its checksum, written to a file, equals the
/// unmanaged run's).
#[test]
fn a_tree_survives_its_broker_killed() {
    if !can_run() {
        return;
    }
    let Some(py) = python() else {
        eprintln!("skipped: no python3");
        return;
    };
    let scratch = TempDir::new("tree-orphan");
    let (ready, go, result) =
        (scratch.0.join("ready"), scratch.0.join("go"), scratch.0.join("result"));
    let script = format!(
        "import hashlib, os, time\n\
         data = [(str(i) * 100).encode()[:1000] for i in range(150000)]\n\
         open({ready:?}, 'w').close()\n\
         while not os.path.exists({go:?}): time.sleep(0.02)\n\
         h = hashlib.sha256()\n\
         for b in data: h.update(b)\n\
         open({result:?} + '.tmp', 'w').write(h.hexdigest())\n\
         os.rename({result:?} + '.tmp', {result:?})\n"
    );
    let _alone = alone();
    // Its group holds the orphan too: dropping it kills whatever is left.
    let mut run = Group::spawn(
        Command::new(env!("CARGO_BIN_EXE_uswap"))
            .args(["run", "--budget", "48M", "--", &py, "-c", &script])
            .env("USWAP_PRELOAD", shim())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let waited = |path: &Path| {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !path.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        path.exists()
    };
    assert!(waited(&ready), "the program did not build its objects");
    let broker = run.child.id();
    run.child.kill().unwrap();
    run.wait_within(LIMIT, "uswap run, SIGKILLed");
    std::fs::write(&go, "").unwrap();
    let finished = waited(&result);
    let got = std::fs::read_to_string(&result).unwrap_or_default();
    let mut plain = String::new();
    let plain_script = script.replace(&format!("while not os.path.exists({go:?}): "), "if 0: ");
    std::fs::remove_file(&result).ok();
    if finished {
        let out = output_within(Command::new(&py).args(["-c", &plain_script]), LIMIT);
        assert!(out.status.success());
        plain = std::fs::read_to_string(&result).unwrap();
    }
    // The run's directory, left to its member, which may still be leaving (tidy: reads).
    for dir in std::fs::read_dir(std::env::temp_dir()).unwrap().flatten() {
        if dir.file_name().to_string_lossy().starts_with(&format!("uswap-run-{broker}-")) {
            let _ = std::fs::remove_dir_all(dir.path());
        }
    }
    assert!(finished, "the orphaned member did not finish");
    assert_eq!(got, plain, "the orphan read its pages back");
}

/// The default budget inside a memory cgroup with a limit: half of what it has left, and
/// the verbose summary says so (a v1 or v2 cgroup this test makes; needs root).
#[test]
fn the_default_budget_comes_from_the_memory_cgroups_limit() {
    if !can_run() {
        return;
    }
    let name = format!("uswap-tree-test-{}", std::process::id());
    let (dir, limit_file) = if Path::new("/sys/fs/cgroup/memory").is_dir() {
        (Path::new("/sys/fs/cgroup/memory").join(&name), "memory.limit_in_bytes")
    } else {
        (Path::new("/sys/fs/cgroup").join(&name), "memory.max")
    };
    if std::fs::create_dir(&dir).is_err() {
        eprintln!("skipped: cannot make a memory cgroup here (needs root)");
        return;
    }
    std::fs::write(dir.join(limit_file), "536870912").unwrap();
    let cmd = format!(
        "echo $$ > {}/cgroup.procs && exec {} run --verbose -- /bin/true",
        dir.display(),
        env!("CARGO_BIN_EXE_uswap")
    );
    let out =
        output_within(Command::new("sh").args(["-c", &cmd]).env("USWAP_PRELOAD", shim()), LIMIT);
    let _ = std::fs::remove_dir(&dir);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("budget source: half of what the memory cgroup had left"), "{err}");
    let budget = summary_mib(&err, "budget ");
    assert!(budget > 64.0 && budget <= 256.0, "half of what 512 MiB has left: {budget} MiB");
}

/// A C file of `functions` small functions, each calling the one before (about 230 bytes
/// of source each): enough work for cc1 at -O2 to hold far more than the budget.
fn generated_c(functions: usize) -> String {
    (0..functions)
        .map(|i| {
            format!(
                "int f{i}(int x, int y) {{ int a[16]; for (int k = 0; k < 16; k++) a[k] = x * \
                 {i} + k * y; switch (x & 7) {{ case 0: return a[{}] + f{}(y, x); case 1: \
                 return a[3] ^ {i}; case 2: return a[5] - y; default: return a[x & 15] * {}; \
                 }} }}\n",
                i % 16,
                i.saturating_sub(1),
                i + 1
            )
        })
        .collect()
}

/// The compiler under one budget: `gcc -O2 -c` of a generated file whose cc1
/// peaks at about 110 MiB unmanaged, under 64M. The driver, cc1 and the assembler are
/// each a member with a line in the summary, nothing runs unmanaged, the tree's peak
/// stays within the budget + 10%, and the object is the unmanaged build's byte for byte.
#[test]
fn gcc_and_its_cc1_compile_under_one_budget() {
    if !can_run() {
        return;
    }
    let on_path = |dir: &Path| dir.join("gcc").is_file();
    if !std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| on_path(&d))) {
        eprintln!("skipped: no gcc");
        return;
    }
    let scratch = TempDir::new("tree-gcc");
    let dir = scratch.0.clone();
    std::fs::write(dir.join("big.c"), generated_c(700)).unwrap();
    let _alone = alone();
    let gcc = |prefix: &[&str], object: &str| {
        let args = [prefix, &["gcc", "-O2", "-c", "big.c", "-o", object]].concat();
        let mut command = Command::new(args[0]);
        command.args(&args[1..]).current_dir(&dir).env("USWAP_PRELOAD", shim());
        output_within(&mut command, LIMIT)
    };
    let plain = gcc(&[], "plain.o");
    let uswap_run = [env!("CARGO_BIN_EXE_uswap"), "run", "--verbose", "--budget", "64M", "--"];
    let out = gcc(&uswap_run, "managed.o");
    let (plain_o, managed_o) =
        (std::fs::read(dir.join("plain.o")), std::fs::read(dir.join("managed.o")));
    let err = stderr(&out);
    eprintln!("{err}");
    assert!(plain.status.success(), "{}", stderr(&plain));
    assert!(out.status.success(), "{err}");
    assert!(plain_o.unwrap() == managed_o.unwrap(), "the objects differ");
    assert_peak_within(&err, 64.0);
    for name in [" gcc:", " cc1:", " as:"] {
        let line = err.lines().find(|l| l.starts_with("uswap:   ") && l.contains(name));
        assert!(line.is_some(), "no line for{name} {err}");
    }
    assert!(!err.contains("unmanaged"), "{err}");
}

/// `uswap stat` with the pid of a member two levels down (python under sh): the tree's
/// totals, then a line for each process running, the python and its shell, while the
/// tree runs.
#[test]
fn uswap_stat_of_a_grandchild_shows_the_whole_tree() {
    if !can_run() {
        return;
    }
    let Some(py) = python() else {
        eprintln!("skipped: no python3");
        return;
    };
    let script = "import os, sys\n\
                  data = [(str(i) * 100).encode()[:1000] for i in range(40000)]\n\
                  print(os.getpid(), flush=True)\n\
                  sys.stdin.readline()\n\
                  print(len(data))\n";
    let cmd = format!("{py} -c '{script}'; echo done");
    let _alone = alone();
    let mut run = Group::spawn(
        Command::new(env!("CARGO_BIN_EXE_uswap"))
            .args(["run", "--budget", "32M", "--", "sh", "-c", &cmd])
            .env("USWAP_PRELOAD", shim())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    );
    let stdout = run.child.stdout.take().unwrap();
    let (line, stdout) = within(LIMIT, "the python's pid", move || {
        let mut reader = std::io::BufReader::new(stdout);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        (line, reader)
    });
    let grandchild = line.trim().to_string();
    // The tree file is rewritten every second: the python is listed within a few.
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let out = uswap(&["stat", &grandchild]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if out.status.success() && text.contains(&format!("pid {grandchild},")) {
            break text;
        }
        assert!(Instant::now() < deadline, "uswap stat {grandchild}: {text}{}", stderr(&out));
        std::thread::sleep(Duration::from_millis(200));
    };
    check_stat_json(&grandchild, run.child.id());
    // A watch started now reports until the tree ends, then says so and exits.
    let mut watch = Group::spawn(
        Command::new(env!("CARGO_BIN_EXE_uswap"))
            .args(["stat", "--watch=0.2", &grandchild])
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    );
    let lines = lines_of(watch.child.stdout.take().unwrap());
    let mut reports = 0;
    while reports < 2 {
        let line = lines.recv_timeout(LIMIT).expect("uswap stat --watch reported");
        reports += usize::from(line.starts_with("at ") && line.len() == "at 12:34:56".len());
    }
    drop(run.child.stdin.take());
    let rest = within(LIMIT, "the tree's end", move || {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut stdout.into_inner(), &mut rest).unwrap();
        rest
    });
    assert!(run.wait_within(LIMIT, "uswap run").success());
    assert_eq!(rest, "40000\ndone\n");
    let first = text.lines().next().unwrap_or_default();
    let tree = format!("tree of uswap run {}: budget 32.0 MiB, resident now ", run.child.id());
    assert!(first.starts_with(&tree), "{text}");
    assert!(text.lines().any(|l| l.starts_with("pid ") && l.contains(": sh")), "{text}");
    assert!(text.lines().any(|l| l.starts_with(&format!("pid {grandchild},"))), "{text}");
    let last = std::iter::from_fn(|| lines.recv_timeout(LIMIT).ok()).last();
    assert_eq!(last.as_deref(), Some(format!("the run of pid {grandchild} ended").as_str()));
    assert!(watch.wait_within(LIMIT, "uswap stat --watch").success());
}

/// `uswap stat --json PID` of a running tree: one object whose figures match the run's
/// (its broker, its budget) and list `pid` as a member with its counters.
fn check_stat_json(pid: &str, broker: u32) {
    let out = uswap(&["stat", "--json", pid]);
    assert!(out.status.success(), "{}", stderr(&out));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(value["broker"], broker, "{value}");
    assert_eq!(value["budget_bytes"], 32 << 20, "{value}");
    assert!(value["total"]["faults"].is_u64(), "{value}");
    let processes = value["processes"].as_array().expect("processes");
    let pid: u64 = pid.parse().unwrap();
    let me = processes.iter().find(|p| p["pid"] == pid).expect("the pid is listed");
    assert_eq!(me["state"], "member", "{me}");
    assert!(me["counters"]["vm_hwm_bytes"].as_u64().is_some_and(|b| b > 0), "{me}");
}

/// Each line `reader` gives, as it comes.
fn lines_of(reader: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}
