//! The seed RFC's zero-page program on the library: 20 MiB written with zeros, paged out,
//! then every byte read. Zero-filled pages are kept as zero-map bits (no storage) and a read
//! fault on one maps the shared zero page, so the reads add (almost) nothing to the resident
//! set. The seed measured 21268 kB without zero-page mapping and 792 kB with it.
//!
//! Measured honestly: whole-process VmRSS at each step, and the growth over the reads. The
//! baseline is the test binary itself (the Rust runtime, the test harness's threads and
//! allocations, the engine's metadata): a few MiB that a small C program does not carry,
//! which is why the C version (crates/capi/examples/zero_page.c) reports the cleaner
//! whole-process figure.

mod common;

use common::swap_or_skip;
use frontend::{Delivery, Uswap, PAGE_SIZE};
use uffd::MemStatus;

const LEN: usize = 20 << 20;

fn kib(bytes: u64) -> u64 {
    bytes / 1024
}

/// The two tests measure the same process's RSS: one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn zero_pages_cost_nothing(delivery: Delivery) {
    let _serial = serial();
    let builder =
        Uswap::builder().budget_bytes(64 << 20).swap_size_bytes(64 << 20).delivery(delivery);
    let Some(swap) = swap_or_skip(builder) else { return };
    let start = MemStatus::read().unwrap();
    let mut region = swap.map(LEN).unwrap();
    region.as_mut_slice().fill(0);
    common::settle_resident(&swap, (LEN / PAGE_SIZE) as u64);
    let written = MemStatus::read().unwrap();
    assert_eq!(region.pageout(0, LEN).unwrap(), (LEN / PAGE_SIZE) as u64);
    let paged_out = MemStatus::read().unwrap();
    let sum: u64 = region.as_slice().iter().map(|&b| u64::from(b)).sum();
    assert_eq!(std::hint::black_box(sum), 0, "every byte reads as zero");
    let read = MemStatus::read().unwrap();
    let stats = swap.stats().unwrap();
    eprintln!(
        "{}: VmRSS start {} kB, after writing 20 MiB of zeros {} kB, after pageout {} kB, \
         after reading every byte {} kB (growth over the reads {} kB); swpout_zero {}, \
         swpin_zero {}, zeropage-mapped pages {}",
        delivery.name(),
        kib(start.rss_bytes),
        kib(written.rss_bytes),
        kib(paged_out.rss_bytes),
        kib(read.rss_bytes),
        kib(read.rss_bytes.saturating_sub(paged_out.rss_bytes)),
        stats.engine.counters.swpout_zero,
        stats.engine.counters.swpin_zero,
        stats.source.map_zero_pages,
    );
    // The write did cost memory (so the measurement can tell), the page-out gave it back,
    // and the reads of 20 MiB of zero pages cost less than 2 MiB.
    assert!(written.rss_bytes >= start.rss_bytes + (LEN as u64 * 9 / 10), "written");
    assert!(paged_out.rss_bytes + (LEN as u64 * 9 / 10) <= written.rss_bytes, "paged out");
    assert!(read.rss_bytes < paged_out.rss_bytes + (2 << 20), "reads grew the RSS");
    assert_eq!(stats.engine.counters.swpout_zero, (LEN / PAGE_SIZE) as u64);
    assert_eq!(stats.source.map_zero_pages, (LEN / PAGE_SIZE) as u64, "all zero-page mapped");
}

#[test]
fn zero_pages_cost_nothing_handler_mode() {
    zero_pages_cost_nothing(Delivery::Handler);
}

#[test]
fn zero_pages_cost_nothing_sigbus_mode() {
    zero_pages_cost_nothing(Delivery::Sigbus);
}
