//! Criterion micro-benchmarks: load and store on dense keys, against `BTreeMap`.
//! `uswap bench xarray` is the one-run comparison with targets; this is the detailed view.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use std::collections::BTreeMap;
use xarray::{Entry, NoItems, XArray};

const KEYS: u64 = 1 << 16;

fn dense() -> XArray<NoItems> {
    let mut xa = XArray::new();
    for key in 0..KEYS {
        xa.store(key, Entry::Value(key)).expect("store");
    }
    xa
}

fn load(c: &mut Criterion) {
    let xa = dense();
    let map: BTreeMap<u64, u64> = (0..KEYS).map(|k| (k, k)).collect();
    c.bench_function("xarray_load_dense_64k", |b| {
        b.iter(|| {
            let mut sum = 0u64;
            for key in 0..KEYS {
                sum += xa.load(black_box(key)).and_then(|e| e.value()).unwrap_or(0);
            }
            sum
        });
    });
    c.bench_function("btreemap_load_dense_64k", |b| {
        b.iter(|| {
            let mut sum = 0u64;
            for key in 0..KEYS {
                sum += map.get(&black_box(key)).copied().unwrap_or(0);
            }
            sum
        });
    });
}

fn store(c: &mut Criterion) {
    c.bench_function("xarray_store_dense_64k", |b| b.iter(dense));
    c.bench_function("btreemap_store_dense_64k", |b| {
        b.iter(|| {
            let mut map = BTreeMap::new();
            for key in 0..KEYS {
                map.insert(black_box(key), key);
            }
            map
        });
    });
}

/// A large folio's slots walked as the page-in path walks them: 16 aligned order-0 entries,
/// once per folio, over the whole array.
fn folio_walk(c: &mut Criterion) {
    let xa = dense();
    c.bench_function("xarray_iter_range_16_dense_64k", |b| {
        b.iter(|| {
            let mut sum = 0u64;
            for first in (0..KEYS).step_by(16) {
                for (_, _, e) in xa.iter_range(black_box(first)..=first + 15) {
                    sum += e.value().unwrap_or(0);
                }
            }
            sum
        });
    });
}

criterion_group!(benches, load, store, folio_walk);
criterion_main!(benches);
