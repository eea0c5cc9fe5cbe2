//! The C structs and their conversion to and from the Rust library's types.

use engine::defaults::LIBRARY;
use frontend::{Builder, Delivery, Uswap};
use std::ffi::c_char;

/// `struct uswap_config` (uswap.h): same layout, same meaning.
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy)]
pub struct uswap_config {
    /// `sizeof(struct uswap_config)` as the caller's header had it.
    pub size: u32,
    /// Folio order.
    pub folio_order: u32,
    /// The budget.
    pub budget_bytes: u64,
    /// `enum uswap_delivery`.
    pub delivery: u32,
    /// `USWAP_FLAG_*`.
    pub flags: u32,
    /// A new swap file at this path, or null.
    pub swap_path: *const c_char,
    /// A directory for a private swap file, or null.
    pub swap_dir: *const c_char,
    /// The swap device's size.
    pub swap_size_bytes: u64,
    /// Readahead pages; -1 for the default.
    pub readahead_pages: i32,
    /// The pool's compressor name, or null for the default.
    pub compressor: *const c_char,
    /// The pool's share of the budget in percent; 0 for the default.
    pub pool_percent: u32,
}

// The C example asserts the same sizes with `_Static_assert`.
const _: () = assert!(core::mem::size_of::<uswap_config>() == 72);
const _: () = assert!(core::mem::size_of::<uswap_stats>() == 16 * 8);

/// `USWAP_FLAG_EXCLUDE_FROM_FORK`.
pub const FLAG_EXCLUDE_FROM_FORK: u32 = 1 << 0;
/// `USWAP_FLAG_NO_KERNEL_FAULTS`.
pub const FLAG_NO_KERNEL_FAULTS: u32 = 1 << 1;
/// `USWAP_FLAG_CHECKSUMS`.
pub const FLAG_CHECKSUMS: u32 = 1 << 2;
/// `USWAP_FLAG_SWAP_IN_MEMORY`.
pub const FLAG_SWAP_IN_MEMORY: u32 = 1 << 3;
/// `USWAP_FLAG_NO_POOL`.
pub const FLAG_NO_POOL: u32 = 1 << 4;
const FLAGS_KNOWN: u32 = FLAG_EXCLUDE_FROM_FORK
    | FLAG_NO_KERNEL_FAULTS
    | FLAG_CHECKSUMS
    | FLAG_SWAP_IN_MEMORY
    | FLAG_NO_POOL;

impl uswap_config {
    /// The defaults (uswap.h documents them).
    pub fn defaults() -> uswap_config {
        uswap_config {
            size: core::mem::size_of::<uswap_config>() as u32,
            folio_order: LIBRARY.folio_order,
            budget_bytes: LIBRARY.budget_bytes,
            delivery: 0,
            flags: 0,
            swap_path: core::ptr::null(),
            swap_dir: core::ptr::null(),
            swap_size_bytes: LIBRARY.swap_size_bytes,
            readahead_pages: -1,
            compressor: core::ptr::null(),
            pool_percent: 0,
        }
    }
}

/// The paths of a configuration, read from C strings by the caller.
#[derive(Debug, Default, Clone)]
pub struct Paths {
    /// `swap_path`.
    pub swap_path: Option<String>,
    /// `swap_dir`.
    pub swap_dir: Option<String>,
    /// `compressor`.
    pub compressor: Option<String>,
}

/// The builder a C configuration describes.
///
/// # Errors
/// The message of the first value that is not acceptable.
pub fn builder_of(config: &uswap_config, paths: Paths) -> Result<Builder, String> {
    let delivery = match config.delivery {
        0 => Delivery::DEFAULT,
        1 => Delivery::Handler,
        2 => Delivery::Sigbus,
        other => return Err(format!("delivery {other} is not a USWAP_DELIVERY_* value")),
    };
    if config.flags & !FLAGS_KNOWN != 0 {
        return Err(format!("unknown flags {:#x}", config.flags & !FLAGS_KNOWN));
    }
    let mut builder = Uswap::builder()
        .budget_bytes(config.budget_bytes)
        .folio_order(config.folio_order)
        .delivery(delivery)
        .swap_size_bytes(config.swap_size_bytes)
        .checksums(config.flags & FLAG_CHECKSUMS != 0)
        .exclude_from_fork(config.flags & FLAG_EXCLUDE_FROM_FORK != 0);
    if config.flags & FLAG_NO_KERNEL_FAULTS != 0 {
        builder = builder.require_kernel_faults(false);
    }
    if config.readahead_pages >= 0 {
        builder = builder.readahead_max_pages(config.readahead_pages as u32);
    }
    if let Some(name) = &paths.compressor {
        let kind = name
            .parse::<frontend::CompressorKind>()
            .map_err(|e| format!("compressor \"{name}\": {e}"))?;
        builder = builder.compressor(kind);
    }
    if config.pool_percent != 0 {
        builder = builder.pool_percent(config.pool_percent);
    }
    if config.flags & FLAG_NO_POOL != 0 {
        builder = builder.no_pool();
    }
    builder = match (config.flags & FLAG_SWAP_IN_MEMORY != 0, paths) {
        (true, _) => builder.swap_in_memory(),
        (false, Paths { swap_path: Some(path), .. }) => {
            builder.swap_file(path, config.swap_size_bytes)
        }
        (false, Paths { swap_dir: Some(dir), .. }) => builder.swap_dir(dir),
        (false, _) => builder,
    };
    Ok(builder)
}

/// `struct uswap_stats` (uswap.h).
#[repr(C)]
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct uswap_stats {
    /// The budget.
    pub budget_bytes: u64,
    /// Charged now.
    pub used_bytes: u64,
    /// Highest charge.
    pub used_bytes_peak: u64,
    /// Managed pages mapped.
    pub resident_pages: u64,
    /// Swap slots in use.
    pub swap_inuse_pages: u64,
    /// Zero-map pages.
    pub zeromap_pages: u64,
    /// Faults handled.
    pub pgfault: u64,
    /// Faults that swapped in.
    pub pgmajfault: u64,
    /// Pages read from the swap file.
    pub pswpin: u64,
    /// Pages written to the swap file.
    pub pswpout: u64,
    /// Pages swapped in from the zero map.
    pub swpin_zero: u64,
    /// Pages swapped out as zero pages.
    pub swpout_zero: u64,
    /// Pages loaded from the pool.
    pub zswpin: u64,
    /// Pages stored in the pool.
    pub zswpout: u64,
    /// Pages taken out of the program.
    pub pageout_pages: u64,
    /// Forked children served.
    pub forks: u64,
}

impl From<&frontend::Stats> for uswap_stats {
    fn from(s: &frontend::Stats) -> uswap_stats {
        let (g, c) = (&s.engine.gauges, &s.engine.counters);
        uswap_stats {
            budget_bytes: g.budget_bytes,
            used_bytes: g.used_bytes,
            used_bytes_peak: g.used_bytes_peak,
            resident_pages: g.resident_pages,
            swap_inuse_pages: g.swap_inuse_pages,
            zeromap_pages: g.zeromap_pages,
            pgfault: c.pgfault,
            pgmajfault: c.pgmajfault,
            pswpin: c.pswpin,
            pswpout: c.pswpout,
            swpin_zero: c.swpin_zero,
            swpout_zero: c.swpout_zero,
            zswpin: c.zswpin,
            zswpout: c.zswpout,
            pageout_pages: s.source.take_pages,
            forks: s.handler.forks,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_are_named() {
        let mut c = uswap_config::defaults();
        c.delivery = 7;
        assert!(builder_of(&c, Paths::default()).unwrap_err().contains("delivery 7"));
        let mut c = uswap_config::defaults();
        c.flags = 1 << 9;
        assert!(builder_of(&c, Paths::default()).unwrap_err().contains("unknown flags 0x200"));
        assert!(builder_of(&uswap_config::defaults(), Paths::default()).is_ok());
        let paths = Paths { compressor: Some("brotli".into()), ..Paths::default() };
        let e = builder_of(&uswap_config::defaults(), paths).unwrap_err();
        assert!(e.contains("compressor \"brotli\""), "{e}");
        let paths = Paths { compressor: Some("zstd:2".into()), ..Paths::default() };
        assert!(builder_of(&uswap_config::defaults(), paths).is_ok());
    }
}
