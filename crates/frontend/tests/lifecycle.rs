//! What programs do to managed memory: fork (the child, with a swap of its own over the
//! state it inherited, reads its parent's evicted pages), fork in a loop while faults are
//! served (no deadlock against glibc's malloc locks), many short-lived children that exit,
//! are killed or exec (each hold on the parent's slots released once), `MADV_DONTNEED`
//! (zero on next touch),
//! mremap (the data follows), and a refused page-out whose undo fails (staged pages, put
//! back later, never lost).
//!
//! The child's own code here does little: it reads memory through raw pointers, sums words,
//! and `_exit`s with a code (its swap's start-up, in the fork handler, is the crate's).
//!
//! The tests run one at a time ([`serial`]): a fork in one test goes through every live
//! swap of the process, and the counters checked here would see it.

mod common;

use common::{describe_page, fill_page, page_is, settle_resident, swap_or_skip};
use frontend::{Delivery, Uswap, PAGE_SIZE};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn builder() -> frontend::Builder {
    Uswap::builder().budget_bytes(16 << 20).swap_size_bytes(64 << 20)
}

/// The sum of a page's words (what a child can compute without allocating).
fn page_sum(addr: usize) -> u64 {
    let mut sum = 0u64;
    for w in 0..PAGE_SIZE / 8 {
        // SAFETY: `addr` is a page of a live managed region (the caller's); a volatile
        // read faults through userfaultfd if the page is not resident.
        let word = unsafe { std::ptr::read_volatile((addr + w * 8) as *const u64) };
        sum = sum.wrapping_mul(31).wrapping_add(word);
    }
    sum
}

/// fork(); the child runs `child` and `_exit`s with its code; the parent gets the pid.
fn fork_child(child: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the child runs only `child`, async-signal-safe by this file's rule, and leaves
    // with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = child();
        // SAFETY: `_exit` is async-signal-safe.
        unsafe { libc::_exit(code) };
    }
    pid
}

fn exit_code(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: `status` is a live int; `pid` is our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "child did not exit normally: status {status:#x}");
    libc::WEXITSTATUS(status)
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_child_reads_its_parents_evicted_pages() {
    a_child_reads_its_parents_evicted_pages_with(Delivery::Handler);
}

/// Under SIGBUS delivery the child's faults are signals in the child, resolved there by
/// its own swap.
#[test]
fn a_child_reads_its_parents_evicted_pages_under_sigbus_delivery() {
    a_child_reads_its_parents_evicted_pages_with(Delivery::Sigbus);
}

fn a_child_reads_its_parents_evicted_pages_with(delivery: Delivery) {
    let _serial = serial();
    let Some(swap) = swap_or_skip(builder().delivery(delivery)) else { return };
    const PAGES: usize = 64;
    let mut region = swap.map(PAGES * PAGE_SIZE).unwrap();
    for (i, page) in region.as_mut_slice().chunks_mut(PAGE_SIZE).enumerate() {
        fill_page(page, i as u64, 7);
    }
    settle_resident(&swap, PAGES as u64);
    assert_eq!(region.pageout(0, region.len()).unwrap(), PAGES as u64);
    let sums: Vec<u64> = (0..PAGES).map(|i| page_sum(region.addr() + i * PAGE_SIZE)).collect();
    // The sums read every page back: evict again so the child meets swapped pages.
    assert_eq!(region.pageout(0, region.len()).unwrap(), PAGES as u64);
    let inuse_before = swap.stats().unwrap().engine.gauges.swap_inuse_pages;
    let base = region.addr();
    let pid = fork_child(|| {
        let same = (0..PAGES).all(|i| page_sum(base + i * PAGE_SIZE) == sums[i]);
        if same {
            0
        } else {
            1
        }
    });
    assert_eq!(exit_code(pid), 0, "the child read every evicted page correctly");
    let stats = swap.stats().unwrap();
    assert_eq!(stats.handler.forks, 1);
    assert!(stats.engine.counters.fork_dup >= PAGES as u64, "the child's slots were held");
    // The child is gone: its references go, and the parent's data is intact.
    wait_until("the child's exit is seen", || swap.stats().unwrap().handler.holds_released == 1);
    let stats = swap.stats().unwrap();
    assert_eq!(stats.handler.children_held, 0);
    assert_eq!(stats.engine.gauges.swap_inuse_pages, inuse_before);
    for (i, page) in region.as_slice().chunks(PAGE_SIZE).enumerate() {
        assert!(page_is(page, i as u64, 7), "parent page {i} intact");
    }
    swap.engine().unwrap().check_invariants();
}

#[test]
fn a_child_writes_its_own_copy_and_the_parent_keeps_its_data() {
    let _serial = serial();
    let Some(swap) = swap_or_skip(builder()) else { return };
    let mut region = swap.map(8 * PAGE_SIZE).unwrap();
    for (i, page) in region.as_mut_slice().chunks_mut(PAGE_SIZE).enumerate() {
        fill_page(page, i as u64, 3);
    }
    settle_resident(&swap, 8);
    region.pageout(0, 4 * PAGE_SIZE).unwrap();
    let base = region.addr();
    let pid = fork_child(|| {
        // Write an evicted page, a resident one, then read them back.
        for page in [1usize, 6] {
            let addr = base + page * PAGE_SIZE;
            // SAFETY: a page of the child's copy of the region.
            unsafe { std::ptr::write_volatile(addr as *mut u64, 0xdead_beef) };
            // SAFETY: as above.
            if unsafe { std::ptr::read_volatile(addr as *const u64) } != 0xdead_beef {
                return 1;
            }
        }
        0
    });
    assert_eq!(exit_code(pid), 0);
    for (i, page) in region.as_slice().chunks(PAGE_SIZE).enumerate() {
        assert!(page_is(page, i as u64, 3), "parent page {i} untouched by the child's writes");
    }
}

/// The hooks of [`the_childs_hook_runs_before_its_reclaim_resumes`]: whether the child's
/// engine had its reclaim paused when its fork hook ran (0: not run, 1: paused, 2: not).
#[derive(Debug, Default)]
struct ForkHookSees {
    paused: AtomicU64,
}

impl frontend::Hooks for ForkHookSees {
    fn forked(&self, engine: &engine::Engine, child: bool) {
        if child {
            self.paused.store(if engine.reclaim_paused() { 1 } else { 2 }, Ordering::SeqCst);
        }
    }
}

/// A forked child's hook runs while its engine's reclaim is still paused (the embedder
/// sets up what the child's own swap device needs first: the shim joins its run's budget,
/// whose swap-space row the device's first write must use), and reclaim runs once it
/// returns: the child's own pages then page out.
#[test]
fn the_childs_hook_runs_before_its_reclaim_resumes() {
    let _serial = serial();
    let hooks = Arc::new(ForkHookSees::default());
    let options = frontend::HandlerOptions { hooks: Some(hooks.clone()), ..Default::default() };
    let Some(swap) = swap_or_skip(builder().handler_options(options)) else { return };
    const PAGES: usize = 8;
    let mut region = swap.map(PAGES * PAGE_SIZE).unwrap();
    for (i, page) in region.as_mut_slice().chunks_mut(PAGE_SIZE).enumerate() {
        fill_page(page, i as u64, 5);
    }
    settle_resident(&swap, PAGES as u64);
    let base = region.addr();
    let pid = fork_child(|| {
        match hooks.paused.load(Ordering::SeqCst) {
            1 => {}
            seen => return 10 + seen as i32, // 10: no hook; 12: reclaim already running
        }
        for page in 0..PAGES {
            // SAFETY: a page of the child's copy of the region; the write makes it the
            // child's own (no longer shared with the parent), so it can be paged out.
            unsafe { std::ptr::write_volatile((base + page * PAGE_SIZE) as *mut u64, 9) };
        }
        let Ok(engine) = swap.engine() else { return 3 };
        match engine.pageout(base as u64, (PAGES * PAGE_SIZE) as u64) {
            Ok(taken) if taken == PAGES as u64 && !engine.reclaim_paused() => 0,
            _ => 2, // reclaim did not resume after the hook
        }
    });
    assert_eq!(exit_code(pid), 0, "see the child's codes");
    for (i, page) in region.as_slice().chunks(PAGE_SIZE).enumerate() {
        assert!(page_is(page, i as u64, 5), "parent page {i} intact");
    }
}

/// Forks while the process works: worker threads fault continuously (the handler allocates
/// for every fault it serves), a pager evicts, and the main thread forks in a loop; each
/// child starts a swap of its own and reads evicted pages that never change. A fork that
/// copied the engine mid-operation, or a handler that waited on glibc's malloc locks while
/// the forking thread held them, would fail or hang here.
#[test]
fn forking_in_a_loop_while_faults_are_served_never_hangs() {
    let _serial = serial();
    let Some(swap) = swap_or_skip(builder().budget_bytes(2 << 20).folio_order(2)) else {
        return;
    };
    const STATIC_PAGES: usize = 32;
    const BUSY_PAGES: usize = 1024; // 4 MiB: twice the budget, so faults never stop
    let mut region = swap.map((STATIC_PAGES + BUSY_PAGES) * PAGE_SIZE).unwrap();
    for (i, page) in region.as_mut_slice().chunks_mut(PAGE_SIZE).take(STATIC_PAGES).enumerate() {
        fill_page(page, i as u64, 11);
    }
    let sums: Vec<u64> =
        (0..STATIC_PAGES).map(|i| page_sum(region.addr() + i * PAGE_SIZE)).collect();
    let base = region.addr();
    let stop = Arc::new(AtomicBool::new(false));
    let touched = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..2)
        .map(|t| {
            let (stop, touched) = (stop.clone(), touched.clone());
            std::thread::spawn(move || {
                let mut x = 0x1234_5678_u64 + t;
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let page = STATIC_PAGES + (x as usize % BUSY_PAGES);
                    let addr = base + page * PAGE_SIZE + (t as usize) * 8;
                    // SAFETY: a word of a page of the live region; each worker its own word.
                    unsafe { std::ptr::write_volatile(addr as *mut u64, x) };
                    touched.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let pager = {
        let (stop, swap) = (stop.clone(), swap.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = swap.pageout(base, STATIC_PAGES * PAGE_SIZE);
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let forks = if std::env::var_os("USWAP_LONG").is_some() { 2000 } else { 200 };
    let started = Instant::now();
    for round in 0..forks {
        let pid = fork_child(|| {
            let same = (0..STATIC_PAGES).all(|i| page_sum(base + i * PAGE_SIZE) == sums[i]);
            if same {
                0
            } else {
                1
            }
        });
        assert_eq!(exit_code(pid), 0, "child {round} read the parent's pages");
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    pager.join().unwrap();
    let stats = swap.stats().unwrap();
    eprintln!(
        "{forks} forks in {:.1?} with {} worker touches, {} faults served, {} evictions",
        started.elapsed(),
        touched.load(Ordering::Relaxed),
        stats.handler.faults,
        stats.source.take_pages
    );
    assert_eq!(stats.handler.forks, forks, "every fork went through fork mode");
    assert!(stats.handler.faults > forks, "faults were served throughout");
    wait_until("every child's exit is seen", || {
        swap.stats().unwrap().handler.holds_released == forks
    });
    for (i, page) in region.as_slice().chunks(PAGE_SIZE).take(STATIC_PAGES).enumerate() {
        assert!(page_is(page, i as u64, 11), "static page {i} intact");
    }
    drop(region);
    swap.check_invariants().unwrap();
}

/// Many short-lived children, each holding references on its parent's swap slots: one in
/// three exits after reading, one is killed by SIGKILL while it reads (its own swap's
/// threads mid-fault or mid-start-up), one execs `/bin/true`. Every hold is released once
/// (holds released = forks, none left), the slots in use come back to the parent's own
/// count, the engine's invariants hold, and once the region goes the count is zero.
#[test]
fn short_lived_children_release_their_slot_references_exactly_once() {
    let _serial = serial();
    let Some(swap) = swap_or_skip(builder()) else { return };
    const PAGES: usize = 256;
    let mut region = swap.map(PAGES * PAGE_SIZE).unwrap();
    for (i, page) in region.as_mut_slice().chunks_mut(PAGE_SIZE).enumerate() {
        fill_page(page, i as u64, 5);
    }
    settle_resident(&swap, PAGES as u64);
    let sums: Vec<u64> = (0..PAGES).map(|i| page_sum(region.addr() + i * PAGE_SIZE)).collect();
    let base = region.addr();
    const CHILDREN: u64 = 60;
    let (mut killed, mut execs) = (0, 0);
    for round in 0..CHILDREN {
        // Every child meets swapped pages: the previous child read some back.
        region.pageout(0, region.len()).unwrap();
        let inuse = swap.stats().unwrap().engine.gauges.swap_inuse_pages;
        assert!(inuse >= PAGES as u64, "round {round}: {inuse} slots for {PAGES} pages out");
        let pid = fork_child(|| match round % 3 {
            0 => i32::from(!(0..PAGES).all(|i| page_sum(base + i * PAGE_SIZE) == sums[i])),
            1 => loop {
                for i in 0..PAGES {
                    std::hint::black_box(page_sum(base + i * PAGE_SIZE));
                }
            },
            _ => {
                let path = c"/bin/true";
                let argv = [path.as_ptr(), std::ptr::null()];
                // SAFETY: a NUL-terminated path and a NULL-terminated argv of live strings.
                unsafe { libc::execv(path.as_ptr(), argv.as_ptr()) };
                127
            }
        });
        if round % 3 == 1 {
            std::thread::sleep(Duration::from_micros(300 * (round % 7)));
            // SAFETY: signals our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let mut status = 0;
            // SAFETY: `status` is a live int; `pid` is our child.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            killed += u32::from(libc::WIFSIGNALED(status));
        } else {
            assert_eq!(exit_code(pid), 0, "child {round} (exit or exec)");
            execs += u32::from(round % 3 == 2);
        }
    }
    eprintln!("{CHILDREN} children: {killed} killed, {execs} exec'd");
    assert_eq!(swap.stats().unwrap().handler.forks, CHILDREN);
    wait_until("every child's hold is released", || {
        let stats = swap.stats().unwrap();
        stats.handler.holds_released == CHILDREN && stats.handler.children_held == 0
    });
    let stats = swap.stats().unwrap();
    assert_eq!(stats.handler.holds_released, CHILDREN, "released once each");
    assert!(swap.engine().unwrap().holds().is_empty(), "no hold left");
    assert!(stats.engine.counters.fork_dup >= CHILDREN * PAGES as u64, "every child held");
    swap.engine().unwrap().check_invariants();
    let inuse = swap.stats().unwrap().engine.gauges.swap_inuse_pages;
    assert!(inuse <= PAGES as u64, "the parent's own slots only: {inuse}");
    for (i, page) in region.as_slice().chunks(PAGE_SIZE).enumerate() {
        assert!(page_is(page, i as u64, 5), "parent page {i} intact");
    }
    drop(region);
    wait_until("the slots are free", || swap.stats().unwrap().engine.gauges.swap_inuse_pages == 0);
    swap.check_invariants().unwrap();
}

#[test]
fn madv_dontneed_drops_swapped_and_resident_pages_to_zero() {
    let _serial = serial();
    let Some(swap) = swap_or_skip(builder()) else { return };
    let mut region = swap.map(16 * PAGE_SIZE).unwrap();
    for (i, page) in region.as_mut_slice().chunks_mut(PAGE_SIZE).enumerate() {
        fill_page(page, i as u64, 5);
    }
    settle_resident(&swap, 16);
    // Pages 0..8 swapped, 8..16 resident.
    region.pageout(0, 8 * PAGE_SIZE).unwrap();
    // The program frees pages 4..12 (half swapped, half resident), as free() trimming does.
    let at = (region.addr() + 4 * PAGE_SIZE) as *mut libc::c_void;
    // SAFETY: pages of our own region; no borrow of them is live.
    let ret = unsafe { libc::madvise(at, 8 * PAGE_SIZE, libc::MADV_DONTNEED) };
    assert_eq!(ret, 0, "MADV_DONTNEED");
    for (i, page) in region.as_slice().chunks(PAGE_SIZE).enumerate() {
        let version = if (4..12).contains(&i) { 0 } else { 5 };
        assert!(page_is(page, i as u64, version), "page {i}: expected version {version}");
    }
    let stats = swap.stats().unwrap();
    assert_eq!(stats.handler.removes, 1);
    assert!(stats.engine.counters.pages_removed >= 8);
    swap.check_invariants().unwrap();
}

#[test]
fn mremap_moves_the_data_and_its_swap_entries() {
    let _serial = serial();
    let Some(swap) = swap_or_skip(builder()) else { return };
    let mut region = swap.map(16 * PAGE_SIZE).unwrap();
    for (i, page) in region.as_mut_slice().chunks_mut(PAGE_SIZE).enumerate() {
        fill_page(page, i as u64, 9);
    }
    settle_resident(&swap, 16);
    region.pageout(0, 8 * PAGE_SIZE).unwrap();
    let target = uffd::Mapping::reserve(16 * PAGE_SIZE).unwrap();
    let to = target.addr();
    std::mem::forget(target); // mremap replaces it
    let (from, len) = (region.addr(), region.len());
    // The Region object would unmap the old range: the test owns the memory from here.
    std::mem::forget(region);
    // SAFETY: we own both ranges; MREMAP_FIXED replaces the reservation at `to`.
    let moved = unsafe {
        libc::mremap(from as *mut _, len, len, libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED, to)
    };
    assert_eq!(moved as usize, to, "mremap");
    for i in 0..16 {
        // SAFETY: pages of the moved region, read through a fresh slice per page.
        let page = unsafe { std::slice::from_raw_parts((to + i * PAGE_SIZE) as *const u8, 4096) };
        assert!(page_is(page, i as u64, 9), "page {i} after mremap");
    }
    let stats = swap.stats().unwrap();
    assert_eq!(stats.handler.remaps, 1);
    assert_eq!(stats.handler.event_errors, 0);
    // SAFETY: the moved range is ours; munmap sends UNMAP, which the handler reads.
    assert_eq!(unsafe { libc::munmap(to as *mut _, len) }, 0);
    wait_until("the unmap is seen", || swap.stats().unwrap().engine.gauges.resident_pages == 0);
}

/// A page-out refused half-way (a folio whose second page is shared with a child) moves
/// its first page back; the page-out succeeds once the copy-on-write sharing is broken.
#[test]
fn a_refused_page_out_moves_its_pages_back() {
    refused_page_out(Refusal { folios: 1, ..Refusal::default() });
}

/// As above, but the undo also fails (injected: as if an event had arrived): the first page
/// stays in staging, staged in the engine; the handler puts it back, and the data is intact.
#[test]
fn a_failed_undo_leaves_staged_pages_that_go_back() {
    refused_page_out(Refusal { staged: true, folios: 1, ..Refusal::default() });
}

/// A child forked while pages are staged (held out, injected) gets their data: it has them
/// missing, and its copy of the engine has them staged; the fork's prepare reads them out
/// of staging (`Engine::staged_for_child`) and the child maps them before its program
/// runs.
#[test]
fn a_child_forked_while_pages_are_staged_reads_their_data() {
    refused_page_out(Refusal {
        staged: true,
        folios: 3,
        fork_while_out: true,
        ..Refusal::default()
    });
}

/// As above, the child failing to start a swap of its own (injected): it runs unmanaged,
/// and the staged pages' data is written into its memory directly, as its swapped pages are
/// read back.
#[test]
fn a_child_that_runs_unmanaged_gets_the_staged_pages_data() {
    let unmanaged = Refusal { unmanaged_child: true, ..Refusal::default() };
    refused_page_out(Refusal { staged: true, folios: 3, fork_while_out: true, ..unmanaged });
}

/// Staged pages put back by several threads at once (under SIGBUS delivery every faulting
/// thread whose fault is retried calls `Engine::unstage_all`, beside the handler): each
/// goes back once, none is dropped, and no thread moves a slot another has freed (which
/// panicked, or moved another page there).
#[test]
fn staged_pages_put_back_by_racing_threads_come_back_once() {
    refused_page_out(Refusal { staged: true, folios: 12, restorers: 3, ..Refusal::default() });
}

#[derive(Default)]
struct Refusal {
    /// Every undo fails (injected), leaving one staged page per folio.
    staged: bool,
    /// Folios of 16 pages, each refused at its second page (at most 12: the four staging
    /// lanes of 64 slots have room for three held slots each beside a folio's take).
    folios: usize,
    /// Threads that put the staged pages back side by side with the handler.
    restorers: usize,
    /// Staged pages are held out (injected) while a second child is forked, which checks
    /// every page of the region.
    fork_while_out: bool,
    /// That child cannot start a swap of its own (injected) and runs unmanaged.
    unmanaged_child: bool,
}

fn refused_page_out(how: Refusal) {
    const FOLIO: usize = 16 * PAGE_SIZE;
    let _serial = serial();
    let Some(swap) = swap_or_skip(builder().folio_order(4)) else { return };
    let mut region = swap.map(how.folios * FOLIO).unwrap();
    for (i, page) in region.as_mut_slice().chunks_mut(PAGE_SIZE).enumerate() {
        fill_page(page, i as u64, 2);
    }
    settle_resident(&swap, (how.folios * 16) as u64);
    let mut pipe = [0i32; 2];
    // SAFETY: two live ints for the descriptors.
    assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
    let pid = fork_child(|| {
        let mut byte = 0u8;
        // SAFETY: close our copy of the write end, wait for EOF: async-signal-safe.
        unsafe {
            libc::close(pipe[1]);
            libc::read(pipe[0], (&raw mut byte).cast(), 1);
        }
        0
    });
    // Each folio's page 0 written after the fork is the parent's own again; the rest stay
    // shared.
    let first_page = |i: usize| i.is_multiple_of(16);
    for (folio, pages) in region.as_mut_slice().chunks_mut(FOLIO).enumerate() {
        fill_page(&mut pages[..PAGE_SIZE], (folio * 16) as u64, 4);
    }
    let source = swap.source().unwrap().clone();
    let engine = swap.engine().unwrap().clone();
    if how.staged {
        source.inject_undo_failures(how.folios as u32);
    }
    engine.hold_staged(how.fork_while_out);
    // Refused at page 1: page 0 is moved back at once, or (injected) left staged.
    for folio in 0..how.folios {
        let at = (region.addr() + folio * FOLIO) as u64;
        assert_eq!(engine.pageout(at, PAGE_SIZE as u64).unwrap(), 0);
    }
    let stats = swap.stats().unwrap().source;
    let n = how.folios as u64;
    let expected = if how.staged { (n, 0, n) } else { (n, n, 0) };
    let got = (stats.take_busy, stats.undo_pages, stats.staged_pages);
    assert_eq!(got, expected, "{stats:?}");
    if how.fork_while_out {
        fork_while_pages_are_staged(&swap, &region, first_page, how.unmanaged_child);
    }
    let start = Arc::new(std::sync::Barrier::new(how.restorers));
    let restorers: Vec<_> = (0..how.restorers)
        .map(|_| {
            let (engine, start) = (engine.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                while engine.has_staged() {
                    engine.unstage_all();
                }
            })
        })
        .collect();
    for restorer in restorers {
        restorer.join().expect("a restorer panicked");
    }
    wait_until("the staged pages are back", || !engine.has_staged());
    let stats = swap.stats().unwrap().engine.counters;
    let restored = if how.staged { n } else { 0 };
    assert_eq!((stats.pages_unstaged, stats.staged_dropped), (restored, 0), "{stats:?}");
    for (folio, pages) in region.as_slice().chunks(FOLIO).enumerate() {
        let intact = page_is(&pages[..PAGE_SIZE], (folio * 16) as u64, 4);
        assert!(intact, "folio {folio}: page 0 came back intact");
    }
    // The queued copy-on-write breaks make the folios movable: every page goes out. A
    // page may go out twice: the breaker thread's populate, racing the first pass, faults
    // back in a page of its range the pass had just taken.
    let paged = region.pageout(0, region.len()).unwrap();
    let resident = swap.stats().unwrap().engine.gauges.resident_pages;
    assert!(paged >= (how.folios * 16) as u64 && resident == 0, "{paged} out, {resident} in");
    // SAFETY: close the pipe ends we own; the child sees EOF and exits.
    unsafe {
        libc::close(pipe[1]);
        libc::close(pipe[0]);
    }
    assert_eq!(exit_code(pid), 0);
    for (i, page) in region.as_slice().chunks(PAGE_SIZE).enumerate() {
        let version = if first_page(i) { 4 } else { 2 };
        if !page_is(page, i as u64, version) {
            let stats = swap.stats().unwrap();
            panic!(
                "page {i} holds {} (expected version {version}); {:?}; {:?}",
                describe_page(page, 15, 4),
                stats.source,
                stats.engine.counters
            );
        }
    }
    swap.check_invariants().unwrap();
}

/// Forks a child while the region's staged pages are held out of it, and has the child
/// check every page of the region (page `i` version 4 if `first_page(i)`, else 2); then
/// lets the staged pages go back.
fn fork_while_pages_are_staged(
    swap: &frontend::Uswap,
    region: &frontend::Region,
    first_page: impl Fn(usize) -> bool,
    unmanaged_child: bool,
) {
    let engine = swap.engine().unwrap().clone();
    let staged = swap.stats().unwrap().engine.counters.pages_staged;
    assert!(staged > 0 && engine.has_staged(), "no page is staged");
    // The child compares with bytes made here: it must not allocate (a forked child of a
    // threaded process may find malloc's lock held).
    let mut expected = vec![0u8; region.len()];
    for (i, page) in expected.chunks_mut(PAGE_SIZE).enumerate() {
        fill_page(page, i as u64, if first_page(i) { 4 } else { 2 });
    }
    let addr = region.addr();
    frontend::inject_child_swap_failure(unmanaged_child);
    let pid = fork_child(|| {
        for (i, want) in expected.chunks(PAGE_SIZE).enumerate() {
            // SAFETY: a page of the region, which the child has too (not excluded).
            let page = unsafe {
                std::slice::from_raw_parts((addr + i * PAGE_SIZE) as *const u8, PAGE_SIZE)
            };
            if page != want {
                return 1 + i.min(250) as i32; // an exit status is a byte
            }
        }
        0
    });
    frontend::inject_child_swap_failure(false);
    let code = exit_code(pid);
    assert!(code == 0, "the child read page {} wrong (251: page 250 or later)", code - 1);
    assert_eq!(swap.stats().unwrap().engine.counters.staged_to_children, staged);
    engine.hold_staged(false);
}

/// With `exclude_from_fork`, a child has no copy of the region: touching it is SIGSEGV,
/// never a silent zero.
#[test]
fn excluded_regions_are_absent_in_a_child() {
    let _serial = serial();
    let Some(swap) = swap_or_skip(builder().exclude_from_fork(true)) else { return };
    let mut region = swap.map(4 * PAGE_SIZE).unwrap();
    fill_page(&mut region.as_mut_slice()[..PAGE_SIZE], 0, 1);
    settle_resident(&swap, 1);
    region.pageout(0, PAGE_SIZE).unwrap();
    let addr = region.addr();
    // SAFETY: the child only reads one word and `_exit`s; async-signal-safe.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: in the child the range is unmapped (MADV_DONTFORK): this read faults.
        let word = unsafe { std::ptr::read_volatile(addr as *const u64) };
        // SAFETY: `_exit` is async-signal-safe.
        unsafe { libc::_exit(if word == 0 { 1 } else { 2 }) };
    }
    let mut status = 0;
    // SAFETY: `status` is a live int; `pid` is our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFSIGNALED(status), "status {status:#x}: the child did not fault");
    assert_eq!(libc::WTERMSIG(status), libc::SIGSEGV);
    assert_eq!(swap.stats().unwrap().handler.forks, 0, "no fork mode");
    assert!(page_is(&region.as_slice()[..PAGE_SIZE], 0, 1));
}
