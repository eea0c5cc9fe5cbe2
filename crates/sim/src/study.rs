//! Studying policies with the simulator: parameter sweeps, and the cluster-policy
//! comparison (docs/benchmarks.md, the simulator's section).
//!
//! A **sweep** runs the same seeds once per combination of the swept values (the cartesian
//! product) and sums the engine's counters per combination. Every other option is the
//! seed's draw, pinned the same way in every cell, so the cells differ only in what is
//! swept. Fault sites are off unless asked for: a study measures policies, not recovery.
//!
//! The **policy comparison** runs the kernel-build workload with each large folio order
//! `k` enabled in turn (the engine maps one folio order; the kernel's per-size mTHP stats
//! are read the same way, one size enabled), under the 6.18 ("current") and the legacy
//! cluster policy, and reports per order the folios swapped out whole (`swpout`) and the
//! ones split because no `2^k` contiguous slots were free (`swpout_fallback`). Order 0
//! never falls back; its row comes from a run with only 4 KiB folios. The device runs
//! 80-95% full (the kbuild workload's fill target), where fragmentation decides. The pool
//! is off unless pinned (the kernel's runs used zram: every page takes slots).

use crate::options::{FaultChoice, Overrides, WorkloadKind};
use crate::report::RunReport;
use slots::AllocPolicy;

/// Studies check the engine's invariants at 1% of quiescent points: they measure, and a
/// check at every point would dominate the time of a big run.
const STUDY_CHECK_PPM: u32 = 10_000;

/// A parameter a sweep can vary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// The slot allocation policy: `current`, `legacy`.
    Policy,
    /// The memory budget, pages.
    Budget,
    /// The folio order 0..=9.
    Order,
    /// The readahead window, pages.
    Readahead,
    /// The swap device, pages.
    Swap,
    /// The compressed pool's share of the budget, percent (0: no pool).
    Pool,
}

impl Param {
    /// Every sweepable parameter.
    pub const ALL: [Param; 6] =
        [Param::Policy, Param::Budget, Param::Order, Param::Readahead, Param::Swap, Param::Pool];

    /// The name used in `--sweep NAME=V1,V2`.
    pub fn name(self) -> &'static str {
        match self {
            Param::Policy => "policy",
            Param::Budget => "budget",
            Param::Order => "order",
            Param::Readahead => "readahead",
            Param::Swap => "swap",
            Param::Pool => "pool",
        }
    }

    /// Pins `value` of this parameter in `o`.
    ///
    /// # Errors
    /// A message naming a value that does not parse.
    pub fn pin(self, o: &mut Overrides, value: &str) -> Result<(), String> {
        let bad = || format!("sweep {}: bad value {value:?}", self.name());
        let number = || value.parse::<u64>().map_err(|_| bad());
        match self {
            Param::Policy => {
                o.policy = Some(match value {
                    "current" => AllocPolicy::Current,
                    "legacy" => AllocPolicy::Legacy,
                    _ => return Err(bad()),
                });
            }
            Param::Budget => o.budget_pages = Some(number()?),
            Param::Order => o.folio_order = Some(u32::try_from(number()?).map_err(|_| bad())?),
            Param::Readahead => {
                o.readahead_max_pages = Some(u32::try_from(number()?).map_err(|_| bad())?);
            }
            Param::Swap => o.swap_pages = Some(number()?),
            Param::Pool => o.pool_percent = Some(u32::try_from(number()?).map_err(|_| bad())?),
        }
        Ok(())
    }
}

/// One swept parameter and its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Axis {
    /// The parameter.
    pub param: Param,
    /// Its values, as given.
    pub values: Vec<String>,
}

/// Parses `NAME=V1,V2,...`.
///
/// # Errors
/// A message for an unknown name or an empty list.
pub fn parse_axis(text: &str) -> Result<Axis, String> {
    let (name, values) =
        text.split_once('=').ok_or(format!("sweep {text:?}: expected NAME=V1,V2"))?;
    let param = Param::ALL.into_iter().find(|p| p.name() == name).ok_or_else(|| {
        let names: Vec<&str> = Param::ALL.iter().map(|p| p.name()).collect();
        format!("sweep parameter {name:?}: expected one of {}", names.join(", "))
    })?;
    let values: Vec<String> =
        values.split(',').filter(|v| !v.is_empty()).map(str::to_string).collect();
    if values.is_empty() {
        return Err(format!("sweep {name}: no values"));
    }
    Ok(Axis { param, values })
}

/// The summed figures of one sweep cell.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CellFigures {
    /// Runs in the cell.
    pub runs: u64,
    /// Runs that failed.
    pub failures: u64,
    /// Operations executed.
    pub ops: u64,
    /// Major faults (swap-ins).
    pub pgmajfault: u64,
    /// Pages written to the device.
    pub pswpout: u64,
    /// Pages read from the device.
    pub pswpin: u64,
    /// Pages stored in the pool.
    pub zswpout: u64,
    /// Pages loaded from the pool.
    pub zswpin: u64,
    /// Pages written back from the pool to the device.
    pub zswpwb: u64,
    /// Zero pages swapped out (nothing stored).
    pub swpout_zero: u64,
    /// Large folios swapped out whole (orders > 0).
    pub swpout_large: u64,
    /// Large folios split at swap-out (orders > 0).
    pub swpout_fallback: u64,
    /// Refaults (a shadow was found).
    pub refaults: u64,
    /// Pages read ahead.
    pub swap_ra: u64,
    /// Faults that reclaimed directly.
    pub allocstall: u64,
    /// Simulated time, microseconds.
    pub sim_us: u64,
}

impl CellFigures {
    fn add(&mut self, r: &RunReport) {
        self.runs += 1;
        self.failures += u64::from(!r.passed());
        self.ops += r.ops;
        self.sim_us += r.sim_time_ns / 1000;
        let Some(s) = &r.stats else { return };
        let c = &s.counters;
        self.pgmajfault += c.pgmajfault;
        self.pswpout += c.pswpout;
        self.pswpin += c.pswpin;
        self.zswpout += c.zswpout;
        self.zswpin += c.zswpin;
        self.zswpwb += c.zswpwb;
        self.swpout_zero += c.swpout_zero;
        self.refaults += c.workingset_refault_anon;
        self.swap_ra += c.swap_ra;
        self.allocstall += c.allocstall;
        self.swpout_large += s.per_order.swpout[1..].iter().sum::<u64>();
        self.swpout_fallback += s.per_order.swpout_fallback[1..].iter().sum::<u64>();
    }

    /// Column names, in [`CellFigures::values`] order.
    pub const COLUMNS: [&'static str; 16] = [
        "runs",
        "failures",
        "ops",
        "pgmajfault",
        "pswpout",
        "pswpin",
        "zswpout",
        "zswpin",
        "zswpwb",
        "swpout_zero",
        "swpout_large",
        "swpout_fallback",
        "refaults",
        "swap_ra",
        "allocstall",
        "sim_us",
    ];

    /// The figures in [`CellFigures::COLUMNS`] order.
    pub fn values(&self) -> [u64; 16] {
        [
            self.runs,
            self.failures,
            self.ops,
            self.pgmajfault,
            self.pswpout,
            self.pswpin,
            self.zswpout,
            self.zswpin,
            self.zswpwb,
            self.swpout_zero,
            self.swpout_large,
            self.swpout_fallback,
            self.refaults,
            self.swap_ra,
            self.allocstall,
            self.sim_us,
        ]
    }
}

/// One cell of a sweep: the swept values, and the figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    /// The value of each axis, in axis order.
    pub values: Vec<String>,
    /// The summed figures.
    pub figures: CellFigures,
}

/// Runs every combination of `axes` over `seeds`, with `base` pinned in every run.
/// `progress` hears about each finished run.
///
/// # Errors
/// A message for a value that does not parse or options out of range.
pub fn sweep(
    base: &Overrides,
    axes: &[Axis],
    seeds: &[u64],
    mut progress: impl FnMut(&RunReport),
) -> Result<Vec<Cell>, String> {
    let mut combos: Vec<Vec<String>> = vec![Vec::new()];
    for axis in axes {
        combos = combos
            .into_iter()
            .flat_map(|c| axis.values.iter().map(move |v| [c.clone(), vec![v.clone()]].concat()))
            .collect();
    }
    let mut cells = Vec::new();
    for values in combos {
        let mut o = base.clone();
        if o.faults == FaultChoice::Swarm {
            o.faults = FaultChoice::None;
        }
        o.check_ppm = o.check_ppm.or(Some(STUDY_CHECK_PPM));
        for (axis, value) in axes.iter().zip(&values) {
            axis.param.pin(&mut o, value)?;
        }
        let mut figures = CellFigures::default();
        for &seed in seeds {
            let report = crate::run_seed(seed, &o)?;
            progress(&report);
            figures.add(&report);
        }
        cells.push(Cell { values, figures });
    }
    Ok(cells)
}

/// The policy comparison's build, unless pinned: 4 jobs of 3000 operations each, a swap
/// device of 32 clusters (64 MiB) and a budget of 4 MiB. About 30 000 objects come and go;
/// live memory is kept at the budget plus 80-95% of the device (the seed's fill), so the
/// device runs that full and every cluster sees allocations of both sizes.
const KBUILD_THREADS: usize = 4;
const KBUILD_OPS: u64 = 3000;
const KBUILD_SWAP_PAGES: u64 = 32 * 512;
const KBUILD_BUDGET_PAGES: u64 = 1024;

/// One row of the policy comparison.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OrderRow {
    /// The folio order.
    pub order: u32,
    /// Folios of this order swapped out whole, current policy.
    pub current_swpout: u64,
    /// Folios of this order split at swap-out, current policy.
    pub current_fallback: u64,
    /// As above, legacy policy.
    pub legacy_swpout: u64,
    /// As above, legacy policy.
    pub legacy_fallback: u64,
    /// Runs that failed (either policy): the figures are then suspect.
    pub failures: u64,
    /// Swap device fill after the warm-up, mean percent (current, legacy; over seeds).
    pub fill_percent: [u64; 2],
}

/// Compares the two cluster policies on the kernel-build workload, one large order at a
/// time (see the module documentation). `base` may pin more (threads, ops, sizes).
///
/// # Errors
/// A message for options out of range.
pub fn compare_policies(
    base: &Overrides,
    orders: &[u32],
    seeds: &[u64],
    mut progress: impl FnMut(&RunReport),
) -> Result<Vec<OrderRow>, String> {
    let mut rows = Vec::new();
    for &order in orders {
        let mut row = OrderRow { order, ..OrderRow::default() };
        for (i, policy) in [AllocPolicy::Current, AllocPolicy::Legacy].into_iter().enumerate() {
            let mut o = base.clone();
            o.workload = Some(WorkloadKind::Kbuild);
            o.folio_order = Some(order);
            o.policy = Some(policy);
            if o.faults == FaultChoice::Swarm {
                o.faults = FaultChoice::None;
            }
            o.check_ppm = o.check_ppm.or(Some(STUDY_CHECK_PPM));
            o.threads = o.threads.or(Some(KBUILD_THREADS));
            o.ops_per_thread = o.ops_per_thread.or(Some(KBUILD_OPS));
            o.swap_pages = o.swap_pages.or(Some(KBUILD_SWAP_PAGES));
            o.budget_pages = o.budget_pages.or(Some(KBUILD_BUDGET_PAGES));
            // The kernel's table ran on zram: every page goes to the device's slots.
            o.pool_percent = o.pool_percent.or(Some(0));
            let (mut swpout, mut fallback, mut fill) = (0, 0, 0);
            for &seed in seeds {
                let r = crate::run_seed(seed, &o)?;
                progress(&r);
                row.failures += u64::from(!r.passed());
                fill += r.swap_fill_percent.0;
                if let Some(s) = &r.stats {
                    swpout += s.per_order.swpout[order as usize];
                    fallback += s.per_order.swpout_fallback[order as usize];
                }
            }
            if i == 0 {
                (row.current_swpout, row.current_fallback) = (swpout, fallback);
            } else {
                (row.legacy_swpout, row.legacy_fallback) = (swpout, fallback);
            }
            row.fill_percent[i] = fill / seeds.len().max(1) as u64;
        }
        rows.push(row);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_parse_and_pin() {
        let axis = parse_axis("order=0,4,9").unwrap();
        assert_eq!((axis.param, axis.values.len()), (Param::Order, 3));
        let mut o = Overrides::default();
        axis.param.pin(&mut o, "4").unwrap();
        assert_eq!(o.folio_order, Some(4));
        assert!(parse_axis("colour=red").unwrap_err().contains("policy"));
        assert!(parse_axis("order=").is_err());
        assert!(Param::Policy.pin(&mut o, "newest").is_err());
    }
}
