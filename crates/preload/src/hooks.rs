//! The shim's [`Hooks`]: what it does on the handler thread.
//!
//! - `fault`: the latency histogram (lock-free) and the trace;
//! - `event`: the trace;
//! - `paged_out` (the engine's page-out hook, set only when recording): an Evict record
//!   per folio paged out, on the reclaiming thread (the engine's reclaimer, or the handler
//!   in direct reclaim);
//! - `work`: discovery (a scan of /proc/self/maps every [`SCAN_PERIOD`], or when the
//!   interposed mmap asked: at most one per [`SCAN_GAP`], but at once while a program
//!   thread waits in mmap for its range's adoption) and the live stats file.
//!
//! Adopting a range, in this order, all on the handler thread: `MADV_NOHUGEPAGE` (the
//! engine's folios are its own), register it with the uffd for missing faults (and
//! write-protect faults when zero pages are protected), list its present pages
//! (PAGEMAP_SCAN), `add_region_populated`. Zero pages among them (the program read the
//! range before it was registered) are write-protected, listed again, and adopted
//! uncharged (`Engine::adopt_zero_mapped`). Registering first means a page the program
//! drops after the listing sends a REMOVE, read after the region exists; a fault in the
//! range waits for this thread, so none is served before the engine knows the range. A
//! range that cannot be registered (unmapped meanwhile, or a mapping the kernel refuses)
//! is skipped and counted.
//!
//! Context: everything here runs on the engine's threads (the handler, and the reclaimer
//! for `paged_out`; `finish` on the exiting thread once): no glibc allocation (module essay
//! of the crate), no lock a faulting program thread could hold. The trace's lock is taken
//! by engine threads only, for one 32-byte copy (a write(2) of 64 KiB every 2048 records).
//!
//! Trace threads: a fault is recorded with the faulting thread's number; events and
//! page-outs are the engine's doing, recorded as thread id 0 (one recording thread for
//! all of them, in the order they happened).

use crate::interpose::{self, SCAN_REQUESTED};
use crate::maps::{self, Candidate, Exclusions};
use crate::SCAN_PERIOD;
use engine::hooks::PageOutHook;
use engine::region::MmId;
use engine::{Engine, Tier};
use frontend::handler::Control;
use frontend::{FaultReport, Noted};
use runstat::trace::{Record, RecordKind, TraceWriter};
use runstat::{AtomicHistogram, RunConfig, StatsFile};
use std::io::BufWriter;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uffd::{Categories, PageMap, PageRegion, Range, RegisterMode, ScanArgs, Uffd, Wake};

/// The least time between two scans (a burst of mmaps asks for many).
pub const SCAN_GAP: Duration = Duration::from_millis(2);
const PAGE: usize = 4096;

/// What the hooks need once the engine runs.
#[derive(Debug)]
pub struct Started {
    /// The managed uffd.
    pub uffd: Arc<Uffd>,
    /// The mode ranges are registered with (write-protect too if zero pages are protected).
    pub register_mode: RegisterMode,
    /// The handler's control block (its counters).
    pub control: Arc<Control>,
    /// The page source (its counters).
    pub source: Arc<frontend::UffdSource>,
    /// Never managed.
    pub exclusions: Exclusions,
    /// This process's pagemap.
    pub pagemap: PageMap,
    /// The process that runs the engine.
    pub pid: i32,
}

/// The pages a range being adopted holds ([`list_present`]): runs `(first page from the
/// range's start, pages)`.
#[derive(Debug)]
struct PageLists {
    /// Present pages, adopted as resident.
    present: Vec<(u64, u64)>,
    /// Zero pages, adopted write-protected and uncharged.
    zero: Vec<(u64, u64)>,
}

/// Buffers and clocks of the scans (handler thread only).
#[derive(Debug)]
struct Scanner {
    text: Vec<u8>,
    candidates: Vec<Candidate>,
    pieces: Vec<(usize, usize)>,
    gaps: Vec<(usize, usize)>,
    regions: Vec<(usize, usize)>,
    /// The regions' holes: a mapping there is adopted apart from one beside them.
    holes: Vec<(usize, usize)>,
    cut: Vec<(usize, usize)>,
    found: Vec<PageRegion>,
    lists: PageLists,
    last_scan: Option<Instant>,
    /// The program break the last scan saw, or the lowest seen since.
    heap_break: usize,
    last_stats: Option<Instant>,
    /// The budget reserve for the next burst ([`Burst`]).
    burst: Burst,
}

/// The largest burst of memory the scans found already resident, decaying: pages the
/// program touched between a mapping's appearance and its registration (glibc grows the
/// heap with brk, which no interposer sees, 32 MiB at a time), plus growth of the outside
/// charge. The engine keeps that much budget free ([`Engine::set_reserve`]), so the next
/// burst lands inside the budget instead of past it. It halves every [`BURST_HALF_LIFE`]
/// without a new burst, so a program that stops growing gets its budget back.
#[derive(Debug, Default)]
struct Burst {
    bytes: f64,
    at: Option<Instant>,
}

/// How fast a burst reserve is forgotten.
const BURST_HALF_LIFE: Duration = Duration::from_secs(1);

impl Burst {
    /// Notes a burst of `bytes` found at `now`; returns the reserve to keep.
    fn note(&mut self, bytes: u64, now: Instant) -> u64 {
        let decayed = match self.at {
            Some(at) => {
                let halves = (now - at).as_secs_f64() / BURST_HALF_LIFE.as_secs_f64();
                self.bytes * 0.5f64.powf(halves)
            }
            None => 0.0,
        };
        self.bytes = decayed.max(bytes as f64);
        self.at = Some(now);
        self.bytes as u64
    }
}

/// The trace being written.
#[derive(Debug)]
struct Trace {
    writer: TraceWriter<BufWriter<TraceFile>>,
    /// The trace's start on the monotonic clock (`uswap run`'s, for every image).
    t0_ns: u64,
    /// Thread ids seen, by recording number (bounded: later threads share the last).
    threads: Vec<u32>,
    /// The final stats are written: the process is exiting, and nothing will flush the
    /// buffer again, so each record from now on (page-outs still in flight) is flushed as
    /// it is written.
    closing: bool,
}

counters::table! {
    /// Counters of the shim itself, by their names in the stats file (zeroed in a forked
    /// child, which counts its own: [`ShimHooks::restart_in_child`]).
    struct Counters;
    /// A snapshot of them.
    #[derive(Debug, Clone, Copy, Default)]
    #[allow(dead_code)]
    struct CountersSnapshot {
        counters {
            shim_scans,
            shim_scan_ns,
            shim_regions_added,
            shim_pages_adopted,
            /// Zero pages found mapped at adoption, protected and adopted uncharged.
            shim_zero_pages_adopted,
            /// Write protections of those that failed (the pages are then adopted as present).
            shim_protect_failed,
            shim_register_failed,
            shim_trace_errors,
            /// Time the program's threads waited on faults, summed.
            fault_stall_ns,
            /// Of that, on thrashing faults (frontend's `FaultReport::thrashing`).
            fault_thrash_ns,
        }
    }
}

/// The compressed pool at its largest: its bytes and the pages it held then (the summary's
/// compression ratio; at the end the pool is often empty). Gauges, not counters.
#[derive(Debug, Default)]
struct PoolPeak {
    bytes: AtomicU64,
    stored_pages: AtomicU64,
}

/// The shim's hooks (module essay).
#[derive(Debug)]
pub struct ShimHooks {
    config: RunConfig,
    /// Set once the engine runs; replaced in a forked child, whose uffd, source and pid
    /// are its own ([`ShimHooks::forked`]).
    started: Mutex<Option<Arc<Started>>>,
    scanner: Mutex<Scanner>,
    fault_ns: AtomicHistogram,
    trace: Option<Mutex<Trace>>,
    /// Cleared in a forked child: the trace is the parent's image's (its buffered
    /// records are copies of the parent's, which the parent writes).
    tracing: std::sync::atomic::AtomicBool,
    counters: Counters,
    pool_peak: PoolPeak,
    t0: Instant,
    /// The live and final stats files.
    stats_files: crate::files::StatsFiles,
    /// `uswap run`'s idle pollers' page (told of every fault), if they run.
    idle: Option<frontend::idle::IdlePage>,
}

const THREADS_MAX: usize = 4096;

impl ShimHooks {
    /// Hooks for `config`; opens the trace file if one is asked for.
    ///
    /// # Errors
    /// A message if the trace file cannot be created.
    pub fn new(config: RunConfig) -> Result<ShimHooks, String> {
        let trace = match (&config.record, &config.record_file) {
            (Some(path), Some(file)) => Some(Mutex::new(open_trace(path, file)?)),
            _ => None,
        };
        let idle = (config.idle_page.as_deref())
            .map(|path| {
                frontend::idle::IdlePage::open(std::path::Path::new(path))
                    .map_err(|e| format!("cannot map the idle pollers' page {path}: {e}"))
            })
            .transpose()?;
        let scanner = Scanner {
            text: Vec::with_capacity(1 << 20),
            candidates: Vec::with_capacity(4096),
            pieces: Vec::with_capacity(64),
            gaps: Vec::with_capacity(64),
            regions: Vec::with_capacity(4096),
            holes: Vec::with_capacity(64),
            cut: Vec::with_capacity(64),
            found: Vec::with_capacity(uffd::pagemap::SCAN_BATCH),
            lists: PageLists { present: Vec::with_capacity(1024), zero: Vec::with_capacity(1024) },
            last_scan: None,
            heap_break: usize::MAX,
            last_stats: None,
            burst: Burst::default(),
        };
        Ok(ShimHooks {
            config,
            started: Mutex::new(None),
            scanner: Mutex::new(scanner),
            fault_ns: AtomicHistogram::new(),
            tracing: std::sync::atomic::AtomicBool::new(trace.is_some()),
            trace,
            counters: Counters::new(),
            pool_peak: PoolPeak::default(),
            t0: Instant::now(),
            stats_files: crate::files::StatsFiles::default(),
            idle,
        })
    }

    /// Whether a trace is being written (`--record`).
    pub fn recording(&self) -> bool {
        self.trace.is_some()
    }

    /// The engine runs: discovery may begin.
    pub fn start(&self, started: Started) {
        *lock(&self.started) = Some(Arc::new(started));
    }

    fn started(&self) -> Option<Arc<Started>> {
        lock(&self.started).clone()
    }

    fn record(&self, kind: RecordKind, thread_id: u32, addr: usize, len: usize) {
        self.record_with(thread_id, |time_ns, thread| {
            [Record { time_ns, kind, thread, addr: addr as u64, len: len as u64 }]
        });
    }

    /// Writes the records `make(time_ns, thread)` returns, together, under the trace's
    /// lock (a remap's two records must not be split by another thread's).
    fn record_with<const N: usize>(
        &self,
        thread_id: u32,
        make: impl FnOnce(u64, u32) -> [Record; N],
    ) {
        let Some(trace) = &self.trace else { return };
        if !self.tracing.load(Relaxed) {
            return;
        }
        let mut trace = lock(trace);
        let thread = match trace.threads.iter().position(|&t| t == thread_id) {
            Some(i) => i,
            None if trace.threads.len() < THREADS_MAX => {
                trace.threads.push(thread_id);
                trace.threads.len() - 1
            }
            None => THREADS_MAX - 1,
        };
        let time_ns = uffd::sys::process::monotonic_ns().saturating_sub(trace.t0_ns);
        let mut written = trace.writer.record_all(&make(time_ns, thread as u32));
        if trace.closing {
            written = written.and_then(|()| trace.writer.flush());
        }
        if written.is_err() {
            self.counters.shim_trace_errors.fetch_add(1, Relaxed);
        }
    }

    /// One scan: every managed candidate not yet a region is adopted.
    fn scan(&self, started: &Started, engine: &Engine, sc: &mut Scanner) {
        let t = Instant::now();
        if maps::read(&mut sc.text).is_err() {
            return;
        }
        let Scanner { text, candidates, pieces, gaps, regions, holes, cut, found, lists, .. } = sc;
        maps::candidates(text, candidates, true);
        let (live, unmapped) = engine.region_layout(MmId::DEFAULT);
        maps::set_from(regions, &live);
        maps::set_from(holes, &unmapped);
        for c in candidates.iter() {
            pieces.clear();
            started.exclusions.subtract(c.start, c.end, pieces);
            for &(start, end) in pieces.iter() {
                gaps.clear();
                maps::subtract(regions, start, end, gaps);
                for &(s, e) in gaps.iter() {
                    // A piece in a hole fills it; one beside is a region of its own.
                    cut.clear();
                    maps::cut_at(holes, s, e, cut);
                    for &(s, e) in cut.iter() {
                        if self.adopt(started, engine, s, e, found, lists) {
                            // Managed from now: a later line of this read that overlaps
                            // it (maps read in chunks while the program maps and unmaps
                            // can list a changed mapping twice) finds it so.
                            maps::insert(regions, (s, e));
                        }
                    }
                }
            }
        }
        self.counters.shim_scans.fetch_add(1, Relaxed);
        self.counters.shim_scan_ns.fetch_add(t.elapsed().as_nanos() as u64, Relaxed);
    }

    /// Adopts `[start, end)` (module essay); whether it is managed now.
    fn adopt(
        &self,
        started: &Started,
        engine: &Engine,
        start: usize,
        end: usize,
        found: &mut Vec<PageRegion>,
        lists: &mut PageLists,
    ) -> bool {
        let Ok(range) = Range::new(start, end - start) else { return false };
        crate::shim::no_huge_pages(start, end - start);
        if started.uffd.register(range, started.register_mode).is_err() {
            self.counters.shim_register_failed.fetch_add(1, Relaxed);
            return false;
        }
        let protect = started.register_mode.contains(RegisterMode::WP);
        list_present(started, start, end, protect, found, lists);
        // Zero pages the program read before the range was registered: protected, they
        // cost nothing until written. Listed again once protected: one written meanwhile
        // holds data and is adopted as present; a missing fault here waits for this thread,
        // so no new zero page appears between the listings.
        // If a protection fails, every zero page is adopted as present, charged.
        if !lists.zero.is_empty() {
            let mut protected = true;
            for &(first, n) in lists.zero.iter() {
                let at = start + first as usize * PAGE;
                let zero = Range::new(at, n as usize * PAGE);
                if zero.and_then(|zero| started.uffd.writeprotect(zero, true, Wake::Wake)).is_err()
                {
                    self.counters.shim_protect_failed.fetch_add(1, Relaxed);
                    protected = false;
                }
            }
            list_present(started, start, end, protected, found, lists);
        }
        let PageLists { present, zero } = lists;
        let pages: u64 = present.iter().map(|r| r.1).sum();
        let (start, len) = (start as u64, (end - start) as u64);
        match engine.add_region_populated(start, len, present) {
            Ok(_) => {
                self.counters.shim_regions_added.fetch_add(1, Relaxed);
                self.counters.shim_pages_adopted.fetch_add(pages, Relaxed);
                if !zero.is_empty() {
                    if let Ok(n) = engine.adopt_zero_mapped(start, len, zero) {
                        self.counters.shim_zero_pages_adopted.fetch_add(n, Relaxed);
                    }
                }
                true
            }
            Err(_) => {
                // Unregistered again, except where the engine manages it already (a range
                // this scan saw as a gap, adopted meanwhile): unregistered, a page the
                // engine pages out there would read back as zero, never faulting.
                let mut live = Vec::new();
                maps::set_from(&mut live, &engine.region_ranges(MmId::DEFAULT));
                let mut unmanaged = Vec::new();
                maps::subtract(&live, start as usize, (start + len) as usize, &mut unmanaged);
                for (s, e) in unmanaged {
                    if let Ok(range) = Range::new(s, e - s) {
                        let _ = started.uffd.unregister(range);
                    }
                }
                self.counters.shim_register_failed.fetch_add(1, Relaxed);
                false
            }
        }
    }

    /// This process's report to the broker (runstat's `proto::Report`), and the pool's
    /// peak noted.
    ///
    /// Context: the handler thread; reads /proc/self/status, and the engine's figures that
    /// take no lock (`Engine::polled`).
    fn report(&self, engine: &Engine) -> runstat::proto::Report {
        let polled = engine.polled();
        let (c, g) = (&polled.counters, &polled);
        if g.pool_bytes > self.pool_peak.bytes.load(Relaxed) {
            self.pool_peak.bytes.store(g.pool_bytes, Relaxed);
            self.pool_peak.stored_pages.store(g.pool_stored_pages, Relaxed);
        }
        let mem = mem_status().unwrap_or_default();
        let charged = engine.charged_bytes();
        let held = charged.saturating_sub(engine.outside_charge());
        runstat::proto::Report {
            budget: engine.budget_bytes(),
            charged,
            held,
            resident: g.resident_pages * PAGE as u64,
            rss: mem.rss_bytes,
            // Measured as the outside charge is (`charge_the_rest`).
            fixed: charged_memory(&mem).saturating_sub(held + engine.beside_bytes()),
            swapped: g.swap_inuse_pages * PAGE as u64,
            refaults: c.workingset_refault_anon,
            stall_ns: self.counters.fault_stall_ns.load(Relaxed),
            thrash_ns: self.counters.fault_thrash_ns.load(Relaxed),
            faults: self.fault_ns.snapshot().total(),
            out_zero: c.swpout_zero,
            out_pool: c.zswpout,
            out_file: c.pswpout,
            in_zero: c.swpin_zero,
            in_pool: c.zswpin,
            in_file: c.pswpin,
            beside: engine.beside_bytes(),
        }
    }

    /// The stats file's contents now.
    pub fn stats(&self, engine: &Engine, final_: bool) -> StatsFile {
        let mut file = StatsFile::default();
        for line in engine.stats().to_vmstat().lines() {
            if let Some((name, value)) = line.split_once(' ') {
                if let Ok(value) = value.parse() {
                    file.set(name, value);
                }
            }
        }
        engine.backend_counters(&mut |name, value| file.set(name, value));
        if let Some(started) = self.started() {
            for (name, value) in started.control.stats().fields() {
                file.set(&format!("handler_{name}"), value);
            }
            for (name, value) in started.source.stats().fields() {
                file.set(&format!("source_{name}"), value);
            }
            file.set("pid", started.pid as u64);
        }
        if let Some(mem) = mem_status() {
            file.set("vm_rss_bytes", mem.rss_bytes);
            file.set("vm_hwm_bytes", mem.hwm_bytes);
        }
        let mut set = |name: &str, value| file.set(name, value);
        self.counters.each(&mut set);
        interpose::WAITS.each(&mut set);
        crate::io::EFAULT.each(&mut set);
        crate::member::counters(&mut set);
        fds::stats().each(&mut set);
        set("pool_peak_bytes", self.pool_peak.bytes.load(Relaxed));
        set("pool_peak_stored_pages", self.pool_peak.stored_pages.load(Relaxed));
        set("engine_cpu_ns", crate::files::engine_cpu_ns());
        set("shim_files_shared", crate::files::SHARED.load(Relaxed));
        let arena = crate::ARENA.stats();
        file.set("arena_bumped_bytes", arena.bumped_bytes as u64);
        file.set("arena_free_bytes", arena.free_bytes as u64);
        file.set("final", u64::from(final_));
        file.set("uptime_ms", self.t0.elapsed().as_millis() as u64);
        file.fault_ns = self.fault_ns.snapshot();
        file
    }

    /// Writes the live stats file (or the final one) and flushes the trace.
    pub fn write_stats(&self, engine: &Engine, final_: bool) {
        let Some(started) = self.started() else { return };
        let dir = std::path::Path::new(&self.config.run_dir);
        self.stats_files.write(dir, started.pid, final_, || self.stats(engine, final_).to_text());
        if let (Some(trace), true) = (&self.trace, self.tracing.load(Relaxed)) {
            let mut trace = lock(trace);
            trace.closing |= final_;
            let _ = trace.writer.flush();
        }
    }

    /// At exit: the final stats file.
    pub fn finish(&self, engine: &Engine) {
        self.write_stats(engine, true);
    }
}

impl PageOutHook for ShimHooks {
    fn paged_out(&self, mm: MmId, addr: u64, len: u64, _tier: Tier) {
        if mm == MmId::DEFAULT {
            self.record(RecordKind::Evict, 0, addr as usize, len as usize);
        }
    }
}

impl ShimHooks {
    /// In a forked child, on its only thread, once its swap runs on its own uffd
    /// (`started` names the child's uffd, source and pid): discovery goes on from the
    /// parent's exclusions, the counters count the child's own, and the trace, which is
    /// the parent's image's, records nothing more here.
    pub fn restart_in_child(&self, started: Started) {
        // The child's own /proc/self/status, opened while no program code runs beside
        // (`fds::OwnProcFile::open_here`).
        STATUS_FILE.open_here();
        self.tracing.store(false, Relaxed);
        self.fault_ns.reset();
        self.counters.reset();
        lock(&self.scanner).last_stats = None;
        *lock(&self.started) = Some(Arc::new(started));
    }

    /// The exclusions discovery keeps (a forked child starts from its parent's).
    pub fn exclusions(&self) -> Option<Exclusions> {
        self.started().map(|started| started.exclusions.clone())
    }
}

impl frontend::Hooks for ShimHooks {
    fn forked(&self, engine: &Engine, child: bool) {
        if child {
            // First, while the child's reclaim is still paused (the hook's contract): the
            // child joins the run's budget as a member of its own, so that its engine's
            // first write to its own swap file is reserved on its own row. A child that
            // cannot join goes on under its inherited share (`member_broker_lost`).
            let _ = crate::member::rejoin_after_fork(engine);
            crate::shim::forked_child();
        } else {
            self.record(RecordKind::Fork, 0, 0, 0);
        }
    }

    fn fault(&self, fault: &FaultReport) {
        if let Some(idle) = &self.idle {
            idle.note_faults();
        }
        self.fault_ns.record(fault.wait_ns);
        self.counters.fault_stall_ns.fetch_add(fault.wait_ns, Relaxed);
        if fault.thrashing {
            self.counters.fault_thrash_ns.fetch_add(fault.wait_ns, Relaxed);
        }
        let kind = if fault.write { RecordKind::FaultWrite } else { RecordKind::FaultRead };
        self.record(kind, fault.thread_id, fault.addr & !(PAGE - 1), PAGE);
    }

    fn event(&self, _mm: MmId, event: Noted) {
        match event {
            Noted::Remove { start, end } => self.record(RecordKind::Remove, 0, start, end - start),
            Noted::Unmap { start, end } => self.record(RecordKind::Unmap, 0, start, end - start),
            Noted::Remap { from, to, len_bytes } => self.record_with(0, |time_ns, thread| {
                let (from, to, len) = (from as u64, to as u64, len_bytes as u64);
                runstat::trace::remap_records(time_ns, thread, from, to, len)
            }),
        }
    }

    fn work(&self, engine: &Engine) -> Option<Duration> {
        let started = self.started()?;
        let mut sc = lock(&self.scanner);
        let now = Instant::now();
        let since_scan = sc.last_scan.map_or(Duration::MAX, |t| now - t);
        let asked = SCAN_REQUESTED.load(SeqCst);
        let mut wait = SCAN_PERIOD.saturating_sub(since_scan);
        // No gap while a program thread waits in mmap for this scan, nor once the heap grew:
        // glibc's sbrk, which no interposer sees, made a range the program is filling
        // unmanaged (the heap's growth is the one the break shows; malloc's internal mmaps
        // wait for the period).
        let brk = crate::shim::program_break();
        sc.heap_break = sc.heap_break.min(brk);
        let at_once = interpose::adoption_waits() || brk > sc.heap_break;
        if at_once || ((asked || since_scan >= SCAN_PERIOD) && since_scan >= SCAN_GAP) {
            SCAN_REQUESTED.store(false, SeqCst);
            sc.heap_break = brk;
            let ticket = interpose::scan_starts();
            let adopted = self.counters.shim_pages_adopted.load(Relaxed);
            self.scan(&started, engine, &mut sc);
            interpose::scan_covers(ticket);
            // Saturating: a forked child zeroes its counters while its handler may be here.
            let adopted = self.counters.shim_pages_adopted.load(Relaxed).saturating_sub(adopted);
            // The outside charge at most once per gap (reading /proc costs as much as
            // the rest of a scan for a new mapping).
            let grown = if since_scan >= SCAN_GAP { charge_the_rest(engine) } else { 0 };
            let now = Instant::now();
            sc.last_scan = Some(now);
            engine.set_reserve(sc.burst.note(adopted * PAGE as u64 + grown, now));
            wait = SCAN_PERIOD;
        } else if asked {
            wait = SCAN_GAP.saturating_sub(since_scan);
        }
        // The trace's buffer goes out every pass: an exec discards the image, buffer and
        // all, so what it recorded is on disk by the next pass at the latest.
        if let Some(trace) = &self.trace {
            if lock(trace).writer.flush().is_err() {
                self.counters.shim_trace_errors.fetch_add(1, Relaxed);
            }
        }
        let interval = Duration::from_millis(self.config.stats_interval_ms.max(10));
        let stats_due = sc.last_stats.is_none_or(|t| now - t >= interval);
        if stats_due {
            sc.last_stats = Some(now);
        }
        drop(sc);
        if stats_due {
            self.write_stats(engine, false);
        }
        let now_ns = self.t0.elapsed().as_nanos() as u64;
        crate::member::tick(engine, now_ns, || self.report(engine));
        Some(wait.max(Duration::from_millis(1)))
    }
}

/// Lists the present pages of `[start, end)` as runs `(first page from start, pages)`:
/// into `lists.zero` the zero-page ones if `zero` (PAGEMAP_SCAN's `PFNZERO`), the rest into
/// `lists.present`. A scan that fails ends the listing there (the pages after it are adopted
/// when the program faults them, or by a later scan).
fn list_present(
    started: &Started,
    start: usize,
    end: usize,
    zero: bool,
    found: &mut Vec<PageRegion>,
    lists: &mut PageLists,
) {
    lists.present.clear();
    lists.zero.clear();
    let report = if zero { Categories::PRESENT | Categories::PFNZERO } else { Categories::PRESENT };
    let args = ScanArgs { anyof: Categories::PRESENT, report, ..ScanArgs::default() };
    let mut at = start;
    while at < end {
        found.clear();
        let Ok(walk) = Range::new(at, end - at) else { break };
        let Ok(result) = started.pagemap.scan(walk, &args, found) else { break };
        for r in found.iter() {
            let run = (((r.start - start) / PAGE) as u64, ((r.end - r.start) / PAGE) as u64);
            if r.categories.contains(Categories::PFNZERO) {
                lists.zero.push(run);
            } else {
                lists.present.push(run);
            }
        }
        if result.walk_end <= at {
            break;
        }
        at = result.walk_end;
    }
}

/// Counts the part of the process's memory that is not the engine's charge against the
/// budget (`Engine::set_outside_charge`): the interpreter's and libraries' heaps and data,
/// the engine's own metadata, what the scan has not adopted yet. The budget then bounds
/// the process's own memory, not only the managed pages. The arithmetic is
/// `Engine::charge_outside_from_rss`'s, which leaves a pool beside the budget out.
///
/// Returns how much the outside charge grew.
///
/// Context: the handler thread; reads /proc/self/status (allocates from the shim's arena).
pub fn charge_the_rest(engine: &Engine) -> u64 {
    let Some(mem) = mem_status() else { return 0 };
    engine.charge_outside_from_rss(charged_memory(&mem))
}

/// The process's memory its budget counts. A member of a tree of several: its anonymous and
/// shared memory (`RssAnon + RssShmem`, `MemStatus::anon_bytes`). The rest of VmRSS is
/// file-backed, page cache that the kernel charges once however many processes map it
/// (libc in every process of a tree, a compiler's text in each of its instances) and drops
/// under pressure without swap: counted in each process, a tree's file pages were counted
/// as often as it has processes. The tree's only member (its share is the whole budget):
/// its whole resident set, as a single program's, where nothing is counted twice.
fn charged_memory(mem: &uffd::MemStatus) -> u64 {
    if crate::member::alone() {
        mem.rss_bytes
    } else {
        mem.anon_bytes()
    }
}

/// The registry's names for the shim's files (crate `fds`).
static STATUS: fds::Kind = fds::Kind {
    what: "/proc/self/status descriptor",
    if_lost: "the budget no longer counts memory outside the managed set",
    keep: false,
};
/// /proc/self/status, kept open out of the program's way.
static STATUS_FILE: fds::OwnProcFile = fds::OwnProcFile::new(c"/proc/self/status", &STATUS);
static TRACE: fds::Kind =
    fds::Kind { what: "trace file", if_lost: "the trace (--record) ends there", keep: false };

/// The process's memory counters, from /proc/self/status kept open out of the program's
/// way (crate `fds`) and read from offset 0.
///
/// Context: the handler thread, or the exiting thread; allocates from the shim's arena.
fn mem_status() -> Option<uffd::MemStatus> {
    let mut text = Vec::with_capacity(4096);
    STATUS_FILE.read(&mut text).ok()?;
    Some(uffd::MemStatus::parse(&String::from_utf8_lossy(&text)))
}

/// Opens the trace `uswap run` made at `path` (docs/RUN.md, "Stats and traces"): by name,
/// appending, never created nor followed through a link, and only if it is the file
/// `uswap run` made (`file`: runstat's `RECORD_FILE`, `DEV:INO:T0`); this image's records go
/// after every earlier image's.
fn open_trace(path: &str, file: &str) -> Result<Trace, String> {
    let mut fields = file.split(':').map(str::parse::<u64>);
    let (Some(Ok(dev)), Some(Ok(ino)), Some(Ok(t0_ns))) =
        (fields.next(), fields.next(), fields.next())
    else {
        return Err(format!("the run's record_file: {file:?} is not DEV:INO:T0"));
    };
    let name = std::ffi::CString::new(path).map_err(|e| format!("--record {path}: {e}"))?;
    let flags = libc::O_WRONLY | libc::O_APPEND | libc::O_NOFOLLOW;
    let fd = fds::Fd::open(&name, flags, 0, &TRACE).map_err(|e| format!("--record: {e}"))?;
    if (fd.identity().dev, fd.identity().ino) != (dev, ino) {
        return Err(format!("--record {path}: not the trace uswap run made (replaced meanwhile)"));
    }
    let writer = TraceWriter::appending(BufWriter::with_capacity(1 << 16, TraceFile(fd)));
    Ok(Trace { writer, t0_ns, threads: Vec::with_capacity(64), closing: false })
}

/// The trace's descriptor, placed out of the program's way; every write checked.
#[derive(Debug)]
struct TraceFile(fds::Fd);

impl std::io::Write for TraceFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(buf).map(|()| buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_reserve_keeps_the_largest_and_halves_each_half_life() {
        let mut burst = Burst::default();
        let t0 = Instant::now();
        assert_eq!(burst.note(0, t0), 0);
        assert_eq!(burst.note(8 << 20, t0), 8 << 20);
        assert_eq!(burst.note(1 << 20, t0), 8 << 20, "a smaller burst keeps the larger");
        let later = burst.note(0, t0 + BURST_HALF_LIFE);
        assert!((later as i64 - (4 << 20)).abs() < 4096, "halved after one half-life: {later}");
        assert_eq!(burst.note(6 << 20, t0 + BURST_HALF_LIFE), 6 << 20, "a larger one wins");
        assert!(burst.note(0, t0 + 20 * BURST_HALF_LIFE) < 16, "forgotten");
    }
}
