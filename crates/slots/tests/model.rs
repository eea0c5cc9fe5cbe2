//! Model test: random slot operations against a naive per-slot map, compared after every
//! operation: results and errors, swap counts and cache pins, the slots the free hook
//! reported, every cluster's count and flag, the free list's contents, and
//! `check_invariants()`.

use backend::MemoryBackend;
use parking_lot::Mutex;
use proptest::prelude::*;
use slots::{
    AllocPolicy, ClusterFlag, Error, ListId, SlotFreeHook, SwapDevice, SwapDeviceOptions,
    SwapEntry, SwapType, SWAPFILE_CLUSTER,
};
use std::collections::BTreeSet;
use std::sync::Arc;

const CLUSTERS: u64 = 4;
const SLOTS: u64 = CLUSTERS * SWAPFILE_CLUSTER as u64;

#[derive(Default)]
struct Recorder {
    freed: Mutex<Vec<(u64, u32)>>,
}

impl SlotFreeHook for Recorder {
    fn slots_freed(&self, first: SwapEntry, nr: u32) {
        self.freed.lock().push((first.offset(), nr));
    }
}

#[derive(Clone, Copy, Default, Debug, PartialEq)]
struct Slot {
    count: u32,
    cache: bool,
}

impl Slot {
    fn is_free(self) -> bool {
        self.count == 0 && !self.cache
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Alloc(u32),
    Dup { pick: usize, from: u16, len: u16, times: u16 },
    Put { pick: usize, from: u16, len: u16 },
    PutCache { pick: usize, from: u16, len: u16 },
    Pin { pick: usize, at: u16 },
    DupAnywhere(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let range = (any::<usize>(), any::<u16>(), 1u16..=64);
    prop_oneof![
        3 => (0u32..=9).prop_map(Op::Alloc),
        3 => (range.clone(), prop_oneof![9 => Just(1u16), 1 => 60u16..140])
            .prop_map(|((pick, from, len), times)| Op::Dup { pick, from, len, times }),
        3 => range.clone().prop_map(|(pick, from, len)| Op::Put { pick, from, len }),
        3 => range.prop_map(|(pick, from, len)| Op::PutCache { pick, from, len }),
        1 => (any::<usize>(), any::<u16>()).prop_map(|(pick, at)| Op::Pin { pick, at }),
        1 => (0..SLOTS).prop_map(Op::DupAnywhere),
    ]
}

struct Harness {
    si: SwapDevice,
    hook: Arc<Recorder>,
    model: Vec<Slot>,
    /// Folios handed out: (first slot, slots). Kept after freeing too: ops on free slots
    /// must fail the same way in both.
    folios: Vec<(u64, u64)>,
}

fn entry(offset: u64) -> SwapEntry {
    SwapEntry::new(SwapType::new(0).unwrap(), offset)
}

/// The model's answer for a slot operation over `first .. first + nr`, checked slot by
/// slot in the device's order (bad, free, then the operation's own condition).
fn expect(
    model: &[Slot],
    first: u64,
    nr: u64,
    check: impl Fn(Slot) -> Option<&'static str>,
) -> Result<(), String> {
    for offset in first..first + nr {
        let slot = model[offset as usize];
        if offset == 0 {
            return Err("BadSlot".into());
        }
        if slot.is_free() {
            return Err("SlotFree".into());
        }
        if let Some(e) = check(slot) {
            return Err(e.into());
        }
    }
    Ok(())
}

fn name(result: &Result<(), Error>) -> Result<(), String> {
    result.as_ref().map(|_| ()).map_err(|e| {
        let debug = format!("{e:?}");
        debug.split([' ', '{', '(']).next().unwrap_or("").to_string()
    })
}

impl Harness {
    fn new(policy: AllocPolicy, discard: bool) -> Self {
        let hook = Arc::new(Recorder::default());
        let hook_dyn: Arc<dyn SlotFreeHook> = hook.clone();
        let backend = Arc::new(MemoryBackend::new(SLOTS));
        let options = SwapDeviceOptions { policy, discard };
        let si =
            SwapDevice::new(SwapType::new(0).unwrap(), backend, options, Some(hook_dyn)).unwrap();
        Harness { si, hook, model: vec![Slot::default(); SLOTS as usize], folios: Vec::new() }
    }

    /// A sub-range of a picked folio.
    fn range(&self, pick: usize, from: u16, len: u16) -> Option<(u64, u64)> {
        if self.folios.is_empty() {
            return None;
        }
        let (first, nr) = self.folios[pick % self.folios.len()];
        let from = u64::from(from) % nr;
        let len = u64::from(len).min(nr - from);
        Some((first + from, len))
    }

    fn run(&mut self, op: Op) {
        let before = self.model.clone();
        match op {
            Op::Alloc(order) => self.alloc(order),
            Op::Dup { pick, from, len, times } => {
                let Some((first, nr)) = self.range(pick, from, len) else { return };
                for _ in 0..times {
                    let want = expect(&self.model, first, nr, |_| None);
                    assert_eq!(name(&self.si.dup(entry(first), nr as u32)), want, "{op:?}");
                    if want.is_err() {
                        break;
                    }
                    (first..first + nr).for_each(|o| self.model[o as usize].count += 1);
                }
            }
            Op::Put { pick, from, len } => {
                let Some((first, nr)) = self.range(pick, from, len) else { return };
                let want =
                    expect(&self.model, first, nr, |s| (s.count == 0).then_some("CountUnderflow"));
                assert_eq!(name(&self.si.put(entry(first), nr as u32)), want, "{op:?}");
                if want.is_ok() {
                    (first..first + nr).for_each(|o| self.model[o as usize].count -= 1);
                }
            }
            Op::PutCache { pick, from, len } => {
                let Some((first, nr)) = self.range(pick, from, len) else { return };
                let want = expect(&self.model, first, nr, |s| (!s.cache).then_some("NotCached"));
                assert_eq!(name(&self.si.put_cache(entry(first), nr as u32)), want, "{op:?}");
                if want.is_ok() {
                    (first..first + nr).for_each(|o| self.model[o as usize].cache = false);
                }
            }
            Op::Pin { pick, at } => {
                let Some((first, _)) = self.range(pick, at, 1) else { return };
                let want = expect(&self.model, first, 1, |s| s.cache.then_some("CacheBusy"));
                assert_eq!(name(&self.si.try_pin_cache(entry(first))), want, "{op:?}");
                if want.is_ok() {
                    self.model[first as usize].cache = true;
                }
            }
            Op::DupAnywhere(offset) => {
                let want = expect(&self.model, offset, 1, |_| None);
                assert_eq!(name(&self.si.dup(entry(offset), 1)), want, "{op:?}");
                if want.is_ok() {
                    self.model[offset as usize].count += 1;
                }
            }
        }
        self.compare(&before);
    }

    fn alloc(&mut self, order: u32) {
        let nr = 1u64 << order;
        match self.si.alloc(order) {
            Ok(e) => {
                let first = e.offset();
                assert_eq!(first % nr, 0, "order {order} misaligned");
                assert_eq!(first / 512, (first + nr - 1) / 512, "crosses a cluster");
                for offset in first..first + nr {
                    let slot = &mut self.model[offset as usize];
                    assert!(offset != 0 && slot.is_free(), "allocated a used slot {offset}");
                    slot.cache = true;
                }
                self.folios.push((first, nr));
            }
            Err(Error::NoSpace { .. }) => {
                if order == 0 {
                    let free = (1..SLOTS).any(|o| self.model[o as usize].is_free());
                    assert!(!free, "order 0 failed with free slots");
                }
                if order == 9 {
                    let free_cluster = (1..CLUSTERS).any(|c| self.cluster_used(c as u32) == 0);
                    assert!(!free_cluster, "order 9 failed with a free cluster");
                }
            }
            Err(e) => panic!("alloc({order}): {e}"),
        }
    }

    fn cluster_used(&self, idx: u32) -> u16 {
        let start = idx as usize * SWAPFILE_CLUSTER;
        let used = self.model[start..start + SWAPFILE_CLUSTER].iter().filter(|s| !s.is_free());
        (used.count() + usize::from(idx == 0)) as u16 // the header is in use
    }

    fn compare(&mut self, before: &[Slot]) {
        self.si.check_invariants();
        // Slots freed by this op, exactly, as the hook reported them.
        let newly_free: BTreeSet<u64> = (1..SLOTS)
            .filter(|&o| self.model[o as usize].is_free() && !before[o as usize].is_free())
            .collect();
        let mut reported = BTreeSet::new();
        for (first, nr) in self.hook.freed.lock().drain(..) {
            for o in first..first + u64::from(nr) {
                assert!(reported.insert(o), "slot {o} reported freed twice");
            }
        }
        assert_eq!(reported, newly_free, "free hook vs model");
        for offset in 1..SLOTS {
            let slot = self.model[offset as usize];
            let e = entry(offset);
            assert_eq!(self.si.count(e).unwrap(), slot.count, "count of slot {offset}");
            assert_eq!(self.si.is_cache_pinned(e).unwrap(), slot.cache, "pin of {offset}");
        }
        let used: u64 = (1..SLOTS).filter(|&o| !self.model[o as usize].is_free()).count() as u64;
        assert_eq!(self.si.inuse_pages(), used);
        let mut free_clusters = Vec::new();
        for idx in 0..CLUSTERS as u32 {
            let state = self.si.cluster_state(idx);
            let used = self.cluster_used(idx);
            assert_eq!(state.count, used, "cluster {idx} count");
            let want = match used {
                0 => ClusterFlag::Free,
                512 => ClusterFlag::Full,
                _ => state.flag, // nonfull or frag: which one is the policy's business
            };
            assert_eq!(state.flag, want, "cluster {idx} flag");
            if used > 0 && used < 512 {
                assert!(matches!(state.flag, ClusterFlag::Nonfull | ClusterFlag::Frag));
            }
            if used == 0 {
                free_clusters.push(idx);
            }
        }
        let mut on_free = self.si.list_members(ListId::Free);
        on_free.sort_unstable();
        assert_eq!(on_free, free_clusters, "free list contents");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn device_matches_the_model(
        legacy in any::<bool>(),
        discard in any::<bool>(),
        ops in prop::collection::vec(op(), 1..300),
    ) {
        let policy = if legacy { AllocPolicy::Legacy } else { AllocPolicy::Current };
        let mut harness = Harness::new(policy, discard);
        for op in ops {
            harness.run(op);
        }
    }
}
