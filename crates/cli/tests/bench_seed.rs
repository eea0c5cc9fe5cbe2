//! Smoke tests of the seed experiments that had none: `uswap bench seed-002 --quick --json`
//! and `seed-003` run and print their figures.

use std::process::Command;

fn bench_json(name: &str) -> Option<serde_json::Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_uswap"))
        .args(["bench", name, "--quick", "--json"])
        .output()
        .expect("run uswap");
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        if name == "seed-003" && stderr.contains("userfaultfd") {
            eprintln!("skipping: {stderr}");
            return None;
        }
        panic!("{name} failed: {stderr}");
    }
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(json["bench"], name);
    Some(json)
}

#[test]
fn seed_002_prints_both_policies_fallback_rates() {
    let json = bench_json("seed-002").expect("seed-002 needs nothing special");
    for key in ["fallback_rate_order4_current", "fallback_rate_order4_legacy"] {
        let value = json[key].as_f64().unwrap_or_else(|| panic!("{key} missing: {json}"));
        assert!((0.0..=1.0).contains(&value), "{key} = {value}");
    }
}

#[test]
fn seed_003_zero_page_reads_cost_nothing_and_data_reads_do() {
    let Some(json) = bench_json("seed-003") else { return };
    let zero = json["zero_reads_growth_kb"].as_f64().expect("zero_reads_growth_kb");
    let data = json["data_reads_growth_kb"].as_f64().expect("data_reads_growth_kb");
    assert!(zero <= 2048.0, "zero-page reads grew VmRSS by {zero} kB");
    assert!(data >= 16.0 * 1024.0, "20 MiB of data read back grew VmRSS by only {data} kB");
}
