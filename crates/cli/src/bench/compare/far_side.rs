//! The far configuration of `uswap bench compare --far`: the uswap side run a second time
//! per workload with its swap device in a far tier (docs/RUN.md, "The far tier"), reported
//! beside the local one.
//!
//! ```text
//!   per workload         start SERVERS `memcached -M` on loopback (far::testing), each
//!                        sized to hold a copy of the whole swap device
//!                        uswap_side::run with ctx.uswap_far = memcached://A,B,C:
//!                          uswap run --budget B --zswap off --far URL --encrypt on ...
//!                        kill the servers (on drop: after an error or a panic too)
//!   report               a row `<workload> / uswap far` in the per-side tables; the
//!                        table "far tier beside local"; JSON `uswap_far_*`
//! ```
//!
//! Why no pool: with the comparison's default pool beside the budget, the pool holds every
//! page and the servers see none; with a share of it, the pool hides part of the traffic.
//! Without one, every page past the budget is written to the servers and every fault on it
//! is a read from them, so the row measures the far tier itself; set beside the local side
//! (pool beside the budget, nothing on disk), it is the cost of keeping the swapped pages
//! on other machines rather than compressed in local memory. Encryption is asked for
//! explicitly: `uswap run` refuses the far tier without it, and a config file could
//! turn the default off.
//!
//! The servers' memory is not in the far run's peak: it stands for other machines'. They
//! run on this machine's CPUs, though (loopback), so the far run's time includes their
//! work, as it would not across a network, and a network's round trips are not in it.

use super::kernel_side::{swap_bytes, KernelEnv};
use super::outcome::{RunOutcome, Side};
use super::summary::WorkloadRow;
use super::uswap_side;
use super::workloads::{RunContext, WorkloadSpec};
use crate::report::{format_figure, Report};
use far::testing::{url, Memcached};
use serde_json::{json, Map, Value};

/// memcached servers per run: enough for `uswap run`'s default of two copies of each page
/// with one server to spare for a rendezvous choice that moves.
const SERVERS: usize = 3;

/// The far counters reported, by their names in the run's totals (far/src/stats.rs), with
/// their JSON names after `uswap_far_` and their column headings.
const COUNTERS: [(&str, &str, &str); 4] = [
    ("far_pages_written", "pages_written", "pages out"),
    ("far_pages_read", "pages_read", "pages in"),
    ("far_lost_pages", "lost_pages", "lost"),
    ("far_failovers", "failovers", "failovers"),
];

/// `-m` of each server, MiB, for a run of `ctx`: a copy of every slot of the swap device
/// (`--swap-size`, as large as the kernel side's zram device) times 5/4: each 4,108-byte
/// sealed page is an item of about 4.2 KiB (1.02 server bytes per page byte: docs/RUN.md)
/// kept in a chunk of memcached's 4,544-byte slab class at its default growth factor
/// (1.11x), and the rest covers the slab pages each class takes; plus 64 MiB for the
/// hash table and the classes' first pages. A limit, not a reservation: memcached
/// allocates as items arrive. However the pages are spread, no server holds more than one
/// copy of each.
fn server_mb(ctx: &RunContext) -> u32 {
    let mb = ((swap_bytes(ctx.size_bytes) / 4 * 5) >> 20) + 64;
    u32::try_from(mb).unwrap_or(u32::MAX)
}

/// Runs `spec` under `uswap run --far`, with servers started for it and killed after it;
/// skipped, saying so, where memcached is not installed.
///
/// Context: blocks for the whole run, as [`uswap_side::run`]; starts and kills
/// [`SERVERS`] processes.
pub fn run(
    spec: &WorkloadSpec,
    ctx: &RunContext,
    meter: Option<&KernelEnv>,
    run_index: usize,
) -> Side {
    if !Memcached::available() {
        return Side::Skipped("memcached is not installed (.ci/setup installs it)".into());
    }
    let started: std::io::Result<Vec<Memcached>> =
        (0..SERVERS).map(|_| Memcached::start(server_mb(ctx))).collect();
    let servers = match started {
        Ok(servers) => servers,
        Err(e) => return Side::Failed(format!("memcached did not start: {e}")),
    };
    let far_ctx = RunContext { uswap_far: Some(url(&servers)), ..ctx.clone() };
    let side = uswap_side::run(spec, &far_ctx, meter, run_index);
    drop(servers);
    side
}

/// The run table's line for the far configuration.
pub fn describe_line(ctx: &RunContext) -> String {
    format!(
        "{SERVERS} memcached -M on loopback (-m {} MiB each), 2 copies of each page, \
         no pool, encrypted",
        server_mb(ctx)
    )
}

/// The note every reader of a report with the far configuration needs.
pub const NOTE: &str = "uswap far: the local uswap side again with its swap device in \
                        memcached servers (--far); their memory is not in its peak (it stands \
                        for other machines'), their CPU time is in its time (they run here)";

/// The table of the far configuration beside the local uswap side, where any row has it.
pub fn fill(report: &mut Report, rows: &[WorkloadRow]) {
    if rows.iter().all(|row| row.far.is_none()) {
        return;
    }
    let mut header = vec!["workload", "local s", "far s", "far / local", "local MiB", "far MiB"];
    header.extend(COUNTERS.iter().map(|&(_, _, heading)| heading));
    header.push("verify err");
    let title = "uswap: far tier beside local (wall seconds; peak MiB; far counters in pages)";
    let table = report.table(title, &header);
    let secs =
        |o: Option<&RunOutcome>| o.map_or("-".into(), |o| format!("{:.2}", o.measured.wall_s));
    let peak = |o: Option<&RunOutcome>| {
        o.map_or("-".into(), |o| format!("{:.0}", o.peak_bytes as f64 / f64::from(1 << 20)))
    };
    for row in rows {
        let Some(far_side) = &row.far else { continue };
        let (local, far) = (row.uswap.outcome(), far_side.outcome());
        let mut cells = vec![
            row.name.clone(),
            secs(local),
            secs(far),
            far_ratio(row).map_or("-".into(), format_figure),
        ];
        cells.extend([peak(local), peak(far)]);
        for (name, _, _) in COUNTERS {
            cells.push(counter(far, name).map_or("-".into(), |n| n.to_string()));
        }
        cells.push(far.map_or("-".into(), |o| o.measured.verify_errors.to_string()));
        table.row(cells);
    }
}

/// far wall seconds / local wall seconds, when both ran.
fn far_ratio(row: &WorkloadRow) -> Option<f64> {
    let local = row.uswap.outcome()?.measured.wall_s;
    let far = row.far.as_ref()?.outcome()?.measured.wall_s;
    (local > 0.0).then(|| far / local)
}

/// A counter of the far run's totals; `None` where it wrote none.
fn counter(outcome: Option<&RunOutcome>, name: &str) -> Option<u64> {
    outcome?.totals.as_ref().map(|totals| totals.get(name))
}

/// The far configuration's JSON figures (`uswap_far_*`), where the row has it.
pub fn insert_json(row: &WorkloadRow, object: &mut Map<String, Value>) {
    let Some(side) = &row.far else { return };
    let o = side.outcome();
    let mut put = |name: &str, value: Value| {
        object.insert(format!("uswap_far_{name}"), value);
    };
    put("s", json!(o.map(|o| o.measured.wall_s)));
    put("ratio_vs_local", json!(far_ratio(row)));
    put("peak_bytes", json!(o.map(|o| o.peak_bytes)));
    put("charged_peak_bytes", json!(o.map(|o| o.charged_peak_bytes)));
    put("tree_rss_peak_bytes", json!(o.and_then(|o| o.tree_rss_peak_bytes)));
    put("major_faults", json!(o.map(|o| o.measured.major_faults)));
    put("fault_p50_ns", json!(o.and_then(|o| o.measured.fault_p50_ns)));
    put("fault_p99_ns", json!(o.and_then(|o| o.measured.fault_p99_ns)));
    put("user_s", json!(o.map(|o| o.measured.user_s)));
    put("sys_s", json!(o.map(|o| o.measured.sys_s)));
    put("verify_errors", json!(o.map(|o| o.measured.verify_errors)));
    for (name, key, _) in COUNTERS {
        put(key, json!(counter(o, name)));
    }
    put("summary", json!(o.map(|o| o.summary_lines.clone())));
    put("skipped", json!(super::summary::skip_reason(side)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use runstat::StatsFile;

    #[test]
    fn each_server_holds_a_copy_of_the_whole_device() {
        let mut ctx = RunContext::for_tests();
        ctx.size_bytes = 64 << 20;
        // 64 MiB of data: a device of 64 + 32 + 64 MiB, times 5/4, plus 64 MiB.
        assert_eq!(server_mb(&ctx), 200 + 64);
    }

    #[test]
    fn the_far_row_is_reported_beside_the_local_one() {
        let mut local = RunOutcome { peak_bytes: 100 << 20, ..RunOutcome::default() };
        local.measured.wall_s = 2.0;
        let mut far = RunOutcome { peak_bytes: 40 << 20, ..RunOutcome::default() };
        far.measured.wall_s = 3.0;
        let mut totals = StatsFile::default();
        totals.set("far_pages_written", 9000);
        totals.set("far_pages_read", 7000);
        far.totals = Some(totals);
        let row = WorkloadRow {
            name: "uniform".into(),
            uswap: Side::Ran(Box::new(local)),
            far: Some(Side::Ran(Box::new(far))),
            kernel: vec![],
        };
        let json = super::super::summary::workload_json(&row);
        assert_eq!(json["uswap_far_s"], 3.0);
        assert_eq!(json["uswap_far_ratio_vs_local"], 1.5);
        assert_eq!(json["uswap_far_peak_bytes"], 40 << 20);
        assert_eq!(json["uswap_far_pages_written"], 9000);
        assert_eq!(json["uswap_far_lost_pages"], 0);
        assert_eq!(json["uswap_far_verify_errors"], 0);
        assert_eq!(json["uswap_far_skipped"], Value::Null);
        let mut report = Report::new("compare");
        super::super::summary::fill(&mut report, &[row]);
        let text = report.to_text();
        assert!(text.contains("uniform / uswap far"), "{text}");
        assert!(text.contains("far tier beside local") && text.contains("9000"), "{text}");
    }

    #[test]
    fn without_far_the_report_has_no_far_fields() {
        let row = WorkloadRow {
            name: "seq".into(),
            uswap: Side::Skipped("x".into()),
            far: None,
            kernel: vec![],
        };
        let json = super::super::summary::workload_json(&row);
        assert!(json.get("uswap_far_s").is_none(), "{json}");
        let skipped = WorkloadRow { far: Some(Side::Skipped("no memcached".into())), ..row };
        let json = super::super::summary::workload_json(&skipped);
        assert_eq!(json["uswap_far_s"], Value::Null);
        assert_eq!(json["uswap_far_skipped"], "no memcached");
    }
}
