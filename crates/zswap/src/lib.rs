//! zswap: the compressed pool in front of the swap device.
//!
//! The kernel's zswap takes a page on its way to swap, compresses it, and keeps the object
//! in a zsmalloc pool indexed by swap entry, with an LRU that writes the coldest objects
//! back to the device when the pool is full (reference/kernel-swap.md §4). This crate is
//! built in that order:
//!
//! - [`compress`]: the compressor interface, chosen per pool from a string (`"lz4"`,
//!   `"zstd:2"`, `"none"`), compressing into caller buffers with reused contexts, and
//!   reporting pages that do not compress below a threshold.
//! - [`corpus`]: a seeded corpus of pages resembling real process memory, with the measured
//!   ratio of each kind, for the tests and benchmarks of every layer.
//! - Later: store / load / invalidate, the LRU and writeback, on `zpool` and `xarray`.
//!
//! The store path will use the compressor like this (one buffer per thread, no allocation):
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

pub mod compress;
pub mod corpus;
mod error;

pub use compress::{Compressor, CompressorConfig, CompressorKind};
pub use error::{CompressError, Error};
