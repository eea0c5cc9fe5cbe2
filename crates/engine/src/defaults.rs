//! The defaults, one table for each way uswap is used: [`LIBRARY`] for a program that
//! embeds it (the Rust `Builder`, the C API, [`crate::EngineConfig`]'s `Default`) and
//! [`RUN`] for `uswap run`. Every place that needs a default reads it here.
//!
//! Where they differ, and why:
//!
//! - budget: 256 MiB for the library; half the free memory for a run, which sizes itself to
//!   the machine (cli's budget.rs), where a library cannot know what else its process holds;
//! - folio order: 0 for the library, whose embedder manages regions it laid out itself and
//!   gets a fault mapped exactly the page it touched; 4 for a run, whose program is anyone's
//!   and whose faults 16-page folios cut where it walks memory in order;
//! - large folios: always at the library's order 0, where there is nothing to choose;
//!   sequential at a run's order 4, where scattered touches would each spend 64 KiB;
//! - swap size: 4 GiB for one process's regions, 8 GiB for a whole tree's; both files are
//!   sparse and cost only what is written.
//!
//! The same for both: an lz4 pool of 20% of the budget, encryption on, readahead of up to 8
//! pages.

use crate::config::LargeFolios;
use zswap::CompressorKind;

/// One column of the table in the module essay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Defaults {
    /// The budget in bytes, where the caller gives none (`uswap run` computes its own:
    /// this is its floor for a machine it cannot read).
    pub budget_bytes: u64,
    /// The largest folio, 2^order pages.
    pub folio_order: u32,
    /// When a fault takes a large folio.
    pub large_folios: LargeFolios,
    /// The swap device's size in bytes.
    pub swap_size_bytes: u64,
    /// The pool's compressor.
    pub compressor: CompressorKind,
    /// The pool's share of the budget, percent.
    pub pool_percent: u32,
    /// Whether pages written to the swap device are sealed (AES-256-GCM).
    pub encrypt: bool,
    /// The most pages one swap-in reads ahead.
    pub readahead_max_pages: u32,
}

/// A program that embeds uswap.
pub const LIBRARY: Defaults = Defaults {
    budget_bytes: 256 << 20,
    folio_order: 0,
    large_folios: LargeFolios::Always,
    swap_size_bytes: 4 << 30,
    compressor: CompressorKind::Lz4,
    pool_percent: 20,
    encrypt: true,
    readahead_max_pages: 8,
};

/// `uswap run`.
pub const RUN: Defaults = Defaults {
    folio_order: 4,
    large_folios: LargeFolios::Sequential,
    swap_size_bytes: 8 << 30,
    ..LIBRARY
};
