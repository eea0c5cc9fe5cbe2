//! The swap device layer, as Linux 6.18 does it (mm/swapfile.c), with the swap-table
//! semantics of 7.0 for the cache pin.
//!
//! A **swap device** is `N` slots, one page each, over a [`backend::Backend`] that stores
//! the pages. Slot 0 is the header and is never allocated. Slots are grouped in naturally
//! aligned **clusters** of 512 (2 MiB), and a folio of 2^order pages gets 2^order
//! contiguous, aligned slots inside one cluster: order 0 (4 KiB) up to order 9 (2 MiB).
//!
//! ```text
//!   device   | cluster 0            | cluster 1            | cluster 2 ...
//!   slots    |H . . . . . . . . . . | . . . . . . . . . .  |
//!              ^ header (bad slot)
//!   each cluster: count, order, flag, lock, one byte per slot
//!   lists (device lock): free, nonfull[order], frag[order], full, discard
//! ```
//!
//! What this crate holds, by module:
//! - [`entry`](SwapEntry): `(type, offset)` packed in 63 bits (fits an XArray value).
//! - `cluster`: the cluster, its slot bytes (count + cache pin, counts past 62 in an
//!   extend table), its flag and the lists, with the table of legal flag transitions.
//! - `device`: [`SwapDevice`]: slot operations (`dup`, `put`, `put_cache`,
//!   `try_pin_cache`), the free path and its hook, discard.
//! - `alloc`: the allocator in 6.18's order ([`AllocPolicy::Current`]) or the legacy one.
//! - [`SwapDevices`]: the device table (at most [`MAX_SWAPFILES`]).
//!
//! Invariants (checked by [`SwapDevice::check_invariants`]): a cluster's flag always
//! names the list it is on; its count equals its used slots; a slot is free exactly when
//! its count is 0 and it is not cache-pinned; the free hook runs before a freed slot can
//! be allocated again.

#![deny(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod alloc;
mod cluster;
mod device;
mod entry;
mod error;
mod invariants;
mod registry;
mod stats;
mod sync;

#[cfg(not(loom))]
pub use alloc::as_cpu;
pub use cluster::{
    transition_is_legal, ClusterFlag, ListId, SWAP_COUNT_EXTENDED, SWAP_HAS_CACHE, SWAP_MAP_BAD,
    SWAP_MAP_MAX,
};
pub use device::{AllocPolicy, SlotFreeHook, SwapDevice, SwapDeviceOptions, MAX_SLOTS};
pub use entry::{SwapEntry, SwapType, SWP_OFFSET_BITS, SWP_OFFSET_MAX, SWP_TYPE_BITS};
pub use error::Error;
pub use invariants::ClusterState;
pub use registry::SwapDevices;
pub use stats::{DeviceCounters, SwapDeviceStats};

/// Slots per cluster (`SWAPFILE_CLUSTER` = `HPAGE_PMD_NR`): 2 MiB of 4 KiB pages.
pub const SWAPFILE_CLUSTER: usize = 512;
/// Largest folio order (`PMD_ORDER`): one whole cluster.
pub const MAX_ORDER: u32 = 9;
/// Orders 0 ..= 9 (`SWAP_NR_ORDERS`).
pub const SWAP_NR_ORDERS: usize = MAX_ORDER as usize + 1;
/// Most devices at once (`MAX_SWAPFILES`).
pub const MAX_SWAPFILES: usize = 32;
/// Bytes per slot.
pub const PAGE_SIZE: usize = backend::PAGE_SIZE;
