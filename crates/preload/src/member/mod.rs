//! Membership of the run's tree: joining the broker, reporting to it, taking the shares
//! it gives (runstat's `proto` is the wire format, `share` the broker's policy).
//!
//! ```text
//!   constructor                       handler thread, every pass (~10 ms)
//!   join: connect <run dir>/broker.sock   tick: every REPORT_PERIOD a report;
//!     hello pid token -> welcome            read what the broker sent (never waits);
//!     share row | refused (-> leave)        a new share -> Engine::set_budget
//!   attach the swap-space counter          the broker gone (EOF, EPIPE): close, go on
//!   build the engine with the share          alone under the last share
//! ```
//!
//! **Forks.** A forked child inherits the connection's descriptor, and a child that kept
//! it open would keep the broker from seeing its parent exit or exec. So every child
//! closes its copy at once ([`install_fork_hook`]; closing one process's descriptor
//! leaves the parent's connection alone), unless it already joined as itself.
//! [`rejoin_after_fork`] is the call for a child that runs an engine of its own (every
//! forked child of a managed process: docs/ARCHITECTURE.md, "Fork"): it drops the
//! inherited descriptor, joins as its own pid and applies its share (its contract is in
//! its comment).
//!
//! The connection is one word (`CONN`: the pid that made it and its descriptor), the
//! rest of the state atomics too: nothing here takes a lock or allocates on the paths a
//! forked child runs (join, the fork hook), where a lock may be held by a thread that
//! was not copied and the shim's allocator may be one of them.

mod quota;
mod sys;

pub use quota::{TreeQuota, TREE_LEDGER};

use engine::Engine;
use runstat::env::RunConfig;
use runstat::proto::{self, Message, Report, LINE_MAX};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::OnceLock;
use std::time::Duration;

/// How long joining waits for the broker's answer: a process outside a run it cannot
/// reach must not hang before its `main`, and a broker answers in microseconds.
pub const JOIN_TIMEOUT: Duration = Duration::from_secs(2);

/// No connection.
const NONE: u64 = u64::MAX;

/// The connection: `pid << 32 | fd` of the process that made it, or [`NONE`].
static CONN: AtomicU64 = AtomicU64::new(NONE);
/// The socket's inode: a program that closes every descriptor and opens files or sockets
/// of its own may get the connection's number back (a daemon does), and a report must
/// never go into them, nor a close take them away.
static CONN_INODE: AtomicU64 = AtomicU64::new(0);
/// When the last report was sent, nanoseconds on the monotonic clock.
static LAST_REPORT_NS: AtomicU64 = AtomicU64::new(0);
/// The last share received and not applied yet (0: none).
static PENDING_SHARE: AtomicU64 = AtomicU64::new(0);
/// The tree's whole budget (`USWAP_BUDGET`).
static TREE_BUDGET: AtomicU64 = AtomicU64::new(0);

counters::table! {
    /// The member's live counters.
    pub struct Member;
    /// A snapshot of them (in the stats file, `member_*`).
    #[derive(Debug, Clone, Copy, Default)]
    #[allow(dead_code)]
    pub struct MemberSnapshot {
        prefix "member_";
        counters {
            /// Shares applied.
            shares_applied,
            /// Shares the engine refused.
            share_errors,
            /// 1 once the broker went away while this process ran.
            broker_lost,
            /// 1 once the connection's number was found taken by the program.
            socket_taken,
        }
    }
}

/// The member's counters (zeroed in a forked child, which counts its own).
pub static COUNTERS: Member = Member::new();

/// Where the run's broker is, copied at the first join so that a forked child finds it
/// without reading the environment.
#[derive(Debug)]
struct Target {
    socket: [u8; 108],
    socket_len: usize,
    quota: [u8; 4096],
    quota_len: usize,
    token: [u8; 64],
    token_len: usize,
}

static TARGET: OnceLock<Target> = OnceLock::new();

/// Joined: this process's share and its row in the swap-space counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Joined {
    /// The share of the budget, in bytes.
    pub share: u64,
    /// The row.
    pub row: u32,
}

/// Why a process is not a member (it runs unmanaged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outside {
    /// No broker listens (the run ended, or this is not a run's directory).
    NoBroker,
    /// The broker refused (a process outside the run, another run's token).
    Refused,
    /// The broker did not answer in time, or said something else.
    NoAnswer,
    /// The run directory's paths do not fit, or its counter file cannot be mapped.
    Broken,
}

fn copy_into<const N: usize>(text: &[u8]) -> Option<([u8; N], usize)> {
    let mut out = [0u8; N];
    out.get_mut(..text.len())?.copy_from_slice(text);
    Some((out, text.len()))
}

/// Joins the run of `config` as this process (the constructor: module essay).
///
/// # Errors
/// [`Outside`]: the process is not a member and must leave.
pub fn join(config: &RunConfig) -> Result<Joined, Outside> {
    join_run(&config.run_dir, &config.run_token, config.budget_bytes)
}

/// [`join`] with the three settings it takes from the run's configuration.
fn join_run(run_dir: &str, run_token: &str, budget_bytes: u64) -> Result<Joined, Outside> {
    let dir = run_dir.as_bytes();
    let socket = [dir, b"/", runstat::env::SOCKET.as_bytes()].concat();
    let quota = [dir, b"/", runstat::env::QUOTA_FILE.as_bytes()].concat();
    let ((socket, socket_len), (quota, quota_len), (token, token_len)) = (
        copy_into::<108>(&socket).ok_or(Outside::Broken)?,
        copy_into::<4096>(&quota).ok_or(Outside::Broken)?,
        copy_into::<64>(run_token.as_bytes()).ok_or(Outside::Broken)?,
    );
    TREE_BUDGET.store(budget_bytes, SeqCst);
    let target =
        TARGET.get_or_init(|| Target { socket, socket_len, quota, quota_len, token, token_len });
    join_as(target, sys::getpid())
}

/// Connects, says hello as `pid`, waits for the answer, attaches the counter file.
///
/// Context: no allocation, no lock (a forked child runs it).
fn join_as(target: &Target, pid: u32) -> Result<Joined, Outside> {
    let socket = &target.socket[..target.socket_len];
    if !sys::fits_socket_address(socket) {
        return Err(Outside::Broken);
    }
    let fd =
        sys::connect(socket, JOIN_TIMEOUT.as_millis() as u64).map_err(|_| Outside::NoBroker)?;
    let answer = hello(fd, target, pid);
    let joined = answer.and_then(|joined| {
        let quota = &target.quota[..target.quota_len];
        quota::attach(quota, joined.row).map_err(|_| Outside::Broken)?;
        Ok(joined)
    });
    match joined {
        Ok(joined) => {
            CONN_INODE.store(sys::inode(fd).unwrap_or(0), SeqCst);
            CONN.store(u64::from(pid) << 32 | fd as u32 as u64, SeqCst);
            Ok(joined)
        }
        Err(outside) => {
            sys::close(fd);
            Err(outside)
        }
    }
}

/// Sends the hello on `fd` and reads the broker's one-line answer.
fn hello(fd: i32, target: &Target, pid: u32) -> Result<Joined, Outside> {
    let token =
        std::str::from_utf8(&target.token[..target.token_len]).map_err(|_| Outside::Broken)?;
    let mut line = [0u8; LINE_MAX];
    let hello = Message::Hello { pid, token, version: proto::VERSION };
    let len = hello.encode(&mut line).ok_or(Outside::Broken)?;
    sys::send(fd, &line[..len], true).map_err(|_| Outside::NoBroker)?;
    let mut got = 0;
    while !line[..got].contains(&b'\n') {
        match sys::recv(fd, &mut line[got..], true) {
            Ok(0) => return Err(Outside::NoBroker),
            Ok(n) => got += n,
            Err(_) => return Err(Outside::NoAnswer),
        }
        if got == line.len() {
            return Err(Outside::NoAnswer);
        }
    }
    let end = line[..got].iter().position(|&b| b == b'\n').unwrap_or(got);
    match proto::parse(&line[..end]) {
        Ok(Message::Welcome { share, row }) => Ok(Joined { share, row }),
        Ok(Message::Refused { .. }) => Err(Outside::Refused),
        _ => Err(Outside::NoAnswer),
    }
}

/// The connection's descriptor if this process made it.
fn own_fd() -> Option<i32> {
    let conn = CONN.load(SeqCst);
    (conn != NONE && (conn >> 32) as u32 == sys::getpid()).then_some(conn as u32 as i32)
}

/// Drops the connection if this process did not make it (an inherited copy), or if
/// `always`. Returns whether one was closed.
fn drop_connection(always: bool) -> bool {
    let conn = CONN.load(SeqCst);
    if conn == NONE || (!always && (conn >> 32) as u32 == sys::getpid()) {
        return false;
    }
    if CONN.compare_exchange(conn, NONE, SeqCst, SeqCst).is_ok() {
        sys::close(conn as u32 as i32);
        return true;
    }
    false
}

/// `pthread_atfork` child handler: a child closes the descriptor it inherited (module
/// essay). Async-signal-safe: atomics and close(2).
extern "C" fn close_inherited() {
    drop_connection(false);
}

/// Makes every forked child close its copy of the connection (module essay). Once per
/// process image, from the constructor.
pub fn install_fork_hook() {
    sys::atfork_child(close_inherited);
}

/// Joins the run as a new member from a child forked without an exec that runs an engine
/// of its own (`engine`, its copy of its parent's), and gives that engine the share the
/// broker grants; the child's pages are then budgeted as the tree's, under its own share.
///
/// What it expects:
/// - It runs in the child, on its only thread, before the program's code resumes there
///   and before the engine writes to a swap file of the child's own: the tree's swap-space
///   reservations are counted on the member's row, and until this call that is the
///   parent's (a chunk reserved before it is given back with the parent's row).
/// - The parent joined the run (the constructor's [`join`]); a parent that never did
///   (no run, refused, no broker) has no broker to hand its child: `NoBroker` and nothing
///   changes.
///
/// What it does with what the child inherited:
/// - The connection: the child's copy of the parent's socket is closed (the fork hook
///   closed it already after a glibc `fork()`; a raw clone has not run it). Only this
///   process's descriptor goes: the parent's connection and membership are untouched,
///   and the broker never sees the child speak on it. (Before the program resumes in the
///   child, that number can only be the inherited socket.)
/// - The token and the socket's path: the copies made at the parent's join (no
///   environment read, no allocation). The child says hello as its own pid; the broker
///   checks the token, the peer's credentials and that the child descends from `uswap
///   run`, and answers with a share and a row of the swap-space counter, both its own.
/// - The counter file's mapping is shared with the parent and kept; the row changes.
/// - The per-process member figures (shares applied and refused, broker lost, socket
///   taken, swap space refused) restart at zero: they are the child's stats file's.
///
/// A child the broker refuses, or that finds it gone, goes on alone under the budget its
/// engine inherited (the parent's share: the tree may pass its budget by that much while
/// both live), as a member whose broker was killed does (`member_broker_lost` is 1); the
/// error says why.
///
/// Where it is called: the shim's fork hook (`ShimHooks::forked` in the child), which
/// the frontend crate runs while the child's engine has its reclaim paused (crates/
/// frontend's fork.rs), so nothing is written to the child's own swap file before it.
///
/// # Errors
/// [`Outside`]: not joined (above).
///
/// Context: a fork child: no allocation, no lock a thread that was not copied could hold:
/// atomics, system calls, stack buffers, and `Engine::set_budget` (lock-free). Blocks
/// for the broker's answer, at most [`JOIN_TIMEOUT`] per step (microseconds when it runs).
pub fn rejoin_after_fork(engine: &Engine) -> Result<Joined, Outside> {
    drop_connection(false);
    COUNTERS.reset();
    quota::COUNTERS.reset();
    PENDING_SHARE.store(0, SeqCst);
    LAST_REPORT_NS.store(0, SeqCst);
    let joined = TARGET.get().ok_or(Outside::NoBroker).and_then(|t| join_as(t, sys::getpid()));
    match joined {
        Ok(joined) => apply(engine, joined.share),
        Err(_) => COUNTERS.broker_lost.store(1, SeqCst),
    }
    joined
}

/// Applies `share` to `engine`, counting the outcome.
pub fn apply(engine: &Engine, share: u64) {
    set_room(engine, share);
    if share == engine.budget_bytes() {
        return;
    }
    match engine.set_budget(share) {
        Ok(()) => COUNTERS.shares_applied.fetch_add(1, SeqCst),
        Err(_) => COUNTERS.share_errors.fetch_add(1, SeqCst),
    };
}

/// How much of its budget the engine keeps from the outside charge under `share`.
///
/// With the whole budget (the tree's only member, or the only one with a say), half of
/// it, as a single program under `uswap run` always had: memory a program touches before
/// its shim adopts it counts as outside for a scan period, and an engine left less than
/// half would take back the pages a system call's retry just brought in (SIGBUS
/// delivery's `fread` of 4 MiB under 8M failed so). With a share of it, the broker's
/// floor already covers the process's unmanaged memory and a working room above it
/// (runstat's share module): the outside charge may take all but that room, so that a
/// member whose interpreter and libraries hold 16 MiB stays within a share of 21.
fn set_room(engine: &Engine, share: u64) {
    let alone = share >= TREE_BUDGET.load(SeqCst);
    ALONE.store(alone, SeqCst);
    engine.set_outside_room(if alone { 0 } else { runstat::share::WORKING_MIN_BYTES });
}

/// The share in force is the whole budget: the tree's only member.
static ALONE: AtomicBool = AtomicBool::new(true);

/// Whether this process's share is the tree's whole budget (its only member): it is then
/// charged its whole resident set, as a single program is (`hooks::charge_the_rest`).
pub fn alone() -> bool {
    ALONE.load(SeqCst)
}

/// Whether this process is a member with a live connection to its broker.
pub fn connected() -> bool {
    own_fd().is_some()
}

/// The handler's turn (module essay): a report every [`proto::REPORT_PERIOD_MS`] (made by
/// `report` only when one is due), the broker's messages read without waiting, the last
/// share applied.
///
/// Context: the handler thread.
pub fn tick(engine: &Engine, now_ns: u64, report: impl FnOnce() -> Report) {
    let Some(fd) = own_fd() else { return };
    if sys::inode(fd) != Some(CONN_INODE.load(SeqCst)) {
        // Closed by the program, its number perhaps reused: not ours to use or close.
        CONN.store(NONE, SeqCst);
        COUNTERS.socket_taken.store(1, SeqCst);
        COUNTERS.broker_lost.store(1, SeqCst);
        return;
    }
    let last = LAST_REPORT_NS.load(SeqCst);
    if now_ns.saturating_sub(last) >= proto::REPORT_PERIOD_MS * 1_000_000 {
        LAST_REPORT_NS.store(now_ns, SeqCst);
        let mut line = [0u8; LINE_MAX];
        if let Some(len) = Message::Report(report()).encode(&mut line) {
            match sys::send(fd, &line[..len], false) {
                Ok(()) | Err(libc::EAGAIN) => {}
                Err(_) => return lose_broker(),
            }
        }
    }
    if !receive(fd) {
        return lose_broker();
    }
    let share = PENDING_SHARE.swap(0, SeqCst);
    if share != 0 {
        apply(engine, share);
    }
}

/// Reads every message waiting; false when the broker is gone.
fn receive(fd: i32) -> bool {
    let mut buf = [0u8; 4 * LINE_MAX];
    let mut kept = 0;
    loop {
        match sys::recv(fd, &mut buf[kept..], false) {
            Ok(0) => return false,
            Ok(n) => kept += n,
            Err(libc::EAGAIN) => return true,
            Err(_) => return false,
        }
        let mut start = 0;
        while let Some(at) = buf[start..kept].iter().position(|&b| b == b'\n') {
            if let Ok(Message::Share(share)) = proto::parse(&buf[start..start + at]) {
                PENDING_SHARE.store(share, SeqCst);
            }
            start += at + 1;
        }
        buf.copy_within(start..kept, 0);
        kept -= start;
        if kept == buf.len() {
            return false; // a line longer than any message: not a broker
        }
    }
}

/// The broker is gone (`uswap run` ended or was killed): the engine goes on alone under
/// its last share.
fn lose_broker() {
    drop_connection(true);
    COUNTERS.broker_lost.store(1, SeqCst);
}

/// This process's thread ids ([`sys::task_ids`]).
pub fn task_ids(out: &mut [u32]) -> usize {
    sys::task_ids(out)
}

/// Hands `out` the member's counters and the tree quota's, by their stats-file names
/// (without allocating).
pub fn counters(mut out: impl FnMut(&'static str, u64)) {
    COUNTERS.each(&mut out);
    quota::COUNTERS.each(out);
}

#[cfg(test)]
#[allow(unsafe_code)] // fork and waitpid
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::os::unix::net::{UnixListener, UnixStream};
    use std::time::Instant;

    const MIB: u64 = 1 << 20;

    /// A broker that welcomes two hellos (the parent's, then the child's) with shares and
    /// rows of its own choosing, and says which pids they came from and whether the
    /// parent's connection was still open once the child had exited.
    fn fake_broker(listener: UnixListener, token: String) -> std::thread::JoinHandle<Vec<u32>> {
        std::thread::spawn(move || {
            let mut pids = Vec::new();
            let mut streams: Vec<UnixStream> = Vec::new();
            for (share, row) in [(32 * MIB, 1u32), (16 * MIB, 2)] {
                let (stream, _) = listener.accept().unwrap();
                stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut line = String::new();
                BufReader::new(&stream).read_line(&mut line).unwrap();
                let Ok(Message::Hello { pid, token: said, .. }) =
                    proto::parse(line.trim().as_bytes())
                else {
                    panic!("not a hello: {line}");
                };
                assert_eq!(said, token);
                pids.push(pid);
                let mut reply = [0u8; LINE_MAX];
                let len = Message::Welcome { share, row }.encode(&mut reply).unwrap();
                (&stream).write_all(&reply[..len]).unwrap();
                streams.push(stream);
            }
            // The child's connection closes when it exits; the parent's stays open.
            let mut byte = [0u8; 1];
            assert_eq!((&streams[1]).read(&mut byte).unwrap(), 0, "the child's EOF");
            streams[0].set_nonblocking(true).unwrap();
            let parent = (&streams[0]).read(&mut byte);
            assert!(parent.is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock));
            pids
        })
    }

    /// A child forked without an exec joins as itself: its own hello, share and row, its
    /// engine's budget set to its share, the parent's connection left open and its
    /// membership untouched.
    #[test]
    fn a_forked_child_rejoins_as_itself_and_leaves_its_parents_connection() {
        let scratch = tempfile::Builder::new().prefix("uswap-member-").tempdir().unwrap();
        let dir = scratch.path();
        let mut counter = vec![0u8; runstat::proto::QUOTA_FILE_BYTES];
        let magic_at = runstat::proto::QUOTA_MAGIC_WORD * 8;
        counter[magic_at..magic_at + 8].copy_from_slice(&runstat::proto::QUOTA_MAGIC.to_ne_bytes());
        std::fs::write(dir.join(runstat::env::QUOTA_FILE), counter).unwrap();
        let listener = UnixListener::bind(dir.join(runstat::env::SOCKET)).unwrap();
        let token = "0123456789abcdef0123456789abcdef";
        let broker = fake_broker(listener, token.to_string());
        let run_dir = dir.display().to_string();
        assert_eq!(join_run(&run_dir, token, 64 * MIB), Ok(Joined { share: 32 * MIB, row: 1 }));
        assert!(connected());
        let config = engine::EngineConfig {
            budget_bytes: 32 * MIB,
            background_reclaim: false,
            zswap: None,
            ..engine::EngineConfig::default()
        };
        let source = std::sync::Arc::new(engine::mem_source::MemorySource::new(0, 1));
        let engine = Engine::new(config, source).unwrap();
        // SAFETY: the child only runs the call under test (no allocation, no lock: its
        // contract) and _exits with what it found.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            let joined = rejoin_after_fork(&engine);
            let ok = joined == Ok(Joined { share: 16 * MIB, row: 2 })
                && engine.budget_bytes() == 16 * MIB
                && connected()
                && quota::row() == 2;
            // SAFETY: ends the child at once, running nothing of the parent's.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut status = 0;
        // SAFETY: waits for this test's own child, with a valid out-pointer.
        while unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) } == 0 {
            assert!(Instant::now() < deadline, "the child did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
        let pids = broker.join().unwrap();
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child: {status}");
        assert_eq!(pids, [std::process::id(), child as u32]);
        assert!(connected(), "the parent's connection is its own still");
        assert_eq!(engine.budget_bytes(), 32 * MIB, "the parent's engine keeps its budget");
    }
}
