//! The shim `uswap run` loads into every program of its tree: the copy of
//! `libuswap_preload.so` built into this binary (crates/cli/build.rs), or the file
//! `USWAP_PRELOAD` names.
//!
//! The copy inside is written, as the run starts, into the run's private directory (0700,
//! crate::rundir), mode 0500, and `LD_PRELOAD` names it there; it goes with the directory
//! when the run's last member leaves. So an installed `uswap` is one file, a run never
//! loads a shim some other user could have replaced, and two builds of uswap on one
//! machine never load each other's shim. The loader maps the file executable, so the
//! temporary directory must not be mounted `noexec`: that is checked before CMD starts,
//! and refused in one line naming `TMPDIR` and `USWAP_PRELOAD`.
//!
//! `USWAP_PRELOAD=PATH` loads the shim at PATH instead (a shim with its debug information,
//! a build under test); a PATH that names no file is refused before CMD starts.

use anyhow::{anyhow, bail, Result};
use std::path::{Path, PathBuf};

/// The variable naming a shim to load instead of the one inside.
pub const OVERRIDE: &str = "USWAP_PRELOAD";

/// The shim's file name, in a run directory as in a target directory.
pub const FILE_NAME: &str = "libuswap_preload.so";

/// The shim built with this binary (crates/cli/build.rs).
static INSIDE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libuswap_preload.so"));

/// Which shim a run loads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shim {
    /// The file `USWAP_PRELOAD` names (absolute).
    Override(PathBuf),
    /// The copy inside this binary, written into each run's directory.
    Inside,
}

impl Shim {
    /// The shim this process's environment asks for.
    ///
    /// # Errors
    /// `USWAP_PRELOAD` is set and names no file.
    pub fn chosen() -> Result<Shim> {
        let Some(path) = std::env::var_os(OVERRIDE) else { return Ok(Shim::Inside) };
        let path = PathBuf::from(path);
        if !path.is_file() {
            bail!("{OVERRIDE}={}: no such file", path.display());
        }
        Ok(Shim::Override(std::path::absolute(&path).unwrap_or(path)))
    }

    /// The shim a run whose directory is in `tmp` loads, checked ([`Shim::chosen`],
    /// [`Shim::check`]).
    ///
    /// # Errors
    /// As theirs.
    pub fn for_run(tmp: &Path) -> Result<Shim> {
        let shim = Shim::chosen()?;
        shim.check(tmp)?;
        Ok(shim)
    }

    /// Says where it comes from, for `uswap check`.
    pub fn describe(&self) -> String {
        match self {
            Shim::Override(path) => format!("{} ({OVERRIDE})", path.display()),
            Shim::Inside => format!(
                "inside uswap ({}), written to each run's directory",
                runstat::format_size(INSIDE.len() as u64)
            ),
        }
    }

    /// Checks that the shim can be loaded from where it will be: the copy inside is
    /// written to a directory of `tmp`, whose file system must allow executable mappings.
    ///
    /// # Errors
    /// `tmp` is mounted noexec, or its file system cannot be asked.
    pub fn check(&self, tmp: &Path) -> Result<()> {
        if *self != Shim::Inside {
            return Ok(());
        }
        let stat = rustix::fs::statvfs(tmp).map_err(|e| {
            anyhow!("cannot see how {} is mounted (for the shim): {e}", tmp.display())
        })?;
        if stat.f_flag.contains(rustix::fs::StatVfsMountFlags::NOEXEC) {
            bail!(
                "{} is mounted noexec, and the shim is loaded from a run directory there: set \
                 TMPDIR to a directory elsewhere, or {OVERRIDE} to a copy of {FILE_NAME}",
                tmp.display()
            );
        }
        Ok(())
    }

    /// Puts the shim where a run's processes load it from: the override where it is, or
    /// the copy inside written into the run directory `dir` (module essay). Its path.
    ///
    /// Context: writes a few MiB; called once per run, before CMD starts.
    ///
    /// # Errors
    /// The copy cannot be written.
    pub fn place(&self, dir: &Path) -> Result<PathBuf> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        if let Shim::Override(path) = self {
            return Ok(path.clone());
        }
        let path = dir.join(FILE_NAME);
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o500)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .and_then(|mut file| file.write_all(INSIDE));
        written.map_err(|e| anyhow!("cannot write the shim to {}: {e}", path.display()))?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The copy inside is a shared object of this machine's kind that exports the
    /// interposed calls the shim exists for.
    #[test]
    fn the_copy_inside_is_the_shim() {
        assert!(INSIDE.len() > 1 << 20, "{} bytes", INSIDE.len());
        assert_eq!(&INSIDE[..4], b"\x7fELF");
        assert_eq!(u16::from_le_bytes([INSIDE[16], INSIDE[17]]), 3, "ET_DYN");
        let has = |name: &[u8]| INSIDE.windows(name.len()).any(|w| w == name);
        for symbol in [&b"\0mmap64\0"[..], b"\0mremap\0", b"\0pthread_create\0"] {
            assert!(has(symbol), "{} not exported", String::from_utf8_lossy(symbol));
        }
    }

    #[test]
    fn placing_writes_a_private_copy_and_an_override_stays_where_it_is() {
        use std::os::unix::fs::PermissionsExt as _;
        let scratch = tempfile::Builder::new().prefix("uswap-shim-").tempdir().unwrap();
        let dir = scratch.path();
        let path = Shim::Inside.place(dir).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), INSIDE);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o500);
        assert!(Shim::Inside.place(dir).is_err(), "a file already there is not replaced");
        let other = Shim::Override(PathBuf::from("/x/libuswap_preload.so"));
        assert_eq!(other.place(dir).unwrap(), PathBuf::from("/x/libuswap_preload.so"));
    }
}
