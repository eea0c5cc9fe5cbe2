//! `uswap run` as an ordinary user: rung 2 of the privilege ladder (read-write
//! `/dev/userfaultfd`, no CAP_SYS_PTRACE) and rung 3's refusal (crates/cli/src/ladder.rs).
//!
//! CI runs as root, so each test drops to uid/gid 65534 with `setpriv`, and a test that
//! needs rung 2 grants the device to a throwaway group for its own duration only, through
//! the administrator's script (contrib/userfaultfd/setup-userfaultfd --no-udev), and
//! restores the device's owner, group and mode after, on panic too ([`Device`]'s drop).
//! Tests that touch the device hold a lock on it (flock), so no two of them (in this or
//! another test process) change it at once; the device's state before a change is saved in
//! /tmp until the change is undone, so a run killed mid-test is put right by the next.
//! Without root, setpriv or the device, each test says so and skips.

use std::fs::File;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::{shim, BoundedOutput, TempDir};

const DEVICE: &str = "/dev/userfaultfd";
/// The device's owner, group and mode before a test changed them: kept until the change
/// is undone, so that the next run puts right a run killed before it undid it.
const SAVED: &str = "/tmp/uswap-userfaultfd-device.saved"; // tidy: kept
/// The throwaway user: nobody.
const UID: &str = "65534";

/// The device, locked for one test, put back as it was on drop.
struct Device {
    _lock: File,
    saved: (u32, u32, u32),
    group: Option<String>,
}

impl Device {
    /// Locks the device, or `None` (with a note) where these tests cannot run.
    fn lock() -> Option<Device> {
        let missing = if !rustix::process::geteuid().is_root() {
            Some("not root (the tests drop to uid 65534 with setpriv)")
        } else if !Path::new(DEVICE).exists() {
            Some("no /dev/userfaultfd (Linux 6.1+)")
        } else if Command::new("setpriv").arg("--version").output().is_err() {
            Some("no setpriv (util-linux)")
        } else {
            None
        };
        if let Some(why) = missing {
            eprintln!("skipped: {why}");
            return None;
        }
        // The lock is the device itself: an open (read-only, no ioctl) makes no userfaultfd,
        // and leaves no lock file behind.
        let lock = File::open(DEVICE).unwrap();
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
        if let Ok(text) = std::fs::read_to_string(SAVED) {
            let v: Vec<u32> = text.split_whitespace().map(|w| w.parse().unwrap()).collect();
            restore((v[0], v[1], v[2]));
            eprintln!("note: {DEVICE} put back as it was before an interrupted test");
        }
        let meta = std::fs::metadata(DEVICE).unwrap();
        let saved = (meta.uid(), meta.gid(), meta.permissions().mode() & 0o7777);
        std::fs::write(SAVED, format!("{} {} {}", saved.0, saved.1, saved.2)).unwrap();
        Some(Device { _lock: lock, saved, group: None })
    }

    /// Makes the device root's only (0600 root:root), as on a fresh system.
    fn deny(&self) {
        restore((0, 0, 0o600));
    }

    /// Creates a throwaway group and gives it read-write on the device, with the
    /// administrator's script; returns the group's id.
    fn grant(&mut self) -> u32 {
        let name = format!("uswapt{}", std::process::id());
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../contrib/userfaultfd/setup-userfaultfd");
        self.group = Some(name.clone());
        let out = Command::new("sh").arg(&script).args(["--group", &name, "--no-udev"]).output();
        let out = out.unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let meta = std::fs::metadata(DEVICE).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o660, "the script's mode");
        let entry = Command::new("getent").args(["group", &name]).output().unwrap();
        let text = String::from_utf8_lossy(&entry.stdout).to_string();
        let gid: u32 = text.split(':').nth(2).unwrap().trim().parse().unwrap();
        assert_eq!(meta.gid(), gid, "the script's group");
        gid
    }
}

fn restore((uid, gid, mode): (u32, u32, u32)) {
    std::os::unix::fs::chown(DEVICE, Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(DEVICE, std::fs::Permissions::from_mode(mode)).unwrap();
}

impl Drop for Device {
    fn drop(&mut self) {
        restore(self.saved);
        if let Some(group) = self.group.take() {
            let _ = Command::new("groupdel").arg(&group).status();
        }
        let _ = std::fs::remove_file(SAVED);
    }
}

/// Runs `program args` as uid/gid 65534 with `group` as its only supplementary group (none:
/// `None`), no capabilities.
fn as_nobody(group: Option<u32>, program: &Path, args: &[&str]) -> Output {
    let mut command = Command::new("setpriv");
    command.args(["--reuid", UID, "--regid", UID]);
    match group {
        Some(gid) => command.args(["--groups", &gid.to_string()]),
        None => command.arg("--clear-groups"),
    };
    let out = command
        .arg(program)
        .args(args)
        .env("USWAP_PRELOAD", shim())
        .env("HOME", "/")
        .current_dir("/")
        .bounded_output();
    eprintln!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

fn uswap() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_uswap"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).to_string()
}

/// Pages out to the pool and the file, from `uswap run`'s summary.
fn pages_out(err: &str) -> u64 {
    let line = err.lines().find(|l| l.contains("pages out:")).expect("summary line");
    let figure = |key: &str| -> u64 {
        let rest = line.split(key).nth(1).unwrap();
        rest.split([',', ' ', ';']).next().unwrap().parse().unwrap()
    };
    figure("pool ") + figure("file ")
}

/// What a `--stats-every` block's "paged out SIZE: ..." line says, MiB.
fn live_paged_out_mib(line: &str) -> f64 {
    let rest = line.strip_prefix("uswap live: paged out ").unwrap_or_default();
    let mut words = rest.split([' ', ':']);
    let value: f64 = words.next().unwrap().parse().unwrap_or(0.0);
    match words.next().unwrap_or_default() {
        "GiB" => value * 1024.0,
        "MiB" => value,
        "KiB" => value / 1024.0,
        _ => 0.0,
    }
}

/// The peak resident set from `uswap run`'s summary, MiB.
fn peak_mib(err: &str) -> f64 {
    let line = err.lines().find(|l| l.contains("peak resident ")).expect("summary line");
    let mut words = line.split("peak resident ").nth(1).unwrap().split([' ', ',']);
    let value: f64 = words.next().unwrap().parse().unwrap();
    match words.next().unwrap() {
        "GiB" => value * 1024.0,
        "MiB" => value,
        other => panic!("unit {other}"),
    }
}

/// A fork without exec, as an ordinary user through the device: the child and a
/// grandchild each check every byte of 48 MiB their parent had paged out (most of it under
/// 12M), each through a swap of its own with no CAP_SYS_PTRACE (no EVENT_FORK), in both
/// deliveries; `uswap check` says rung 2.
#[test]
fn a_child_and_grandchild_read_pages_paged_out_before_an_unprivileged_fork() {
    let Some(mut device) = Device::lock() else { return };
    let gid = device.grant();
    let check = as_nobody(Some(gid), uswap(), &["check"]);
    assert!(check.status.success(), "uswap check at rung 2");
    assert!(text(&check.stdout).contains("rung 2 of 3"), "{}", text(&check.stdout));
    let dir = TempDir::shared("fork");
    let exe = dir.compile("run_programs", "fork_check");
    for delivery in ["handler", "sigbus"] {
        let args = [
            "run",
            "--verbose",
            "--budget",
            "12M",
            "--delivery",
            delivery,
            "--",
            exe.to_str().unwrap(),
        ];
        let out = as_nobody(Some(gid), uswap(), &args);
        let (stdout, err) = (text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "{delivery}: {stdout}{err}");
        assert!(stdout.contains("child 0 parent 0"), "{delivery}: {stdout}{err}");
        assert!(pages_out(&err) >= 8192, "{delivery}: 32 MiB paged out before the fork: {err}");
    }
}

/// Under a seccomp filter that makes userfaultfd(2) fail with EPERM, as the default
/// profiles of Docker and containerd do, an ordinary user with the device runs the fork
/// job: the uffd comes from the device (open and ioctl, which such profiles allow), and
/// every byte checks.
#[test]
fn a_seccomp_filter_denying_the_system_call_leaves_the_device() {
    let Some(mut device) = Device::lock() else { return };
    let gid = device.grant();
    let dir = TempDir::shared("seccomp");
    let launcher = dir.compile("unprivileged_programs", "no_userfaultfd");
    let exe = dir.compile("run_programs", "fork_check");
    let check = as_nobody(Some(gid), &launcher, &[uswap().to_str().unwrap(), "check"]);
    let report = text(&check.stdout);
    assert!(check.status.success(), "{report}");
    assert!(
        report.contains("under a seccomp filter") && report.contains("rung 2 of 3"),
        "{report}"
    );
    let args = [
        uswap().to_str().unwrap(),
        "run",
        "--verbose",
        "--budget",
        "12M",
        "--",
        exe.to_str().unwrap(),
    ];
    let out = as_nobody(Some(gid), &launcher, &args);
    let (stdout, err) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}{err}");
    assert!(stdout.contains("child 0 parent 0"), "{stdout}{err}");
    assert!(pages_out(&err) >= 8192, "{err}");
}

/// Rung 3: no capability, no device access. `uswap run` refuses in one line that names
/// the way to rung 2, before the program starts; `uswap check` says what is missing and
/// exits 1.
#[test]
fn rung_3_refuses_in_one_line_naming_the_way_to_rung_2() {
    let Some(device) = Device::lock() else { return };
    device.deny();
    let dir = TempDir::shared("rung3");
    let marker = dir.0.join("started");
    let out = as_nobody(None, uswap(), &["run", "--", "/usr/bin/touch", marker.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("rung 3 of 3"), "{err}");
    assert!(err.contains("contrib/userfaultfd/setup-userfaultfd"), "{err}");
    assert!(err.contains("usermod -aG userfaultfd"), "{err}");
    assert!(!marker.exists(), "the program ran");
    let check = as_nobody(None, uswap(), &["check"]);
    let report = text(&check.stdout);
    assert_eq!(check.status.code(), Some(1), "{report}");
    assert!(report.contains("MISSING  privilege         rung 3 of 3"), "{report}");
    assert!(report.contains("only --delivery sigbus"), "{report}");
}

const PY_OBJECTS: &str = "import hashlib, sys\n\
n = int(sys.argv[1])\n\
data = [(str(i) * 100).encode()[:1000] for i in range(n)]\n\
h = hashlib.sha256()\n\
for b in data:\n    h.update(b)\n\
print(h.hexdigest(), len(data))\n\
sys.exit(7)\n";

/// The README's job as an ordinary user: a million Python objects (638 MiB) under 256M, the
/// system's python3 (a user's own may not be readable by nobody): the same checksum as
/// without uswap, the exit code, and the peak resident set within the budget + 10%.
#[test]
fn python_a_million_objects_under_256m_unprivileged() {
    let Some(mut device) = Device::lock() else { return };
    let python = Path::new("/usr/bin/python3");
    if !python.exists() {
        eprintln!("skipped: no /usr/bin/python3");
        return;
    }
    let gid = device.grant();
    let plain = as_nobody(None, python, &["-c", PY_OBJECTS, "1000000"]);
    assert_eq!(plain.status.code(), Some(7));
    let py = python.to_str().unwrap();
    let args = ["run", "--verbose", "--budget", "256M", "--", py, "-c", PY_OBJECTS, "1000000"];
    let out = as_nobody(Some(gid), uswap(), &args);
    assert_eq!(out.status.code(), Some(7), "exit code preserved");
    assert_eq!(out.stdout, plain.stdout, "same checksum");
    let peak = peak_mib(&text(&out.stderr));
    assert!(peak <= 256.0 * 1.1, "peak {peak} MiB over 256M + 10%");
}

/// `/dev/userfaultfd` loses its permission mid-run. What was started keeps working: a
/// child forked after that gets its swap through the device descriptor its image opened
/// at start (access is checked at open) and checks every byte of 32 MiB, mostly paged
/// out; the buffer goes to a file through write(2). The image the program then execs can
/// have no userfaultfd: it runs unmanaged with one warning line, reads the file back
/// right, and the summary counts it.
#[test]
fn a_device_that_loses_its_permission_leaves_new_images_unmanaged() {
    let Some(mut device) = Device::lock() else { return };
    let gid = device.grant();
    let dir = TempDir::shared("revoked");
    let exe = dir.compile("unprivileged_programs", "device_revoked");
    let mut command = Command::new("setpriv");
    command.args(["--reuid", UID, "--regid", UID, "--groups", &gid.to_string()]);
    // Live figures every 50 ms: an image that execs leaves its last live stats file. The
    // blocks say what was paged out in MiB: 16 MiB out is 4096 pages.
    let stats = dir.0.join("stats");
    command.arg(uswap()).args([
        "run",
        "--verbose",
        "--budget",
        "8M",
        "--stats-every",
        "0.05",
        "--stats-file",
    ]);
    command.arg(&stats).arg("--").arg(&exe).arg(&dir.0);
    command.env("USWAP_PRELOAD", shim()).env("HOME", "/").current_dir("/");
    command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let child = command.spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let paged_out = || {
        let live = std::fs::read_to_string(&stats).unwrap_or_default();
        let last = live
            .lines()
            .rev()
            .find(|l| l.starts_with("uswap live: paged out "))
            .map(str::to_string);
        last.is_some_and(|line| live_paged_out_mib(&line) >= 16.0)
    };
    while !(dir.0.join("ready").exists() && paged_out()) {
        assert!(std::time::Instant::now() < deadline, "the program never got ready: 16 MiB out");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    device.deny();
    std::fs::write(dir.0.join("go"), b"").unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, err) = (text(&out.stdout), text(&out.stderr));
    eprintln!("{stdout}{err}");
    assert!(out.status.success(), "{stdout}{err}");
    assert!(stdout.contains("child 0, second image ok"), "{stdout}{err}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("runs unmanaged")).collect();
    assert_eq!(warnings.len(), 1, "one warning line: {err}");
    assert!(warnings[0].starts_with("uswap: warning: ") && warnings[0].contains("pid"), "{err}");
    assert!(err.contains("1 program images ran unmanaged"), "{err}");
    assert!(pages_out(&err) >= 4096, "16 MiB paged out before the exec: {err}");
}

/// A redis-server, killed (both sockets and the process) when the test ends, panics
/// included.
struct Redis {
    child: std::process::Child,
    port: u16,
}

impl Redis {
    /// Starts `command` (which runs redis-server on `port`) and waits until it answers.
    fn start(mut command: Command, port: u16) -> Redis {
        command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
        let redis = Redis { child: command.spawn().unwrap(), port };
        redis.wait_for("PING", |reply| reply == "PONG", "the server to answer");
        redis
    }

    /// redis-cli's reply to `args`, trimmed.
    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .unwrap();
        text(&out.stdout).trim().to_string()
    }

    /// Waits until the reply to `command` satisfies `done`, at most two minutes.
    fn wait_for(&self, command: &str, done: impl Fn(&str) -> bool, what: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        let args: Vec<&str> = command.split(' ').collect();
        while !done(&self.cli(&args)) {
            assert!(std::time::Instant::now() < deadline, "waited 120 s for {what}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Asks the server to end, then waits for its process; the stderr it wrote.
    fn stop(mut self) -> String {
        let _ = self.cli(&["SHUTDOWN", "NOSAVE"]);
        let mut err = String::new();
        if let Some(mut pipe) = self.child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut pipe, &mut err);
        }
        let _ = self.child.wait();
        err
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nobody listens on now, on loopback.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Redis's `BGSAVE` is a fork without exec: the child writes the whole data set to an RDB
/// file. As an ordinary user, under a 24M budget, 64 MiB of values (most paged out before
/// the save); the file loads into a fresh unmanaged server with the same keys and the same
/// digest of every value.
#[test]
fn redis_bgsave_under_a_budget_below_its_data_set_loads_back_equal() {
    if Command::new("redis-server").arg("--version").output().is_err() {
        eprintln!("skipped: redis-server is not installed (.ci/setup-bench installs it)");
        return;
    }
    let Some(mut device) = Device::lock() else { return };
    let gid = device.grant();
    let dir = TempDir::shared("redis");
    let dir_arg = dir.0.to_str().unwrap();
    let server_args = |port: u16| -> Vec<String> {
        [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--dir",
            dir_arg,
            "--dbfilename",
            "dump.rdb",
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            "yes",
            "--daemonize",
            "no",
        ]
        .map(str::to_string)
        .to_vec()
    };
    let port = free_port();
    let mut managed = Command::new("setpriv");
    managed.args(["--reuid", UID, "--regid", UID, "--groups", &gid.to_string()]);
    managed.arg(uswap()).args(["run", "--verbose", "--budget", "24M", "--", "redis-server"]);
    managed.args(server_args(port)).env("USWAP_PRELOAD", shim()).current_dir("/");
    let redis = Redis::start(managed, port);
    assert_eq!(redis.cli(&["DEBUG", "POPULATE", "200000", "key", "320"]), "OK");
    let (keys, digest) = (redis.cli(&["DBSIZE"]), redis.cli(&["DEBUG", "DIGEST"]));
    assert_eq!(keys, "200000");
    assert_eq!(redis.cli(&["BGSAVE"]), "Background saving started");
    redis.wait_for("INFO persistence", |i| i.contains("rdb_bgsave_in_progress:0"), "the save");
    let info = redis.cli(&["INFO", "persistence"]);
    assert!(info.contains("rdb_last_bgsave_status:ok"), "{info}");
    let err = redis.stop();
    assert!(pages_out(&err) >= 8192, "most of the data set paged out: {err}");
    let fresh_port = free_port();
    let mut fresh = Command::new("redis-server");
    fresh.args(server_args(fresh_port));
    let fresh = Redis::start(fresh, fresh_port);
    fresh.wait_for("INFO persistence", |i| i.contains("loading:0"), "the load");
    assert_eq!(fresh.cli(&["DBSIZE"]), keys, "every key loaded back");
    assert_eq!(fresh.cli(&["DEBUG", "DIGEST"]), digest, "every value equal");
    fresh.stop();
}
