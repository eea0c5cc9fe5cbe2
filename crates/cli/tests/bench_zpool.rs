//! Smoke test: `uswap bench zpool --quick --json` runs and prints the promised fields.

use std::process::Command;

#[test]
fn bench_zpool_quick_json() {
    let output = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(["bench", "zpool", "--quick", "--json"])
        .output()
        .expect("run uswap");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let json: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("one JSON object on stdout");
    assert_eq!(json["bench"], "zpool");
    for key in [
        "lz4_raw_compress_ns_p50",
        "lz4_raw_decompress_ns_p50",
        "lz4_ratio",
        "zstd1_ratio",
        "zstd3_raw_compress_ns_p99",
        "none_ratio",
        "pool_overhead",
        "naive_overhead",
    ] {
        let value = json[key].as_f64().unwrap_or_else(|| panic!("{key} missing: {json}"));
        assert!(value.is_finite() && value > 0.0, "{key} = {value}");
    }
    // Sanity of the figures, not targets: compressors compress, the identity does not.
    assert!(json["lz4_ratio"].as_f64().unwrap_or(0.0) > 1.5);
    assert!((json["none_ratio"].as_f64().unwrap_or(0.0) - 1.0).abs() < 1e-9);
    assert!(json["pool_overhead"].as_f64().unwrap_or(0.0) >= 1.0);
    let targets = json["targets"].as_array().expect("targets");
    assert!(targets.iter().any(|t| t["field"] == "pool_overhead"));
}
