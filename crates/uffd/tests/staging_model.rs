//! Model test of `Staging`: random operations against a naive model (one state per slot),
//! compared after every operation, both with the structure's own bitmaps and with the
//! kernel's view of which slots hold a page (PAGEMAP_SCAN PRESENT).

mod common;

use common::uffd_or_skip;
use proptest::prelude::*;
use uffd::{
    Advice, Categories, Features, Mapping, MoveMode, PageMap, RegisterMode, ScanArgs, SlotIndex,
    SlotRun, Staging, Uffd, PAGE_SIZE,
};

const SLOTS: usize = 70; // more than one bitmap word, not a multiple of 64

#[derive(Debug, Clone)]
enum Op {
    AllocEmpty(usize),
    AllocPage,
    Store(usize),
    Free(usize),
    MoveOut(usize),
    MoveIn(usize),
    Trim,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1usize..20).prop_map(Op::AllocEmpty),
        3 => Just(Op::AllocPage),
        2 => any::<usize>().prop_map(Op::Store),
        3 => any::<usize>().prop_map(Op::Free),
        2 => any::<usize>().prop_map(Op::MoveOut),
        2 => any::<usize>().prop_map(Op::MoveIn),
        1 => Just(Op::Trim),
    ]
}

/// The naive model: per slot, handed out? holding a page? Plus the runs handed out.
#[derive(Debug, Default)]
struct Model {
    allocated: Vec<bool>,
    present: Vec<bool>,
    runs: Vec<SlotRun>,
}

impl Model {
    fn free_run_exists(&self, pages: usize, present: bool) -> bool {
        (0..=SLOTS.saturating_sub(pages))
            .any(|s| (s..s + pages).all(|i| !self.allocated[i] && self.present[i] == present))
    }
}

struct World {
    uffd: Uffd,
    staging: Staging,
    source: Mapping,
    sink: Mapping,
    pagemap: PageMap,
    model: Model,
}

impl World {
    fn new(uffd: Uffd) -> World {
        let staging = Staging::new(&uffd, SLOTS).unwrap();
        let source = Mapping::anonymous(PAGE_SIZE).unwrap();
        let sink = Mapping::anonymous(PAGE_SIZE).unwrap();
        uffd.register(sink.range(), RegisterMode::MISSING).unwrap();
        let model =
            Model { allocated: vec![false; SLOTS], present: vec![false; SLOTS], runs: vec![] };
        World { uffd, staging, source, sink, pagemap: PageMap::open_self().unwrap(), model }
    }

    fn apply(&mut self, op: &Op) {
        let m = &mut self.model;
        match *op {
            Op::AllocEmpty(pages) => match self.staging.alloc_empty(pages) {
                Some(run) => {
                    for i in run_slots(run) {
                        assert!(!m.allocated[i] && !m.present[i], "{run:?} slot {i}");
                        m.allocated[i] = true;
                    }
                    m.runs.push(run);
                }
                None => assert!(!m.free_run_exists(pages, false), "a run of {pages} existed"),
            },
            Op::AllocPage => match self.staging.alloc_page() {
                Some(slot) => {
                    let i = slot.0 as usize;
                    assert!(!m.allocated[i]);
                    assert!(m.present[i] || !m.free_run_exists(1, true), "recycled pages first");
                    m.allocated[i] = true;
                    m.runs.push(SlotRun { first: slot, pages: 1 });
                }
                None => assert!(m.allocated.iter().all(|a| *a), "a free slot existed"),
            },
            Op::Store(pick) => {
                let Some(run) = pick_run(m, pick, |_| true) else { return };
                self.staging.store(run.first, &vec![7u8; PAGE_SIZE]);
                m.present[run.first.0 as usize] = true;
            }
            Op::Free(pick) => {
                let Some(run) = pick_run(m, pick, |_| true) else { return };
                m.runs.retain(|r| *r != run);
                run_slots(run).for_each(|i| m.allocated[i] = false);
                self.staging.free(run);
            }
            Op::MoveOut(pick) => {
                let Some(run) = pick_run(m, pick, |r| r.pages == 1) else { return };
                if m.present[run.first.0 as usize] {
                    return;
                }
                self.source.store_u64(0, u64::from(run.first.0) + 1);
                let moved = self.staging.move_out(&self.uffd, &self.source, 0, run, MoveMode::NONE);
                assert_eq!(moved.unwrap(), PAGE_SIZE);
                m.present[run.first.0 as usize] = true;
                assert_eq!(self.staging.load_u64(run.first, 0), u64::from(run.first.0) + 1);
            }
            Op::MoveIn(pick) => {
                let Some(run) = pick_run(m, pick, |r| r.pages == 1) else { return };
                if !m.present[run.first.0 as usize] {
                    return;
                }
                let moved = self.staging.move_in(&self.uffd, run, self.sink.addr(), MoveMode::NONE);
                assert_eq!(moved.unwrap(), PAGE_SIZE);
                m.present[run.first.0 as usize] = false;
                self.sink.advise(0, PAGE_SIZE, Advice::DontNeed).unwrap(); // a hole again
            }
            Op::Trim => {
                let expected = (0..SLOTS).filter(|&i| !m.allocated[i] && m.present[i]).count();
                assert_eq!(self.staging.trim().unwrap(), expected);
                (0..SLOTS).filter(|&i| !m.allocated[i]).for_each(|i| m.present[i] = false);
            }
        }
    }

    fn check(&self) {
        self.staging.check_invariants();
        for i in 0..SLOTS {
            assert_eq!(
                self.staging.is_present(SlotIndex(i as u32)),
                self.model.present[i],
                "slot {i}"
            );
        }
        let args = ScanArgs {
            mask: Categories::PRESENT,
            report: Categories::PRESENT,
            ..ScanArgs::default()
        };
        let runs = self.pagemap.scan_all(self.staging.range(), &args).unwrap();
        let base = self.staging.range().start();
        let mut kernel = vec![false; SLOTS];
        for r in runs {
            (r.start..r.end).step_by(PAGE_SIZE).for_each(|a| kernel[(a - base) / PAGE_SIZE] = true);
        }
        assert_eq!(kernel, self.model.present, "the kernel's present pages equal the model's");
    }
}

fn run_slots(run: SlotRun) -> std::ops::Range<usize> {
    run.first.0 as usize..run.first.0 as usize + run.pages as usize
}

fn pick_run(m: &Model, pick: usize, ok: impl Fn(&SlotRun) -> bool) -> Option<SlotRun> {
    let candidates: Vec<SlotRun> = m.runs.iter().copied().filter(|r| ok(r)).collect();
    (!candidates.is_empty()).then(|| candidates[pick % candidates.len()])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn staging_matches_its_model_and_the_kernel(ops in prop::collection::vec(op(), 1..120)) {
        let Some(uffd) = uffd_or_skip(Features::MOVE) else { return Ok(()) };
        let mut world = World::new(uffd);
        for op in &ops {
            world.apply(op);
            world.check();
        }
    }
}

/// A move that took a page past the progress it reported (seen on 6.18, a batched MOVE
/// racing a copy-on-write break: `Staging::sync_present`) leaves the bitmap short of the
/// truth; `sync_present` reads the truth back from the kernel, so an undo moves the page
/// home instead of stranding it in staging.
#[test]
fn sync_present_finds_a_page_a_move_did_not_count() {
    let Some(uffd) = uffd_or_skip(Features::MOVE) else { return };
    let mut world = World::new(uffd);
    let run = world.staging.alloc_empty(4).unwrap();
    let third = SlotIndex(run.first.0 + 2);
    // Into the third slot behind staging's back: the kernel's view changes, the bitmap not.
    world.source.store_u64(0, 0xfeed);
    let moved = world.uffd.move_from(
        world.staging.addr(third),
        &world.source,
        0,
        PAGE_SIZE,
        MoveMode::NONE,
    );
    assert_eq!(moved.unwrap(), PAGE_SIZE);
    assert!(!world.staging.is_present(third), "the bitmap did not see it");
    assert_eq!(world.staging.sync_present(run).unwrap(), 1);
    for i in 0..4 {
        let s = SlotIndex(run.first.0 + i);
        assert_eq!(world.staging.is_present(s), s == third, "slot {s:?}");
    }
    assert_eq!(world.staging.load_u64(third, 0), 0xfeed);
    // Home again through staging's own path, which the bitmap now allows.
    let one = SlotRun { first: third, pages: 1 };
    let back = world.staging.move_in(&world.uffd, one, world.sink.addr(), MoveMode::NONE);
    assert_eq!(back.unwrap(), PAGE_SIZE);
    assert_eq!(world.sink.load_u64(0), 0xfeed);
    world.staging.free(run);
    world.staging.check_invariants();
}
