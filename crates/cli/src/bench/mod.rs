//! `uswap bench NAME`: every benchmark of the project behind one subcommand.
//!
//! Each benchmark lives in its own module, measures the real code path (never a model of
//! it), and returns a [`Report`]: a table for people and one JSON object for machines.
//! Comparisons are ratios measured side by side in the same run, because these machines are
//! shared and noisy: an absolute figure from another run says little.

mod auto;
mod compare;
mod crypt;
mod engine;
mod far;
mod fault;
mod fork;
mod heap;
mod seed;
mod uffd;
mod zpool;
mod zswap;

use crate::report::Report;
use clap::{Args, Subcommand};

mod slots;
mod xarray;

/// Options every benchmark understands.
#[derive(Debug, Clone, Args)]
pub struct CommonOpts {
    /// Print one JSON object instead of the table.
    #[arg(long, global = true)]
    pub json: bool,
    /// A much smaller run (seconds, not minutes), for tests and smoke checks.
    #[arg(long, global = true)]
    pub quick: bool,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub which: Which,
    #[command(flatten)]
    pub common: CommonOpts,
}

/// The benchmarks. Each one's `--help` says what it measures and which JSON fields it
/// prints.
#[derive(Debug, Subcommand)]
pub enum Which {
    /// Print the machine description every report carries (a smoke test of the harness).
    Machine,
    /// The engine's page-out and page-in paths on simulated memory (no userfaultfd): ns
    /// per page for order 0 and 4, pool compressor none and lz4, and the seed's zero-page
    /// test. JSON: pagein_ns_order0_none, pagein_ns_per_page_order4_none,
    /// pageout_ns_order0_none, zero_pagein_ns, ...
    Engine,
    /// The cost of encrypting the swap file: seal + open of a page with AES-256-GCM against
    /// ChaCha20-Poly1305, and page-out / page-in through the engine to a real swap file with
    /// encryption off and on, order 0 and 4, side by side. JSON: aes256gcm_seal_open_ns,
    /// chacha20poly1305_seal_open_ns, file_pagein_ns_order0_encrypt_on, pagein_ratio_order0,
    /// pageout_ratio_order0, ...
    Crypt,
    /// The far tier (three memcached servers on loopback, started here, two copies) against
    /// the swap file, both encrypted, no pool: page-in p50/p99 per fault at order 0 and 4,
    /// page-out throughput until every copy is stored, server bytes per swapped byte. Needs
    /// memcached. JSON: far_pagein_p50_ns_order0, far_pagein_p99_ns_order0, writeback_mb_s,
    /// server_bytes_per_swapped_byte, file_pagein_p50_ns_order0, ...
    Far,
    /// Seed experiment 000: swap cache node memory with multi-index vs single entries after
    /// swapping out 2 MiB folios (the seed: -94%), and sequential swap-out and swap-in of
    /// zero pages. JSON: swapcache_node_ratio, zero_swapin_ns_order0, ...
    #[command(name = "seed-000")]
    Seed000,
    /// Seed experiment 004: the zswap index as an XArray vs a balanced tree: lookup latency
    /// and memory per entry. JSON: xarray_lookup_ns_p50, btree_lookup_ns_p50, ...
    #[command(name = "seed-004")]
    Seed004,
    /// Seed experiment 002: large-folio allocation fallback rates, the 6.18 cluster policy
    /// against the legacy one, per order, on the slots fragmentation run (16 CPUs' hints).
    /// JSON: fallback_rate_order4_current, fallback_rate_order4_legacy, ...
    #[command(name = "seed-002")]
    Seed002,
    /// Seed experiment 003: resident memory of the zero-page program (20 MiB of zeros
    /// paged out, then read): the reads' VmRSS growth, against the same with data.
    /// Needs userfaultfd. JSON: zero_reads_growth_kb, data_reads_growth_kb.
    #[command(name = "seed-003")]
    Seed003,
    /// The XArray against BTreeMap and HashMap (stores/s, loads/s on 1M dense and sparse
    /// keys), bytes per dense entry, and the seed's multi-index node memory experiment.
    /// JSON: dense_load_ratio_vs_btreemap, dense_bytes_per_entry, multi_index_node_bytes,
    /// single_index_node_bytes, multi_index_node_ratio.
    Xarray,
    /// Swap slot allocator: order-0/order-4 allocate+free per second (1 and 2 threads),
    /// a fragmentation run comparing the 6.18 and the legacy policy (per-order swpout and
    /// swpout_fallback), file backend buffered vs O_DIRECT. JSON: order0_alloc_free_per_s,
    /// fallback_rate_order4_current, fallback_rate_order4_legacy, ...
    Slots,
    /// The compressors and the zsmalloc-like pool on the page corpus: compress and
    /// decompress ns per page (p50, p99) and ratio per compressor; pool overhead (pool
    /// bytes / compressed bytes) after random frees and compaction, against a heap
    /// allocation per object. JSON: `lz4_raw_compress_ns_p50`, `lz4_raw_decompress_ns_p50`,
    /// `lz4_ratio`, `pool_overhead`, `naive_overhead`, and the same for zstd1, zstd3, none.
    Zpool,
    /// The same workloads under uswap and under the kernel's swap (zram lzo-rle, zram lz4,
    /// zswap lz4) in a memory cgroup at the same budget: wall time, faults, fault latency,
    /// peak memory. JSON: a `workloads` array (see compare/summary.rs). The kernel side
    /// needs root and /dev/zram0 and is skipped with a note otherwise.
    Compare(Box<compare::CompareArgs>),
    /// `uswap run --budget auto` on programs with a cold part (a Python service, Redis read
    /// Zipf, compare's pydict and zipf) against each run unmanaged, and a Senpai-like loop
    /// over a memory cgroup with zram at the same target: mean and peak resident memory
    /// saved, slowdown. JSON: a `workloads` array of `name`, `service`, `saved_fraction`,
    /// `slowdown`, `kernel_saved_fraction`, `kernel_slowdown`, ... The kernel side needs
    /// root and /dev/zram0 and is skipped with a note otherwise.
    Auto(Box<auto::AutoArgs>),
    /// The seeds' build experiment: `make -j2` of Redis's source (installed by
    /// .ci/setup-bench) under `uswap run` and in a memory cgroup with zram lz4 and with zswap,
    /// at half of the build's own unmanaged peak; wall, user and sys time of the reaped tree,
    /// peaks, pswpout/pswpin and per-size swpout / swpout_fallback, every object file and
    /// program checked against the unmanaged build's. `uswap bench compare --workloads
    /// build` with zram-lz4,zswap-lzo-rle by default. JSON: as compare's, and `build`.
    Build(Box<compare::CompareArgs>),
    /// userfaultfd fault round trips (poll / spin handler, SIGBUS, kernel first touch) and
    /// eviction primitives (MOVE out vs write-protect + copy + MADV_DONTNEED). JSON:
    /// handler_poll_copy_p50_ns, handler_spin_copy_p50_ns, sigbus_copy_p50_ns,
    /// kernel_anon_fault_p50_ns, move_out_ns_per_page, wp_copy_drop_ns_per_page, ...
    Uffd,
    /// The compressed pool (zswap) per compressor on the page corpus: store and load ns per
    /// page (p50, p99) against the raw compressor on the same pages in the same run,
    /// compression ratio, pool overhead after random invalidations and compaction against
    /// a heap allocation per page. JSON: `lz4_store_ns_p50`, `lz4_load_ns_p50`,
    /// `lz4_raw_compress_ns_p50`, `lz4_raw_decompress_ns_p50`, `lz4_ratio`,
    /// `pool_overhead`, `naive_overhead`, and the same for zstd1, zstd3, none.
    Zswap,
    /// Fault latency on managed memory through the library, end to end: zero-map, pool
    /// (lz4) and swap-file pages, order 0 and 4, handler-thread and SIGBUS delivery, with the
    /// kernel's own first-touch fault as the yardstick. JSON: zero_read_p50_ns,
    /// pool_lz4_p50_ns, pool_lz4_p99_ns, kernel_anon_fault_p50_ns, default_mode,
    /// <mode>_<page>_order<o>_p50_ns / _p99_ns, ...
    Fault,
    /// What a fork costs a process whose memory uswap manages: a child that exits at once,
    /// one that execs /bin/true, one that reads every page (most paged out), each against
    /// the same fork of an unmanaged process. JSON: fork_exit_ms_managed,
    /// fork_exec_ms_managed, fork_read_ms_managed and their _unmanaged yardsticks.
    Fork,
}

/// Runs one benchmark and prints its report.
///
/// # Errors
/// Whatever the benchmark reports: an unsupported environment, an I/O error.
pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let report = match args.which {
        Which::Machine => machine(),
        Which::Engine => engine::run(&args.common)?,
        Which::Crypt => crypt::run(&args.common)?,
        Which::Far => far::run(&args.common)?,
        Which::Seed000 => seed::seed_000(&args.common)?,
        Which::Seed004 => seed::seed_004(&args.common)?,
        Which::Seed002 => seed::seed_002(&args.common)?,
        Which::Seed003 => seed::seed_003(&args.common)?,
        Which::Xarray => xarray::run(args.common.quick)?,
        Which::Slots => slots::run(&args.common)?,
        Which::Zpool => zpool::run(&args.common)?,
        Which::Compare(compare) => compare::run(&compare, &args.common)?,
        Which::Auto(auto) => auto::run(&auto, &args.common)?,
        Which::Build(compare) => compare::run_build(&compare, &args.common)?,
        Which::Uffd => uffd::run(args.common.quick)?,
        Which::Zswap => zswap::run(&args.common)?,
        Which::Fault => fault::run(args.common.quick)?,
        Which::Fork => fork::run(&args.common)?,
    };
    report.print(args.common.json);
    Ok(())
}

fn machine() -> Report {
    let mut report = Report::new("machine");
    let description = crate::report::machine_description();
    let table = report.table("Machine", &["what", "value"]);
    table.row(["description", description.as_str()]);
    let page_size = 4096; // x86-64 base page; the layers assert it at compile time.
    table.row(["page size".to_string(), page_size.to_string()]);
    report.field("page_size_bytes", page_size);
    report.note("figures from one machine compare only as ratios within one run");
    report
}
