//! Named edge cases of the pool: setup refusals, each store outcome, the limit and its
//! hysteresis, every writeback branch, corruption, exclusive loads.

mod common;

use common::{clear_referenced, config, page, slot, text_page, Device};
use slots::{SwapEntry, SwapType};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use zswap::compress::{CompressorConfig, CompressorKind, PAGE_SIZE};
use zswap::corpus::PageKind;
use zswap::{Error, FaultHooks, Incompressible, Reject, Zswap, ZswapConfig};

const MIB: u64 = 1 << 20;
const SLOTS: u64 = 1 << 16;

fn pool(name: &str) -> Zswap {
    Zswap::new(config(name, 64 * MIB), SLOTS).expect("setup")
}

#[test]
fn bad_setups_are_clear_errors() {
    let err = |config: ZswapConfig, nr_slots| Zswap::new(config, nr_slots).expect_err("refused");
    assert_eq!(err(config("lz4", 0), SLOTS), Error::ZeroBudget);
    let mut c = config("lz4", 64 * MIB);
    c.max_pool_percent = 0;
    let e = err(c.clone(), SLOTS);
    assert!(matches!(e, Error::Percent { what: "max_pool_percent", percent: 0, .. }), "{e}");
    c.max_pool_percent = 101;
    assert!(err(c, SLOTS).to_string().contains("max_pool_percent = 101 is not in 1..=100"));
    let mut c = config("lz4", 64 * MIB);
    c.accept_threshold_percent = 150;
    assert!(matches!(err(c, SLOTS), Error::Percent { what: "accept_threshold_percent", .. }));
    // 20% of 256 KiB is under the 64 KiB floor; 20% of 1 PiB over the allocator's 64 GiB.
    let small = err(config("lz4", 256 << 10), SLOTS);
    assert!(matches!(small, Error::PoolLimit { limit_bytes: 52_428, .. }), "{small}");
    assert!(small.to_string().contains("pool limit 52428 bytes"), "{small}");
    assert!(matches!(err(config("lz4", 1 << 50), SLOTS), Error::PoolLimit { .. }));
    assert!(matches!(err(config("lz4", 64 * MIB), 0), Error::NrSlots { nr_slots: 0, .. }));
    let too_many = slots::MAX_SLOTS + 1;
    assert!(matches!(err(config("lz4", 64 * MIB), too_many), Error::NrSlots { .. }));
    // A zstd level built by hand rather than parsed is checked too.
    let c = ZswapConfig::new(CompressorConfig::new(CompressorKind::Zstd { level: 9 }), 64 * MIB);
    assert!(matches!(err(c, SLOTS), Error::ZstdLevel { .. }));
    let unknown = "lzo".parse::<CompressorKind>().expect_err("unknown");
    assert!(unknown.to_string().contains("unknown compressor \"lzo\""));
}

#[test]
fn store_load_round_trip_every_compressor() {
    for name in ["lz4", "zstd:1", "zstd:3", "none"] {
        let zswap = pool(name);
        for (i, kind) in PageKind::ALL.into_iter().enumerate() {
            let data = page(kind, i as u64);
            zswap.store(slot(i as u64 + 1), &data).expect("store");
            zswap.check_invariants();
        }
        for (i, kind) in PageKind::ALL.into_iter().enumerate() {
            let mut back = [0u8; PAGE_SIZE];
            assert_eq!(zswap.load(slot(i as u64 + 1), &mut back), Ok(true), "{name}");
            assert_eq!(back, *page(kind, i as u64), "{name} {kind:?}");
        }
        let stats = zswap.stats();
        assert_eq!((stats.stored_pages, stats.zswpout, stats.zswpin), (6, 6, 6), "{name}");
        // Random pages do not compress: stored raw; `none` stores every page raw.
        let raw = if name == "none" { 6 } else { 1 };
        assert_eq!(stats.stored_incompressible_pages, raw, "{name}");
        assert_eq!(stats.pool_total_size, zswap.total_bytes());
        // The data alone: a raw page is 4096 bytes, the others compress.
        let page_bytes = PAGE_SIZE as u64;
        if name == "none" {
            assert_eq!(stats.compressed_bytes, 6 * page_bytes);
        } else {
            let compressed = stats.compressed_bytes;
            assert!(compressed > page_bytes && compressed < 6 * page_bytes, "{name} {compressed}");
        }
        zswap.check_invariants();
    }
}

#[test]
fn load_of_an_empty_slot_is_false_and_leaves_the_page() {
    let zswap = pool("lz4");
    let mut back = [7u8; PAGE_SIZE];
    assert_eq!(zswap.load(slot(5), &mut back), Ok(false));
    assert_eq!(back, [7u8; PAGE_SIZE]);
    assert!(!zswap.contains(slot(5)));
    assert_eq!(zswap.stats().load_misses, 1);
}

#[test]
fn invalidate_drops_the_entry_and_is_idempotent() {
    let zswap = pool("lz4");
    zswap.store(slot(9), &text_page(1)).expect("store");
    assert!(zswap.contains(slot(9)));
    zswap.invalidate(slot(9));
    zswap.invalidate(slot(9));
    zswap.check_invariants();
    assert!(!zswap.contains(slot(9)));
    let stats = zswap.stats();
    assert_eq!((stats.invalidated, stats.stored_pages), (1, 0));
    assert_eq!(zswap.zpool().stats().objects, 0);
}

#[test]
fn a_second_store_replaces_and_frees_the_first() {
    let zswap = pool("lz4");
    zswap.store(slot(3), &text_page(1)).expect("store");
    zswap.store(slot(3), &text_page(2)).expect("store again");
    zswap.check_invariants();
    let mut back = [0u8; PAGE_SIZE];
    assert_eq!(zswap.load(slot(3), &mut back), Ok(true));
    assert_eq!(back, *text_page(2));
    let stats = zswap.stats();
    assert_eq!((stats.stored_pages, stats.replaced_entries), (1, 1));
    assert_eq!(zswap.lru_order().len(), 1);
}

#[test]
fn incompressible_pages_are_stored_raw_by_default_or_rejected() {
    let random = page(PageKind::Random, 4);
    let zswap = pool("lz4");
    zswap.store(slot(1), &random).expect("stored raw");
    let mut back = [0u8; PAGE_SIZE];
    assert_eq!(zswap.load(slot(1), &mut back), Ok(true));
    assert_eq!(back, *random);
    assert_eq!(zswap.stats().stored_incompressible_pages, 1);

    let mut c = config("lz4", 64 * MIB);
    c.incompressible = Incompressible::Reject;
    let zswap = Zswap::new(c, SLOTS).expect("setup");
    assert_eq!(zswap.store(slot(1), &random), Err(Reject::CompressPoor));
    let stats = zswap.stats();
    assert_eq!((stats.reject_compress_poor, stats.stored_pages), (1, 0));
    zswap.check_invariants();
}

#[test]
fn a_failed_store_invalidates_the_older_entry() {
    // The kernel's rule too (`zswap_store` invalidates on failure): without this, writeback could
    // later put the stale page on the device over the newer one.
    let mut c = config("lz4", 64 * MIB);
    c.incompressible = Incompressible::Reject;
    let zswap = Zswap::new(c, SLOTS).expect("setup");
    zswap.store(slot(2), &text_page(1)).expect("store");
    let result = zswap.store(slot(2), &page(PageKind::Random, 1));
    assert_eq!(result, Err(Reject::CompressPoor));
    assert!(!zswap.contains(slot(2)), "the stale entry must be gone");
    assert_eq!(zswap.stats().failed_store_invalidated, 1);
    zswap.check_invariants();
}

#[test]
fn compressor_failures_are_stored_raw_or_rejected() {
    let fail = Arc::new(AtomicBool::new(true));
    let hook = Arc::clone(&fail);
    let faults =
        FaultHooks { compress_fail: Some(Arc::new(move |_| hook.load(Relaxed))), alloc_fail: None };
    let zswap =
        Zswap::with_faults(config("zstd:1", 64 * MIB), SLOTS, faults.clone()).expect("setup");
    zswap.store(slot(1), &text_page(1)).expect("stored raw");
    let mut back = [0u8; PAGE_SIZE];
    assert_eq!(zswap.load(slot(1), &mut back), Ok(true));
    assert_eq!(back, *text_page(1));
    let stats = zswap.stats();
    assert_eq!((stats.compress_fail_stored_raw, stats.stored_incompressible_pages), (1, 1));

    let mut c = config("zstd:1", 64 * MIB);
    c.incompressible = Incompressible::Reject;
    let zswap = Zswap::with_faults(c, SLOTS, faults).expect("setup");
    assert_eq!(zswap.store(slot(1), &text_page(1)), Err(Reject::CompressFail));
    assert_eq!(zswap.stats().reject_compress_fail, 1);
    fail.store(false, Relaxed);
    zswap.store(slot(1), &text_page(1)).expect("store once the fault is gone");
    zswap.check_invariants();
}

#[test]
fn allocation_failure_is_a_reject_and_drops_the_older_entry() {
    let fail = Arc::new(AtomicBool::new(false));
    let hook = Arc::clone(&fail);
    let faults =
        FaultHooks { compress_fail: None, alloc_fail: Some(Arc::new(move |_| hook.load(Relaxed))) };
    let zswap = Zswap::with_faults(config("lz4", 64 * MIB), SLOTS, faults).expect("setup");
    zswap.store(slot(1), &text_page(1)).expect("store");
    fail.store(true, Relaxed);
    // A random page goes to the huge class, which has no zspage yet: the allocation fails.
    assert_eq!(zswap.store(slot(1), &page(PageKind::Random, 2)), Err(Reject::AllocFail));
    assert!(!zswap.contains(slot(1)));
    let stats = zswap.stats();
    assert_eq!((stats.reject_alloc_fail, stats.failed_store_invalidated), (1, 1));
    zswap.check_invariants();
}

#[test]
fn pool_limit_with_hysteresis() {
    // 8 MiB budget at 20%: a 1.6 MiB limit, accepting again at 90% of it.
    let zswap = Zswap::new(config("lz4", 8 * MIB), SLOTS).expect("setup");
    let limits = zswap.limits();
    assert_eq!(limits.max_pool_bytes, 8 * MIB / 5);
    assert_eq!(limits.accept_bytes, limits.max_pool_bytes * 9 / 10);
    let mut stored = Vec::new();
    let mut offset = 1;
    // Random pages take a whole page each; 1.6 MiB fills within ~400.
    loop {
        assert!(offset < 2000, "the limit never bit");
        match zswap.store(slot(offset), &page(PageKind::Random, offset)) {
            Ok(()) => stored.push(offset),
            Err(reason) => {
                assert_eq!(reason, Reject::PoolLimit);
                break;
            }
        }
        offset += 1;
    }
    assert!(zswap.is_full());
    assert!(zswap.total_bytes() >= limits.max_pool_bytes);
    assert_eq!(zswap.stats().pool_limit_hit, 1);
    // Just under the limit, above the accept threshold: still refused, counted apart.
    while zswap.total_bytes() >= limits.max_pool_bytes {
        zswap.invalidate(slot(stored.pop().expect("entries")));
    }
    assert!(zswap.total_bytes() > limits.accept_bytes);
    assert_eq!(zswap.store(slot(offset), &text_page(1)), Err(Reject::PoolLimit));
    assert_eq!(zswap.stats().reject_accept_threshold, 1);
    assert!(zswap.is_full());
    // Under the accept threshold: accepted again.
    while zswap.total_bytes() > limits.accept_bytes {
        zswap.invalidate(slot(stored.pop().expect("entries")));
    }
    assert!(!zswap.is_full());
    zswap.store(slot(offset), &text_page(1)).expect("accepted below the threshold");
    zswap.check_invariants();
}

#[test]
fn writeback_spares_referenced_entries_once_then_writes_the_coldest() {
    let zswap = pool("lz4");
    let device = Device::new();
    for offset in 1..=3 {
        device.alloc(slot(offset));
        device.swap_out(&zswap, slot(offset), &text_page(offset)).expect("store");
    }
    // New entries are referenced: the first pass (2 looks for 1 page) only clears bits.
    assert_eq!(zswap.writeback(device.as_ref(), 1), 0);
    assert_eq!(zswap.stats().writeback_second_chance, 2);
    // LRU now: 2, 1 (bits clear) at the head, 3 (referenced) at the tail.
    assert_eq!(zswap.writeback(device.as_ref(), 1), 1);
    assert!(!zswap.contains(slot(1)), "slot 1 was the coldest unreferenced entry");
    assert_eq!(*device.data(slot(1)).expect("on the device"), *text_page(1));
    assert_eq!(*device.swap_in(&zswap, slot(1)).expect("swap-in"), *text_page(1));
    let stats = zswap.stats();
    assert_eq!((stats.written_back_pages, stats.stored_pages), (1, 2));
    assert_eq!(device.pins_held(), 0);
    zswap.check_invariants();
}

/// A pass that writes nothing says what it spared: progress, which the engine's shrinker
/// goes on after (a pool whose entries were all stored since its last pass).
#[test]
fn a_pass_that_only_spares_entries_says_so() {
    let zswap = pool("lz4");
    let device = Device::new();
    for offset in 1..=4 {
        device.alloc(slot(offset));
        device.swap_out(&zswap, slot(offset), &text_page(offset)).expect("store");
    }
    let pass = zswap.writeback_pass(device.as_ref(), 1);
    assert_eq!(pass, zswap::Pass { written: 0, spared: 2 });
    let pass = zswap.writeback_pass(device.as_ref(), 1);
    assert_eq!(pass, zswap::Pass { written: 0, spared: 2 }, "the other two entries");
    let pass = zswap.writeback_pass(device.as_ref(), 1);
    assert_eq!(pass, zswap::Pass { written: 1, spared: 0 }, "every bit clear now");
    zswap.check_invariants();
}

#[test]
fn a_loaded_entry_gets_its_second_chance_back() {
    let zswap = pool("lz4");
    let device = Device::new();
    for offset in 1..=2 {
        device.alloc(slot(offset));
        device.swap_out(&zswap, slot(offset), &text_page(offset)).expect("store");
    }
    assert_eq!(zswap.writeback(device.as_ref(), 1), 0); // clears both bits
    device.swap_in(&zswap, slot(1)).expect("load sets the bit again");
    assert_eq!(zswap.writeback(device.as_ref(), 1), 1);
    assert!(zswap.contains(slot(1)) && !zswap.contains(slot(2)));
}

#[test]
fn a_failed_device_write_keeps_the_entry() {
    let zswap = pool("lz4");
    let device = Device::new();
    device.alloc(slot(1));
    device.swap_out(&zswap, slot(1), &text_page(1)).expect("store");
    device.fail_writes.store(true, Relaxed);
    // One look spares it, the other 7 try and fail (a failed entry goes to the head,
    // which with one entry is also the tail).
    assert_eq!(zswap.writeback(device.as_ref(), 4), 0);
    assert!(zswap.contains(slot(1)));
    assert!(device.data(slot(1)).is_none());
    let stats = zswap.stats();
    assert_eq!((stats.writeback_write_fail, stats.reject_reclaim_fail), (7, 7));
    assert_eq!(device.pins_held(), 0);
    device.fail_writes.store(false, Relaxed);
    assert_eq!(zswap.writeback(device.as_ref(), 4), 1);
    assert_eq!(*device.swap_in(&zswap, slot(1)).expect("swap-in"), *text_page(1));
    zswap.check_invariants();
}

#[test]
fn writeback_stops_at_a_slot_a_swap_in_holds() {
    let zswap = pool("lz4");
    let device = Device::new();
    for offset in 1..=4 {
        device.alloc(slot(offset));
        device.swap_out(&zswap, slot(offset), &text_page(offset)).expect("store");
    }
    clear_referenced(&zswap, &device, 4);
    device.pin_wait(slot(1)); // a swap-in of the coldest slot is in flight
    assert_eq!(zswap.writeback(device.as_ref(), 3), 0);
    let stats = zswap.stats();
    assert_eq!(stats.writeback_warm_stop, 1);
    assert_eq!(stats.written_back_pages, 0, "stopped, did not go on to slots 2..4");
    device.unpin_slot(slot(1));
    zswap.check_invariants();
}

#[test]
fn writeback_skips_a_slot_being_freed() {
    let zswap = Arc::new(pool("lz4"));
    let device = Device::new();
    for offset in 1..=2 {
        device.alloc(slot(offset));
        device.swap_out(&zswap, slot(offset), &text_page(offset)).expect("store");
    }
    clear_referenced(&zswap, &device, 2);
    // Slot 1 is freed (and its entry invalidated) after writeback took it from the LRU and
    // before the pin: the pin is refused and the tree no longer holds the entry.
    let (freer, dev) = (Arc::clone(&zswap), Arc::clone(&device));
    device.before_pin.lock().replace(Box::new(move |entry| {
        if entry == slot(1) {
            dev.mark_free(entry);
            freer.invalidate(entry);
        }
    }));
    assert_eq!(zswap.writeback(device.as_ref(), 1), 1);
    assert_eq!(zswap.stats().writeback_skipped_freed, 1);
    assert!(!zswap.contains(slot(2)), "went on past the freed slot");
    zswap.check_invariants();
}

#[test]
fn writeback_writes_nothing_stale_for_a_slot_freed_and_reused_before_its_pin() {
    // The ABA case `zswap_writeback_entry` guards against: between the LRU unlock and the pin, the
    // slot is freed (its entry invalidated), allocated again and stored with new data. The
    // pin then succeeds on the new owner's slot. Writeback knows the candidate only by its
    // slot until the pin holds it, so what it reads then is the new owner's entry: that
    // page is written, and the old one never reaches the device.
    let zswap = Arc::new(pool("lz4"));
    let device = Device::new();
    for offset in 1..=2 {
        device.alloc(slot(offset));
        device.swap_out(&zswap, slot(offset), &text_page(offset)).expect("store");
    }
    clear_referenced(&zswap, &device, 2);
    let (racer, dev) = (Arc::clone(&zswap), Arc::clone(&device));
    let once = AtomicBool::new(true);
    device.before_pin.lock().replace(Box::new(move |entry| {
        if entry == slot(1) && once.swap(false, Relaxed) {
            dev.free(&racer, entry);
            dev.alloc(entry);
            dev.swap_out(&racer, entry, &text_page(100)).expect("new owner's store");
        }
    }));
    assert_eq!(zswap.writeback(device.as_ref(), 1), 1);
    assert_eq!(zswap.stats().writeback_raced, 0);
    assert_eq!(device.data(slot(1)).as_deref(), Some(&*text_page(100)), "the new owner's page");
    assert!(!zswap.contains(slot(1)) && zswap.contains(slot(2)));
    assert_eq!(*device.swap_in(&zswap, slot(1)).expect("swap-in"), *text_page(100));
    zswap.check_invariants();
}

#[test]
fn writeback_checks_the_entry_by_identity_after_pinning() {
    // A target that breaks the contract on purpose: while the pin is held, after writeback
    // copied the entry out, the slot is stored again. Writeback must see another entry
    // when it comes to erase, and keep the new one: the device's copy is then older than
    // the pool's, and loads find the pool's first.
    let zswap = Arc::new(pool("lz4"));
    let device = Device::new();
    for offset in 1..=2 {
        device.alloc(slot(offset));
        device.swap_out(&zswap, slot(offset), &text_page(offset)).expect("store");
    }
    clear_referenced(&zswap, &device, 2);
    let racer = Arc::clone(&zswap);
    device.on_write.lock().replace(Box::new(move |entry| {
        if entry == slot(1) {
            racer.store(entry, &text_page(2)).expect("racing store");
        }
    }));
    // Slot 1 is the tail: the racing store replaces it while its old page is written; the
    // next look finds slot 2, which is written back.
    assert_eq!(zswap.writeback(device.as_ref(), 1), 1);
    assert_eq!(zswap.stats().writeback_raced, 1);
    assert_eq!(device.writes(), 2);
    assert!(!zswap.contains(slot(2)), "slot 2 written back");
    let mut back = [0u8; PAGE_SIZE];
    assert_eq!(zswap.load(slot(1), &mut back), Ok(true), "the new entry is kept");
    assert_eq!(back, *text_page(2));
    zswap.check_invariants();
}

#[test]
fn a_corrupt_object_is_an_error_counted_and_kept() {
    let zswap = pool("lz4");
    let device = Device::new();
    device.alloc(slot(1));
    device.swap_out(&zswap, slot(1), &text_page(1)).expect("store");
    assert!(zswap.corrupt_object(slot(1), |object| object.fill(0xff)));
    assert!(!zswap.corrupt_object(slot(2), |_| unreachable!("no entry")));
    let mut back = [7u8; PAGE_SIZE];
    let err = zswap.load(slot(1), &mut back).expect_err("corrupt");
    assert!(matches!(err, Error::Corrupt { .. } | Error::WrongLength { .. }), "{err}");
    assert_eq!(back, [0u8; PAGE_SIZE], "no half-decoded bytes");
    assert!(zswap.contains(slot(1)), "the entry is kept");
    // Writeback does not put it on the device either (1 look spares it, 3 fail).
    assert_eq!(zswap.writeback(device.as_ref(), 2), 0);
    let stats = zswap.stats();
    assert_eq!((stats.decompress_fail, stats.writeback_decompress_fail), (4, 3));
    assert_eq!(device.writes(), 0);
    zswap.check_invariants();
}

#[test]
fn with_checksums_a_flipped_byte_is_caught() {
    let mut c = config("lz4", 64 * MIB);
    c.compressor.checksum = true;
    let zswap = Zswap::new(c, SLOTS).expect("setup");
    zswap.store(slot(1), &text_page(1)).expect("store");
    // Flip one literal byte near the end of the stream: still a valid lz4 stream.
    zswap.corrupt_object(slot(1), |object| {
        let at = object.len() - 6;
        object[at] ^= 0x01;
    });
    let mut back = [0u8; PAGE_SIZE];
    let err = zswap.load(slot(1), &mut back).expect_err("caught");
    assert!(matches!(err, Error::ChecksumMismatch { .. } | Error::Corrupt { .. }), "{err}");
    assert_eq!(zswap.stats().decompress_fail, 1);
}

#[test]
fn exclusive_loads_drop_the_entry_only_after_a_good_decode() {
    let mut c = config("lz4", 64 * MIB);
    c.exclusive_load = true;
    let zswap = Zswap::new(c, SLOTS).expect("setup");
    zswap.store(slot(1), &text_page(1)).expect("store");
    zswap.store(slot(2), &text_page(2)).expect("store");
    let mut back = [0u8; PAGE_SIZE];
    assert_eq!(zswap.load(slot(1), &mut back), Ok(true));
    assert_eq!(back, *text_page(1));
    assert!(!zswap.contains(slot(1)));
    zswap.corrupt_object(slot(2), |object| object.fill(0xff));
    assert!(zswap.load(slot(2), &mut back).is_err());
    assert!(zswap.contains(slot(2)), "a failed exclusive load keeps the entry");
    assert_eq!(zswap.stats().exclusive_loads, 1);
    zswap.check_invariants();
}

#[test]
fn compaction_keeps_every_page() {
    let zswap = pool("zstd:1");
    let kinds = PageKind::ALL;
    for offset in 1..=600u64 {
        let kind = kinds[offset as usize % kinds.len()];
        zswap.store(slot(offset), &page(kind, offset)).expect("store");
    }
    for offset in (1..=600u64).filter(|o| o % 3 != 0) {
        zswap.invalidate(slot(offset));
    }
    let before = zswap.zpool().pages_held();
    zswap.compact();
    assert!(zswap.zpool().pages_held() < before, "compaction freed nothing");
    zswap.check_invariants();
    for offset in (3..=600u64).step_by(3) {
        let kind = kinds[offset as usize % kinds.len()];
        let mut back = [0u8; PAGE_SIZE];
        assert_eq!(zswap.load(slot(offset), &mut back), Ok(true));
        assert_eq!(back, *page(kind, offset));
    }
}

#[test]
#[should_panic(expected = "beyond a device of 65536 slots")]
fn an_entry_beyond_the_device_is_a_bug() {
    pool("lz4").invalidate(slot(SLOTS));
}

#[test]
fn trees_split_the_device_every_16384_slots() {
    let zswap = pool("lz4");
    for offset in [1, 16383, 16384, 16385, SLOTS - 1] {
        zswap.store(slot(offset), &text_page(offset)).expect("store");
    }
    zswap.check_invariants();
    for offset in [1, 16383, 16384, 16385, SLOTS - 1] {
        let mut back = [0u8; PAGE_SIZE];
        assert_eq!(zswap.load(slot(offset), &mut back), Ok(true));
        assert_eq!(back, *text_page(offset));
    }
    assert_eq!(zswap::TREE_SLOTS, 16384);
}

/// A folio's pages read in one call equal page-by-page loads, for every compressor (their
/// objects in several classes, raw and compressed); a hole reads nothing; an exclusive
/// load drops every entry.
#[test]
fn a_folio_loads_whole_or_not_at_all() {
    for name in ["lz4", "zstd:1", "none"] {
        for exclusive in [false, true] {
            let mut c = config(name, 64 * MIB);
            c.exclusive_load = exclusive;
            let zswap = Zswap::new(c, SLOTS).expect("setup");
            let kinds = PageKind::ALL;
            let want: Vec<_> = (0..16).map(|i| page(kinds[i % kinds.len()], i as u64)).collect();
            for (i, data) in want.iter().enumerate() {
                zswap.store(slot(32 + i as u64), data).expect("store");
            }
            let mut back = vec![[9u8; PAGE_SIZE]; 16];
            let loaded = zswap.load_folio(slot(32), back.as_flattened_mut());
            assert_eq!(loaded, Ok(true), "{name} exclusive {exclusive}");
            for (i, data) in want.iter().enumerate() {
                assert_eq!(back[i], **data, "{name} exclusive {exclusive}: page {i}");
            }
            assert_eq!(zswap.stats().zswpin, 16);
            assert_eq!(zswap.count_range(slot(32), 16), if exclusive { 0 } else { 16 });
            if name == "none" && !exclusive {
                // Raw pages stored in turn lie back to back: one copy for the folio.
                assert_eq!(zswap.stats().raw_pages_loaded_joined, 16);
            }
            // A hole among the slots: nothing is read (the buffers keep their bytes).
            zswap.store(slot(64), &want[0]).expect("store");
            zswap.store(slot(66), &want[2]).expect("store");
            let mut back = vec![[9u8; PAGE_SIZE]; 3];
            assert_eq!(zswap.load_folio(slot(64), back.as_flattened_mut()), Ok(false));
            assert!(back.iter().all(|p| p.iter().all(|&b| b == 9)), "{name}: a miss reads none");
            assert_eq!(zswap.count_range(slot(64), 3), 2, "{name}: a miss drops nothing");
            zswap.check_invariants();
        }
    }
}

/// A folio load that meets a corrupt object fails with the decompressor's error.
#[test]
fn a_folio_load_reports_a_corrupt_page() {
    let zswap = pool("lz4");
    for i in 0..4 {
        zswap.store(slot(8 + i), &text_page(i)).expect("store");
    }
    zswap.corrupt_object(slot(10), |object| object.fill(0xff));
    let mut back = vec![[0u8; PAGE_SIZE]; 4];
    assert!(zswap.load_folio(slot(8), back.as_flattened_mut()).is_err());
    assert_eq!(zswap.stats().decompress_fail, 1);
    assert_eq!(back[2], [0u8; PAGE_SIZE], "the failed page is zero-filled");
    assert_eq!(zswap.count_range(slot(8), 4), 4, "the entries stay");
    zswap.check_invariants();
}

#[test]
fn invalidate_range_drops_every_entry_of_a_folio_and_nothing_else() {
    let zswap = pool("lz4");
    let page = [5u8; 4096];
    for offset in [16, 17, 19, 24] {
        zswap.store(slot(offset), &page).expect("store");
    }
    assert_eq!(zswap.count_range(slot(16), 8), 3, "16, 17 and 19 of 16..24");
    assert_eq!(zswap.count_range(slot(16), 9), 4);
    assert_eq!(zswap.count_range(slot(16), 0), 0);
    zswap.invalidate_range(slot(16), 8); // slots 16..24: three entries and five holes
    assert_eq!(zswap.count_range(slot(16), 8), 0);
    for offset in [16, 17, 19] {
        assert!(!zswap.contains(slot(offset)), "slot {offset} kept");
    }
    assert!(zswap.contains(slot(24)), "the slot after the range stays");
    assert_eq!(zswap.stats().invalidated, 3);
    assert_eq!(zswap.stored_pages(), 1);
    zswap.invalidate_range(slot(32), 16); // nothing there
    zswap.check_invariants();
}

#[test]
fn an_entry_costs_its_index_slot_and_its_links_and_nothing_more() {
    // Each stored page costs its share of the index (an XArray value entry, the object's
    // handle: about 9 bytes when dense) and 8 bytes of LRU links in a table by slot: 17.3
    // bytes in all here. The first design added an `Arc` per entry (91-93 bytes in all),
    // the second a 40-byte node per entry (about 49). 16384 pages fill one tree's key
    // range densely.
    let zswap = Zswap::new(config("lz4", 1024 * MIB), SLOTS).expect("setup");
    let entries = 16384;
    for offset in 0..entries {
        zswap.store(slot(offset), &text_page(offset)).expect("store");
    }
    let per_entry = zswap.stats().metadata_bytes as f64 / entries as f64;
    assert!((16.0..24.0).contains(&per_entry), "{per_entry:.1} bytes of metadata per entry");
    zswap.invalidate_range(slot(0), 512);
    let after = zswap.stats().metadata_bytes as f64 / entries as f64;
    assert!(after <= per_entry, "freed entries cost more: {after:.1} > {per_entry:.1}");
    zswap.check_invariants();
}

#[test]
#[should_panic(expected = "this pool serves swap type 0")]
fn an_entry_of_another_device_is_a_bug() {
    // One pool serves one device: entries carry no type of their own, so a store or load
    // of another device's entry must not pass for this device's slot.
    let zswap = pool("lz4");
    zswap.store(slot(1), &text_page(1)).expect("store");
    let other = SwapEntry::new(SwapType::new(1).unwrap(), 1);
    let mut back = [0u8; PAGE_SIZE];
    let _ = zswap.load(other, &mut back);
}
