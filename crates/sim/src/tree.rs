//! `uswap sim --tree`: several real engines under one budget, divided by the broker's
//! policy (runstat's `share`), with processes starting and exiting, from one seed.
//!
//! ```text
//!   seed ─► TreeOptions: budget, processes (start tick, end tick, phases)
//!   every tick, in one thread (no scheduler: each engine reclaims when told):
//!     start the processes due: Policy::join, rebalance, an Engine with its share
//!     each live process makes its accesses (grow / hot / scan / idle) through its own
//!       simulated memory; every read is checked against its own model
//!     end the processes due: every page read back and checked, Policy::leave
//!     each engine's sample -> Policy::observe; rebalance; Engine::set_budget; reclaim
//!     checks: the policy's invariants; shares given + withheld = what the tree has;
//!       each engine's charge within its share; a refaulting member's share grows
//!       within GAIN_TICKS_MAX ticks while another member holds memory it does not use
//! ```
//!
//! The same policy code as `uswap run`'s broker, over the same engines as the seed runs;
//! what differs is the broker's plumbing (sockets, /proc), which the integration tests
//! of `uswap run` cover. A failure names the seed and the tick; `uswap sim --tree --seed N`
//! replays it.

use crate::backend::SimBackend;
use crate::buggify::Faults;
use crate::content::Kind;
use crate::model::Model;
use crate::rng::{Digest, SimRng};
use crate::source::{AccessError, Page, SimSource};
use crate::world::{Latency, World};
use engine::config::ZswapSettings;
use engine::region::MmId;
use engine::{BackendConfig, Engine, EngineConfig, SwapConfig, PAGE_SIZE};
use runstat::share::{MemberId, Policy, Sample, MIN_SHARE_BYTES};
use std::sync::Arc;

const PAGE: u64 = PAGE_SIZE as u64;
/// Where every process's region starts (each has its own memory and engine).
const HEAP: u64 = 0x1000_0000;
/// Ticks a refaulting member may wait for its share to grow while another member sits on
/// memory it does not refault (the broker rebalances every tick; the pressure it counts
/// builds up over a few).
pub const GAIN_TICKS_MAX: u64 = 6;

/// What a process does during a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Writes pages it never touched, in order (its footprint grows).
    Grow,
    /// Reads and writes random pages among its first `ws` pages.
    Hot {
        /// Working set, pages.
        ws: u64,
    },
    /// Walks its first `ws` pages in a cycle, reading (refaults when they do not fit).
    Scan {
        /// Pages walked.
        ws: u64,
    },
    /// Does nothing: its memory goes cold.
    Idle,
}

/// One process of a tree run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcPlan {
    /// The tick it starts.
    pub start: u64,
    /// The tick it exits (after its last accesses).
    pub end: u64,
    /// Its phases: each runs until its tick (the last until `end`).
    pub phases: Vec<(u64, Phase)>,
    /// Its region, pages.
    pub region_pages: u64,
}

/// A tree run's options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeOptions {
    /// The seed.
    pub seed: u64,
    /// The tree's budget, pages.
    pub budget_pages: u64,
    /// Ticks to run.
    pub ticks: u64,
    /// Accesses per live process per tick.
    pub accesses: u64,
    /// The processes.
    pub procs: Vec<ProcPlan>,
}

impl TreeOptions {
    /// Draws a run from `seed`: 3 to 7 processes under 16 to 32 MiB, each growing,
    /// working, scanning and idling in phases of its own, some starting late and some
    /// ending early.
    pub fn draw(seed: u64) -> TreeOptions {
        let mut rng = SimRng::stream(seed, "tree");
        let ticks = 48;
        let nprocs = rng.range(3, 7) as usize;
        let procs = (0..nprocs).map(|i| draw_proc(&mut rng, i, ticks)).collect();
        TreeOptions { seed, budget_pages: rng.range(4096, 8192), ticks, accesses: 320, procs }
    }

    /// One line: what this run is.
    pub fn describe(&self) -> String {
        let procs: Vec<String> = self
            .procs
            .iter()
            .map(|p| format!("{}..{}:{}p", p.start, p.end, p.region_pages))
            .collect();
        format!(
            "budget {} pages, {} ticks, {} accesses a tick, processes [{}]",
            self.budget_pages,
            self.ticks,
            self.accesses,
            procs.join(" ")
        )
    }
}

fn draw_proc(rng: &mut SimRng, index: usize, ticks: u64) -> ProcPlan {
    let start = if index == 0 { 0 } else { rng.below(ticks / 2) };
    let end = if rng.percent(60) { ticks } else { rng.range(start + 8, ticks) };
    let region_pages = rng.range(1024, 6144);
    let mut phases = Vec::new();
    let mut at = start;
    while at < end {
        let until = (at + rng.range(4, 16)).min(end);
        let ws = rng.range(256, region_pages);
        let phase = match rng.below(4) {
            0 => Phase::Grow,
            1 => Phase::Hot { ws },
            2 => Phase::Scan { ws },
            _ => Phase::Idle,
        };
        phases.push((until, phase));
        at = until;
    }
    ProcPlan { start, end, phases, region_pages }
}

/// What a tree run did.
#[derive(Debug, Clone)]
pub struct TreeReport {
    /// Its options.
    pub options: TreeOptions,
    /// The first thing that went wrong, with its tick.
    pub failure: Option<String>,
    /// Reads checked against the models.
    pub reads_checked: u64,
    /// Most processes live at once.
    pub most_live: usize,
    /// Ticks whose floors passed the budget.
    pub overcommitted_ticks: u64,
    /// The longest a refaulting member waited for its share to grow while another
    /// member sat on memory it did not use, in ticks.
    pub slowest_gain_ticks: u64,
    /// Refault streaks beside cold memory that ended with the share grown.
    pub gains: u64,
    /// Exits whose share went back to the others.
    pub exits: u64,
    /// Every tick's shares: (process index, share in bytes) of each live process.
    pub shares: Vec<Vec<(usize, u64)>>,
    /// Pages paged out by all engines.
    pub pages_out: u64,
    /// A digest of every share of every tick and the engines' counters: the same seed
    /// gives the same digest.
    pub digest: u64,
}

impl TreeReport {
    /// Whether every check held.
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }

    /// One line per run.
    pub fn summary_line(&self) -> String {
        format!(
            "seed {} {}: {} processes (at most {} at once), {} reads checked, {} pages out, \
             {} exits, {} gains (slowest {} ticks), over-committed {} ticks, digest {:016x}",
            self.options.seed,
            if self.passed() { "ok" } else { "FAILED" },
            self.options.procs.len(),
            self.most_live,
            self.reads_checked,
            self.pages_out,
            self.exits,
            self.gains,
            self.slowest_gain_ticks,
            self.overcommitted_ticks,
            self.digest
        )
    }
}

/// A live process.
struct Proc {
    index: usize,
    id: MemberId,
    plan: ProcPlan,
    engine: Engine,
    source: Arc<SimSource>,
    model: Model,
    rng: SimRng,
    /// Pages touched so far by `Grow` (its next new page).
    grown: u64,
    /// Where `Scan` is.
    cursor: u64,
    refaults: u64,
    /// Pages resident or paged out at the last tick.
    footprint: u64,
    ops: u64,
    /// The tick its current refault streak began, and its share then.
    streak: Option<(u64, u64)>,
}

/// Runs one tree (module essay); never panics on an engine bug (the report says).
pub fn run_tree(options: &TreeOptions) -> TreeReport {
    let mut tree = Tree::new(options.clone());
    let failure = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tree.run()))
        .unwrap_or_else(|panic| Err(crate::failure::panic_message(panic.as_ref())));
    tree.report.failure = failure.err();
    tree.report
}

struct Tree {
    world: Arc<World>,
    policy: Policy,
    live: Vec<Proc>,
    digest: Digest,
    report: TreeReport,
}

impl Tree {
    fn new(options: TreeOptions) -> Tree {
        let seed = options.seed;
        Tree {
            world: Arc::new(World::new(seed, Faults::none(), Latency::FAST)),
            policy: Policy::new(),
            live: Vec::new(),
            digest: Digest::default(),
            report: TreeReport {
                options,
                failure: None,
                reads_checked: 0,
                most_live: 0,
                overcommitted_ticks: 0,
                slowest_gain_ticks: 0,
                gains: 0,
                exits: 0,
                shares: Vec::new(),
                pages_out: 0,
                digest: 0,
            },
        }
    }

    fn budget(&self) -> u64 {
        self.report.options.budget_pages * PAGE
    }

    fn run(&mut self) -> Result<(), String> {
        for tick in 0..self.report.options.ticks {
            self.start_due(tick).map_err(|e| format!("tick {tick}: {e}"))?;
            self.report.most_live = self.report.most_live.max(self.live.len());
            for i in 0..self.live.len() {
                let phase = phase_at(&self.live[i].plan, tick);
                let accesses = self.report.options.accesses;
                work(&mut self.live[i], phase, accesses)
                    .map_err(|e| format!("tick {tick}: {e}"))?;
            }
            self.end_due(tick).map_err(|e| format!("tick {tick}: {e}"))?;
            self.rebalance(tick).map_err(|e| format!("tick {tick}: {e}"))?;
        }
        let last = self.report.options.ticks;
        while let Some(p) = self.live.pop() {
            self.finish(p).map_err(|e| format!("tick {last}: {e}"))?;
        }
        self.report.digest = self.digest.0;
        Ok(())
    }

    /// Starts the processes due at `tick`, each with the share the policy gives it.
    fn start_due(&mut self, tick: u64) -> Result<(), String> {
        let due: Vec<(usize, ProcPlan)> = (self.report.options.procs.iter().enumerate())
            .filter(|(_, p)| p.start == tick && p.end > tick)
            .map(|(i, p)| (i, p.clone()))
            .collect();
        for (index, plan) in due {
            let id = index as MemberId;
            self.policy.join(id);
            self.policy.rebalance(self.budget(), 0);
            let share = self.policy.share(id).unwrap_or(MIN_SHARE_BYTES);
            let source = Arc::new(SimSource::new(self.world.clone(), true));
            let swap_pages = plan.region_pages.div_ceil(512) * 512 + 512;
            let backend = Arc::new(SimBackend::new(swap_pages, self.world.clone()));
            let engine = Engine::new(engine_config(share, swap_pages, backend), source.clone())
                .map_err(|e| format!("process {index}: engine: {e}"))?;
            engine
                .add_region(HEAP, plan.region_pages * PAGE)
                .map_err(|e| format!("process {index}: region: {e}"))?;
            let rng = SimRng::stream_n(self.report.options.seed, "tree.proc", index as u64);
            let model = Model::new(self.report.options.seed ^ index as u64);
            self.live.push(Proc {
                index,
                id,
                plan,
                engine,
                source,
                model,
                rng,
                grown: 0,
                cursor: 0,
                refaults: 0,
                footprint: 0,
                ops: 0,
                streak: None,
            });
        }
        Ok(())
    }

    /// Ends the processes due at `tick`: every page checked, the member gone.
    fn end_due(&mut self, tick: u64) -> Result<(), String> {
        let mut i = 0;
        while i < self.live.len() {
            if self.live[i].plan.end <= tick + 1 {
                let p = self.live.swap_remove(i);
                self.finish(p)?;
                self.report.exits += 1;
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// Reads back every page a process wrote, checks its engine, drops it.
    fn finish(&mut self, mut p: Proc) -> Result<(), String> {
        for addr in p.model.written_pages(MmId::DEFAULT) {
            read(&mut p, addr)?;
        }
        p.engine.check_invariants();
        self.report.reads_checked += p.model.reads_checked;
        let stats = p.engine.stats().counters;
        self.report.pages_out += stats.swpout_zero + stats.zswpout + stats.pswpout;
        for (_, value) in stats.fields() {
            self.digest.add(value);
        }
        self.policy.leave(p.id);
        Ok(())
    }

    /// Samples every engine, rebalances, applies the shares, reclaims, and checks.
    fn rebalance(&mut self, tick: u64) -> Result<(), String> {
        for p in &self.live {
            let stats = p.engine.stats();
            let (c, g) = (&stats.counters, &stats.gauges);
            let held = p.engine.charged_bytes();
            let footprint = (g.resident_pages + g.swap_inuse_pages) * PAGE;
            let refaults = c.workingset_refault_anon;
            let beside = p.engine.beside_bytes();
            let sample = Sample { held, fixed: 0, footprint, refaults, beside };
            self.policy.observe(p.id, sample);
            self.policy.set_usage(p.id, held);
        }
        let outcome = self.policy.rebalance(self.budget(), 0);
        self.policy.check();
        if outcome.overcommitted {
            self.report.overcommitted_ticks += 1;
        }
        let given: u64 = self.policy.shares().map(|(_, s)| s).sum();
        // Each share is rounded down to pages twice (its part, and what is held back).
        let slack = 2 * self.live.len() as u64 * PAGE;
        let members = !self.live.is_empty();
        if members && !outcome.overcommitted && given + outcome.withheld + slack < outcome.available
        {
            return Err(format!(
                "shares {given} + withheld {} lose budget: {} available",
                outcome.withheld, outcome.available
            ));
        }
        let shares = self.live.iter().map(|p| (p.index, self.policy.share(p.id).unwrap_or(0)));
        self.report.shares.push(shares.collect());
        for p in &mut self.live {
            let share = self.policy.share(p.id).unwrap_or(0);
            self.digest.add(share);
            p.engine.set_budget(share).map_err(|e| format!("process {}: {e}", p.index))?;
            reclaim_to(&p.engine, share);
            let folio = p.engine.config().folio_bytes();
            if p.engine.charged_bytes() > share + folio {
                return Err(format!(
                    "process {}: charged {} over its share {share}",
                    p.index,
                    p.engine.charged_bytes()
                ));
            }
        }
        self.check_gains(tick)
    }

    /// A member that keeps refaulting while another one idles (its memory cold: the
    /// simulator knows, the policy does not) on memory beyond its floor, and no other
    /// member refaults or grows, must see its share grow within [`GAIN_TICKS_MAX`] ticks:
    /// budget moves from cold memory to the member that needs it. (Against members that
    /// grow or refault too, shares follow each one's pressure; a member whose memory fits
    /// its share and is in use keeps it: the check does not apply.)
    fn check_gains(&mut self, tick: u64) -> Result<(), String> {
        let now: Vec<(u64, u64)> = self
            .live
            .iter()
            .map(|p| {
                let stats = p.engine.stats();
                let footprint = stats.gauges.resident_pages + stats.gauges.swap_inuse_pages;
                (stats.counters.workingset_refault_anon, footprint)
            })
            .collect();
        let quiet: Vec<bool> = self
            .live
            .iter()
            .zip(&now)
            .map(|(p, &(r, f))| r == p.refaults && f <= p.footprint)
            .collect();
        let cold: Vec<bool> = (self.live.iter())
            .map(|q| {
                let floor = self.policy.floor(q.id).unwrap_or(0);
                let idle = phase_at(&q.plan, tick) == Phase::Idle;
                idle && self.policy.share(q.id).unwrap_or(0) > floor + 256 * PAGE
            })
            .collect();
        for (i, &(refaults, _)) in now.iter().enumerate() {
            let share = self.policy.share(self.live[i].id).unwrap_or(0);
            let refaulting = refaults > self.live[i].refaults + 32;
            let others = (0..self.live.len()).filter(|&j| j != i);
            let applies =
                refaulting && others.clone().all(|j| quiet[j]) && others.clone().any(|j| cold[j]);
            let p = &mut self.live[i];
            match p.streak {
                Some((since, at)) if share > at + 64 * PAGE => {
                    self.report.slowest_gain_ticks =
                        self.report.slowest_gain_ticks.max(tick - since);
                    self.report.gains += 1;
                    p.streak = None;
                }
                Some(_) if !applies => p.streak = None,
                Some((since, _)) if tick - since >= GAIN_TICKS_MAX => {
                    return Err(format!(
                        "process {} refaulted for {} ticks beside cold memory and its share \
                         stayed {share}",
                        p.index,
                        tick - since
                    ));
                }
                None if applies => p.streak = Some((tick, share)),
                _ => {}
            }
        }
        for (p, (refaults, footprint)) in self.live.iter_mut().zip(now) {
            p.refaults = refaults;
            p.footprint = footprint;
        }
        Ok(())
    }
}

/// Reclaims until `engine` is within `share` (bounded: the reclaimer stops itself when
/// it cannot free more).
fn reclaim_to(engine: &Engine, share: u64) {
    for _ in 0..1024 {
        if engine.charged_bytes() <= share || engine.reclaim() == 0 {
            break;
        }
    }
}

fn engine_config(share: u64, swap_pages: u64, backend: Arc<SimBackend>) -> EngineConfig {
    EngineConfig {
        budget_bytes: share,
        folio_order: 0,
        swap: SwapConfig {
            backend: BackendConfig::Custom(backend),
            size_bytes: swap_pages * PAGE,
            ..SwapConfig::default()
        },
        zswap: Some(ZswapSettings { max_pool_percent: 20, ..ZswapSettings::default() }),
        background_reclaim: false,
        ..EngineConfig::default()
    }
}

fn phase_at(plan: &ProcPlan, tick: u64) -> Phase {
    plan.phases.iter().find(|(until, _)| tick < *until).map_or(Phase::Idle, |&(_, phase)| phase)
}

/// One tick of a process's accesses in `phase`.
fn work(p: &mut Proc, phase: Phase, accesses: u64) -> Result<(), String> {
    for _ in 0..accesses {
        let pages = p.plan.region_pages;
        match phase {
            Phase::Grow if p.grown < pages => {
                let addr = HEAP + p.grown * PAGE;
                p.grown += 1;
                write(p, addr)?;
            }
            Phase::Grow | Phase::Idle => return Ok(()),
            Phase::Hot { ws } => {
                let addr = HEAP + p.rng.below(ws.min(pages)) * PAGE;
                if p.rng.percent(30) {
                    write(p, addr)?;
                } else {
                    read(p, addr)?;
                }
            }
            Phase::Scan { ws } => {
                p.cursor = (p.cursor + 1) % ws.min(pages);
                read(p, HEAP + p.cursor * PAGE)?;
            }
        }
    }
    Ok(())
}

fn access(p: &mut Proc, addr: u64, write: bool, f: impl FnMut(&mut Page)) -> Result<(), String> {
    p.ops += 1;
    p.source
        .access(&p.engine, MmId::DEFAULT, addr, write, f)
        .map_err(|e: AccessError| format!("process {}: access at {addr:#x}: {e:?}", p.index))
}

fn write(p: &mut Proc, addr: u64) -> Result<(), String> {
    let (index, op) = (p.index, p.ops);
    let mut data = Box::new([0u8; PAGE_SIZE]);
    p.model.write(MmId::DEFAULT, addr, Kind::Heap, (index, op), &mut data);
    let mut data = Some(data);
    access(p, addr, true, |page| {
        if let Some(d) = data.take() {
            *page = Page::Data(d);
        }
    })
}

fn read(p: &mut Proc, addr: u64) -> Result<(), String> {
    let mut buf = [0u8; PAGE_SIZE];
    access(p, addr, false, |page| match page {
        Page::Data(data) => buf.copy_from_slice(&data[..]),
        Page::Zero | Page::Poisoned => buf.fill(0),
    })?;
    let index = p.index;
    p.model.check_read(MmId::DEFAULT, addr, &buf).map_err(|e| format!("process {index}: {e}"))
}
