//! A seed replays exactly: the same operations in the same interleaving, the same final
//! counters. Compared through the run's digest (every executed operation, its thread,
//! index, range and result, in the order the scheduler ran them, then every final
//! counter) and the run's figures.
//!
//! Also: a run writes a trace of its operations, the trace reads back, and replaying it is
//! clean and deterministic too.

use sim::options::FaultChoice;
use sim::trace::RecordKind;
use sim::{run, run_seed, Overrides, SimOptions, Site, WorkloadKind};

fn figures(r: &sim::RunReport) -> (u64, u64, u64, u64, u64, Option<engine::stats::StatsSnapshot>) {
    (r.digest, r.ops, r.steps, r.reads_checked, r.sim_time_ns, r.stats.clone())
}

#[test]
fn a_seed_replays_to_the_same_digest_and_counters() {
    // Threads, faults and every scheduler: seeds whose draws differ in all of them. The
    // pool is on, with its own fault sites, so compression and writeback replay too.
    let faults = FaultChoice::Sites(vec![
        (Site::ReadFail, 10_000),
        (Site::WriteTorn, 10_000),
        (Site::TakeRetry, 50_000),
        (Site::Incompressible, 50_000),
        (Site::CompressFail, 50_000),
        (Site::PoolAllocFail, 50_000),
    ]);
    for (seed, workload) in
        [(3, WorkloadKind::Zipf), (4, WorkloadKind::Kbuild), (5, WorkloadKind::Phases)]
    {
        let o = Overrides {
            workload: Some(workload),
            faults: faults.clone(),
            pool_percent: Some(20),
            ..Overrides::default()
        };
        let a = run_seed(seed, &o).expect("valid");
        let b = run_seed(seed, &o).expect("valid");
        assert!(a.passed(), "{}", a.failure_report(""));
        assert!(a.ops > 100 && a.steps > a.ops / 2, "seed {seed} did something");
        let zswpout = a.stats.as_ref().map_or(0, |s| s.counters.zswpout);
        assert!(zswpout > 0, "seed {seed} {workload:?}: nothing went to the pool");
        let pool_faults: u64 = a
            .faults_fired
            .iter()
            .filter(|(s, _)| matches!(s, Site::CompressFail | Site::PoolAllocFail))
            .map(|(_, n)| n)
            .sum();
        assert!(pool_faults > 0, "seed {seed} {workload:?}: no pool fault fired");
        assert_eq!(figures(&a), figures(&b), "seed {seed} {workload:?} replayed differently");
        let c = run_seed(seed + 100, &o).expect("valid");
        assert_ne!(a.digest, c.digest, "another seed, another run");
    }
}

#[test]
fn a_written_trace_reads_back_and_replays() {
    let scratch = scratch();
    let path = scratch.path().join("trace.bin");
    let pinned = Overrides {
        workload: Some(WorkloadKind::Uniform),
        faults: FaultChoice::None,
        ..Overrides::default()
    };
    let options = SimOptions::draw(9, &pinned).expect("valid");
    let writer = sim::run::trace_file(&path).expect("trace file");
    let original = run(&options, Some(writer));
    assert!(original.passed(), "{}", original.failure_report(""));
    let (header, records) = sim::trace::read_file(&path).expect("the trace reads back");
    assert_eq!(header.page_size, 4096);
    // Every program operation of the run is in the trace (the final read-back is too).
    assert!(records.len() as u64 >= options.ops_per_thread, "{} records", records.len());
    assert!(records.iter().any(|r| r.kind == RecordKind::FaultRead));
    assert!(records.iter().any(|r| r.kind == RecordKind::FaultWrite));
    let replay = Overrides { trace: Some(path.clone()), ..pinned };
    let a = run_seed(9, &replay).expect("valid");
    let b = run_seed(9, &replay).expect("valid");
    let _ = std::fs::remove_file(&path);
    assert!(a.passed(), "{}", a.failure_report(""));
    assert_eq!(a.options.workload, WorkloadKind::Replay);
    assert!(a.reads_checked > 0);
    assert_eq!(figures(&a), figures(&b), "a replayed trace is deterministic too");
}

/// A recorded eviction replays as a page-out of its range, at its place in its thread's
/// sequence, and the report counts it: pages written, 32 of them evicted, all read back
/// (from swap, checked against the model), with a budget too large for the replay's own
/// reclaim to page anything out.
#[test]
fn a_traces_evictions_replay_as_page_outs_and_are_counted() {
    use sim::trace::{Header, Record, TraceWriter};
    const PAGE: u64 = 4096;
    let base = sim::ops::HEAP_BASE;
    let scratch = scratch();
    let path = scratch.path().join("evict.bin");
    let file = std::fs::File::create(&path).unwrap();
    let mut w = TraceWriter::new(file, Header { page_size: 4096, start_ns: 0 }).unwrap();
    let mut time_ns = 0;
    let mut put = |kind, addr, len| {
        time_ns += 1000;
        w.record(&Record { time_ns, kind, thread: 0, addr, len }).unwrap();
    };
    for page in 0..64 {
        put(RecordKind::FaultWrite, base + page * PAGE, PAGE);
    }
    put(RecordKind::Evict, base, 32 * PAGE);
    for page in 0..64 {
        put(RecordKind::FaultRead, base + page * PAGE, PAGE);
    }
    w.finish().unwrap();
    let report = small_replay(&path);
    assert!(report.passed(), "{}", report.failure_report(""));
    let replay = report.replay.expect("a replay reports its trace");
    assert_eq!(replay.records_of(RecordKind::Evict), 1);
    assert_eq!(replay.records_of(RecordKind::FaultRead), 64);
    assert_eq!((replay.pageouts, replay.pageout_pages), (1, 32), "{}", replay.describe());
    let c = &report.stats.as_ref().unwrap().counters;
    assert!(c.pswpin + c.zswpin + c.swpin_zero >= 32, "the evicted pages came back: {c:?}");
    assert!(report.reads_checked >= 64);
    assert!(replay.describe().contains("evict 1 "), "{}", replay.describe());
}

/// A recorded remap (mremap) replays as a move: the pages written before it, some evicted
/// to swap, read back at their new addresses (checked against the model, which moves
/// them too), the old addresses read as never written. Destinations: a chunk no access
/// has touched, and a spot in the middle of a chunk already mapped; a third remap moves
/// memory the trace never touched, which moves nothing. Then the same trace with the
/// remap's second record missing is refused by the reader, naming the record.
#[test]
fn a_traces_remaps_replay_as_moves() {
    use sim::trace::{remap_records, Header, Record, TraceWriter};
    const PAGE: u64 = 4096;
    let base = sim::ops::HEAP_BASE;
    let (far, inside, untouched) = (base + (64 << 20), base + 256 * PAGE, base + (1 << 30));
    let mut records = Vec::new();
    let mut time_ns = 0;
    let mut put = |records: &mut Vec<Record>, kind, addr, len| {
        time_ns += 1000;
        records.push(Record { time_ns, kind, thread: 0, addr, len });
    };
    for page in 0..24 {
        put(&mut records, RecordKind::FaultWrite, base + page * PAGE, PAGE);
    }
    put(&mut records, RecordKind::Evict, base, 12 * PAGE);
    records.extend(remap_records(50_000, 0, base, far, 8 * PAGE));
    records.extend(remap_records(51_000, 0, base + 8 * PAGE, inside, 8 * PAGE));
    records.extend(remap_records(52_000, 0, untouched, untouched + (4 << 20), 4 * PAGE));
    for page in 0..8 {
        put(&mut records, RecordKind::FaultRead, far + page * PAGE, PAGE);
        put(&mut records, RecordKind::FaultRead, inside + page * PAGE, PAGE);
        put(&mut records, RecordKind::FaultRead, base + page * PAGE, PAGE);
    }
    for page in 16..24 {
        put(&mut records, RecordKind::FaultRead, base + page * PAGE, PAGE);
    }
    let scratch = scratch();
    let write = |records: &[Record], name: &str| {
        let path = scratch.path().join(format!("{name}.bin"));
        let file = std::fs::File::create(&path).unwrap();
        let mut w = TraceWriter::new(file, Header { page_size: 4096, start_ns: 0 }).unwrap();
        records.iter().for_each(|r| w.record(r).unwrap());
        w.finish().unwrap();
        path
    };
    let report = small_replay(&write(&records, "remap"));
    assert!(report.passed(), "{}", report.failure_report(""));
    let replay = report.replay.expect("a replay reports its trace");
    assert_eq!(replay.records_of(RecordKind::RemapTo), 3);
    assert_eq!(report.remaps, 3, "every remap ran");
    assert!(report.reads_checked >= 32, "{}", report.reads_checked);
    let c = &report.stats.as_ref().unwrap().counters;
    assert!(c.zswpin + c.pswpin >= 8, "the evicted pages came back from swap: {c:?}");
    assert!(replay.describe().contains("remap 3;"), "{}", replay.describe());

    // The second remap's remap-to dropped: the reader refuses the trace.
    let cut = records.iter().position(|r| r.kind == RecordKind::RemapTo && r.addr == inside);
    records.remove(cut.unwrap());
    let refused = small_replay(&write(&records, "remap-cut"));
    assert!(!refused.passed(), "an unpaired remap is refused");
    let why = refused.failure_report("");
    assert!(why.contains("not followed by its remap-to"), "{why}");
}

/// A directory of the test's own for its traces, removed (with them) when dropped.
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("uswap-sim-").tempdir().unwrap()
}

/// Seed 1 replaying the trace at `path` (then removed) on one thread, with a budget too
/// large for the replay's own reclaim to page anything out, 4 KiB folios, no faults.
fn small_replay(path: &std::path::Path) -> sim::RunReport {
    let o = Overrides {
        trace: Some(path.to_path_buf()),
        threads: Some(1),
        ops_per_thread: Some(1000),
        budget_pages: Some(8192),
        folio_order: Some(0),
        faults: FaultChoice::None,
        ..Overrides::default()
    };
    let report = run_seed(1, &o).expect("valid");
    let _ = std::fs::remove_file(path);
    report
}
