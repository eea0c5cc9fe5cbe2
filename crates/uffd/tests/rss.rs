//! Kernel behaviour measured by the resident set: a ZEROPAGE'd read costs no memory.
//!
//! Alone in its binary so that no other test allocates while VmRSS is compared.

mod common;

use common::uffd_or_skip;
use uffd::{CopyMode, Features, Mapping, MemStatus, RegisterMode, Wake, PAGE_SIZE};

const PAGES: usize = 2048; // 8 MiB: far above the noise of a test process's own allocations

/// Fact: reading 8 MiB of ZEROPAGE'd pages adds (almost) nothing to VmRSS, while 8 MiB of
/// COPY'd pages adds (at least almost) 8 MiB.
#[test]
fn zeropage_reads_cost_no_resident_memory_and_copies_do() {
    let Some(uffd) = uffd_or_skip(Features::NONE) else { return };
    let zero = Mapping::anonymous(PAGES * PAGE_SIZE).unwrap();
    let copied = Mapping::anonymous(PAGES * PAGE_SIZE).unwrap();
    uffd.register(zero.range(), RegisterMode::MISSING).unwrap();
    uffd.register(copied.range(), RegisterMode::MISSING).unwrap();
    let source = vec![1u8; PAGES * PAGE_SIZE];

    let before = MemStatus::read().unwrap().rss_bytes;
    uffd.zeropage(zero.range(), Wake::Wake).unwrap();
    let sum: u64 = (0..PAGES).map(|i| u64::from(zero.load_u8(i * PAGE_SIZE))).sum();
    assert_eq!(sum, 0);
    let after_zero = MemStatus::read().unwrap().rss_bytes;
    uffd.copy(copied.addr(), &source, CopyMode::NONE).unwrap();
    let after_copy = MemStatus::read().unwrap().rss_bytes;

    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let zero_growth = after_zero.saturating_sub(before);
    let copy_growth = after_copy.saturating_sub(after_zero);
    eprintln!(
        "VmRSS growth: zero page {:.2} MiB, copy {:.2} MiB",
        mib(zero_growth),
        mib(copy_growth)
    );
    let total = (PAGES * PAGE_SIZE) as u64;
    assert!(zero_growth < total / 16, "zero-page reads grew RSS by {zero_growth} bytes");
    assert!(copy_growth > total * 7 / 8, "copies grew RSS by only {copy_growth} bytes");
}
