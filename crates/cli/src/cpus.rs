//! `--cpus LIST`: the CPUs a run may use, in taskset's list syntax (`0`, `0-3`, `0,2-3`);
//! `--reclaim-cpus LIST`: where the engine's reclaimer runs.
//!
//! Under `uswap run` the program's threads and the fault handler (inside the program)
//! share the set, and the reclaimer runs on the CPUs left outside it, if any (docs/RUN.md,
//! "CPUs"); `uswap bench compare` pins itself, so both sides' programs run on the same
//! CPUs, and hands the CPUs it left out to `uswap run --reclaim-cpus`.
//!
//! Why it exists: a userfaultfd fault is served by another thread, and the reclaimer moves pages
//! out of the program's address space while it runs, which flushes the TLB of every CPU running the
//! program. Across vCPUs of a virtual machine each wake-up and each flush is an inter-processor
//! interrupt, a VM exit when the target vCPU is halted: tens of microseconds in a guest
//! (docs/UFFD.md). A single-threaded program and uswap's threads on one CPU pay none of it
//! (docs/RUN.md, docs/benchmarks.md). The kernel's own swap runs in the faulting thread and does
//! not care.

use anyhow::{bail, Context, Result};
use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

/// The machine's online CPUs (`/sys/devices/system/cpu/online`), whatever this process may
/// use; `None` if the file cannot be read or parsed.
pub fn online() -> Option<usize> {
    online_cpus().map(|cpus| cpus.len())
}

/// The machine's online CPUs, ascending; `None` if the file cannot be read or parsed.
fn online_cpus() -> Option<Vec<usize>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").ok()?;
    runstat::cpus::parse_list(&text, CpuSet::MAX_CPU).ok()
}

/// A parsed `--cpus` (or `--reclaim-cpus`) list.
#[derive(Debug, Clone)]
pub struct Cpus {
    cpus: Vec<usize>,
    text: String,
    flag: &'static str,
}

impl Cpus {
    /// Parses `text` (taskset's list syntax) given to `--cpus`.
    ///
    /// # Errors
    /// One line naming what is wrong: an empty list, a bad number, a reversed range, or a
    /// CPU beyond what the kernel's affinity mask can name.
    pub fn parse(text: &str) -> Result<Cpus> {
        Cpus::parse_flag("--cpus", text)
    }

    /// Parses `text` given to `flag`, as [`Cpus::parse`].
    ///
    /// # Errors
    /// As [`Cpus::parse`], naming `flag`.
    pub fn parse_flag(flag: &'static str, text: &str) -> Result<Cpus> {
        let shown = if text.trim().is_empty() { "\"\"" } else { text.trim() };
        let cpus = runstat::cpus::parse_list(text, CpuSet::MAX_CPU)
            .map_err(|e| anyhow::anyhow!("{flag} {shown}: {e}"))?;
        Ok(Cpus { cpus, text: text.trim().to_string(), flag })
    }

    /// The CPUs, ascending.
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// Checks that every CPU of the list is online (where the machine says).
    ///
    /// # Errors
    /// Names the first CPU that is not, and the online ones.
    pub fn check_online(&self) -> Result<()> {
        let Some(online) = online_cpus() else { return Ok(()) };
        if let Some(cpu) = self.cpus.iter().find(|cpu| !online.contains(cpu)) {
            bail!(
                "{} {}: CPU {cpu} is not online (online: {})",
                self.flag,
                self.text,
                runstat::cpus::format_list(&online)
            );
        }
        Ok(())
    }

    /// The CPUs this process may use now that are not in the list: where `uswap run`
    /// puts the engine's reclaimer when the program is confined to the list (`None` if
    /// there are none, or the affinity cannot be read).
    pub fn others_allowed(&self) -> Option<Vec<usize>> {
        let mut others = uffd::sys::process::allowed_cpus().ok()?;
        others.retain(|cpu| !self.cpus.contains(cpu));
        (!others.is_empty()).then_some(others)
    }

    /// Restricts this process (and so everything it starts from now on) to the set.
    ///
    /// # Errors
    /// When none of the CPUs may be used here: names the ones that may.
    pub fn apply(&self) -> Result<()> {
        let allowed = sched_getaffinity(None).context("read this process's CPU affinity")?;
        if !self.cpus.iter().any(|&cpu| allowed.is_set(cpu)) {
            bail!(
                "{} {}: none of these CPUs is available here (allowed: {})",
                self.flag,
                self.text,
                list(&allowed)
            );
        }
        let mut set = CpuSet::new();
        self.cpus.iter().for_each(|&cpu| set.set(cpu));
        sched_setaffinity(None, &set)
            .with_context(|| format!("{} {}: set the CPU affinity", self.flag, self.text))
    }
}

/// `set` in list syntax (`0-1,4`).
fn list(set: &CpuSet) -> String {
    let cpus: Vec<usize> = (0..CpuSet::MAX_CPU).filter(|&cpu| set.is_set(cpu)).collect();
    runstat::cpus::format_list(&cpus)
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
        assert_eq!(Cpus::parse("0-1\n").unwrap().cpus(), [0, 1]);
    }

    #[test]
    fn lists_print_back_and_errors_name_the_flag() {
        for (text, printed) in [("0", "0"), ("0-3", "0-3"), ("0, 2-3,5", "0,2-3,5"), ("1-1", "1")] {
            let cpus = Cpus::parse(text).unwrap();
            assert_eq!(runstat::cpus::format_list(cpus.cpus()), printed, "{text}");
        }
        let error = Cpus::parse_flag("--reclaim-cpus", "3-1").unwrap_err().to_string();
        assert!(error.starts_with("--reclaim-cpus 3-1: range 3-1 runs backwards"), "{error}");
        let error = Cpus::parse("99999").unwrap_err().to_string();
        assert!(error.contains("beyond the largest"), "{error}");
    }
}
