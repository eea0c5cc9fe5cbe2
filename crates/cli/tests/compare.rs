//! Smoke tests of `uswap bench compare` and of the workload binary it runs.
//!
//! The workload binary is built by `cargo test --workspace` (it belongs to the `workload`
//! crate); when only this package was built it may be missing, and the tests say so and
//! skip. The kernel-side test needs root and /dev/zram0 and skips (printing why) without
//! them; when it runs it also checks that the machine was restored: no swap left on,
//! zram0 reset, zswap as it was.

use serde_json::Value;
use std::process::Command;

mod common;
use common::{workload_binary, BoundedOutput};

/// Held by every test that sets up the kernel side: the harness takes zram0 and the swap
/// table for its run (a lock file makes a second harness skip), and each test checks the
/// machine restored after it, which a test beside it would not have done yet.
static KERNEL_SIDE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn kernel_side() -> std::sync::MutexGuard<'static, ()> {
    KERNEL_SIDE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn is_root() -> bool {
    let output = Command::new("id").arg("-u").output();
    output.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default().trim().to_string()
}

#[test]
fn workload_binary_alone_verifies_a_small_size() {
    let Some(binary) = workload_binary() else {
        eprintln!("skipped: uswap-workload not built (cargo build -p workload)");
        return;
    };
    for pattern in ["seq", "uniform", "zipf", "zero"] {
        let output = Command::new(&binary)
            .args(["--size", "4M", "--pattern", pattern, "--json", "--write-ratio", "0.5"])
            .output()
            .unwrap();
        assert!(output.status.success(), "{pattern}: {output:?}");
        let json: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(json["pattern"], pattern);
        assert_eq!(json["verify_errors"], 0);
        assert_eq!(json["size_bytes"], 4 << 20);
        for key in ["wall_s", "access_p50_ns", "access_p99_ns", "access_max_ns", "peak_rss_bytes"] {
            assert!(json[key].is_number(), "{pattern}: {key} missing in {json}");
        }
        for key in ["major_faults", "minor_faults", "accesses", "slow_accesses"] {
            assert!(json[key].is_u64(), "{pattern}: {key} missing in {json}");
        }
        assert!(json["fault_p50_ns"].is_u64() || json["fault_p50_ns"].is_null());
    }
}

#[test]
fn compare_quick_json_on_the_kernel_side() {
    if !is_root() {
        eprintln!("skipped: the kernel side of `uswap bench compare` needs root");
        return;
    }
    if !std::path::Path::new("/dev/zram0").exists() {
        eprintln!("skipped: no /dev/zram0 on this machine");
        return;
    }
    if workload_binary().is_none() {
        eprintln!("skipped: uswap-workload not built (cargo build -p workload)");
        return;
    }
    let _machine = kernel_side();
    let zswap_before = read("/sys/module/zswap/parameters/enabled");
    // The uswap side's pool beside the budget (the default), then as a share of it.
    // The second with `--repeat 2`: two rounds, each workload's median reported.
    let share = ["--uswap-pool", "share", "--repeat", "2"];
    for (pool, flags) in [("beside", &[][..]), ("share", &share[..])] {
        let output = Command::new(env!("CARGO_BIN_EXE_uswap"))
            .args(["bench", "compare", "--quick", "--json"])
            .args(flags)
            .env("USWAP_PRELOAD", common::shim())
            .bounded_output();
        assert!(output.status.success(), "{output:?}");
        let json: Value = serde_json::from_slice(&output.stdout).unwrap();
        let row = &json["workloads"][0];
        assert_eq!(row["name"], "uniform");
        let uswap_ran = check_the_uswap_side(&json, pool);
        if pool == "share" {
            assert_eq!(json["repeat"], 2);
            let ratios = json["rounds"][0]["ratios_vs_zram_lz4"].as_array().unwrap();
            assert_eq!(ratios.len(), 2, "{json}");
        } else {
            assert!(json["rounds"].is_null(), "one round lists no rounds");
        }
        if !check_the_kernel_side(row) {
            return;
        }
        if !uswap_ran {
            break;
        }
    }
    // The machine is restored.
    assert!(!read("/proc/swaps").contains("zram0"), "{}", read("/proc/swaps"));
    assert_eq!(read("/sys/block/zram0/initstate"), "0");
    assert_eq!(read("/sys/module/zswap/parameters/enabled"), zswap_before);
}

/// The uswap side of a quick comparison's JSON; false if it was skipped.
fn check_the_uswap_side(json: &Value, pool: &str) -> bool {
    let row = &json["workloads"][0];
    // The uswap side runs where `uswap run` can (userfaultfd, the shim built beside this
    // binary); otherwise it says why in `uswap_skipped`.
    match row["uswap_skipped"].as_str() {
        None => {
            assert!(row["uswap_s"].as_f64().unwrap() > 0.0, "{row}");
            assert_eq!(row["uswap_verify_errors"], 0, "{row}");
            assert!(row["uswap_peak_rss_bytes"].as_u64().unwrap() > 0, "{row}");
            let cached = row["uswap_file_cache_peak_bytes"].as_u64().unwrap();
            let charged = row["uswap_peak_rss_bytes"].as_u64().unwrap();
            let peak = row["uswap_peak_bytes"].as_u64().unwrap();
            assert!(row["uswap_tree_rss_peak_bytes"].as_u64().unwrap() > 0, "{row}");
            match row["uswap_meter"].as_str().unwrap() {
                // Measured like the kernel side, in a memory cgroup (this test runs as
                // root): the swap file's page cache is in the charge.
                "cgroup" => {
                    assert_eq!(peak, charged, "{row}");
                    assert!(row["uswap_cache_charged_bytes"].is_u64(), "{row}");
                }
                "tree_rss" => assert_eq!(peak, charged + cached, "{row}"),
                other => panic!("unknown meter {other}: {row}"),
            }
            if pool == "beside" {
                // 64 MiB under 16 MiB, the pool as large as the zram device (64 MiB of
                // data + half + 64 MiB of slack): it holds every page, the file none.
                assert_eq!(json["uswap_pool_size_bytes"], 160 << 20, "{json}");
                assert_eq!(cached, 0, "{row}");
                // What it stored, read from the program's stats file while it ran.
                let stored = row["uswap_stored_bytes"].as_u64().unwrap();
                assert!(stored > 0 && stored < 64 << 20, "{row}");
                assert!(row["uswap_compression_ratio"].as_f64().unwrap() > 1.0, "{row}");
            } else {
                // A pool of 20% of 16 MiB: most pages go on to the swap file, through the
                // page cache.
                assert!(json["uswap_pool_size_bytes"].is_null(), "{json}");
                assert!(cached > 0, "{row}");
            }
            assert_eq!(json["uswap_available"], true);
            true
        }
        Some(why) => {
            assert!(!why.starts_with("failed"), "the uswap side failed: {why}");
            eprintln!("uswap side skipped: {why}");
            assert!(row["uswap_s"].is_null() && row["ratio_vs_zram_lz4"].is_null(), "{row}");
            assert_eq!(json["uswap_available"], false);
            false
        }
    }
}

/// The kernel side of a quick comparison's row; false if another run held zram0.
fn check_the_kernel_side(row: &Value) -> bool {
    match row["kernel_zram_lz4_skipped"].as_str() {
        None => {
            assert!(row["kernel_zram_lz4_s"].as_f64().unwrap() > 0.0, "{row}");
            assert_eq!(row["kernel_zram_lz4_verify_errors"], 0, "{row}");
            assert!(row["kernel_peak_bytes"].as_u64().unwrap() > 0, "{row}");
            // The peak is its parts: the cgroup's, zram's store, the swap tables and the
            // swap's slab objects (measured where /sys/kernel/slab shows zram's caches).
            let part = |key: &str| row[format!("kernel_zram_lz4_{key}")].as_u64().unwrap_or(0);
            let parts = ["charged_peak_bytes", "store_peak_bytes", "tables_bytes", "slab_bytes"];
            let sum: u64 = parts.iter().map(|key| part(key)).sum();
            assert_eq!(row["kernel_peak_bytes"].as_u64().unwrap(), sum, "{row}");
            if std::path::Path::new("/sys/kernel/slab/zs_handle-zram0/objects").exists() {
                assert!(row["kernel_zram_lz4_slab_bytes"].as_u64().unwrap() > 0, "{row}");
            }
            assert!(row["kernel_zram_lz4_major_faults"].as_u64().unwrap() > 0, "{row}");
            true
        }
        // Another run holds zram0 (a concurrent test or benchmark): not a failure here.
        Some(why) if why.contains("already") || why.contains("holds") => {
            eprintln!("skipped: {why}");
            false
        }
        Some(why) => panic!("the kernel side did not run: {why}"),
    }
}

/// `uswap bench build --quick` (Lua's library from Redis's source: seconds unmanaged) under
/// half of its unmanaged peak: the reference and the budget it set, every object file the
/// same as the unmanaged build's on both sides, both sides' swap counters and CPU times, the
/// machine restored. Needs root, /dev/zram0, make, cc and the source .ci/setup-bench
/// installs; skips (saying which) without them.
#[test]
fn build_quick_json_checks_every_output() {
    let source = std::path::Path::new("/usr/local/src/uswap-bench/redis/Makefile");
    let tools = ["make", "cc"].iter().all(|tool| {
        let found = Command::new("sh").args(["-c", &format!("command -v {tool}")]).output();
        found.is_ok_and(|o| o.status.success())
    });
    let skip = [
        (!is_root(), "the kernel side needs root"),
        (!std::path::Path::new("/dev/zram0").exists(), "no /dev/zram0"),
        (!source.exists(), "no build source (.ci/setup-bench installs it)"),
        (!tools, "make or cc is not installed (.ci/setup-bench)"),
    ];
    if let Some((_, why)) = skip.iter().find(|(skip, _)| *skip) {
        eprintln!("skipped: {why}");
        return;
    }
    let _machine = kernel_side();
    let output = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(["bench", "build", "--quick", "--json", "--configs", "zram-lz4"])
        .env("USWAP_PRELOAD", common::shim())
        .bounded_output();
    assert!(output.status.success(), "{output:?}");
    let json: Value = serde_json::from_slice(&output.stdout).unwrap();
    let build = &json["build"];
    let peak = build["reference_peak_bytes"].as_u64().unwrap();
    assert_eq!(build["budget_source"], "half of the unmanaged build's peak", "{build}");
    assert_eq!(build["budget_bytes"].as_u64().unwrap(), (peak / 2) >> 20 << 20, "{build}");
    assert!(build["reference_outputs"].as_u64().unwrap() >= 20, "liblua.a and its objects");
    assert!(build["command"].as_str().unwrap().contains("make -j2 -C deps MALLOC=libc lua"));
    let row = &json["workloads"][0];
    assert_eq!(row["name"], "build");
    if row["uswap_skipped"].is_null() {
        assert_eq!(row["uswap_verify_errors"], 0, "{row}");
        assert!(row["uswap_sys_s"].as_f64().unwrap() > 0.0, "{row}");
        let swap = &row["uswap_swap"];
        assert!(swap["zswpout"].is_u64() && swap["swpout"].is_object(), "{row}");
        assert!(row["uswap_tree_peak_bytes"].as_u64().unwrap() > 0, "{row}");
    } else {
        eprintln!("uswap side skipped: {}", row["uswap_skipped"]);
    }
    if check_the_kernel_side(row) {
        assert!(row["kernel_zram_lz4_anon_peak_bytes"].as_u64().unwrap() > 0, "{row}");
        // Under half of its peak the build swaps: zram takes every page as a device write.
        assert!(row["kernel_zram_lz4_swap"]["pswpout"].as_u64().unwrap() > 0, "{row}");
        assert!(row["kernel_zram_lz4_user_s"].as_f64().unwrap() > 0.0, "{row}");
    }
    assert!(!read("/proc/swaps").contains("zram0"), "{}", read("/proc/swaps"));
    assert_eq!(read("/sys/block/zram0/initstate"), "0");
}

/// `--far`: the uswap side again with its swap device in three memcached servers the
/// harness starts on loopback and kills after the run, reported beside the local one. Its
/// pages went to the servers and came back (the far counters), none lost and none wrong.
/// Needs userfaultfd's kernel-mode faults (root), memcached (.ci/setup installs it) and the
/// workload binary; skips, saying which, without them. There is no flag to leave the kernel
/// side out, so it holds the kernel side's lock (the kernel side skips where it cannot run).
#[test]
fn compare_far_runs_the_uswap_side_on_memcached() {
    let kernel_faults = uffd::probe().is_ok_and(|p| p.require_kernel_faults().is_ok());
    let skip = [
        (!kernel_faults, "userfaultfd without kernel-mode faults here"),
        (!far::testing::Memcached::available(), "memcached is not installed (.ci/setup)"),
        (workload_binary().is_none(), "uswap-workload not built (cargo build -p workload)"),
    ];
    if let Some((_, why)) = skip.iter().find(|(skip, _)| *skip) {
        eprintln!("skipped: {why}");
        return;
    }
    let _machine = kernel_side();
    let output = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(["bench", "compare", "--quick", "--json", "--far", "--workloads", "uniform"])
        .args(["--configs", "zram-lz4"])
        .env("USWAP_PRELOAD", common::shim())
        .bounded_output();
    assert!(output.status.success(), "{output:?}");
    let json: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["uswap_far"], true, "{json}");
    let row = &json["workloads"][0];
    assert_eq!(row["name"], "uniform");
    assert!(row["uswap_far_skipped"].is_null(), "the far configuration did not run: {row}");
    assert!(row["uswap_far_s"].as_f64().unwrap() > 0.0, "{row}");
    assert_eq!(row["uswap_far_verify_errors"], 0, "{row}");
    assert!(row["uswap_far_peak_bytes"].as_u64().unwrap() > 0, "{row}");
    // 64 MiB under a 16 MiB budget, no pool, uniform reads: pages go to the servers and
    // faults bring them back.
    assert!(row["uswap_far_pages_written"].as_u64().unwrap() > 0, "{row}");
    assert!(row["uswap_far_pages_read"].as_u64().unwrap() > 0, "{row}");
    assert_eq!(row["uswap_far_lost_pages"], 0, "{row}");
    // The local side ran beside it, as before.
    assert!(row["uswap_skipped"].is_null(), "{row}");
    assert_eq!(row["uswap_verify_errors"], 0, "{row}");
    assert!(row["uswap_far_ratio_vs_local"].as_f64().unwrap() > 0.0, "{row}");
    if row["kernel_zram_lz4_skipped"].is_null() {
        assert_eq!(row["kernel_zram_lz4_verify_errors"], 0, "{row}");
    }
}
