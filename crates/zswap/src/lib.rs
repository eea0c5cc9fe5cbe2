//! zswap: the compressed pool in front of the swap device.
//!
//! The kernel's zswap takes a page on its way to swap, compresses it, and keeps the object
//! in a zsmalloc pool indexed by swap entry, with an LRU that writes the coldest objects
//! back to the device when the pool is full (mm/zswap.c). This crate is
//! built in that order:
//!
//! - [`compress`]: the compressor interface, chosen per pool from a string (`"lz4"`,
//!   `"zstd:2"`, `"none"`), compressing into caller buffers with reused contexts, and
//!   reporting pages that do not compress below a threshold.
//! - [`corpus`]: a seeded corpus of pages resembling real process memory, with the measured
//!   ratio of each kind, for the tests and benchmarks of every layer.
//! - [`Zswap`]: store / load / invalidate keyed by [`slots::SwapEntry`], on the `zpool`
//!   allocator, indexed by one `xarray` tree per 64 MiB of swap space (`tree`, whose
//!   value entries are the objects' handles: `entry`), with an LRU and second chance
//!   (`lru`, linking the slots in a table by slot), a pool limit with hysteresis
//!   ([`config`]), and writeback of cold entries to the swap device through a
//!   [`WritebackTarget`] (`writeback`), by the kernel's protocol.
//! - [`ZswapStats`]: the kernel's debugfs counters by name, and one per rejection,
//!   fallback and writeback outcome.
//! - [`faults`]: hooks that make the compressor and the allocator fail on purpose.
//!
//! ```text
//!   store(entry, page) ─► limit check ─► compress (thread scratch) ─► zpool malloc+write
//!        ─► tree lock [ xa store ─► LRU lock [ unlink the replaced, link at head ]]
//!   load(entry, page)  ─► tree lock [ xa load, referenced = 1 ] ─► class lock [ copy
//!        or decompress the object ]
//!   writeback(target)  ─► LRU lock [ tail: 2nd chance or candidate slot ] ─► pin ─►
//!        tree lock [ an entry? copy ] ─► decompress ─► write ─► erase if same ─► unpin
//! ```
//!
//! Lock order, everywhere: a tree lock → the LRU lock → a zpool class lock. No lock is
//! held while the writeback target or a fault hook runs.
//!
//! Data-safety rules kept here (docs/ARCHITECTURE.md, "Rules that keep data safe"):
//! - a failed store invalidates the slot's older entry;
//! - a load never drops the entry unless loads are exclusive (off by default: the engine
//!   frees the slot, and so the entry, only after the page is mapped);
//! - writeback erases an entry only after the device write succeeded, and only if the
//!   tree still holds the very entry it read (the same pool handle, after pinning the
//!   slot);
//! - a decompression error is returned and counted, and the entry kept; with checksums
//!   on ([`CompressorConfig::checksum`]) a corruption that still decodes is caught too.
//!   Without them, as in the kernel, only what the decoder refuses is caught, and raw
//!   pages carry no checksum at all.
//!
//! One [`Zswap`] serves one swap device (its entries all carry that device's type; the
//! slot count given at setup bounds the offsets). The engine uses it like this:
//!
//! ```
//! use slots::{SwapEntry, SwapType};
//! use std::collections::HashMap;
//! use std::sync::Mutex;
//! use zswap::compress::{CompressorConfig, CompressorKind, PAGE_SIZE};
//! use zswap::{WritebackPin, WritebackTarget, Zswap, ZswapConfig};
//!
//! /// A device that is a map; a real target pins through the swap cache.
//! #[derive(Default)]
//! struct Disk(Mutex<HashMap<u64, Vec<u8>>>);
//! impl WritebackTarget for Disk {
//!     fn pin(&self, entry: SwapEntry) -> Option<WritebackPin> {
//!         Some(WritebackPin(entry.offset()))
//!     }
//!     fn write(&self, pin: &WritebackPin, page: &[u8; PAGE_SIZE]) -> Result<(), String> {
//!         self.0.lock().unwrap().insert(pin.0, page.to_vec());
//!         Ok(())
//!     }
//!     fn unpin(&self, _pin: WritebackPin, _written: bool) {}
//! }
//!
//! let config = ZswapConfig::new(CompressorConfig::new(CompressorKind::Lz4), 64 << 20);
//! let zswap = Zswap::new(config, 1 << 16)?; // a 20% pool of a 64 MiB budget, 64 Ki slots
//! let entry = SwapEntry::new(SwapType::new(0).unwrap(), 42);
//! let page = [b'x'; PAGE_SIZE];
//! zswap.store(entry, &page).expect("stored"); // Err(Reject): write it to the device
//! let mut back = [0u8; PAGE_SIZE];
//! assert_eq!(zswap.load(entry, &mut back)?, true);
//! assert_eq!(back, page);
//! let disk = Disk::default();
//! assert_eq!(zswap.writeback(&disk, 1), 1); // 2 looks: one second chance, one write
//! assert!(!zswap.contains(entry));
//! zswap.check_invariants();
//! # Ok::<(), zswap::Error>(())
//! ```
//!
//! The store path uses the compressor like this (one buffer per thread, no allocation):
//!
//! ```
//! use zswap::compress::{Compressor, CompressorKind, COMPRESS_OUT_BYTES, PAGE_SIZE};
//! let compressor = Compressor::new("lz4".parse::<CompressorKind>()?)?;
//! let page = [7u8; PAGE_SIZE];
//! let mut buf = vec![0u8; COMPRESS_OUT_BYTES];
//! let len = compressor.compress(&page, &mut buf)?; // Err(Incompressible) → store raw
//! let mut back = [0u8; PAGE_SIZE];
//! compressor.decompress(&buf[..len], &mut back)?;
//! assert_eq!(back, page);
//! # Ok::<(), zswap::Error>(())
//! ```

#![deny(unsafe_code)]

mod check;
pub mod compress;
pub mod config;
pub mod corpus;
mod entry;
mod error;
pub mod faults;
mod load;
mod lru;
mod stats;
mod tree;
mod writeback;
mod zswap;

pub use compress::{Compressor, CompressorConfig, CompressorKind};
pub use config::{Incompressible, Limits, ZswapConfig};
pub use error::{CompressError, Error, Reject};
pub use faults::FaultHooks;
pub use stats::ZswapStats;
pub use tree::{TREE_SHIFT, TREE_SLOTS};
pub use writeback::{Pass, WritebackPin, WritebackTarget};
pub use zswap::Zswap;
