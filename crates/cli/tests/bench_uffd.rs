//! Smoke test of `uswap bench uffd --quick --json`: it runs, prints one JSON object, and the
//! figures the frontend's design decision reads are there and plausible. (Timings are not
//! judged here: a test is no place for a benchmark figure.)

use std::process::Command;

/// The fields docs/UFFD.md's recommendation is argued from.
const FIELDS: [&str; 6] = [
    "handler_poll_copy_p50_ns",
    "handler_spin_copy_p50_ns",
    "sigbus_copy_p50_ns",
    "kernel_anon_fault_p50_ns",
    "move_out_ns_per_page",
    "wp_copy_drop_ns_per_page",
];

#[test]
fn bench_uffd_quick_prints_the_decision_figures() {
    let out = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(["bench", "uffd", "--quick", "--json"])
        .output()
        .expect("run uswap");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // SAFETY: geteuid has no preconditions and touches no memory.
    let root = unsafe { libc::geteuid() } == 0;
    if !out.status.success() && !root && std::env::var_os("USWAP_REQUIRE_UFFD").is_none() {
        eprintln!("skipping: uswap bench uffd failed without privilege: {stderr}");
        return;
    }
    assert!(out.status.success(), "uswap bench uffd failed: {stderr}");
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    assert_eq!(json["bench"], "uffd");
    assert_eq!(json["faults"], 2048);
    for field in FIELDS {
        let value = json[field].as_f64().unwrap_or_else(|| panic!("{field} missing: {json}"));
        assert!(value > 0.0 && value.is_finite(), "{field} = {value}");
    }
    // Orders of magnitude only: a fault is more than a no-op and less than a second.
    let p50 = json["handler_poll_copy_p50_ns"].as_f64().unwrap();
    assert!((100.0..1e9).contains(&p50), "handler_poll_copy_p50_ns = {p50}");
    assert!(json["spin_budget_ns"].as_u64().unwrap() > 0);
}
