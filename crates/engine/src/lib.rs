//! The uswap engine: the swap-out and swap-in paths, the swap cache, the zero map,
//! workingset detection and reclaim, independent of where pages come from.
//!
//! The engine drives a [`PageSource`]: the userfaultfd frontend implements it over a real
//! process, the simulator over simulated memory. See docs/ARCHITECTURE.md for the page-out
//! and page-in paths in order, and each module for its part.

#![deny(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod budget;
pub mod config;
pub mod defaults;
mod engine;
pub mod error;
mod events;
mod fault;
mod frames;
pub mod hooks;
pub mod lru;
pub mod mem_source;
pub mod page_source;
mod quiesce;
pub mod ranges;
mod readahead;
mod reclaim;
pub mod region;
mod staged;
pub mod stats;
mod storage;
pub mod swap_cache;
mod sync;
pub mod workingset;
mod writeback;
pub mod zeromap;

pub use config::{BackendConfig, EngineConfig, LargeFolios, SwapConfig};
pub use engine::{AddrRanges, AllLocked, Engine, FaultOutcome, HoldId};
pub use error::Error;
pub use page_source::{Mapped, PageSource, SourceError, StageLoc, Taken};
pub use staged::StagedCopy;
pub use storage::Tier;

/// Bytes in a base page (x86-64).
pub const PAGE_SIZE: usize = 4096;

/// The largest folio order (2 MiB folios of 4 KiB pages: one swap cluster).
pub const MAX_ORDER: u32 = 9;
