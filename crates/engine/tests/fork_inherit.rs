//! A forked child carries on with its copy of its parent's engine (docs/ARCHITECTURE.md,
//! "Fork"): it reads the swap it inherited, writes its own swap to a backend of its own,
//! and its parent, which keeps the slots the child may read, never writes over them.
//!
//! A real fork: the engine runs over simulated memory (the memory source's frames are
//! ordinary process memory, copied with the rest). One test in this binary, so no other
//! test's thread is cut off by the fork.

mod common;

use common::{addr, content, setup, PAGE};
use engine::{BackendConfig, EngineConfig, SwapConfig};
use std::sync::Arc;

const PAGES: u64 = 512;
const SWAP_BYTES: u64 = 2 << 20;

fn file(dir: &std::path::Path) -> Arc<dyn backend::Backend> {
    let file = backend::FileBackend::create(dir, SWAP_BYTES, backend::FileOptions::default());
    Arc::new(file.expect("the child's swap file"))
}

/// The child's side: every page reads what the parent wrote before the fork, although the
/// parent has since dropped and written every page again, three times (its new data went
/// to other slots: the held ones are not reused); then the child's own page-outs go to its own
/// file and come back.
fn child(
    engine: &engine::Engine,
    source: &engine::mem_source::MemorySource,
    dir: &std::path::Path,
    go: i32,
) -> i32 {
    let mut byte = [0u8; 1];
    // SAFETY: reads one byte from a pipe this test made.
    unsafe { libc::read(go, byte.as_mut_ptr().cast(), 1) };
    if engine.after_fork_in_child(file(dir)).is_err() {
        return 2;
    }
    engine.resume_after_fork();
    let mut buf = vec![0u8; PAGE];
    for page in 0..PAGES {
        source.read(engine, addr(page), &mut buf).expect("read");
        if buf != content(page, 1) {
            eprintln!("child: page {page} is not the parent's data at the fork");
            return 3;
        }
    }
    for page in 0..PAGES / 2 {
        source.write(engine, addr(page), &content(page, 2)).expect("write");
    }
    for page in 0..PAGES {
        source.read(engine, addr(page), &mut buf).expect("read");
        if buf != content(page, if page < PAGES / 2 { 2 } else { 1 }) {
            eprintln!("child: page {page} wrong after its own page-outs");
            return 4;
        }
    }
    if engine.stats().counters.pswpout == 0 {
        return 5; // the child's own page-outs must have happened
    }
    engine.check_invariants();
    0
}

#[test]
fn a_forked_child_reads_its_inherited_swap_while_its_parent_writes_its_own() {
    let scratch = tempfile::Builder::new().prefix("uswap-fork-inherit-").tempdir().unwrap();
    let dir = scratch.path();
    let config = EngineConfig {
        budget_bytes: 64 * PAGE as u64,
        background_reclaim: false,
        zswap: None,
        swap: SwapConfig {
            backend: BackendConfig::File { dir: dir.to_path_buf(), path: None, keep: false },
            size_bytes: SWAP_BYTES,
            ..SwapConfig::default()
        },
        ..EngineConfig::default()
    };
    let (engine, source) = setup(config, PAGES);
    for page in 0..PAGES {
        source.write(&engine, addr(page), &content(page, 1)).unwrap();
    }
    assert!(engine.stats().counters.pswpout > PAGES / 2, "most pages are in the file");
    let mut go = [0i32; 2];
    // SAFETY: makes a pipe into a local array.
    assert_eq!(unsafe { libc::pipe(go.as_mut_ptr()) }, 0);
    engine.pause_for_fork();
    let hold = engine.hold_for_child().unwrap();
    // SAFETY: one thread runs in this binary's only test; the child calls only the
    // engine (its own copy) and exits with _exit.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let status = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            child(&engine, &source, dir, go[0])
        }))
        .unwrap_or(6);
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(status) };
    }
    engine.resume_after_fork();
    // Every page dropped (its slot freed, but for the child's reference) and written
    // again with new data: the new page-outs take other slots than the child's.
    // Three times over, so the allocator comes round to every slot the child holds.
    for version in 3..6 {
        engine.remove(addr(0), PAGES * PAGE as u64);
        for page in 0..PAGES {
            source.write(&engine, addr(page), &content(page, version)).unwrap();
        }
    }
    // SAFETY: writes one byte to the pipe made above.
    unsafe { libc::write(go[1], b"g".as_ptr().cast(), 1) };
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "the child died: {status:#x}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "the child found wrong data (its stderr says)");
    let held = engine.stats().gauges.swap_inuse_pages;
    engine.release_hold(hold);
    assert!(engine.stats().gauges.swap_inuse_pages < held, "the child's slots are released");
    let mut buf = vec![0u8; PAGE];
    for page in 0..PAGES {
        source.read(&engine, addr(page), &mut buf).unwrap();
        assert_eq!(buf, content(page, 5), "page {page}");
    }
    engine.check_invariants();
    drop(engine);
}
