//! The comparison's report: a table per side for people, the `workloads` array for
//! machines.
//!
//! JSON, per workload: `name`; the headline pairs against zram with lz4 (`uswap_s`,
//! `kernel_zram_lz4_s`, `ratio_vs_zram_lz4` = uswap_s / kernel_zram_lz4_s, below 1 when
//! uswap is faster; `uswap_peak_rss_bytes`, `kernel_peak_bytes`; `uswap_fault_p50_ns`,
//! `kernel_fault_p50_ns`). `uswap_peak_rss_bytes` is the uswap side's charged peak: its
//! memory cgroup's, measured like the kernel side's (`uswap_meter` = `cgroup`), or, where
//! no cgroup can be made, its process tree's VmRSS + VmPTE (`tree_rss`). The uswap side's
//! `uswap_peak_bytes` is that plus its store outside the charge (the swap file's page
//! cache, which a cgroup charges already: 0 then): the figure to set beside
//! `kernel_peak_bytes`, which counts zram's pool, the swap tables the kernel's setup
//! allocated outside the cgroup and the growth of the swap's slab caches. Then
//! `uswap_tree_rss_peak_bytes` (the tree's resident set, file pages included, whatever the
//! meter), `uswap_cache_charged_bytes`, `uswap_kmem_peak_bytes`,
//! `uswap_file_cache_peak_bytes` (the most its swap file held in the page cache),
//! `uswap_stored_bytes` (the most compressed data its pools held, sampled from their stats
//! files every second) and `uswap_compression_ratio`; then every configuration's own
//! figures under `kernel_<config>_<figure>` (`_s`, `_peak_bytes`, `_charged_peak_bytes`,
//! `_store_peak_bytes`, `_tables_bytes`, `_slab_bytes`, `_cache_charged_bytes`,
//! `_major_faults`, `_fault_p50_ns`, `_fault_p99_ns`, `_stored_bytes`,
//! `_compression_ratio`, `_verify_errors`, `_skipped`). Both sides also give the reaped
//! tree's `_user_s` and `_sys_s`, the sampled `_anon_peak_bytes` (anonymous charge plus the
//! store outside it) and `_swap` (pswpout, pswpin, zswpout, zswpin, zswpwb; `swpout` and
//! `swpout_fallback` by folio size: counters.rs); the kernel side `_kswapd_s`, the uswap
//! side `uswap_tree_peak_bytes`, `uswap_fault_stall_s` and `uswap_engine_cpu_s` from its
//! tree's totals, and `uswap_summary`, the lines `uswap run` printed. A figure that was not
//! measured is null, never zero. With `--far`, the far configuration's figures follow
//! under `uswap_far_*` (far_side.rs: `_s`, `_ratio_vs_local`, `_peak_bytes`,
//! `_verify_errors`, the far counters `_pages_written`, `_pages_read`, `_lost_pages`,
//! `_failovers`, ...; absent without `--far`). With `--repeat N` each workload's object is
//! its median round's (by the ratio against zram lz4), and `rounds` lists every round's
//! ratio and both peaks per workload with the median's index.

use super::kernel::KernelConfig;
use super::outcome::{RunOutcome, Side};
use crate::report::{format_figure, Report};
use serde_json::{json, Map, Value};

/// All sides of one workload.
pub struct WorkloadRow {
    pub name: String,
    pub uswap: Side,
    /// The uswap side with its swap device in a far tier (`--far`: far_side.rs); `None`
    /// when not asked for.
    pub far: Option<Side>,
    pub kernel: Vec<(KernelConfig, Side)>,
}

impl WorkloadRow {
    /// Every side that was asked for, with its label: uswap, uswap far, then the kernel's.
    pub fn sides(&self) -> impl Iterator<Item = (&'static str, &Side)> {
        std::iter::once(("uswap", &self.uswap))
            .chain(self.far.iter().map(|side| ("uswap far", side)))
            .chain(self.kernel.iter().map(|(c, s)| (c.label(), s)))
    }

    fn kernel(&self, config: KernelConfig) -> Option<&RunOutcome> {
        self.kernel.iter().find(|(c, _)| *c == config).and_then(|(_, side)| side.outcome())
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.0}", bytes as f64 / f64::from(1 << 20))
}

fn us(ns: Option<u64>) -> String {
    ns.map_or("-".into(), |ns| format!("{:.1}", ns as f64 / 1000.0))
}

fn side_cells(outcome: &RunOutcome) -> Vec<String> {
    let m = &outcome.measured;
    vec![
        format!("{:.2}", m.wall_s),
        m.major_faults.to_string(),
        us(m.fault_p50_ns),
        us(m.fault_p99_ns),
        mib(outcome.peak_bytes),
        mib(outcome.charged_peak_bytes),
        mib(outcome.store_peak_bytes),
        outcome.tables_bytes.map_or("-".into(), mib),
        outcome.slab_bytes.map_or("-".into(), |b| format!("{:.1}", b as f64 / f64::from(1 << 20))),
        mib(outcome.compressed_peak_bytes),
        outcome.compression_ratio().map_or("-".into(), |r| format!("{r:.2}")),
        m.verify_errors.to_string(),
    ]
}

/// Adds the tables and the `workloads` field to `report`.
pub fn fill(report: &mut Report, rows: &[WorkloadRow]) {
    let uswap_ran = rows.iter().any(|row| row.uswap.outcome().is_some());
    report.field("uswap_available", uswap_ran);
    let header = [
        "workload / side",
        "wall s",
        "majflt",
        "fault p50 us",
        "fault p99 us",
        "peak MiB",
        "charged MiB",
        "store MiB",
        "tables MiB",
        "slab MiB",
        "compr MiB",
        "ratio",
        "verify err",
    ];
    let title = "Per side (peak = charged + store outside the charge + the kernel's swap tables \
                 and slab objects; charged: each side's memory cgroup)";
    let table = report.table(title, &header);
    for row in rows {
        for (label, side) in row.sides() {
            let name = format!("{} / {label}", row.name);
            match side {
                Side::Ran(outcome) => {
                    table.row(std::iter::once(name).chain(side_cells(outcome)));
                }
                Side::Skipped(_) => table.row([name, "skipped".into()]),
                Side::Failed(_) => table.row([name, "FAILED".into()]),
            }
        }
    }
    details(report, rows);
    super::far_side::fill(report, rows);
    let header = [
        "workload",
        "uswap s",
        "zram lz4 s",
        "ratio",
        "zram lzo-rle s",
        "zswap lz4 s",
        "zswap lzo-rle s",
    ];
    let table =
        report.table("uswap vs the kernel (wall seconds; ratio = uswap / zram lz4)", &header);
    for row in rows {
        let secs =
            |o: Option<&RunOutcome>| o.map_or("-".into(), |o| format!("{:.2}", o.measured.wall_s));
        let uswap = row.uswap.outcome();
        let zram_lz4 = row.kernel(KernelConfig::ZramLz4);
        let ratio = ratio(uswap, zram_lz4).map_or("-".into(), format_figure);
        table.row([
            row.name.clone(),
            secs(uswap),
            secs(zram_lz4),
            ratio,
            secs(row.kernel(KernelConfig::ZramLzoRle)),
            secs(row.kernel(KernelConfig::ZswapLz4)),
            secs(row.kernel(KernelConfig::ZswapLzoRle)),
        ]);
    }
    report.field("workloads", Value::from(rows.iter().map(workload_json).collect::<Vec<_>>()));
    for note in skip_notes(rows) {
        report.note(note);
    }
}

/// One note per distinct reason a side was skipped or failed, naming the runs.
fn skip_notes(rows: &[WorkloadRow]) -> Vec<String> {
    let mut reasons: Vec<(String, Vec<String>)> = Vec::new();
    for row in rows {
        for (label, side) in row.sides() {
            let Some(reason) = skip_reason(side) else { continue };
            let run = format!("{} / {label}", row.name);
            match reasons.iter_mut().find(|(r, _)| *r == reason) {
                Some((_, runs)) => runs.push(run),
                None => reasons.push((reason, vec![run])),
            }
        }
    }
    reasons
        .into_iter()
        .map(|(reason, runs)| {
            let verb = if reason.starts_with("failed") { "" } else { "skipped: " };
            format!("{}: {verb}{reason}", runs.join(", "))
        })
        .collect()
}

/// The secondary figures: what each run did, its own peak RSS, the cgroup's kernel memory
/// and page cache, the uswap tree's resident set.
fn details(report: &mut Report, rows: &[WorkloadRow]) {
    let header = [
        "workload / side",
        "minflt",
        "slow accesses",
        "max RSS MiB",
        "tree RSS MiB",
        "kmem MiB",
        "cache MiB",
        "run",
    ];
    let title = "Details (max RSS: the process's own ru_maxrss; tree RSS: uswap's process tree's \
                 VmRSS + VmPTE, file pages included; cache: page cache charged to the cgroup \
                 at the end)";
    let table = report.table(title, &header);
    for row in rows {
        for (label, side) in row.sides() {
            let Some(o) = side.outcome() else { continue };
            let m = &o.measured;
            table.row([
                format!("{} / {label}", row.name),
                m.minor_faults.to_string(),
                m.slow_accesses.map_or("-".into(), |n| n.to_string()),
                mib(m.max_rss_bytes),
                o.tree_rss_peak_bytes.map_or("-".into(), mib),
                o.kmem_peak_bytes.map_or("-".into(), mib),
                o.cache_charged_bytes.map_or("-".into(), mib),
                m.detail.clone(),
            ]);
        }
    }
}

/// The workload's ratio uswap / zram lz4, when both sides ran.
pub fn row_ratio(row: &WorkloadRow) -> Option<f64> {
    ratio(row.uswap.outcome(), row.kernel(KernelConfig::ZramLz4))
}

/// With `--repeat`: of each workload's rounds (`rounds[r][w]`, the same workloads in the
/// same order every round), the round whose ratio is the median (the lower of the two
/// middle ones for an even count; round 0 where no round has a ratio), and every round's
/// ratio. Adds the `rounds` field (`[{name, ratios_vs_zram_lz4, median_round}]`) and a
/// table; returns the chosen rows, for [`fill`].
pub fn pick_median_rounds(report: &mut Report, rounds: Vec<Vec<WorkloadRow>>) -> Vec<WorkloadRow> {
    let workloads = rounds.first().map_or(0, Vec::len);
    let mut columns: Vec<Vec<WorkloadRow>> = (0..workloads).map(|_| Vec::new()).collect();
    for round in rounds {
        for (w, row) in round.into_iter().enumerate() {
            columns[w].push(row);
        }
    }
    let table = report.table(
        "Rounds (--repeat): ratio uswap / zram lz4 of each, and peak MiB uswap / zram lz4; \
         the median round (by ratio) is reported",
        &["workload", "ratios", "median", "peaks"],
    );
    let mut fields = Vec::new();
    let mut chosen = Vec::new();
    for mut column in columns {
        let ratios: Vec<Option<f64>> = column.iter().map(row_ratio).collect();
        let peak = |o: Option<&RunOutcome>| o.map(|o| o.peak_bytes);
        let uswap_peaks: Vec<Option<u64>> =
            column.iter().map(|r| peak(r.uswap.outcome())).collect();
        let kernel_peaks: Vec<Option<u64>> =
            column.iter().map(|r| peak(r.kernel(KernelConfig::ZramLz4))).collect();
        let mut ranked: Vec<(f64, usize)> =
            ratios.iter().enumerate().filter_map(|(i, r)| r.map(|r| (r, i))).collect();
        ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
        let median = ranked.get(ranked.len().saturating_sub(1) / 2).map_or(0, |&(_, i)| i);
        let shown: Vec<String> =
            ratios.iter().map(|r| r.map_or("-".into(), |r| format!("{r:.3}"))).collect();
        let name = column[median].name.clone();
        let median_text = ratios[median].map_or("-".into(), |r| format!("{r:.3}"));
        let peaks: Vec<String> = uswap_peaks
            .iter()
            .zip(&kernel_peaks)
            .map(|(u, k)| format!("{}/{}", u.map_or("-".into(), mib), k.map_or("-".into(), mib)))
            .collect();
        table.row([name.clone(), shown.join(" "), median_text, peaks.join(" ")]);
        fields.push(json!({
            "name": name,
            "ratios_vs_zram_lz4": ratios,
            "median_round": median,
            "uswap_peak_bytes": uswap_peaks,
            "kernel_peak_bytes": kernel_peaks,
        }));
        chosen.push(column.swap_remove(median));
    }
    report.field("rounds", Value::Array(fields));
    chosen
}

fn ratio(uswap: Option<&RunOutcome>, kernel: Option<&RunOutcome>) -> Option<f64> {
    let (u, k) = (uswap?.measured.wall_s, kernel?.measured.wall_s);
    (k > 0.0).then(|| u / k)
}

/// One workload's JSON object.
pub fn workload_json(row: &WorkloadRow) -> Value {
    let uswap = row.uswap.outcome();
    let zram_lz4 = row.kernel(KernelConfig::ZramLz4);
    let mut object = Map::new();
    object.insert("name".into(), json!(row.name));
    object.insert("uswap_s".into(), json!(uswap.map(|o| o.measured.wall_s)));
    object.insert("kernel_zram_lz4_s".into(), json!(zram_lz4.map(|o| o.measured.wall_s)));
    object.insert("ratio_vs_zram_lz4".into(), json!(ratio(uswap, zram_lz4)));
    object.insert("uswap_peak_rss_bytes".into(), json!(uswap.map(|o| o.charged_peak_bytes)));
    object.insert("kernel_peak_bytes".into(), json!(zram_lz4.map(|o| o.peak_bytes)));
    object.insert("uswap_fault_p50_ns".into(), json!(uswap.and_then(|o| o.measured.fault_p50_ns)));
    object.insert(
        "kernel_fault_p50_ns".into(),
        json!(zram_lz4.and_then(|o| o.measured.fault_p50_ns)),
    );
    object.insert("uswap_skipped".into(), json!(skip_reason(&row.uswap)));
    let total = |name: &'static str| move |o: &RunOutcome| o.totals.as_ref().map(|t| t.get(name));
    let uswap_figures: [(&str, Value); 21] = [
        ("uswap_summary", json!(uswap.map(|o| o.summary_lines.clone()))),
        ("uswap_user_s", json!(uswap.map(|o| o.measured.user_s))),
        ("uswap_sys_s", json!(uswap.map(|o| o.measured.sys_s))),
        ("uswap_anon_peak_bytes", json!(uswap.and_then(|o| o.anon_peak_bytes))),
        ("uswap_swap", json!(uswap.and_then(|o| o.swap_counters.as_ref().map(|c| c.to_json())))),
        ("uswap_tree_peak_bytes", json!(uswap.and_then(total("tree_peak_bytes")))),
        ("uswap_fault_stall_s", json!(uswap.and_then(total("fault_stall_ns")).map(seconds))),
        ("uswap_engine_cpu_s", json!(uswap.and_then(total("engine_cpu_ns")).map(seconds))),
        ("uswap_peak_bytes", json!(uswap.map(|o| o.peak_bytes))),
        ("uswap_meter", json!(uswap.map(|o| o.meter.key()))),
        ("uswap_tree_rss_peak_bytes", json!(uswap.and_then(|o| o.tree_rss_peak_bytes))),
        ("uswap_cache_charged_bytes", json!(uswap.and_then(|o| o.cache_charged_bytes))),
        ("uswap_kmem_peak_bytes", json!(uswap.and_then(|o| o.kmem_peak_bytes))),
        ("uswap_stored_bytes", json!(uswap.map(|o| o.compressed_peak_bytes))),
        ("uswap_compression_ratio", json!(uswap.and_then(RunOutcome::compression_ratio))),
        ("uswap_file_cache_peak_bytes", json!(uswap.and_then(|o| o.file_cache_peak_bytes))),
        ("uswap_major_faults", json!(uswap.map(|o| o.measured.major_faults))),
        ("uswap_fault_p99_ns", json!(uswap.and_then(|o| o.measured.fault_p99_ns))),
        ("uswap_verify_errors", json!(uswap.map(|o| o.measured.verify_errors))),
        ("uswap_max_rss_bytes", json!(uswap.map(|o| o.measured.max_rss_bytes))),
        ("uswap_detail", json!(uswap.map(|o| o.measured.detail.clone()))),
    ];
    for (name, value) in uswap_figures {
        object.insert(name.into(), value);
    }
    super::far_side::insert_json(row, &mut object);
    for (config, side) in &row.kernel {
        let key = |figure: &str| format!("kernel_{}_{figure}", config.key());
        let o = side.outcome();
        object.insert(key("s"), json!(o.map(|o| o.measured.wall_s)));
        object.insert(key("peak_bytes"), json!(o.map(|o| o.peak_bytes)));
        object.insert(key("charged_peak_bytes"), json!(o.map(|o| o.charged_peak_bytes)));
        object.insert(key("store_peak_bytes"), json!(o.map(|o| o.store_peak_bytes)));
        object.insert(key("tables_bytes"), json!(o.and_then(|o| o.tables_bytes)));
        object.insert(key("slab_bytes"), json!(o.and_then(|o| o.slab_bytes)));
        object.insert(key("cache_charged_bytes"), json!(o.and_then(|o| o.cache_charged_bytes)));
        object.insert(key("major_faults"), json!(o.map(|o| o.measured.major_faults)));
        object.insert(key("fault_p50_ns"), json!(o.and_then(|o| o.measured.fault_p50_ns)));
        object.insert(key("fault_p99_ns"), json!(o.and_then(|o| o.measured.fault_p99_ns)));
        object.insert(key("stored_bytes"), json!(o.map(|o| o.compressed_peak_bytes)));
        object.insert(key("compression_ratio"), json!(o.and_then(RunOutcome::compression_ratio)));
        object.insert(key("verify_errors"), json!(o.map(|o| o.measured.verify_errors)));
        object.insert(key("minor_faults"), json!(o.map(|o| o.measured.minor_faults)));
        object.insert(key("max_rss_bytes"), json!(o.map(|o| o.measured.max_rss_bytes)));
        object.insert(key("slow_accesses"), json!(o.and_then(|o| o.measured.slow_accesses)));
        object.insert(key("kmem_peak_bytes"), json!(o.and_then(|o| o.kmem_peak_bytes)));
        object.insert(key("detail"), json!(o.map(|o| o.measured.detail.clone())));
        object.insert(key("user_s"), json!(o.map(|o| o.measured.user_s)));
        object.insert(key("sys_s"), json!(o.map(|o| o.measured.sys_s)));
        object.insert(key("anon_peak_bytes"), json!(o.and_then(|o| o.anon_peak_bytes)));
        object.insert(key("kswapd_s"), json!(o.and_then(|o| o.kswapd_s)));
        let swap = o.and_then(|o| o.swap_counters.as_ref().map(|c| c.to_json()));
        object.insert(key("swap"), json!(swap));
        object.insert(key("skipped"), json!(skip_reason(side)));
    }
    Value::Object(object)
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

pub fn skip_reason(side: &Side) -> Option<String> {
    match side {
        Side::Ran(_) => None,
        Side::Skipped(why) => Some(why.clone()),
        Side::Failed(why) => Some(format!("failed: {why}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(wall_s: f64, p50: u64) -> Side {
        let mut outcome = RunOutcome { peak_bytes: 300 << 20, ..RunOutcome::default() };
        outcome.measured.wall_s = wall_s;
        outcome.measured.fault_p50_ns = Some(p50);
        outcome.compressed_peak_bytes = 100;
        outcome.original_peak_bytes = 300;
        Side::Ran(Box::new(outcome))
    }

    #[test]
    fn json_has_the_headline_fields_and_nulls_for_uswap() {
        let row = WorkloadRow {
            name: "uniform".into(),
            uswap: Side::Skipped("not yet".into()),
            far: None,
            kernel: vec![
                (KernelConfig::ZramLz4, ran(2.0, 5000)),
                (KernelConfig::ZswapLz4, Side::Failed("boom".into())),
            ],
        };
        let json = workload_json(&row);
        assert_eq!(json["name"], "uniform");
        assert_eq!(json["uswap_s"], Value::Null);
        assert_eq!(json["ratio_vs_zram_lz4"], Value::Null);
        assert_eq!(json["kernel_zram_lz4_s"], 2.0);
        assert_eq!(json["kernel_peak_bytes"], 300 << 20);
        assert_eq!(json["kernel_fault_p50_ns"], 5000);
        assert_eq!(json["uswap_fault_p50_ns"], Value::Null);
        assert_eq!(json["kernel_zram_lz4_compression_ratio"], 3.0);
        assert_eq!(json["kernel_zswap_lz4_s"], Value::Null);
        assert_eq!(json["kernel_zswap_lz4_skipped"], "failed: boom");
        assert_eq!(json["uswap_skipped"], "not yet");
    }

    #[test]
    fn the_uswap_peak_counts_its_swap_file_in_the_page_cache() {
        let mut outcome = RunOutcome {
            charged_peak_bytes: 100 << 20,
            store_peak_bytes: 40 << 20,
            peak_bytes: 140 << 20,
            file_cache_peak_bytes: Some(40 << 20),
            ..RunOutcome::default()
        };
        outcome.measured.wall_s = 1.0;
        let row = WorkloadRow {
            name: "seq".into(),
            uswap: Side::Ran(Box::new(outcome)),
            far: None,
            kernel: vec![],
        };
        let json = workload_json(&row);
        assert_eq!(json["uswap_peak_rss_bytes"], 100 << 20);
        assert_eq!(json["uswap_file_cache_peak_bytes"], 40 << 20);
        assert_eq!(json["uswap_peak_bytes"], 140 << 20);
    }

    #[test]
    fn the_json_says_how_each_peak_was_measured() {
        let uswap = RunOutcome {
            meter: super::super::outcome::Meter::Cgroup,
            charged_peak_bytes: 600 << 20,
            tree_rss_peak_bytes: Some(610 << 20),
            cache_charged_bytes: Some(1 << 20),
            peak_bytes: 600 << 20,
            ..RunOutcome::default()
        };
        let kernel = RunOutcome {
            charged_peak_bytes: 256 << 20,
            store_peak_bytes: 300 << 20,
            tables_bytes: Some(7 << 20),
            slab_bytes: Some(3 << 20),
            peak_bytes: 566 << 20,
            ..RunOutcome::default()
        };
        let row = WorkloadRow {
            name: "zipf".into(),
            uswap: Side::Ran(Box::new(uswap)),
            far: None,
            kernel: vec![(KernelConfig::ZramLz4, Side::Ran(Box::new(kernel)))],
        };
        let json = workload_json(&row);
        assert_eq!(json["uswap_meter"], "cgroup");
        assert_eq!(json["uswap_peak_rss_bytes"], 600 << 20);
        assert_eq!(json["uswap_tree_rss_peak_bytes"], 610 << 20);
        assert_eq!(json["uswap_cache_charged_bytes"], 1 << 20);
        assert_eq!(json["kernel_zram_lz4_slab_bytes"], 3 << 20);
        assert_eq!(json["kernel_peak_bytes"], 566 << 20);
        let mut report = Report::new("compare");
        fill(&mut report, &[row]);
        let text = report.to_text();
        assert!(text.contains("slab MiB") && text.contains("tree RSS MiB"), "{text}");
    }

    #[test]
    fn ratio_is_uswap_over_zram_lz4() {
        let row = WorkloadRow {
            name: "seq".into(),
            uswap: ran(1.0, 1),
            far: None,
            kernel: vec![(KernelConfig::ZramLz4, ran(4.0, 1))],
        };
        assert_eq!(workload_json(&row)["ratio_vs_zram_lz4"], 0.25);
        assert_eq!(workload_json(&row)["uswap_file_cache_peak_bytes"], Value::Null);
        let mut report = Report::new("compare");
        fill(&mut report, &[row]);
        let text = report.to_text();
        assert!(text.contains("seq / zram lz4"), "{text}");
        assert!(text.contains("0.250"), "{text}");
    }

    /// `--repeat`: each workload reports its median round, the lower middle one for an even
    /// count; a round without a ratio (a side skipped) is not ranked.
    #[test]
    fn repeated_rounds_report_each_workloads_median() {
        let row = |name: &str, uswap_s: f64, kernel: Option<f64>| WorkloadRow {
            name: name.into(),
            uswap: ran(uswap_s, 1),
            far: None,
            kernel: vec![(
                KernelConfig::ZramLz4,
                kernel.map_or(Side::Skipped("no zram".into()), |k| ran(k, 1)),
            )],
        };
        let rounds = vec![
            vec![row("zipf", 12.0, Some(10.0)), row("seq", 5.0, Some(10.0)), row("x", 1.0, None)],
            vec![row("zipf", 10.0, Some(10.0)), row("seq", 7.0, Some(10.0)), row("x", 2.0, None)],
            vec![row("zipf", 11.0, Some(10.0)), row("seq", 6.0, None), row("x", 3.0, None)],
        ];
        let mut report = Report::new("compare");
        let chosen = pick_median_rounds(&mut report, rounds);
        let walls: Vec<f64> =
            chosen.iter().map(|r| r.uswap.outcome().unwrap().measured.wall_s).collect();
        // zipf 1.2, 1.0, 1.1: the third; seq 0.5, 0.7 ranked (the third round skipped): the
        // lower middle, the first; x never ranked: round 0.
        assert_eq!(walls, [11.0, 5.0, 1.0]);
        let json = report.to_json();
        let rounds = &json["rounds"];
        assert_eq!(rounds[0]["name"], "zipf");
        assert_eq!(rounds[0]["median_round"], 2);
        assert_eq!(rounds[0]["ratios_vs_zram_lz4"][1], 1.0);
        assert_eq!(rounds[1]["ratios_vs_zram_lz4"][2], Value::Null);
        assert_eq!(rounds[2]["median_round"], 0);
        // Every round's peaks beside its ratio (`ran` gives every side 300 MiB).
        assert_eq!(rounds[0]["uswap_peak_bytes"][1], 300 << 20);
        assert_eq!(rounds[1]["kernel_peak_bytes"][2], Value::Null, "a skipped side");
        assert!(report.to_text().contains("1.200 1.000 1.100"), "{}", report.to_text());
        assert!(report.to_text().contains("300/300 300/-"), "{}", report.to_text());
    }
}
