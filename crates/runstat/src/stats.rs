//! The stats file: what the shim writes about a managed program, and the summary
//! `uswap run` and `uswap stat` print from it.
//!
//! ```text
//!   # uswap stats v1                 first line, fixed
//!   pid 4242                         then `name value` lines, any order:
//!   final 0                            the shim's own (pid, final, uptime_ms, vm_rss_bytes,
//!   uptime_ms 1834                     vm_hwm_bytes, faults_resynced, regions, ...)
//!   vm_hwm_bytes 276824064             the engine's vmstat names (pswpout, zswpout, ...)
//!   pswpout 1200                       and gauges (used_bytes_peak, pool_total_size, ...)
//!   ...
//!   fault_ns 160:3 176:12 ...        the fault-latency histogram ([`Histogram::to_text`])
//! ```
//!
//! One file per managed image: `live-<pid>` is rewritten (write to a temporary name, then
//! rename, so a reader never sees half a file) every `USWAP_STATS_INTERVAL_MS`;
//! `final-<pid>-<n>` is written once when the image exits or execs. Unknown names are kept
//! (a newer shim may add some) and a missing name reads as zero.

use crate::hist::Histogram;
use crate::size::format_size;
use std::collections::BTreeMap;

/// The first line of every stats file.
pub const MAGIC: &str = "# uswap stats v1";
/// The name of the histogram line.
pub const FAULT_NS: &str = "fault_ns";

/// A parsed (or to-be-written) stats file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsFile {
    /// Every `name value` pair.
    pub values: BTreeMap<String, u64>,
    /// Fault latency, nanoseconds from the handler's read of the message to the resolve.
    pub fault_ns: Histogram,
}

impl StatsFile {
    /// The value of `name`, zero when absent.
    pub fn get(&self, name: &str) -> u64 {
        self.values.get(name).copied().unwrap_or(0)
    }

    /// Sets `name`.
    pub fn set(&mut self, name: &str, value: u64) {
        self.values.insert(name.to_string(), value);
    }

    /// The text form (module essay).
    pub fn to_text(&self) -> String {
        let mut out = String::with_capacity(64 * self.values.len() + 256);
        out.push_str(MAGIC);
        out.push('\n');
        for (name, value) in &self.values {
            out.push_str(name);
            out.push(' ');
            out.push_str(&value.to_string());
            out.push('\n');
        }
        out.push_str(FAULT_NS);
        out.push(' ');
        out.push_str(&self.fault_ns.to_text());
        out.push('\n');
        out
    }

    /// Parses [`StatsFile::to_text`].
    ///
    /// # Errors
    /// A message naming the first bad line (a missing magic line, a value that is not a
    /// number, a malformed histogram).
    pub fn parse(text: &str) -> Result<StatsFile, String> {
        let mut lines = text.lines();
        if lines.next() != Some(MAGIC) {
            return Err(format!("not a uswap stats file (no {MAGIC:?} line)"));
        }
        let mut file = StatsFile::default();
        for line in lines.filter(|l| !l.trim().is_empty()) {
            let (name, value) = line.split_once(' ').unwrap_or((line, ""));
            if name == FAULT_NS {
                file.fault_ns = Histogram::from_text(value)
                    .ok_or_else(|| format!("bad histogram line {line:?}"))?;
                continue;
            }
            let value = value.trim().parse().map_err(|_| format!("bad stats line {line:?}"))?;
            file.values.insert(name.to_string(), value);
        }
        Ok(file)
    }

    /// Adds another image's final counters (an exec'd program's images): counters and
    /// histograms add; peaks take the maximum.
    pub fn absorb(&mut self, other: &StatsFile) {
        for (name, &value) in &other.values {
            let slot = self.values.entry(name.clone()).or_insert(0);
            if PEAKS.contains(&name.as_str()) {
                *slot = (*slot).max(value);
            } else {
                *slot += value;
            }
        }
        self.fault_ns.add(&other.fault_ns);
    }
}

/// Names that are maxima, not counts ([`StatsFile::absorb`]).
const PEAKS: [&str; 4] = ["vm_hwm_bytes", "used_bytes_peak", "budget_bytes", "pid"];

/// The figures `uswap run` prints at exit (and `uswap stat` live).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// The budget.
    pub budget_bytes: u64,
    /// The limit of a pool beside the budget (`uswap run --pool-size`); 0: the pool is a
    /// share of the budget.
    pub pool_beside_bytes: u64,
    /// Peak resident set of the program (VmHWM, or the child's ru_maxrss).
    pub peak_rss_bytes: u64,
    /// Peak charged bytes (resident + swap cache, and the pool unless it is beside the budget).
    pub charged_peak_bytes: u64,
    /// Pages out by tier: zero map, pool, swap file.
    pub out_zero: u64,
    /// Pages stored in the pool.
    pub out_pool: u64,
    /// Pages written to the swap file.
    pub out_file: u64,
    /// Pages in from the zero map.
    pub in_zero: u64,
    /// Pages loaded from the pool.
    pub in_pool: u64,
    /// Pages read from the swap file.
    pub in_file: u64,
    /// Pool pages written back to the file.
    pub writeback: u64,
    /// Uncompressed over compressed size of what the pool holds (0: empty): its memory,
    /// pages and metadata.
    pub compression_ratio: f64,
    /// Uncompressed over the compressed data alone (0: empty or not reported): the
    /// compressor's share of `compression_ratio`, zram's `orig_data_size /
    /// compr_data_size`.
    pub data_ratio: f64,
    /// Faults handled.
    pub faults: u64,
    /// Fault latency quantiles, nanoseconds.
    pub fault_ns_p50: u64,
    /// The 99th percentile.
    pub fault_ns_p99: u64,
    /// Idle pollers running (0: idle polling off).
    pub idle_pollers: u64,
    /// Their spinning time, summed, nanoseconds.
    pub idle_poll_ns: u64,
    /// Pollers that could not pin themselves or take nice 19, and stopped.
    pub idle_poll_setup_errors: u64,
    /// Reclaimer threads that could not move to `--reclaim-cpus` (CPUs outside the
    /// process's cpuset) and ran on the program's CPUs.
    pub reclaimer_cpus_failed: u64,
    /// Reclaim passes stopped because every swap slot was in use.
    pub swap_full: u64,
    /// Pages whose writes to the swap file failed (a disk low on space, an I/O error).
    pub write_errors: u64,
    /// Reclaim passes stopped because the swap file's disk was low on space.
    pub no_space: u64,
    /// Reclaim passes stopped because the program locked all its memory (mlockall).
    pub locked: u64,
    /// Times the program locked all its memory (mlockall).
    pub all_locked: u64,
    /// Pages found resident when the shim adopted their mapping (touched before its scan).
    pub adopted_pages: u64,
    /// Pages mapped to the zero page write-protected, uncharged.
    pub zero_mapped: u64,
    /// Of those, pages the program wrote (a write-protect fault each made them resident).
    pub zero_written: u64,
    /// System calls made again under SIGBUS delivery after their buffer was brought in.
    pub efault_retries: u64,
    /// System calls that still failed with EFAULT on a managed buffer after every retry.
    pub efault_failed: u64,
    /// The handler's moves to the CPU of the thread it serves (`--handler-placement`).
    pub follow_moves: u64,
    /// Its returns to every CPU (faults from many threads).
    pub follow_releases: u64,
    /// Placements refused, or a followed thread's CPU not found.
    pub follow_failed: u64,
    /// Pages sealed (encrypted) on their way to the swap device (`--encrypt on`).
    pub sealed: u64,
    /// Pages opened (authenticated, decrypted) on their way back.
    pub opened: u64,
    /// Pages that failed to authenticate (each a SIGBUS on access, never data).
    pub auth_failures: u64,
    /// The program's closes of uswap's descriptors, reported done and ignored (crate fds).
    pub fds_closes_ignored: u64,
    /// Its ranges of closes, made around uswap's descriptors.
    pub fds_ranges_closed: u64,
    /// Its dups onto uswap's descriptors, which moved them first.
    pub fds_moves: u64,
    /// uswap's descriptors closed or replaced by direct system calls, lost for good.
    pub fds_lost: u64,
    /// Those taken back from uswap's second reference.
    pub fds_recovered: u64,
    /// The far tier, if the swap device is one.
    pub far: Option<FarSummary>,
    /// Program images that ran unmanaged: no userfaultfd could be had any more when they
    /// started (the device lost its permission mid-run).
    pub unmanaged_images: u64,
}

/// The far tier's figures (`uswap run --far`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FarSummary {
    /// Servers, and of them up.
    pub servers: u64,
    /// Servers up at the last look.
    pub servers_up: u64,
    /// Bytes the servers hold for this run (memcached's accounting of its items).
    pub bytes_held: u64,
    /// Requests sent, and their latency quantiles (ns).
    pub requests: u64,
    /// Median request latency.
    pub latency_p50_ns: u64,
    /// 99th percentile.
    pub latency_p99_ns: u64,
    /// Reads that moved on from a holder that failed or held no good copy.
    pub failovers: u64,
    /// Pages read from a replica (the slot's first-ranked server down or emptied).
    pub replica_reads: u64,
    /// Copies re-created by the repairer.
    pub rereplications: u64,
    /// Servers seen restarted (empty).
    pub restarts: u64,
    /// Pages no server returned: each a SIGBUS on access.
    pub lost_pages: u64,
    /// Per server (the first eight): address as IPv4 << 16 | port (0: IPv6), up, bytes.
    pub per_server: Vec<(u64, u64, u64)>,
}

impl FarSummary {
    fn of(file: &StatsFile) -> Option<FarSummary> {
        let servers = file.get("far_servers");
        if servers == 0 {
            return None;
        }
        let per_server = (0..servers.min(8))
            .map(|i| {
                let get = |what: &str| file.get(&format!("far_server{i}_{what}"));
                (get("addr"), get("up"), get("bytes"))
            })
            .collect();
        Some(FarSummary {
            servers,
            servers_up: file.get("far_servers_up"),
            bytes_held: file.get("far_bytes_held"),
            requests: file.get("far_requests"),
            latency_p50_ns: file.get("far_latency_p50_ns"),
            latency_p99_ns: file.get("far_latency_p99_ns"),
            failovers: file.get("far_failovers"),
            replica_reads: file.get("far_replica_reads"),
            rereplications: file.get("far_rereplications"),
            restarts: file.get("far_restarts"),
            lost_pages: file.get("far_lost_pages"),
            per_server,
        })
    }

    fn lines(&self, prefix: &str) -> Vec<String> {
        let us = |ns: u64| ns as f64 / 1000.0;
        let mut lines = vec![format!(
            "{prefix}far tier: {} servers ({} up), {} held, {} requests (p50 {:.1} us, p99 \
             {:.1} us), {} pages read from replicas, {} failovers, {} copies re-created, {} \
             restarts seen, {} pages lost",
            self.servers,
            self.servers_up,
            format_size(self.bytes_held),
            self.requests,
            us(self.latency_p50_ns),
            us(self.latency_p99_ns),
            self.replica_reads,
            self.failovers,
            self.rereplications,
            self.restarts,
            self.lost_pages
        )];
        let servers: Vec<String> = self
            .per_server
            .iter()
            .enumerate()
            .map(|(i, &(addr, up, bytes))| {
                let name = match addr {
                    0 => format!("server {i}"),
                    a => {
                        let ip = std::net::Ipv4Addr::from((a >> 16) as u32);
                        format!("{ip}:{}", a & 0xffff)
                    }
                };
                let state = if up == 1 { "up" } else { "down" };
                format!("{name} {state} {}", format_size(bytes))
            })
            .collect();
        lines.push(format!("{prefix}far servers: {}", servers.join(", ")));
        if self.lost_pages > 0 {
            lines.push(format!(
                "{prefix}far tier: {} pages could not be read from any server: each access to \
                 one raised SIGBUS (no wrong data, no zeros)",
                self.lost_pages
            ));
        }
        lines
    }
}

impl Summary {
    /// The figures of `file`.
    pub fn of(file: &StatsFile) -> Summary {
        let pool_bytes = file.get("pool_total_size");
        let stored = file.get("stored_pages") * 4096;
        Summary {
            budget_bytes: file.get("budget_bytes"),
            pool_beside_bytes: file.get("pool_size_bytes"),
            peak_rss_bytes: file.get("vm_hwm_bytes"),
            charged_peak_bytes: file.get("used_bytes_peak"),
            out_zero: file.get("swpout_zero"),
            out_pool: file.get("zswpout"),
            out_file: file.get("pswpout"),
            in_zero: file.get("swpin_zero"),
            in_pool: file.get("zswpin"),
            in_file: file.get("pswpin"),
            writeback: file.get("zswpwb"),
            compression_ratio: if pool_bytes == 0 {
                0.0
            } else {
                stored as f64 / pool_bytes as f64
            },
            data_ratio: match file.get("zswap_compressed_bytes") {
                0 => 0.0,
                compressed => stored as f64 / compressed as f64,
            },
            faults: file.fault_ns.total(),
            fault_ns_p50: file.fault_ns.quantile(0.5).unwrap_or(0),
            fault_ns_p99: file.fault_ns.quantile(0.99).unwrap_or(0),
            idle_pollers: file.get("idle_pollers"),
            idle_poll_ns: file.get("idle_poll_ns"),
            idle_poll_setup_errors: file.get("idle_poll_setup_errors"),
            reclaimer_cpus_failed: file.get("reclaimer_cpus_failed"),
            swap_full: file.get("swap_full"),
            write_errors: file.get("swpout_error"),
            no_space: file.get("swap_no_space"),
            locked: file.get("reclaim_locked"),
            all_locked: file.get("all_locked"),
            adopted_pages: file.get("shim_pages_adopted"),
            zero_mapped: file.get("zero_mapped"),
            zero_written: file.get("zero_mapped_written"),
            efault_retries: file.get("shim_efault_retries"),
            efault_failed: file.get("shim_efault_failed"),
            follow_moves: file.get("handler_follow_moves"),
            follow_releases: file.get("handler_follow_releases"),
            follow_failed: file.get("handler_follow_failed"),
            sealed: file.get("crypt_sealed_pages"),
            opened: file.get("crypt_opened_pages"),
            auth_failures: file.get("crypt_auth_failures"),
            fds_closes_ignored: file.get("fds_closes_ignored"),
            fds_ranges_closed: file.get("fds_ranges_closed"),
            fds_moves: file.get("fds_moves"),
            fds_lost: file.get("fds_lost"),
            fds_recovered: file.get("fds_recovered"),
            far: FarSummary::of(file),
            unmanaged_images: file.get("shim_unmanaged_images"),
        }
    }

    /// Lines for people, each starting with `prefix`.
    pub fn to_lines(&self, prefix: &str) -> Vec<String> {
        let us = |ns: u64| ns as f64 / 1000.0;
        let beside = match self.pool_beside_bytes {
            0 => String::new(),
            bytes => format!(" (resident pages; the pool beside it, up to {})", format_size(bytes)),
        };
        let mut lines = vec![
            format!(
                "{prefix}budget {}{beside}, peak resident {}, peak charged {}",
                format_size(self.budget_bytes),
                format_size(self.peak_rss_bytes),
                format_size(self.charged_peak_bytes)
            ),
            format!(
                "{prefix}pages out: zero {}, pool {}, file {} (written back {}); \
                 pages in: zero {}, pool {}, file {}",
                self.out_zero,
                self.out_pool,
                self.out_file,
                self.writeback,
                self.in_zero,
                self.in_pool,
                self.in_file
            ),
            format!(
                "{prefix}compression ratio {}, faults {}, latency p50 {:.1} us, p99 {:.1} us",
                if self.data_ratio > 0.0 {
                    format!("{:.2} (the data alone {:.2})", self.compression_ratio, self.data_ratio)
                } else if self.compression_ratio > 0.0 {
                    format!("{:.2}", self.compression_ratio)
                } else {
                    "- (the pool was empty at the end)".to_string()
                },
                self.faults,
                us(self.fault_ns_p50),
                us(self.fault_ns_p99)
            ),
        ];
        if self.zero_mapped > 0 {
            lines.push(format!(
                "{prefix}zero pages: {} mapped uncharged, {} of them then written",
                self.zero_mapped, self.zero_written
            ));
        }
        if self.efault_retries + self.efault_failed > 0 {
            lines.push(format!(
                "{prefix}system calls on swapped buffers (SIGBUS delivery): {} made again after \
                 bringing the buffer in, {} still failed with EFAULT",
                self.efault_retries, self.efault_failed
            ));
        }
        if self.swap_full > 0 {
            lines.push(format!(
                "{prefix}the swap device was full: reclaim stopped {} times with every slot in \
                 use, and the budget could not be kept meanwhile (raise --swap-size)",
                self.swap_full
            ));
        }
        lines.extend(self.process_lines(prefix));
        if self.no_space > 0 && self.fds_lost == 0 {
            lines.push(format!(
                "{prefix}the swap file's disk was low on space: reclaim stopped {} times, and \
                 the budget could not be kept meanwhile (free some, or give a --swap-file on \
                 another file system)",
                self.no_space
            ));
        }
        if self.sealed + self.auth_failures > 0 {
            let failed = match self.auth_failures {
                0 => String::new(),
                n => format!(
                    "; {n} failed to authenticate (tampered or lost: poisoned, SIGBUS on access)"
                ),
            };
            lines.push(format!(
                "{prefix}encryption (AES-256-GCM): {} pages sealed, {} opened{failed}",
                self.sealed, self.opened
            ));
        }
        if let Some(far) = &self.far {
            lines.extend(far.lines(prefix));
        }
        if self.write_errors > 0 {
            lines.push(format!(
                "{prefix}{} page writes to the swap file failed (a disk low on space, or an I/O \
                 error): those pages stayed in the pool or in memory",
                self.write_errors
            ));
        }
        if self.unmanaged_images > 0 {
            lines.push(format!(
                "{prefix}{} program images ran unmanaged, outside the budget: no userfaultfd \
                 could be had when they started (their warning is above)",
                self.unmanaged_images
            ));
        }
        lines.extend(self.cpu_lines(prefix));
        lines
    }

    /// Lines on what the program did to the process around uswap: its descriptor calls
    /// on uswap's descriptors, and its locks.
    fn process_lines(&self, prefix: &str) -> Vec<String> {
        let mut lines = Vec::new();
        // A budget passed by more than one of its sixteenths (a few folios in flight per
        // faulting thread are the engine's bound: engine_stress) is said, with its causes.
        let peak = self.charged_peak_bytes.max(self.peak_rss_bytes);
        if self.budget_bytes > 0 && peak > self.budget_bytes / 16 * 17 {
            lines.push(format!(
                "{prefix}the budget was exceeded (peak {}): pages a program touches in memory \
                 glibc maps on its own are found by a scan every 10 ms, and are resident until \
                 then ({} adopted so in this run), and every faulting thread holds up to a \
                 folio in flight",
                format_size(peak),
                format_size(self.adopted_pages * 4096)
            ));
        }
        if self.fds_closes_ignored + self.fds_ranges_closed + self.fds_moves > 0 {
            lines.push(format!(
                "{prefix}descriptors: the program closed uswap's {} times (ignored), closed {} \
                 ranges around them, and dup'd onto them {} times (moved first)",
                self.fds_closes_ignored, self.fds_ranges_closed, self.fds_moves
            ));
        }
        if self.locked + self.all_locked > 0 {
            let stopped = match self.locked {
                0 => String::new(),
                n => format!(" (reclaim stopped {n} times)"),
            };
            lines.push(format!(
                "{prefix}the program locked its memory (mlockall): locked pages are never paged \
                 out and count against the budget, which could not be kept meanwhile{stopped}"
            ));
        }
        if self.fds_lost + self.fds_recovered > 0 {
            lines.push(format!(
                "{prefix}descriptors closed or replaced by direct system calls: {} taken back \
                 from uswap's second reference, {} lost (said above)",
                self.fds_recovered, self.fds_lost
            ));
        }
        lines
    }

    /// The lines about where uswap's threads ran: the idle pollers, the reclaimer's CPUs,
    /// the handler's placement.
    fn cpu_lines(&self, prefix: &str) -> Vec<String> {
        let mut lines = Vec::new();
        if self.idle_pollers > 0 {
            lines.push(format!(
                "{prefix}idle polling: {} pollers spun {:.2} s of otherwise idle CPU time",
                self.idle_pollers,
                self.idle_poll_ns as f64 / 1e9
            ));
        }
        if self.idle_poll_setup_errors > 0 {
            lines.push(format!(
                "{prefix}idle polling: {} of the pollers could not pin themselves to their CPU \
                 or take nice 19, and stopped",
                self.idle_poll_setup_errors
            ));
        }
        if self.reclaimer_cpus_failed > 0 {
            lines.push(format!(
                "{prefix}the reclaimer could not move to its CPUs (--reclaim-cpus, or those \
                 outside --cpus: not in this process's cpuset) and ran on the program's"
            ));
        }
        if self.follow_moves + self.follow_releases + self.follow_failed > 0 {
            let failed = match self.follow_failed {
                0 => String::new(),
                n => format!(", {n} placements failed"),
            };
            lines.push(format!(
                "{prefix}handler placement: moved {} times to the CPU of the thread it served, \
                 the reclaimer off it; freed {} times (faults from many threads){failed}",
                self.follow_moves, self.follow_releases
            ));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StatsFile {
        let mut file = StatsFile::default();
        for (name, value) in [
            ("pid", 42),
            ("budget_bytes", 256 << 20),
            ("vm_hwm_bytes", 270 << 20),
            ("zswpout", 1000),
            ("pswpout", 10),
            ("pool_total_size", 1 << 20),
            ("stored_pages", 512),
        ] {
            file.set(name, value);
        }
        for ns in [10_000, 12_000, 100_000] {
            file.fault_ns.record(ns);
        }
        file
    }

    #[test]
    fn stats_files_round_trip_and_summarise() {
        let file = sample();
        let back = StatsFile::parse(&file.to_text()).unwrap();
        assert_eq!(back, file);
        let summary = Summary::of(&back);
        assert_eq!(summary.out_pool, 1000);
        assert_eq!(summary.faults, 3);
        assert!((summary.compression_ratio - 2.0).abs() < 1e-9);
        let p50 = summary.fault_ns_p50 as f64;
        assert!((p50 - 12_000.0).abs() / 12_000.0 <= 1.0 / 16.0, "{p50}");
        let lines = summary.to_lines("uswap: ");
        assert!(lines[0].contains("peak resident 270 MiB"), "{lines:?}");
        assert!(lines.iter().all(|l| l.starts_with("uswap: ")));
        assert!(!lines.iter().any(|l| l.contains("idle polling")), "no pollers, no line");
        assert!(!lines[0].contains("beside"), "{lines:?}");
        assert!(lines[2].contains("compression ratio 2.00, "), "{lines:?}");
        let mut data = file.clone();
        data.set("zswap_compressed_bytes", 1 << 19);
        let lines = Summary::of(&data).to_lines("");
        assert!(lines[2].contains("compression ratio 2.00 (the data alone 4.00), "), "{lines:?}");
        let mut beside = file.clone();
        beside.set("pool_size_bytes", 1 << 30);
        let lines = Summary::of(&beside).to_lines("uswap: ");
        let first = "uswap: budget 256 MiB (resident pages; the pool beside it, up to 1.00 GiB), \
                     peak resident 270 MiB";
        assert!(lines[0].starts_with(first), "{lines:?}");
        let mut polled = file.clone();
        polled.set("idle_pollers", 2);
        polled.set("idle_poll_ns", 1_500_000_000);
        let lines = Summary::of(&polled).to_lines("uswap: ");
        let line = lines.last().unwrap();
        assert_eq!(line, "uswap: idle polling: 2 pollers spun 1.50 s of otherwise idle CPU time");
        polled.set("idle_poll_setup_errors", 1);
        let lines = Summary::of(&polled).to_lines("uswap: ");
        assert!(lines.last().unwrap().contains("1 of the pollers could not pin"), "{lines:?}");
        polled.set("reclaimer_cpus_failed", 1);
        let lines = Summary::of(&polled).to_lines("uswap: ");
        assert!(lines.last().unwrap().contains("the reclaimer could not move"), "{lines:?}");
        assert!(!lines.iter().any(|l| l.contains("handler placement")), "never followed");
        let mut followed = file.clone();
        followed.set("handler_follow_moves", 12);
        followed.set("handler_follow_releases", 1);
        let lines = Summary::of(&followed).to_lines("uswap: ");
        let line = lines.last().unwrap();
        assert!(line.contains("moved 12 times") && line.contains("freed 1 times"), "{line}");
        assert!(!line.contains("failed"), "{line}");
        followed.set("handler_follow_failed", 2);
        let lines = Summary::of(&followed).to_lines("uswap: ");
        assert!(lines.last().unwrap().ends_with(", 2 placements failed"), "{lines:?}");
        assert!(!lines.iter().any(|l| l.contains("swap file") || l.contains("swap device")));
        let mut sealed = file.clone();
        sealed.set("crypt_sealed_pages", 30);
        sealed.set("crypt_opened_pages", 20);
        let lines = Summary::of(&sealed).to_lines("");
        assert!(lines.contains(&"encryption (AES-256-GCM): 30 pages sealed, 20 opened".into()));
        sealed.set("crypt_auth_failures", 2);
        let lines = Summary::of(&sealed).to_lines("");
        assert!(lines.iter().any(|l| l.contains("; 2 failed to authenticate")), "{lines:?}");
        assert!(!lines.iter().any(|l| l.contains("far")), "{lines:?}");
        let mut far = file.clone();
        for (name, value) in [
            ("far_servers", 2),
            ("far_servers_up", 1),
            ("far_bytes_held", 3 << 20),
            ("far_failovers", 4),
            ("far_lost_pages", 5),
            ("far_server0_addr", (0x7f00_0001 << 16) | 11211),
            ("far_server0_up", 1),
            ("far_server0_bytes", 3 << 20),
        ] {
            far.set(name, value);
        }
        let lines = Summary::of(&far).to_lines("");
        let text = lines.join("\n");
        assert!(text.contains("far tier: 2 servers (1 up), 3.00 MiB held"), "{text}");
        assert!(text.contains("4 failovers"), "{text}");
        assert!(
            text.contains("far servers: 127.0.0.1:11211 up 3.00 MiB, server 1 down 0 B"),
            "{text}"
        );
        assert!(text.contains("5 pages could not be read from any server"), "{text}");
    }

    /// The lines on a run's troubles: reclaim stopped (a full swap, failed writes, a disk
    /// low on space, mlockall), a budget passed and why, descriptors lost or taken back.
    #[test]
    fn troubles_are_said_with_their_causes() {
        let file = sample();
        let mut troubled = file.clone();
        troubled.set("swap_full", 3);
        troubled.set("swpout_error", 17);
        troubled.set("swap_no_space", 5);
        troubled.set("reclaim_locked", 4);
        let lines = Summary::of(&troubled).to_lines("uswap: ");
        assert!(lines.iter().any(|l| l.contains("reclaim stopped 3 times")), "{lines:?}");
        assert!(lines.iter().any(|l| l.contains("17 page writes to the swap file failed")));
        assert!(lines.iter().any(|l| l.contains("low on space: reclaim stopped 5 times")));
        assert!(lines.iter().any(|l| l.contains("(mlockall)") && l.contains("stopped 4 times")));
        // Locked with no reclaim pass since (everything brought in by mlockall itself): said.
        let mut locked = file.clone();
        locked.set("all_locked", 1);
        let lines = Summary::of(&locked).to_lines("");
        let line = lines.iter().find(|l| l.contains("(mlockall)")).expect("said");
        assert!(line.ends_with("could not be kept meanwhile"), "{line}");
        assert!(!lines.iter().any(|l| l.contains("budget was exceeded")), "{lines:?}");
        let mut over = troubled.clone();
        over.set("used_bytes_peak", 400 << 20);
        over.set("shim_pages_adopted", 25600);
        let lines = Summary::of(&over).to_lines("uswap: ");
        let line = lines.iter().find(|l| l.contains("budget was exceeded")).expect("said");
        assert!(line.contains("(peak 400 MiB)") && line.contains("100 MiB adopted"), "{line}");
        assert!(!lines.iter().any(|l| l.contains("descriptors")), "{lines:?}");
        // A swap file lost to a direct system call refuses writes as a full disk does: the
        // lost line says why, not the disk's.
        let mut lost = troubled.clone();
        lost.set("fds_lost", 1);
        lost.set("fds_recovered", 2);
        lost.set("fds_closes_ignored", 7);
        let lines = Summary::of(&lost).to_lines("uswap: ");
        assert!(!lines.iter().any(|l| l.contains("disk was low on space")), "{lines:?}");
        assert!(lines.iter().any(|l| l.contains("2 taken back") && l.contains("1 lost")));
        assert!(lines.iter().any(|l| l.contains("closed uswap's 7 times (ignored)")));
        assert!(!lines.iter().any(|l| l.contains("encryption")), "{lines:?}");
    }

    #[test]
    fn bad_stats_files_name_the_line() {
        assert!(StatsFile::parse("pid 3\n").unwrap_err().contains("not a uswap stats file"));
        let e = StatsFile::parse(&format!("{MAGIC}\npid x\n")).unwrap_err();
        assert!(e.contains("\"pid x\""), "{e}");
        let e = StatsFile::parse(&format!("{MAGIC}\n{FAULT_NS} 5000:1\n")).unwrap_err();
        assert!(e.contains("histogram"), "{e}");
        assert_eq!(StatsFile::parse(&format!("{MAGIC}\n")).unwrap().get("pswpout"), 0);
    }

    #[test]
    fn images_add_counters_and_keep_peaks() {
        let mut total = sample();
        let mut other = sample();
        other.set("vm_hwm_bytes", 100 << 20);
        total.absorb(&other);
        assert_eq!(total.get("zswpout"), 2000);
        assert_eq!(total.get("vm_hwm_bytes"), 270 << 20);
        assert_eq!(total.fault_ns.total(), 6);
    }
}
