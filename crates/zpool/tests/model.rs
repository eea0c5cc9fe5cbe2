//! Model test: the pool against a `HashMap` of handle → bytes, random operations, the pool
//! compared with the model and `check_invariants()` run after every operation.

use proptest::prelude::*;
use std::collections::HashMap;
use zpool::{Handle, PoolConfig, ZsPool};

#[derive(Debug, Clone)]
enum Op {
    /// malloc + write, content from a seed.
    Store {
        size: usize,
        seed: u8,
    },
    /// `count` stores of one size: fills whole zspages of a class.
    StoreMany {
        size: usize,
        count: usize,
        seed: u8,
    },
    /// Free every `stride`-th live object: leaves zspages sparse for compaction.
    FreeEvery {
        stride: usize,
    },
    /// Read the `pick`-th live object and compare.
    Read {
        pick: usize,
    },
    /// Overwrite the `pick`-th live object with new content of the same size.
    Rewrite {
        pick: usize,
        seed: u8,
    },
    Free {
        pick: usize,
    },
    Compact,
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        // A few hot sizes fill several zspages of one class, so frees leave them sparse
        // and compaction has objects to move.
        6 => prop::sample::select(vec![40, 200, 700, 1500, 3000]),
        4 => 1..=4096usize,
        2 => 1..=200usize,
        2 => 2000..=4096usize,
        1 => prop::sample::select(vec![1, 31, 32, 33, 47, 48, 49, 4080, 4095, 4096]),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (size(), any::<u8>()).prop_map(|(size, seed)| Op::Store { size, seed }),
        3 => any::<usize>().prop_map(|pick| Op::Read { pick }),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(pick, seed)| Op::Rewrite { pick, seed }),
        4 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        1 => (size(), 1..64usize, any::<u8>())
            .prop_map(|(size, count, seed)| Op::StoreMany { size, count, seed }),
        1 => (2..5usize).prop_map(|stride| Op::FreeEvery { stride }),
        1 => Just(Op::Compact),
    ]
}

fn content(size: usize, seed: u8) -> Vec<u8> {
    (0..size).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8).collect()
}

/// The model: live handles in insertion order (for picking) and their bytes.
#[derive(Default)]
struct Model {
    order: Vec<Handle>,
    bytes: HashMap<Handle, Vec<u8>>,
}

impl Model {
    fn pick(&self, pick: usize) -> Option<Handle> {
        (!self.order.is_empty()).then(|| self.order[pick % self.order.len()])
    }

    fn remove(&mut self, handle: Handle) {
        self.order.retain(|&h| h != handle);
        self.bytes.remove(&handle);
    }
}

fn apply(pool: &ZsPool, model: &mut Model, op: &Op) {
    match *op {
        Op::Store { size, seed } => match pool.malloc(size) {
            Ok(handle) => {
                let data = content(size, seed);
                pool.write(handle, &data);
                assert!(model.bytes.insert(handle, data).is_none(), "handle reused while live");
                model.order.push(handle);
            }
            Err(zpool::Error::PoolFull { .. }) => {}
            Err(other) => panic!("unexpected malloc error {other}"),
        },
        Op::StoreMany { size, count, seed } => {
            for i in 0..count {
                apply(pool, model, &Op::Store { size, seed: seed.wrapping_add(i as u8) });
            }
        }
        Op::FreeEvery { stride } => {
            let victims: Vec<Handle> = model.order.iter().copied().step_by(stride).collect();
            for handle in victims {
                pool.free(handle);
                model.remove(handle);
            }
        }
        Op::Read { pick } => {
            if let Some(handle) = model.pick(pick) {
                let mut buf = vec![0u8; 4096];
                let n = pool.read(handle, &mut buf);
                assert_eq!(&buf[..n], &model.bytes[&handle][..]);
            }
        }
        Op::Rewrite { pick, seed } => {
            if let Some(handle) = model.pick(pick) {
                let data = content(model.bytes[&handle].len(), seed);
                pool.write(handle, &data);
                model.bytes.insert(handle, data);
            }
        }
        Op::Free { pick } => {
            if let Some(handle) = model.pick(pick) {
                pool.free(handle);
                model.remove(handle);
            }
        }
        Op::Compact => {
            pool.compact();
        }
    }
}

fn compare(pool: &ZsPool, model: &Model) {
    pool.check_invariants();
    let stats = pool.stats();
    assert_eq!(stats.objects, model.bytes.len());
    assert_eq!(stats.object_bytes, model.bytes.values().map(Vec::len).sum::<usize>());
    assert_eq!(stats.total_bytes, pool.total_bytes());
    let mut buf = vec![0u8; 4096];
    for (&handle, bytes) in &model.bytes {
        let n = pool.read(handle, &mut buf);
        assert_eq!(&buf[..n], &bytes[..], "object {handle:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn pool_matches_model(ops in prop::collection::vec(op(), 1..300), small in any::<bool>()) {
        // A small limit makes PoolFull part of the run; a large one lets the pool grow.
        let max_pages = if small { 24 } else { 4096 };
        let pool = ZsPool::new(PoolConfig { max_pages, alloc_fail_hook: None })
            .expect("valid config");
        let mut model = Model::default();
        for op in &ops {
            apply(&pool, &mut model, op);
            compare(&pool, &model);
        }
        // Freeing everything gives every page back.
        for handle in model.order.clone() {
            pool.free(handle);
            model.remove(handle);
            pool.check_invariants();
        }
        prop_assert_eq!(pool.pages_held(), 0);
    }
}
