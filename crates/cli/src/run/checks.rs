//! Everything `uswap run` checks before CMD starts: sizes, the compressor, the swap
//! file, CMD itself (found; crate::preflight says whether it can load the shim),
//! the shim (userfaultfd: crate::ladder). Each failure is one line naming the flag or the file.

use super::{DEFAULT_SWAP_BYTES, MAX_SWAP_BYTES, MIN_SWAP_BYTES};
use anyhow::{anyhow, bail, Result};
use runstat::{format_size, parse_size};
use std::path::{Path, PathBuf};

/// The swap file's size: `--swap-size` or [`DEFAULT_SWAP_BYTES`], and a note when it is
/// more than the free space of `dir`, where the file goes. The file is sparse and the pool
/// in front of it writes few of its slots, so it may be larger than the free space; the
/// shim stops writing to it while less than `SWAP_FILE_KEEP_FREE_BYTES` is free there
/// (CI's disk once had less than the 8 GiB default free, and a shim that wanted all of it
/// free refused to start).
pub(super) fn swap_size(text: Option<&str>, dir: &Path) -> Result<(u64, Option<String>)> {
    let bytes = match text {
        Some(text) => parse_size(text).map_err(|e| anyhow!("--swap-size: {e}"))?,
        None => DEFAULT_SWAP_BYTES,
    };
    if !(MIN_SWAP_BYTES..=MAX_SWAP_BYTES).contains(&bytes) {
        bail!(
            "--swap-size {}: use {} to {}",
            format_size(bytes),
            format_size(MIN_SWAP_BYTES),
            format_size(MAX_SWAP_BYTES)
        );
    }
    let stat = rustix::fs::statvfs(dir).map_err(|e| {
        anyhow!("cannot see the free space of {} (for the swap file): {e}", dir.display())
    })?;
    let free_bytes = stat.f_bavail.saturating_mul(stat.f_frsize);
    let note = (free_bytes < bytes).then(|| {
        format!(
            "the swap file may grow to {} and {} has {} free: uswap stops writing to it while \
             less than {} is free there (those pages stay in the pool or in memory)",
            format_size(bytes),
            dir.display(),
            format_size(free_bytes),
            format_size(runstat::env::SWAP_FILE_KEEP_FREE_BYTES)
        )
    });
    Ok((bytes, note))
}

/// `--pool-size`: a size the pool can take (64 KiB up to the 64 GiB its allocator
/// addresses), with a pool to size.
pub(super) fn check_pool_size(text: &str, zswap: &str) -> Result<u64> {
    if zswap == "off" {
        bail!("--pool-size with --zswap off: there is no pool to size");
    }
    let bytes = parse_size(text).map_err(|e| anyhow!("--pool-size: {e}"))?;
    let (min, max) = (zswap::config::MIN_POOL_BYTES, zswap::config::MAX_POOL_BYTES);
    if !(min..=max).contains(&bytes) {
        bail!(
            "--pool-size {}: use {} to {}",
            format_size(bytes),
            format_size(min),
            format_size(max)
        );
    }
    Ok(bytes)
}

/// `--zswap`: off, or a compressor the pool knows (lz4, zstd, zstd:1..=3; `none`, which
/// stores pages uncompressed, is refused: it only costs memory under a budget). zstd's
/// contexts allocate from the shim's arena, never from the program's malloc
/// (zswap's compress/zstd_ctx.rs).
pub(super) fn check_zswap(text: &str) -> Result<()> {
    if text == "off" {
        return Ok(());
    }
    match text.parse::<zswap::CompressorKind>() {
        Ok(zswap::CompressorKind::None) | Err(_) => {
            bail!("--zswap {text}: use lz4, zstd (zstd:1..=3) or off")
        }
        Ok(_) => Ok(()),
    }
}

pub(super) fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// `name` as execvp would find it.
pub(super) fn find_program(name: &str) -> Result<PathBuf> {
    if name.contains('/') {
        let path = PathBuf::from(name);
        return if path.is_file() { Ok(path) } else { Err(anyhow!("{name}: no such file")) };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow!("{name}: command not found in PATH"))
}

pub(super) fn check_swap_file(path: &Path) -> Result<()> {
    if path.exists() {
        bail!(
            "--swap-file {}: already exists (uswap creates it, and removes it at exit)",
            path.display()
        );
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| anyhow!("--swap-file {}: cannot create it: {e}", path.display()))?;
    std::fs::remove_file(path).map_err(|e| anyhow!("--swap-file {}: {e}", path.display()))
}

/// `--swap-file-cache drop` needs `RWF_DONTCACHE` where the swap file goes: tried on a
/// small private file in `dir`, gone again at once.
pub(super) fn check_uncached_io(dir: &Path) -> Result<()> {
    let options = backend::FileOptions { uncached: true, ..backend::FileOptions::default() };
    backend::FileBackend::create(dir, 1 << 16, options)
        .map(drop)
        .map_err(|e| anyhow!("--swap-file-cache drop: {e}; use --swap-file-cache keep"))
}

/// The shim's file before a run starts: the one `USWAP_PRELOAD` names. Without it the
/// shim is the copy inside uswap, which has no file until a run writes it (crate::shim).
///
/// # Errors
/// `USWAP_PRELOAD` is not set, or names no file.
pub fn find_shim() -> Result<PathBuf> {
    match crate::shim::Shim::chosen()? {
        crate::shim::Shim::Override(path) => Ok(path),
        crate::shim::Shim::Inside => Err(anyhow!("the shim is inside uswap")),
    }
}
