//! The ledger: where a far tier says which keys it may have put on the servers, so that
//! someone else can delete them after it is gone.
//!
//! A `FarBackend` deletes its copies when it is dropped. Under `uswap run` it never is:
//! the shim's state lives until the process exits, and a forked child reads its parent's
//! pages through the parent's keys after the parent's image exec'd or exited, so no image
//! may delete at its own exit. The run as a whole knows when it is over (the last member
//! leaves the run directory), so `uswap run` deletes: every far tier of the run writes in
//! the ledger its run id and how many slots (from 0) it may have stored, before the first
//! copy of a slot past that leaves (the flusher asks [`Ledger::reach`] before it sends);
//! at the end `uswap run` deletes `<run id><slot>` for every slot below on every server
//! ([`delete_runs`]). A process killed with SIGKILL has written its entry already: the
//! ledger is shared memory, not a message.
//!
//! The mark grows by [`REACH_STEP`] slots at a time, so the flusher calls the ledger once
//! per 2 MiB of new slots, and the deletion sends at most that many deletes too many.
//!
//! One ledger per process, set once ([`set_ledger`]) before the far tier starts; without
//! one (benchmarks, tests, an engine outside `uswap run`) the tier deletes its copies when
//! dropped, as before.

use crate::proto::Conn;
use crate::{FarConfig, Key};
use std::sync::OnceLock;

/// Slots the mark grows by at once: one swap cluster (2 MiB of pages).
pub const REACH_STEP: u64 = 512;

/// Deletes sent in one pipeline (each `md KEY q`, about 25 bytes).
const DELETE_BATCH: usize = 1024;

/// Where the far tiers of a process record their keys (module essay).
pub trait Ledger: Send + Sync + std::fmt::Debug {
    /// A far tier's run `run` will store copies: its entry, or `None` when the ledger is
    /// full or not ready (the caller tries again at its next [`Ledger::reach`]).
    fn enter(&self, run: u64) -> Option<usize>;

    /// Slots `0..slots` of `entry`'s run may be on the servers from now on. Never lowers
    /// the mark.
    fn reach(&self, entry: usize, slots: u64);
}

static LEDGER: OnceLock<&'static dyn Ledger> = OnceLock::new();

/// Sets this process's ledger (once; later calls are ignored).
pub fn set_ledger(ledger: &'static dyn Ledger) {
    let _ = LEDGER.set(ledger);
}

/// This process's ledger, if one was set.
pub(crate) fn ledger() -> Option<&'static dyn Ledger> {
    LEDGER.get().copied()
}

/// What [`delete_runs`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Deleted {
    /// Deletes sent (one per key per server reached).
    pub sent: u64,
    /// Of them, keys a server did not hold (`NF`): slots never used, or held elsewhere.
    pub not_found: u64,
    /// Servers that failed or did not answer in time (their keys stay).
    pub server_errors: u64,
}

/// Deletes, on every server of `config`, the keys of slots `0..slots` of each `(run,
/// slots)`: quiet `md` pipelines of [`DELETE_BATCH`], each ended by `mn`.
///
/// Context: blocks; each request bounded by `config.timeout`. A server that fails is left
/// (counted) and the others go on.
pub fn delete_runs(config: &FarConfig, runs: &[(u64, u64)]) -> Deleted {
    let mut done = Deleted::default();
    for addr in &config.servers {
        match delete_on(addr, config, runs, &mut done) {
            Ok(()) => {}
            Err(_) => done.server_errors += 1,
        }
    }
    done
}

fn delete_on(
    addr: &std::net::SocketAddr,
    config: &FarConfig,
    runs: &[(u64, u64)],
    done: &mut Deleted,
) -> std::io::Result<()> {
    let mut conn = Conn::connect(addr, config.timeout)?;
    for &(run, slots) in runs {
        let mut slot = 0;
        while slot < slots {
            let end = slots.min(slot + DELETE_BATCH as u64);
            for s in slot..end {
                conn.push_delete(&Key { run, slot: s });
            }
            conn.push_noop();
            conn.send()?;
            done.not_found += conn.read_until_noop()?;
            done.sent += end - slot;
            slot = end;
        }
    }
    Ok(())
}
