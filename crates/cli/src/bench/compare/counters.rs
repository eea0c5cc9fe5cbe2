//! The swap counters of a run, read alike on both sides, and the CPU time of the kernel's
//! reclaim threads.
//!
//! ```text
//!   kernel side   /proc/vmstat                        pswpout pswpin zswpout zswpin zswpwb
//!                 /sys/kernel/mm/transparent_hugepage/hugepages-<size>kB/stats/
//!                                                     swpout swpout_fallback
//!                 read before and after the run: the counters are the deltas
//!   uswap side    `uswap run --stats-file`'s totals  the same names (the engine names its
//!                                                     counters as the kernel does), per size
//!                                                     swpout_<size>kB, swpout_fallback_<size>kB
//! ```
//!
//! The words mean the same on both sides. `pswpout` counts pages written to a swap device:
//! zram is one, so every page the kernel swaps to zram is a `pswpout`; a page zswap stores
//! is a `zswpout` instead, and so is a page stored in uswap's pool, whose swap file takes
//! `pswpout`. Per size, `swpout` counts folios swapped out whole and `swpout_fallback`
//! large folios split first because no run of free slots was found (the seeds' table).
//! The kernel keeps per-size counters for large folios only (there is no directory for
//! 4 KiB): its order-0 swap-outs are in `pswpout` and `zswpout`; uswap counts every order.
//!
//! The kernel's counters are the machine's, not the cgroup's: the deltas are the run's
//! because preflight refuses a machine where another swap is on, so nothing else swaps.
//!
//! The reaped tree's `ru_stime` holds the reclaim its processes did themselves (the
//! kernel's direct reclaim; uswap's engines, which run inside the program), not kswapd's,
//! which runs for the cgroup from a thread of its own; so kswapd's CPU time over the run is
//! read beside it (`/proc/<pid>/stat` of every `kswapd*` thread).

use super::machine::{Machine, Roots};
use super::sys;
use runstat::StatsFile;
use std::collections::BTreeMap;

/// The per-page counters, in report order.
pub const PAGE_COUNTERS: [&str; 5] = ["pswpout", "pswpin", "zswpout", "zswpin", "zswpwb"];

/// One run's swap counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SwapCounters {
    /// [`PAGE_COUNTERS`] by name.
    pub pages: BTreeMap<&'static str, u64>,
    /// Per folio size in KiB: folios swapped out whole, and large ones split first.
    pub by_size: BTreeMap<u64, SizeCounts>,
}

/// `swpout` and `swpout_fallback` of one folio size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SizeCounts {
    pub swpout: u64,
    pub swpout_fallback: u64,
}

impl SwapCounters {
    pub fn get(&self, name: &str) -> u64 {
        self.pages.get(name).copied().unwrap_or(0)
    }

    /// The kernel's counters now (module essay): /proc/vmstat and every per-size stats
    /// directory that exists. `None` when /proc/vmstat cannot be read.
    pub fn read_kernel(machine: &dyn Machine, roots: &Roots) -> Option<SwapCounters> {
        let vmstat = machine.read(&roots.proc_file("vmstat")).ok()?;
        let mut counters = SwapCounters::default();
        for name in PAGE_COUNTERS {
            counters.pages.insert(name, vmstat_value(&vmstat, name).unwrap_or(0));
        }
        let thp = roots.sys.join("kernel/mm/transparent_hugepage");
        for dir in machine.list_dir(&thp) {
            let Some(kib) = size_kib(&dir) else { continue };
            let stat = |file: &str| {
                let text = machine.read(&thp.join(&dir).join("stats").join(file)).ok()?;
                text.trim().parse::<u64>().ok()
            };
            if let (Some(swpout), Some(swpout_fallback)) = (stat("swpout"), stat("swpout_fallback"))
            {
                counters.by_size.insert(kib, SizeCounts { swpout, swpout_fallback });
            }
        }
        Some(counters)
    }

    /// uswap's counters from a `--stats-file` totals (its `name value` lines).
    pub fn from_totals(totals: &StatsFile) -> SwapCounters {
        let mut counters = SwapCounters::default();
        for name in PAGE_COUNTERS {
            counters.pages.insert(name, totals.get(name));
        }
        for name in totals.values.keys() {
            let Some(kib) = name.strip_prefix("swpout_").and_then(size_kib) else { continue };
            let swpout = totals.get(name);
            let swpout_fallback = totals.get(&format!("swpout_fallback_{kib}kB"));
            counters.by_size.insert(kib, SizeCounts { swpout, swpout_fallback });
        }
        counters
    }

    /// `after - self`, counter by counter (a counter that went backwards reads 0).
    pub fn delta(&self, after: &SwapCounters) -> SwapCounters {
        let pages = after
            .pages
            .iter()
            .map(|(&name, &v)| (name, v.saturating_sub(self.get(name))))
            .collect();
        let by_size = after
            .by_size
            .iter()
            .map(|(&kib, now)| {
                let was = self.by_size.get(&kib).copied().unwrap_or_default();
                let counts = SizeCounts {
                    swpout: now.swpout.saturating_sub(was.swpout),
                    swpout_fallback: now.swpout_fallback.saturating_sub(was.swpout_fallback),
                };
                (kib, counts)
            })
            .collect();
        SwapCounters { pages, by_size }
    }

    /// The sizes with a non-zero count, `16kB:12 64kB:3400`; `0` when every one is zero.
    pub fn format_sizes(&self, pick: fn(&SizeCounts) -> u64) -> String {
        let parts: Vec<String> = (self.by_size.iter())
            .filter(|(_, counts)| pick(counts) > 0)
            .map(|(kib, counts)| format!("{kib}kB:{}", pick(counts)))
            .collect();
        if parts.is_empty() {
            "0".into()
        } else {
            parts.join(" ")
        }
    }

    /// The JSON object: the page counters by name, `swpout` and `swpout_fallback` by size.
    pub fn to_json(&self) -> serde_json::Value {
        let mut object = serde_json::Map::new();
        for (name, value) in &self.pages {
            object.insert((*name).into(), (*value).into());
        }
        let sizes = |pick: fn(&SizeCounts) -> u64| -> serde_json::Map<String, serde_json::Value> {
            self.by_size.iter().map(|(kib, c)| (format!("{kib}kB"), pick(c).into())).collect()
        };
        object.insert("swpout".into(), sizes(|c| c.swpout).into());
        object.insert("swpout_fallback".into(), sizes(|c| c.swpout_fallback).into());
        serde_json::Value::Object(object)
    }
}

/// `64` for `64kB` or `hugepages-64kB`.
fn size_kib(name: &str) -> Option<u64> {
    let name = name.strip_prefix("hugepages-").unwrap_or(name);
    name.strip_suffix("kB")?.parse().ok()
}

/// A `/proc/vmstat` line's value (`pswpout 1234`).
fn vmstat_value(vmstat: &str, name: &str) -> Option<u64> {
    vmstat.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The CPU time (user + system) of the kernel's `kswapd*` threads, seconds: read before and
/// after a run, its growth is what background reclaim cost meanwhile. `None` when no such
/// thread is found.
pub fn kswapd_cpu_s(machine: &dyn Machine, roots: &Roots) -> Option<f64> {
    let ticks_per_s = sys::clock_ticks_per_s()? as f64;
    let mut ticks = None;
    for pid in machine.list_dir(&roots.proc) {
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = machine.read(&roots.proc.join(&pid).join("stat")) else { continue };
        if let Some(cpu) = kswapd_ticks(&stat) {
            *ticks.get_or_insert(0) += cpu;
        }
    }
    ticks.map(|t: u64| t as f64 / ticks_per_s)
}

/// `utime + stime` of a `/proc/<pid>/stat` line whose command is `kswapd*`.
fn kswapd_ticks(stat: &str) -> Option<u64> {
    let (head, rest) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1;
    if !comm.starts_with("kswapd") {
        return None;
    }
    // After the command: state, ppid, pgrp, session, tty, tpgid, flags, minflt, cminflt,
    // majflt, cmajflt, utime, stime.
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::super::machine::fake::FakeMachine;
    use super::*;

    fn roots() -> Roots {
        Roots { sys: "/sys".into(), proc: "/proc".into() }
    }

    #[test]
    fn kernel_counters_are_read_and_subtracted() {
        let thp = "/sys/kernel/mm/transparent_hugepage";
        let files = |pswpout: &str, swpout_64: &str, fallback_64: &str| {
            let vmstat = format!(
                "pgfault 9\npswpin 10\npswpout {pswpout}\nzswpin 0\nzswpout 7\nthp_swpout 0\n"
            );
            FakeMachine::with_files(&[
                ("/proc/vmstat", &vmstat),
                (&format!("{thp}/hugepages-64kB/stats/swpout"), swpout_64),
                (&format!("{thp}/hugepages-64kB/stats/swpout_fallback"), fallback_64),
                (&format!("{thp}/hugepages-2048kB/stats/swpout"), "1"),
                (&format!("{thp}/hugepages-2048kB/stats/swpout_fallback"), "0"),
                // A directory without swap stats (file folios only) is left out.
                (&format!("{thp}/hugepages-8kB/stats/shmem_alloc"), "0"),
                (&format!("{thp}/enabled"), "madvise"),
            ])
        };
        let before = SwapCounters::read_kernel(&files("100", "5", "2"), &roots()).unwrap();
        let after = SwapCounters::read_kernel(&files("350", "9", "2"), &roots()).unwrap();
        assert_eq!(after.get("pswpout"), 350);
        assert_eq!(after.by_size.keys().copied().collect::<Vec<_>>(), [64, 2048]);
        let run = before.delta(&after);
        assert_eq!(run.get("pswpout"), 250);
        assert_eq!(run.get("pswpin"), 0);
        assert_eq!(run.get("zswpwb"), 0, "a counter this kernel lacks reads 0");
        assert_eq!(run.by_size[&64], SizeCounts { swpout: 4, swpout_fallback: 0 });
        assert_eq!(run.format_sizes(|c| c.swpout), "64kB:4");
        assert_eq!(run.format_sizes(|c| c.swpout_fallback), "0");
        let json = run.to_json();
        assert_eq!(json["pswpout"], 250);
        assert_eq!(json["swpout"]["64kB"], 4);
        assert_eq!(json["swpout_fallback"]["2048kB"], 0);
        assert_eq!(SwapCounters::read_kernel(&FakeMachine::default(), &roots()), None);
    }

    #[test]
    fn uswap_counters_come_from_its_totals() {
        let text = "# uswap stats v1\npswpout 12\nzswpout 3000\nzswpin 2500\nswpout_4kB 200\n\
                    swpout_64kB 175\nswpout_fallback_64kB 6\nswpout_fallback_4kB 0\n\
                    swpin_64kB 9\nfault_ns \n";
        let totals = StatsFile::parse(text).unwrap();
        let counters = SwapCounters::from_totals(&totals);
        assert_eq!(counters.get("zswpout"), 3000);
        assert_eq!(counters.get("pswpin"), 0);
        assert_eq!(counters.by_size.len(), 2, "swpout_fallback_* and swpin_* are no sizes");
        assert_eq!(counters.by_size[&64], SizeCounts { swpout: 175, swpout_fallback: 6 });
        assert_eq!(counters.format_sizes(|c| c.swpout), "4kB:200 64kB:175");
        assert_eq!(counters.format_sizes(|c| c.swpout_fallback), "64kB:6");
    }

    #[test]
    fn kswapd_threads_are_found_by_name() {
        let line = |pid: u32, comm: &str, utime: u64, stime: u64| {
            format!("{pid} ({comm}) S 2 0 0 0 -1 2129984 0 0 0 0 {utime} {stime} 0 0 20 0 1 0")
        };
        assert_eq!(kswapd_ticks(&line(40, "kswapd0", 3, 250)), Some(253));
        assert_eq!(kswapd_ticks(&line(41, "kcompactd0", 3, 250)), None);
        // A command with a space and a parenthesis still splits at the last one.
        assert_eq!(kswapd_ticks(&line(42, "a) b", 1, 1)), None);
        let machine = FakeMachine::with_files(&[
            ("/proc/40/stat", &line(40, "kswapd0", 3, 250)),
            ("/proc/41/stat", &line(41, "kswapd1", 0, 50)),
            ("/proc/42/stat", &line(42, "bash", 900, 900)),
            ("/proc/vmstat", "pswpin 0"),
        ]);
        let hz = sys::clock_ticks_per_s().unwrap() as f64;
        let seconds = kswapd_cpu_s(&machine, &roots()).unwrap();
        assert!((seconds - 303.0 / hz).abs() < 1e-9, "{seconds}");
        assert_eq!(kswapd_cpu_s(&FakeMachine::default(), &roots()), None);
    }
}
