//! The kernel side of `uswap bench auto`: a Senpai-like loop (Meta's TMO) over a memory
//! cgroup with zram lz4 as swap, aiming under the same target as `--budget auto`.
//!
//! ```text
//!   preflight, zram0 lz4 as swap (compare's guards), a memory cgroup with no limit
//!   every sample (50 ms, the broker's tick):
//!     stall   = growth of PSI memory `some` total     (v2: the group's memory.pressure;
//!                                                      v1: /proc/pressure/memory)
//!     budget  = runstat::auto::Controller::tick(stall, used = the group's usage)
//!     limit  <- budget when it moved                  (v1: memory.limit_in_bytes,
//!                                                      v2: memory.high)
//!   teardown: the group, then zram (guards, always)
//! ```
//!
//! The controller is uswap's own, step for step (lower 3% a second from what is used while
//! the loss is under half the target, raise a quarter every 200 ms while over): only the
//! signal differs, which is the comparison. Senpai proper probes every few seconds by a
//! share of the limit; using the same steps keeps the speed of reaction out of it.
//!
//! On cgroup v1 there is no `memory.high` and no per-cgroup PSI. The hard limit is lowered
//! instead: a write below the usage reclaims in the writer's thread until the usage is
//! under it (EBUSY when it cannot: counted, the limit stays). The soft limit
//! (`memory.soft_limit_in_bytes`) would be the gentler knob, but the kernel only reclaims
//! toward it under global memory pressure, which a machine with free memory never has:
//! it would save nothing. The stall is then the whole machine's PSI, which counts other
//! users' memory stalls too; on a machine with memory to spare they are rare, and they
//! would only make this side keep more.

use super::super::compare::cgroup::{self, CgroupVersion, MemCgroup};
use super::super::compare::kernel::{preflight, KernelConfig, KernelSwap};
use super::super::compare::kernel_side::{meminfo_bytes, swap_bytes, KernelEnv};
use super::super::compare::runner::{MemoryProbe, Sample};
use super::super::compare::sys;
use super::super::compare::workloads::{Measured, Placement, RunContext, WorkloadSpec};
use anyhow::{Context, Result};
use runstat::auto::{AutoSpec, Controller, Tick};
use std::cell::RefCell;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

/// What the loop did over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Steering {
    /// Limit writes, and those the kernel refused (EBUSY: it could not reclaim enough).
    pub writes: u64,
    pub refused: u64,
    /// The lowest limit set.
    pub min_limit_bytes: u64,
    /// Raises of the controller.
    pub raises: u64,
}

/// The total of a PSI file's `some` line, microseconds (`some avg10=.. total=N`).
pub fn psi_some_total_us(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace().find_map(|f| f.strip_prefix("total=")?.parse().ok())
}

struct Loop {
    controller: Controller,
    last_total_us: Option<u64>,
    limit_bytes: u64,
    steering: Steering,
}

/// Samples the group and zram, and steers the group's limit (module essay).
struct SenpaiProbe<'a> {
    env: &'a KernelEnv,
    group: &'a MemCgroup<'a>,
    pressure: PathBuf,
    start: Instant,
    state: RefCell<Loop>,
}

impl MemoryProbe for SenpaiProbe<'_> {
    fn sample(&self, _pid: u32) -> Sample {
        let machine = self.env.machine.as_ref();
        let usage = self.group.usage_bytes();
        let stat = machine.read(&self.env.roots.zram("mm_stat")).unwrap_or_default();
        let mut fields = stat.split_whitespace().map(|f| f.parse::<u64>().unwrap_or(0));
        let (orig, compr, used) = (fields.next(), fields.next(), fields.next());
        let text = machine.read(&self.pressure).unwrap_or_default();
        let total_us = psi_some_total_us(&text);
        // What the group holds in all: its usage and what it swapped to zram (the device
        // is the run's alone), for the controller's growth test.
        self.steer(usage, usage + orig.unwrap_or(0), total_us);
        Sample {
            charged_bytes: usage,
            outside_bytes: used.unwrap_or(0),
            original_bytes: orig.unwrap_or(0),
            compressed_bytes: compr.unwrap_or(0),
            ..Sample::default()
        }
    }
}

impl SenpaiProbe<'_> {
    fn steer(&self, usage: u64, footprint: u64, total_us: Option<u64>) {
        let mut state = self.state.borrow_mut();
        let stall_us = match (state.last_total_us, total_us) {
            (Some(last), Some(now)) => now.saturating_sub(last),
            _ => 0,
        };
        state.last_total_us = total_us.or(state.last_total_us);
        let tick = Tick {
            now_ns: self.start.elapsed().as_nanos() as u64,
            stall_ns: stall_us * 1000,
            // The kernel's memory pressure counts a swap-in as a stall only for a page of
            // the workingset: all of it is the thrashing the controller raises for.
            thrash_ns: stall_us * 1000,
            members: 1,
            used: usage,
            footprint,
            floor: 0,
        };
        let budget = state.controller.tick(tick);
        state.steering.raises = state.controller.figures.raises;
        if budget == state.limit_bytes {
            return;
        }
        state.steering.writes += 1;
        match self.group.set_limit(budget) {
            Ok(()) => {
                state.limit_bytes = budget;
                let low = &mut state.steering.min_limit_bytes;
                *low = if *low == 0 { budget } else { (*low).min(budget) };
            }
            Err(_) => state.steering.refused += 1,
        }
    }
}

/// Runs `spec` under the loop (module essay), aiming under `target_percent`, the limit never
/// above `ceiling_bytes`; tears everything down again.
///
/// # Errors
/// A preflight refusal (swap on, zram0 busy), a setup step, the workload's failure, an
/// interrupt. The machine is restored in every case (compare's guards).
pub fn run(
    env: &KernelEnv,
    spec: &WorkloadSpec,
    ctx: &RunContext,
    (target_percent, ceiling_bytes): (f64, u64),
    run_index: usize,
) -> Result<(Measured, Steering)> {
    let machine = env.machine.as_ref();
    let config = KernelConfig::ZramLz4;
    preflight(machine, &env.roots, config)?;
    let swap_file = PathBuf::from(format!("/var/tmp/uswap-bench-{}.swap", std::process::id()));
    let swap =
        KernelSwap::enter(machine, &env.roots, config, swap_bytes(ctx.size_bytes), &swap_file)?;
    let name = format!("uswap-bench-{}-senpai{run_index}", std::process::id());
    let group = MemCgroup::create(machine, &env.parent, &name, None)?;
    let pressure = match group.version() {
        CgroupVersion::V1 => env.roots.proc_file("pressure/memory"),
        CgroupVersion::V2 => group.file("memory.pressure"),
    };
    machine.read(&pressure).with_context(|| format!("no PSI at {}", pressure.display()))?;
    let spec_auto = AutoSpec { target_percent, max_bytes: Some(ceiling_bytes) };
    let probe = SenpaiProbe {
        env,
        group: &group,
        pressure,
        start: Instant::now(),
        state: RefCell::new(Loop {
            controller: Controller::new(spec_auto, ceiling_bytes),
            last_total_us: None,
            limit_bytes: u64::MAX,
            steering: Steering::default(),
        }),
    };
    let procs = group.procs_file();
    let prepare = |command: &mut Command| -> Result<()> {
        sys::join_cgroup_before_exec(command, cgroup::open_procs(&procs)?);
        Ok(())
    };
    let measured = spec.execute(ctx, &Placement { prepare: &prepare, probe: &probe });
    let steering = probe.state.borrow().steering;
    drop(probe);
    drop(group);
    drop(swap);
    Ok((measured?, steering))
}

/// Half of MemAvailable: the ceiling `uswap run --budget auto` takes by default outside a
/// memory cgroup with a limit, used for this side too.
pub fn default_ceiling_bytes() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    meminfo_bytes(&meminfo, "MemAvailable").unwrap_or(1 << 30) / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psi_totals_parse() {
        let text = "some avg10=0.00 avg60=0.00 avg300=0.06 total=96407702\n\
                    full avg10=0.00 avg60=0.00 avg300=0.06 total=59328455\n";
        assert_eq!(psi_some_total_us(text), Some(96_407_702));
        assert_eq!(psi_some_total_us("full total=3\n"), None);
        assert_eq!(psi_some_total_us(""), None);
    }
}
