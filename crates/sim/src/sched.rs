//! The baton scheduler: real OS threads, one running at a time, switching only at yield
//! points, chosen by the seed.
//!
//! Races need more than one thread, but a seed must replay exactly. So every simulated
//! thread (the program's threads and the reclaimer) is a real OS thread running the real
//! engine, and exactly one of them holds the *baton*. A thread gives the baton back only at
//! a **yield point**; the scheduler then picks who runs next with the run's `sched` random
//! stream. Everything between two yield points runs alone, so the interleaving (and with it
//! every lock acquisition, every allocation, every counter) is a function of the seed.
//!
//! ```text
//!   thread 0  ──op──┤yield├            ├──I/O──┤yield├ ...
//!   thread 1              ├──op──┤wait├                ├── (folio unlocked) ──...
//!   reclaim                           ├──reclaim──┤yield├
//!             baton: 0 ────────► 1 ──► R ──────────► 0 ──► 1
//! ```
//!
//! Yield points ([`Yield`]):
//! - **Boundary**: between two operations of a thread (no engine work in flight on it);
//! - **Io**: inside the simulated backend's read and write (the engine calls the backend
//!   with no engine lock held: engine.rs, storage.rs);
//! - **Wait**: the engine's folio wait, through `engine::hooks::set_yield_hook`: instead of
//!   sleeping on the folio's condition variable the waiter yields in a loop.
//!
//! Nothing yields inside a page-source call (those run under the region's page-table
//! lock) or inside a backend discard (the swap device may discard from inside a `put`,
//! under engine locks): a thread parked there would hold a lock the running thread needs,
//! and the real lock would block the only running thread forever.
//!
//! **Liveness.** A waiter that found its folio still locked is not eligible again until
//! some other thread makes progress (the *epoch* advances on every non-wait yield). If no
//! thread is eligible while some are alive, every live thread waits on a folio: a deadlock,
//! reported with the seed. A thread that waits more than `wait_steps_max` steps, or a run
//! that passes `steps_max`, is a liveness failure too. A wall-clock watchdog in
//! [`Sched::wait_finished`] reports a thread blocked outside the scheduler (a hang).
//!
//! **Picking** ([`SchedMode`], drawn per seed): uniformly among eligible threads; by random
//! priorities that drop at random points (PCT, good at bugs that need one thread to stay
//! off the CPU for a long stretch); or by simulated time (the thread whose I/O completes
//! first runs first). The clock advances at every yield by the latency the yield carries.
//!
//! **Quiescence.** When every other thread is parked at a Boundary (or has not started, or
//! is done), nothing is in flight: the thread holding the baton may check the engine's
//! quiescent invariants ([`Sched::quiescent`]).
//!
//! Failures abort the run: the first failure is kept, every parked thread is woken and
//! unwinds (a [`Aborted`] payload through `resume_unwind`, which runs no panic hook) back to
//! its top level, and [`Sched::wait_finished`] returns the failure.

use crate::failure::{Failure, FailureKind};
use crate::rng::SimRng;
use parking_lot::{Condvar, Mutex};
use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the scheduler picks the next thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchedMode {
    /// Uniformly among eligible threads.
    Random,
    /// Highest priority first; at each yield, with probability `change_ppm`, the yielding
    /// thread drops to the lowest priority (PCT).
    Priority {
        /// Chance per yield, in parts per million.
        change_ppm: u32,
    },
    /// The eligible thread that is ready earliest in simulated time (I/O latency decides).
    Timed,
}

impl SchedMode {
    /// A short name for reports.
    pub fn describe(self) -> String {
        match self {
            SchedMode::Random => "random".into(),
            SchedMode::Priority { change_ppm } => format!("pct:{}%", change_ppm / 10_000),
            SchedMode::Timed => "timed".into(),
        }
    }
}

/// Why a thread gives the baton back, and how much simulated time it spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Yield {
    /// Between two operations; `cost_ns` of CPU time since the last yield.
    Boundary {
        /// Simulated nanoseconds.
        cost_ns: u64,
    },
    /// Inside backend I/O taking `latency_ns`.
    Io {
        /// Simulated nanoseconds.
        latency_ns: u64,
    },
    /// Waiting on a locked folio.
    Wait,
}

/// Bounds of a run's schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most scheduler steps in a run.
    pub steps_max: u64,
    /// Most steps one thread may wait on one folio.
    pub wait_steps_max: u64,
    /// Wall-clock seconds without a scheduler step before the run is declared hung.
    pub hang_secs: u64,
}

/// The payload a thread unwinds with when the run is aborted.
#[derive(Debug)]
pub struct Aborted;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    NotStarted,
    Parked(Yield),
    /// Found its folio locked at `epoch`.
    Waiting {
        epoch: u64,
    },
    Running,
    Done,
}

#[derive(Debug)]
struct Slot {
    state: State,
    ready_at_ns: u64,
    priority: u64,
    /// Step at which the current wait began.
    wait_since: Option<u64>,
}

#[derive(Debug)]
struct Inner {
    running: Option<usize>,
    threads: Vec<Slot>,
    rng: SimRng,
    mode: SchedMode,
    limits: Limits,
    epoch: u64,
    step: u64,
    now_ns: u64,
    failure: Option<Failure>,
}

/// The baton scheduler of one run (see the module documentation).
///
/// Locks: `inner` is the only lock; it is a leaf (nothing else is taken under it), and no
/// thread holds it while running engine code.
#[derive(Debug)]
pub struct Sched {
    inner: Mutex<Inner>,
    /// One per thread: signalled when it gets the baton (or the run aborts).
    turns: Box<[Condvar]>,
    /// Signalled when a thread finishes.
    finished: Condvar,
}

impl Sched {
    /// A scheduler for `nr_threads` threads.
    pub fn new(nr_threads: usize, mode: SchedMode, mut rng: SimRng, limits: Limits) -> Sched {
        let threads = (0..nr_threads)
            .map(|_| Slot {
                state: State::NotStarted,
                ready_at_ns: 0,
                priority: rng.next_u64() >> 1,
                wait_since: None,
            })
            .collect();
        Sched {
            inner: Mutex::new(Inner {
                running: None,
                threads,
                rng,
                mode,
                limits,
                epoch: 0,
                step: 0,
                now_ns: 0,
                failure: None,
            }),
            turns: (0..nr_threads).map(|_| Condvar::new()).collect(),
            finished: Condvar::new(),
        }
    }

    /// Hands the baton to the first thread (the controller calls this once, after spawning
    /// every thread).
    pub fn start(&self) {
        let mut inner = self.inner.lock();
        assert!(inner.running.is_none() && inner.step == 0, "scheduler started twice");
        self.hand_off(&mut inner);
    }

    /// A thread's first wait for the baton.
    ///
    /// # Errors
    /// [`Aborted`] if the run aborted first.
    pub fn enter(&self, me: usize) -> Result<(), Aborted> {
        let mut inner = self.inner.lock();
        self.wait_turn(&mut inner, me)
    }

    /// Gives the baton back at a yield point and waits to get it again.
    ///
    /// # Errors
    /// [`Aborted`] if the run aborted meanwhile: the caller must unwind.
    pub fn yield_now(&self, me: usize, why: Yield) -> Result<(), Aborted> {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        if inner.failure.is_some() {
            return Err(Aborted);
        }
        assert_eq!(inner.running, Some(me), "thread {me} yielded without the baton");
        let delay = match why {
            Yield::Boundary { cost_ns } => cost_ns,
            Yield::Io { latency_ns } => latency_ns,
            Yield::Wait => 0,
        };
        let now = inner.now_ns;
        let slot = &mut inner.threads[me];
        slot.ready_at_ns = now + delay;
        if why == Yield::Wait {
            slot.wait_since.get_or_insert(inner.step);
            slot.state = State::Waiting { epoch: inner.epoch };
        } else {
            slot.wait_since = None;
            slot.state = State::Parked(why);
            inner.epoch += 1;
        }
        if !matches!(inner.mode, SchedMode::Timed) {
            inner.now_ns += delay;
        }
        if let SchedMode::Priority { change_ppm } = inner.mode {
            if inner.rng.chance_ppm(change_ppm) {
                let lowest = inner.threads.iter().map(|t| t.priority).min().unwrap_or(0);
                inner.threads[me].priority = lowest.saturating_sub(1);
            }
        }
        self.hand_off(inner);
        self.wait_turn(&mut guard, me)
    }

    /// The thread is done; the baton moves on.
    pub fn exit(&self, me: usize) {
        let mut inner = self.inner.lock();
        inner.threads[me].state = State::Done;
        inner.epoch += 1;
        if inner.running == Some(me) {
            inner.running = None;
            if inner.failure.is_none() {
                self.hand_off(&mut inner);
            }
        }
        self.finished.notify_all();
    }

    /// Records a failure (the first one wins), aborts the run and wakes every thread.
    pub fn fail(&self, thread: Option<usize>, op: Option<u64>, kind: FailureKind) {
        let mut inner = self.inner.lock();
        let failure = Failure { kind, thread, op, step: inner.step, now_ns: inner.now_ns };
        Self::abort(&mut inner, failure);
        self.wake_all();
    }

    /// Is every thread but `me` between operations (parked at a boundary, not started, or
    /// done)? Then no engine operation is in flight.
    pub fn quiescent(&self, me: usize) -> bool {
        let inner = self.inner.lock();
        inner.threads.iter().enumerate().all(|(i, t)| {
            i == me
                || matches!(
                    t.state,
                    State::NotStarted | State::Done | State::Parked(Yield::Boundary { .. })
                )
        })
    }

    /// Simulated time now, nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.inner.lock().now_ns
    }

    /// Scheduler steps so far.
    pub fn steps(&self) -> u64 {
        self.inner.lock().step
    }

    /// The run's failure, if any.
    pub fn failure(&self) -> Option<Failure> {
        self.inner.lock().failure.clone()
    }

    /// Has the run failed?
    pub fn failed(&self) -> bool {
        self.inner.lock().failure.is_some()
    }

    /// Waits until every thread is done; returns the failure, if any. A watchdog declares
    /// the run hung after `hang_secs` of wall-clock time without a scheduler step.
    pub fn wait_finished(&self) -> Option<Failure> {
        let mut inner = self.inner.lock();
        let (mut last_step, mut since) = (inner.step, Instant::now());
        loop {
            if inner.threads.iter().all(|t| t.state == State::Done) {
                return inner.failure.clone();
            }
            self.finished.wait_for(&mut inner, Duration::from_millis(200));
            if inner.step != last_step {
                (last_step, since) = (inner.step, Instant::now());
            } else if since.elapsed() >= Duration::from_secs(inner.limits.hang_secs) {
                let kind = FailureKind::Hang { seconds: inner.limits.hang_secs };
                let failure =
                    Failure { kind, thread: inner.running, op: None, step: inner.step, now_ns: 0 };
                Self::abort(&mut inner, failure);
                self.wake_all();
                return inner.failure.clone();
            }
        }
    }

    fn abort(inner: &mut Inner, failure: Failure) {
        if inner.failure.is_none() {
            inner.failure = Some(failure);
        }
    }

    fn wake_all(&self) {
        for turn in &*self.turns {
            turn.notify_all();
        }
        self.finished.notify_all();
    }

    fn wait_turn(
        &self,
        inner: &mut parking_lot::MutexGuard<'_, Inner>,
        me: usize,
    ) -> Result<(), Aborted> {
        loop {
            if inner.failure.is_some() {
                return Err(Aborted);
            }
            if inner.running == Some(me) {
                return Ok(());
            }
            self.turns[me].wait(inner);
        }
    }

    /// Picks the next thread and gives it the baton; on a deadlock or a bound, aborts.
    fn hand_off(&self, inner: &mut Inner) {
        inner.running = None;
        if let Some(kind) = Self::over_bounds(inner) {
            let failure = Failure { kind, thread: None, op: None, step: inner.step, now_ns: 0 };
            Self::abort(inner, failure);
            self.wake_all();
            return;
        }
        let epoch = inner.epoch;
        let eligible: Vec<usize> = (0..inner.threads.len())
            .filter(|&i| match inner.threads[i].state {
                State::NotStarted | State::Parked(_) => true,
                State::Waiting { epoch: seen } => seen < epoch,
                State::Running | State::Done => false,
            })
            .collect();
        if eligible.is_empty() {
            if inner.threads.iter().any(|t| t.state != State::Done) {
                let states =
                    format!("{:?}", inner.threads.iter().map(|t| t.state).collect::<Vec<_>>());
                let kind = FailureKind::Deadlock { states };
                let failure = Failure {
                    kind,
                    thread: None,
                    op: None,
                    step: inner.step,
                    now_ns: inner.now_ns,
                };
                Self::abort(inner, failure);
                self.wake_all();
            }
            return;
        }
        let next = Self::pick(inner, &eligible);
        let slot = &mut inner.threads[next];
        slot.state = State::Running;
        let ready = slot.ready_at_ns;
        if matches!(inner.mode, SchedMode::Timed) {
            inner.now_ns = inner.now_ns.max(ready);
        }
        inner.step += 1;
        inner.running = Some(next);
        self.turns[next].notify_one();
    }

    /// A bound passed: the run's steps, or one thread's wait.
    fn over_bounds(inner: &Inner) -> Option<FailureKind> {
        if inner.step >= inner.limits.steps_max {
            return Some(FailureKind::StepBound { steps: inner.limits.steps_max });
        }
        let longest = inner.threads.iter().filter_map(|t| t.wait_since).min()?;
        let waited = inner.step - longest;
        (waited > inner.limits.wait_steps_max).then_some(FailureKind::WaitTooLong { steps: waited })
    }

    fn pick(inner: &mut Inner, eligible: &[usize]) -> usize {
        match inner.mode {
            SchedMode::Random => eligible[inner.rng.below(eligible.len() as u64) as usize],
            SchedMode::Priority { .. } => {
                let best = eligible.iter().map(|&i| inner.threads[i].priority).max();
                let top: Vec<usize> = eligible
                    .iter()
                    .copied()
                    .filter(|&i| Some(inner.threads[i].priority) == best)
                    .collect();
                top[inner.rng.below(top.len() as u64) as usize]
            }
            SchedMode::Timed => {
                let now = inner.now_ns;
                let ready = |i: usize| inner.threads[i].ready_at_ns.max(now);
                let first = eligible.iter().map(|&i| ready(i)).min().unwrap_or(now);
                let top: Vec<usize> =
                    eligible.iter().copied().filter(|&i| ready(i) == first).collect();
                top[inner.rng.below(top.len() as u64) as usize]
            }
        }
    }
}

thread_local! {
    /// The scheduler and thread index of the simulated thread running on this OS thread.
    static CURRENT: RefCell<Option<(Arc<Sched>, usize)>> = const { RefCell::new(None) };
}

/// Makes this OS thread simulated thread `me` of `sched`: backend I/O and folio waits
/// yield from now on.
pub fn install(sched: Arc<Sched>, me: usize) {
    CURRENT.with(|c| *c.borrow_mut() = Some((sched, me)));
    engine::hooks::set_yield_hook(Some(wait_hook));
}

/// Undoes [`install`].
pub fn uninstall() {
    engine::hooks::set_yield_hook(None);
    CURRENT.with(|c| *c.borrow_mut() = None);
}

fn current() -> Option<(Arc<Sched>, usize)> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Yields at a point where this thread holds no lock another simulated thread could need;
/// unwinds with [`Aborted`] if the run aborted. Does nothing on a thread that is not
/// simulated (setup, the controller).
pub fn yield_point(why: Yield) {
    if let Some((sched, me)) = current() {
        if sched.yield_now(me, why).is_err() {
            std::panic::resume_unwind(Box::new(Aborted));
        }
    }
}

/// The engine's folio-wait hook.
fn wait_hook() {
    yield_point(Yield::Wait);
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { steps_max: 100_000, wait_steps_max: 10_000, hang_secs: 30 };

    /// Runs `n` threads that each yield `k` times and log their index; returns the log.
    fn interleaving(seed: u64, mode: SchedMode, n: usize, k: usize) -> Vec<usize> {
        let sched = Arc::new(Sched::new(n, mode, SimRng::stream(seed, "sched"), LIMITS));
        let log = Arc::new(Mutex::new(Vec::new()));
        let handles: Vec<_> = (0..n)
            .map(|me| {
                let (sched, log) = (sched.clone(), log.clone());
                std::thread::spawn(move || {
                    sched.enter(me).unwrap();
                    for _ in 0..k {
                        log.lock().push(me);
                        sched
                            .yield_now(me, Yield::Io { latency_ns: 1000 * (me as u64 + 1) })
                            .unwrap();
                    }
                    sched.exit(me);
                })
            })
            .collect();
        sched.start();
        assert!(sched.wait_finished().is_none());
        for h in handles {
            h.join().unwrap();
        }
        Arc::try_unwrap(log).unwrap().into_inner()
    }

    #[test]
    fn a_seed_replays_the_same_interleaving() {
        for mode in
            [SchedMode::Random, SchedMode::Priority { change_ppm: 100_000 }, SchedMode::Timed]
        {
            let a = interleaving(5, mode, 3, 50);
            assert_eq!(a, interleaving(5, mode, 3, 50), "{mode:?}");
            assert_eq!(a.len(), 150);
            assert_ne!(a, interleaving(6, mode, 3, 50), "another seed, another schedule");
        }
    }

    #[test]
    fn timed_mode_runs_the_earliest_ready_thread() {
        // Thread 0's I/O takes 1 us, thread 1's 2 us: thread 0 runs about twice as often
        // until it finishes.
        let log = interleaving(1, SchedMode::Timed, 2, 40);
        let zeros_in_first_half = log[..40].iter().filter(|&&t| t == 0).count();
        assert!(zeros_in_first_half >= 24, "{log:?}");
    }

    #[test]
    fn every_thread_waiting_is_a_deadlock() {
        let sched = Arc::new(Sched::new(2, SchedMode::Random, SimRng::stream(1, "s"), LIMITS));
        let handles: Vec<_> = (0..2)
            .map(|me| {
                let sched = sched.clone();
                std::thread::spawn(move || {
                    if sched.enter(me).is_ok() {
                        // Wait forever on something nobody unlocks.
                        while sched.yield_now(me, Yield::Wait).is_ok() {}
                    }
                    sched.exit(me);
                })
            })
            .collect();
        sched.start();
        let failure = sched.wait_finished().expect("a deadlock");
        assert!(matches!(failure.kind, FailureKind::Deadlock { .. }), "{failure}");
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn a_waiter_runs_again_only_after_progress() {
        // Thread 0 waits until thread 1 has yielded 5 times; it must not spin in between.
        let sched = Arc::new(Sched::new(2, SchedMode::Random, SimRng::stream(2, "s"), LIMITS));
        let progress = Arc::new(Mutex::new((0u32, 0u32))); // (thread 1 yields, thread 0 checks)
        let waiter = {
            let (sched, progress) = (sched.clone(), progress.clone());
            std::thread::spawn(move || {
                sched.enter(0).unwrap();
                loop {
                    let mut p = progress.lock();
                    p.1 += 1;
                    if p.0 >= 5 {
                        break;
                    }
                    drop(p);
                    sched.yield_now(0, Yield::Wait).unwrap();
                }
                sched.exit(0);
            })
        };
        let worker = {
            let (sched, progress) = (sched.clone(), progress.clone());
            std::thread::spawn(move || {
                sched.enter(1).unwrap();
                for _ in 0..5 {
                    progress.lock().0 += 1;
                    sched.yield_now(1, Yield::Boundary { cost_ns: 1 }).unwrap();
                }
                sched.exit(1);
            })
        };
        sched.start();
        assert!(sched.wait_finished().is_none());
        waiter.join().unwrap();
        worker.join().unwrap();
        let checks = progress.lock().1;
        assert!(checks <= 7, "the waiter checked {checks} times for 5 steps of progress");
    }
}
