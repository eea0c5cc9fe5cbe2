//! The build workload's part of the report, in the seeds' terms: per side the wall time,
//! the CPU time of the reaped tree, the peaks, pswpout / pswpin (and zswpout / zswpin: the
//! pages that went to a compressed pool rather than a device, counters.rs) and, per folio
//! size, swpout and swpout_fallback; the unmanaged reference beside them; then where the
//! uswap side's time went (the tree's totals from `uswap run --stats-file`) and the summary
//! `uswap run` printed.
//!
//! JSON: the `build` field (source, command, the reference's figures, the budget and where
//! it came from); each side's counters are in the `workloads` array (summary.rs).

use super::build::Reference;
use super::outcome::{RunOutcome, Side};
use super::summary::WorkloadRow;
use super::workloads::RunContext;
use crate::report::Report;
use serde_json::json;

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / f64::from(1 << 20))
}

/// The command as a shell would show it, with where it runs.
fn command_line(command: &std::process::Command) -> String {
    let mut words = vec![command.get_program().to_string_lossy().into_owned()];
    words.extend(command.get_args().map(|a| a.to_string_lossy().into_owned()));
    let dir = command.get_current_dir().map(|d| format!(" in {}", d.display()));
    format!("{}{}", words.join(" "), dir.unwrap_or_default())
}

/// The build's settings and its reference: a table and the `build` field.
pub fn describe(
    report: &mut Report,
    ctx: &RunContext,
    reference: Option<&anyhow::Result<Reference>>,
) {
    let Some(reference) = reference else { return };
    let setup = &ctx.build;
    let source = format!("{} ({})", setup.describe(), setup.source.display());
    let command = command_line(&setup.command());
    let table = report.table("Build", &["what", "value"]);
    table.row(["source".to_string(), source.clone()]);
    table.row(["command".to_string(), command.clone()]);
    let reference = match reference {
        Ok(reference) => reference,
        Err(error) => {
            table.row(["unmanaged build".to_string(), format!("FAILED: {error:#}")]);
            return;
        }
    };
    let o = &reference.outcome;
    let m = &o.measured;
    table.row([
        "unmanaged build (reference)".to_string(),
        format!(
            "{:.2} s, user {:.2} s, sys {:.2} s; peak {} MiB ({}), anonymous {} MiB, the \
             processes' VmRSS + VmPTE summed {} MiB",
            m.wall_s,
            m.user_s,
            m.sys_s,
            mib(o.peak_bytes),
            o.meter.key(),
            o.anon_peak_bytes.map_or("-".into(), mib),
            o.tree_rss_peak_bytes.map_or("-".into(), mib)
        ),
    ]);
    let budget_source = if reference.budget_given {
        "--budget".to_string()
    } else {
        "half of the unmanaged build's peak".to_string()
    };
    table.row([
        "budget (both sides)".to_string(),
        format!("{} MiB: {budget_source}", mib(reference.budget_bytes)),
    ]);
    report.field(
        "build",
        json!({
            "source": source,
            "command": command,
            "reference_s": m.wall_s,
            "reference_user_s": m.user_s,
            "reference_sys_s": m.sys_s,
            "reference_peak_bytes": o.peak_bytes,
            "reference_meter": o.meter.key(),
            "reference_anon_peak_bytes": o.anon_peak_bytes,
            "reference_tree_rss_peak_bytes": o.tree_rss_peak_bytes,
            "reference_outputs": m.outputs.as_ref().map(|outputs| outputs.0.len()),
            "budget_bytes": reference.budget_bytes,
            "budget_source": budget_source,
        }),
    );
}

/// The cells of one side's row.
fn cells(label: &str, o: &RunOutcome, is_reference: bool) -> Vec<String> {
    let m = &o.measured;
    let counters = o.swap_counters.as_ref();
    let count = |name: &str| counters.map_or("-".into(), |c| c.get(name).to_string());
    let outputs = match (&m.outputs, is_reference) {
        (None, _) => "-".to_string(),
        (Some(outputs), true) => format!("{} (reference)", outputs.0.len()),
        (Some(outputs), false) if m.verify_errors == 0 => format!("{} identical", outputs.0.len()),
        (Some(_), false) => format!("{} WRONG", m.verify_errors),
    };
    vec![
        label.to_string(),
        format!("{:.2}", m.wall_s),
        format!("{:.2}", m.user_s),
        format!("{:.2}", m.sys_s),
        o.kswapd_s.map_or("-".into(), |s| format!("{s:.2}")),
        mib(o.peak_bytes),
        o.anon_peak_bytes.map_or("-".into(), mib),
        count("pswpout"),
        count("pswpin"),
        count("zswpout"),
        count("zswpin"),
        counters.map_or("-".into(), |c| c.format_sizes(|s| s.swpout)),
        counters.map_or("-".into(), |c| c.format_sizes(|s| s.swpout_fallback)),
        outputs,
    ]
}

/// The build's table, where the uswap side's time went, and its `uswap run` summary.
pub fn fill(report: &mut Report, rows: &[WorkloadRow], reference: Option<&Reference>) {
    let Some(row) = rows.iter().find(|row| row.name == "build") else { return };
    let header = [
        "side",
        "wall s",
        "user s",
        "sys s",
        "kswapd s",
        "peak MiB",
        "anon MiB",
        "pswpout",
        "pswpin",
        "zswpout",
        "zswpin",
        "swpout by size",
        "fallback by size",
        "outputs",
    ];
    let title = "Build (user, sys: the reaped tree's rusage; kswapd: its CPU time meanwhile; \
                 anon: sampled anonymous charge + store outside it, no page cache; counters in \
                 pages, per size in folios)";
    let table = report.table(title, &header);
    if let Some(reference) = reference {
        table.row(cells("unmanaged", &reference.outcome, true));
    }
    for (label, side) in row.sides() {
        match side {
            Side::Ran(outcome) => table.row(cells(label, outcome, false)),
            Side::Skipped(_) => table.row([label, "skipped"]),
            Side::Failed(_) => table.row([label, "FAILED"]),
        }
    }
    let Some(uswap) = row.uswap.outcome() else { return };
    if let Some(line) = uswap_time_line(uswap) {
        report.note(line);
    }
    if !uswap.summary_lines.is_empty() {
        let table = report.table("uswap run's summary of the build", &["line"]);
        for line in &uswap.summary_lines {
            table.row([line.as_str()]);
        }
    }
}

/// Where the uswap side's time went, from its tree's totals.
fn uswap_time_line(uswap: &RunOutcome) -> Option<String> {
    let totals = uswap.totals.as_ref()?;
    let seconds = |name: &str| totals.get(name) as f64 / 1e9;
    Some(format!(
        "build / uswap: {} processes joined the tree (at most {} at once), which was \
         over-committed for {} ticks of 50 ms (floors up to {} MiB); its threads waited {:.2} s \
         for pages (summed over threads), its engines used {:.2} s of CPU; tree peak {} MiB (the \
         broker's sampled sum)",
        totals.get("tree_joins"),
        totals.get("tree_members_peak"),
        totals.get("tree_overcommitted_ticks"),
        mib(totals.get("tree_floors_peak_bytes")),
        seconds("fault_stall_ns"),
        seconds("engine_cpu_ns"),
        mib(totals.get("tree_peak_bytes")),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::counters::SwapCounters;
    use super::super::kernel::KernelConfig;
    use super::*;
    use runstat::StatsFile;

    #[test]
    fn the_table_has_every_side_and_the_reference() {
        let mut uswap = RunOutcome { peak_bytes: 90 << 20, ..RunOutcome::default() };
        uswap.measured.wall_s = 30.0;
        uswap.measured.sys_s = 4.5;
        uswap.measured.outputs = Some(Default::default());
        let text = "# uswap stats v1\nzswpout 5000\nswpout_4kB 1000\nswpout_64kB 250\n\
                    swpout_fallback_64kB 3\ntree_joins 812\ntree_members_peak 9\n\
                    fault_stall_ns 2500000000\nfault_ns \n";
        let totals = StatsFile::parse(text).unwrap();
        uswap.swap_counters = Some(SwapCounters::from_totals(&totals));
        uswap.totals = Some(totals);
        uswap.summary_lines = vec!["make exited with status 0 after 30.00 s".into()];
        let mut kernel = RunOutcome { kswapd_s: Some(0.25), ..RunOutcome::default() };
        kernel.measured.verify_errors = 2;
        kernel.measured.outputs = Some(Default::default());
        let row = WorkloadRow {
            name: "build".into(),
            uswap: Side::Ran(Box::new(uswap)),
            far: None,
            kernel: vec![
                (KernelConfig::ZramLz4, Side::Ran(Box::new(kernel))),
                (KernelConfig::ZswapLz4, Side::Skipped("no lz4".into())),
            ],
        };
        let reference = Reference {
            outcome: RunOutcome { peak_bytes: 150 << 20, ..RunOutcome::default() },
            budget_bytes: 75 << 20,
            budget_given: false,
        };
        let mut report = Report::new("compare");
        fill(&mut report, &[row], Some(&reference));
        let text = report.to_text();
        for expected in [
            "unmanaged",
            "150.0",
            "30.00",
            "4.50",
            "4kB:1000 64kB:250",
            "64kB:3",
            "5000",
            "0 identical",
            "2 WRONG",
            "0.25",
            "zswap lz4 + swap file",
            "812 processes joined the tree (at most 9 at once)",
            "waited 2.50 s for pages",
            "make exited with status 0",
        ] {
            assert!(text.contains(expected), "{expected:?} in {text}");
        }
        let mut empty = Report::new("compare");
        fill(&mut empty, &[], Some(&reference));
        assert!(!empty.to_text().contains("Build"), "no build row, no build table");
    }

    #[test]
    fn the_command_line_is_shown_as_run() {
        let mut command = std::process::Command::new("make");
        command.args(["-j2", "MALLOC=libc"]).current_dir("/tmp/x");
        assert_eq!(command_line(&command), "make -j2 MALLOC=libc in /tmp/x");
    }
}
