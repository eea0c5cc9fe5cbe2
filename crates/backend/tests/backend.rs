//! Backends: setup refusals of the file backend, sparse files and hole punching, the
//! checksum layer catching torn / lost / corrupt I/O, fault injection, and a model test of
//! every backend against a map of pages.

use backend::{
    Backend, ChecksumBackend, Error, FaultBackend, FaultKind, FaultPlan, FileBackend, FileOptions,
    ForkStep, MemoryBackend, PAGE_SIZE,
};
use proptest::prelude::*;
use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// A directory of the test's own, removed (with what it holds) when dropped.
fn scratch_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("uswap-backend-{name}-")).tempdir().unwrap()
}

fn page(fill: u8) -> Vec<u8> {
    vec![fill; PAGE_SIZE]
}

#[test]
fn file_refuses_an_existing_path() {
    let scratch = scratch_dir("exists");
    let dir = scratch.path();
    let path = dir.join("swap");
    std::fs::write(&path, b"precious").unwrap();
    let err = FileBackend::create(&path, 1 << 20, FileOptions::default());
    assert!(matches!(err, Err(Error::Exists { .. })), "{err:?}");
    assert_eq!(std::fs::read(&path).unwrap(), b"precious", "never overwritten");
}

#[test]
fn file_refuses_bad_sizes_and_full_disks_and_unwritable_places() {
    let scratch = scratch_dir("refuse");
    let dir = scratch.path();
    let path = dir.join("swap");
    let err = FileBackend::create(&path, 0, FileOptions::default());
    assert!(matches!(err, Err(Error::BadSize { size_bytes: 0 })));
    let err = FileBackend::create(&path, 4097, FileOptions::default());
    assert!(matches!(err, Err(Error::BadSize { .. })));
    let err = FileBackend::create(&path, 1 << 60, FileOptions::default());
    assert!(matches!(err, Err(Error::NoSpace { .. })), "{err:?}");
    assert!(!path.exists(), "nothing left behind");
    let err = FileBackend::create(&dir.join("no/such/dir/swap"), 1 << 20, FileOptions::default());
    assert!(matches!(err, Err(Error::Setup { .. })), "{err:?}");
    // /proc accepts no new files, even for root.
    let err = FileBackend::create(
        std::path::Path::new("/proc/uswap.swap"),
        1 << 20,
        FileOptions::default(),
    );
    assert!(matches!(err, Err(Error::Setup { .. }) | Err(Error::NoSpace { .. })), "{err:?}");
}

#[test]
fn file_is_0600_sparse_and_unlinked_by_default() {
    let scratch = scratch_dir("mode");
    let dir = scratch.path();
    let kept = FileBackend::create(
        &dir.join("kept"),
        64 * PAGE_SIZE as u64,
        FileOptions { keep: true, ..FileOptions::default() },
    )
    .unwrap();
    let meta = std::fs::metadata(kept.path()).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.len(), 64 * PAGE_SIZE as u64);
    assert_eq!(meta.blocks(), 0, "sparse: no blocks before the first write");
    let gone = FileBackend::create(dir, 64 * PAGE_SIZE as u64, FileOptions::default()).unwrap();
    let names: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["kept"], "the file made in the directory has no name there");
    gone.write(3, &page(9)).unwrap();
    let mut buf = page(0);
    gone.read(3, &mut buf).unwrap();
    assert_eq!(buf, page(9), "the unlinked file still works through its descriptor");
}

#[test]
fn a_file_larger_than_the_disk_stops_writing_while_the_disk_is_low() {
    let scratch = scratch_dir("keep-free");
    let dir = scratch.path();
    let free = {
        let stat = rustix::fs::statvfs(dir).unwrap();
        stat.f_bavail * stat.f_frsize
    };
    // Larger than the free space: refused by default, created when writes keep a reserve.
    let size = (free + (1 << 30)) / PAGE_SIZE as u64 * PAGE_SIZE as u64;
    let err = FileBackend::create(&dir.join("default"), size, FileOptions::default());
    assert!(matches!(err, Err(Error::NoSpace { .. })), "{err:?}");
    let roomy = FileOptions { keep_free_bytes: Some(0), ..FileOptions::default() };
    let file = FileBackend::create(dir, size, roomy).unwrap();
    file.write(7, &page(3)).unwrap();
    let mut buf = page(0);
    file.read(7, &mut buf).unwrap();
    assert_eq!(buf, page(3));
    // A reserve the disk cannot have: every write is refused (ENOSPC), counted, and what
    // was written before reads back unharmed.
    let starved = FileOptions { keep_free_bytes: Some(u64::MAX), ..FileOptions::default() };
    let file = FileBackend::create(dir, 64 * PAGE_SIZE as u64, starved).unwrap();
    for offset in 0..3 {
        let err = file.write(offset, &page(5)).unwrap_err();
        let Error::Io { op: "write", source, .. } = &err else { panic!("{err:?}") };
        assert_eq!(source.raw_os_error(), Some(rustix::io::Errno::NOSPC.raw_os_error()));
    }
    assert_eq!(file.stats().refused_low_disk, 3);
    assert_eq!(file.stats().write_errors, 3);
    assert_eq!(file.stats().write_pages, 0);
    file.read(0, &mut buf).unwrap();
    assert_eq!(buf, page(0), "nothing was written");
}

/// Two swap files sharing a 4 MiB quota (two 2 MiB chunks): the first write into each new
/// chunk takes it, a write into a third chunk is refused as a full disk refuses it, the
/// file says it is out of space until the quota has room again, and a file dropped (its
/// process gone) or a chunk discarded whole gives its chunks back.
#[test]
fn files_sharing_a_quota_stop_writing_when_it_is_used_up() {
    use backend::quota::{LocalQuota, QUOTA_CHUNK_BYTES, QUOTA_CHUNK_PAGES};
    let scratch = scratch_dir("quota");
    let dir = scratch.path();
    let quota = std::sync::Arc::new(LocalQuota::new(2 * QUOTA_CHUNK_BYTES));
    let options = FileOptions { quota: Some(quota.clone()), ..FileOptions::default() };
    let size = 8 * QUOTA_CHUNK_BYTES;
    let a = FileBackend::create(dir, size, options.clone()).unwrap();
    let b = FileBackend::create(dir, size, options).unwrap();
    a.write(0, &page(1)).unwrap();
    a.write(QUOTA_CHUNK_PAGES - 1, &page(2)).unwrap();
    assert_eq!(quota.used_bytes(), QUOTA_CHUNK_BYTES, "one chunk so far");
    b.write(3 * QUOTA_CHUNK_PAGES, &page(3)).unwrap();
    let err = b.write(5 * QUOTA_CHUNK_PAGES, &page(4)).unwrap_err();
    let Error::Io { op: "write", source, .. } = &err else { panic!("{err:?}") };
    assert_eq!(source.raw_os_error(), Some(rustix::io::Errno::NOSPC.raw_os_error()));
    assert_eq!(b.stats().refused_quota, 1);
    assert!(b.out_of_space());
    b.write(3 * QUOTA_CHUNK_PAGES + 1, &page(5)).unwrap(); // its own chunk: no new space
    assert!(a.write(2 * QUOTA_CHUNK_PAGES, &page(6)).is_err(), "a shares the quota");
    drop(a);
    assert_eq!(quota.used_bytes(), QUOTA_CHUNK_BYTES, "a's chunk went with it");
    assert!(!b.out_of_space(), "room again");
    b.write(5 * QUOTA_CHUNK_PAGES, &page(4)).unwrap();
    b.discard(3 * QUOTA_CHUNK_PAGES, QUOTA_CHUNK_PAGES).unwrap();
    assert_eq!(b.quota_bytes(), QUOTA_CHUNK_BYTES, "the discarded chunk is given back");
    let mut buf = page(0);
    b.read(5 * QUOTA_CHUNK_PAGES, &mut buf).unwrap();
    assert_eq!(buf, page(4));
    drop(b);
    assert_eq!(quota.used_bytes(), 0);
}

/// A forked child's copy of its parent's file (told by `ForkStep::Inherited`) never gives back the
/// parent's quota reservations: dropped in the child, the chunks stay reserved for the
/// parent, which still holds them.
#[test]
fn a_forked_childs_copy_of_a_file_keeps_its_parents_quota() {
    use backend::quota::{LocalQuota, QUOTA_CHUNK_BYTES, QUOTA_CHUNK_PAGES};
    let scratch = scratch_dir("quota-forked");
    let dir = scratch.path();
    let quota = std::sync::Arc::new(LocalQuota::new(4 * QUOTA_CHUNK_BYTES));
    let options = FileOptions { quota: Some(quota.clone()), ..FileOptions::default() };
    let file = FileBackend::create(dir, 8 * QUOTA_CHUNK_BYTES, options).unwrap();
    file.write(0, &page(1)).unwrap();
    file.write(2 * QUOTA_CHUNK_PAGES, &page(2)).unwrap();
    assert_eq!(quota.used_bytes(), 2 * QUOTA_CHUNK_BYTES);
    file.fork(ForkStep::Inherited);
    drop(file);
    assert_eq!(quota.used_bytes(), 2 * QUOTA_CHUNK_BYTES, "the parent's chunks stay");
}

#[test]
fn file_discard_punches_a_hole() {
    let scratch = scratch_dir("punch");
    let dir = scratch.path();
    let opts = FileOptions { keep: true, ..FileOptions::default() };
    let file = FileBackend::create(&dir.join("swap"), 1024 * PAGE_SIZE as u64, opts).unwrap();
    file.write(512, &vec![5u8; 512 * PAGE_SIZE]).unwrap();
    let used = std::fs::metadata(file.path()).unwrap().blocks();
    assert!(used >= 512 * 8, "written pages take blocks ({used})");
    file.discard(512, 512).unwrap();
    let after = std::fs::metadata(file.path()).unwrap().blocks();
    assert!(after < used / 4, "hole punched: {used} -> {after} blocks");
    let mut buf = page(1);
    file.read(700, &mut buf).unwrap();
    assert_eq!(buf, page(0), "a discarded slot reads as zeros");
    assert_eq!(file.stats().discard_pages, 512);
}

/// Pages of the file at `path` in the page cache (`cachestat(2)`, Linux 6.5).
fn cached_pages(path: &std::path::Path) -> u64 {
    #[repr(C)]
    struct Range(u64, u64);
    #[repr(C)]
    #[derive(Default)]
    struct Stat([u64; 5]);
    let file = std::fs::File::open(path).unwrap();
    let mut stat = Stat::default();
    // SAFETY: a valid fd for the call; both structs are repr(C) in the kernel's layout and
    // live across it.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::syscall(451, std::os::fd::AsRawFd::as_raw_fd(&file), &Range(0, 0), &mut stat, 0u32)
    };
    assert_eq!(rc, 0, "cachestat: {}", std::io::Error::last_os_error());
    stat.0[0]
}

#[test]
fn an_uncached_file_keeps_its_pages_out_of_the_page_cache() {
    let scratch = scratch_dir("uncached");
    let dir = scratch.path();
    let size = 1024 * PAGE_SIZE as u64;
    let cached = FileBackend::create(
        &dir.join("cached"),
        size,
        FileOptions { keep: true, ..FileOptions::default() },
    )
    .unwrap();
    let opts = FileOptions { keep: true, uncached: true, ..FileOptions::default() };
    let uncached = match FileBackend::create(&dir.join("uncached"), size, opts) {
        Ok(file) => file,
        Err(Error::Setup { what, .. }) if what.contains("RWF_DONTCACHE") => {
            eprintln!("skipped: this kernel or file system has no RWF_DONTCACHE");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    for file in [&cached, &uncached] {
        for slot in 0..256 {
            file.write(slot, &page(slot as u8)).unwrap();
        }
        let mut buf = page(0);
        file.read(77, &mut buf).unwrap();
        assert_eq!(buf, page(77));
        std::fs::File::open(file.path()).unwrap().sync_all().unwrap();
    }
    assert!(cached_pages(cached.path()) >= 256, "plain writes stay in the page cache");
    // RWF_DONTCACHE drops a page once written back; sync_all has waited for that.
    let left = cached_pages(uncached.path());
    assert!(left < 32, "{left} of 256 uncached pages still in the page cache");
}

#[test]
fn checksum_turns_torn_lost_and_corrupt_io_into_errors() {
    let faulty = FaultBackend::new(MemoryBackend::new(8));
    let checked = ChecksumBackend::new(faulty);
    let mut buf = page(0);
    for (kind, slot) in [(FaultKind::TornWrite, 1), (FaultKind::LostWrite, 2)] {
        checked.write(slot, &page(3)).unwrap();
        checked.inner().arm(FaultPlan { kind, nth: 1, every: false });
        checked.write(slot, &page(4)).unwrap(); // reported as done
        let err = checked.read(slot, &mut buf);
        assert!(matches!(err, Err(Error::Checksum { offset, .. }) if offset == slot), "{kind:?}");
        assert_eq!(checked.inner().stats().injected(kind), 1);
    }
    checked.write(5, &page(6)).unwrap();
    checked.inner().arm(FaultPlan { kind: FaultKind::CorruptRead, nth: 1, every: false });
    assert!(matches!(checked.read(5, &mut buf), Err(Error::Checksum { .. })));
    checked.read(5, &mut buf).unwrap();
    assert_eq!(buf, page(6), "the stored data was never wrong");
    assert_eq!(checked.stats().mismatches, 3);
}

#[test]
fn fault_plans_fire_on_the_nth_operation_and_every_nth() {
    let faulty = FaultBackend::new(MemoryBackend::new(8));
    faulty.arm(FaultPlan { kind: FaultKind::FailWrite, nth: 3, every: true });
    let results: Vec<bool> = (0..7).map(|i| faulty.write(i, &page(1)).is_ok()).collect();
    assert_eq!(results, [true, true, false, true, true, false, true]);
    faulty.arm(FaultPlan { kind: FaultKind::FailRead, nth: 1, every: false });
    let mut buf = page(0);
    assert!(matches!(faulty.read(0, &mut buf), Err(Error::Injected { op: "read", .. })));
    assert!(faulty.read(0, &mut buf).is_ok());
    faulty.arm(FaultPlan { kind: FaultKind::FailDiscard, nth: 1, every: false });
    assert!(faulty.discard(0, 1).is_err());
    faulty.read(0, &mut buf).unwrap();
    assert_eq!(buf, page(1), "a failed discard keeps the data");
    faulty.disarm_all();
    assert!(faulty.discard(0, 1).is_ok());
    assert_eq!(faulty.stats().injected(FaultKind::FailWrite), 2);
}

#[derive(Debug, Clone)]
enum Op {
    Write { offset: u64, nr: u64, fill: u8 },
    Read { offset: u64, nr: u64 },
    Discard { offset: u64, nr: u64 },
}

const PAGES: u64 = 32;

fn op() -> impl Strategy<Value = Op> {
    let span = (0..PAGES + 2, 0..6u64);
    prop_oneof![
        (span.clone(), any::<u8>()).prop_map(|((offset, nr), fill)| Op::Write { offset, nr, fill }),
        span.clone().prop_map(|(offset, nr)| Op::Read { offset, nr }),
        span.prop_map(|(offset, nr)| Op::Discard { offset, nr }),
    ]
}

/// Runs `ops` on `backend` and on a map of pages; every result and every byte read must
/// agree.
fn check_against_model(backend: &dyn Backend, ops: &[Op]) {
    let mut model: HashMap<u64, u8> = HashMap::new();
    let in_range = |offset: u64, nr: u64| nr > 0 && offset + nr <= PAGES;
    for op in ops {
        match *op {
            Op::Write { offset, nr, fill } => {
                let data = vec![fill; nr as usize * PAGE_SIZE];
                assert_eq!(backend.write(offset, &data).is_ok(), in_range(offset, nr), "{op:?}");
                if in_range(offset, nr) {
                    (offset..offset + nr).for_each(|s| {
                        model.insert(s, fill);
                    });
                }
            }
            Op::Read { offset, nr } => {
                let mut buf = vec![0xEEu8; nr as usize * PAGE_SIZE];
                assert_eq!(backend.read(offset, &mut buf).is_ok(), in_range(offset, nr), "{op:?}");
                if in_range(offset, nr) {
                    for (i, chunk) in buf.chunks_exact(PAGE_SIZE).enumerate() {
                        let want = model.get(&(offset + i as u64)).copied().unwrap_or(0);
                        assert!(chunk.iter().all(|&b| b == want), "{op:?} page {i}");
                    }
                }
            }
            Op::Discard { offset, nr } => {
                assert_eq!(backend.discard(offset, nr).is_ok(), in_range(offset, nr), "{op:?}");
                if in_range(offset, nr) {
                    (offset..offset + nr).for_each(|s| {
                        model.remove(&s);
                    });
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn memory_matches_the_model(ops in prop::collection::vec(op(), 1..120)) {
        check_against_model(&MemoryBackend::new(PAGES), &ops);
    }

    #[test]
    fn checksummed_file_matches_the_model(ops in prop::collection::vec(op(), 1..120)) {
        let scratch = scratch_dir("model");
        let dir = scratch.path();
        let size = PAGES * PAGE_SIZE as u64;
        let file = FileBackend::create(dir, size, FileOptions::default()).unwrap();
        check_against_model(&ChecksumBackend::new(file), &ops);
    }
}
