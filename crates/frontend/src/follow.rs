//! The handler beside the thread it serves: handler delivery's placement.
//!
//! Under handler delivery a fault is two wake-ups: the faulting thread wakes the handler,
//! and the handler wakes it back. On a VM a wake-up across CPUs costs 15-70 us (an
//! interrupt to a halted vCPU); on the same CPU it is a context switch. With the engine's
//! reclaimer compressing beside them, three busy threads share the CPUs, and the scheduler
//! places them as it likes. Pinned by hand, the program and the handler on one CPU and the
//! reclaimer on the other, the 1 GiB Zipf run took 9.9-10.4 s against 11.5-13.2 s
//! (docs/benchmarks.md, "The reclaimer beside the program"). `uswap run --cpus` does that,
//! but confines the program.
//!
//! The follower gets the same placement without touching the program's threads: every
//! [`PERIOD`], if one thread made most of the faults the handler served
//! ([`DOMINANT_SHARE`]), the handler moves to the CPU that thread last ran on, and the
//! reclaimer to the others the process may use. When the faults spread over threads, both
//! go back to every CPU the process may use. The program is never moved: the handler
//! follows it to wherever the scheduler puts it.
//!
//! ```text
//!   each fault served   note(thread id)             (a few slots, no allocation)
//!   every 10 ms         one thread >= 3/4 of >= 8 faults?
//!                         yes: its CPU (/proc/self/task/TID/stat, field 39)
//!                              handler -> {cpu}; reclaimer -> allowed - {cpu}
//!                         no:  handler, reclaimer -> allowed (if they were placed)
//! ```
//!
//! Off where the process may use one CPU only, or the reclaimer was given CPUs of its own
//! (`EngineConfig::reclaimer_cpus`), and under SIGBUS delivery, where the faulting thread
//! serves its own fault.

use engine::Engine;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};
use uffd::sys::process;

/// How often the follower looks at the faults served since its last look.
pub(crate) const PERIOD: Duration = Duration::from_millis(10);
/// Fewer faults than this in a period decide nothing (the placement stays).
const FAULTS_MIN: u32 = 8;
/// The share of a period's faults one thread must have made to be followed, as a fraction
/// `numerator / denominator`.
const DOMINANT_SHARE: (u32, u32) = (3, 4);
/// Threads counted apart in a period; the faults of others count in the total only.
const SLOTS: usize = 4;

/// Where the follower counts what it did (the handler's counters: `follow_moves`,
/// `follow_releases`, `follow_failed`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FollowCounters<'a> {
    /// The handler moved to a thread's CPU (and the reclaimer off it).
    pub(crate) moves: &'a AtomicU64,
    /// The handler and reclaimer went back to every allowed CPU.
    pub(crate) releases: &'a AtomicU64,
    /// An affinity change the kernel refused, or a thread whose CPU could not be read.
    pub(crate) failed: &'a AtomicU64,
}

/// The registry's name for a followed thread's stat file.
static TASK_STAT: fds::Kind = fds::Kind {
    what: "thread stat file",
    if_lost: "the handler stops following that thread",
    keep: false,
};

/// The follower's state, kept by the handler thread.
#[derive(Debug)]
pub(crate) struct Follower {
    /// The CPUs the process may use, read when the handler started.
    allowed: Vec<usize>,
    /// `allowed` less the CPU held (a buffer kept, so a move allocates nothing).
    others: Vec<usize>,
    /// The faults of this period: `(thread id, count)`, by first appearance.
    threads: [(u32, u32); SLOTS],
    total: u32,
    since: Instant,
    /// The CPU the handler is held on; `None`: free on `allowed`.
    held: Option<usize>,
    /// The followed thread's stat file, open (`thread_cpu`).
    stat: Option<(u32, fds::ProcFile)>,
}

impl Follower {
    /// A follower, unless the process may use fewer than two CPUs (nothing to choose).
    pub(crate) fn new() -> Option<Follower> {
        let allowed = process::allowed_cpus().ok()?;
        if allowed.len() < 2 {
            return None;
        }
        let mut follower = Follower {
            others: Vec::with_capacity(allowed.len()),
            allowed,
            threads: [(0, 0); SLOTS],
            total: 0,
            since: Instant::now(),
            held: None,
            stat: None,
        };
        // The thread that starts a handler is the program's (the shim's set-up before its
        // main, a forked child's fork hook), the one most often followed after. Its stat file
        // is opened now, while no program code runs beside: an open from the handler thread
        // sits at the lowest free number until it is placed, where a program thread that
        // frees a number and takes it back (a subshell's redirection) can lose its file.
        follower.open_stat(process::gettid());
        Some(follower)
    }

    /// Opens thread `tid`'s stat file (out of the program's way: crate `fds`), in place of
    /// the one held.
    fn open_stat(&mut self, tid: u32) -> Option<()> {
        self.stat = None;
        let path = std::ffi::CString::new(format!("/proc/self/task/{tid}/stat")).ok()?;
        self.stat = Some((tid, fds::ProcFile::open(&path, &TASK_STAT).ok()?));
        Some(())
    }

    /// The CPU thread `tid` last ran on, from its stat file, kept open (out of the
    /// program's way: crate `fds`) while the same thread is followed, and read from offset 0.
    fn thread_cpu(&mut self, tid: u32) -> Option<usize> {
        if self.stat.as_ref().is_none_or(|(held, _)| *held != tid) {
            self.open_stat(tid)?;
        }
        let mut buf = [0u8; 1024];
        let n = self.stat.as_ref()?.1.read_into(&mut buf).ok()?;
        process::stat_cpu(&buf[..n])
    }

    /// Counts a fault of `thread_id` (0: unknown, not counted).
    pub(crate) fn note(&mut self, thread_id: u32) {
        if thread_id == 0 {
            return;
        }
        self.total += 1;
        for slot in &mut self.threads {
            if slot.0 == thread_id || slot.1 == 0 {
                *slot = (thread_id, slot.1 + 1);
                return;
            }
        }
    }

    /// Once a [`PERIOD`] has passed: places the handler (the calling thread) and the
    /// reclaimer by this period's faults (module essay), and starts a new period.
    pub(crate) fn tick(&mut self, engine: &Engine, counters: FollowCounters<'_>) {
        if self.since.elapsed() < PERIOD {
            return;
        }
        let decision = self.decide();
        self.threads = [(0, 0); SLOTS];
        self.total = 0;
        self.since = Instant::now();
        match decision {
            Decision::Keep => {}
            Decision::Follow(tid) => match self.thread_cpu(tid) {
                Some(cpu) if self.held != Some(cpu) && self.allowed.contains(&cpu) => {
                    self.hold(cpu, engine, counters);
                }
                Some(_) => {}
                None => {
                    counters.failed.fetch_add(1, Relaxed);
                }
            },
            Decision::Release if self.held.is_some() => {
                self.held = None;
                let handler = process::set_thread_cpus(0, &self.allowed).is_ok();
                let reclaimer = place_reclaimer(engine, &self.allowed);
                let counter =
                    if handler && reclaimer { counters.releases } else { counters.failed };
                counter.fetch_add(1, Relaxed);
            }
            Decision::Release => {}
        }
    }

    /// Holds the handler on `cpu` and the reclaimer on the other allowed CPUs.
    fn hold(&mut self, cpu: usize, engine: &Engine, counters: FollowCounters<'_>) {
        if process::set_thread_cpus(0, &[cpu]).is_err() {
            counters.failed.fetch_add(1, Relaxed);
            return;
        }
        self.held = Some(cpu);
        self.others.clear();
        self.others.extend(self.allowed.iter().copied().filter(|&other| other != cpu));
        // A reclaimer not started yet, or refused: it stays where it was, counted.
        let moved = place_reclaimer(engine, &self.others);
        let counter = if moved { counters.moves } else { counters.failed };
        counter.fetch_add(1, Relaxed);
    }

    /// What this period's faults ask for.
    fn decide(&self) -> Decision {
        if self.total < FAULTS_MIN {
            return Decision::Keep;
        }
        let (tid, count) =
            self.threads.iter().copied().max_by_key(|&(_, count)| count).unwrap_or((0, 0));
        let (numerator, denominator) = DOMINANT_SHARE;
        if count * denominator >= self.total * numerator {
            Decision::Follow(tid)
        } else {
            Decision::Release
        }
    }
}

/// Moves the engine's reclaimer to `cpus`; false where it has not started or the kernel
/// refused.
fn place_reclaimer(engine: &Engine, cpus: &[usize]) -> bool {
    engine.reclaimer_tid().is_some_and(|tid| process::set_thread_cpus(tid, cpus).is_ok())
}

/// A period's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    /// Too few faults to tell: leave the placement as it is.
    Keep,
    /// One thread made most faults: follow it.
    Follow(u32),
    /// The faults came from several threads: free both threads again.
    Release,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn follower() -> Follower {
        Follower {
            allowed: vec![0, 1],
            others: Vec::new(),
            threads: [(0, 0); SLOTS],
            total: 0,
            since: Instant::now(),
            held: None,
            stat: None,
        }
    }

    #[test]
    fn one_thread_with_most_faults_is_followed() {
        let mut f = follower();
        for _ in 0..7 {
            f.note(100);
        }
        assert_eq!(f.decide(), Decision::Keep, "7 faults decide nothing");
        f.note(100);
        assert_eq!(f.decide(), Decision::Follow(100));
        for _ in 0..2 {
            f.note(200);
        }
        f.note(0);
        assert_eq!(f.decide(), Decision::Follow(100), "8 of 10, unknown threads not counted");
        f.note(200);
        assert_eq!(f.decide(), Decision::Release, "8 of 11 is under 3/4");
        f.note(100);
        assert_eq!(f.decide(), Decision::Follow(100), "9 of 12 is 3/4");
    }

    #[test]
    fn threads_past_the_slots_count_in_the_total_only() {
        let mut f = follower();
        for tid in 1..=SLOTS as u32 + 4 {
            f.note(tid);
        }
        assert_eq!(f.total, SLOTS as u32 + 4);
        assert_eq!(f.threads.iter().map(|s| s.1).sum::<u32>(), SLOTS as u32);
        assert_eq!(f.decide(), Decision::Release, "eight threads, one fault each");
    }
}
