//! `uswap bench xarray`: the XArray against std's `BTreeMap` and `HashMap`, and the seed's
//! multi-index experiment.
//!
//! In one run:
//! - stores/s and loads/s on 1M dense keys (0..n) and 1M sparse random keys, for the
//!   XArray (value entries), `BTreeMap<u64, u64>` and `HashMap<u64, u64>`. Stores insert into
//!   an empty structure in key order (dense) or random order (sparse); loads look every key
//!   up in one random permutation, the same for the three structures. Best of 3 runs.
//! - bytes per entry of the dense XArray (`memory_bytes() / n`);
//! - the seed's experiment: node bytes holding 64 order-9 entries (2 MiB folios) as
//!   multi-index entries vs as 512 single entries each.
//!
//! "Sparse" is 1M random keys in a space 16 times larger (16M slots: a 64 GiB swap device,
//! the largest key space a swap cache of this size serves). Random keys over all of `u64`
//! would give each key its own chain of 7 nodes (~4 GB for 1M keys): a radix tree's known
//! weak case, which no consumer of this array has.
//!
//! JSON fields: `dense_load_ratio_vs_btreemap`, `dense_bytes_per_entry`,
//! `multi_index_node_bytes`, `single_index_node_bytes`, `multi_index_node_ratio`, and
//! `{xarray,btreemap,hashmap}_{dense,sparse}_{loads,stores}_per_s`.

use crate::report::{format_figure, Report, Target};
use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::time::Instant;
use xarray::{Entry, NoItems, XArray};

/// A small deterministic generator (splitmix64), so every run uses the same keys.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

/// Fisher-Yates with the deterministic generator.
fn shuffled(keys: &[u64], rng: &mut SplitMix) -> Vec<u64> {
    let mut out = keys.to_vec();
    for i in (1..out.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        out.swap(i, j);
    }
    out
}

/// The keys of one workload: insertion order and lookup order.
struct Keys {
    name: &'static str,
    insert: Vec<u64>,
    lookup: Vec<u64>,
}

fn dense_keys(n: u64, rng: &mut SplitMix) -> Keys {
    let insert: Vec<u64> = (0..n).collect();
    let lookup = shuffled(&insert, rng);
    Keys { name: "dense", insert, lookup }
}

fn sparse_keys(n: u64, rng: &mut SplitMix) -> Keys {
    let space = n * 16;
    let mut seen = std::collections::HashSet::with_capacity(n as usize);
    let mut insert = Vec::with_capacity(n as usize);
    while insert.len() < n as usize {
        let key = rng.below(space);
        if seen.insert(key) {
            insert.push(key);
        }
    }
    let lookup = shuffled(&insert, rng);
    Keys { name: "sparse", insert, lookup }
}

/// Operations per second of the fastest of `runs` runs of `f` doing `ops` operations.
fn best_rate(runs: usize, ops: usize, mut f: impl FnMut()) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..runs {
        let start = Instant::now();
        f();
        best = best.min(start.elapsed().as_secs_f64());
    }
    ops as f64 / best.max(1e-9)
}

/// One structure under test: how to build it and how to look a key up.
trait Subject: Sized {
    const NAME: &'static str;
    fn build(keys: &[u64]) -> Self;
    fn get(&self, key: u64) -> Option<u64>;
}

impl Subject for XArray<NoItems> {
    const NAME: &'static str = "xarray";
    fn build(keys: &[u64]) -> Self {
        let mut xa = XArray::new();
        for &key in keys {
            // Keys are below 2^63 and values are the keys: no store can be refused.
            let stored = xa.store(key, Entry::Value(key >> 1));
            debug_assert!(stored.is_ok());
        }
        xa
    }
    fn get(&self, key: u64) -> Option<u64> {
        self.load(key).and_then(|entry| entry.value())
    }
}

impl Subject for BTreeMap<u64, u64> {
    const NAME: &'static str = "btreemap";
    fn build(keys: &[u64]) -> Self {
        let mut map = BTreeMap::new();
        for &key in keys {
            map.insert(key, key >> 1);
        }
        map
    }
    fn get(&self, key: u64) -> Option<u64> {
        BTreeMap::get(self, &key).copied()
    }
}

impl Subject for HashMap<u64, u64> {
    const NAME: &'static str = "hashmap";
    fn build(keys: &[u64]) -> Self {
        let mut map = HashMap::new();
        for &key in keys {
            map.insert(key, key >> 1);
        }
        map
    }
    fn get(&self, key: u64) -> Option<u64> {
        HashMap::get(self, &key).copied()
    }
}

/// Stores/s and loads/s of one structure on one key set.
fn measure<S: Subject>(keys: &Keys, runs: usize) -> anyhow::Result<(f64, f64)> {
    let stores = best_rate(runs, keys.insert.len(), || {
        black_box(S::build(black_box(&keys.insert)));
    });
    let subject = S::build(&keys.insert);
    let mut sum = 0u64;
    let loads = best_rate(runs, keys.lookup.len(), || {
        for &key in &keys.lookup {
            sum = sum.wrapping_add(subject.get(black_box(key)).unwrap_or(u64::MAX));
        }
    });
    // Every key is present: a miss is a bug in the subject, not a figure.
    let found = keys.lookup.iter().all(|&key| subject.get(key) == Some(key >> 1));
    anyhow::ensure!(found, "{} lost a key in the {} set", S::NAME, keys.name);
    black_box(sum);
    Ok((stores, loads))
}

/// The seed's 64 folios of order 9: (as multi-index entries, as 512 single entries each).
fn seed_experiment() -> anyhow::Result<(XArray<NoItems>, XArray<NoItems>)> {
    let mut multi = XArray::<NoItems>::new();
    let mut single = XArray::<NoItems>::new();
    for folio in 0..64u64 {
        multi.store_order(folio << 9, 9, Entry::Value(folio)).map_err(|r| r.error)?;
        for page in 0..512 {
            single.store((folio << 9) + page, Entry::Value(folio)).map_err(|r| r.error)?;
        }
    }
    anyhow::ensure!(multi.len() == 64 && single.len() == 64 * 512, "seed layout");
    Ok((multi, single))
}

fn per_second(rate: f64) -> String {
    format!("{:.1} M", rate / 1e6)
}

/// Runs the benchmark.
///
/// # Errors
/// If a structure loses a key (never expected) or a seed store is refused.
pub fn run(quick: bool) -> anyhow::Result<Report> {
    let n: u64 = if quick { 1 << 16 } else { 1 << 20 };
    let runs = if quick { 1 } else { 3 };
    let mut rng = SplitMix(0x005e_ed0f_a11f_0110);
    let workloads = [dense_keys(n, &mut rng), sparse_keys(n, &mut rng)];

    let mut report = Report::new("xarray");
    let mut rows = Vec::new();
    let mut dense_loads = (0.0, 0.0);
    for keys in &workloads {
        let results = [
            (XArray::<NoItems>::NAME, measure::<XArray<NoItems>>(keys, runs)?),
            (<BTreeMap<u64, u64>>::NAME, measure::<BTreeMap<u64, u64>>(keys, runs)?),
            (<HashMap<u64, u64>>::NAME, measure::<HashMap<u64, u64>>(keys, runs)?),
        ];
        for (name, (stores, loads)) in results {
            report.field(&format!("{name}_{}_stores_per_s", keys.name), stores.round());
            report.field(&format!("{name}_{}_loads_per_s", keys.name), loads.round());
            rows.push([
                name.to_string(),
                keys.name.to_string(),
                per_second(stores),
                per_second(loads),
            ]);
            if keys.name == "dense" && name == "xarray" {
                dense_loads.0 = loads;
            }
            if keys.name == "dense" && name == "btreemap" {
                dense_loads.1 = loads;
            }
        }
    }
    let table = report.table(
        &format!("Stores and loads ({n} keys, best of {runs})"),
        &["structure", "keys", "stores/s", "loads/s"],
    );
    for row in rows {
        table.row(row);
    }

    let dense = XArray::<NoItems>::build(&workloads[0].insert);
    let sparse = XArray::<NoItems>::build(&workloads[1].insert);
    let dense_bytes = dense.memory_bytes() as f64 / n as f64;
    let sparse_bytes = sparse.memory_bytes() as f64 / n as f64;
    let (multi, single) = seed_experiment()?;
    let ratio = multi.node_bytes() as f64 / single.node_bytes() as f64;

    let table = report.table("XArray memory", &["layout", "nodes", "bytes", "bytes/entry"]);
    for (name, xa, per) in [("dense", &dense, dense_bytes), ("sparse", &sparse, sparse_bytes)] {
        table.row([
            format!("{name} {n} keys"),
            xa.node_count().to_string(),
            xa.memory_bytes().to_string(),
            format_figure(per),
        ]);
    }
    for (name, xa) in [("64 x order 9, multi-index", &multi), ("64 x order 9, singles", &single)] {
        let bytes = xa.node_bytes();
        table.row([name.into(), xa.node_count().to_string(), bytes.to_string(), "-".into()]);
    }

    report.field("keys", n);
    report.field("sparse_bytes_per_entry", sparse_bytes);
    report.field("multi_index_node_bytes", multi.node_bytes() as u64);
    report.field("single_index_node_bytes", single.node_bytes() as u64);
    report.judged(
        "dense_load_ratio_vs_btreemap",
        dense_loads.0 / dense_loads.1,
        Target::AtLeast(2.0),
    );
    report.judged("dense_bytes_per_entry", dense_bytes, Target::AtMost(12.0));
    report.judged("multi_index_node_ratio", ratio, Target::AtMost(0.10));
    report.note("loads look every key up in one random permutation; stores build from empty");
    report.note("sparse: n random keys in a 16n key space (a 64 GiB swap device at n = 1M)");
    report.note("bytes: node bytes (nodes x 544) for the seed rows; memory_bytes() for the others");
    Ok(report)
}
