//! `--plot DIR`: per workload, a latency CDF and a memory-over-time chart, as SVG.
//!
//! `latency-<workload>.svg`: fraction of accesses at or below a latency (log ns), one line
//! per configuration (synthetic workloads only: the others do not time single accesses).
//! `memory-<workload>.svg`: memory the run cost over time, in MiB: the charge (cgroup)
//! plus the store kept outside it (zram), one line per configuration.

use super::outcome::Side;
use super::runner::Sample;
use crate::svg::{LineChart, Series};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The results of one workload, by side name.
pub struct WorkloadResults<'a> {
    pub name: &'a str,
    pub sides: Vec<(&'a str, &'a Side)>,
}

/// The two charts of one workload.
pub fn charts(results: &WorkloadResults<'_>) -> (LineChart, LineChart) {
    let mut latency = LineChart {
        title: format!("{}: access latency CDF", results.name),
        x_label: "latency (ns, log scale)".into(),
        y_label: "fraction of accesses".into(),
        x_log: true,
        y_max: None,
        series: Vec::new(),
    };
    let mut memory = LineChart {
        title: format!("{}: memory charged + store + swap tables", results.name),
        x_label: "time (s)".into(),
        y_label: "MiB".into(),
        x_log: false,
        y_max: None,
        series: Vec::new(),
    };
    for (side, result) in &results.sides {
        let Some(outcome) = result.outcome() else { continue };
        let cdf = &outcome.measured.latency_cdf;
        if !cdf.is_empty() {
            let points = cdf.iter().map(|&(q, ns)| (ns.max(1) as f64, q)).collect();
            latency.series.push(Series { name: (*side).to_string(), points });
        }
        // The kernel's swap tables are set up before the run and constant through it.
        let tables = outcome.tables_bytes.unwrap_or(0);
        let bytes = |s: &Sample| (s.charged_bytes + s.outside_bytes + tables) as f64;
        let points = outcome
            .measured
            .samples
            .iter()
            .map(|s| (s.t_s, bytes(s) / f64::from(1 << 20)))
            .collect();
        memory.series.push(Series { name: (*side).to_string(), points });
    }
    (latency, memory)
}

/// Writes the charts of every workload into `dir` (created if missing); returns the files.
///
/// # Errors
/// The directory or a file cannot be written.
pub fn write_all(dir: &Path, workloads: &[WorkloadResults<'_>]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {dir:?}"))?;
    let mut written = Vec::new();
    for results in workloads {
        let (latency, memory) = charts(results);
        let mut pairs = vec![(format!("memory-{}.svg", results.name), memory)];
        if !latency.series.is_empty() {
            pairs.push((format!("latency-{}.svg", results.name), latency));
        }
        for (file, chart) in pairs {
            if chart.series.is_empty() {
                continue;
            }
            let path = dir.join(file);
            std::fs::write(&path, chart.render()).with_context(|| format!("write {path:?}"))?;
            written.push(path);
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::super::outcome::RunOutcome;
    use super::super::runner::Sample;
    use super::*;

    #[test]
    fn charts_have_one_line_per_run_side() {
        let mut outcome = RunOutcome::default();
        outcome.measured.latency_cdf = vec![(0.5, 300), (0.99, 20_000), (1.0, 90_000)];
        outcome.measured.samples = vec![
            Sample { t_s: 0.0, charged_bytes: 1 << 20, ..Sample::default() },
            Sample {
                t_s: 0.05,
                charged_bytes: 2 << 20,
                outside_bytes: 1 << 20,
                ..Sample::default()
            },
        ];
        let ran = Side::Ran(Box::new(outcome));
        let skipped = Side::Skipped("no zram".into());
        let results = WorkloadResults {
            name: "uniform",
            sides: vec![("zram lz4", &ran), ("uswap", &skipped)],
        };
        let (latency, memory) = charts(&results);
        assert_eq!(latency.series.len(), 1);
        assert_eq!(latency.series[0].points[1], (20_000.0, 0.99));
        assert_eq!(memory.series[0].points[1], (0.05, 3.0));
        let dir = std::env::temp_dir().join(format!("uswap-plot-test-{}", std::process::id()));
        let files = write_all(&dir, &[results]).unwrap();
        assert_eq!(files.len(), 2);
        assert!(std::fs::read_to_string(&files[0]).unwrap().contains("</svg>"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
