//! The library API on real memory: a managed region keeps its bytes across page-out and
//! page-in, in both delivery modes and with large folios; bad input is refused before
//! anything is registered.

mod common;

use common::{fill_page, page_is, swap_or_skip};
use frontend::{Delivery, Error, Uswap, PAGE_SIZE};

fn builder() -> frontend::Builder {
    Uswap::builder().budget_bytes(64 << 20).swap_size_bytes(64 << 20)
}

/// Writes `pages` pages, pages them all out, reads them back.
fn round_trip(swap: &Uswap, pages: usize) {
    let mut region = swap.map(pages * PAGE_SIZE).unwrap();
    for (i, page) in region.as_mut_slice().chunks_mut(PAGE_SIZE).enumerate() {
        fill_page(page, i as u64, 1 + i as u64 % 3);
    }
    common::settle_resident(swap, pages as u64);
    let paged = region.pageout(0, region.len()).unwrap();
    assert_eq!(paged, pages as u64, "every page paged out");
    let stats = swap.stats().unwrap();
    assert_eq!(stats.engine.gauges.resident_pages, 0);
    assert_eq!(stats.source.take_pages, pages as u64);
    for (i, page) in region.as_slice().chunks(PAGE_SIZE).enumerate() {
        assert!(page_is(page, i as u64, 1 + i as u64 % 3), "page {i} came back changed");
    }
    let stats = swap.stats().unwrap();
    assert!(stats.engine.counters.pgmajfault > 0, "the reads swapped in");
    swap.check_invariants().unwrap();
}

#[test]
fn handler_mode_round_trip() {
    let Some(swap) = swap_or_skip(builder()) else { return };
    assert_eq!(swap.delivery(), Delivery::Handler);
    round_trip(&swap, 256);
    let stats = swap.stats().unwrap();
    assert!(stats.handler.faults >= 1, "faults came as messages: {:?}", stats.handler);
}

#[test]
fn sigbus_mode_round_trip() {
    let Some(swap) = swap_or_skip(builder().delivery(Delivery::Sigbus)) else { return };
    round_trip(&swap, 256);
    let stats = swap.stats().unwrap();
    assert!(stats.sigbus.resolved >= 256, "faults resolved in the faulting thread");
    assert_eq!(stats.handler.faults, 0, "no fault messages in SIGBUS mode");
}

#[test]
fn large_folios_round_trip() {
    let Some(swap) = swap_or_skip(builder().folio_order(4)) else { return };
    round_trip(&swap, 256);
    let stats = swap.stats().unwrap();
    assert!(stats.engine.per_order.swpout[4] > 0, "64 KiB folios paged out whole");
}

#[test]
fn zero_length_region_is_refused() {
    let Some(swap) = swap_or_skip(builder()) else { return };
    let e = swap.map(0).unwrap_err();
    assert!(matches!(e, Error::Config { .. }), "{e}");
    assert!(e.to_string().contains("length zero"), "{e}");
}

#[test]
fn budget_below_one_folio_is_refused_before_anything_starts() {
    let e = builder().budget_bytes(32 << 10).folio_order(4).build().unwrap_err();
    assert!(matches!(e, Error::Config { .. }), "{e}");
    assert!(e.to_string().contains("smaller than one folio"), "{e}");
}

#[test]
fn swap_file_on_a_read_only_path_is_refused() {
    if common::swap_or_skip(builder()).is_none() {
        return;
    }
    // /proc is read-only for file creation, whatever the user.
    let e = builder().swap_file("/proc/uswap-swap", 64 << 20).build().unwrap_err();
    assert!(matches!(e, Error::SwapFile { .. }), "{e}");
    assert!(e.to_string().contains("/proc/uswap-swap"), "{e}");
}

/// Voluntary context switches of every `uswap-cow` thread of this process, by thread id.
fn breaker_switches() -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim() != "uswap-cow" {
            continue;
        }
        let status = std::fs::read_to_string(path.join("status")).unwrap_or_default();
        let switches = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok());
        if let Some(switches) = switches {
            out.push((task.file_name().to_string_lossy().into_owned(), switches));
        }
    }
    out
}

#[test]
fn the_copy_on_write_breaker_sleeps_until_there_is_work() {
    let Some(swap) = swap_or_skip(builder()) else { return };
    // A new thread names itself once it runs: wait for that, then for it to reach its wait.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while breaker_switches().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    let before = breaker_switches();
    assert!(!before.is_empty(), "no uswap-cow thread");
    // Without a fork nothing is queued: the breaker must not wake at all (it used to wake
    // every 100 ms to look at its stop flag).
    std::thread::sleep(std::time::Duration::from_millis(350));
    let after = breaker_switches();
    for (tid, switches) in &before {
        if let Some((_, now)) = after.iter().find(|(t, _)| t == tid) {
            assert_eq!(now, switches, "uswap-cow {tid} woke without work");
        }
    }
    drop(swap); // the stop reaches a breaker that waits without a timeout: no hang
}
