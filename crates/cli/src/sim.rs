//! `uswap sim`: the deterministic simulator (crate `sim`) from the command line.
//!
//! Three modes: run seeds (the default: find bugs, replay one), `--sweep` (parameter
//! studies, a table or CSV), `--compare-policies` (the cluster-policy table of seed 002).
//! Flags are parsed here and turned into the simulator's `Overrides`; each seed draws the
//! rest itself, so `--seed N` with the same flags replays a run exactly.

use anyhow::{anyhow, bail, Context};
use clap::Args;
use sim::options::{parse_sched, FaultChoice, Overrides, WorkloadKind};
use sim::study::{self, Axis, CellFigures};
use sim::{RunReport, Site};
use std::path::PathBuf;

/// Run the real engine over simulated memory, deterministically from a seed.
///
/// One u64 seed draws everything: the workload and its mix, the engine's configuration,
/// which fault sites are active (backend I/O errors, torn and lost writes, corrupt reads,
/// page-source retries, incompressible pages), the latency of every I/O, and which of the
/// simulated threads runs at every switch point. The checker compares every page read with
/// the last version written, checks the engine's invariants whenever nothing is in flight,
/// and fails on a deadlock or a wait without end.
///
/// A failure prints `seed=N commit=REV`, what went wrong, the options, and the command that
/// replays it: `uswap sim --seed N` plus the flags you gave. Flags pin options; everything
/// not pinned is the seed's own draw. See docs/TESTING.md.
///
/// Examples:
///   uswap sim --seeds 0..100                      find bugs in 100 different worlds
///   uswap sim --seed 17 --counters                replay seed 17, print the engine's counters
///   uswap sim --seed 3 --workload zipf --faults none --order 4
///   uswap sim --workload kbuild --compare-policies --json
///   uswap sim --workload zipf --sweep budget=64,128,256 --sweep readahead=0,8 --csv
///   uswap sim --workload phases --sweep pool=0,10,20,50 --seeds 0..5
///   uswap sim --tree --seeds 0..20                several engines under one budget
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct SimArgs {
    /// Run (or replay) this one seed.
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Run the seeds A..B (B excluded). Default 0..10.
    #[arg(long, value_name = "A..B")]
    seeds: Option<String>,
    /// Keep going after a failing seed (default: stop at the first).
    #[arg(long)]
    keep_going: bool,
    /// The workload: sequential, uniform, zipf, phases, kbuild, replay (with --trace).
    #[arg(long)]
    workload: Option<String>,
    /// Replay this trace (written by `uswap run --record` or `--write-trace`).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Write the operations of the run to this trace file (one seed only).
    #[arg(long)]
    write_trace: Option<PathBuf>,
    /// Program threads (a reclaimer thread is added).
    #[arg(long)]
    threads: Option<usize>,
    /// Operations per program thread.
    #[arg(long)]
    ops: Option<u64>,
    /// Pages of the heap region.
    #[arg(long)]
    region_pages: Option<u64>,
    /// The engine's memory budget, in pages.
    #[arg(long)]
    budget_pages: Option<u64>,
    /// The swap device, in pages (rounded up to 512-page clusters).
    #[arg(long)]
    swap_pages: Option<u64>,
    /// The folio order the engine maps (0 = 4 KiB .. 9 = 2 MiB).
    #[arg(long)]
    order: Option<u32>,
    /// The cluster allocation policy: current (6.18) or legacy.
    #[arg(long)]
    policy: Option<String>,
    /// The readahead window in pages (0 = off).
    #[arg(long)]
    readahead: Option<u32>,
    /// The scheduler: random, timed, or pct:PPM (random priorities that drop with chance
    /// PPM per million switch points).
    #[arg(long)]
    sched: Option<String>,
    /// Chance per million of checking the engine's invariants at each quiescent point.
    #[arg(long)]
    check_ppm: Option<u32>,
    /// kbuild: keep the swap device this full, percent.
    #[arg(long)]
    fill: Option<u32>,
    /// Reads among accesses, percent (the rest are writes).
    #[arg(long)]
    read_percent: Option<u32>,
    /// Chance per million operations of a MADV_PAGEOUT of a few folios.
    #[arg(long)]
    pageout_ppm: Option<u32>,
    /// Chance per million operations of a MADV_DONTNEED of up to 32 pages.
    #[arg(long)]
    remove_ppm: Option<u32>,
    /// Chance per million operations of a fork (the child reads, then exits).
    #[arg(long)]
    fork_ppm: Option<u32>,
    /// The Zipf exponent of the zipf workload.
    #[arg(long)]
    zipf_theta: Option<f64>,
    /// The compressed pool's share of the budget, percent (0 turns the pool off).
    #[arg(long, value_name = "PERCENT")]
    pool: Option<u32>,
    /// The pool's compressor: lz4, zstd, zstd:LEVEL, none.
    #[arg(long)]
    compressor: Option<String>,
    /// Fault sites: swarm (as the seed draws them; the default) or none.
    #[arg(long)]
    faults: Option<String>,
    /// Activate one fault site at a rate, SITE=PPM (repeatable; replaces the seed's
    /// sites). Sites: read_fail, read_corrupt, write_fail, write_torn, write_lost,
    /// discard_fail, take_retry, map_retry, incompressible, compress_fail, pool_alloc_fail,
    /// protect_lost, take_staged.
    #[arg(long, value_name = "SITE=PPM")]
    fault: Vec<String>,
    /// Start from a preset, then apply the other flags: `race` (the hotspot world that
    /// exposes page-in races: zipf, 4 threads, a full one-cluster device, hot page-outs,
    /// PCT scheduling, no faults).
    #[arg(long)]
    preset: Option<String>,
    /// Plant the page-in re-validation bug (debug builds): the run should fail.
    #[arg(long)]
    planted_bug: bool,
    /// Print every operation as it completes (thread, index, operation, result) to stderr.
    #[arg(long, short)]
    verbose: bool,
    /// Print the engine's counters at the end of each run.
    #[arg(long)]
    counters: bool,
    /// Sweep a parameter, NAME=V1,V2,... (repeatable: every combination runs). Names:
    /// policy, budget, order, readahead, swap, pool. Prints a table, or CSV with --csv.
    #[arg(long, value_name = "NAME=VALUES")]
    sweep: Vec<String>,
    /// Print sweeps as CSV.
    #[arg(long)]
    csv: bool,
    /// Compare the current and the legacy cluster policy on the kbuild workload, one
    /// large folio order at a time: per-order swpout and swpout_fallback.
    #[arg(long)]
    compare_policies: bool,
    /// The orders of --compare-policies (default 0..=9), e.g. 2,4,9.
    #[arg(long)]
    orders: Option<String>,
    /// Print one JSON object (--compare-policies, --sweep, and seed runs).
    #[arg(long)]
    json: bool,
    /// Run seeds in a release build anyway (assertions are weaker there).
    #[arg(long)]
    allow_release: bool,
    /// Run a process tree instead: several engines under one budget divided by `uswap
    /// run`'s broker policy, processes starting and exiting (each seed draws its tree;
    /// docs/RUN.md, "A process tree under one budget").
    #[arg(long)]
    tree: bool,
}

/// Runs `uswap sim`.
///
/// # Errors
/// Bad flags, or failing seeds (the exit status is then 1).
pub fn run(args: SimArgs) -> anyhow::Result<()> {
    let overrides = overrides(&args)?;
    let seeds = seeds(&args)?;
    if args.tree {
        return run_trees(&args, &seeds);
    }
    if args.compare_policies {
        return compare(&args, &overrides, &seeds);
    }
    if !args.sweep.is_empty() {
        return sweep(&args, &overrides, &seeds);
    }
    if !cfg!(debug_assertions) && !args.allow_release {
        bail!(
            "this is a release build: debug assertions (and the planted bug) are compiled \
             out, so a seed can pass here and fail in a debug build. Build with `cargo build` \
             (or pass --allow-release)"
        );
    }
    run_seeds(&args, &overrides, &seeds)
}

fn overrides(a: &SimArgs) -> anyhow::Result<Overrides> {
    let workload = match &a.workload {
        Some(name) => Some(
            WorkloadKind::from_name(name).ok_or_else(|| anyhow!("unknown workload {name:?}"))?,
        ),
        None => None,
    };
    let policy = match a.policy.as_deref() {
        None => None,
        Some("current") => Some(slots::AllocPolicy::Current),
        Some("legacy") => Some(slots::AllocPolicy::Legacy),
        Some(other) => bail!("policy {other:?}: expected current or legacy"),
    };
    let faults = match (a.faults.as_deref(), a.fault.is_empty()) {
        (Some("none"), true) => FaultChoice::None,
        (None | Some("swarm"), true) => FaultChoice::Swarm,
        (None, false) => FaultChoice::Sites(
            a.fault.iter().map(|f| parse_fault(f)).collect::<anyhow::Result<_>>()?,
        ),
        (Some(other), _) => bail!("--faults {other:?}: expected swarm or none (or --fault)"),
    };
    let base = match a.preset.as_deref() {
        None => Overrides::default(),
        Some("race") => Overrides::race(),
        Some(other) => bail!("preset {other:?}: expected race"),
    };
    let m = &base.mix;
    Ok(Overrides {
        workload: workload.or(base.workload),
        trace: a.trace.clone(),
        threads: a.threads.or(base.threads),
        ops_per_thread: a.ops,
        region_pages: a.region_pages.or(base.region_pages),
        budget_pages: a.budget_pages.or(base.budget_pages),
        swap_pages: a.swap_pages.or(base.swap_pages),
        folio_order: a.order,
        policy,
        readahead_max_pages: a.readahead,
        sched: match a.sched.as_deref() {
            Some(text) => Some(parse_sched(text).map_err(|e| anyhow!(e))?),
            None => base.sched,
        },
        faults: if faults == FaultChoice::Swarm { base.faults.clone() } else { faults },
        check_ppm: a.check_ppm,
        fill_percent: a.fill,
        mix: sim::options::MixOverrides {
            read_percent: a.read_percent.or(m.read_percent),
            pageout_ppm: a.pageout_ppm.or(m.pageout_ppm),
            remove_ppm: a.remove_ppm.or(m.remove_ppm),
            fork_ppm: a.fork_ppm.or(m.fork_ppm),
            zipf_theta: a.zipf_theta.or(m.zipf_theta),
        },
        pool_percent: a.pool,
        compressor: match &a.compressor {
            Some(name) => Some(name.parse().map_err(|e| anyhow!("--compressor: {e}"))?),
            None => None,
        },
        planted_bug: a.planted_bug,
        verbose: a.verbose,
    })
}

fn parse_fault(text: &str) -> anyhow::Result<(Site, u32)> {
    let (name, ppm) = text.split_once('=').ok_or_else(|| anyhow!("--fault {text:?}: SITE=PPM"))?;
    let site = Site::from_name(name).ok_or_else(|| anyhow!("unknown fault site {name:?}"))?;
    let ppm = ppm.parse().with_context(|| format!("--fault {text:?}: PPM is a number"))?;
    Ok((site, ppm))
}

fn seeds(a: &SimArgs) -> anyhow::Result<Vec<u64>> {
    if let Some(seed) = a.seed {
        return Ok(vec![seed]);
    }
    let text = a.seeds.as_deref().unwrap_or("0..10");
    let (lo, hi) = text.split_once("..").ok_or_else(|| anyhow!("--seeds {text:?}: A..B"))?;
    let (lo, hi): (u64, u64) = (lo.parse()?, hi.parse()?);
    if hi <= lo || hi - lo > 1_000_000 {
        bail!("--seeds {text:?}: need A < B, at most a million seeds");
    }
    Ok((lo..hi).collect())
}

fn run_seeds(a: &SimArgs, o: &Overrides, seeds: &[u64]) -> anyhow::Result<()> {
    if a.write_trace.is_some() && seeds.len() != 1 {
        bail!("--write-trace needs exactly one --seed");
    }
    let flags = o.to_args();
    let (mut failed, mut ran) = (Vec::new(), 0);
    let mut reports = Vec::new();
    for &seed in seeds {
        let options = sim::SimOptions::draw(seed, o).map_err(|e| anyhow!(e))?;
        let trace = match &a.write_trace {
            Some(path) => Some(sim::run::trace_file(path).map_err(|e| anyhow!(e))?),
            None => None,
        };
        let report = sim::run(&options, trace);
        ran += 1;
        if !a.json {
            println!("{}", report.summary_line());
            if let Some(replay) = &report.replay {
                println!("  {}", replay.describe());
            }
            if a.counters {
                print!("{}", report.counters_text());
            }
            if !report.passed() {
                eprint!("{}", report.failure_report(&flags));
            }
        }
        if !report.passed() {
            failed.push(seed);
        }
        let stop = !report.passed() && !a.keep_going;
        reports.push(report);
        if stop {
            break;
        }
    }
    if a.json {
        println!("{}", seeds_json(&reports, &flags));
    } else {
        println!("{ran} seeds, {} failed, commit {}", failed.len(), sim::COMMIT);
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(anyhow!("failing seeds: {failed:?}"))
    }
}

/// `--tree`: each seed's process tree (sim::tree), a line each, or one JSON object.
fn run_trees(a: &SimArgs, seeds: &[u64]) -> anyhow::Result<()> {
    let mut failed = Vec::new();
    let mut runs = Vec::new();
    for &seed in seeds {
        let options = sim::tree::TreeOptions::draw(seed);
        let report = sim::tree::run_tree(&options);
        if a.json {
            runs.push(serde_json::json!({
                "seed": seed,
                "passed": report.passed(),
                "failure": report.failure,
                "options": options.describe(),
                "reads_checked": report.reads_checked,
                "pages_out": report.pages_out,
                "gains": report.gains,
                "slowest_gain_ticks": report.slowest_gain_ticks,
                "overcommitted_ticks": report.overcommitted_ticks,
                "digest": format!("{:016x}", report.digest),
            }));
        } else {
            println!("{}", report.summary_line());
            if let Some(failure) = &report.failure {
                eprintln!(
                    "  {failure}\n  {}\n  replay: uswap sim --tree --seed {seed}",
                    options.describe()
                );
            }
        }
        if !report.passed() {
            failed.push(seed);
            if !a.keep_going {
                break;
            }
        }
    }
    if a.json {
        println!("{}", serde_json::json!({ "commit": sim::COMMIT, "runs": runs }));
    } else {
        println!("{} trees, {} failed, commit {}", seeds.len(), failed.len(), sim::COMMIT);
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(anyhow!("failing seeds: {failed:?}"))
    }
}

fn seeds_json(reports: &[RunReport], flags: &str) -> serde_json::Value {
    let runs: Vec<serde_json::Value> = reports
        .iter()
        .map(|r| {
            serde_json::json!({
                "seed": r.options.seed,
                "passed": r.passed(),
                "failure": r.failure.as_ref().map(ToString::to_string),
                "options": r.options.describe(),
                "ops": r.ops,
                "steps": r.steps,
                "reads_checked": r.reads_checked,
                "pages_lost": r.pages_lost,
                "remaps": r.remaps,
                "invariant_checks": r.invariant_checks,
                "digest": format!("{:016x}", r.digest),
                "replay": r.replay.as_ref().map(|p| serde_json::json!({
                    "records": p.records,
                    "pageouts": p.pageouts,
                    "pageout_pages": p.pageout_pages,
                })),
                "counters": r.stats.as_ref().map(|s| {
                    s.counters.fields().into_iter().collect::<std::collections::BTreeMap<_, _>>()
                }),
            })
        })
        .collect();
    serde_json::json!({ "commit": sim::COMMIT, "flags": flags, "runs": runs })
}

fn progress_dot(report: &RunReport) {
    eprint!("{}", if report.passed() { "." } else { "F" });
}

fn sweep(a: &SimArgs, o: &Overrides, seeds: &[u64]) -> anyhow::Result<()> {
    let axes: Vec<Axis> = a
        .sweep
        .iter()
        .map(|s| study::parse_axis(s))
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow!(e))?;
    let cells = study::sweep(o, &axes, seeds, progress_dot).map_err(|e| anyhow!(e))?;
    eprintln!();
    let names: Vec<&str> = axes.iter().map(|x| x.param.name()).collect();
    if a.json {
        let rows: Vec<serde_json::Value> = cells
            .iter()
            .map(|c| {
                let mut row = serde_json::Map::new();
                for (name, value) in names.iter().zip(&c.values) {
                    row.insert((*name).into(), value.clone().into());
                }
                for (name, value) in CellFigures::COLUMNS.iter().zip(c.figures.values()) {
                    row.insert((*name).into(), value.into());
                }
                serde_json::Value::Object(row)
            })
            .collect();
        println!("{}", serde_json::json!({ "commit": sim::COMMIT, "cells": rows }));
        return Ok(());
    }
    let header: Vec<&str> = names.iter().copied().chain(CellFigures::COLUMNS).collect();
    let rows: Vec<Vec<String>> = cells
        .iter()
        .map(|c| {
            c.values.iter().cloned().chain(c.figures.values().iter().map(u64::to_string)).collect()
        })
        .collect();
    print_table(&header, &rows, a.csv);
    Ok(())
}

fn print_table(header: &[&str], rows: &[Vec<String>], csv: bool) {
    if csv {
        println!("{}", header.join(","));
        for row in rows {
            println!("{}", row.join(","));
        }
        return;
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|i| rows.iter().map(|r| r[i].len()).chain([header[i].len()]).max().unwrap_or(0))
        .collect();
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> =
            cells.iter().zip(&widths).map(|(c, w)| format!("{c:>w$}")).collect();
        println!("{}", padded.join("  "));
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// The policy comparison as JSON: `{"orders": [{"order", "current_swpout",
/// "current_fallback", "legacy_swpout", "legacy_fallback"}, ...]}` (a stable format:
/// scripts read these names).
fn compare_json(rows: &[study::OrderRow]) -> serde_json::Value {
    let orders: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "order": r.order,
                "current_swpout": r.current_swpout,
                "current_fallback": r.current_fallback,
                "legacy_swpout": r.legacy_swpout,
                "legacy_fallback": r.legacy_fallback,
            })
        })
        .collect();
    serde_json::json!({ "orders": orders })
}

fn compare(a: &SimArgs, o: &Overrides, seeds: &[u64]) -> anyhow::Result<()> {
    let orders: Vec<u32> = match &a.orders {
        Some(list) => list.split(',').map(str::parse).collect::<Result<_, _>>()?,
        None => (0..=9).collect(),
    };
    if orders.iter().any(|&k| k > 9) {
        bail!("--orders: 0..=9");
    }
    // One seed by default: a run is a whole kernel build.
    let seeds = if a.seed.is_none() && a.seeds.is_none() { vec![0] } else { seeds.to_vec() };
    let rows = study::compare_policies(o, &orders, &seeds, progress_dot).map_err(|e| anyhow!(e))?;
    eprintln!();
    if a.json {
        println!("{}", compare_json(&rows));
        return Ok(());
    }
    let header = [
        "order",
        "size",
        "current_swpout",
        "current_fallback",
        "legacy_swpout",
        "legacy_fallback",
        "fill_cur%",
        "fill_leg%",
        "failures",
    ];
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.order.to_string(),
                format!("{}K", 4u64 << r.order),
                r.current_swpout.to_string(),
                r.current_fallback.to_string(),
                r.legacy_swpout.to_string(),
                r.legacy_fallback.to_string(),
                r.fill_percent[0].to_string(),
                r.fill_percent[1].to_string(),
                r.failures.to_string(),
            ]
        })
        .collect();
    print_table(&header, &rows, a.csv);
    println!("seeds {seeds:?}, commit {}", sim::COMMIT);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_policies_json_has_the_documented_fields() {
        let row = study::OrderRow {
            order: 9,
            current_swpout: 660,
            current_fallback: 147,
            legacy_swpout: 191,
            legacy_fallback: 260,
            ..study::OrderRow::default()
        };
        let json = compare_json(&[row]);
        let expected = serde_json::json!({ "orders": [{
            "order": 9,
            "current_swpout": 660,
            "current_fallback": 147,
            "legacy_swpout": 191,
            "legacy_fallback": 260,
        }]});
        assert_eq!(json, expected);
    }
}
