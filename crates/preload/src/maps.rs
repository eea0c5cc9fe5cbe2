//! The process's mappings as /proc/self/maps lists them, and which of them the shim may
//! manage.
//!
//! Managed: private, anonymous, read-write (`rw-p`, no file) mappings: the brk heap above
//! the break the shim found at start, malloc's mmap'd chunks and arenas, the program's own
//! anonymous mmaps, its threads' stacks. Never managed: file mappings, shared mappings,
//! executable or read-only ones, `[stack]` (the main thread's), `[vvar]`, `[vdso]`, and the
//! engine's own memory: the shim's arena and every mapping that appeared while the engine
//! was being set up (its threads' stacks, the staging and discard areas, malloc arenas its
//! threads made), named `[anon:uswap...]` where the kernel supports names, and recorded in
//! [`Exclusions`] by address in any case.
//!
//! Reading: the file is opened once, at a high number out of the program's way (crate
//! `fds`), and read whole with `pread` from offset 0 into a buffer kept across scans (the
//! shim's allocator, never glibc's: this runs on the handler thread), so a scan makes no
//! descriptor a program could close or reuse under it. A line the parser does not
//! understand is skipped, never managed.

#![allow(unsafe_code)]

/// One mapping that may be managed (the parser keeps no others).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
    /// The brk heap.
    pub heap: bool,
}

/// Ranges the shim never manages (module essay), sorted and disjoint.
#[derive(Debug, Clone, Default)]
pub struct Exclusions {
    ranges: Vec<(usize, usize)>,
}

impl Exclusions {
    /// Adds `[start, end)`.
    pub fn add(&mut self, start: usize, end: usize) {
        if start < end {
            self.ranges.push((start, end));
            self.ranges.sort_unstable();
        }
    }

    /// The parts of `[start, end)` outside every exclusion.
    pub fn subtract(&self, start: usize, end: usize, out: &mut Vec<(usize, usize)>) {
        subtract(&self.ranges, start, end, out);
    }
}

/// The parts of `[start, end)` outside the sorted ranges `holes` (appended to `out`).
pub fn subtract(holes: &[(usize, usize)], start: usize, end: usize, out: &mut Vec<(usize, usize)>) {
    let mut at = start;
    for &(s, e) in holes {
        if e <= at {
            continue;
        }
        if s >= end {
            break;
        }
        if s > at {
            out.push((at, s));
        }
        at = at.max(e);
        if at >= end {
            return;
        }
    }
    if at < end {
        out.push((at, end));
    }
}

/// `[start, end)` cut at every edge of the sorted, disjoint `ranges` inside it (appended to
/// `out`): each piece lies wholly inside one of them or outside all.
pub fn cut_at(ranges: &[(usize, usize)], start: usize, end: usize, out: &mut Vec<(usize, usize)>) {
    let mut at = start;
    for &(s, e) in ranges {
        for edge in [s, e] {
            if edge > at && edge < end {
                out.push((at, edge));
                at = edge;
            }
        }
    }
    if at < end {
        out.push((at, end));
    }
}

/// Sets `ranges` to the engine's address ranges `from`.
pub fn set_from(ranges: &mut Vec<(usize, usize)>, from: &[(u64, u64)]) {
    ranges.clear();
    ranges.extend(from.iter().map(|&(s, e)| (s as usize, e as usize)));
}

/// Inserts `range` into the sorted `ranges`, keeping them sorted (by start).
pub fn insert(ranges: &mut Vec<(usize, usize)>, range: (usize, usize)) {
    let at = ranges.partition_point(|r| r.0 < range.0);
    ranges.insert(at, range);
}

/// The registry's name for /proc/self/maps.
static MAPS: fds::Kind = fds::Kind {
    what: "/proc/self/maps descriptor",
    if_lost: "new mappings are no longer found, nor managed",
    keep: false,
};

/// Reads /proc/self/maps into `buf` (cleared first).
///
/// The file is opened once per process ([`fds::OwnProcFile`]): a child that scanned its
/// parent's mappings would never find its own new ones, and would try to register ranges
/// it does not have.
///
/// # Errors
/// The file cannot be opened or read (or its descriptor was lost: crate `fds`).
///
/// Context: the handler thread or the constructor (never held across a fork: the handler
/// enters fork mode between its turns).
pub fn read(buf: &mut Vec<u8>) -> Result<(), fds::Error> {
    static FILE: fds::OwnProcFile = fds::OwnProcFile::new(c"/proc/self/maps", &MAPS);
    FILE.read(buf)
}

/// The candidates of a maps text, in address order. With `skip_stacks`, a writable
/// mapping right above an inaccessible anonymous one (`---p`, ending where it starts) is
/// left out: that is how a thread's stack lies, above its guard page (glibc's
/// `allocate_stack`; malloc arenas lie the other way, the reserve above the used part).
/// Thread stacks stay unmanaged: glibc's fork writes the descriptor at the top of every
/// thread's stack in the child before any fork handler runs (its `reclaim_stacks`), and
/// under SIGBUS delivery the kernel writes signal frames there (docs/RUN.md).
///
/// Whatever the size of the `---p` below: glibc maps a new stack inaccessible whole before
/// it opens all but the guard, and mapped right below an older stack's guard it merges with
/// it, so for that moment the older stack lies above megabytes of `---p`. A bound on the
/// guard's size would let a scan in that moment adopt the older stack, whose thread then
/// dies of a SIGBUS (`idle_threads`). The cost of no bound: memory a
/// program maps with `MAP_FIXED` right above a `PROT_NONE` reservation stays unmanaged
/// under SIGBUS delivery (docs/RUN.md).
pub fn candidates(text: &[u8], out: &mut Vec<Candidate>, skip_stacks: bool) {
    out.clear();
    let mut guard_end = None;
    for line in text.split(|&b| b == b'\n') {
        let above_guard = guard_end.take();
        if let Some(candidate) = parse_line(line) {
            if !(skip_stacks && above_guard == Some(candidate.start)) {
                out.push(candidate);
            }
        }
        guard_end = guard_of(line);
    }
}

/// The end of an inaccessible anonymous mapping (a guard page), if `line` is one.
fn guard_of(line: &[u8]) -> Option<usize> {
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let (_, end) = range_of(fields.next()?)?;
    let perms = fields.next()?;
    let (_offset, _dev, inode) = (fields.next()?, fields.next()?, fields.next()?);
    (perms == b"---p" && inode == b"0" && fields.next().is_none()).then_some(end)
}

/// The `[start, end)` of every mapping in a maps text (for the set-up snapshot).
pub fn all_ranges(text: &[u8]) -> Vec<(usize, usize)> {
    text.split(|&b| b == b'\n')
        .filter_map(|line| range_of(line.split(|&b| b == b' ').next()?))
        .collect()
}

/// Appends to `out` the lines of `text` that are not inside `inside` (all of them when it
/// is `None`).
pub fn lines_outside(text: &[u8], inside: Option<(usize, usize)>, out: &mut Vec<u8>) {
    for line in text.split(|&b| b == b'\n') {
        let range = line.split(|&b| b == b' ').next().and_then(range_of);
        if let (Some((start, end)), Some((lo, hi))) = (range, inside) {
            if lo <= start && end <= hi {
                continue;
            }
        }
        out.extend_from_slice(line);
        out.push(b'\n');
    }
}

fn range_of(field: &[u8]) -> Option<(usize, usize)> {
    let text = std::str::from_utf8(field).ok()?;
    let (start, end) = text.split_once('-')?;
    Some((usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?))
}

/// One line: `start-end perms offset dev inode [name]`.
fn parse_line(line: &[u8]) -> Option<Candidate> {
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let (start, end) = range_of(fields.next()?)?;
    if fields.next()? != b"rw-p" {
        return None;
    }
    let (_offset, _dev, inode) = (fields.next()?, fields.next()?, fields.next()?);
    if inode != b"0" {
        return None;
    }
    let name: &[u8] = fields.next().unwrap_or(b"");
    let heap = name == b"[heap]";
    let named_anon = name.starts_with(b"[anon:") && !name.starts_with(b"[anon:uswap");
    (name.is_empty() || heap || named_anon).then_some(Candidate { start, end, heap })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writable mapping right above an inaccessible one is taken for a thread's stack
    /// under SIGBUS delivery, whatever the size below (see `candidates`); the rest stays.
    #[test]
    fn a_writable_mapping_right_above_an_inaccessible_one_is_a_stack() {
        let text = b"7f0000000000-7f0000001000 ---p 00000000 00:00 0 \n\
                     7f0000001000-7f0000801000 rw-p 00000000 00:00 0 \n\
                     7f1000000000-7f1003000000 ---p 00000000 00:00 0 \n\
                     7f1003000000-7f1009000000 rw-p 00000000 00:00 0 \n\
                     7f2000000000-7f2000100000 rw-p 00000000 00:00 0 \n";
        let starts = |skip_stacks| {
            let mut out = Vec::new();
            candidates(text, &mut out, skip_stacks);
            out.iter().map(|c| c.start).collect::<Vec<_>>()
        };
        assert_eq!(starts(false), [0x7f00_0000_1000, 0x7f10_0300_0000, 0x7f20_0000_0000]);
        assert_eq!(starts(true), [0x7f20_0000_0000], "both left out, not the rest");
    }

    /// The settle loop compares the maps without the arena's lines: those inside the
    /// range go, one that only overlaps it stays, and without a range every line stays.
    #[test]
    fn lines_inside_a_range_are_left_out() {
        let text = b"1000-2000 rw-p 00000000 00:00 0 \n\
                     10000-11000 rw-p 00000000 00:00 0 \n\
                     1f000-21000 rw-p 00000000 00:00 0 \n";
        let mut out = Vec::new();
        lines_outside(text, Some((0x10000, 0x20000)), &mut out);
        assert_eq!(
            out,
            b"1000-2000 rw-p 00000000 00:00 0 \n1f000-21000 rw-p 00000000 00:00 0 \n\n"
        );
        out.clear();
        lines_outside(text, None, &mut out);
        assert_eq!(out.len(), text.len() + 1, "every line, and the empty one after the last");
    }

    /// A new mapping across a region's hole and the free space beside it is cut at the
    /// hole's edges: the piece inside fills the hole, the one outside becomes a region.
    #[test]
    fn a_range_is_cut_at_every_edge_inside_it() {
        let holes = [(10, 20), (30, 40)];
        let cut = |start, end| {
            let mut out = Vec::new();
            cut_at(&holes, start, end, &mut out);
            out
        };
        assert_eq!(cut(15, 35), vec![(15, 20), (20, 30), (30, 35)]);
        assert_eq!(cut(10, 20), vec![(10, 20)], "a hole exactly: one piece");
        assert_eq!(cut(0, 50), vec![(0, 10), (10, 20), (20, 30), (30, 40), (40, 50)]);
        assert_eq!(cut(22, 28), vec![(22, 28)], "between holes: untouched");
        assert_eq!(cut(35, 45), vec![(35, 40), (40, 45)]);
    }

    /// A forked child reads its own mappings, not its parent's through the descriptor it
    /// inherited: a mapping only the child made is listed.
    #[test]
    #[allow(unsafe_code)] // mmap, fork, waitpid, _exit
    fn a_forked_child_reads_its_own_maps() {
        let mut buf = Vec::with_capacity(1 << 20);
        read(&mut buf).unwrap(); // opened here, by the parent
        let len = 64 * 4096;
        // SAFETY: fork has no preconditions; the child maps, reads its maps and _exits.
        let child = unsafe { libc::fork() };
        assert!(child >= 0);
        if child == 0 {
            let (prot, flags) = (libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE);
            // SAFETY: a new anonymous mapping at an address the kernel picks.
            let at = unsafe {
                libc::mmap(std::ptr::null_mut(), len, prot, flags | libc::MAP_ANONYMOUS, -1, 0)
            };
            let listed = read(&mut buf).is_ok() && {
                let start = format!("{:x}-", at as usize);
                String::from_utf8_lossy(&buf).lines().any(|l| l.starts_with(&start))
            };
            // SAFETY: ends the child at once, running nothing of the parent's.
            unsafe { libc::_exit(if listed { 0 } else { 1 }) };
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut status = 0;
        // SAFETY: waits for this test's own child, with a valid out-pointer.
        while unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) } == 0 {
            assert!(std::time::Instant::now() < deadline, "the child did not exit");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child: {status}");
    }
}
