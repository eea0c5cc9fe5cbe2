//! Idle polling: the program's CPUs kept awake through a burst of faults.
//!
//! ```text
//!   managed program                          uswap run (another process)
//!   thread (CPU 0)      handler (CPU 1)       poller 0 (CPU 0)     poller 1 (CPU 1)
//!   fault: sleeps ───> read, resolve ─────>  page.epoch += 1      (nice 19, pinned, in
//!   CPU 0 would halt;  wake the thread        spinning until no    an autogroup of nice
//!   poller 0 runs      (an IPI to a running   fault for `window`,  19: weight 15, where
//!   instead            vCPU, not a VM exit)   then parked (futex)  nice 0 weighs 1,024)
//! ```
//!
//! Why: a userfault is two cross-CPU wake-ups (the faulting thread wakes the handler, the
//! handler wakes it back) whenever the scheduler puts the two on different CPUs. Waking an
//! idle CPU costs what its idle state costs to leave. In a guest whose idle loop halts at
//! once (`haltpoll.guest_halt_poll_ns=0`) that is a VM exit and the host's wake-up of the
//! vCPU thread: tens of microseconds, against a 2-3 us fault resolution. The kernel's
//! own answer is its idle loop's polling (cpuidle-haltpoll); this is the same done from
//! user space, and only while faults arrive: one thread per CPU of the program's CPU set,
//! pinned, at nice 19, spinning while a fault was resolved within the last `window`,
//! parked on a futex until the next one. docs/benchmarks.md ("Idle polling") has the figures.
//!
//! Why nice 19 and not `SCHED_IDLE`: the scheduler counts a CPU that runs only `SCHED_IDLE`
//! threads as idle when it places a waking thread, so it sent the handler and the faulting
//! thread to the pollers' CPUs, apart from each other: every fault two wake-ups across
//! CPUs. A poller at nice 19 keeps the CPU counted busy, the two stay together more often,
//! and its share against others is the same, which its group's weight decides
//! (docs/benchmarks.md, "Pollers that do not look idle": Zipf 1 GiB under 256 MiB 10.5-10.8
//! s against 11.2-11.7 s in four alternations, fault p50 18-20 against 29-30 us).
//!
//! Why in another process: a poller that is a thread of the managed program keeps the
//! program's address space live on every CPU, and every page-out (a `UFFDIO_MOVE` out of
//! the program) then sends a TLB-flush interrupt to each of them. Measured: 1.8x the TLB
//! shootdowns and a smaller gain. So the pollers run in a process of their own
//! (`uswap run` forks it, in a session of its own whose autogroup has nice 19: a nice value
//! ranks a thread only within its autogroup, and the group's own nice ranks the group), and
//! the processes share one page ([`IdlePage`], a file in the private run
//! directory): the handler's side bumps its epoch after each fault
//! ([`IdlePage::note_faults`]; one atomic increment, and a futex wake once per burst, when
//! the pollers are parked), and the pollers keep their counters there.
//!
//! Cost: CPU time nothing else wanted, for as long as a burst of faults lasts plus one
//! window; counted in [`IdleStats::poll_ns`].
//!
//! Parking, without a lost wake-up: a poller increments `parked`, checks `epoch`, and sleeps
//! in `FUTEX_WAIT` on `epoch` with the value it checked (the kernel compares again before
//! sleeping); the notifier increments `epoch`, then reads `parked` (all `SeqCst`). Either the
//! poller's check sees the new epoch, or the notifier sees it parked and wakes the futex, or
//! the futex's own comparison fails.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};
use uffd::sys::mapping::Mapping;
use uffd::sys::process;

/// The window of [`IdlePolling::auto`]: as long as the kernel's haltpoll polls by default.
pub const DEFAULT_WINDOW: Duration = Duration::from_micros(200);
/// [`IdlePolling::auto`] polls only on CPU sets of at most this many CPUs: on a larger
/// machine the program's threads may run on any of many CPUs, and a poller on each would
/// burn many of them for a gain on few.
pub const AUTO_MAX_CPUS: usize = 8;
/// The longest window accepted (a poller spinning longer is a CPU lost, not a wake-up
/// saved).
pub const MAX_WINDOW: Duration = Duration::from_millis(100);

/// Whether and how to poll (see the module essay).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdlePolling {
    /// No pollers.
    Off,
    /// Poll for `window` after each fault on every CPU of the process's CPU set when it has
    /// 2 to [`AUTO_MAX_CPUS`] CPUs, else not at all.
    Auto {
        /// How long after the last fault the pollers spin.
        window: Duration,
    },
    /// Poll for `window` after each fault on every CPU of the process's CPU set (with one
    /// CPU: none, there is no other CPU to wake).
    On {
        /// How long after the last fault the pollers spin.
        window: Duration,
    },
}

impl IdlePolling {
    /// The CPUs to poll on, given the program's CPU set (empty: no pollers).
    pub fn cpus(self, allowed: Vec<usize>) -> Vec<usize> {
        match self {
            IdlePolling::Off => Vec::new(),
            _ if allowed.len() < 2 => Vec::new(),
            IdlePolling::Auto { .. } if allowed.len() > AUTO_MAX_CPUS => Vec::new(),
            IdlePolling::Auto { .. } | IdlePolling::On { .. } => allowed,
        }
    }

    /// How long the pollers spin after the last fault (zero when off).
    pub fn window(self) -> Duration {
        match self {
            IdlePolling::Off => Duration::ZERO,
            IdlePolling::Auto { window } | IdlePolling::On { window } => window,
        }
    }
}

/// Written as `off`, `auto:US` or `on:US` (US: the window in microseconds); read from those,
/// and from `auto` and `on` (the default window).
impl std::fmt::Display for IdlePolling {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IdlePolling::Off => write!(f, "off"),
            IdlePolling::Auto { window } => write!(f, "auto:{}", window.as_micros()),
            IdlePolling::On { window } => write!(f, "on:{}", window.as_micros()),
        }
    }
}

impl std::str::FromStr for IdlePolling {
    type Err = String;

    fn from_str(text: &str) -> Result<IdlePolling, String> {
        let (mode, window) = match text.split_once(':') {
            Some((mode, us)) => {
                let not_a_number = || format!("{text}: {us} is not a number of microseconds");
                let us: u64 = us.parse().map_err(|_| not_a_number())?;
                if us == 0 || us > MAX_WINDOW.as_micros() as u64 {
                    return Err(format!(
                        "{text}: use a window of 1..={} microseconds",
                        MAX_WINDOW.as_micros()
                    ));
                }
                (mode, Duration::from_micros(us))
            }
            None => (text, DEFAULT_WINDOW),
        };
        match mode {
            "off" if text == "off" => Ok(IdlePolling::Off),
            "auto" => Ok(IdlePolling::Auto { window }),
            "on" => Ok(IdlePolling::On { window }),
            _ => Err(format!("{text}: use auto, on or off (auto:US, on:US for a window)")),
        }
    }
}

/// Counters of the pollers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IdleStats {
    /// Poller threads (one per CPU polled).
    pub pollers: u64,
    /// Time spent spinning, summed over the pollers, in nanoseconds.
    pub poll_ns: u64,
    /// Times a poller started spinning (woken by a fault after its window ran out).
    pub episodes: u64,
    /// Times the program's side woke parked pollers.
    pub wakes: u64,
    /// Pollers that could not pin themselves or take nice 19 (they exited: unpinned or
    /// at nice 0 they would take CPU time from the program).
    pub setup_errors: u64,
}

/// One page shared between the pollers and the program's handler (module essay), and the
/// pollers' counters, readable by whoever maps it:
///
/// ```text
///   0 epoch (u32, the futex word: bumped after every fault resolved)   4 parked (u32)
///   8 wakes (the notifier's futex wakes)   16 stop (u32)   24 poll_ns   32 episodes
///  40 setup_errors   48 pollers started
/// ```
#[derive(Debug)]
pub struct IdlePage {
    /// The page (the mapping holds the file: no descriptor is kept, none for a program
    /// inside `uswap run` to close or reuse).
    map: Mapping,
}

impl IdlePage {
    /// Creates the page as a new file at `path` (which must not exist) and maps it.
    ///
    /// # Errors
    /// The file cannot be created, sized or mapped.
    pub fn create(path: &Path) -> std::io::Result<IdlePage> {
        let file =
            std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
        file.set_len(uffd::PAGE_SIZE as u64)?;
        IdlePage::map(file)
    }

    /// Maps the page another process created at `path`.
    ///
    /// # Errors
    /// The file cannot be opened or mapped, or is not a page long.
    pub fn open(path: &Path) -> std::io::Result<IdlePage> {
        let file = std::fs::OpenOptions::new().read(true).write(true).open(path)?;
        if file.metadata()?.len() != uffd::PAGE_SIZE as u64 {
            return Err(std::io::Error::other(format!("{} is not one page", path.display())));
        }
        IdlePage::map(file)
    }

    fn map(file: File) -> std::io::Result<IdlePage> {
        let map = Mapping::shared_file(file.as_fd(), uffd::PAGE_SIZE)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        drop(file);
        Ok(IdlePage { map })
    }

    fn epoch(&self) -> &AtomicU32 {
        self.map.atomic_u32(0)
    }

    fn parked(&self) -> &AtomicU32 {
        self.map.atomic_u32(4)
    }

    fn wakes(&self) -> &AtomicU64 {
        self.map.atomic_u64(8)
    }

    fn stop_flag(&self) -> &AtomicU32 {
        self.map.atomic_u32(16)
    }

    fn counter(&self, which: Counter) -> &AtomicU64 {
        self.map.atomic_u64(24 + 8 * which as usize)
    }

    fn stopped(&self) -> bool {
        self.stop_flag().load(SeqCst) != 0
    }

    /// Tells every poller on this page to end (they see it within a window; parked ones are
    /// woken). Context: any thread or process that maps the page.
    pub fn stop(&self) {
        self.stop_flag().store(1, SeqCst);
        // The bump wakes parked pollers, which then see the flag (the module essay's
        // parking protocol: no wake-up is lost).
        self.note_faults();
    }

    /// The pollers' counters, as the page holds them.
    pub fn stats(&self) -> IdleStats {
        IdleStats {
            pollers: self.counter(Counter::Pollers).load(Relaxed),
            poll_ns: self.counter(Counter::PollNs).load(Relaxed),
            episodes: self.counter(Counter::Episodes).load(Relaxed),
            wakes: self.wakes().load(Relaxed),
            setup_errors: self.counter(Counter::SetupErrors).load(Relaxed),
        }
    }

    /// A fault was resolved: spinning pollers keep spinning, parked ones start.
    /// Context: any thread; no allocation, no lock (a futex wake when pollers are parked).
    pub fn note_faults(&self) {
        self.epoch().fetch_add(1, SeqCst);
        if self.parked().load(SeqCst) > 0 {
            process::futex_wake_all(self.epoch());
            self.wakes().fetch_add(1, Relaxed);
        }
    }
}

/// The pollers' counters in the page, by slot.
#[derive(Debug, Clone, Copy)]
enum Counter {
    PollNs = 0,
    Episodes = 1,
    SetupErrors = 2,
    Pollers = 3,
}

/// The poller threads; stopped (through the page) and joined on drop.
#[derive(Debug)]
pub struct Pollers {
    page: Arc<IdlePage>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Pollers {
    /// Starts one poller per CPU in `cpus` ([`IdlePolling::cpus`]) on `page`, each spinning
    /// for `window` after the last fault, until [`IdlePage::stop`].
    ///
    /// # Errors
    /// A thread cannot be started (those started are stopped).
    pub fn spawn(
        page: Arc<IdlePage>,
        cpus: &[usize],
        window: Duration,
    ) -> std::io::Result<Pollers> {
        let mut pollers = Pollers { page, threads: Vec::with_capacity(cpus.len()) };
        for &cpu in cpus {
            let page = pollers.page.clone();
            let thread = std::thread::Builder::new()
                .name("uswap-poll".into())
                .stack_size(64 << 10)
                .spawn(move || poll(&page, cpu, window))?;
            pollers.threads.push(thread);
            pollers.page.counter(Counter::Pollers).fetch_add(1, Relaxed);
        }
        Ok(pollers)
    }

    /// Waits until the pollers end (someone calls [`IdlePage::stop`]).
    pub fn join(mut self) {
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for Pollers {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.page.stop();
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// One poller: pinned to `cpu`, at nice 19, parked until a fault, spinning until none for
/// `window`.
fn poll(page: &IdlePage, cpu: usize, window: Duration) {
    if process::pin_to_cpu(cpu).and_then(|()| process::set_lowest_nice()).is_err() {
        page.counter(Counter::SetupErrors).fetch_add(1, Relaxed);
        return;
    }
    let (epoch, parked) = (page.epoch(), page.parked());
    let mut seen = epoch.load(SeqCst);
    while !page.stopped() {
        parked.fetch_add(1, SeqCst);
        if epoch.load(SeqCst) == seen {
            process::futex_wait(epoch, seen);
        }
        parked.fetch_sub(1, SeqCst);
        if epoch.load(SeqCst) == seen {
            continue; // a spurious return
        }
        page.counter(Counter::Episodes).fetch_add(1, Relaxed);
        let mut last_fault = Instant::now();
        let mut accounted = last_fault;
        loop {
            // No `spin_loop` hint: a stream of PAUSEs can trip a hypervisor's pause-loop
            // exiting, which deschedules the vCPU, the halt this avoids; the hint buys nothing
            // measurable here (docs/benchmarks.md, "Idle polling").
            let now_epoch = epoch.load(Relaxed);
            let now = Instant::now();
            if now_epoch != seen {
                (seen, last_fault) = (now_epoch, now);
            }
            let done = now.duration_since(last_fault) >= window || page.stopped();
            // Accounted every millisecond, so a long burst shows while it lasts.
            if done || now.duration_since(accounted) >= Duration::from_millis(1) {
                let ns = now.duration_since(accounted).as_nanos();
                let ns = u64::try_from(ns).unwrap_or(u64::MAX);
                page.counter(Counter::PollNs).fetch_add(ns, Relaxed);
                accounted = now;
            }
            if done {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_polls_small_cpu_sets_only() {
        let window = DEFAULT_WINDOW;
        assert_eq!(IdlePolling::Auto { window }.cpus(vec![3]), Vec::<usize>::new());
        assert_eq!(IdlePolling::Auto { window }.cpus(vec![0, 1]), vec![0, 1]);
        let many: Vec<usize> = (0..=AUTO_MAX_CPUS).collect();
        assert!(IdlePolling::Auto { window }.cpus(many.clone()).is_empty());
        assert_eq!(IdlePolling::On { window }.cpus(many.clone()), many);
        assert!(IdlePolling::On { window }.cpus(vec![0]).is_empty());
        assert!(IdlePolling::Off.cpus(vec![0, 1]).is_empty());
    }

    #[test]
    fn polling_round_trips_through_text_and_refuses_bad_input() {
        let window = DEFAULT_WINDOW;
        for polling in [
            IdlePolling::Off,
            IdlePolling::Auto { window },
            IdlePolling::On { window: Duration::from_micros(50) },
        ] {
            assert_eq!(polling.to_string().parse::<IdlePolling>(), Ok(polling));
        }
        assert_eq!("on".parse(), Ok(IdlePolling::On { window: DEFAULT_WINDOW }));
        for bad in ["", "yes", "off:5", "auto:", "auto:0", "on:x", "on:100001", "auto:-1"] {
            assert!(bad.parse::<IdlePolling>().is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn pollers_spin_after_a_fault_and_park_after_the_window() {
        let cpus = process::allowed_cpus().unwrap();
        let dir = tempfile::Builder::new().prefix("uswap-idle-test-").tempdir().unwrap();
        let path = dir.path().join("idle");
        let page = Arc::new(IdlePage::create(&path).unwrap());
        assert!(IdlePage::create(&path).is_err(), "an existing file is not taken over");
        let program = IdlePage::open(&path).unwrap(); // the other process's mapping
        let window = Duration::from_millis(20);
        let pollers = Pollers::spawn(page.clone(), &cpus[..cpus.len().min(2)], window).unwrap();
        // Parked before any fault: no episode, no spinning. Waited for: a poller at nice 19
        // on a busy machine may start long after its spawn, and one that first reads the
        // epoch after `note_faults` below waits for the next fault (harmless in a run, a
        // burst missed; here the test would wait for an episode that never comes).
        let deadline = Instant::now() + Duration::from_secs(30);
        let all_parked = || u64::from(page.parked().load(SeqCst)) == page.stats().pollers;
        while !all_parked() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(all_parked(), "pollers never parked: {:?}", page.stats());
        let before = page.stats();
        assert_eq!((before.episodes, before.poll_ns, before.setup_errors), (0, 0, 0));
        // Each poller at nice 19 under the normal policy, not SCHED_IDLE, whose CPUs the
        // scheduler counts as idle when it places waking threads (module essay).
        let pollers_seen = std::fs::read_dir("/proc/self/task").unwrap().flatten().filter(|t| {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if comm.trim() != "uswap-poll" {
                return false;
            }
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap();
            // The fields after the command's closing parenthesis: state is field 3.
            let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
            let (nice, policy) = (fields[19 - 3], fields[41 - 3]);
            assert_eq!((nice, policy), ("19", "0"), "nice and policy (SCHED_OTHER is 0)");
            true
        });
        let seen = pollers_seen.count() as u64;
        assert!(seen > 0 && seen == before.pollers, "{seen} pollers seen, {before:?}");
        program.note_faults();
        // Every poller spins one window (a little more), then parks again. Waited for with
        // a deadline, not a sleep: at nice 19 a poller gets little of a CPU that others
        // want, which a busy test run may delay.
        let parked_again = |stats: &IdleStats| {
            stats.episodes == stats.pollers
                && u64::from(page.parked().load(SeqCst)) == stats.pollers
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut after = page.stats();
        while !parked_again(&after) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            after = page.stats();
        }
        assert!(parked_again(&after), "{after:?}");
        assert!(after.wakes >= 1, "{after:?}");
        let window_ns = window.as_nanos() as u64;
        assert!(after.poll_ns >= after.pollers * window_ns, "{after:?}");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(page.stats(), after, "parked pollers stay parked");
        drop(pollers); // joins: a poller that did not see the stop would hang here
    }
}
