//! Criterion benchmarks of the allocator's hot paths: store (malloc + write), read, free,
//! and a compaction pass over a fragmented pool. Sizes follow a spread like compressed
//! pages (a few hundred bytes to a whole page). `uswap bench zpool` measures the pool on
//! the page corpus with real compressors; these isolate the allocator.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use std::hint::black_box;
use zpool::{PoolConfig, ZsPool};

/// A deterministic spread of object sizes (xorshift; 200..=4096 bytes).
fn sizes(n: usize) -> Vec<usize> {
    let mut x = 0x853c_49e6_748f_ea9bu64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            200 + (x % 3897) as usize
        })
        .collect()
}

fn pool() -> ZsPool {
    ZsPool::new(PoolConfig::with_max_bytes(1 << 30)).expect("valid config")
}

fn store_read_free(c: &mut Criterion) {
    let data = vec![0x5au8; 4096];
    let sizes = sizes(4096);
    let pool = pool();
    let mut i = 0;
    c.bench_function("zpool malloc+write+free", |b| {
        b.iter(|| {
            let size = sizes[i % sizes.len()];
            i += 1;
            let handle = pool.malloc(size).expect("malloc");
            pool.write(handle, &data[..size]);
            pool.free(black_box(handle));
        })
    });
    let handles: Vec<_> = sizes
        .iter()
        .map(|&size| {
            let handle = pool.malloc(size).expect("malloc");
            pool.write(handle, &data[..size]);
            handle
        })
        .collect();
    let mut buf = vec![0u8; 4096];
    let mut j = 0;
    c.bench_function("zpool read", |b| {
        b.iter(|| {
            j += 1;
            black_box(pool.read(handles[j % handles.len()], &mut buf))
        })
    });
}

fn compact(c: &mut Criterion) {
    let data = vec![0xa5u8; 4096];
    let sizes = sizes(8192);
    c.bench_function("zpool compact (8192 objects, half freed)", |b| {
        b.iter_batched(
            || {
                let pool = pool();
                let handles: Vec<_> = sizes
                    .iter()
                    .map(|&size| {
                        let handle = pool.malloc(size).expect("malloc");
                        pool.write(handle, &data[..size]);
                        handle
                    })
                    .collect();
                for handle in handles.into_iter().step_by(2) {
                    pool.free(handle);
                }
                pool
            },
            |pool| black_box(pool.compact()),
            BatchSize::PerIteration,
        )
    });
}

criterion_group!(benches, store_read_free, compact);
criterion_main!(benches);
