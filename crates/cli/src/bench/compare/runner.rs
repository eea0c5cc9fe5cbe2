//! Running one workload process while sampling memory: shared by both sides.
//!
//! ```text
//!   spawn (placement hook: join the cgroup / wrap in `uswap run`)
//!     |
//!     +-- every 50 ms: probe.sample()  ->  samples (for the charts)
//!     |                interrupted?    ->  SIGKILL the child, return Interrupted
//!     |                wait4(WNOHANG)  ->  exit code + rusage (faults, max RSS)
//!     v
//!   Finished { wall_s, exit, stdout, samples }
//! ```
//!
//! The child's stdout is read by a thread (a full pipe would stall the child), bounded
//! to 1 MiB. The run is bounded in time too: past `timeout` the child is killed.

use super::sys::{self, Exit};
use anyhow::{bail, Context, Result};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How often memory is sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(50);
/// The most stdout kept from a workload (its report is one line).
const STDOUT_LIMIT_BYTES: u64 = 1 << 20;

/// Memory at one instant of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    /// Seconds since the workload started.
    pub t_s: f64,
    /// Memory charged to the run (its cgroup's usage; for uswap without a cgroup, its
    /// process tree's resident set).
    pub charged_bytes: u64,
    /// Memory the run uses that is not in `charged_bytes` (zram's pool; uswap's swap file
    /// in the page cache when no cgroup charges it).
    pub outside_bytes: u64,
    /// Compressed bytes stored by the swap.
    pub compressed_bytes: u64,
    /// Uncompressed bytes those stand for.
    pub original_bytes: u64,
    /// Kernel side: bytes of the objects in the swap's own slab caches (kernel_side).
    pub slab_bytes: u64,
    /// uswap side: its process tree's VmRSS + VmPTE (file pages included), whatever
    /// `charged_bytes` is measured by.
    pub tree_rss_bytes: u64,
    /// uswap side: its swap files' pages in the page cache, whoever is charged for them.
    pub file_cache_bytes: u64,
    /// Anonymous memory charged to the run's cgroup (0 without one).
    pub anon_bytes: u64,
}

/// Reads the memory of a running configuration.
pub trait MemoryProbe {
    /// One sample of the run whose first process is `pid` (its `t_s` is filled in by the
    /// runner).
    fn sample(&self, pid: u32) -> Sample;
}

/// What a finished process left.
#[derive(Debug, Clone)]
pub struct Finished {
    pub wall_s: f64,
    /// When the process was spawned, seconds since the Unix epoch (to place what the
    /// program reports by the wall clock on the samples' time line).
    pub started_unix_s: f64,
    pub exit: Exit,
    pub stdout: String,
    pub samples: Vec<Sample>,
}

/// The run was stopped by SIGINT/SIGTERM.
#[derive(Debug)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "interrupted")
    }
}

impl std::error::Error for Interrupted {}

/// Spawns `command`, samples `probe` until it exits, and reaps it with its rusage.
///
/// # Errors
/// Spawn failure; [`Interrupted`] (the child is killed first); a run past `timeout`.
pub fn run_program(
    mut command: Command,
    probe: &dyn MemoryProbe,
    timeout: Duration,
) -> Result<Finished> {
    command.stdout(Stdio::piped()).stdin(Stdio::null());
    let start = Instant::now();
    let started_unix_s = unix_now_s();
    let mut child = command.spawn().with_context(|| format!("spawn {command:?}"))?;
    let pid = child.id();
    let mut stdout = child.stdout.take().context("no stdout pipe")?;
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = (&mut stdout).take(STDOUT_LIMIT_BYTES).read_to_string(&mut text);
        text
    });
    let (exit, samples) = supervise(pid, probe, start, timeout)?;
    let wall_s = start.elapsed().as_secs_f64();
    let stdout = reader.join().unwrap_or_default();
    Ok(Finished { wall_s, started_unix_s, exit, stdout, samples })
}

/// Seconds since the Unix epoch.
pub fn unix_now_s() -> f64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(0.0, |d| d.as_secs_f64())
}

/// Samples until `pid` exits; kills it on interrupt or timeout.
///
/// # Errors
/// [`Interrupted`], a timeout, or a `wait4` failure.
pub fn supervise(
    pid: u32,
    probe: &dyn MemoryProbe,
    start: Instant,
    timeout: Duration,
) -> Result<(Exit, Vec<Sample>)> {
    let mut samples = Vec::new();
    loop {
        let mut sample = probe.sample(pid);
        sample.t_s = start.elapsed().as_secs_f64();
        samples.push(sample);
        if let Some(exit) = sys::try_wait(pid).context("wait4")? {
            return Ok((exit, samples));
        }
        if sys::interrupted() {
            kill_and_reap(pid);
            return Err(Interrupted.into());
        }
        if start.elapsed() > timeout {
            kill_and_reap(pid);
            bail!("the workload ran past the {timeout:?} limit and was killed");
        }
        std::thread::sleep(SAMPLE_EVERY);
    }
}

/// SIGKILLs `pid` and reaps it (bounded wait: 10 s).
pub fn kill_and_reap(pid: u32) {
    sys::kill(pid, sys::SIGKILL);
    for _ in 0..200 {
        if !matches!(sys::try_wait(pid), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Ends a server with SIGTERM, then SIGKILL after `grace`, and returns its exit.
pub fn stop_server(pid: u32, grace: Duration) -> Option<Exit> {
    sys::kill(pid, sys::SIGTERM);
    let start = Instant::now();
    while start.elapsed() < grace {
        match sys::try_wait(pid) {
            Ok(Some(exit)) => return Some(exit),
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => return None,
        }
    }
    sys::kill(pid, sys::SIGKILL);
    for _ in 0..100 {
        if let Ok(Some(exit)) = sys::try_wait(pid) {
            return Some(exit);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Zero;
    impl MemoryProbe for Zero {
        fn sample(&self, _pid: u32) -> Sample {
            Sample::default()
        }
    }

    #[test]
    fn a_program_is_run_sampled_and_reaped() {
        let mut command = Command::new("sh");
        command.args(["-c", "echo hello; sleep 0.2; exit 4"]);
        let finished = run_program(command, &Zero, Duration::from_secs(20)).unwrap();
        assert_eq!(finished.exit.code, 4);
        assert_eq!(finished.stdout.trim(), "hello");
        assert!(finished.samples.len() >= 3, "{} samples", finished.samples.len());
        assert!(finished.wall_s >= 0.2);
        let times: Vec<f64> = finished.samples.iter().map(|s| s.t_s).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn a_run_past_its_limit_is_killed() {
        let mut command = Command::new("sleep");
        command.arg("30");
        let start = Instant::now();
        let error = run_program(command, &Zero, Duration::from_millis(200)).unwrap_err();
        assert!(error.to_string().contains("limit"), "{error}");
        assert!(start.elapsed() < Duration::from_secs(10));
    }
}
