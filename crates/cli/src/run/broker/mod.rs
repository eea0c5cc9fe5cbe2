//! The broker: `uswap run`'s thread that holds the run's one budget and divides it among
//! the engines of its process tree (runstat's `share` policy), over the control socket in
//! the private run directory (runstat's `proto`).
//!
//! ```text
//!   poll: the listening socket, every connection  (at most TICK apart)
//!     accept -> a connection waits for its hello (at most JOIN_WAIT)
//!     hello  -> the token, SO_PEERCRED (pid, uid), descent from uswap run
//!               -> welcome share row (the others' shares sent at once) | refused why
//!     report -> the member's sample for the policy
//!     EOF    -> the member is gone (exit, exec, crash): its share returns at the next
//!               tick, its row of the swap-space counter is given back
//!   tick (every TICK): scan the tree (/proc), charge what runs without an engine,
//!     rebalance, send the shares that changed; every second, the tree file
//! ```
//!
//! Membership cannot be had by accident: the token comes only through the environment
//! of the run's processes, the socket only lives in a 0700 directory, and the peer must
//! be a process of this user that descends from `uswap run` (a child subreaper, so
//! orphans stay below it). A process that inherited the environment outside the tree, or
//! another run's member, is refused and runs unmanaged.
//!
//! Context: one thread; the policy and every connection are its own (no locks). The
//! main thread only asks it to stop ([`Broker::finish`]).

mod conn;
pub mod procs;

use super::plot::{Point, Recording};
use super::sys::SharedWords;
use super::view::{ProcState, ProcView, TreeView};
use anyhow::{Context, Result};
use conn::Conn;
use runstat::proto::{self, Message, QUOTA_FIRST_ROW, QUOTA_ROWS, QUOTA_USED};
use runstat::share::{MemberId, Policy, Sample};
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the broker scans the tree and rebalances.
pub const TICK: Duration = Duration::from_millis(50);
/// How long a new connection may take to say hello.
const JOIN_WAIT: Duration = Duration::from_secs(2);
/// Connections waiting for their hello at once, at most.
const PENDING_MAX: usize = 256;
/// Scans a process must run without an engine before the summary names it: a process
/// between its fork and its exec, or whose shim is starting, is not a finding.
const GRACE_SCANS: u32 = 2;
/// The tree file is rewritten every this many ticks (a second).
const VIEW_TICKS: u64 = 20;
/// Processes the broker remembers: past this, exited processes that never ran unmanaged
/// are forgotten, the smallest first (a build runs tens of thousands of compilers; the
/// summary names the largest few and counts the rest).
const RECORDS_MAX: usize = 4096;

/// What the broker needs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The tree's budget.
    pub budget_bytes: u64,
    /// Where it came from, in words.
    pub budget_source: String,
    /// The run token.
    pub token: String,
    /// The run directory.
    pub dir: PathBuf,
    /// Children of `uswap run` that are not the program's (the idle pollers).
    pub exclude: Vec<u32>,
    /// The shim's path (to tell a process that loaded it from one that did not).
    pub shim: String,
    /// `--budget auto`: the controller's spec; `budget_bytes` is then its ceiling.
    pub auto: Option<runstat::auto::AutoSpec>,
    /// `--plot`: record the budget, the resident set and the fault stall every tick.
    pub plot: bool,
}

/// The running broker.
#[derive(Debug)]
pub struct Broker {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(TreeView, Option<Recording>)>,
}

/// A process of the tree, as the broker has seen it.
#[derive(Debug, Clone, Default)]
struct Record {
    name: String,
    ppid: u32,
    /// A member now.
    member: bool,
    /// A member at some time (an image of this pid joined).
    ever_member: bool,
    alive: bool,
    rss: u64,
    peak: u64,
    /// Consecutive scans it ran without an engine.
    unmanaged_scans: u32,
    /// Why, once it passed the grace scans.
    why: Option<String>,
    /// The broker refused it, and why.
    refused: Option<String>,
    /// It has the shim loaded without being a member: forked without an exec and not
    /// joined yet, its memory its copy of its parent's (looked up once, at its first scan
    /// and again at its grace scan).
    forked: Option<bool>,
    /// What the last scan counted of it as unmanaged memory (0: nothing, a member).
    unmanaged: u64,
}

/// The broker's state (module essay).
struct State {
    settings: Settings,
    root: u32,
    uid: u32,
    listener: UnixListener,
    conns: Vec<Conn>,
    policy: Policy,
    next_id: MemberId,
    quota: SharedWords,
    rows: Vec<bool>,
    records: BTreeMap<u32, Record>,
    figures: BTreeMap<&'static str, u64>,
    unmanaged_now: u64,
    ticks: u64,
    /// A process joined since the tree file was last written.
    view_due: bool,
    /// `--budget auto`'s controller.
    auto: Option<runstat::auto::Controller>,
    /// Fault stall the members reported since the last tick, summed (`budget_stall`).
    stall_pending_ns: u64,
    /// Of that, on thrashing faults.
    thrash_pending_ns: u64,
    /// `--plot`'s points.
    recording: Option<Recording>,
    /// When the broker started.
    started: Instant,
}

impl Broker {
    /// Binds the control socket and makes the swap-space counter in `settings.dir`, then
    /// starts the broker's thread.
    ///
    /// # Errors
    /// The socket or the counter file cannot be made, or the thread started.
    pub fn start(settings: Settings, swap_limit_bytes: u64) -> Result<Broker> {
        let socket = settings.dir.join(runstat::env::SOCKET);
        let listener = UnixListener::bind(&socket)
            .with_context(|| format!("cannot listen on {}", socket.display()))?;
        listener.set_nonblocking(true)?;
        let quota = make_quota(&settings, swap_limit_bytes)?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut state = State {
            root: std::process::id(),
            uid: rustix::process::geteuid().as_raw(),
            settings,
            listener,
            conns: Vec::new(),
            policy: Policy::new(),
            next_id: 0,
            quota,
            rows: vec![false; QUOTA_ROWS],
            records: BTreeMap::new(),
            figures: BTreeMap::new(),
            unmanaged_now: 0,
            ticks: 0,
            view_due: true,
            auto: None,
            stall_pending_ns: 0,
            thrash_pending_ns: 0,
            recording: None,
            started: Instant::now(),
        };
        state.auto = (state.settings.auto)
            .map(|spec| runstat::auto::Controller::new(spec, state.settings.budget_bytes));
        state.recording = (state.settings.plot)
            .then(|| Recording::new(state.settings.auto.map(|spec| spec.target_percent)));
        state.figures.insert("swap_limit_bytes", swap_limit_bytes);
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("uswap-broker".into())
            .spawn(move || state.run(&stop2))
            .context("cannot start the broker's thread")?;
        Ok(Broker { stop, thread })
    }

    /// Stops the broker after one last scan; its view of the tree, and `--plot`'s points.
    /// Members still running keep their last shares and go on alone once this process
    /// exits.
    pub fn finish(self) -> (TreeView, Option<Recording>) {
        self.stop.store(true, SeqCst);
        self.thread.join().unwrap_or_default()
    }
}

/// The fault stall a member reported since its last report that the budget caused, for
/// `--budget auto`: the stall of the faults that brought back pages paged out, estimated
/// as the stall times their share of the faults (refaulted pages over faults, at most
/// all). A program's first touches stall too, but no budget saves them.
fn budget_stall(before: Option<&proto::Report>, now: &proto::Report) -> u64 {
    let (stall, faults, refaults) =
        before.map_or((0, 0, 0), |b| (b.stall_ns, b.faults, b.refaults));
    let stall = now.stall_ns.saturating_sub(stall);
    let faults = now.faults.saturating_sub(faults);
    let refaults = now.refaults.saturating_sub(refaults);
    if faults == 0 {
        return 0;
    }
    (stall as f64 * (refaults as f64 / faults as f64).min(1.0)) as u64
}

/// Makes the swap-space counter file: its header, every row zero.
fn make_quota(settings: &Settings, limit: u64) -> Result<SharedWords> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = settings.dir.join(runstat::env::QUOTA_FILE);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.set_len(proto::QUOTA_FILE_BYTES as u64)?;
    let words = SharedWords::map(&file, proto::QUOTA_FILE_BYTES / 8)?;
    words.word(proto::QUOTA_LIMIT).store(limit, SeqCst);
    words.word(proto::QUOTA_MAGIC_WORD).store(proto::QUOTA_MAGIC, SeqCst);
    Ok(words)
}

impl State {
    fn run(mut self, stop: &AtomicBool) -> (TreeView, Option<Recording>) {
        let mut next_tick = Instant::now();
        loop {
            let timeout = next_tick.saturating_duration_since(Instant::now());
            self.poll(timeout);
            self.accept();
            self.serve();
            if Instant::now() >= next_tick {
                let stopping = stop.load(SeqCst);
                self.tick(stopping);
                if stopping {
                    break;
                }
                next_tick = (next_tick + TICK).max(Instant::now());
            }
        }
        (self.view(), self.recording.take())
    }

    /// Waits until a connection or the listener has something, or `timeout`.
    fn poll(&self, timeout: Duration) {
        use rustix::event::{PollFd, PollFlags};
        let mut fds = Vec::with_capacity(self.conns.len() + 1);
        fds.push(PollFd::new(&self.listener, PollFlags::IN));
        for conn in &self.conns {
            let mut flags = PollFlags::IN;
            if conn.wants_out() {
                flags |= PollFlags::OUT;
            }
            fds.push(PollFd::new(&conn.stream, flags));
        }
        let timeout = rustix::event::Timespec::try_from(timeout).ok();
        let _ = rustix::event::poll(&mut fds, timeout.as_ref());
    }

    fn accept(&mut self) {
        while let Ok((stream, _)) = self.listener.accept() {
            let pending = self.conns.iter().filter(|c| c.member.is_none()).count();
            if pending >= PENDING_MAX || stream.set_nonblocking(true).is_err() {
                continue; // dropped: the peer sees EOF and runs unmanaged
            }
            self.conns.push(Conn::new(stream));
        }
    }

    /// Reads every connection, handles its messages, writes what it owes, drops the
    /// closed ones.
    fn serve(&mut self) {
        for i in 0..self.conns.len() {
            let mut lines = Vec::new();
            self.conns[i].read(|line| lines.push(line.to_vec()));
            for line in lines {
                self.handle(i, &line);
            }
            self.conns[i].flush();
            let c = &mut self.conns[i];
            if c.member.is_none() && c.since.elapsed() > JOIN_WAIT {
                c.closed = true;
            }
        }
        let mut i = 0;
        while i < self.conns.len() {
            if self.conns[i].closed {
                let conn = self.conns.swap_remove(i);
                self.gone(conn);
            } else {
                i += 1;
            }
        }
    }

    fn handle(&mut self, i: usize, line: &[u8]) {
        match (proto::parse(line), self.conns[i].member.is_some()) {
            (Ok(Message::Hello { pid, token, version }), false) => {
                match self.admit(i, pid, token, version) {
                    Ok(()) => self.welcome(i, pid),
                    Err(why) => self.refuse(i, pid, &why),
                }
            }
            (Ok(Message::Report(report)), true) => {
                let Some(m) = self.conns[i].member.as_mut() else { return };
                self.stall_pending_ns += budget_stall(m.report.as_ref(), &report);
                let thrash_before = m.report.as_ref().map_or(0, |r| r.thrash_ns);
                self.thrash_pending_ns += report.thrash_ns.saturating_sub(thrash_before);
                m.report = Some(report);
                let sample = Sample {
                    held: report.held,
                    fixed: report.fixed,
                    footprint: report.resident + report.swapped,
                    refaults: report.refaults,
                    beside: report.beside,
                };
                self.policy.observe(m.id, sample);
            }
            _ => self.conns[i].closed = true, // not the protocol: hang up
        }
    }

    /// Whether the peer of connection `i`, saying hello as `pid`, may join (module essay).
    fn admit(&self, i: usize, pid: u32, token: &str, version: u32) -> Result<(), String> {
        if version != proto::VERSION {
            return Err(format!(
                "protocol version {version}, the broker speaks {}",
                proto::VERSION
            ));
        }
        if token != self.settings.token {
            return Err("another run's token".into());
        }
        let cred = rustix::net::sockopt::socket_peercred(&self.conns[i].stream)
            .map_err(|e| format!("no peer credentials: {e}"))?;
        let peer = cred.pid.as_raw_nonzero().get() as u32;
        if peer != pid {
            return Err(format!("says pid {pid}, is pid {peer}"));
        }
        if cred.uid.as_raw() != self.uid {
            return Err("another user's process".into());
        }
        if !procs::descends(pid, self.root) {
            return Err(format!("not a descendant of uswap run {}", self.root));
        }
        if !self.rows.contains(&false) {
            return Err("the run has as many members as it can hold".into());
        }
        Ok(())
    }

    fn welcome(&mut self, i: usize, pid: u32) {
        // A new image of a pid that was a member: the old one exec'd.
        for c in &mut self.conns {
            if c.member.as_ref().is_some_and(|m| m.pid == pid) {
                c.closed = true;
            }
        }
        let Some(row) = self.rows.iter().position(|used| !used) else { return };
        self.rows[row] = true;
        let id = self.next_id;
        self.next_id += 1;
        self.policy.join(id);
        self.conns[i].admit(id, pid, row as u32);
        let gone: Vec<MemberId> = self
            .conns
            .iter()
            .filter(|c| c.closed)
            .filter_map(|c| c.member.as_ref().map(|m| m.id))
            .collect();
        for old in gone {
            self.policy.leave(old);
        }
        // A process scanned before its shim joined was counted as unmanaged memory; a
        // member is not, and its first share must not be cut by its own memory (a tree's
        // only member gets the whole budget, which its shim takes as being alone).
        let counted = self.records.get_mut(&pid).map_or(0, |r| std::mem::take(&mut r.unmanaged));
        self.unmanaged_now = self.unmanaged_now.saturating_sub(counted);
        self.policy.rebalance(self.settings.budget_bytes, self.unmanaged_now);
        let share = self.policy.share(id).unwrap_or(0);
        self.conns[i].send(Message::Welcome { share, row: row as u32 });
        if let Some(m) = self.conns[i].member.as_mut() {
            m.sent = share;
        }
        let record = self.records.entry(pid).or_default();
        record.name = procs::name(pid);
        record.member = true;
        record.ever_member = true;
        record.alive = true;
        record.unmanaged_scans = 0;
        record.why = None;
        record.refused = None;
        *self.figures.entry("joins").or_insert(0) += 1;
        self.view_due = true;
        self.send_shares(true);
    }

    fn refuse(&mut self, i: usize, pid: u32, why: &str) {
        self.conns[i].send(Message::Refused { reason: why });
        self.conns[i].flush();
        self.conns[i].closed = true;
        *self.figures.entry("refused").or_insert(0) += 1;
        if procs::descends(pid, self.root) {
            self.records.entry(pid).or_default().refused = Some(why.to_string());
        }
    }

    /// A connection closed: a member's share returns, its row is given back.
    fn gone(&mut self, conn: Conn) {
        let Some(m) = conn.member else { return };
        self.policy.leave(m.id);
        self.rows[m.row as usize] = false;
        let row = self.quota.word(QUOTA_FIRST_ROW + m.row as usize).swap(0, SeqCst);
        let _ = self
            .quota
            .word(QUOTA_USED)
            .fetch_update(SeqCst, SeqCst, |u| Some(u.saturating_sub(row)));
        if !self.conns.iter().any(|c| c.member.as_ref().is_some_and(|n| n.pid == m.pid)) {
            if let Some(record) = self.records.get_mut(&m.pid) {
                record.member = false;
            }
        }
    }

    /// Sends each member its share if it changed enough to matter (`all`: any change). A
    /// share that becomes the whole budget is sent however little it moved: the shim of a
    /// member with the whole budget counts its whole resident set (the preload crate's
    /// `member::alone`), one a page short of it its anonymous memory only.
    fn send_shares(&mut self, all: bool) {
        let whole = self.settings.budget_bytes;
        for conn in &mut self.conns {
            let Some(m) = conn.member.as_mut() else { continue };
            let Some(share) = self.policy.share(m.id) else { continue };
            let step = (m.sent / 256).max(64 << 10);
            let matters = all || share.abs_diff(m.sent) >= step || share >= whole;
            if share != m.sent && matters {
                m.sent = share;
                conn.send(Message::Share(share));
            }
        }
    }

    /// One tick (module essay).
    fn tick(&mut self, last: bool) {
        self.ticks += 1;
        self.scan();
        self.forget();
        let stall_ns = std::mem::take(&mut self.stall_pending_ns);
        let thrash_ns = std::mem::take(&mut self.thrash_pending_ns);
        self.steer(stall_ns, thrash_ns);
        self.record(stall_ns, thrash_ns);
        let outcome = self.policy.rebalance(self.settings.budget_bytes, self.unmanaged_now);
        if outcome.overcommitted {
            *self.figures.entry("overcommitted_ticks").or_insert(0) += 1;
            let floors = self.figures.entry("floors_peak_bytes").or_insert(0);
            *floors = (*floors).max(outcome.floors);
        }
        self.send_shares(false);
        for conn in &mut self.conns {
            conn.flush();
        }
        let used = self.quota.word(QUOTA_USED).load(SeqCst);
        self.peak("swap_used_peak_bytes", used);
        self.figures.insert("swap_used_bytes", used);
        if last || self.view_due || self.ticks.is_multiple_of(VIEW_TICKS) {
            self.view_due = false;
            self.write_view();
        }
    }

    /// `--budget auto`: the controller sets the tree's budget from the members' fault
    /// stall (runstat's `auto`). A change of a tenth or more rewrites the tree file at once.
    fn steer(&mut self, stall_ns: u64, thrash_ns: u64) {
        let Some(auto) = self.auto.as_mut() else { return };
        let reports = || self.conns.iter().filter_map(|c| c.member.as_ref()?.report);
        let charged: u64 = reports().map(|r| r.charged).sum();
        let held: u64 = reports().map(|r| r.resident + r.swapped).sum();
        let floors = self.policy.outcome().floors;
        let tick = runstat::auto::Tick {
            now_ns: self.started.elapsed().as_nanos() as u64,
            stall_ns,
            thrash_ns,
            members: reports().count() as u32,
            used: charged + self.unmanaged_now,
            footprint: held + self.unmanaged_now,
            floor: floors + self.unmanaged_now,
        };
        let before = self.settings.budget_bytes;
        let budget = auto.tick(tick);
        self.settings.budget_bytes = budget;
        if budget.abs_diff(before) >= before / 10 {
            self.view_due = true;
        }
        let f = auto.figures;
        for (name, value) in [
            ("auto_target_ppm", (auto.target_percent() * 1e4) as u64),
            ("auto_raises", f.raises),
            ("auto_lowers", f.lowers),
            ("auto_loss_ppm", f.loss_ppm),
            ("auto_loss_peak_ppm", f.loss_peak_ppm),
            ("auto_loss_run_ppm", f.loss_run_ppm),
            ("budget_min_bytes", f.min_bytes),
            ("budget_max_bytes", f.max_bytes),
            ("budget_ceiling_bytes", auto.ceiling()),
        ] {
            self.figures.insert(name, value);
        }
        let now = self.figures.get("now_bytes").copied().unwrap_or(0);
        *self.figures.entry("resident_sum_ticks_mib").or_insert(0) += now >> 20;
        *self.figures.entry("budget_sum_ticks_mib").or_insert(0) += budget >> 20;
        self.figures.insert("budget_ticks", self.ticks);
    }

    /// `--plot`: one point of the budget, the tree's resident memory and the stall.
    fn record(&mut self, stall_ns: u64, thrash_ns: u64) {
        let Some(recording) = self.recording.as_mut() else { return };
        let members =
            self.conns.iter().filter(|c| c.member.as_ref().is_some_and(|m| m.report.is_some()));
        recording.push(Point {
            end_ns: self.started.elapsed().as_nanos() as u64,
            stall_ns,
            thrash_ns,
            members: members.count() as u32,
            budget_bytes: self.settings.budget_bytes,
            resident_bytes: self.figures.get("now_bytes").copied().unwrap_or(0),
            ..Point::default()
        });
    }

    fn peak(&mut self, name: &'static str, value: u64) {
        let slot = self.figures.entry(name).or_insert(0);
        *slot = (*slot).max(value);
    }

    /// Scans the tree: every process's memory, the tree's total and peak, what runs
    /// without an engine (charged to the budget, named once past its grace scans). A
    /// member counts its anonymous memory, as its engine's charge does; a process without
    /// an engine the anonymous memory only it maps (a forked child's copy-on-write pages
    /// are its parent's), and a vfork child nothing (it runs in its parent's memory until
    /// it execs). File-backed pages are page cache, charged once however many processes
    /// map them (as a memory cgroup charges them), and nowhere in a tree of several. A
    /// tree of one member (`uswap run PROGRAM` that starts nothing) counts its whole
    /// resident set, as its shim does while its share is the whole budget (the preload
    /// crate's `charged_memory`).
    ///
    /// A child forked without an exec joins as a member of its own from its fork handler
    /// (the preload crate's `member::rejoin_after_fork`). Until it has, or if it cannot,
    /// it is in the tree's total and named once past its grace scans, but not taken off
    /// the members' shares: its engine is a copy of its parent's, under the share it
    /// inherited, and its memory is mostly its parent's pages shared copy-on-write.
    fn scan(&mut self) {
        let found = procs::descendants(self.root, &self.settings.exclude);
        let members: BTreeSet<u32> =
            self.conns.iter().filter_map(|c| c.member.as_ref().map(|m| m.pid)).collect();
        let pids: BTreeSet<u32> = found.iter().map(|p| p.pid).collect();
        for record in self.records.values_mut() {
            record.alive = false;
        }
        let (mut total, mut unmanaged) = (0u64, 0u64);
        let alone = found.len() == 1;
        for p in &found {
            let member = members.contains(&p.pid);
            let charged = if member && alone {
                p.rss
            } else if member {
                procs::anon_bytes(p.pid).unwrap_or(p.rss).min(p.rss)
            } else if pids.contains(&p.ppid) && super::sys::same_mm(p.pid, p.ppid) {
                0 // a vfork child: its parent's memory until it execs
            } else {
                procs::private_anon_bytes(p.pid).unwrap_or(p.rss)
            };
            total += charged;
            let record = self.records.entry(p.pid).or_default();
            record.alive = true;
            record.ppid = p.ppid;
            record.rss = charged;
            record.peak = record.peak.max(charged);
            record.unmanaged = 0;
            if member {
                record.unmanaged_scans = 0;
                for m in self.conns.iter().filter_map(|c| c.member.as_ref()) {
                    if m.pid == p.pid {
                        self.policy.set_usage(m.id, charged);
                    }
                }
                continue;
            }
            record.unmanaged_scans += 1;
            if record.unmanaged_scans == GRACE_SCANS {
                record.forked = None;
            }
            let shim = &self.settings.shim;
            if !*record.forked.get_or_insert_with(|| procs::has_shim(p.pid, shim)) {
                record.unmanaged = charged;
                unmanaged += charged;
            }
            if record.unmanaged_scans == GRACE_SCANS && record.why.is_none() {
                let why = procs::why_unmanaged(
                    p.pid,
                    (p.ppid, record.ever_member),
                    &members,
                    (&self.settings.shim, &self.settings.dir.display().to_string()),
                    record.refused.as_deref(),
                );
                record.name = procs::name(p.pid);
                record.why = Some(why);
            }
            if record.why.is_some() {
                let peak = self.figures.entry("unmanaged_peak_bytes").or_insert(0);
                *peak = (*peak).max(charged);
            }
        }
        self.unmanaged_now = unmanaged;
        let footprint: u64 = total
            + self
                .conns
                .iter()
                .filter_map(|c| c.member.as_ref()?.report)
                .map(|r| r.swapped)
                .sum::<u64>();
        self.figures.insert("now_bytes", total);
        self.peak("peak_bytes", total);
        self.peak("footprint_peak_bytes", footprint);
        self.peak("members_peak", members.len() as u64);
    }

    /// Keeps at most [`RECORDS_MAX`] processes (the constant's comment).
    fn forget(&mut self) {
        if self.records.len() <= RECORDS_MAX {
            return;
        }
        let mut gone: Vec<(u64, u32)> = (self.records.iter())
            .filter(|(_, r)| !r.alive && r.why.is_none())
            .map(|(&pid, r)| (r.peak, pid))
            .collect();
        gone.sort_unstable();
        let excess = self.records.len() - RECORDS_MAX;
        let forgotten = gone.len().min(excess);
        for (_, pid) in gone.into_iter().take(forgotten) {
            self.records.remove(&pid);
        }
        *self.figures.entry("processes_forgotten").or_insert(0) += forgotten as u64;
    }

    /// The tree as the summary and `uswap stat` see it.
    fn view(&self) -> TreeView {
        let budget_source = match &self.auto {
            Some(auto) => {
                format!("{}; now {}", self.settings.budget_source, auto.reason().describe())
            }
            None => self.settings.budget_source.clone(),
        };
        let mut view = TreeView { budget_source, ..TreeView::default() };
        for (name, value) in &self.figures {
            view.set(name, *value);
        }
        view.set("broker", u64::from(self.root));
        view.set("budget_bytes", self.settings.budget_bytes);
        view.set("ticks", self.ticks);
        view.set("members", self.policy.len() as u64);
        for (&pid, r) in &self.records {
            let share = self
                .conns
                .iter()
                .filter_map(|c| c.member.as_ref())
                .filter(|m| m.pid == pid)
                .find_map(|m| self.policy.share(m.id))
                .unwrap_or(0);
            let state = match (r.alive, r.member) {
                (false, _) => ProcState::Exited,
                (true, true) => ProcState::Member,
                (true, false) => ProcState::Unmanaged,
            };
            let why = r.why.clone().unwrap_or_default();
            if why.is_empty() && !r.ever_member {
                continue; // seen between a fork and an exec, or as its shim started
            }
            let (rss_bytes, peak_bytes) = (r.rss, r.peak);
            view.procs.push(ProcView {
                pid,
                state,
                share_bytes: share,
                rss_bytes,
                peak_bytes,
                name: r.name.clone(),
                why,
            });
        }
        view
    }

    /// Writes the tree file (a temporary name, then a rename: readers see whole files).
    fn write_view(&self) {
        let dir = &self.settings.dir;
        let tmp = dir.join(format!(".{}", runstat::env::TREE_FILE));
        if std::fs::write(&tmp, self.view().to_text()).is_ok() {
            let _ = std::fs::rename(&tmp, dir.join(runstat::env::TREE_FILE));
        }
    }
}
