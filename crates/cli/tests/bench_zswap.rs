//! Smoke test: `uswap bench zswap --quick --json` runs and prints the promised fields.

use std::process::Command;

#[test]
fn bench_zswap_quick_json() {
    let output = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(["bench", "zswap", "--quick", "--json"])
        .output()
        .expect("run uswap");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let json: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("one JSON object on stdout");
    assert_eq!(json["bench"], "zswap");
    let mut keys = vec![
        "pool_overhead".to_string(),
        "naive_overhead".to_string(),
        "lz4_store_over_raw".to_string(),
    ];
    for prefix in ["lz4", "zstd1", "zstd3", "none"] {
        for field in [
            "store_ns_p50",
            "store_ns_p99",
            "load_ns_p50",
            "raw_compress_ns_p50",
            "raw_decompress_ns_p50",
            "ratio",
            "zswap_overhead",
        ] {
            keys.push(format!("{prefix}_{field}"));
        }
    }
    for key in &keys {
        let value = json[key].as_f64().unwrap_or_else(|| panic!("{key} missing: {json}"));
        assert!(value.is_finite() && value > 0.0, "{key} = {value}");
    }
    // Sanity of the figures, not targets: compressors compress, the identity does not,
    // and the pool holds at least the bytes it stores.
    assert!(json["lz4_ratio"].as_f64().unwrap_or(0.0) > 1.5);
    assert!((json["none_ratio"].as_f64().unwrap_or(0.0) - 1.0).abs() < 1e-9);
    assert!(json["pool_overhead"].as_f64().unwrap_or(0.0) >= 1.0);
    let targets = json["targets"].as_array().expect("targets");
    for field in ["pool_overhead", "pool_over_naive", "lz4_load_over_raw", "zstd3_store_over_raw"] {
        assert!(targets.iter().any(|t| t["field"] == field), "target {field} missing");
    }
}
