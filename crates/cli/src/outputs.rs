//! Files `uswap run` writes for its user: the trace (`--record FILE`) and the live figures
//! (`--stats-file FILE`).
//!
//! Both are opened by `uswap run` before the program starts, never through a symbolic link
//! (`O_NOFOLLOW`: a root user could be made to write through a link another user planted
//! in a shared directory), and never over an existing file unless `--force` is given (the
//! trace is then replaced, the stats file appended to); either way only a regular file.
//! Before, both followed links and silently replaced whatever was there.
//!
//! The trace is made here, header and all, and every image of the program (one per exec)
//! appends its records to it: the shim opens the path given, appending, without creating
//! it, and writes only if it is this very file (its device and inode, passed in runstat's
//! `RECORD_FILE` with the trace's start on the monotonic clock, from which every image
//! counts its records' times). Before, each image created the file anew, and a program
//! that exec'd left a trace of its last image alone (47,553 page-outs lost).

use anyhow::{anyhow, bail, Result};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Opens `path` (given with `flag`) for writing, as the module essay says: created new;
/// with `force`, an existing regular file is replaced (`replace`) or appended to.
///
/// # Errors
/// One line naming the flag and the reason.
pub fn open_output(flag: &str, path: &Path, force: bool, replace: bool) -> Result<File> {
    let mut open = std::fs::OpenOptions::new();
    open.write(true).mode(0o600).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    match (force, replace) {
        (false, _) => open.create_new(true),
        (true, true) => open.create(true).truncate(true),
        (true, false) => open.create(true).append(true),
    };
    let file = open.open(path).map_err(|e| {
        // O_EXCL says EEXIST for a link too: name the link.
        let link = path.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink());
        let what = match e.raw_os_error() {
            Some(libc::ELOOP | libc::EEXIST) if link => {
                "is a symbolic link: uswap never writes through one".to_string()
            }
            Some(libc::EEXIST) => "already exists: give --force to write over it".into(),
            _ => e.to_string(),
        };
        anyhow!("{flag} {}: {what}", path.display())
    })?;
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        bail!("{flag} {}: not a regular file", path.display());
    }
    Ok(file)
}

/// Makes the trace at `path` (`--record`): its header written, the value of runstat's
/// `RECORD_FILE` for the shim returned.
///
/// # Errors
/// As [`open_output`], or a write error.
pub fn start_trace(path: &Path, force: bool) -> Result<String> {
    let mut file = open_output("--record", path, force, true)?;
    let start_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let t0 = uffd::sys::process::monotonic_ns();
    file.write_all(&runstat::trace::header(uffd::PAGE_SIZE as u32, start_ns))
        .map_err(|e| anyhow!("--record {}: {e}", path.display()))?;
    let meta = file.metadata().map_err(|e| anyhow!("--record {}: {e}", path.display()))?;
    Ok(format!("{}:{}:{t0}", meta.dev(), meta.ino()))
}
