//! The workload binary run alone on a small size: its JSON line parses and every page
//! verifies.

use std::process::Command;
use workload::Report;

fn run_workload(args: &[&str]) -> (Report, i32) {
    let output = Command::new(env!("CARGO_BIN_EXE_uswap-workload"))
        .args(args)
        .output()
        .expect("the workload binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let report: Report = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {stdout} / {:?}", output.stderr));
    (report, output.status.code().unwrap_or(-1))
}

#[test]
fn every_pattern_verifies_on_a_small_size() {
    for pattern in ["seq", "uniform", "zipf", "zero"] {
        let (report, code) =
            run_workload(&["--size", "8M", "--pattern", pattern, "--json", "--seed", "3"]);
        assert_eq!(code, 0, "{pattern}");
        assert_eq!(report.pattern, pattern);
        assert_eq!(report.size_bytes, 8 << 20);
        assert_eq!(report.verify_errors, 0);
        assert!(report.accesses > 0 && report.wall_s > 0.0);
        assert!(report.peak_rss_bytes > 0);
    }
}

#[test]
fn bad_usage_exits_two() {
    let status = Command::new(env!("CARGO_BIN_EXE_uswap-workload"))
        .args(["--size", "lots"])
        .status()
        .expect("the workload binary runs");
    assert_eq!(status.code(), Some(2));
}
