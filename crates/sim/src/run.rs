//! One run: set up the world and the engine from the options, run the simulated threads
//! under the baton scheduler, read everything back, check the engine, report.
//!
//! ```text
//!   options ─► World (faults, latency) ─► SimBackend ─► Engine ◄─ SimSource (+ Model)
//!                                                         ▲
//!   threads: program 0..n-1 (Generator ─► Ctx::execute)  │   reclaimer (engine.reclaim)
//!            all under one Sched; thread 0 then reads back every page and checks the
//!            engine's invariants with everyone else done
//! ```
//!
//! **Thread identity.** The slot allocator keeps a cluster hint per thread *stripe*, and a
//! thread's stripe comes from a process-wide counter at its first allocation (slots'
//! alloc.rs). Two simulated threads sharing a stripe would share hints, and whether they
//! do would depend on what else ran in the process before: not replayable. So each
//! simulated thread first *probes* its stripe: one allocation on a private legacy-policy
//! device, where a thread with a stripe of its own takes a fresh cluster and a thread
//! sharing one continues in its stripe-mate's cluster. A thread that shares is retired and
//! another is spawned, until every simulated thread has a stripe of its own. Which stripe
//! each has does not matter: all stripes of a new device start empty.

use crate::backend::SimBackend;
use crate::buggify::Site;
use crate::failure::{panic_message, Failure, FailureKind};
use crate::model::Model;
use crate::ops::{replay_queues, Generator, Kbuild, Op, HEAP_BASE};
use crate::options::{SimOptions, WorkloadKind};
use crate::report::{ReplayCounts, RunReport};
use crate::rng::{Digest, SimRng};
use crate::sched::{self, Aborted, Limits, Sched, Yield};
use crate::source::SimSource;
use crate::trace::{Header, Record, RecordKind, TraceWriter};
use crate::world::World;
use engine::config::ZswapSettings;
use engine::region::MmId;
use engine::{BackendConfig, Engine, EngineConfig, SwapConfig, PAGE_SIZE};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

const PAGE: u64 = PAGE_SIZE as u64;

/// A forked child: its address space and memory, and the thread that forked it.
#[derive(Debug, Clone)]
pub(crate) struct Child {
    pub(crate) owner: usize,
    pub(crate) mm: MmId,
    pub(crate) source: Arc<SimSource>,
}

/// Where a run writes the trace of what it did (`--write-trace`).
pub type TraceOut = TraceWriter<std::io::BufWriter<std::fs::File>>;

/// Everything the simulated threads of one run share.
///
/// Locks (all leaves, never held across a yield or an engine call, except the model lock
/// inside the page source's lock during a write): `model`, `digest`, `children`,
/// `check_rng`, `trace`.
pub(crate) struct Ctx {
    pub(crate) opts: SimOptions,
    pub(crate) engine: Engine,
    pub(crate) source: Arc<SimSource>,
    pub(crate) world: Arc<World>,
    pub(crate) sched: Arc<Sched>,
    pub(crate) model: Mutex<Model>,
    pub(crate) children: Mutex<Vec<Child>>,
    kbuild: Option<Arc<Mutex<Kbuild>>>,
    digest: Mutex<Digest>,
    check_rng: Mutex<SimRng>,
    trace: Option<Mutex<TraceOut>>,
    /// Program threads still running operations.
    programs_left: AtomicUsize,
    /// Threads (program and reclaimer) finished.
    threads_done: AtomicUsize,
    ops_done: AtomicU64,
    checks_done: AtomicU64,
    /// Page-out operations run (a replay's Evict records, or the mix's MADV_PAGEOUTs).
    pub(crate) pageouts: AtomicU64,
    /// Pages they paged out.
    pub(crate) pageout_pages: AtomicU64,
    /// Ranges moved (mremap).
    pub(crate) remaps: AtomicU64,
    /// A replayed trace's records by kind (code order), counted at set-up.
    replay_records: Option<[u64; RecordKind::ALL.len()]>,
    /// Swap device fill samples after the warm-up: (samples, sum of percent, max percent).
    fill: Mutex<(u64, u64, u64)>,
}

thread_local! {
    /// The operation this simulated thread is executing, for failure reports.
    static CURRENT_OP: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// Runs one simulation; never panics on an engine bug (the report says what failed).
///
/// `trace` receives every program operation, if given.
pub fn run(opts: &SimOptions, trace: Option<TraceOut>) -> RunReport {
    let started = Instant::now();
    let (ctx, generators) = match setup(opts, trace) {
        Ok(setup) => setup,
        Err(error) => return RunReport::setup_failed(opts, error, started.elapsed()),
    };
    let failure = match spawn_threads(&ctx, generators) {
        Ok(handles) => {
            ctx.sched.start();
            let failure = ctx.sched.wait_finished();
            // A hung thread never returns: leave the threads (and the engine) behind.
            if !matches!(failure, Some(Failure { kind: FailureKind::Hang { .. }, .. })) {
                for handle in handles {
                    let _ = handle.join();
                }
            }
            failure
        }
        Err(error) => {
            // Threads already spawned wait in `enter`; the failure wakes them to exit.
            ctx.sched.fail(None, None, FailureKind::Panic { message: error });
            ctx.sched.failure()
        }
    };
    if let Some(trace) = &ctx.trace {
        if let Err(e) = trace.lock().flush() {
            eprintln!("uswap sim: writing the trace: {e}");
        }
    }
    report(&ctx, failure, started)
}

fn report(ctx: &Ctx, failure: Option<Failure>, started: Instant) -> RunReport {
    let stats = ctx.engine.stats();
    let mut digest = *ctx.digest.lock();
    for (_, value) in stats.counters.fields() {
        digest.add(value);
    }
    let per_order = &stats.per_order;
    for array in [&per_order.swpout, &per_order.swpout_fallback, &per_order.swpin] {
        digest.add_all(array);
    }
    let model = ctx.model.lock();
    let (samples, sum, max) = *ctx.fill.lock();
    RunReport {
        swap_fill_percent: (sum.checked_div(samples).unwrap_or(0), max),
        options: ctx.opts.clone(),
        failure,
        stats: Some(stats),
        digest: digest.0,
        steps: ctx.sched.steps(),
        sim_time_ns: ctx.sched.now_ns(),
        ops: ctx.ops_done.load(Ordering::Relaxed),
        invariant_checks: ctx.checks_done.load(Ordering::Relaxed),
        reads_checked: model.reads_checked,
        pages_lost: model.pages_lost,
        remaps: ctx.remaps.load(Ordering::Relaxed),
        replay: ctx.replay_records.map(|records| ReplayCounts {
            records,
            pageouts: ctx.pageouts.load(Ordering::Relaxed),
            pageout_pages: ctx.pageout_pages.load(Ordering::Relaxed),
        }),
        faults_fired: Site::ALL
            .into_iter()
            .map(|s| (s, ctx.world.faults.fired(s)))
            .filter(|(_, n)| *n > 0)
            .collect(),
        wall: started.elapsed(),
    }
}

/// The engine's configuration for `o`.
pub fn engine_config(o: &SimOptions, backend: Arc<SimBackend>, world: &Arc<World>) -> EngineConfig {
    EngineConfig {
        budget_bytes: o.budget_bytes(),
        watermarks: None,
        folio_order: o.folio_order,
        large_swapin: o.large_swapin,
        large_folios: o.large_folios,
        readahead_max_pages: o.readahead_max_pages,
        swap: SwapConfig {
            backend: BackendConfig::Custom(backend),
            size_bytes: o.swap_pages * PAGE,
            policy: o.policy,
            discard: o.discard,
            checksums: o.checksums,
            encrypt: false,
        },
        zswap: (o.pool_percent > 0).then_some(ZswapSettings {
            compressor: o.compressor,
            max_pool_percent: o.pool_percent,
            accept_threshold_percent: 90,
            incompressible: o.incompressible,
            checksum: o.pool_checksum,
            separate_bytes: o
                .pool_separate
                .then(|| o.budget_bytes() * u64::from(o.pool_percent) / 100),
        }),
        zswap_faults: pool_fault_hooks(world),
        background_reclaim: false,
        reclaimer_cpus: Vec::new(),
        reclaim_batch_pages: o.reclaim_batch_pages,
    }
}

/// The pool's fault sites, as zswap's hooks (they run with no zswap lock held and never
/// yield: a draw from the world's fault stream).
fn pool_fault_hooks(world: &Arc<World>) -> zswap::FaultHooks {
    let faults = &world.faults;
    let compress = world.clone();
    let alloc = world.clone();
    zswap::FaultHooks {
        compress_fail: faults.active(Site::CompressFail).then(|| {
            let hook: Arc<dyn Fn(slots::SwapEntry) -> bool + Send + Sync> =
                Arc::new(move |_| compress.fires(Site::CompressFail));
            hook
        }),
        alloc_fail: faults.active(Site::PoolAllocFail).then(|| {
            let hook: zpool::AllocFailHook = Arc::new(move |_| alloc.fires(Site::PoolAllocFail));
            hook
        }),
    }
}

fn setup(opts: &SimOptions, trace: Option<TraceOut>) -> Result<(Arc<Ctx>, Vec<Generator>), String> {
    let world = Arc::new(World::new(opts.seed, opts.faults.clone(), opts.latency));
    let backend = Arc::new(SimBackend::new(opts.swap_pages, world.clone()));
    let source = Arc::new(SimSource::new(world.clone(), opts.protect_zero));
    let engine = Engine::new(engine_config(opts, backend, &world), source.clone())
        .map_err(|e| format!("engine: {e}"))?;
    let mut replay_records = None;
    let replay = match (&opts.workload, &opts.trace) {
        (WorkloadKind::Replay, Some(path)) => {
            let (_, records) = crate::trace::read_file(path).map_err(|e| e.to_string())?;
            let mut by_kind = [0u64; RecordKind::ALL.len()];
            for r in &records {
                by_kind[usize::from(r.kind.code())] += 1;
            }
            replay_records = Some(by_kind);
            replay_queues(&records, opts.threads)
        }
        _ => {
            if opts.workload != WorkloadKind::Kbuild {
                engine
                    .add_region(HEAP_BASE, opts.region_pages * PAGE)
                    .map_err(|e| format!("heap region: {e}"))?;
            }
            vec![VecDeque::new(); opts.threads]
        }
    };
    let kbuild = (opts.workload == WorkloadKind::Kbuild).then(|| {
        let target = opts.budget_pages + opts.swap_pages * u64::from(opts.fill_percent) / 100;
        Arc::new(Mutex::new(Kbuild::new(target)))
    });
    let generators = replay
        .into_iter()
        .enumerate()
        .map(|(t, queue)| Generator::new(opts, t, kbuild.clone(), queue))
        .collect();
    let total_ops = opts.ops_per_thread * opts.threads as u64;
    let limits = Limits {
        steps_max: total_ops.saturating_mul(200).saturating_add(1_000_000),
        wait_steps_max: 1_000_000,
        hang_secs: 120,
    };
    let nr_threads = opts.threads + 1;
    let sched =
        Arc::new(Sched::new(nr_threads, opts.sched, SimRng::stream(opts.seed, "sched"), limits));
    let ctx = Ctx {
        opts: opts.clone(),
        engine,
        source,
        world,
        sched,
        model: Mutex::new(Model::new(opts.seed)),
        children: Mutex::new(Vec::new()),
        kbuild,
        digest: Mutex::new(Digest::default()),
        check_rng: Mutex::new(SimRng::stream(opts.seed, "checks")),
        trace: trace.map(Mutex::new),
        programs_left: AtomicUsize::new(opts.threads),
        threads_done: AtomicUsize::new(0),
        ops_done: AtomicU64::new(0),
        checks_done: AtomicU64::new(0),
        pageouts: AtomicU64::new(0),
        pageout_pages: AtomicU64::new(0),
        remaps: AtomicU64::new(0),
        replay_records,
        fill: Mutex::new((0, 0, 0)),
    };
    Ok((Arc::new(ctx), generators))
}

/// Most threads spawned to find stripes of their own (16 stripes: a fresh stripe turns up
/// within 16 spawns unless other code spawns threads at the same moment).
const PROBE_SPAWNS_MAX: usize = 256;

/// Spawns the program threads and the reclaimer, each with a stripe of its own (see the
/// module documentation).
fn spawn_threads(
    ctx: &Arc<Ctx>,
    generators: Vec<Generator>,
) -> Result<Vec<std::thread::JoinHandle<()>>, String> {
    let probe = probe_device()?;
    let mut clusters_seen = Vec::new();
    let mut handles = Vec::new();
    let mut jobs: Vec<Option<Generator>> = generators.into_iter().map(Some).collect();
    jobs.push(None); // the reclaimer
    let mut spawns = 0;
    for (me, job) in jobs.into_iter().enumerate() {
        let mut job = Some(job);
        loop {
            spawns += 1;
            if spawns > PROBE_SPAWNS_MAX {
                return Err("could not give every simulated thread a stripe of its own".into());
            }
            let (probed_tx, probed_rx) = mpsc::channel();
            let (keep_tx, keep_rx) = mpsc::channel::<Option<Option<Generator>>>();
            let (ctx2, probe2) = (ctx.clone(), probe.clone());
            let handle = std::thread::Builder::new()
                .name(format!("sim-{me}"))
                .spawn(move || {
                    let cluster = probe2.alloc(0).map(|e| e.offset() / 512).ok();
                    let _ = probed_tx.send(cluster);
                    if let Ok(Some(job)) = keep_rx.recv() {
                        thread_main(&ctx2, me, job);
                    }
                })
                .map_err(|e| format!("spawn: {e}"))?;
            let cluster = probed_rx.recv().map_err(|_| "probe thread died".to_string())?;
            let fresh = cluster.is_some_and(|c| !clusters_seen.contains(&c));
            if fresh {
                clusters_seen.extend(cluster);
                let _ = keep_tx.send(Some(job.take().expect("job sent once")));
                handles.push(handle);
                break;
            }
            let _ = keep_tx.send(None);
            let _ = handle.join();
        }
    }
    Ok(handles)
}

/// A private device for stripe probing: legacy policy (a fresh stripe takes a free
/// cluster), one cluster per possible stripe and then some.
fn probe_device() -> Result<Arc<slots::SwapDevice>, String> {
    let clusters = 64;
    let backend = Arc::new(backend::MemoryBackend::new(clusters * 512));
    let options = slots::SwapDeviceOptions { policy: slots::AllocPolicy::Legacy, discard: false };
    let ty = slots::SwapType::new(0).ok_or("swap type 0")?;
    slots::SwapDevice::new(ty, backend, options, None)
        .map(Arc::new)
        .map_err(|e| format!("probe device: {e}"))
}

/// A simulated thread's life: install, wait for the baton, run, report, exit.
fn thread_main(ctx: &Arc<Ctx>, me: usize, job: Option<Generator>) {
    sched::install(ctx.sched.clone(), me);
    #[cfg(debug_assertions)]
    engine::hooks::plant_skip_revalidation(ctx.opts.planted_bug);
    let result = catch_unwind(AssertUnwindSafe(|| {
        if ctx.sched.enter(me).is_err() {
            return;
        }
        match job {
            Some(generator) => ctx.program(me, generator),
            None => ctx.reclaimer(me),
        }
    }));
    if let Err(payload) = result {
        if !payload.is::<Aborted>() {
            let op = CURRENT_OP.with(std::cell::Cell::get);
            let message = panic_message(payload.as_ref());
            ctx.sched.fail(Some(me), op, FailureKind::Panic { message });
        }
    }
    ctx.threads_done.fetch_add(1, Ordering::AcqRel);
    ctx.sched.exit(me);
    sched::uninstall();
}

impl Ctx {
    /// A program thread: its operations, then its children exit; thread 0 then waits for
    /// everyone else and runs the final read-back.
    fn program(&self, me: usize, mut generator: Generator) {
        for index in 0..self.opts.ops_per_thread {
            if !self.boundary(me) {
                return;
            }
            let Some(op) = generator.next(index, &self.opts, &self.world) else { break };
            if index >= self.opts.ops_per_thread / 4 && index % 16 == 0 {
                self.sample_fill();
            }
            if !self.step(me, index, op) {
                return;
            }
        }
        self.exit_children(Some(me));
        self.programs_left.fetch_sub(1, Ordering::AcqRel);
        if me == 0 {
            let others = self.opts.threads; // the other programs and the reclaimer
            while self.threads_done.load(Ordering::Acquire) < others {
                sched::yield_point(Yield::Boundary { cost_ns: 1_000 });
            }
            self.final_phase(me);
        }
    }

    /// The reclaimer: a reclaim pass now and then, until the programs are done.
    fn reclaimer(&self, me: usize) {
        let mut index = 0;
        while self.programs_left.load(Ordering::Acquire) > 0 {
            sched::yield_point(Yield::Boundary { cost_ns: 20_000 });
            if !self.step(me, index, Op::Reclaim) {
                return;
            }
            index += 1;
        }
    }

    /// Samples how full the swap device is (after the warm-up quarter of the run).
    fn sample_fill(&self) {
        let inuse = self.engine.stats().gauges.swap_inuse_pages;
        let percent = 100 * inuse / self.opts.swap_pages.max(1);
        let mut fill = self.fill.lock();
        *fill = (fill.0 + 1, fill.1 + percent, fill.2.max(percent));
    }

    /// Runs one operation; on a failure, reports it and returns false.
    fn step(&self, me: usize, index: u64, op: Op) -> bool {
        CURRENT_OP.with(|c| c.set(Some(index)));
        self.record(me, op);
        let outcome = self.execute(me, index, op);
        CURRENT_OP.with(|c| c.set(None));
        if self.opts.verbose {
            let (step, now) = (self.sched.steps(), self.sched.now_ns());
            eprintln!(
                "[step {step} t={}us] thread {me} op #{index} {op:?} -> {outcome:?}",
                now / 1000
            );
        }
        match outcome {
            Ok(code) => {
                let (addr, len) = op.range();
                self.digest.lock().add_all(&[me as u64, index, op.code(), addr, len, code]);
                self.ops_done.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(kind) => {
                self.sched.fail(Some(me), Some(index), kind);
                false
            }
        }
    }

    /// Between two operations: yield, then maybe check the engine if nothing is in
    /// flight. Returns false if the check failed (the failure is reported).
    fn boundary(&self, me: usize) -> bool {
        sched::yield_point(Yield::Boundary { cost_ns: self.world.op_cost_ns() });
        if self.sched.quiescent(me) && self.check_rng.lock().chance_ppm(self.opts.check_ppm) {
            return self.check_invariants(me);
        }
        true
    }

    fn check_invariants(&self, me: usize) -> bool {
        self.checks_done.fetch_add(1, Ordering::Relaxed);
        match catch_unwind(AssertUnwindSafe(|| self.engine.check_invariants())) {
            Ok(()) => true,
            Err(payload) => {
                let message = panic_message(payload.as_ref());
                self.sched.fail(Some(me), None, FailureKind::Invariant { message });
                false
            }
        }
    }

    /// Alone at the end: remaining children exit, every page written is read back and
    /// checked, and the engine's invariants are checked.
    fn final_phase(&self, me: usize) {
        self.exit_children(None);
        let mut pages = self.model.lock().written_pages(MmId::DEFAULT);
        if let Some(kbuild) = &self.kbuild {
            for (addr, len) in kbuild.lock().live_ranges() {
                pages.extend((0..len / PAGE).map(|i| addr + i * PAGE));
            }
            pages.sort_unstable();
            pages.dedup();
        }
        let base = self.opts.ops_per_thread;
        for (i, addr) in pages.into_iter().enumerate() {
            if !self.step(me, base + i as u64, Op::Read { addr }) {
                return;
            }
        }
        self.check_invariants(me);
    }

    /// Appends `op` to the trace being written, if any.
    fn record(&self, me: usize, op: Op) {
        let Some(trace) = &self.trace else { return };
        let now = self.sched.now_ns();
        let mut trace = trace.lock();
        let records: Vec<Record> = match op {
            // A fill is one write per page.
            Op::Fill { addr, pages } => (0..pages)
                .map(|i| Record {
                    time_ns: now,
                    kind: RecordKind::FaultWrite,
                    thread: me as u32,
                    addr: addr + i * PAGE,
                    len: PAGE,
                })
                .collect(),
            _ => op.to_records(now, me as u32),
        };
        for r in records {
            if trace.record(&r).is_err() {
                return;
            }
        }
    }
}

/// A trace writer on `path` (created; an existing file is refused).
///
/// # Errors
/// The I/O error, as text.
pub fn trace_file(path: &std::path::Path) -> Result<TraceOut, String> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let start_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let header = Header { page_size: PAGE_SIZE as u32, start_ns };
    TraceWriter::new(std::io::BufWriter::new(file), header).map_err(|e| e.to_string())
}
