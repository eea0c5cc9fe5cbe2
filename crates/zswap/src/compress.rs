//! Compressors: one page in, one object out, into caller-provided buffers.
//!
//! A zswap pool owns one [`Compressor`], chosen at setup from a string (`"lz4"`, `"zstd"`,
//! `"zstd:2"`, `"none"`) as the kernel's `zswap.compressor` parameter is. Existing objects
//! stay with the compressor of the pool that stored them; a new compressor means a new pool.
//!
//! ```text
//!   compress:   &[u8; 4096] ──codec──► out[..n] (+ crc32c of the page, 4 B, if enabled)
//!               n >= threshold ──► Err(Incompressible): zswap stores the page raw or rejects it
//!   decompress: src ──codec──► page; decoded length must be exactly 4096; checksum compared
//! ```
//!
//! Kinds:
//! - `lz4` (liblz4 1.10, C, through the `lz4` crate's safe block API): the fastest codec;
//!   the kernel's zram/zswap favourite. Chosen over lz4_flex (pure Rust) by measurement:
//!   on the page corpus liblz4 decompresses 1.6x faster than lz4_flex in its unsafe mode
//!   and 1.75x faster than in its safe mode, and compresses 5-10% faster
//!   (docs/benchmarks.md, `uswap bench zpool`).
//! - `zstd:1..=3` (libzstd through the `zstd` crate): better ratio, slower to compress.
//!   `zstd` alone means level 3, the kernel's default. Higher levels cost more compression
//!   time than a swap-out path can spend (level 3 already compresses about half as fast as
//!   level 1) for a few percent of ratio, so they are refused. A trained dictionary
//!   ([`train_dictionary`]) can be given in [`CompressorConfig::dictionary`].
//! - `none`: the identity. The object is the page itself (4096 bytes, the pool's huge
//!   class); the threshold and the checksum do not apply to it.
//!
//! Contexts: a zstd compression or decompression context costs tens to hundreds of KiB to
//! set up, so none is made per page. Each compressor keeps a stack of idle contexts (one
//! per thread that has used it at the same time, at most [`MAX_IDLE_CONTEXTS`] kept); a call
//! pops one, uses it, and pushes it back. In steady state nothing is allocated by zstd and
//! the stack lock is held for a pop or a push only. liblz4's block compressor keeps its
//! 16 KiB state on the C stack (`LZ4_HEAPMODE` 0) and allocates nothing; resetting it per
//! call costs nothing measurable (`LZ4_compress_fast_extState_fastReset` with a reused
//! state measured the same). Decompression allocates nothing for either codec.
//!
//! Memory: every zstd context allocates through Rust's global allocator, never through
//! `malloc` ([`zstd_ctx`]: zstd's `ZSTD_customMem`), from its creation on any thread to its
//! workspace, dictionary copies and frees. Inside `uswap run` the global allocator is the
//! shim's arena, so zstd runs on the engine's threads without touching the program's heap;
//! the allocations are counted ([`CompressStats::zstd_allocs`]).
//!
//! Safety of data: decompression of a malformed object is an error, never a panic or an
//! out-of-bounds access (both decoders are bounds-checked); the decoded length must be
//! exactly 4096; on any error the page is zero-filled so no half-decoded bytes can leak. A
//! corruption that happens to form another valid stream of the right length is caught only
//! by the checksum ([`CompressorConfig::checksum`], a crc32c of the page stored after the
//! compressed bytes: 4 bytes per object and one hardware crc32c per page each way).

use crate::error::Error;
use parking_lot::Mutex;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use zstd_ctx::{ZstdMemory, ZstdMemoryStats};

mod zstd_ctx;

/// A base page.
pub const PAGE_SIZE: usize = 4096;

/// The output buffer every `compress` call needs: more than any codec's worst-case
/// expansion of a page (lz4 4096 + 4096/255 + 16 = 4128, zstd 4096 + 78 = 4174) plus the
/// 4-byte checksum. The kernel gives each CPU a two-page buffer for the same reason.
pub const COMPRESS_OUT_BYTES: usize = 2 * PAGE_SIZE;

/// Accepted zstd levels (module essay says why only these).
pub const ZSTD_LEVELS: std::ops::RangeInclusive<i32> = 1..=3;

/// The level `"zstd"` means: the kernel's default (`ZSTD_DEF_LEVEL`).
pub const ZSTD_DEFAULT_LEVEL: i32 = 3;

/// Idle contexts kept per compressor; more concurrent users than this make and drop their
/// own (counted in `contexts_created`).
pub const MAX_IDLE_CONTEXTS: usize = 64;

const CHECKSUM_BYTES: usize = 4;

/// Which codec a pool uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressorKind {
    /// Store pages as they are.
    None,
    /// lz4 block format (liblz4).
    Lz4,
    /// zstd at a level in [`ZSTD_LEVELS`].
    Zstd {
        /// The compression level.
        level: i32,
    },
}

impl FromStr for CompressorKind {
    type Err = Error;

    /// Parses `none`, `lz4`, `zstd` (level 3) or `zstd:LEVEL`; case-insensitive, trimmed.
    fn from_str(text: &str) -> Result<Self, Error> {
        let name = text.trim().to_ascii_lowercase();
        match name.as_str() {
            "none" => Ok(CompressorKind::None),
            "lz4" => Ok(CompressorKind::Lz4),
            "zstd" => Ok(CompressorKind::Zstd { level: ZSTD_DEFAULT_LEVEL }),
            _ => match name.strip_prefix("zstd:") {
                Some(level) => parse_zstd_level(level).map(|level| CompressorKind::Zstd { level }),
                None => Err(Error::UnknownCompressor { name: text.to_string() }),
            },
        }
    }
}

fn parse_zstd_level(text: &str) -> Result<i32, Error> {
    let bad = || Error::ZstdLevel {
        level: text.to_string(),
        min: *ZSTD_LEVELS.start(),
        max: *ZSTD_LEVELS.end(),
    };
    let level: i32 = text.parse().map_err(|_| bad())?;
    if ZSTD_LEVELS.contains(&level) {
        Ok(level)
    } else {
        Err(bad())
    }
}

impl fmt::Display for CompressorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompressorKind::None => f.write_str("none"),
            CompressorKind::Lz4 => f.write_str("lz4"),
            CompressorKind::Zstd { level } => write!(f, "zstd:{level}"),
        }
    }
}

/// How a compressor is set up.
#[derive(Debug, Clone)]
pub struct CompressorConfig {
    /// The codec.
    pub kind: CompressorKind,
    /// A page whose object (checksum included) is this long or longer is reported
    /// [`Error::Incompressible`]. 1..=4096; default 4096 (the kernel's `dlen >= PAGE_SIZE`);
    /// zswap sets it to the pool's huge-class size, below which storing saves memory.
    pub threshold_bytes: usize,
    /// Append a crc32c of the page to each object and verify it on decompression.
    pub checksum: bool,
    /// A zstd dictionary (from [`train_dictionary`]); `None` for the others.
    pub dictionary: Option<Arc<[u8]>>,
}

impl CompressorConfig {
    /// `kind` with the defaults: threshold 4096, no checksum, no dictionary.
    pub fn new(kind: CompressorKind) -> Self {
        CompressorConfig { kind, threshold_bytes: PAGE_SIZE, checksum: false, dictionary: None }
    }
}

/// Counters of one compressor (each rejection and failure has its own).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompressStats {
    /// Pages compressed below the threshold.
    pub compressed: u64,
    /// Pages not below the threshold (`reject_compress_poor`).
    pub incompressible: u64,
    /// Codec failures while compressing (`reject_compress_fail`).
    pub compress_fail: u64,
    /// Objects decoded into a page.
    pub decompressed: u64,
    /// Objects refused: malformed, wrong length, or checksum mismatch (`decompress_fail`).
    pub decompress_fail: u64,
    /// zstd contexts created (one per concurrent user; more means churn).
    pub contexts_created: u64,
    /// Blocks zstd took from the global allocator (module essay, "Memory").
    pub zstd_allocs: u64,
    /// Blocks zstd gave back.
    pub zstd_frees: u64,
    /// Allocations the global allocator refused zstd (the call that asked failed).
    pub zstd_alloc_failed: u64,
    /// Bytes zstd holds now.
    pub zstd_bytes: u64,
}

#[derive(Debug, Default)]
struct LiveStats {
    compressed: AtomicU64,
    incompressible: AtomicU64,
    compress_fail: AtomicU64,
    decompressed: AtomicU64,
    decompress_fail: AtomicU64,
    contexts_created: AtomicU64,
}

type ZstdC = zstd_ctx::CCtx;
type ZstdD = zstd_ctx::DCtx;

/// A page compressor, shared by every thread of one pool (`Send + Sync`).
pub struct Compressor {
    config: CompressorConfig,
    /// Idle zstd compression contexts. Lock: held only to pop or push.
    cctxs: Mutex<Vec<ZstdC>>,
    /// Idle zstd decompression contexts. Lock: held only to pop or push.
    dctxs: Mutex<Vec<ZstdD>>,
    /// Where every zstd context allocates (each context holds a reference).
    zstd_memory: Arc<ZstdMemory>,
    stats: LiveStats,
}

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Compressor>();
};

impl Compressor {
    /// A compressor of `kind` with the default configuration.
    ///
    /// # Errors
    /// [`Error::Setup`] if zstd cannot make a context.
    pub fn new(kind: CompressorKind) -> Result<Self, Error> {
        Self::with_config(CompressorConfig::new(kind))
    }

    /// A compressor from a full configuration. Makes one context of each direction up
    /// front, so a broken setup (a bad dictionary) fails here and not at the first page.
    ///
    /// # Errors
    /// [`Error::ZstdLevel`] for a zstd level outside [`ZSTD_LEVELS`] (a kind built by hand
    /// rather than parsed), [`Error::Threshold`], [`Error::DictionaryUnsupported`],
    /// [`Error::Setup`].
    pub fn with_config(config: CompressorConfig) -> Result<Self, Error> {
        if let CompressorKind::Zstd { level } = config.kind {
            parse_zstd_level(&level.to_string())?;
        }
        if config.threshold_bytes == 0 || config.threshold_bytes > PAGE_SIZE {
            return Err(Error::Threshold { bytes: config.threshold_bytes });
        }
        let is_zstd = matches!(config.kind, CompressorKind::Zstd { .. });
        if config.dictionary.is_some() && !is_zstd {
            return Err(Error::DictionaryUnsupported { kind: config.kind.to_string() });
        }
        let compressor = Compressor {
            config,
            cctxs: Mutex::new(Vec::with_capacity(MAX_IDLE_CONTEXTS)),
            dctxs: Mutex::new(Vec::with_capacity(MAX_IDLE_CONTEXTS)),
            zstd_memory: Arc::new(ZstdMemory::default()),
            stats: LiveStats::default(),
        };
        if is_zstd {
            let cctx = compressor.new_cctx()?;
            let dctx = compressor.new_dctx()?;
            compressor.cctxs.lock().push(cctx);
            compressor.dctxs.lock().push(dctx);
        }
        Ok(compressor)
    }

    /// The codec.
    pub fn kind(&self) -> CompressorKind {
        self.config.kind
    }

    /// The configuration.
    pub fn config(&self) -> &CompressorConfig {
        &self.config
    }

    /// Compresses `page` into `out` and returns the object's length.
    ///
    /// # Errors
    /// [`Error::Incompressible`] if the object would not be shorter than the threshold
    /// (`out` then holds no usable object); [`Error::CompressFailed`] if the codec fails.
    ///
    /// # Panics
    /// If `out` is shorter than [`COMPRESS_OUT_BYTES`] (a caller bug).
    ///
    /// Context: may take the context-stack lock twice (pop, push); allocates only when
    /// more threads compress at once than ever before (a new zstd context).
    /// May be called from any thread.
    pub fn compress(&self, page: &[u8; PAGE_SIZE], out: &mut [u8]) -> Result<usize, Error> {
        assert!(out.len() >= COMPRESS_OUT_BYTES, "compress buffer of {} bytes", out.len());
        let len = match self.config.kind {
            CompressorKind::None => {
                out[..PAGE_SIZE].copy_from_slice(page);
                self.stats.compressed.fetch_add(1, Relaxed);
                return Ok(PAGE_SIZE);
            }
            CompressorKind::Lz4 => lz4::block::compress_to_buffer(page, None, false, out)
                .map_err(|e| Error::CompressFailed { reason: e.to_string() }),
            CompressorKind::Zstd { .. } => self.zstd_compress(page, out),
        };
        let mut len = len.inspect_err(|_| {
            self.stats.compress_fail.fetch_add(1, Relaxed);
        })?;
        if self.config.checksum {
            out[len..len + CHECKSUM_BYTES].copy_from_slice(&crc32c::crc32c(page).to_le_bytes());
            len += CHECKSUM_BYTES;
        }
        if len >= self.config.threshold_bytes {
            self.stats.incompressible.fetch_add(1, Relaxed);
            let threshold_bytes = self.config.threshold_bytes;
            return Err(Error::Incompressible { compressed_bytes: len, threshold_bytes });
        }
        self.stats.compressed.fetch_add(1, Relaxed);
        Ok(len)
    }

    fn zstd_compress(&self, page: &[u8; PAGE_SIZE], out: &mut [u8]) -> Result<usize, Error> {
        let popped = self.cctxs.lock().pop();
        let mut cctx = match popped {
            Some(cctx) => cctx,
            None => self.new_cctx()?,
        };
        let result = cctx.compress(&page[..], out);
        self.put_back(&self.cctxs, cctx);
        result.map_err(|reason| Error::CompressFailed { reason })
    }

    /// Decodes the object `src` into `page`.
    ///
    /// # Errors
    /// [`Error::Corrupt`] if the decoder refuses `src`; [`Error::WrongLength`] if it
    /// decodes to anything but 4096 bytes; [`Error::ChecksumMismatch`] if checksums are on
    /// and the page is not the one compressed. On every error `page` is zero-filled.
    ///
    /// Context: as [`Compressor::compress`]; no allocation in steady state.
    pub fn decompress(&self, src: &[u8], page: &mut [u8; PAGE_SIZE]) -> Result<(), Error> {
        let result = self.decode(src, page);
        match result {
            Ok(()) => {
                self.stats.decompressed.fetch_add(1, Relaxed);
            }
            Err(_) => {
                page.fill(0);
                self.stats.decompress_fail.fetch_add(1, Relaxed);
            }
        }
        result
    }

    fn decode(&self, src: &[u8], page: &mut [u8; PAGE_SIZE]) -> Result<(), Error> {
        if self.config.kind == CompressorKind::None {
            if src.len() != PAGE_SIZE {
                return Err(Error::WrongLength { decoded_bytes: src.len() });
            }
            page.copy_from_slice(src);
            return Ok(());
        }
        let (body, stored) = if self.config.checksum {
            let Some(split) = src.len().checked_sub(CHECKSUM_BYTES) else {
                return Err(Error::Corrupt { reason: "shorter than its checksum".into() });
            };
            let mut stored = [0u8; CHECKSUM_BYTES];
            stored.copy_from_slice(&src[split..]);
            (&src[..split], Some(u32::from_le_bytes(stored)))
        } else {
            (src, None)
        };
        let decoded_bytes = match self.config.kind {
            CompressorKind::Lz4 => lz4::block::decompress_to_buffer(body, Some(4096), page)
                .map_err(|e| Error::Corrupt { reason: e.to_string() })?,
            _ => self.zstd_decompress(body, page)?,
        };
        if decoded_bytes != PAGE_SIZE {
            return Err(Error::WrongLength { decoded_bytes });
        }
        if let Some(stored) = stored {
            let decoded = crc32c::crc32c(page);
            if decoded != stored {
                return Err(Error::ChecksumMismatch { stored, decoded });
            }
        }
        Ok(())
    }

    fn zstd_decompress(&self, src: &[u8], page: &mut [u8; PAGE_SIZE]) -> Result<usize, Error> {
        let popped = self.dctxs.lock().pop();
        let mut dctx = match popped {
            Some(dctx) => dctx,
            None => self.new_dctx()?,
        };
        let result = dctx.decompress(src, &mut page[..]);
        self.put_back(&self.dctxs, dctx);
        result.map_err(|reason| Error::Corrupt { reason })
    }

    fn put_back<T>(&self, stack: &Mutex<Vec<T>>, ctx: T) {
        let mut idle = stack.lock();
        if idle.len() < MAX_IDLE_CONTEXTS {
            idle.push(ctx); // Capacity reserved at setup: no allocation under the lock.
        }
    }

    fn new_cctx(&self) -> Result<ZstdC, Error> {
        let CompressorKind::Zstd { level } = self.config.kind else {
            unreachable!("zstd context for {}", self.config.kind)
        };
        // The pool records the object's length; zstd need not (and no checksum of its own:
        // ours, when enabled, covers every codec the same way): `CCtx::new` turns both off.
        let dictionary = self.config.dictionary.as_deref();
        let cctx = ZstdC::new(level, dictionary, &self.zstd_memory)
            .map_err(|reason| Error::Setup { reason })?;
        self.stats.contexts_created.fetch_add(1, Relaxed);
        Ok(cctx)
    }

    fn new_dctx(&self) -> Result<ZstdD, Error> {
        ZstdD::new(self.config.dictionary.as_deref(), &self.zstd_memory)
            .map_err(|reason| Error::Setup { reason })
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> CompressStats {
        let ZstdMemoryStats { allocs, frees, alloc_failed, live_bytes } = self.zstd_memory.stats();
        CompressStats {
            compressed: self.stats.compressed.load(Relaxed),
            incompressible: self.stats.incompressible.load(Relaxed),
            compress_fail: self.stats.compress_fail.load(Relaxed),
            decompressed: self.stats.decompressed.load(Relaxed),
            decompress_fail: self.stats.decompress_fail.load(Relaxed),
            contexts_created: self.stats.contexts_created.load(Relaxed),
            zstd_allocs: allocs,
            zstd_frees: frees,
            zstd_alloc_failed: alloc_failed,
            zstd_bytes: live_bytes,
        }
    }
}

impl fmt::Debug for Compressor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compressor").field("config", &self.config).finish()
    }
}

/// Trains a zstd dictionary of at most `max_bytes` from sample pages (a few hundred pages
/// of the workload's memory; zstd wants about 100 samples per KiB of dictionary).
///
/// # Errors
/// [`Error::Setup`] if zstd cannot build a dictionary from these samples (too few, too
/// uniform).
///
/// Context: allocates, and zstd's trainer allocates with `malloc` (it has no custom
/// allocator): set-up work on a thread that may call `malloc`, never on an engine thread
/// inside `uswap run`. Seconds of CPU for large sample sets. Not for a hot path.
pub fn train_dictionary(samples: &[[u8; PAGE_SIZE]], max_bytes: usize) -> Result<Vec<u8>, Error> {
    let refs: Vec<&[u8]> = samples.iter().map(|page| &page[..]).collect();
    zstd::dict::from_samples(&refs, max_bytes).map_err(|e| Error::Setup { reason: e.to_string() })
}
