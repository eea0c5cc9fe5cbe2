//! `uswap bench fork`: what a fork costs a process whose memory uswap manages.
//!
//! A process maps a region through the library, writes every page, and has most of it
//! paged out; then, round after round, it forks:
//!
//! - **exit**: the child `_exit`s at once (the parent's fork, and the child's start-up
//!   before `fork()` returns in it);
//! - **exec**: the child execs `/bin/true` (a shell's fork and exec);
//! - **read**: the child reads every page of the region, most of them paged out, and exits
//!   (a fork without exec that uses its memory: a `multiprocessing` worker, Redis's save).
//!
//! Each is timed from before `fork()` to the parent's `waitpid`, the median of the
//! rounds; the same three on an unmanaged process of the same memory are the yardstick.
//! The child checks every page it reads and the run fails on a wrong one.
//!
//! This module makes the raw calls (fork, exec, wait) and so allows `unsafe`: a leaf.

#![allow(unsafe_code)]

use crate::bench::CommonOpts;
use crate::report::Report;
use anyhow::{anyhow, bail, Result};
use std::time::{Duration, Instant};

const PAGE: usize = 4096;

/// How a child spends its life.
#[derive(Debug, Clone, Copy)]
enum Child {
    Exit,
    Exec,
    Read,
}

/// Runs the benchmark.
///
/// # Errors
/// userfaultfd unavailable, a failed fork, or a child that read a wrong page.
pub fn run(common: &CommonOpts) -> Result<Report> {
    let (region_mib, budget_mib, rounds) = if common.quick { (16, 8, 5) } else { (256, 64, 21) };
    let swap = frontend::Uswap::builder()
        .budget_bytes(budget_mib << 20)
        .swap_size_bytes((region_mib * 4) << 20)
        .build()
        .map_err(|e| anyhow!("userfaultfd: {e}"))?;
    let mut region = swap.map((region_mib as usize) << 20).map_err(|e| anyhow!("{e}"))?;
    fill(region.as_mut_slice());
    let paged = region.pageout(0, region.len()).map_err(|e| anyhow!("{e}"))?;
    let managed = measure(region.addr(), region.len(), rounds)?;
    let mut plain = vec![0u8; (region_mib as usize) << 20];
    fill(&mut plain);
    let unmanaged = measure(plain.as_ptr() as usize, plain.len(), rounds)?;
    let mut report = Report::new("fork");
    let table = report.table(
        &format!(
            "fork of a process with {region_mib} MiB of memory ({} MiB of it paged out under a \
             {budget_mib} MiB budget), median of {rounds} rounds",
            (paged * PAGE as u64) >> 20
        ),
        &["child", "managed", "unmanaged", "ratio"],
    );
    for (i, what) in ["exit at once", "exec /bin/true", "read every page"].iter().enumerate() {
        let (m, u) = (managed[i], unmanaged[i]);
        table.row([
            what.to_string(),
            format!("{:.2} ms", ms(m)),
            format!("{:.2} ms", ms(u)),
            format!("{:.2}", ms(m) / ms(u).max(1e-6)),
        ]);
    }
    for (i, name) in ["exit", "exec", "read"].iter().enumerate() {
        report.field(&format!("fork_{name}_ms_managed"), ms(managed[i]));
        report.field(&format!("fork_{name}_ms_unmanaged"), ms(unmanaged[i]));
    }
    report.field("region_mib", region_mib);
    report.field("paged_out_pages", paged);
    let stats = swap.stats().map_err(|e| anyhow!("{e}"))?;
    report.field("forks", stats.handler.forks);
    report.field("holds_released", stats.handler.holds_released);
    report.note("managed: every fork goes through uswap's fork handlers (the child serves itself)");
    Ok(report)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The pattern word of page `p`.
fn word(p: usize) -> u64 {
    (p as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1
}

fn fill(bytes: &mut [u8]) {
    for (p, page) in bytes.chunks_mut(PAGE).enumerate() {
        page[..8].copy_from_slice(&word(p).to_ne_bytes());
        page[PAGE - 8..].copy_from_slice(&word(p).to_ne_bytes());
    }
}

/// The median time of each kind of child over `rounds` forks of a process whose region
/// `[addr, addr + len)` was filled by [`fill`].
fn measure(addr: usize, len: usize, rounds: usize) -> Result<[Duration; 3]> {
    let mut out = [Duration::ZERO; 3];
    for (i, child) in [Child::Exit, Child::Exec, Child::Read].into_iter().enumerate() {
        let mut times = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            times.push(fork_once(child, addr, len)?);
        }
        times.sort();
        out[i] = times[rounds / 2];
    }
    Ok(out)
}

fn fork_once(child: Child, addr: usize, len: usize) -> Result<Duration> {
    let path = c"/bin/true";
    let argv = [path.as_ptr(), std::ptr::null()];
    let envp = [std::ptr::null::<libc::c_char>()];
    let started = Instant::now();
    // SAFETY: the child runs only the code below (reads, execve, _exit), no allocation.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        bail!("fork: {}", std::io::Error::last_os_error());
    }
    if pid == 0 {
        let code = match child {
            Child::Exit => 0,
            Child::Exec => {
                // SAFETY: a NUL-terminated path and null-terminated argument arrays.
                unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
                2
            }
            Child::Read => i32::from(!pages_hold_their_words(addr, len)),
        };
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
        bail!("waitpid: {}", std::io::Error::last_os_error());
    }
    let took = started.elapsed();
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("a {child:?} child failed (status {status:#x}): it read a wrong page or died");
    }
    Ok(took)
}

/// Whether every page of `[addr, addr + len)` holds its pattern word at both ends.
fn pages_hold_their_words(addr: usize, len: usize) -> bool {
    (0..len / PAGE).all(|p| {
        let at = addr + p * PAGE;
        // SAFETY: pages of a live region or vector of the parent, copied into this child.
        let (head, tail) = unsafe {
            (
                std::ptr::read_volatile(at as *const u64),
                std::ptr::read_volatile((at + PAGE - 8) as *const u64),
            )
        };
        head == word(p) && tail == word(p)
    })
}
