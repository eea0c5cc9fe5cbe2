//! `uswap run --budget auto`: the budget comes down while the program's memory is cold and
//! goes back up at once when it is needed again, every page verified; bad flags are one
//! line each.

use std::process::Command;
use std::time::Duration;

mod common;
use common::{can_run, compile, shim, BoundedOutput};

/// A program fills 128 MiB, touches an 8 MiB part of it for 8 s, then all of it for 4 s,
/// reading the tree's budget from the broker's tree file: the quiet phase lowers the budget
/// well under what the program holds, and the busy phase doubles it within two seconds
/// (the controller's raises: a quarter every 200 ms while faults cost more than the target).
#[test]
fn the_budget_comes_down_while_memory_is_cold_and_back_when_it_is_needed() {
    if !can_run() {
        return;
    }
    let exe = compile("auto_phases");
    let mut command = Command::new(env!("CARGO_BIN_EXE_uswap"));
    command.args(["run", "--verbose", "--budget", "auto,max=512M", "--"]);
    command.arg(&exe).args(["128", "8", "4"]).env("USWAP_PRELOAD", shim());
    let out = common::output_within(&mut command, Duration::from_secs(180));
    let _ = std::fs::remove_file(&exe);
    let (text, err) =
        (String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}{err}");
    let figure = |key: &str| -> f64 {
        let rest = text.split(key).nth(1).unwrap_or_else(|| panic!("{key} in {text}"));
        rest.split_whitespace().next().unwrap().trim_end_matches(';').parse().unwrap()
    };
    assert_eq!(figure("bad "), 0.0, "{text}");
    let quiet = figure("quiet budget ");
    assert!(quiet > 0.0 && quiet < 96.0, "the cold part stayed in budget: {text}{err}");
    let up_ms = figure("doubled after ");
    assert!((0.0..=2000.0).contains(&up_ms), "{text}{err}");
    assert!(err.contains("uswap: budget auto: from 512 MiB"), "{err}");
}

/// Bad `--budget auto` flags: one line each, exit 1, before the program starts.
#[test]
fn bad_auto_budgets_are_one_line_each() {
    for (flag, says) in [
        ("auto:0", "above 0 and at most 100"),
        ("auto:101", "above 0 and at most 100"),
        ("auto,max=8K", "below the least budget"),
        ("auto,256M", "a fixed budget is given alone"),
        ("auto,max=", "max"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_uswap"))
            .args(["run", "--budget", flag, "--", "true"])
            .env("USWAP_PRELOAD", shim())
            .bounded_output();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flag}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{flag}: {err}");
        assert!(err.contains(says), "{flag}: {err}");
    }
}

/// `uswap bench auto`'s JSON on a tiny run (8 MiB, one second of serving): a `workloads`
/// array with each workload's name, whether it is a service, the memory saved and the
/// slowdown against its unmanaged run; every page verified. Needs python3 (the service) and
/// the workload binary (zipf); the kernel side needs root and a free zram0, and its
/// absence is a note, not a failure.
#[test]
fn bench_auto_reports_saved_memory_and_slowdown_per_workload() {
    if !can_run() {
        return;
    }
    if Command::new("python3").arg("-V").output().is_err() {
        eprintln!("skipped: python3 is not installed (.ci/setup-bench)");
        return;
    }
    if common::workload_binary().is_none() {
        eprintln!("skipped: uswap-workload not built (cargo build -p workload)");
        return;
    }
    let mut command = Command::new(env!("CARGO_BIN_EXE_uswap"));
    command.args(["bench", "auto", "--quick", "--json", "--size", "8M", "--serve", "1"]);
    command.args(["--workloads", "pyservice,zipf"]).env("USWAP_PRELOAD", shim());
    let out = common::output_within(&mut command, Duration::from_secs(120));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = json["workloads"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["pyservice", "zipf"], "{json}");
    let mut kernel_ran = false;
    for (row, service) in rows.iter().zip([true, false]) {
        assert_eq!(row["service"], service, "{row}");
        let saved = row["saved_fraction"].as_f64().unwrap_or_else(|| panic!("{json}"));
        assert!(saved < 1.0, "{row}");
        assert!(row["slowdown"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["unmanaged_mean_resident_bytes"].as_u64().unwrap() > 0, "{row}");
        assert!(row["unmanaged_time"].as_f64().unwrap() > 0.0, "{row}");
        let round = &row["rounds"][0];
        assert!(round["uswap"]["mean_resident_bytes"].as_u64().unwrap() > 0, "{row}");
        match row["kernel_saved_fraction"].as_f64() {
            Some(kernel) => {
                kernel_ran = true;
                assert!(kernel < 1.0, "{row}");
                assert!(row["kernel_slowdown"].as_f64().unwrap() > 0.0, "{row}");
            }
            None => eprintln!("kernel side not run: {}", json["notes"]),
        }
    }
    // Its kernel side left no swap on (when it ran: while another harness holds zram0,
    // the kernel side is skipped and that harness's swap is on).
    if kernel_ran {
        assert!(!std::fs::read_to_string("/proc/swaps").unwrap().contains("zram0"));
    }
}

/// The uswap side's folio order and delivery reach its runs and the report; a folio order
/// `uswap run` would refuse is one line before any run.
#[test]
fn bench_auto_passes_the_folio_order_and_the_delivery_on() {
    if !can_run() || common::workload_binary().is_none() {
        return;
    }
    let bench = ["bench", "auto", "--quick", "--json", "--no-kernel", "--workloads", "zipf"];
    let mut command = Command::new(env!("CARGO_BIN_EXE_uswap"));
    command.args(bench).args(["--size", "8M", "--folio-order", "0", "--delivery", "sigbus"]);
    let out = common::output_within(command.env("USWAP_PRELOAD", shim()), Duration::from_secs(120));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["uswap_folio_order"], 0, "{json}");
    assert_eq!(json["uswap_delivery"], "sigbus", "{json}");
    let row = &json["workloads"][0];
    assert!(row["rounds"][0]["uswap"]["mean_resident_bytes"].as_u64().unwrap() > 0, "{json}");
    let mut bad = Command::new(env!("CARGO_BIN_EXE_uswap"));
    let out = common::bounded(bad.args(bench).args(["--folio-order", "12"]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
