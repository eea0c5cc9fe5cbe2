//! Executing one operation against the engine, and checking what comes back.
//!
//! Each operation runs on the simulated thread holding the baton; it may yield inside the
//! engine (backend I/O, folio waits) and other threads then run. The program's accesses to
//! present pages are atomic (under the page source's lock), and the model is updated in
//! the same critical section as the data, so a read is checked against exactly the writes
//! that completed before it.
//!
//! A poisoned page (the engine could not read it back) is legal only in a run with a fault
//! site that can lose data; the program then drops it, the model forgets it, and the run
//! counts it. Anything else unexpected from the engine is a failure.

use crate::buggify::Site;
use crate::content::Kind;
use crate::failure::FailureKind;
use crate::ops::{Op, CHUNK};
use crate::options::WorkloadKind;
use crate::run::{Child, Ctx};
use crate::source::{AccessError, Page, SimSource};
use engine::region::MmId;
use engine::PAGE_SIZE;
use std::sync::Arc;

const PAGE: u64 = PAGE_SIZE as u64;

/// Most forked children alive at once (each holds a copy of the program's present pages).
const CHILDREN_MAX: usize = 2;

/// The result of an operation, folded into the run's digest.
pub type Outcome = Result<u64, FailureKind>;

impl Ctx {
    /// Runs `op` as operation `index` of thread `me`. Returns a code for the digest.
    ///
    /// # Errors
    /// The failure the operation found.
    pub(crate) fn execute(&self, me: usize, index: u64, op: Op) -> Outcome {
        let mm = MmId::DEFAULT;
        match op {
            Op::Read { addr } => self.read(&self.source, mm, addr),
            Op::Write { addr, kind } => self.write(me, index, addr, kind),
            Op::Fill { addr, pages } => {
                let mut lost = 0;
                for page in 0..pages {
                    lost += self.write(me, index, addr + page * PAGE, Kind::Heap)?;
                }
                Ok(lost)
            }
            Op::Pageout { addr, len } => {
                // A range outside every region (a replayed eviction of a page this replay
                // has not touched yet) pages nothing out.
                let pages = self.engine.pageout(addr, len).unwrap_or(0);
                self.pageouts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.pageout_pages.fetch_add(pages, std::sync::atomic::Ordering::Relaxed);
                Ok(pages)
            }
            Op::Remove { addr, len } => {
                self.drop_pages(&self.source, mm, addr, len);
                Ok(0)
            }
            Op::Map { addr, len } => match self.engine.add_region(addr, len) {
                Ok(_) => {
                    self.source.map_range(addr, len);
                    Ok(0)
                }
                Err(e) => Err(FailureKind::Engine { op: format!("{op:?}"), error: e.to_string() }),
            },
            Op::Unmap { addr, len } => {
                self.source.unmap_range(addr, len);
                self.engine.unmap(addr, len);
                self.model.lock().drop_range(mm, addr, len);
                Ok(0)
            }
            // mremap moves the pages at once, and the engine learns of it from the REMAP
            // event; nothing here yields, so no access comes between the two.
            Op::Remap { from, to, len } => {
                self.source.move_range(from, to, len);
                let moved = if self.opts.workload == WorkloadKind::Replay {
                    self.replay_remap(mm, from, to, len)
                } else {
                    self.engine.remap(mm, from, to, len)
                };
                self.model.lock().move_range(mm, from, to, len);
                self.remaps.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                moved.map(|()| 0).map_err(|e| FailureKind::Engine {
                    op: format!("{op:?}"),
                    error: e.to_string(),
                })
            }
            Op::Fork => self.fork(me),
            Op::ChildRead { addr } => {
                let child = self.children.lock().iter().find(|c| c.owner == me).cloned();
                match child {
                    Some(c) => self.read(&c.source, c.mm, addr),
                    None => Ok(0),
                }
            }
            Op::ChildExit => {
                self.exit_children(Some(me));
                Ok(0)
            }
            // The reclaimer's pass ends as the event reader's does: staged pages go back.
            Op::Reclaim => {
                let reclaimed = self.engine.reclaim();
                self.engine.unstage_all();
                Ok(reclaimed)
            }
            Op::Idle => Ok(0),
        }
    }

    /// Reads page `addr` of `mm` through `source` and checks it against the model.
    fn read(&self, source: &SimSource, mm: MmId, addr: u64) -> Outcome {
        let mut buf = [0u8; PAGE_SIZE];
        let read = self.access(source, mm, addr, false, |page| match page {
            Page::Data(data) => buf.copy_from_slice(&data[..]),
            Page::Zero => buf.fill(0),
            Page::Poisoned => unreachable!("access() reports poisoned pages"),
        });
        match read {
            Ok(()) => self.model.lock().check_read(mm, addr, &buf).map(|()| 1),
            Err(AccessError::Poisoned) => self.lost(source, mm, addr),
            Err(error) => Err(self.access_failure(addr, error)),
        }
    }

    /// Writes a new version of page `addr`; returns 1 if the page was lost instead.
    fn write(&self, me: usize, index: u64, addr: u64, kind: Kind) -> Outcome {
        let mm = MmId::DEFAULT;
        let written = self.access(&self.source, mm, addr, true, |page| {
            let mut data = Box::new([0u8; PAGE_SIZE]);
            self.model.lock().write(mm, addr, kind, (me, index), &mut data);
            *page = Page::Data(data);
        });
        match written {
            Ok(()) => Ok(0),
            Err(AccessError::Poisoned) => self.lost(&self.source, mm, addr),
            Err(error) => Err(self.access_failure(addr, error)),
        }
    }

    /// An access; a replayed trace maps the 2 MiB chunk around an address it touches
    /// outside every region (the recording's mmap).
    fn access(
        &self,
        source: &SimSource,
        mm: MmId,
        addr: u64,
        write: bool,
        mut f: impl FnMut(&mut Page),
    ) -> Result<(), AccessError> {
        let first = source.access(&self.engine, mm, addr, write, &mut f);
        if first != Err(AccessError::Outside)
            || self.opts.workload != WorkloadKind::Replay
            || mm != MmId::DEFAULT
        {
            return first;
        }
        let chunk = addr & !(CHUNK - 1);
        if !self.map_gaps(chunk, chunk + CHUNK) {
            return first;
        }
        source.access(&self.engine, mm, addr, write, f)
    }

    /// A replay's regions: the trace does not carry the recording's mappings, so a replay
    /// maps what it touches, 2 MiB at a time, and what a remap moves into. This adds a
    /// region over every gap between the regions in `[start, end)` (a remap's destination
    /// may have left one in the middle of a chunk); whether every gap was added.
    fn map_gaps(&self, start: u64, end: u64) -> bool {
        let mut ranges = self.engine.region_ranges(MmId::DEFAULT);
        ranges.sort_unstable();
        let mut at = start;
        let map = |from: u64, to: u64| {
            let added = self.engine.add_region(from, to - from).is_ok();
            if added {
                self.source.map_range(from, to - from);
            }
            added
        };
        for (s, e) in ranges.into_iter().filter(|&(s, e)| e > start && s < end) {
            if s > at && !map(at, s) {
                return false;
            }
            at = at.max(e);
        }
        at >= end || map(at, end)
    }

    /// A replayed remap: the destination is mapped first ([`Ctx::map_gaps`]), and the
    /// move is cut at every region edge of the source and of the destination, so each
    /// piece lies in one region at each end; a piece of the source in no region was never
    /// touched in the recording, and moves nothing the engine tracks.
    fn replay_remap(&self, mm: MmId, from: u64, to: u64, len: u64) -> Result<(), engine::Error> {
        if mm != MmId::DEFAULT || !self.map_gaps(to, to + len) {
            return self.engine.remap(mm, from, to, len);
        }
        let ranges = self.engine.region_ranges(mm);
        let mut cuts = vec![0, len];
        for (s, e) in &ranges {
            for edge in [*s, *e] {
                for base in [from, to] {
                    if edge > base && edge < base + len {
                        cuts.push(edge - base);
                    }
                }
            }
        }
        cuts.sort_unstable();
        cuts.dedup();
        for piece in cuts.windows(2) {
            let (at, piece_len) = (piece[0], piece[1] - piece[0]);
            if ranges.iter().any(|&(s, e)| s <= from + at && from + at < e) {
                self.engine.remap(mm, from + at, to + at, piece_len)?;
            }
        }
        Ok(())
    }

    fn access_failure(&self, addr: u64, error: AccessError) -> FailureKind {
        match error {
            AccessError::Livelock => FailureKind::Livelock { addr },
            AccessError::Outside => FailureKind::Engine {
                op: format!("access {addr:#x}"),
                error: "outside every region".into(),
            },
            AccessError::Engine(error) => {
                FailureKind::Engine { op: format!("access {addr:#x}"), error }
            }
            AccessError::Poisoned => unreachable!("handled by the callers"),
        }
    }

    /// A page was lost loudly: legal only if a fault site can lose data. The program drops
    /// it. Returns the digest code of a loss.
    fn lost(&self, source: &SimSource, mm: MmId, addr: u64) -> Outcome {
        let f = &self.world.faults;
        let can_lose = [Site::ReadFail, Site::ReadCorrupt, Site::WriteTorn, Site::WriteLost]
            .into_iter()
            .any(|s| f.active(s));
        if !can_lose {
            return Err(FailureKind::Engine {
                op: format!("access {addr:#x} (mm {})", mm.0),
                error: "page poisoned in a run with no fault that can lose data".into(),
            });
        }
        source.drop_range(addr, PAGE);
        self.engine.remove_in(mm, addr, PAGE);
        self.model.lock().lost(mm, addr);
        Ok(2)
    }

    /// The program drops `[addr, addr + len)` of `mm` (MADV_DONTNEED + REMOVE).
    fn drop_pages(&self, source: &SimSource, mm: MmId, addr: u64, len: u64) {
        source.drop_range(addr, len);
        self.engine.remove_in(mm, addr, len);
        self.model.lock().drop_range(mm, addr, len);
    }

    /// Forks the program: the child's memory is a copy of the present pages, its page
    /// tables a copy of the swapped entries (the engine's part). Nothing here yields, so
    /// the two copies are taken at the same instant.
    fn fork(&self, me: usize) -> Outcome {
        if self.children.lock().len() >= CHILDREN_MAX {
            return Ok(0);
        }
        let source = Arc::new(self.source.fork());
        let mm = match self.engine.fork(MmId::DEFAULT, source.clone()) {
            Ok(mm) => mm,
            Err(e) => return Err(FailureKind::Engine { op: "fork".into(), error: e.to_string() }),
        };
        self.model.lock().fork(MmId::DEFAULT, mm);
        self.children.lock().push(Child { owner: me, mm, source });
        Ok(u64::from(mm.0))
    }

    /// The children of `owner` (every child for `None`) exit.
    pub(crate) fn exit_children(&self, owner: Option<usize>) {
        let exiting: Vec<Child> = {
            let mut children = self.children.lock();
            let (gone, kept) = children.drain(..).partition(|c| owner.is_none_or(|o| c.owner == o));
            *children = kept;
            gone
        };
        for child in exiting {
            self.engine.exit_mm(child.mm);
            self.model.lock().exit(child.mm);
        }
    }
}
