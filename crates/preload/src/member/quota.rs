//! This member's side of the tree's swap-space counter (`--swap-size` for the whole tree):
//! the run directory's counter file, mapped shared ([`runstat::proto::QUOTA_FILE_BYTES`]),
//! as the [`SpaceQuota`] of this process's swap file.
//!
//! A reservation takes the bytes from the tree's word (a compare-and-swap that never
//! passes the limit), then adds them to this member's row; a release takes them off the
//! row, then the tree's word. A member killed between the two steps of a reservation
//! leaves one chunk (2 MiB) counted until the run ends; the broker gives back the rest of
//! a dead member's row (crates/cli/src/run/quota.rs). The row changes when a forked child
//! joins as a member of its own (`rejoin_after_fork`).
//!
//! The same file holds the run's far ledger ([`TreeLedger`]): the run ids of this tree's
//! far tiers and how many slots each may have on the servers, for `uswap run` to delete
//! once the run is over. An entry is taken once per far tier (a `fetch_add` on the count);
//! a killed process has written its entry already.
//!
//! Context: lock-free; any thread; also in a forked child's single thread.

use super::sys;
use backend::SpaceQuota;
use runstat::proto::{FAR_ENTRIES, FAR_FIRST, FAR_NEXT};
use runstat::proto::{QUOTA_FIRST_ROW, QUOTA_LIMIT, QUOTA_MAGIC, QUOTA_MAGIC_WORD, QUOTA_USED};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};

/// This member's row.
static ROW: AtomicU32 = AtomicU32::new(0);

counters::table! {
    /// The tree quota's live counters.
    pub struct Quota;
    /// A snapshot of them (in the stats file, `swap_quota_*`).
    #[derive(Debug, Clone, Copy, Default)]
    #[allow(dead_code)]
    pub struct QuotaSnapshot {
        prefix "swap_quota_";
        counters {
            /// Reservations refused (the tree's swap space was used up), in bytes asked.
            refused_bytes,
        }
    }
}

/// The tree quota's counters (zeroed in a forked child, which counts its own).
pub static COUNTERS: Quota = Quota::new();

fn word(index: usize) -> Option<&'static AtomicU64> {
    sys::counter_word(index)
}

/// Maps the counter file at `path` (once per process; a forked child keeps its parent's
/// mapping) and uses `row`.
///
/// # Errors
/// errno of the mapping, or `EINVAL` for a file that is not a counter file.
pub fn attach(path: &[u8], row: u32) -> Result<(), i32> {
    sys::map_counter(path)?;
    if word(QUOTA_MAGIC_WORD).map(|w| w.load(SeqCst)) != Some(QUOTA_MAGIC) {
        return Err(libc::EINVAL);
    }
    set_row(row)
}

/// The row in use (tests).
#[cfg(test)]
pub fn row() -> u32 {
    ROW.load(SeqCst)
}

/// Uses `row` from now on.
///
/// # Errors
/// `EINVAL` for a row past the file's.
pub fn set_row(row: u32) -> Result<(), i32> {
    if row as usize >= runstat::proto::QUOTA_ROWS {
        return Err(libc::EINVAL);
    }
    ROW.store(row, SeqCst);
    Ok(())
}

/// The tree's quota as seen from this process.
#[derive(Debug)]
pub struct TreeQuota;

impl SpaceQuota for TreeQuota {
    fn reserve(&self, bytes: u64) -> bool {
        let (Some(limit), Some(used)) = (word(QUOTA_LIMIT), word(QUOTA_USED)) else {
            return true; // no counter: nothing to bound (never the case once joined)
        };
        let limit = limit.load(SeqCst);
        let taken =
            used.fetch_update(SeqCst, SeqCst, |u| u.checked_add(bytes).filter(|&a| a <= limit));
        if taken.is_err() {
            COUNTERS.refused_bytes.fetch_add(bytes, SeqCst);
            return false;
        }
        if let Some(row) = word(QUOTA_FIRST_ROW + ROW.load(SeqCst) as usize) {
            row.fetch_add(bytes, SeqCst);
        }
        true
    }

    fn release(&self, bytes: u64) {
        let Some(used) = word(QUOTA_USED) else { return };
        if let Some(row) = word(QUOTA_FIRST_ROW + ROW.load(SeqCst) as usize) {
            // A row the broker already gave back (it saw this image gone) is left at zero.
            let _ = row.fetch_update(SeqCst, SeqCst, |r| Some(r.saturating_sub(bytes)));
        }
        let _ = used.fetch_update(SeqCst, SeqCst, |u| Some(u.saturating_sub(bytes)));
    }

    fn available(&self, bytes: u64) -> bool {
        match (word(QUOTA_LIMIT), word(QUOTA_USED)) {
            (Some(limit), Some(used)) => {
                used.load(SeqCst).saturating_add(bytes) <= limit.load(SeqCst)
            }
            _ => true,
        }
    }
}

/// The run's far ledger in the counter file (module essay), as far's `Ledger`.
#[derive(Debug)]
pub struct TreeLedger;

/// The one ledger of this process.
pub static TREE_LEDGER: TreeLedger = TreeLedger;

impl far::Ledger for TreeLedger {
    /// `None` before this process joined its run (the file is not mapped yet) or when the
    /// run's entries are all taken.
    fn enter(&self, run: u64) -> Option<usize> {
        let next = word(FAR_NEXT)?;
        let entry = next.fetch_add(1, SeqCst) as usize;
        if entry >= FAR_ENTRIES {
            return None;
        }
        word(FAR_FIRST + 2 * entry)?.store(run + 1, SeqCst);
        Some(entry)
    }

    fn reach(&self, entry: usize, slots: u64) {
        if let Some(mark) = word(FAR_FIRST + 2 * entry + 1) {
            mark.fetch_max(slots, SeqCst);
        }
    }
}
