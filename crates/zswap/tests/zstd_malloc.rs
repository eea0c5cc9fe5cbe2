//! A zstd compressor never calls the C library's `malloc`: every allocation of its contexts
//! goes through Rust's global allocator (compress/zstd_ctx.rs). Inside `uswap run` that is
//! what lets zstd run on the engine's threads (the preload crate's arena essay).
//!
//! How this is checked: this test binary defines `malloc`, `calloc` and `realloc` itself,
//! so the statically linked libzstd (and glibc's own internal callers) call these, which
//! count the calls made on a thread while it counts and pass them on to glibc's
//! `__libc_malloc` family. Rust's allocations in this binary go to `__libc_malloc` directly
//! (the `#[global_allocator]` below), so they are not counted: a count is C code calling
//! `malloc`. The control test shows a count is seen when zstd does use `malloc` (its
//! default contexts), so the zeros of the other tests mean something.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::Arc;
use zswap::compress::{
    train_dictionary, Compressor, CompressorConfig, CompressorKind, COMPRESS_OUT_BYTES, PAGE_SIZE,
};
use zswap::corpus::{Corpus, PageKind};

extern "C" {
    fn __libc_malloc(size: usize) -> *mut c_void;
    fn __libc_calloc(n: usize, size: usize) -> *mut c_void;
    fn __libc_realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
    fn __libc_memalign(align: usize, size: usize) -> *mut c_void;
    fn __libc_free(ptr: *mut c_void);
}

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static CALLS: Cell<u64> = const { Cell::new(0) };
}

fn note_call() {
    if COUNTING.with(Cell::get) {
        CALLS.with(|c| c.set(c.get() + 1));
    }
}

/// `malloc(3)`, counted.
///
/// # Safety
/// malloc's own contract.
#[no_mangle]
pub unsafe extern "C" fn malloc(size: usize) -> *mut c_void {
    note_call();
    // SAFETY: glibc's allocator, with the caller's arguments.
    unsafe { __libc_malloc(size) }
}

/// `calloc(3)`, counted.
///
/// # Safety
/// calloc's own contract.
#[no_mangle]
pub unsafe extern "C" fn calloc(n: usize, size: usize) -> *mut c_void {
    note_call();
    // SAFETY: glibc's allocator, with the caller's arguments.
    unsafe { __libc_calloc(n, size) }
}

/// `realloc(3)`, counted.
///
/// # Safety
/// realloc's own contract.
#[no_mangle]
pub unsafe extern "C" fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void {
    note_call();
    // SAFETY: glibc's allocator, with the caller's arguments.
    unsafe { __libc_realloc(ptr, size) }
}

/// Rust's allocations, straight to glibc's allocator (never through the counted symbols).
struct LibcDirect;

// SAFETY: glibc's allocator meets GlobalAlloc's contract: malloc aligns to 16, memalign to
// any power of two; free takes both; blocks are distinct until freed.
unsafe impl GlobalAlloc for LibcDirect {
    /// # Safety
    /// [`GlobalAlloc`]'s contract.
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain allocations of the layout's size.
        unsafe {
            if layout.align() <= 16 {
                __libc_malloc(layout.size()).cast()
            } else {
                __libc_memalign(layout.align(), layout.size()).cast()
            }
        }
    }

    /// # Safety
    /// [`GlobalAlloc`]'s contract.
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from alloc above (malloc or memalign: free takes both).
        unsafe { __libc_free(ptr.cast()) }
    }
}

#[global_allocator]
static ALLOCATOR: LibcDirect = LibcDirect;

/// Runs `f` with this thread's `malloc` calls counted; returns them. The thread's one-time
/// set-up that glibc does with `calloc` (std's thread-local destructor registration, at the
/// first thread-local with a destructor: parking_lot's, when it parks) is done first.
fn mallocs_during(f: impl FnOnce()) -> u64 {
    thread_local! {
        static WARM: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    WARM.with(|w| w.borrow_mut().push(1));
    CALLS.with(|c| c.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    CALLS.with(Cell::get)
}

fn round_trips(compressor: &Compressor, corpus: &Corpus) -> u64 {
    let mut out = vec![0u8; COMPRESS_OUT_BYTES];
    let mut back = [0u8; PAGE_SIZE];
    let mut stored = 0;
    for (kind, page) in corpus.iter() {
        match compressor.compress(page, &mut out) {
            Ok(len) => {
                compressor.decompress(&out[..len], &mut back).expect("decompress");
                assert_eq!(&back, page, "{kind:?}");
                stored += 1;
            }
            Err(_) => assert_eq!(kind, PageKind::Random, "only random pages fail"),
        }
    }
    stored
}

/// The control: zstd's default contexts call `malloc`, and this binary sees it.
#[test]
fn the_counter_sees_zstds_default_allocator() {
    let page = [7u8; PAGE_SIZE];
    let calls = mallocs_during(|| {
        let object = zstd::bulk::compress(&page, 3).expect("compress");
        assert!(!object.is_empty());
    });
    assert!(calls > 0, "a default zstd context allocates with malloc: none seen");
}

/// Every level, set-up (one context of each direction) to drop, on this thread and on
/// four more that each make their own contexts (they compress at once): no `malloc`, and
/// the contexts' memory is all counted by the compressor's own allocator. (Spawning the
/// threads is not counted: glibc's `pthread_create` allocates their TLS with `malloc`.)
#[test]
fn zstd_compressors_never_call_malloc() {
    let corpus = Arc::new(Corpus::generate(11, 64));
    for level in 1..=3 {
        let mut compressor = None;
        let mut calls = mallocs_during(|| {
            let made = Arc::new(Compressor::new(CompressorKind::Zstd { level }).unwrap());
            assert!(round_trips(&made, &corpus) > 32);
            compressor = Some(made);
        });
        let compressor = compressor.unwrap();
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let (compressor, corpus) = (compressor.clone(), corpus.clone());
                std::thread::spawn(move || {
                    mallocs_during(|| {
                        for _ in 0..4 {
                            round_trips(&compressor, &corpus);
                        }
                    })
                })
            })
            .collect();
        for worker in workers {
            assert_eq!(worker.join().unwrap(), 0, "level {level}: a worker called malloc");
        }
        let stats = compressor.stats();
        assert!(stats.contexts_created >= 1, "level {level}: {stats:?}");
        assert!(stats.zstd_allocs >= 4, "level {level}: {stats:?}");
        assert!(stats.zstd_bytes > 0 && stats.zstd_alloc_failed == 0, "{stats:?}");
        calls += mallocs_during(|| drop(compressor));
        assert_eq!(calls, 0, "level {level}: malloc called on the set-up thread");
    }
}

/// With a dictionary (trained beforehand: training uses `malloc`, set-up work): loading
/// it into every context, digesting it at the first use, compressing and decoding with it.
#[test]
fn zstd_with_a_dictionary_never_calls_malloc() {
    let corpus = Corpus::generate(5, 300);
    let samples: Vec<[u8; PAGE_SIZE]> = corpus.iter().map(|(_, page)| *page).collect();
    let dictionary: Arc<[u8]> = train_dictionary(&samples, 8 << 10).expect("train").into();
    let config = CompressorConfig {
        dictionary: Some(dictionary),
        checksum: true,
        ..CompressorConfig::new(CompressorKind::Zstd { level: 3 })
    };
    let calls = mallocs_during(|| {
        let compressor = Compressor::with_config(config).unwrap();
        assert!(round_trips(&compressor, &corpus) > 100);
        assert!(compressor.stats().zstd_allocs > 0);
    });
    assert_eq!(calls, 0, "malloc called with a dictionary");
}
