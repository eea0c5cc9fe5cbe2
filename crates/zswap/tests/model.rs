//! Model test: the pool against a naive model (a HashMap of slot → page for the pool, a
//! list for the LRU with its referenced bits, the device's copies), under random store /
//! load / invalidate / writeback / compaction, with injected compressor, allocation and
//! device-write failures and corrupted objects. After every operation: the pool's
//! `check_invariants()`, its LRU order and bits against the model's, its counts, and for a
//! load the bytes against the last page stored.

mod common;

use common::{page, slot, Device, Page};
use proptest::prelude::*;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use zswap::compress::{
    Compressor, CompressorConfig, CompressorKind, COMPRESS_OUT_BYTES, PAGE_SIZE,
};
use zswap::corpus::PageKind;
use zswap::{FaultHooks, Reject, Zswap, ZswapConfig};

#[derive(Debug, Clone)]
enum Op {
    Store { slot: usize, kind: usize, seed: u64 },
    Load { slot: usize },
    Invalidate { slot: usize },
    Writeback { max: u64 },
    Compact,
    FailNextCompress,
    FailNextAlloc,
    FailWrites(bool),
    Corrupt { slot: usize },
}

fn op(slots: usize, random_weight: u32) -> impl Strategy<Value = Op> {
    let kind = prop_oneof![
        random_weight => Just(4usize), // PageKind::Random
        10 => 0usize..6,
    ];
    prop_oneof![
        12 => (0..slots, kind, any::<u64>())
            .prop_map(|(slot, kind, seed)| Op::Store { slot, kind, seed }),
        6 => (0..slots).prop_map(|slot| Op::Load { slot }),
        3 => (0..slots).prop_map(|slot| Op::Invalidate { slot }),
        3 => (0u64..6).prop_map(|max| Op::Writeback { max }),
        1 => Just(Op::Compact),
        1 => Just(Op::FailNextCompress),
        1 => Just(Op::FailNextAlloc),
        1 => any::<bool>().prop_map(Op::FailWrites),
        1 => (0..slots).prop_map(|slot| Op::Corrupt { slot }),
    ]
}

/// Spread the model's slot numbers over several trees of a 64 Ki-slot device.
fn offset(slot: usize) -> u64 {
    1 + (slot as u64 * 163) % 65535
}

#[derive(Default)]
struct Model {
    /// What the pool holds.
    pool: HashMap<u64, Box<Page>>,
    /// Entries stored raw (no checksum: corruption of them is not detectable).
    raw: HashSet<u64>,
    /// Entries whose object was corrupted.
    corrupted: HashSet<u64>,
    /// Newest first, with referenced bits.
    lru: VecDeque<(u64, bool)>,
    /// The last page stored per allocated slot.
    last: HashMap<u64, Box<Page>>,
    reached_full: bool,
    fail_writes: bool,
}

impl Model {
    fn drop_entry(&mut self, offset: u64) {
        self.pool.remove(&offset);
        self.raw.remove(&offset);
        self.corrupted.remove(&offset);
        self.lru.retain(|(o, _)| *o != offset);
    }
}

struct Harness {
    zswap: Arc<Zswap>,
    /// The pool's compressor, on its own: tells the model which pages store raw.
    compressor: Compressor,
    device: Arc<Device>,
    fail_compress: Arc<AtomicBool>,
    fail_alloc: Arc<AtomicBool>,
    model: Model,
}

impl Harness {
    fn new(budget_bytes: u64) -> Self {
        let fail_compress = Arc::new(AtomicBool::new(false));
        let fail_alloc = Arc::new(AtomicBool::new(false));
        let (c, a) = (Arc::clone(&fail_compress), Arc::clone(&fail_alloc));
        let faults = FaultHooks {
            compress_fail: Some(Arc::new(move |_| c.swap(false, Relaxed))),
            alloc_fail: Some(Arc::new(move |_| a.load(Relaxed))),
        };
        let compressor =
            CompressorConfig { checksum: true, ..CompressorConfig::new(CompressorKind::Lz4) };
        let config = ZswapConfig::new(compressor.clone(), budget_bytes);
        let zswap = Arc::new(Zswap::with_faults(config, 1 << 16, faults).expect("setup"));
        // The pool's threshold: a page compressed to the huge class or more stores raw.
        let threshold_bytes = zswap.zpool().huge_class_size();
        let alone = Compressor::with_config(CompressorConfig { threshold_bytes, ..compressor })
            .expect("compressor");
        let model = Model::default();
        let (device, compressor) = (Device::new(), alone);
        Harness { zswap, compressor, device, fail_compress, fail_alloc, model }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Store { slot, kind, seed } => self.store(offset(slot), kind, seed),
            Op::Load { slot } => self.load(offset(slot)),
            Op::Invalidate { slot } => self.invalidate(offset(slot)),
            Op::Writeback { max } => self.writeback(max),
            Op::Compact => {
                self.zswap.compact();
            }
            Op::FailNextCompress => self.fail_compress.store(true, Relaxed),
            Op::FailNextAlloc => self.fail_alloc.store(true, Relaxed),
            Op::FailWrites(fail) => {
                self.device.fail_writes.store(fail, Relaxed);
                self.model.fail_writes = fail;
            }
            Op::Corrupt { slot } => self.corrupt(offset(slot)),
        }
        self.compare();
    }

    /// The hysteresis the store path applies, on the total the pool reports now.
    fn predict_full(&mut self) -> bool {
        let limits = self.zswap.limits();
        let total = self.zswap.total_bytes();
        if total >= limits.max_pool_bytes {
            self.model.reached_full = true;
        } else if self.model.reached_full && total <= limits.accept_bytes {
            self.model.reached_full = false;
        }
        self.model.reached_full
    }

    fn store(&mut self, offset: u64, kind: usize, seed: u64) {
        let data = page(PageKind::ALL[kind], seed);
        if !self.model.last.contains_key(&offset) {
            self.device.alloc(slot(offset));
        }
        let full = self.predict_full();
        let compress_fault = self.fail_compress.load(Relaxed);
        let result = self.device.swap_out(&self.zswap, slot(offset), &data);
        let alloc_fault = self.fail_alloc.swap(false, Relaxed);
        self.fail_compress.store(false, Relaxed);
        self.model.drop_entry(offset);
        match result {
            Ok(()) => {
                assert!(!full, "stored while the pool was full");
                self.model.pool.insert(offset, data.clone());
                if compress_fault || self.compresses_poorly(&data) {
                    self.model.raw.insert(offset);
                }
                self.model.lru.push_front((offset, true));
            }
            Err(Reject::PoolLimit) => assert!(full, "refused for the limit while not full"),
            Err(Reject::AllocFail) => assert!(alloc_fault, "allocation failed with no fault"),
            Err(other) => panic!("unexpected rejection {other:?}"),
        }
        self.model.last.insert(offset, data);
    }

    /// Whether the pool stores `data` raw: its compressor finds it incompressible (any
    /// page kind can be: random pages always, a small-integer page by chance).
    // postmortem: the model assumed only random pages store raw; a small-integer page that
    // lz4 could not shrink below the threshold failed the stored-raw count.
    fn compresses_poorly(&self, data: &Page) -> bool {
        let mut out = vec![0u8; COMPRESS_OUT_BYTES];
        matches!(self.compressor.compress(data, &mut out), Err(zswap::Error::Incompressible { .. }))
    }

    fn load(&mut self, offset: u64) {
        let Some(last) = self.model.last.get(&offset) else {
            return; // A free slot is never swapped in.
        };
        let result = self.device.swap_in(&self.zswap, slot(offset));
        if self.model.pool.contains_key(&offset) {
            if let Some(entry) = self.model.lru.iter_mut().find(|(o, _)| *o == offset) {
                entry.1 = true;
            }
        }
        if self.model.corrupted.contains(&offset) {
            assert!(result.is_err(), "corrupt object at {offset} loaded without error");
        } else {
            let loaded = result.expect("load");
            assert!(*loaded == **last, "slot {offset}: loaded bytes differ from the last store");
        }
    }

    fn invalidate(&mut self, offset: u64) {
        if self.model.last.remove(&offset).is_some() {
            self.device.free(&self.zswap, slot(offset));
        }
        self.model.drop_entry(offset);
    }

    fn writeback(&mut self, max: u64) {
        let written = self.zswap.writeback(self.device.as_ref(), max);
        let model = &mut self.model;
        let (mut expected, mut scanned) = (0, 0);
        while expected < max && scanned < 2 * max {
            scanned += 1;
            let Some((offset, referenced)) = model.lru.pop_back() else { break };
            model.lru.push_front((offset, false));
            if referenced || model.corrupted.contains(&offset) || model.fail_writes {
                continue;
            }
            model.lru.pop_front();
            model.pool.remove(&offset);
            model.raw.remove(&offset);
            expected += 1;
            let on_device = self.device.data(slot(offset)).expect("written back");
            assert!(*on_device == *model.last[&offset], "slot {offset}: wrong bytes written back");
        }
        assert_eq!(written, expected, "pages written back");
    }

    fn corrupt(&mut self, offset: u64) {
        if !self.model.pool.contains_key(&offset) || self.model.raw.contains(&offset) {
            return;
        }
        // A byte of the stream and a byte of the stored checksum: whatever the stream then
        // decodes to, the checksum cannot match it (but by a 2^-32 chance), so the model
        // knows the load must fail. Adding (not xor) so that a second corruption of the
        // same object never undoes the first.
        let hit = self.zswap.corrupt_object(slot(offset), |object| {
            let (middle, last) = (object.len() / 2, object.len() - 1);
            object[middle] = object[middle].wrapping_add(1);
            object[last] = object[last].wrapping_add(1);
        });
        assert!(hit);
        self.model.corrupted.insert(offset);
    }

    fn compare(&self) {
        self.zswap.check_invariants();
        let order: Vec<(u64, bool)> =
            self.zswap.lru_order().into_iter().map(|(e, r)| (e.offset(), r)).collect();
        let model: Vec<(u64, bool)> = self.model.lru.iter().copied().collect();
        assert_eq!(order, model, "LRU order and referenced bits");
        let stats = self.zswap.stats();
        assert_eq!(stats.stored_pages, self.model.pool.len() as u64);
        assert_eq!(stats.stored_incompressible_pages, self.model.raw.len() as u64);
        for &offset in self.model.last.keys() {
            assert_eq!(self.zswap.contains(slot(offset)), self.model.pool.contains_key(&offset));
        }
        assert_eq!(self.device.pins_held(), 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Few slots, every operation: the LRU, writeback and failures in detail.
    #[test]
    fn pool_matches_the_model(ops in prop::collection::vec(op(24, 2), 1..160)) {
        let mut harness = Harness::new(64 << 20);
        for op in &ops {
            harness.apply(op);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Many slots, mostly incompressible pages, a small pool (1 MiB): the limit and
    /// its hysteresis, predicted from the total the pool reports.
    #[test]
    fn full_pool_matches_the_model(ops in prop::collection::vec(op(400, 30), 300..800)) {
        let mut harness = Harness::new(5 << 20);
        for op in &ops {
            harness.apply(op);
        }
    }
}

#[test]
fn the_full_pool_model_reaches_the_limit() {
    // The second model test is only worth its time if its pool fills: check it does on a
    // plain run of stores of random pages.
    let mut harness = Harness::new(5 << 20);
    for i in 0..400 {
        harness.apply(&Op::Store { slot: i, kind: 4, seed: i as u64 });
    }
    assert!(harness.zswap.stats().pool_limit_hit > 0);
    let mut page = [0u8; PAGE_SIZE];
    assert_eq!(harness.zswap.load(slot(offset(0)), &mut page), Ok(true));
}
