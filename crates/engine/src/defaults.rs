//! The defaults, one table for each way uswap is used: [`LIBRARY`] for a program that
//! embeds it (the Rust `Builder`, the C API, [`crate::EngineConfig`]'s `Default`) and
//! [`RUN`] for `uswap run`. Every place that needs a default reads it here.
//!
//! | setting | library | `uswap run` | why they differ |
//! |---|---|---|---|
//! | budget | 256 MiB | half the free memory | a run sizes itself to the machine (cli's budget.rs); a library cannot know what else its process holds |
//! | folio order | 0 | 4 | an embedder manages regions it laid out itself, and a fault maps exactly the page it touched; a run's program is anyone's, and 16-page folios cut its faults where it walks memory in order |
//! | large folios | always | sequential | at order 0 there is nothing to choose; at a run's order 4 scattered touches would each spend 64 KiB of budget |
//! | swap size | 4 GiB | 8 GiB | one process's regions, against a whole tree's; both files are sparse and cost only what is written |
//! | pool | lz4, 20 % of the budget | the same | |
//! | encryption | on | on | |
//! | readahead | 8 pages | 8 pages | |

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
