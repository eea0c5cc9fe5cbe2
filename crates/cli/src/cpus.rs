//! `--cpus LIST`: the CPUs a run may use, in taskset's list syntax (`0`, `0-3`, `0,2-3`).
//!
//! Under `uswap run` the program's threads and the engine's (the fault handler and the
//! reclaimer live inside the program) share the set; `uswap bench compare` pins itself, so
//! both sides' programs run on the same CPUs.
//!
//! Why it exists: a userfaultfd fault is served by another thread, and the reclaimer moves
//! pages out of the program's address space while it runs, which flushes the TLB of every
//! CPU running the program. Across vCPUs of a virtual machine each wake-up and each flush
//! is an inter-processor interrupt, a VM exit when the target vCPU is halted: 15-70 us on
//! dev-vm (docs/UFFD.md). A single-threaded program and uswap's threads on one CPU pay none
//! of it; measured there, the same uniform-random run took half the time (docs/RUN.md,
//! docs/benchmarks.md). The kernel's own swap runs in the faulting thread and does not care.

use anyhow::{bail, Context, Result};
use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

/// The machine's online CPUs (`/sys/devices/system/cpu/online`), whatever this process may
/// use; `None` if the file cannot be read or parsed.
pub fn online() -> Option<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").ok()?;
    Cpus::parse(&text).ok().map(|cpus| cpus.set.count() as usize)
}

/// A parsed `--cpus` list.
#[derive(Debug, Clone)]
pub struct Cpus {
    set: CpuSet,
    text: String,
}

impl Cpus {
    /// Parses `text` (taskset's list syntax).
    ///
    /// # Errors
    /// One line naming what is wrong: an empty list, a bad number, a reversed range, or a
    /// CPU beyond what the kernel's affinity mask can name.
    pub fn parse(text: &str) -> Result<Cpus> {
        let mut set = CpuSet::new();
        let number = |part: &str| -> Result<usize> {
            let cpu: usize = part
                .trim()
                .parse()
                .with_context(|| format!("--cpus {text}: {part:?} is not a CPU number"))?;
            if cpu >= CpuSet::MAX_CPU {
                bail!("--cpus {text}: CPU {cpu} is beyond the largest, {}", CpuSet::MAX_CPU - 1);
            }
            Ok(cpu)
        };
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (first, last) = match part.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                None => (number(part)?, number(part)?),
            };
            if first > last {
                bail!("--cpus {text}: range {part} runs backwards");
            }
            (first..=last).for_each(|cpu| set.set(cpu));
        }
        if set.count() == 0 {
            bail!("--cpus {text:?}: name at least one CPU, e.g. 0 or 0-1");
        }
        Ok(Cpus { set, text: text.trim().to_string() })
    }

    /// Restricts this process (and so everything it starts from now on) to the set.
    ///
    /// # Errors
    /// When none of the CPUs may be used here: names the ones that may.
    pub fn apply(&self) -> Result<()> {
        let allowed = sched_getaffinity(None).context("read this process's CPU affinity")?;
        if !(0..CpuSet::MAX_CPU).any(|cpu| self.set.is_set(cpu) && allowed.is_set(cpu)) {
            bail!(
                "--cpus {}: none of these CPUs is available here (allowed: {})",
                self.text,
                list(&allowed)
            );
        }
        sched_setaffinity(None, &self.set)
            .with_context(|| format!("--cpus {}: set the CPU affinity", self.text))
    }
}

/// `set` in list syntax (`0-1,4`).
fn list(set: &CpuSet) -> String {
    let mut parts = Vec::new();
    let mut cpu = 0;
    while cpu < CpuSet::MAX_CPU {
        if !set.is_set(cpu) {
            cpu += 1;
            continue;
        }
        let first = cpu;
        while cpu + 1 < CpuSet::MAX_CPU && set.is_set(cpu + 1) {
            cpu += 1;
        }
        parts.push(if first == cpu { first.to_string() } else { format!("{first}-{cpu}") });
        cpu += 1;
    }
    parts.join(",")
}

/// The CPUs this process may use now, in list syntax (for reports).
pub fn current() -> String {
    sched_getaffinity(None).map_or_else(|e| format!("unknown ({e})"), |set| list(&set))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn online_counts_the_machine_not_the_affinity() {
        let online = online().expect("/sys/devices/system/cpu/online");
        let allowed = sched_getaffinity(None).unwrap().count() as usize;
        assert!(online >= allowed, "{online} online, {allowed} allowed");
        // The file's text ends in a newline, which the list syntax must take.
        assert_eq!(Cpus::parse("0-1\n").unwrap().set.count(), 2);
    }

    #[test]
    fn lists_parse_and_print_back() {
        for (text, printed) in [("0", "0"), ("0-3", "0-3"), ("0, 2-3,5", "0,2-3,5"), ("1-1", "1")] {
            let cpus = Cpus::parse(text).unwrap();
            assert_eq!(list(&cpus.set), printed, "{text}");
        }
    }

    #[test]
    fn bad_lists_say_what_is_wrong() {
        for (text, expect) in [
            ("", "name at least one CPU"),
            (",", "name at least one CPU"),
            ("x", "not a CPU number"),
            ("3-1", "runs backwards"),
            ("0-", "not a CPU number"),
            ("99999", "beyond the largest"),
        ] {
            let error = Cpus::parse(text).unwrap_err().to_string();
            assert!(error.contains(expect), "{text:?}: {error}");
        }
    }
}
