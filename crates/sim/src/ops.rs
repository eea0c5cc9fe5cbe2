//! The workloads: what each simulated program thread does next, drawn from its own random
//! stream (so a thread's choices do not depend on how threads interleave, except where
//! the workload shares state on purpose: the kernel build's object table).
//!
//! ```text
//!   sequential  thread t walks the heap from t * heap / threads, page by page
//!   uniform     any heap page
//!   zipf        rank ~ Zipf(theta), scattered over the heap (hot pages are not adjacent)
//!   phases      90% inside a hot window of heap/8 pages that jumps every phase
//!   kbuild      objects of 2^order pages (orders 0..=9, a kernel build's size mix) are
//!               mapped, filled, used and unmapped after a random lifetime; live pages are
//!               kept at budget + fill% of the swap device, so the device runs 80-95% full
//!   replay      the records of a trace, per recorded thread
//! ```
//!
//! Around the accesses, the mix adds page-outs (MADV_PAGEOUT), drops (MADV_DONTNEED) and
//! forks (a child that reads some of the parent's pages, then exits); the kernel build also
//! moves live objects to fresh addresses (mremap, [`REMAP_PER_MILLE`] of its accesses).

use crate::buggify::Site;
use crate::content::Kind;
use crate::options::{SimOptions, WorkloadKind};
use crate::rng::SimRng;
use crate::trace::{Record, RecordKind};
use crate::world::World;
use engine::PAGE_SIZE;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::Arc;
use workload::pattern::{coprime_prime, scatter};
use workload::zipf::Zipf;

const PAGE: u64 = PAGE_SIZE as u64;

/// Where the heap region of the heap workloads starts (2 MiB aligned).
pub const HEAP_BASE: u64 = 0x7f00_0000_0000;
/// Where the kernel build's objects are mapped from.
pub const KBUILD_BASE: u64 = 0x5000_0000_0000;
/// Bytes of a 2 MiB chunk (one cluster's worth; the alignment of large objects).
pub const CHUNK: u64 = 2 << 20;

/// One operation of a program thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Read a page and check it.
    Read {
        /// Page address.
        addr: u64,
    },
    /// Write a new version of a page.
    Write {
        /// Page address.
        addr: u64,
        /// What the new bytes are made of.
        kind: Kind,
    },
    /// Write every page of a range, in order (a new object being filled).
    Fill {
        /// First page.
        addr: u64,
        /// Pages.
        pages: u64,
    },
    /// Page a range out now (MADV_PAGEOUT).
    Pageout {
        /// First byte.
        addr: u64,
        /// Bytes.
        len: u64,
    },
    /// Drop a range (MADV_DONTNEED and the REMOVE event).
    Remove {
        /// First byte.
        addr: u64,
        /// Bytes.
        len: u64,
    },
    /// Map a new region.
    Map {
        /// First byte.
        addr: u64,
        /// Bytes.
        len: u64,
    },
    /// Unmap a range.
    Unmap {
        /// First byte.
        addr: u64,
        /// Bytes.
        len: u64,
    },
    /// Move a range to fresh address space (mremap with MREMAP_MAYMOVE: a buffer grown by
    /// realloc); the old range is unmapped.
    Remap {
        /// First byte of the old range.
        from: u64,
        /// First byte of the new range.
        to: u64,
        /// Bytes.
        len: u64,
    },
    /// Fork a child of the program (it reads some pages, then exits).
    Fork,
    /// A read by this thread's child.
    ChildRead {
        /// Page address.
        addr: u64,
    },
    /// This thread's child exits.
    ChildExit,
    /// A reclaim pass (the reclaimer thread).
    Reclaim,
    /// Nothing this time.
    Idle,
}

impl Op {
    /// A small code per kind, for the run's digest.
    pub fn code(&self) -> u64 {
        match self {
            Op::Read { .. } => 1,
            Op::Write { kind, .. } => 2 + 16 * (*kind as u64),
            Op::Fill { .. } => 3,
            Op::Pageout { .. } => 4,
            Op::Remove { .. } => 5,
            Op::Map { .. } => 6,
            Op::Unmap { .. } => 7,
            Op::Fork => 8,
            Op::ChildRead { .. } => 9,
            Op::ChildExit => 10,
            Op::Reclaim => 11,
            Op::Idle => 12,
            Op::Remap { .. } => 13,
        }
    }

    /// The range the operation covers (address, bytes), 0 for none.
    pub fn range(&self) -> (u64, u64) {
        match *self {
            Op::Read { addr } | Op::Write { addr, .. } | Op::ChildRead { addr } => (addr, PAGE),
            Op::Fill { addr, pages } => (addr, pages * PAGE),
            Op::Pageout { addr, len }
            | Op::Remove { addr, len }
            | Op::Map { addr, len }
            | Op::Unmap { addr, len } => (addr, len),
            Op::Remap { from, len, .. } => (from, len),
            Op::Fork | Op::ChildExit | Op::Reclaim | Op::Idle => (0, 0),
        }
    }

    /// The operation as the trace records a recorder would write: none, one, or a remap's
    /// two.
    pub fn to_records(&self, time_ns: u64, thread: u32) -> Vec<Record> {
        let (addr, len) = self.range();
        let kind = match *self {
            Op::Read { .. } => RecordKind::FaultRead,
            Op::Write { .. } | Op::Fill { .. } => RecordKind::FaultWrite,
            Op::Pageout { .. } => RecordKind::Evict,
            Op::Remove { .. } => RecordKind::Remove,
            Op::Unmap { .. } => RecordKind::Unmap,
            Op::Fork => RecordKind::Fork,
            Op::Remap { from, to, len } => {
                return crate::trace::remap_records(time_ns, thread, from, to, len).to_vec();
            }
            _ => return Vec::new(),
        };
        vec![Record { time_ns, kind, thread, addr, len }]
    }

    /// The operation trace record `r` replays as; `None` for a remap-from, whose operation
    /// comes with the remap-to after it (`remap_from`, the record before `r`).
    pub fn from_record(r: &Record, remap_from: Option<&Record>) -> Option<Op> {
        let page = |addr: u64| addr & !(PAGE - 1);
        let (addr, len) = (page(r.addr), r.len.div_ceil(PAGE).max(1) * PAGE);
        Some(match r.kind {
            RecordKind::FaultRead => Op::Read { addr },
            RecordKind::FaultWrite => Op::Write { addr, kind: Kind::Heap },
            RecordKind::Evict => Op::Pageout { addr, len },
            RecordKind::Remove => Op::Remove { addr, len },
            RecordKind::Unmap => Op::Unmap { addr, len },
            RecordKind::Fork => Op::Fork,
            RecordKind::RemapFrom => return None,
            RecordKind::RemapTo => {
                let from = remap_from.filter(|f| f.kind == RecordKind::RemapFrom)?;
                Op::Remap { from: page(from.addr), to: addr, len }
            }
        })
    }
}

/// Of a kernel-build thread's accesses to its filled objects, how many per mille are
/// instead a move of the object to fresh address space (mremap: a buffer grown by realloc).
pub const REMAP_PER_MILLE: u64 = 10;

/// A live object of the kernel build.
#[derive(Debug, Clone, Copy)]
struct Object {
    addr: u64,
    pages: u64,
    owner: usize,
    /// The owner's operation index at which it is unmapped.
    dies_at: u64,
    filled: bool,
}

/// The kernel build's shared state: every live object, and the target of live pages.
#[derive(Debug)]
pub struct Kbuild {
    next_addr: u64,
    live_pages: u64,
    target_pages: u64,
    objects: Vec<Object>,
}

/// Object sizes of the kernel-build mix: (order, weight per mille). Small objects dominate
/// by count (4 KiB allocations of many short processes), 64 KiB is the common mTHP size,
/// and enough 512 KiB .. 2 MiB objects fragment what is left.
const KBUILD_ORDERS: [(u32, u64); 10] =
    [(0, 300), (1, 60), (2, 80), (3, 80), (4, 200), (5, 80), (6, 60), (7, 50), (8, 40), (9, 50)];

impl Kbuild {
    /// The state for a run keeping `target_pages` live.
    pub fn new(target_pages: u64) -> Kbuild {
        Kbuild { next_addr: KBUILD_BASE, live_pages: 0, target_pages, objects: Vec::new() }
    }

    /// Pages of live objects now.
    pub fn live_pages(&self) -> u64 {
        self.live_pages
    }

    fn draw_order(rng: &mut SimRng) -> u32 {
        let mut x = rng.below(1000);
        for (order, weight) in KBUILD_ORDERS {
            if x < weight {
                return order;
            }
            x -= weight;
        }
        0
    }

    /// Fresh address space for an object of `pages`, naturally aligned (up to 2 MiB): the
    /// addresses are never reused, so objects never overlap.
    fn place(&mut self, pages: u64) -> u64 {
        let align = (pages * PAGE).min(CHUNK);
        let addr = self.next_addr.div_ceil(align) * align;
        // A guard page between objects, as mmap leaves.
        self.next_addr = addr + (pages + 1) * PAGE;
        addr
    }

    /// A new object of `thread`, mapped in fresh address space.
    fn create(&mut self, thread: usize, now: u64, rng: &mut SimRng) -> Op {
        let order = Self::draw_order(rng);
        let pages = 1u64 << order;
        let addr = self.place(pages);
        // Lifetimes are log-uniform between 32 and 4096 of the owner's operations: most
        // objects die young, a few live through the build, and a thread can keep its share
        // of the target live (it creates at most one object every two operations).
        let dies_at = now + (32.0 * 128f64.powf(rng.unit())) as u64;
        self.objects.push(Object { addr, pages, owner: thread, dies_at, filled: false });
        self.live_pages += pages;
        Op::Map { addr, len: pages * PAGE }
    }

    fn next(&mut self, thread: usize, now: u64, rng: &mut SimRng) -> Op {
        let mine = |o: &Object| o.owner == thread;
        if let Some(i) = self.objects.iter().position(|o| mine(o) && o.dies_at <= now) {
            let dead = self.objects.swap_remove(i);
            self.live_pages -= dead.pages;
            return Op::Unmap { addr: dead.addr, len: dead.pages * PAGE };
        }
        if let Some(o) = self.objects.iter_mut().find(|o| mine(o) && !o.filled) {
            o.filled = true;
            return Op::Fill { addr: o.addr, pages: o.pages };
        }
        if self.live_pages < self.target_pages {
            return self.create(thread, now, rng);
        }
        let own: Vec<usize> = (0..self.objects.len()).filter(|&i| mine(&self.objects[i])).collect();
        if own.is_empty() {
            return if self.live_pages < self.target_pages * 11 / 10 {
                self.create(thread, now, rng)
            } else {
                Op::Idle
            };
        }
        let i = own[rng.below(own.len() as u64) as usize];
        let o = self.objects[i];
        if rng.below(1000) < REMAP_PER_MILLE {
            let to = self.place(o.pages);
            self.objects[i].addr = to;
            return Op::Remap { from: o.addr, to, len: o.pages * PAGE };
        }
        let addr = o.addr + rng.below(o.pages) * PAGE;
        if rng.percent(70) {
            Op::Read { addr }
        } else {
            Op::Write { addr, kind: Kind::Heap }
        }
    }

    /// Every live object's range, for the final read-back.
    pub fn live_ranges(&self) -> Vec<(u64, u64)> {
        self.objects.iter().map(|o| (o.addr, o.pages * PAGE)).collect()
    }
}

/// What one program thread does next (see the module documentation).
#[derive(Debug)]
pub struct Generator {
    kind: WorkloadKind,
    thread: usize,
    seed: u64,
    rng: SimRng,
    heap_pages: u64,
    cursor: u64,
    zipf: Option<Zipf>,
    prime: u64,
    phase_len: u64,
    child_reads_left: u64,
    kbuild: Option<Arc<Mutex<Kbuild>>>,
    replay: VecDeque<Op>,
}

impl Generator {
    /// Thread `thread`'s generator in the run described by `o`. `kbuild` is the shared
    /// object table of a kernel build; `replay` the thread's share of a trace.
    pub fn new(
        o: &SimOptions,
        thread: usize,
        kbuild: Option<Arc<Mutex<Kbuild>>>,
        replay: VecDeque<Op>,
    ) -> Generator {
        let heap_pages = o.region_pages;
        Generator {
            kind: o.workload,
            thread,
            seed: o.seed,
            rng: SimRng::stream_n(o.seed, "thread", thread as u64),
            heap_pages,
            cursor: thread as u64 * heap_pages / o.threads as u64,
            zipf: (o.workload == WorkloadKind::Zipf)
                .then(|| Zipf::new(heap_pages, o.mix.zipf_theta)),
            prime: coprime_prime(heap_pages),
            phase_len: (o.ops_per_thread / 8).max(50),
            child_reads_left: 0,
            kbuild,
            replay,
        }
    }

    /// The next operation (the thread's `now`th), or `None` when a replayed trace ends.
    pub fn next(&mut self, now: u64, o: &SimOptions, world: &World) -> Option<Op> {
        match self.kind {
            WorkloadKind::Replay => self.replay.pop_front(),
            WorkloadKind::Kbuild => {
                let kbuild = self.kbuild.as_ref().expect("a kernel build has its object table");
                Some(kbuild.lock().next(self.thread, now, &mut self.rng))
            }
            _ => Some(self.heap_op(now, o, world)),
        }
    }

    fn heap_op(&mut self, now: u64, o: &SimOptions, world: &World) -> Op {
        let m = &o.mix;
        if self.child_reads_left > 0 && self.rng.percent(30) {
            self.child_reads_left -= 1;
            if self.child_reads_left == 0 {
                return Op::ChildExit;
            }
            return Op::ChildRead { addr: heap_addr(self.rng.below(self.heap_pages)) };
        }
        let folio_pages = 1u64 << o.folio_order;
        let x = self.rng.below(1_000_000) as u32;
        if x < m.pageout_ppm {
            let first = self.next_page(now) & !(folio_pages - 1);
            let pages = (folio_pages * self.rng.range(1, 4)).min(self.heap_pages - first);
            return Op::Pageout { addr: heap_addr(first), len: pages * PAGE };
        }
        if x < m.pageout_ppm + m.remove_ppm {
            let first = self.next_page(now);
            let pages = self.rng.range(1, 32).min(self.heap_pages - first);
            return Op::Remove { addr: heap_addr(first), len: pages * PAGE };
        }
        if x < m.pageout_ppm + m.remove_ppm + m.fork_ppm && self.child_reads_left == 0 {
            self.child_reads_left = self.rng.range(8, 64);
            return Op::Fork;
        }
        let addr = heap_addr(self.next_page(now));
        if self.rng.percent(m.read_percent) {
            return Op::Read { addr };
        }
        let kind = if world.fires(Site::Incompressible) {
            Kind::Random
        } else if self.rng.percent(m.zero_write_percent) {
            Kind::Zero
        } else {
            Kind::Heap
        };
        Op::Write { addr, kind }
    }

    /// The next heap page the pattern touches.
    fn next_page(&mut self, now: u64) -> u64 {
        let n = self.heap_pages;
        match self.kind {
            WorkloadKind::Sequential => {
                let page = self.cursor;
                self.cursor = (self.cursor + 1) % n;
                page
            }
            WorkloadKind::Zipf => {
                let rank = self.zipf.as_ref().map_or(1, |z| z.sample(self.rng.splitmix())) - 1;
                scatter(rank, self.prime, n)
            }
            WorkloadKind::Phases => {
                let window = (n / 8).max(1);
                let phase = now / self.phase_len;
                let start = workload::rng::hash3(self.seed, phase, 0x9a5e) % (n - window + 1);
                if self.rng.percent(90) {
                    start + self.rng.below(window)
                } else {
                    self.rng.below(n)
                }
            }
            _ => self.rng.below(n),
        }
    }
}

/// The address of heap page `page`.
fn heap_addr(page: u64) -> u64 {
    HEAP_BASE + page * PAGE
}

/// Splits a trace's records into per-thread operation queues (`threads` simulated threads;
/// recorded thread `t` becomes simulated thread `t % threads`).
pub fn replay_queues(records: &[Record], threads: usize) -> Vec<VecDeque<Op>> {
    let mut queues = vec![VecDeque::new(); threads];
    for (i, r) in records.iter().enumerate() {
        let before = i.checked_sub(1).map(|j| &records[j]);
        if let Some(op) = Op::from_record(r, before) {
            queues[r.thread as usize % threads].push_back(op);
        }
    }
    queues
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::Overrides;

    #[test]
    fn kbuild_keeps_live_pages_near_the_target() {
        let mut k = Kbuild::new(20_000);
        let mut rng = SimRng::stream(1, "k");
        let (mut peak, mut sum, mut samples) = (0, 0, 0);
        for now in 0..30_000 {
            let _ = k.next((now % 3) as usize, now / 3, &mut rng);
            if now >= 15_000 {
                (sum, samples) = (sum + k.live_pages(), samples + 1);
            }
            peak = peak.max(k.live_pages());
        }
        let mean = sum / samples;
        assert!((14_000..22_000).contains(&mean), "mean live {mean}");
        assert!(peak < 20_000 + 2 * 512, "peak {peak}: at most one new object per thread over");
        for w in k.live_ranges().windows(2) {
            assert_ne!(w[0].0, w[1].0);
        }
    }

    #[test]
    fn heap_ops_stay_in_the_heap() {
        for workload in [WorkloadKind::Sequential, WorkloadKind::Zipf, WorkloadKind::Phases] {
            let pinned = Overrides { workload: Some(workload), ..Overrides::default() };
            let o = SimOptions::draw(3, &pinned).unwrap();
            let world = World::new(3, o.faults.clone(), o.latency);
            let mut g = Generator::new(&o, 1, None, VecDeque::new());
            for now in 0..2000 {
                let op = g.next(now, &o, &world).unwrap();
                let (addr, len) = op.range();
                if len > 0 {
                    assert!(addr >= HEAP_BASE && addr + len <= HEAP_BASE + o.region_pages * PAGE);
                }
            }
        }
    }

    #[test]
    fn records_and_ops_convert_both_ways() {
        let ops = [
            Op::Read { addr: 0x1000 },
            Op::Write { addr: 0x2000, kind: Kind::Heap },
            Op::Pageout { addr: 0x3000, len: 0x2000 },
            Op::Remove { addr: 0x4000, len: 0x1000 },
            Op::Unmap { addr: 0x5000, len: 0x3000 },
            Op::Fork,
            Op::Remap { from: 0x6000, to: 0x9_0000, len: 0x2000 },
        ];
        for op in ops {
            let records = op.to_records(5, 2);
            let last = records.len() - 1;
            assert_eq!(
                Op::from_record(&records[last], last.checked_sub(1).map(|i| &records[i])),
                Some(op)
            );
            assert_eq!(replay_queues(&records, 1)[0], [op]);
        }
        assert!(Op::Idle.to_records(0, 0).is_empty());
        let queues = replay_queues(&ops[0].to_records(0, 3), 2);
        assert_eq!((queues[0].len(), queues[1].len()), (0, 1));
        // A remap-to alone (no remap-from before it) replays as nothing.
        let pair = Op::Remap { from: 0x6000, to: 0x9_0000, len: 0x1000 }.to_records(0, 0);
        assert_eq!(Op::from_record(&pair[1], None), None);
        assert_eq!(Op::from_record(&pair[1], Some(&pair[1])), None);
    }
}
