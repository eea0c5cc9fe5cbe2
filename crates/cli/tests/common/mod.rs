//! Helpers shared by the integration tests that run the real `uswap` binary.

// Each test binary uses a subset of these helpers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The directory holding the `uswap` binary under test (target/debug or target/release).
pub fn target_dir() -> PathBuf {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_uswap"));
    exe.parent().unwrap().to_path_buf()
}

/// The workload program beside the binary under test, if built (`cargo test --workspace`
/// builds it; `cargo test -p uswap` alone may not).
#[allow(dead_code)]
pub fn workload_binary() -> Option<PathBuf> {
    let candidate = target_dir().join("uswap-workload");
    candidate.exists().then_some(candidate)
}

/// The `uswap run` shim, built once per test process with the binary's profile:
/// `cargo test` builds the preload crate's test harness, not its cdylib, so a fresh
/// checkout has no libuswap_preload.so until this runs.
pub fn shim() -> &'static Path {
    static SHIM: OnceLock<PathBuf> = OnceLock::new();
    SHIM.get_or_init(|| {
        let dir = target_dir();
        let mut cargo = Command::new(env!("CARGO"));
        cargo.args(["build", "-q", "-p", "preload"]);
        if dir.ends_with("release") {
            cargo.arg("--release");
        }
        assert!(cargo.status().unwrap().success(), "cargo build -p preload");
        dir.join("libuswap_preload.so")
    })
}

/// Whether this machine lets `uswap run` work (kernel-mode faults); says so when it does
/// not, for the test to skip.
#[allow(dead_code)]
pub fn can_run() -> bool {
    let ok = uffd::probe().is_ok_and(|p| p.require_kernel_faults().is_ok());
    if !ok {
        eprintln!("skipped: userfaultfd without kernel-mode faults here");
    }
    ok
}

/// The longest a test's `uswap` command may run ([`uswap`], [`bounded`]): a hang fails
/// the test with what the command printed, long before the suite's own limit.
pub const RUN_LIMIT: Duration = Duration::from_secs(300);

/// `command`'s output within [`RUN_LIMIT`] ([`output_within`]).
pub fn bounded(command: &mut Command) -> Output {
    output_within(command, RUN_LIMIT)
}

/// [`bounded`] at the end of a builder chain: `Command::new(..).args(..).bounded_output()`.
pub trait BoundedOutput {
    /// The command's output within [`RUN_LIMIT`].
    fn bounded_output(&mut self) -> Output;
}

impl BoundedOutput for Command {
    fn bounded_output(&mut self) -> Output {
        bounded(self)
    }
}

/// `uswap ARGS` with the shim under test, within [`RUN_LIMIT`]; its output, echoed to
/// stderr.
#[allow(dead_code)]
pub fn uswap(args: &[&str]) -> std::process::Output {
    let out =
        bounded(Command::new(env!("CARGO_BIN_EXE_uswap")).args(args).env("USWAP_PRELOAD", shim()));
    eprintln!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

/// A compiled test program, in a directory of its own that goes when this is dropped: a
/// path of its own per build, as tests run in parallel and one compiling over a binary
/// another runs made that exec fail (EACCES, ETXTBSY).
pub struct Program {
    pub path: PathBuf,
    _dir: TempDir,
}

impl std::ops::Deref for Program {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for Program {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<std::ffi::OsStr> for Program {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.path.as_os_str()
    }
}

/// Compiles `run_programs/{name}.c` (`cc -O2 -pthread`).
pub fn compile(name: &str) -> Program {
    compile_with("run_programs", name, &[])
}

/// Compiles `tests/{dir}/{name}.c` with `flags` too, into a fresh directory.
pub fn compile_with(dir: &str, name: &str, flags: &[&str]) -> Program {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(dir);
    let out = TempDir::new(&format!("cc-{name}"));
    let path = out.0.join(name);
    let status = Command::new("cc")
        .args(["-O2", "-pthread"])
        .args(flags)
        .arg("-o")
        .arg(&path)
        .arg(src.join(format!("{name}.c")))
        .status()
        .unwrap();
    assert!(status.success(), "cc {name}.c");
    Program { path, _dir: out }
}

/// A private directory in the temporary directory, removed (with what it holds) on drop.
/// Every file a test makes goes in one (tidy checks that tests make no other).
pub struct TempDir(pub PathBuf, tempfile::TempDir);

impl TempDir {
    /// A directory others may read (a program run as another user may run what is in it).
    pub fn new(tag: &str) -> TempDir {
        TempDir::with_mode(tag, 0o755)
    }

    /// A directory every user may write in too.
    pub fn shared(tag: &str) -> TempDir {
        TempDir::with_mode(tag, 0o777)
    }

    fn with_mode(tag: &str, mode: u32) -> TempDir {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::Builder::new().prefix(&format!("uswap-{tag}-")).tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(mode)).unwrap();
        TempDir(dir.path().to_path_buf(), dir)
    }

    pub fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }

    /// Compiles `tests/{dir}/{name}.c` into this directory, beside what the test put there.
    pub fn compile(&self, dir: &str, name: &str) -> PathBuf {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(dir);
        let out = self.0.join(name);
        let status = Command::new("cc")
            .args(["-O2", "-pthread", "-o"])
            .arg(&out)
            .arg(src.join(format!("{name}.c")))
            .status()
            .unwrap();
        assert!(status.success(), "cc {name}.c");
        out
    }

    /// Every file in it, with its length.
    pub fn sizes(&self) -> Vec<(String, u64)> {
        let mut sizes: Vec<(String, u64)> = std::fs::read_dir(&self.0)
            .unwrap()
            .flatten()
            .map(|e| (e.file_name().to_string_lossy().to_string(), e.metadata().unwrap().len()))
            .collect();
        sizes.sort();
        sizes
    }
}

/// A process started in a process group of its own, with everything it starts: dropping
/// it kills the whole group, so a test that fails or times out leaves no tree running.
pub struct Group {
    /// The group's leader.
    pub child: std::process::Child,
}

impl Group {
    /// Spawns `command` as the leader of a new process group.
    pub fn spawn(command: &mut Command) -> Group {
        use std::os::unix::process::CommandExt;
        Group { child: command.process_group(0).spawn().unwrap() }
    }

    /// Kills every process of the group.
    pub fn kill(&self) {
        // SAFETY: kill(2) of this test's own process group; integer arguments only.
        unsafe { libc::kill(-(self.child.id() as libc::pid_t), libc::SIGKILL) };
    }

    /// Waits for the leader until `limit` has passed: its status, or a panic naming
    /// `what` (the group killed first).
    pub fn wait_within(&mut self, limit: Duration, what: &str) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() >= deadline {
                self.kill();
                let _ = self.child.wait();
                panic!("{what}: still running after {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
        let _ = self.child.wait();
    }
}

/// Runs `f` on a thread of its own and gives its result, or panics naming `what` once
/// `limit` has passed (a blocking read of a pipe, a wait for a child).
pub fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).unwrap_or_else(|_| panic!("{what}: no result after {limit:?}"))
}

/// `command.output()` with a deadline: the command runs in a process group of its own
/// (stdin empty, stdout and stderr captured). Once `limit` passes, or once the leader has
/// exited and its descendants still hold the pipes open past it, the group is killed and
/// the test panics with what the command printed, so a hung run fails with its own words
/// instead of holding the whole suite past its time.
pub fn output_within(command: &mut Command, limit: Duration) -> Output {
    use std::io::Read;
    let deadline = Instant::now() + limit;
    let what = format!("{command:?}");
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut group = Group::spawn(command);
    let (tx, rx) = std::sync::mpsc::channel();
    for (i, mut pipe) in [
        Box::new(group.child.stdout.take().unwrap()) as Box<dyn Read + Send>,
        Box::new(group.child.stderr.take().unwrap()),
    ]
    .into_iter()
    .enumerate()
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            let _ = tx.send((i, bytes));
        });
    }
    let mut status = None;
    while status.is_none() && Instant::now() < deadline {
        status = group.child.try_wait().unwrap();
        if status.is_none() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    if status.is_none() {
        group.kill();
    }
    let mut got = [Vec::new(), Vec::new()];
    let mut open = 0;
    for _ in 0..2 {
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_secs(5));
        let piece = rx.recv_timeout(left).or_else(|_| {
            // Killed, its descendants let the pipes go: what they printed arrives.
            open += 1;
            group.kill();
            rx.recv_timeout(Duration::from_secs(5))
        });
        if let Ok((i, bytes)) = piece {
            got[i] = bytes;
        }
    }
    let [stdout, stderr] = got;
    let said =
        || format!("{}{}", String::from_utf8_lossy(&stdout), String::from_utf8_lossy(&stderr));
    let Some(status) = status else {
        panic!("{what}: still running after {limit:?}; it printed:\n{}", said());
    };
    if open > 0 {
        panic!("{what}: exited, but its descendants held its output open; it printed:\n{}", said());
    }
    Output { status, stdout, stderr }
}
