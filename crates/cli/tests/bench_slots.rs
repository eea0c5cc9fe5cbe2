//! Smoke test: `uswap bench slots --quick --json` runs in seconds and prints the figures
//! the issue asks for.

use std::process::Command;

#[test]
fn bench_slots_quick_json() {
    let out = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(["bench", "slots", "--quick", "--json"])
        .output()
        .expect("run uswap");
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(json["bench"], "slots");
    for key in
        ["order0_alloc_free_per_s", "fallback_rate_order4_current", "fallback_rate_order4_legacy"]
    {
        let value = json[key].as_f64().unwrap_or_else(|| panic!("{key} missing: {json}"));
        assert!(value.is_finite() && value >= 0.0, "{key} = {value}");
    }
    assert!(json["order0_alloc_free_per_s"].as_f64().unwrap() > 0.0);
    let targets = json["targets"].as_array().expect("targets");
    assert_eq!(targets.len(), 2, "{targets:?}");
}
