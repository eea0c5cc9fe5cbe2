//! How a zswap pool is set up, and the limits derived from the setup.
//!
//! The pool limit is a share of the budget, as the kernel's is a share of RAM
//! (`max_pool_percent`, default 20), with hysteresis: once the pool reaches the limit it
//! refuses stores until it has shrunk to `accept_threshold_percent` (default 90) of the
//! limit, so pages do not flip in and out of the pool while it is full
//! (mm/zswap.c, `zswap_check_limits`).
//!
//! ```text
//!   0 ─────────────── accept (90% of limit) ───── limit (20% of budget) ──► total_bytes
//!   stores accepted ..│................ refused once the limit was hit ...│ refused
//!                     └ the refusals stop here on the way down
//! ```
//!
//! Every setting is checked once, in [`Limits::new`], with a clear error: a zero budget, a
//! percentage out of range, a limit too small for the pool's own structures (under
//! [`MIN_POOL_BYTES`]) or beyond what the allocator addresses, a zstd level out of range.

use crate::compress::CompressorConfig;
use crate::error::Error;

/// The smallest pool limit accepted: 64 KiB. Below it the pool's fixed structures (the
/// allocator's class table, a first chunk of LRU nodes, the index roots: ~40 KiB) would
/// already be over the limit. A limit this small is for tests and the simulator, where a
/// pool that fills in a few stores exercises the limit, the hysteresis and writeback; real
/// budgets give limits of megabytes.
pub const MIN_POOL_BYTES: u64 = 64 << 10;

/// The most pages the allocator can hold (zpool's `MAX_POOL_PAGES`, 2^24, which that crate
/// does not export; a test checks the allocator refuses one more).
pub(crate) const ZPOOL_MAX_PAGES: u64 = 1 << 24;

/// The largest pool limit accepted: what the allocator can address (64 GiB).
pub const MAX_POOL_BYTES: u64 = ZPOOL_MAX_PAGES * zpool::PAGE_SIZE as u64;

/// Default share of the budget the pool may take (the kernel's `max_pool_percent`).
pub const DEFAULT_MAX_POOL_PERCENT: u32 = 20;

/// Default accept threshold, in percent of the limit (`accept_threshold_percent`).
pub const DEFAULT_ACCEPT_THRESHOLD_PERCENT: u32 = 90;

/// What to do with a page that does not compress below the huge-class size, or that the
/// compressor fails on. (With the `none` compressor every page is stored as it is, in
/// either mode: storing pages uncompressed is what that compressor is for.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Incompressible {
    /// Store the page as it is (4096 bytes, the huge class): it keeps its place in the LRU
    /// order and is written back to the device in turn (the kernel's behaviour when
    /// writeback is enabled). Counted in `stored_incompressible_pages`.
    #[default]
    StoreRaw,
    /// Refuse it ([`crate::Reject::CompressPoor`] / [`crate::Reject::CompressFail`]): the
    /// caller writes it to the device at once. Counted in `reject_compress_poor` /
    /// `reject_compress_fail`.
    Reject,
}

/// How a pool is set up (the contract with the engine).
#[derive(Debug, Clone)]
pub struct ZswapConfig {
    /// The compressor (from [`crate::compress`]).
    pub compressor: CompressorConfig,
    /// The budget the pool limit is a share of, in bytes.
    pub budget_bytes: u64,
    /// The pool limit, in percent of the budget: 1..=100, default 20.
    pub max_pool_percent: u32,
    /// Once full, the pool accepts stores again below this percentage of the limit:
    /// 0..=100, default 90.
    pub accept_threshold_percent: u32,
    /// Store incompressible pages raw (default) or reject them.
    pub incompressible: Incompressible,
    /// Drop the pool's copy when a load succeeds (the kernel's exclusive load). Default
    /// off: in uswap the engine frees the slot, and so invalidates the entry, right after
    /// the page is mapped; dropping it earlier would lose the only copy if the mapping
    /// failed.
    pub exclusive_load: bool,
}

impl ZswapConfig {
    /// A configuration with the defaults: 20% of `budget_bytes`, accept threshold 90%,
    /// incompressible pages stored raw, no exclusive load.
    pub fn new(compressor: CompressorConfig, budget_bytes: u64) -> Self {
        ZswapConfig {
            compressor,
            budget_bytes,
            max_pool_percent: DEFAULT_MAX_POOL_PERCENT,
            accept_threshold_percent: DEFAULT_ACCEPT_THRESHOLD_PERCENT,
            incompressible: Incompressible::StoreRaw,
            exclusive_load: false,
        }
    }
}

/// The limits a configuration gives, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The pool may hold at most this many bytes (`budget * max_pool_percent / 100`).
    pub max_pool_bytes: u64,
    /// Once full, the pool accepts stores again at or below this many bytes.
    pub accept_bytes: u64,
}

impl Limits {
    /// Checks `config` and derives the limits.
    ///
    /// # Errors
    /// [`Error::ZeroBudget`], [`Error::Percent`], [`Error::PoolLimit`].
    pub fn new(config: &ZswapConfig) -> Result<Limits, Error> {
        Limits::of(config.budget_bytes, config.max_pool_percent, config.accept_threshold_percent)
    }

    /// The limits `max_pool_percent` and `accept_threshold_percent` of `budget_bytes`
    /// give.
    ///
    /// # Errors
    /// As [`Limits::new`].
    pub fn of(
        budget_bytes: u64,
        max_pool_percent: u32,
        accept_threshold_percent: u32,
    ) -> Result<Limits, Error> {
        if budget_bytes == 0 {
            return Err(Error::ZeroBudget);
        }
        let percent = |what, percent, min| {
            if (min..=100).contains(&percent) {
                Ok(())
            } else {
                Err(Error::Percent { what, percent, min, max: 100 })
            }
        };
        percent("max_pool_percent", max_pool_percent, 1)?;
        percent("accept_threshold_percent", accept_threshold_percent, 0)?;
        let share = |bytes: u64, percent: u32| {
            (u128::from(bytes) * u128::from(percent) / 100).min(u128::from(u64::MAX)) as u64
        };
        let max_pool_bytes = share(budget_bytes, max_pool_percent);
        if !(MIN_POOL_BYTES..=MAX_POOL_BYTES).contains(&max_pool_bytes) {
            return Err(Error::PoolLimit {
                limit_bytes: max_pool_bytes,
                min_bytes: MIN_POOL_BYTES,
                max_bytes: MAX_POOL_BYTES,
            });
        }
        let accept_bytes = share(max_pool_bytes, accept_threshold_percent);
        Ok(Limits { max_pool_bytes, accept_bytes })
    }

    /// The allocator's own hard page limit: the soft limit plus a quarter, so stores racing
    /// past the soft limit (each adds at most one zspage) are refused by the soft check,
    /// not by the allocator, while memory stays bounded.
    pub(crate) fn zpool_max_pages(&self) -> usize {
        let pages = self.max_pool_bytes / zpool::PAGE_SIZE as u64;
        (pages + pages / 4 + 64).min(ZPOOL_MAX_PAGES) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zpool::{PoolConfig, ZsPool};

    #[test]
    fn zpool_max_pages_is_the_allocators_limit() {
        let at = PoolConfig { max_pages: ZPOOL_MAX_PAGES as usize, alloc_fail_hook: None };
        assert!(ZsPool::new(at).is_ok());
        let past = PoolConfig { max_pages: ZPOOL_MAX_PAGES as usize + 1, alloc_fail_hook: None };
        assert!(ZsPool::new(past).is_err());
    }

    #[test]
    fn limits_are_shares_of_the_budget() {
        let config = ZswapConfig::new(CompressorConfig::new(crate::CompressorKind::Lz4), 100 << 20);
        let limits = Limits::new(&config).expect("valid");
        assert_eq!(limits.max_pool_bytes, (100 << 20) / 5);
        assert_eq!(limits.accept_bytes, limits.max_pool_bytes * 9 / 10);
        assert!(limits.zpool_max_pages() as u64 * 4096 > limits.max_pool_bytes);
    }
}
