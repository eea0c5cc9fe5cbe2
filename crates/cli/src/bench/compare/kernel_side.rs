//! One workload under one kernel configuration, from setup to teardown.
//!
//! ```text
//!   KernelEnv::open      root? memory cgroup? exclusive lock (one harness at a time)
//!   run_kernel:
//!     preflight          no swap active, zram0 free / zswap off
//!     KernelSwap::enter  zram or zswap + swap file           (guard 1)
//!                        /proc/vmallocinfo read before and after: the swap tables
//!                        it allocated (see below)
//!     MemCgroup::create  limit = budget                       (guard 2)
//!     execute            workload joins the cgroup before exec; sampled every 50 ms
//!                        (charge, anonymous charge, store); /proc/vmstat, the per-size
//!                        swap stats and kswapd's CPU time read before and after
//!     peaks              cgroup peak + zram mem_used_max + swap tables
//!                        (+ compressed/original peaks, the anonymous peak)
//!     drop guard 2, then guard 1                              (teardown, always)
//! ```
//!
//! The swap tables: what setting up the swap device allocated outside every cgroup, in
//! `vmalloc` space, where `/proc/vmallocinfo` names each area's caller and its pages. On
//! 6.18 with a 1.6 GiB device: zram's table (`disksize_store`, 16 bytes a slot: 1,600
//! pages), `swapon`'s count map (`__do_sys_swapon`, a byte a slot: 100 pages) and the
//! memory cgroup's swap owner map (`swap_cgroup_swapon`, two bytes a slot: 200 pages). The
//! uswap side pays its own such tables inside its resident set, so the kernel's count in
//! its peak too. Only areas that appeared during the setup and whose caller names swap or
//! zram are counted. `None` where vmallocinfo cannot be read.
//!
//! The swap's slab objects: what the kernel allocates from slabs as it stores pages,
//! outside every cgroup, for zsmalloc's handles (8 bytes an object: `zs_handle-zram0`)
//! and zspage descriptors (`zspage-zram0`, 56 bytes) and zswap's entries (`zswap_entry`).
//! The uswap side's equivalents are in its charge. Those caches are merged with others of
//! the same object size (`/sys/kernel/slab/zs_handle-zram0 -> :0000008`), so what is
//! counted is the growth of the merged caches' objects in use, times the object size:
//! sampled with the rest, from right after the setup to the run's highest sample. A zram
//! run of 1 GiB under 256 MiB grows them by a few megabytes; what other users allocate in the same
//! caches meanwhile is in the figure too, and is small on an idle machine. The swap cache
//! of 6.18 (its cluster tables) is not counted. `None` where /sys/kernel/slab cannot be
//! read.
use super::cgroup::{self, CgroupParent, CgroupVersion, MemCgroup};
use super::counters::{kswapd_cpu_s, SwapCounters};
use super::kernel::{preflight, KernelConfig, KernelSwap};
use super::machine::{Machine, Roots};
use super::outcome::{anon_peak, stored_peaks, Meter, RunOutcome};
use super::runner::{MemoryProbe, Sample};
use super::sys;
use super::workloads::{Placement, RunContext, WorkloadSpec};
use anyhow::{bail, Context, Result};
use std::fs::File;
use std::path::PathBuf;
use std::process::Command;

/// Where the exclusive lock of the kernel side lives.
const LOCK_PATH: &str = "/tmp/uswap-bench-compare.lock";
/// Slack added to the swap space beyond the working set.
const SWAP_SLACK_BYTES: u64 = 64 << 20;

/// What the kernel side needs for all its runs.
pub struct KernelEnv {
    pub machine: Box<dyn Machine>,
    pub roots: Roots,
    pub parent: CgroupParent,
    /// Held for the whole comparison: two harnesses must not share zram0.
    _lock: File,
}

impl KernelEnv {
    /// Checks that the kernel side can run here and takes the lock.
    ///
    /// # Errors
    /// A sentence for the report's note: not root, no memory cgroup, lock held.
    pub fn open(machine: Box<dyn Machine>, roots: Roots) -> Result<Self> {
        if !sys::is_root() {
            bail!("the kernel side needs root (swapon, zram, cgroups)");
        }
        let parent = cgroup::locate(machine.as_ref(), &roots)?;
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(LOCK_PATH)
            .with_context(|| format!("open {LOCK_PATH}"))?;
        if !sys::try_lock_exclusive(&lock)? {
            bail!("another `uswap bench compare` holds {LOCK_PATH}");
        }
        if let Some(undone) = super::kernel::recover(machine.as_ref(), &roots)? {
            eprintln!("uswap: undid {undone}, left by a harness that was killed");
        }
        Ok(KernelEnv { machine, roots, parent, _lock: lock })
    }
}

/// Reads a configuration's memory: the cgroup's charge and the swap's store.
struct KernelProbe<'a> {
    env: &'a KernelEnv,
    group: &'a MemCgroup<'a>,
    config: KernelConfig,
    slabs: SwapSlabs,
}

/// Names of the swap's own slab caches begin so (module documentation): zsmalloc's
/// per-pool caches (`zs_handle-zram0`, `zspage-zram0`, and those of zswap's pool) and
/// zswap's entries.
const SWAP_SLAB_PREFIXES: [&str; 3] = ["zs_handle-", "zspage-", "zswap_entry"];

/// The swap's slab caches, each the (merged) cache directory its name resolves to, once,
/// with its object size (read once: a cache's objects never change size).
struct SwapSlabs {
    caches: Vec<(PathBuf, Option<u64>)>,
}

impl SwapSlabs {
    /// The caches that exist now (call it after the swap is set up: zswap makes its pool's
    /// when it is enabled).
    fn find(machine: &dyn Machine, roots: &Roots) -> SwapSlabs {
        let slab = roots.sys.join("kernel/slab");
        let mut caches: Vec<PathBuf> = machine
            .list_dir(&slab)
            .into_iter()
            .filter(|name| SWAP_SLAB_PREFIXES.iter().any(|prefix| name.starts_with(prefix)))
            .map(|name| machine.resolve(&slab.join(name)))
            .collect();
        caches.sort();
        caches.dedup();
        let caches = caches
            .into_iter()
            .map(|dir| {
                let size = slab_number(machine, &dir, "object_size");
                (dir, size)
            })
            .collect();
        SwapSlabs { caches }
    }

    /// Bytes of the objects in use in the caches now (`objects` x `object_size`); `None`
    /// when there are none or one cannot be read.
    fn bytes(&self, machine: &dyn Machine) -> Option<u64> {
        if self.caches.is_empty() {
            return None;
        }
        let bytes = |(dir, size): &(PathBuf, Option<u64>)| {
            Some(slab_number(machine, dir, "objects")? * (*size)?)
        };
        self.caches.iter().map(bytes).sum()
    }
}

/// The first number of a slab cache's sysfs file (`objects` reads `1234 N0=1234`).
fn slab_number(machine: &dyn Machine, dir: &std::path::Path, file: &str) -> Option<u64> {
    let text = machine.read(&dir.join(file)).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// zram's `mm_stat`: orig_data_size compr_data_size mem_used_total mem_limit
/// mem_used_max same_pages pages_compacted huge_pages ...
fn parse_mm_stat(text: &str) -> Option<[u64; 5]> {
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().ok());
    let mut out = [0; 5];
    for slot in &mut out {
        *slot = fields.next()??;
    }
    Some(out)
}

/// Bytes of the `vmalloc` areas in `after` (a `/proc/vmallocinfo`) that are not in `before`
/// and that a swap or zram function allocated (module documentation): each area's
/// `pages=N`, 4 KiB a page.
fn swap_tables_bytes(before: &str, after: &str) -> u64 {
    let existing: std::collections::HashSet<&str> =
        before.lines().filter_map(|line| line.split_whitespace().next()).collect();
    let pages = after.lines().filter_map(|line| {
        let mut fields = line.split_whitespace();
        let range = fields.next()?;
        let _size = fields.next()?;
        let caller = fields.next()?.split('+').next()?;
        let swap = caller.contains("swap") || caller.contains("zram") || caller == "disksize_store";
        if !swap || existing.contains(range) {
            return None;
        }
        fields.find_map(|f| f.strip_prefix("pages=")?.parse::<u64>().ok())
    });
    pages.sum::<u64>() * backend::PAGE_SIZE as u64
}

/// A `/proc/meminfo` (or `/proc/PID/status`) line's value in bytes (`Zswap:  1234 kB`).
pub fn meminfo_bytes(meminfo: &str, key: &str) -> Option<u64> {
    meminfo.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?.strip_prefix(':')?;
        rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok().map(|kib| kib * 1024)
    })
}

impl MemoryProbe for KernelProbe<'_> {
    fn sample(&self, _pid: u32) -> Sample {
        let machine = self.env.machine.as_ref();
        let mut sample = Sample {
            charged_bytes: self.group.usage_bytes(),
            anon_bytes: self.group.anon_bytes().unwrap_or(0),
            slab_bytes: self.slabs.bytes(machine).unwrap_or(0),
            ..Sample::default()
        };
        if self.config.is_zram() {
            let stat = machine.read(&self.env.roots.zram("mm_stat")).unwrap_or_default();
            if let Some([orig, compr, used, _, _]) = parse_mm_stat(&stat) {
                sample.original_bytes = orig;
                sample.compressed_bytes = compr;
                sample.outside_bytes = used;
            }
        } else {
            let meminfo = machine.read(&self.env.roots.proc_file("meminfo")).unwrap_or_default();
            sample.compressed_bytes = meminfo_bytes(&meminfo, "Zswap").unwrap_or(0);
            sample.original_bytes = meminfo_bytes(&meminfo, "Zswapped").unwrap_or(0);
            // v1 does not charge the pool to the cgroup (kernel.rs essay).
            if self.group.version() == CgroupVersion::V1 {
                sample.outside_bytes = sample.compressed_bytes;
            }
        }
        sample
    }
}

/// The room the kernel side's swap device (zram's disksize, or the swap file) gets for a
/// workload of `size_bytes`: more than any workload swaps out.
pub fn swap_bytes(size_bytes: u64) -> u64 {
    size_bytes + size_bytes / 2 + SWAP_SLACK_BYTES
}

/// Runs `spec` under `config` and tears everything down again.
///
/// # Errors
/// A preflight refusal, a setup step, the workload's failure, an interrupt. The
/// machine is restored in every case (guards).
pub fn run_kernel(
    env: &KernelEnv,
    config: KernelConfig,
    spec: &WorkloadSpec,
    ctx: &RunContext,
    run_index: usize,
) -> Result<RunOutcome> {
    let machine = env.machine.as_ref();
    preflight(machine, &env.roots, config)?;
    let swap_bytes = swap_bytes(ctx.size_bytes);
    let swap_file = PathBuf::from(format!("/var/tmp/uswap-bench-{}.swap", std::process::id()));
    let vmalloc_before = machine.read(&env.roots.proc_file("vmallocinfo"));
    let swap = KernelSwap::enter(machine, &env.roots, config, swap_bytes, &swap_file)?;
    let vmalloc_after = machine.read(&env.roots.proc_file("vmallocinfo"));
    let tables_bytes = match (vmalloc_before, vmalloc_after) {
        (Ok(before), Ok(after)) => Some(swap_tables_bytes(&before, &after)),
        _ => None,
    };
    let name = format!("uswap-bench-{}-{run_index}", std::process::id());
    let group = MemCgroup::create(machine, &env.parent, &name, Some(ctx.budget_bytes))?;
    let slabs = SwapSlabs::find(machine, &env.roots);
    let slab_before = slabs.bytes(machine);
    let probe = KernelProbe { env, group: &group, config, slabs };
    let procs = group.procs_file();
    let prepare = |command: &mut Command| -> Result<()> {
        sys::join_cgroup_before_exec(command, cgroup::open_procs(&procs)?);
        Ok(())
    };
    let counters_before = SwapCounters::read_kernel(machine, &env.roots);
    let kswapd_before = kswapd_cpu_s(machine, &env.roots);
    let measured = match spec.execute(ctx, &Placement { prepare: &prepare, probe: &probe }) {
        Ok(measured) => measured,
        Err(error) => match group.oom_kills() {
            Some(kills) if kills > 0 => {
                let why = format!(
                    "the memory cgroup's OOM killer ended the run (oom_kill {kills}; \
                     dmesg has the cgroup's stats at the kill)"
                );
                return Err(error.context(why));
            }
            _ => return Err(error),
        },
    };
    let swap_counters = counters_before
        .zip(SwapCounters::read_kernel(machine, &env.roots))
        .map(|(before, after)| before.delta(&after));
    let kswapd_s =
        kswapd_before.zip(kswapd_cpu_s(machine, &env.roots)).map(|(b, a)| (a - b).max(0.0));
    let charged_peak_bytes = group.peak_bytes();
    let store_peak_bytes = if config.is_zram() {
        let stat = machine.read(&env.roots.zram("mm_stat")).unwrap_or_default();
        parse_mm_stat(&stat).map_or(0, |fields| fields[4])
    } else {
        // The pool outside the charge (v1), sampled: 0 on v2, where it is charged.
        measured.samples.iter().map(|s| s.outside_bytes).max().unwrap_or(0)
    };
    let (compressed_peak_bytes, original_peak_bytes) = stored_peaks(&measured.samples);
    let slab_bytes = slab_before.map(|before| {
        let peak = measured.samples.iter().map(|s| s.slab_bytes).max().unwrap_or(0);
        peak.saturating_sub(before)
    });
    let extra = tables_bytes.unwrap_or(0) + slab_bytes.unwrap_or(0);
    let outcome = RunOutcome {
        meter: Meter::Cgroup,
        charged_peak_bytes,
        cache_charged_bytes: group.cache_bytes(),
        tree_rss_peak_bytes: None,
        store_peak_bytes,
        tables_bytes,
        slab_bytes,
        peak_bytes: charged_peak_bytes + store_peak_bytes + extra,
        compressed_peak_bytes,
        original_peak_bytes,
        kmem_peak_bytes: group.kmem_peak_bytes(),
        file_cache_peak_bytes: None,
        anon_peak_bytes: group.anon_bytes().map(|_| anon_peak(&measured.samples)),
        swap_counters,
        kswapd_s,
        totals: None,
        summary_lines: Vec::new(),
        measured,
    };
    drop(group);
    drop(swap);
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_slabs_are_counted_once_per_merged_cache() {
        use super::super::machine::fake::FakeMachine;
        use std::path::Path;
        let machine = FakeMachine::with_files(&[
            ("/sys/kernel/slab/:0000008/objects", "1000 N0=1000"),
            ("/sys/kernel/slab/:0000008/object_size", "8"),
            ("/sys/kernel/slab/:0000056/objects", "10 N0=10"),
            ("/sys/kernel/slab/:0000056/object_size", "56"),
            ("/sys/kernel/slab/kmalloc-64/objects", "5000"),
            ("/sys/kernel/slab/kmalloc-64/object_size", "64"),
        ]);
        for (alias, cache) in [
            ("zs_handle-zram0", ":0000008"),
            ("zs_handle-zswap1", ":0000008"),
            ("zspage-zram0", ":0000056"),
            ("dentry", "dentry"),
        ] {
            let slab = Path::new("/sys/kernel/slab");
            machine.links.borrow_mut().insert(slab.join(alias), slab.join(cache));
        }
        let roots = Roots { sys: "/sys".into(), proc: "/proc".into() };
        let slabs = SwapSlabs::find(&machine, &roots);
        assert_eq!(slabs.caches.len(), 2, "two aliases of one cache count once");
        assert_eq!(slabs.bytes(&machine), Some(1000 * 8 + 10 * 56));
        let none = SwapSlabs::find(&FakeMachine::default(), &roots);
        assert_eq!(none.bytes(&machine), None, "no caches found: not measured, not zero");
    }

    #[test]
    fn mm_stat_parses() {
        let text = "  4096  1024  8192  0  16384  3  0  1  0";
        assert_eq!(parse_mm_stat(text), Some([4096, 1024, 8192, 0, 16384]));
        assert_eq!(parse_mm_stat("1 2"), None);
    }

    #[test]
    fn swap_tables_are_the_new_areas_of_swap_callers() {
        let before = "\
0x0000000011111111-0x0000000022222222 8192 bpf_prog_alloc_no_stats+0x39/0x230 pages=1 vmalloc
0x0000000033333333-0x0000000044444444 413696 __do_sys_swapon+0x794/0x1230 pages=100 vmalloc\n";
        let after = "\
0x0000000011111111-0x0000000022222222 8192 bpf_prog_alloc_no_stats+0x39/0x230 pages=1 vmalloc
0x0000000033333333-0x0000000044444444 413696 __do_sys_swapon+0x794/0x1230 pages=100 vmalloc
0x0000000055555555-0x0000000066666666 6557696 disksize_store+0x71/0x150 pages=1600 vmalloc N0=1600
0x0000000066666666-0x0000000077777777 413696 __do_sys_swapon+0x794/0x1230 pages=100 vmalloc N0=100
0x0000000077777777-0x0000000088888888 823296 swap_cgroup_swapon+0x1c/0x70 pages=200 vmalloc N0=200
0x0000000088888888-0x0000000099999999 20480 kernel_clone+0x94/0x3e0 pages=4 vmalloc N0=4
0x0000000099999999-0x00000000aaaaaaaa 6557696 unpurged vm_area
0x00000000aaaaaaaa-0x00000000bbbbbbbb 12288 zcomp_cpu_up_prepare+0x81/0xd0 pages=2 vmalloc\n";
        // The zram table, the new swap_map and the swap cgroup map; not the swap_map that was
        // there before (another device's), a thread's stack, an unpurged area, or zcomp's
        // buffers (per CPU, a few pages).
        assert_eq!(swap_tables_bytes(before, after), (1600 + 100 + 200) * 4096);
        assert_eq!(swap_tables_bytes(after, after), 0, "nothing new, nothing counted");
    }

    #[test]
    fn meminfo_lines_parse() {
        let text = "MemTotal:  100 kB\nZswap:        8 kB\nZswapped:     32 kB\n";
        assert_eq!(meminfo_bytes(text, "Zswap"), Some(8192));
        assert_eq!(meminfo_bytes(text, "Zswapped"), Some(32768));
        assert_eq!(meminfo_bytes(text, "Swap"), None);
    }
}
