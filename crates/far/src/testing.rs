//! memcached servers for tests and benchmarks: started on a free loopback port, waited for,
//! and killed when dropped (a panicking test leaves none behind).
//!
//! `memcached -M -m SIZE -l 127.0.0.1 -p PORT -t 2` (`-M`: never evict, as swap needs; two
//! worker threads on the two-CPU machines the project runs on; `-u nobody` as root, which
//! memcached refuses to run as otherwise).

use crate::proto::Conn;
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to accept connections.
const START_DEADLINE: Duration = Duration::from_secs(10);

/// A memcached server this process started.
#[derive(Debug)]
pub struct Memcached {
    child: Option<Child>,
    /// Where it listens.
    pub addr: SocketAddr,
    memory_mb: u32,
}

impl Memcached {
    /// Whether a `memcached` binary is on the PATH.
    pub fn available() -> bool {
        Command::new("memcached")
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Starts a server of `memory_mb` on a free loopback port.
    ///
    /// # Errors
    /// The spawn's error, or a server that did not accept connections in time.
    pub fn start(memory_mb: u32) -> std::io::Result<Memcached> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        Memcached::start_on(SocketAddr::from(([127, 0, 0, 1], port)), memory_mb)
    }

    /// Starts a server of `memory_mb` at `addr` (a loopback address).
    ///
    /// # Errors
    /// As [`Memcached::start`].
    pub fn start_on(addr: SocketAddr, memory_mb: u32) -> std::io::Result<Memcached> {
        let mut cmd = Command::new("memcached");
        cmd.args(["-M", "-m", &memory_mb.to_string(), "-t", "2", "-U", "0"])
            .args(["-l", &addr.ip().to_string(), "-p", &addr.port().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if rustix::process::geteuid().is_root() {
            cmd.args(["-u", "nobody"]);
        }
        let mut server = Memcached { child: Some(cmd.spawn()?), addr, memory_mb };
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if Conn::connect(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(server);
            }
            if let Some(status) = server.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                return Err(std::io::Error::other(format!("memcached exited: {status}")));
            }
            if Instant::now() >= deadline {
                return Err(std::io::Error::other("memcached did not start in time"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the server (SIGSTOP): it holds its items and answers nothing, as a server
    /// stalled under load.
    pub fn pause(&self) {
        self.signal(rustix::process::Signal::STOP);
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        self.signal(rustix::process::Signal::CONT);
    }

    fn signal(&self, signal: rustix::process::Signal) {
        let pid = self.child.as_ref().and_then(|c| rustix::process::Pid::from_raw(c.id() as i32));
        if let Some(pid) = pid {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }

    /// Kills the server (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server and starts a new, empty one at the same address.
    ///
    /// # Errors
    /// As [`Memcached::start`].
    pub fn restart_empty(&mut self) -> std::io::Result<()> {
        self.kill();
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            match Memcached::start_on(self.addr, self.memory_mb) {
                Ok(mut fresh) => {
                    self.child = fresh.child.take();
                    return Ok(());
                }
                // The port can stay busy for a moment after the kill.
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// A figure of its `stats` (`bytes`, `curr_items`, ...).
    ///
    /// # Errors
    /// The request's error, or a name it does not report.
    pub fn stat(&self, name: &str) -> std::io::Result<u64> {
        let mut conn = Conn::connect(&self.addr, Duration::from_secs(2))?;
        let mut found = None;
        conn.stats(&mut |n, v| {
            if n == name {
                found = v.parse().ok();
            }
        })?;
        found.ok_or_else(|| std::io::Error::other(format!("no stat {name}")))
    }
}

/// CPU time, in nanoseconds, the threads of process `pid` alive now have run (the first
/// figure of each `/proc/PID/task/TID/schedstat`); 0 for a process that is gone.
pub fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    let ran = |tid: &std::ffi::OsStr| -> Option<u64> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/task/{}/schedstat", tid.display()));
        text.ok()?.split(' ').next()?.parse().ok()
    };
    tasks.filter_map(|t| t.ok().and_then(|t| ran(&t.file_name()))).sum()
}

impl Memcached {
    /// CPU time its threads have run, in nanoseconds.
    pub fn cpu_ns(&self) -> u64 {
        self.child.as_ref().map_or(0, |c| cpu_ns(c.id()))
    }

    /// The value stored under `key`, if any (`mg KEY v`).
    ///
    /// # Errors
    /// The request's error.
    pub fn get(&self, key: &str) -> std::io::Result<Option<Vec<u8>>> {
        let mut conn = Conn::connect(&self.addr, Duration::from_secs(2))?;
        conn.push_raw(format!("mg {key} v\r\n").as_bytes());
        conn.send()?;
        conn.read_any_value()
    }
}

/// The `--far` URL of `servers`: `memcached://HOST:PORT,HOST:PORT,...`.
pub fn url(servers: &[Memcached]) -> String {
    let list: Vec<String> = servers.iter().map(|s| s.addr.to_string()).collect();
    format!("memcached://{}", list.join(","))
}

impl Drop for Memcached {
    fn drop(&mut self) {
        self.kill();
    }
}
