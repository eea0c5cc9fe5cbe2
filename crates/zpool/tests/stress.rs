//! Multi-thread stress: threads malloc, write, read, free and hand handles to each other,
//! while another thread compacts and checks invariants; every read is verified.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use zpool::{Handle, PoolConfig, ZsPool, PAGE_SIZE};

fn content(size: usize, tag: u64) -> Vec<u8> {
    (0..size).map(|i| (tag as u8).wrapping_add(i as u8).rotate_left((tag % 7) as u32)).collect()
}

fn verify(pool: &ZsPool, handle: Handle, size: usize, tag: u64, buf: &mut [u8]) {
    assert_eq!(pool.read(handle, buf), size);
    assert_eq!(&buf[..size], &content(size, tag)[..], "tag {tag}");
}

fn worker(
    pool: Arc<ZsPool>,
    id: u64,
    to_next: mpsc::Sender<(Handle, usize, u64)>,
    from_prev: mpsc::Receiver<(Handle, usize, u64)>,
) {
    let mut live: Vec<(Handle, usize, u64)> = Vec::new();
    let mut buf = vec![0u8; PAGE_SIZE];
    let mut x = 0x2545_f491_4f6c_dd1d ^ id;
    for round in 0..4000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let tag = id << 32 | round;
        match x % 8 {
            0..=3 => {
                let size = 1 + (x >> 8) as usize % 4096;
                let handle = pool.malloc(size).expect("malloc");
                pool.write(handle, &content(size, tag));
                live.push((handle, size, tag));
            }
            4 | 5 if !live.is_empty() => {
                let (handle, size, tag) = live.swap_remove((x >> 16) as usize % live.len());
                verify(&pool, handle, size, tag, &mut buf);
                pool.free(handle);
            }
            6 if !live.is_empty() => {
                // Hand an object to the next thread: handles work from any thread.
                let item = live.swap_remove((x >> 16) as usize % live.len());
                let _ = to_next.send(item);
            }
            _ => {
                for &(handle, size, tag) in live.iter().rev().take(4) {
                    verify(&pool, handle, size, tag, &mut buf);
                }
            }
        }
        while let Ok((handle, size, tag)) = from_prev.try_recv() {
            verify(&pool, handle, size, tag, &mut buf);
            live.push((handle, size, tag));
        }
    }
    drop(to_next);
    for (handle, size, tag) in live.drain(..) {
        verify(&pool, handle, size, tag, &mut buf);
        pool.free(handle);
    }
    // Objects sent to this thread after it stopped receiving are freed by their receiver
    // at the end (below), so nothing leaks.
    for (handle, size, tag) in from_prev.iter() {
        verify(&pool, handle, size, tag, &mut buf);
        pool.free(handle);
    }
}

#[test]
fn threads_store_read_free_and_compact_concurrently() {
    let pool = Arc::new(ZsPool::new(PoolConfig::with_max_bytes(256 << 20)).expect("config"));
    let threads = 3;
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..threads).map(|_| mpsc::channel()).unzip();
    let mut receivers: Vec<Option<_>> = receivers.into_iter().map(Some).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let compactor = {
        let (pool, stop) = (Arc::clone(&pool), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut passes = 0;
            while !stop.load(Ordering::Relaxed) {
                pool.compact();
                pool.check_invariants();
                passes += 1;
            }
            passes
        })
    };
    let workers: Vec<_> = (0..threads)
        .map(|i| {
            let pool = Arc::clone(&pool);
            let to_next = senders[(i + 1) % threads].clone();
            let from_prev = receivers[i].take().expect("receiver");
            std::thread::spawn(move || worker(pool, i as u64, to_next, from_prev))
        })
        .collect();
    drop(senders);
    for w in workers {
        w.join().expect("worker panicked");
    }
    stop.store(true, Ordering::Relaxed);
    let passes = compactor.join().expect("compactor panicked");
    assert!(passes > 0);
    pool.check_invariants();
    let stats = pool.stats();
    assert_eq!(stats.objects, 0);
    assert_eq!(stats.pages, 0, "every zspage freed");
    assert!(stats.counters.mallocs > 1000);
}
