//! Smoke test of `uswap bench fault --quick --json`: it runs, prints one JSON object with the
//! figures the delivery decision and the issue read, and they are plausible. (Timings are
//! not judged here: a test is no place for a benchmark figure.)

use std::process::Command;

const FIELDS: [&str; 9] = [
    "zero_read_p50_ns",
    "pool_lz4_p50_ns",
    "pool_lz4_p99_ns",
    "handler_pool_order4_p50_ns",
    "kernel_anon_fault_p50_ns",
    "handler_file_order0_p50_ns",
    "sigbus_file_order0_p50_ns",
    "handler_zero_order4_p99_ns",
    "sigbus_vs_handler_file_p50_ratio",
];

#[test]
fn bench_fault_quick_prints_the_figures() {
    let out = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(["bench", "fault", "--quick", "--json"])
        .output()
        .expect("run uswap");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // SAFETY: geteuid has no preconditions and touches no memory.
    let root = unsafe { libc::geteuid() } == 0;
    if !out.status.success() && !root && std::env::var_os("USWAP_REQUIRE_UFFD").is_none() {
        eprintln!("skipping: uswap bench fault failed without privilege: {stderr}");
        return;
    }
    assert!(out.status.success(), "uswap bench fault failed: {stderr}");
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    assert_eq!(json["bench"], "fault");
    assert_eq!(json["faults_per_row"], 256);
    assert!(["handler", "sigbus"].contains(&json["default_mode"].as_str().unwrap_or("")));
    for field in FIELDS {
        let value = json[field].as_f64().unwrap_or_else(|| panic!("{field} missing: {json}"));
        assert!(value > 0.0 && value.is_finite(), "{field} = {value}");
    }
    // Every row's folios all faulted (no readahead hid them).
    for mode in ["handler", "sigbus"] {
        for page in ["zero", "pool", "file"] {
            for order in [0, 4] {
                let key = format!("{mode}_{page}_order{order}_faults");
                assert!(json[&key].as_u64().unwrap_or(0) >= 256, "{key}: {json}");
            }
        }
    }
}
