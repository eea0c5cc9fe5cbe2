//! The checker's model: the last version written to every page of every address space.
//!
//! The program's accesses are atomic in the simulation (a present page is read or written
//! under the page source's lock, by the one thread holding the baton), so the model is
//! exact: a read must return the bytes of the last write that completed before it, never
//! anything else. There is one exception, and it is loud: a page the engine could not read
//! back is *poisoned*, its access fails, and the program drops it (as a real program would
//! after SIGBUS, or by exiting). The model then forgets the page: it reads as zeros from
//! then on. That is only legal in a run whose fault sites can lose data
//! ([`crate::buggify::Site`]: read failures, corruption, torn and lost writes); anywhere
//! else a poisoned page is itself a failure.
//!
//! Forks copy the parent's versions to the child's address space at the instant of the
//! fork; an exit forgets the child's.

use crate::content::{self, Kind, Version};
use crate::failure::FailureKind;
use engine::region::MmId;
use engine::PAGE_SIZE;
use std::collections::BTreeMap;

/// Who wrote a version, for failure messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Written {
    version: Version,
    thread: usize,
    op: u64,
    /// The address the bytes were made for (they depend on it): where the page was
    /// written, until a remap moves it.
    origin: u64,
}

/// The model (see the module documentation).
#[derive(Debug)]
pub struct Model {
    seed: u64,
    /// (address space, page address) → last write. Absent: reads as zeros.
    pages: BTreeMap<(u32, u64), Written>,
    /// The last version number handed out.
    versions: u32,
    /// Reads compared with the model.
    pub reads_checked: u64,
    /// Pages lost loudly (poisoned, then dropped).
    pub pages_lost: u64,
}

impl Model {
    /// An empty model for run `seed`: every page reads as zeros.
    pub fn new(seed: u64) -> Model {
        Model { seed, pages: BTreeMap::new(), versions: 0, reads_checked: 0, pages_lost: 0 }
    }

    /// A new version of kind `kind`, written by `thread` in operation `op` to page `addr`
    /// of `mm`: records it and fills `out` with its bytes.
    pub fn write(
        &mut self,
        mm: MmId,
        addr: u64,
        kind: Kind,
        who: (usize, u64),
        out: &mut [u8; PAGE_SIZE],
    ) {
        self.versions += 1;
        let version = Version { n: self.versions, kind };
        content::fill(self.seed, addr, version, out);
        let written = Written { version, thread: who.0, op: who.1, origin: addr };
        self.pages.insert((mm.0, addr), written);
    }

    /// The version page `addr` of `mm` must read as.
    pub fn expected(&self, mm: MmId, addr: u64) -> Version {
        self.pages.get(&(mm.0, addr)).map_or(Version::ZERO, |w| w.version)
    }

    /// Checks a read of page `addr` of `mm` that returned `data`.
    ///
    /// # Errors
    /// [`FailureKind::WrongData`] naming what was read and what was expected.
    pub fn check_read(&mut self, mm: MmId, addr: u64, data: &[u8]) -> Result<(), FailureKind> {
        self.reads_checked += 1;
        let written = self.pages.get(&(mm.0, addr)).copied();
        let version = written.map_or(Version::ZERO, |w| w.version);
        let origin = written.map_or(addr, |w| w.origin);
        let mut expected = [0u8; PAGE_SIZE];
        content::fill(self.seed, origin, version, &mut expected);
        if data == expected.as_slice() {
            return Ok(());
        }
        let last_write = match written {
            Some(w) if w.origin != addr => format!(
                "written by thread {} in op #{} at {:#x}, then remapped",
                w.thread, w.op, w.origin
            ),
            Some(w) => format!("written by thread {} in op #{}", w.thread, w.op),
            None => "never written since mapped or dropped".into(),
        };
        Err(FailureKind::WrongData {
            mm: mm.0,
            addr,
            expected: version.to_string(),
            got: content::describe(data),
            last_write,
        })
    }

    /// Pages `[addr, addr + len)` of `mm` were dropped: they read as zeros.
    pub fn drop_range(&mut self, mm: MmId, addr: u64, len: u64) {
        let doomed: Vec<(u32, u64)> =
            self.pages.range((mm.0, addr)..(mm.0, addr + len)).map(|(k, _)| *k).collect();
        for key in doomed {
            self.pages.remove(&key);
        }
    }

    /// `[from, from + len)` of `mm` moved to `to` (mremap): the versions go with the pages,
    /// and whatever the destination held is gone.
    pub fn move_range(&mut self, mm: MmId, from: u64, to: u64, len: u64) {
        let moved: Vec<(u64, Written)> = self
            .pages
            .range((mm.0, from)..(mm.0, from + len))
            .map(|(&(_, a), w)| (a, *w))
            .collect();
        for &(addr, _) in &moved {
            self.pages.remove(&(mm.0, addr));
        }
        self.drop_range(mm, to, len);
        for (addr, written) in moved {
            self.pages.insert((mm.0, addr - from + to), written);
        }
    }

    /// A page was lost loudly and the program dropped it.
    pub fn lost(&mut self, mm: MmId, addr: u64) {
        self.pages_lost += 1;
        self.drop_range(mm, addr, PAGE_SIZE as u64);
    }

    /// `child` is a fork of `parent`: it starts with the parent's versions.
    pub fn fork(&mut self, parent: MmId, child: MmId) {
        let copied: Vec<((u32, u64), Written)> = self
            .pages
            .range((parent.0, 0)..=(parent.0, u64::MAX))
            .map(|(&(_, addr), w)| ((child.0, addr), *w))
            .collect();
        self.pages.extend(copied);
    }

    /// Address space `mm` exited.
    pub fn exit(&mut self, mm: MmId) {
        self.drop_range(mm, 0, u64::MAX);
    }

    /// Every page of `mm` with a written version (for the final read-back).
    pub fn written_pages(&self, mm: MmId) -> Vec<u64> {
        self.pages.range((mm.0, 0)..=(mm.0, u64::MAX)).map(|(&(_, addr), _)| addr).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_must_match_the_last_write() {
        let mut model = Model::new(5);
        let mm = MmId::DEFAULT;
        let mut page = [0u8; PAGE_SIZE];
        model.check_read(mm, 0x1000, &page).unwrap();
        model.write(mm, 0x1000, Kind::Heap, (0, 1), &mut page);
        model.check_read(mm, 0x1000, &page).unwrap();
        let old = page;
        model.write(mm, 0x1000, Kind::Random, (1, 2), &mut page);
        let error = model.check_read(mm, 0x1000, &old).unwrap_err();
        assert!(error.to_string().contains("read page 0x1000 v1"), "{error}");
        assert!(error.to_string().contains("thread 1 in op #2"), "{error}");
    }

    #[test]
    fn a_remap_moves_the_versions_and_their_bytes() {
        let mut model = Model::new(5);
        let mm = MmId::DEFAULT;
        let (mut a, mut b) = ([0u8; PAGE_SIZE], [0u8; PAGE_SIZE]);
        model.write(mm, 0x1000, Kind::Heap, (0, 1), &mut a);
        model.write(mm, 0x9000, Kind::Heap, (0, 2), &mut b);
        model.move_range(mm, 0x1000, 0x9000, 0x1000);
        // The bytes written at 0x1000 are now 0x9000's; 0x1000 reads as zeros.
        model.check_read(mm, 0x9000, &a).unwrap();
        model.check_read(mm, 0x1000, &[0u8; PAGE_SIZE]).unwrap();
        let error = model.check_read(mm, 0x9000, &b).unwrap_err();
        assert!(error.to_string().contains("then remapped"), "{error}");
    }

    #[test]
    fn fork_copies_and_exit_forgets() {
        let mut model = Model::new(5);
        let (parent, child) = (MmId::DEFAULT, MmId(3));
        let mut page = [0u8; PAGE_SIZE];
        model.write(parent, 0x2000, Kind::Heap, (0, 1), &mut page);
        model.fork(parent, child);
        assert_eq!(model.expected(child, 0x2000), model.expected(parent, 0x2000));
        model.write(parent, 0x2000, Kind::Heap, (0, 2), &mut page);
        assert_ne!(model.expected(child, 0x2000), model.expected(parent, 0x2000));
        model.exit(child);
        assert_eq!(model.expected(child, 0x2000), Version::ZERO);
        assert_eq!(model.written_pages(parent), vec![0x2000]);
        model.lost(parent, 0x2000);
        assert_eq!((model.expected(parent, 0x2000), model.pages_lost), (Version::ZERO, 1));
    }
}
