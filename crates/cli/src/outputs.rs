//! Files `uswap run` writes for its user: the trace (`--record FILE`) and the live figures
//! (`--stats-file FILE`).
//!
//! Both are opened by `uswap run` before the program starts, and never through a symbolic
//! link (`O_NOFOLLOW`): a root user could be made to write through a link another user
//! planted in a shared directory. A path that names nothing is created, mode 0600. An
//! existing regular file is written only with `--force` (the trace then replaces it, the
//! stats file appends to it), since it may hold the user's data. An existing file of another
//! kind (`/dev/null`, a FIFO a reader watches) holds nothing to lose and is written as it
//! is; opening a FIFO waits for its reader, as a shell's redirection does.
//!
//! The trace is made here, header and all, and every image of the program (one per exec)
//! appends its records to it: the shim opens the path given, appending, without creating
//! it, and writes only if it is this very file (its device and inode, passed in runstat's
//! `RECORD_FILE` with the trace's start on the monotonic clock, from which every image
//! counts its records' times). A file created anew by each image would keep the last
//! image's records only.

use anyhow::{anyhow, bail, Result};
use std::fs::{File, OpenOptions};
use std::io::{Error, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Opens `path` (given with `flag`) for writing, as the module essay says: created new; an
/// existing regular file only with `force`, then truncated (`replace`) or appended to; an
/// existing file of another kind as it is.
///
/// # Errors
/// One line naming the flag and the reason: a symbolic link, a regular file without
/// `force`, or the system's error.
///
/// Context: may block, on a FIFO with no reader.
pub fn open_output(flag: &str, path: &Path, force: bool, replace: bool) -> Result<File> {
    let refused = |e: Error| anyhow!("{flag} {}: {}", path.display(), reason(path, &e));
    match create_new(path) {
        Ok(file) => Ok(file),
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
            let file = open_existing(path, force && replace, !replace).map_err(refused)?;
            if !force && file.metadata().map_err(refused)?.is_file() {
                bail!("{flag} {}: already exists: give --force to write over it", path.display());
            }
            Ok(file)
        }
        Err(e) => Err(refused(e)),
    }
}

/// `path` made anew (`O_EXCL`, which fails on any link too), mode 0600.
fn create_new(path: &Path) -> std::io::Result<File> {
    let mut open = OpenOptions::new();
    open.write(true).create_new(true).mode(0o600);
    open.custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(path)
}

/// The existing `path`, never through a link: truncated (a regular file's only) if
/// `truncate`, else written at its end if `append`.
fn open_existing(path: &Path, truncate: bool, append: bool) -> std::io::Result<File> {
    let mut open = OpenOptions::new();
    open.write(true).truncate(truncate).append(append && !truncate);
    open.custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY).open(path)
}

/// Why opening `path` failed with `e`, in words (a link says ELOOP to `O_NOFOLLOW`).
fn reason(path: &Path, e: &Error) -> String {
    let link = path.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink());
    if link && e.raw_os_error() == Some(libc::ELOOP) {
        return "is a symbolic link: uswap never writes through one".into();
    }
    e.to_string()
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A directory of its own under the system's temporary directory, removed on drop.
    struct Dir(PathBuf, #[allow(dead_code)] tempfile::TempDir);

    impl Dir {
        fn new(tag: &str) -> Dir {
            let prefix = format!("uswap-outputs-{tag}-");
            let dir = tempfile::Builder::new().prefix(&prefix).tempdir().unwrap();
            Dir(dir.path().to_path_buf(), dir)
        }
    }

    fn write(mut file: File, text: &str) {
        file.write_all(text.as_bytes()).unwrap();
    }

    fn error(result: Result<File>) -> String {
        result.expect_err("refused").to_string()
    }

    #[test]
    fn a_new_path_is_created_private() {
        let dir = Dir::new("new");
        let path = dir.0.join("stats");
        write(open_output("--stats-file", &path, false, false).unwrap(), "one\n");
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o600);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one\n");
    }

    #[test]
    fn an_existing_regular_file_is_written_only_with_force() {
        let dir = Dir::new("existing");
        let path = dir.0.join("file");
        for (replace, tag) in [(false, "--stats-file"), (true, "--record")] {
            std::fs::write(&path, "precious\n").unwrap();
            let err = error(open_output(tag, &path, false, replace));
            assert!(err.contains("already exists: give --force"), "{err}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious\n", "{tag}");
        }
        // An empty file is the user's too (a file made by `touch`, or by another run).
        std::fs::write(&path, "").unwrap();
        assert!(error(open_output("--record", &path, false, true)).contains("already exists"));
        std::fs::write(&path, "precious\n").unwrap();
        write(open_output("--stats-file", &path, true, false).unwrap(), "more\n");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious\nmore\n", "appended");
        write(open_output("--record", &path, true, true).unwrap(), "trace");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "trace", "replaced");
    }

    #[test]
    fn links_are_never_written_through_even_with_force() {
        let dir = Dir::new("links");
        let victim = dir.0.join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let (link, dangling) = (dir.0.join("link"), dir.0.join("dangling"));
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        std::os::unix::fs::symlink(dir.0.join("planted"), &dangling).unwrap();
        for path in [&link, &dangling] {
            for (force, replace) in [(false, false), (false, true), (true, false), (true, true)] {
                let err = error(open_output("--record", path, force, replace));
                assert!(err.contains("is a symbolic link"), "{}: {err}", path.display());
            }
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert!(!dir.0.join("planted").exists(), "created through a dangling link");
    }

    #[test]
    fn dev_null_and_fifos_are_written_as_they_are() {
        let null = Path::new("/dev/null");
        for (force, replace) in [(false, false), (false, true), (true, true)] {
            write(open_output("--stats-file", null, force, replace).unwrap(), "x");
        }
        let dir = Dir::new("fifo");
        let fifo = dir.0.join("fifo");
        let mode = rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR;
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, mode, 0).unwrap();
        // A reader first, so that the open for writing does not wait.
        let mut reader = OpenOptions::new();
        let reader = reader.read(true).custom_flags(libc::O_NONBLOCK).open(&fifo).unwrap();
        write(open_output("--stats-file", &fifo, false, false).unwrap(), "live\n");
        let mut got = String::new();
        std::io::Read::read_to_string(&mut &reader, &mut got).unwrap();
        assert_eq!(got, "live\n");
    }

    #[test]
    fn a_directory_is_refused_in_one_line() {
        let dir = Dir::new("dir");
        let err = error(open_output("--stats-file", &dir.0, true, false));
        assert!(err.starts_with("--stats-file ") && !err.contains('\n'), "{err}");
    }
}
