//! What `uswap run` checks of CMD before it starts: that the dynamic loader will load the
//! shim into it. Each refusal is one line on stderr and exit 1, as for every bad input.
//!
//! - **Statically linked** (an ELF without `PT_INTERP`): no loader runs, so no LD_PRELOAD.
//! - **Secure mode.** The loader ignores LD_PRELOAD (bar set-user-ID libraries in the
//!   system's directories) when the kernel marks the exec `AT_SECURE`: when it changes the
//!   process's ids or raises its capabilities. That is a set-user-ID program whose owner is
//!   not the caller's real user, a set-group-ID one whose group is not the caller's real
//!   group (on a file system mounted without `nosuid`), and a program whose file
//!   capabilities give the caller permitted capabilities it lacks. Such a program ran
//!   unmanaged, far past its budget, with no word said.
//! - **Scripts**: the kernel runs a `#!` script's interpreter (at most four levels of
//!   scripts deep, as `binfmt_script` allows), so the interpreter is what is checked; the
//!   script's own set-id bits are ignored by Linux.
//!
//! And that the sizes can work ([`check_budget`], [`check_address_space`]): a size the
//! engine or the pool refuses made the shim give up inside the program (exit 125), and a
//! budget below what the process needs at all thrashed. A swap file in memory is only said
//! ([`swap_in_memory`]).

use anyhow::{anyhow, bail, Context, Result};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Interpreters the kernel follows from a script (`binfmt_script` and `binfmt_misc` count
/// against `BINPRM_MAX_RECURSION`, 4).
const SCRIPT_LEVELS: usize = 4;

/// Refuses a program the shim cannot run in (module essay).
///
/// # Errors
/// One line naming the program and the reason.
pub fn check_loadable(program: &Path) -> Result<()> {
    let mut path = program.to_path_buf();
    for _ in 0..=SCRIPT_LEVELS {
        match interpreter(&path)? {
            Some(next) => {
                path = next.canonicalize().map_err(|e| {
                    anyhow!("{}: its interpreter {}: {e}", path.display(), next.display())
                })?;
            }
            None => return check_binary(program, &path),
        }
    }
    bail!("{}: more than {SCRIPT_LEVELS} levels of #! interpreters", program.display())
}

/// The interpreter a `#!` script names, or `None` for another file.
fn interpreter(path: &Path) -> Result<Option<PathBuf>> {
    let mut head = [0u8; 256];
    let n = std::io::Read::read(
        &mut std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?,
        &mut head,
    )
    .with_context(|| format!("reading {}", path.display()))?;
    let Some(line) = head[..n].strip_prefix(b"#!") else { return Ok(None) };
    let line = line.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let text = String::from_utf8_lossy(line);
    let word = text.split_whitespace().next().unwrap_or("");
    if word.is_empty() {
        bail!("{}: a #! line with no interpreter", path.display());
    }
    Ok(Some(PathBuf::from(word)))
}

/// The checks of an ELF program `path` (reached from `program`, maybe through scripts).
fn check_binary(program: &Path, path: &Path) -> Result<()> {
    let what = if program == path {
        program.display().to_string()
    } else {
        format!("{} (the interpreter of {})", path.display(), program.display())
    };
    let bytes = read_head(path)?;
    match elf_interp(&bytes) {
        Some(true) => {}
        Some(false) => bail!(
            "{what} is statically linked: the uswap shim is loaded by the dynamic loader \
             (LD_PRELOAD) and cannot run in it"
        ),
        None => bail!("{what} is not an ELF program or a script"),
    }
    if let Some(reason) = secure_reason(path)? {
        bail!(
            "{what} is {reason}: the dynamic loader runs it in secure mode (AT_SECURE) and \
             ignores LD_PRELOAD, so the uswap shim cannot manage it"
        );
    }
    Ok(())
}

/// The first 64 KiB of a file (the ELF header and program headers lie there).
fn read_head(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut bytes = Vec::with_capacity(64 << 10);
    file.take(64 << 10)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(bytes)
}

/// Why an exec of `path` by this process would be secure-mode (module essay), if it would.
fn secure_reason(path: &Path) -> Result<Option<String>> {
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    let mode = meta.permissions().mode();
    let nosuid = rustix::fs::statvfs(path)
        .is_ok_and(|s| s.f_flag.contains(rustix::fs::StatVfsMountFlags::NOSUID));
    let (uid, gid) = (rustix::process::getuid().as_raw(), rustix::process::getgid().as_raw());
    if !nosuid && mode & 0o4000 != 0 && meta.uid() != uid {
        return Ok(Some(format!("set-user-ID (owner uid {})", meta.uid())));
    }
    if !nosuid && mode & 0o2000 != 0 && meta.gid() != gid {
        return Ok(Some(format!("set-group-ID (group gid {})", meta.gid())));
    }
    let gained = file_permitted_caps(path) & !own_permitted_caps();
    if !nosuid && gained != 0 {
        return Ok(Some(format!("given file capabilities (permitted {gained:#x} more)")));
    }
    Ok(None)
}

/// The permitted capabilities a file's `security.capability` attribute gives (0: none).
fn file_permitted_caps(path: &Path) -> u64 {
    let mut buf = [0u8; 24];
    let Ok(n) = rustix::fs::getxattr(path, "security.capability", &mut buf) else { return 0 };
    // vfs_cap_data: magic_etc (u32), then {permitted, inheritable} (u32 each) for the low
    // and, from revision 2, the high 32 capabilities.
    let word =
        |at: usize| buf.get(at..at + 4).map_or(0, |w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]));
    let low = u64::from(word(4));
    let high = if n >= 20 { u64::from(word(12)) } else { 0 };
    low | high << 32
}

/// This process's permitted capabilities (`CapPrm` of /proc/self/status).
fn own_permitted_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|text| {
            let line = text.lines().find_map(|l| l.strip_prefix("CapPrm:"))?.trim().to_string();
            u64::from_str_radix(&line, 16).ok()
        })
        .unwrap_or(0)
}

/// The least budget: what a process needs to run under the shim at all, the loader, libc,
/// the shim and its engine (5.8-6.3 MiB peak for `/bin/true`, measured with each pool). A
/// budget below it has every page the program touches paged out again at once (about 100
/// faults a page).
pub const MIN_BUDGET_BYTES: u64 = 6 << 20;

/// Checks the budget against what can work: [`MIN_BUDGET_BYTES`], and a pool share (with a
/// pool that is a share of the budget) in the range the pool takes.
///
/// # Errors
/// One line naming the flags and the bound.
pub fn check_budget(budget_bytes: u64, zswap: &str, percent: u32, pool: Option<u64>) -> Result<()> {
    use runstat::format_size;
    if budget_bytes < MIN_BUDGET_BYTES {
        bail!(
            "--budget {} is below {}, what a process needs to run under uswap at all (the \
             loader, libc, the shim and its engine): give at least that",
            format_size(budget_bytes),
            format_size(MIN_BUDGET_BYTES)
        );
    }
    if zswap == "off" || pool.is_some() {
        return Ok(());
    }
    let share = (u128::from(budget_bytes) * u128::from(percent) / 100) as u64;
    let (min, max) = (zswap::config::MIN_POOL_BYTES, zswap::config::MAX_POOL_BYTES);
    if !(min..=max).contains(&share) {
        let fix = if share > max {
            "lower --pool-percent, give --pool-size, or --zswap off"
        } else {
            "raise --budget or --pool-percent"
        };
        bail!(
            "--budget {} with --pool-percent {percent}: a pool of {}, and the pool takes {} to \
             {}: {fix}",
            format_size(budget_bytes),
            format_size(share),
            format_size(min),
            format_size(max)
        );
    }
    Ok(())
}

/// What the shim maps besides its arena: its threads' stacks, staging and discard areas,
/// the forwarding board (a generous bound).
const SHIM_MAPPINGS_BYTES: u64 = 64 << 20;

/// The budget to take when none is given: `wanted`, or half the address-space limit if
/// there is one and that is less.
pub fn default_budget(wanted: u64) -> u64 {
    arena::address_space_limit().map_or(wanted, |limit| wanted.min(limit / 2))
}

/// Checks an address-space limit (`ulimit -v`): the shim's arena is sized to a quarter of
/// it (`arena::reservation_bytes`); the shim's own mappings must leave the program at least
/// half, and the pool (`pool_bytes` at most) and the engine's tables (about 10 MiB per GiB
/// of managed memory, which the limit bounds) must fit the arena: a reservation that does
/// not fit fails inside the program, which then aborts on its first allocation.
///
/// # Errors
/// One line naming the limit and what it would take.
pub fn check_address_space(pool_bytes: u64) -> Result<()> {
    use runstat::format_size;
    let Some(limit) = arena::address_space_limit() else { return Ok(()) };
    let arena = arena::reservation_bytes(Some(limit)) as u64;
    let shim = arena + SHIM_MAPPINGS_BYTES;
    if shim.saturating_mul(2) > limit {
        bail!(
            "the address-space limit (ulimit -v) of {} is too small for the uswap shim, which \
             maps about {} of its own: give at least {}",
            format_size(limit),
            format_size(shim),
            format_size(shim * 2)
        );
    }
    let tables = limit / 64 + (16 << 20);
    if pool_bytes + tables > arena {
        bail!(
            "the address-space limit (ulimit -v) of {} leaves the shim {} for the pool (up to \
             {}) and the engine's tables (up to {}): lower --budget, --pool-percent or \
             --pool-size, or raise the limit",
            format_size(limit),
            format_size(arena),
            format_size(pool_bytes),
            format_size(tables)
        );
    }
    Ok(())
}

/// A note when `dir` (where the swap file goes) is in memory (tmpfs, ramfs): pages paged out
/// there stay in RAM, so the swap file saves nothing.
pub fn swap_in_memory(dir: &Path) -> Option<String> {
    const TMPFS_MAGIC: u64 = 0x0102_1994;
    const RAMFS_MAGIC: u64 = 0x8584_58f6;
    let stat = rustix::fs::statfs(dir).ok()?;
    let kind = stat.f_type as u64;
    let name = match kind {
        TMPFS_MAGIC => "a tmpfs",
        RAMFS_MAGIC => "a ramfs",
        _ => return None,
    };
    Some(format!(
        "the swap file goes in {} ({name}): its pages stay in memory, and it saves nothing; \
         give --swap-file on a disk",
        dir.display()
    ))
}

/// Whether a 64-bit little-endian ELF has a PT_INTERP header (`None`: not such an ELF).
pub fn elf_interp(bytes: &[u8]) -> Option<bool> {
    if bytes.get(..4)? != b"\x7fELF" || *bytes.get(4)? != 2 || *bytes.get(5)? != 1 {
        return None;
    }
    let u16_at = |at: usize| Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
    let (phoff, phentsize, phnum) = (u64_at(0x20)? as usize, u16_at(0x36)? as usize, u16_at(0x38)?);
    const PT_INTERP: u32 = 3;
    for i in 0..phnum as usize {
        let at = phoff.checked_add(i * phentsize)?;
        let kind = u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?);
        if kind == PT_INTERP {
            return Some(true);
        }
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elf_headers_say_dynamic_or_static() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(elf_interp(&me), Some(true), "test binaries are dynamically linked");
        assert_eq!(elf_interp(b"#!/bin/sh\n"), None);
        assert_eq!(elf_interp(b"\x7fELF"), None, "truncated");
    }

    #[test]
    fn a_script_is_judged_by_its_interpreter() {
        let dir = tempfile::Builder::new().prefix("uswap-preflight-").tempdir().unwrap();
        let script = dir.path().join("s");
        std::fs::write(&script, "#!/bin/sh -e\necho\n").unwrap();
        check_loadable(&script).unwrap();
        std::fs::write(&script, "#!/nonexistent/x\n").unwrap();
        assert!(check_loadable(&script).unwrap_err().to_string().contains("its interpreter"));
        std::fs::write(&script, "#!\n").unwrap();
        assert!(check_loadable(&script).unwrap_err().to_string().contains("no interpreter"));
        // A script whose interpreter is itself: the kernel gives up after four levels.
        std::fs::write(&script, format!("#!{}\n", script.display())).unwrap();
        assert!(check_loadable(&script).unwrap_err().to_string().contains("levels"));
    }
}
