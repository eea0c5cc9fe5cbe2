//! The engine's [`PageSource`] over the source: take (MOVE out through staging), map, map
//! zero (write-protected where asked), unprotect, poison and wake (the source's essay,
//! **Take** and **Map**), and the settling of staged pages (`staged`).

use super::{add, source_error, UffdSource, PAGE};
use engine::{Mapped, PageSource, SourceError, StageLoc, Taken};
use uffd::types::{CopyMode, Range, Wake};

impl PageSource for UffdSource {
    fn take_each(&self, addr: u64, dst: &mut [&mut [u8]]) -> Result<Taken, SourceError> {
        add(&self.counters.takes, 1);
        let home = self.home();
        if home.direct {
            add(&self.counters.take_failed, 1);
            return Err(SourceError::Failed("no uffd serves this address space".into()));
        }
        self.take_inner(&home, addr, dst)
    }

    fn map(&self, addr: u64, data: &[u8]) -> Result<Mapped, SourceError> {
        let home = self.home();
        if home.direct {
            // SAFETY: the engine maps only into its regions, where the page is missing
            // (the module essay's contract: nobody holds a reference into it), and no
            // uffd serves the range: the write is an ordinary first touch.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, data.len());
            }
            add(&self.counters.map_pages, (data.len() / PAGE) as u64);
            return Ok(Mapped::Done);
        }
        let mode = match self.wake_mode() {
            Wake::Wake => CopyMode::NONE,
            Wake::DontWake => CopyMode::DONTWAKE,
        };
        self.fill(addr, data.len(), &self.counters.map_pages, |at, offset, len| {
            home.uffd.copy(at, &data[offset..offset + len], mode)
        })
    }

    fn map_zero(&self, addr: u64, len: u64) -> Result<Mapped, SourceError> {
        let (home, wake) = (self.home(), self.wake_mode());
        if home.direct {
            return Ok(Mapped::Done); // a missing page outside every uffd reads as zeros
        }
        self.fill(addr, len as usize, &self.counters.map_zero_pages, |at, _, len| {
            let range = Range::new(at, len)?;
            home.uffd.zeropage(range, wake)
        })
    }

    fn protects_zero(&self) -> bool {
        self.protect_zero && !self.home().direct
    }

    /// `UFFDIO_ZEROPAGE` without waking, `UFFDIO_WRITEPROTECT`, then the wake: the faulting
    /// thread resumes on a protected page. Another thread's write in between allocates
    /// unseen (the trait's note). If the protection fails the pages stay mapped and the
    /// error goes back: the retried fault finds them present and the engine keeps them as
    /// resident, charged.
    fn map_zero_protected(&self, addr: u64, len: u64) -> Result<Mapped, SourceError> {
        let (home, wake) = (self.home(), self.wake_mode());
        let uffd = &home.uffd;
        let mapped = self.fill(addr, len as usize, &self.counters.map_zero_pages, |at, _, len| {
            let range = Range::new(at, len)?;
            uffd.zeropage(range, Wake::DontWake)
        });
        let protected = match mapped {
            Ok(Mapped::Done) => Range::new(addr as usize, len as usize)
                .and_then(|range| uffd.writeprotect(range, true, wake)),
            _ => Ok(()),
        };
        if wake == Wake::Wake {
            self.wake(addr, len);
        }
        match protected {
            Ok(()) => {
                if mapped == Ok(Mapped::Done) {
                    add(&self.counters.zero_protected_pages, len / PAGE as u64);
                }
                mapped
            }
            Err(error) => {
                add(&self.counters.protect_failed, 1);
                Err(source_error(error))
            }
        }
    }

    fn unprotect(&self, addr: u64, len: u64) -> Result<(), SourceError> {
        let result = Range::new(addr as usize, len as usize)
            .and_then(|range| self.home().uffd.writeprotect(range, false, self.wake_mode()));
        match result {
            Ok(()) => {
                add(&self.counters.unprotected_pages, len / PAGE as u64);
                Ok(())
            }
            Err(error) => {
                add(&self.counters.protect_failed, 1);
                Err(source_error(error))
            }
        }
    }

    fn poison(&self, addr: u64, len: u64) -> Result<(), SourceError> {
        let (home, wake) = (self.home(), self.wake_mode());
        if home.direct {
            // No uffd to poison through: the page is made inaccessible, so the access is
            // SIGSEGV rather than a read of zeros.
            return Range::new(addr as usize, len as usize)
                .and_then(uffd::mm::protect_none)
                .map_err(|e| SourceError::Failed(e.to_string()));
        }
        self.fill(addr, len as usize, &self.counters.poisoned_pages, |at, _, len| {
            let range = Range::new(at, len)?;
            home.uffd.poison(range, wake)
        })
        .map(drop)
    }

    fn wake(&self, addr: u64, len: u64) {
        if let Ok(range) = Range::new(addr as usize, len as usize) {
            let _ = self.home().uffd.wake(range);
        }
    }

    fn unstage(&self, at: StageLoc, addr: u64) -> Result<(), SourceError> {
        self.unstage_page(at, addr)
    }

    fn drop_staged(&self, at: StageLoc) {
        self.drop_staged_page(at);
    }

    fn read_staged(&self, at: StageLoc, out: &mut [u8]) -> bool {
        self.read_staged_page(at, out)
    }
}
