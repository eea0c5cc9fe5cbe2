//! Smoke test: `uswap bench xarray --quick --json` runs and prints one JSON object with the
//! figures the issue names. The figures are not judged here (timings on a shared machine are
//! noise in a unit test); the structural ones are checked, because they do not vary.

use std::process::Command;

#[test]
fn bench_xarray_quick_json() {
    let output = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(["bench", "xarray", "--quick", "--json"])
        .output()
        .expect("run uswap");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let json: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("one JSON object on stdout");
    assert_eq!(json["bench"], "xarray");
    for field in [
        "dense_load_ratio_vs_btreemap",
        "dense_bytes_per_entry",
        "multi_index_node_bytes",
        "single_index_node_bytes",
        "xarray_dense_loads_per_s",
        "btreemap_sparse_stores_per_s",
        "hashmap_dense_loads_per_s",
    ] {
        assert!(json[field].as_f64().is_some_and(|v| v > 0.0), "{field}: {}", json[field]);
    }
    // The seed's layout: 8 + 1 nodes of 544 bytes against 512 + 8 + 1.
    assert_eq!(json["multi_index_node_bytes"], 9 * 544);
    assert_eq!(json["single_index_node_bytes"], 521 * 544);
    let bytes = json["dense_bytes_per_entry"].as_f64().unwrap_or(f64::MAX);
    assert!(bytes <= 12.0, "{bytes} bytes per dense entry");
    let targets = json["targets"].as_array().expect("targets");
    assert_eq!(targets.len(), 3);
}
