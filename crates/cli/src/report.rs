//! Benchmark reports: a table for people, one JSON object for machines.
//!
//! A report is a list of sections (titled tables) plus a flat map of named figures. The
//! figures are what other tools read (`--json`), so their names are stable and carry their
//! unit last (`pagein_ns_order0_none`). Targets from the issues are recorded beside the
//! figure they judge, with whether this run met them, so a reader never has to compare
//! numbers by hand. Every report carries the machine it ran on and the date.

use serde_json::{Map, Value};
use std::fmt::Write as _;

/// How a measured figure is judged against its target.
#[allow(dead_code)] // Constructed by the benchmarks that carry targets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    /// The figure must be at least this value.
    AtLeast(f64),
    /// The figure must be at most this value.
    AtMost(f64),
}

impl Target {
    fn met(self, value: f64) -> bool {
        match self {
            Target::AtLeast(bound) => value >= bound,
            Target::AtMost(bound) => value <= bound,
        }
    }

    fn describe(self) -> String {
        match self {
            Target::AtLeast(bound) => format!(">= {bound}"),
            Target::AtMost(bound) => format!("<= {bound}"),
        }
    }
}

/// One titled table.
#[derive(Debug, Default)]
pub struct Table {
    title: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// Appends a row; cells are already formatted.
    pub fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    fn render(&self, out: &mut String) {
        let columns = self.rows.iter().map(Vec::len).chain([self.header.len()]).max();
        let columns = columns.unwrap_or(0);
        let mut widths = vec![0usize; columns];
        for row in std::iter::once(&self.header).chain(&self.rows) {
            for (i, cell) in row.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let _ = writeln!(out, "\n{}", self.title);
        let line = |out: &mut String, row: &[String]| {
            let mut text = String::new();
            for (i, cell) in row.iter().enumerate() {
                let pad = widths[i] - cell.chars().count();
                // First column left-aligned (names), the rest right-aligned (numbers).
                if i == 0 {
                    let _ = write!(text, "{cell}{}", " ".repeat(pad));
                } else {
                    let _ = write!(text, "  {}{cell}", " ".repeat(pad));
                }
            }
            let _ = writeln!(out, "  {}", text.trim_end());
        };
        if !self.header.is_empty() {
            line(out, &self.header);
            let total: usize = widths.iter().sum::<usize>() + 2 * columns.saturating_sub(1);
            let _ = writeln!(out, "  {}", "-".repeat(total));
        }
        for row in &self.rows {
            line(out, row);
        }
    }
}

/// A benchmark's result.
#[derive(Debug)]
pub struct Report {
    name: String,
    tables: Vec<Table>,
    fields: Map<String, Value>,
    targets: Vec<(String, f64, Target)>,
    notes: Vec<String>,
}

impl Report {
    /// A new report for benchmark `name`, stamped with the machine and the date.
    pub fn new(name: &str) -> Self {
        let mut fields = Map::new();
        fields.insert("bench".into(), Value::from(name));
        fields.insert("date_utc".into(), Value::from(today_utc()));
        fields.insert("machine".into(), Value::from(machine_description()));
        Report {
            name: name.to_string(),
            tables: Vec::new(),
            fields,
            targets: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Starts a new table and returns it for rows.
    pub fn table(&mut self, title: &str, header: &[&str]) -> &mut Table {
        self.tables.push(Table {
            title: title.to_string(),
            header: header.iter().map(|h| (*h).to_string()).collect(),
            rows: Vec::new(),
        });
        let last = self.tables.len() - 1;
        &mut self.tables[last]
    }

    /// Records a named figure for the JSON object.
    pub fn field(&mut self, key: &str, value: impl Into<Value>) {
        self.fields.insert(key.to_string(), value.into());
    }

    /// Records a named figure and the target it is judged by.
    #[allow(dead_code)] // Used by the benchmarks that carry targets.
    pub fn judged(&mut self, key: &str, value: f64, target: Target) {
        self.field(key, value);
        self.targets.push((key.to_string(), value, target));
    }

    /// A line of prose printed under the tables (what limited the run, what was skipped).
    pub fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    /// The JSON object of this report.
    pub fn to_json(&self) -> Value {
        let mut fields = self.fields.clone();
        let targets: Vec<Value> = self
            .targets
            .iter()
            .map(|(key, value, target)| {
                serde_json::json!({
                    "field": key,
                    "value": value,
                    "target": target.describe(),
                    "met": target.met(*value),
                })
            })
            .collect();
        fields.insert("targets".into(), Value::from(targets));
        fields.insert("notes".into(), Value::from(self.notes.clone()));
        Value::Object(fields)
    }

    /// The human-readable form.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let date = self.fields.get("date_utc").and_then(Value::as_str).unwrap_or("");
        let machine = self.fields.get("machine").and_then(Value::as_str).unwrap_or("");
        let _ = writeln!(out, "uswap bench {}  ({date}; {machine})", self.name);
        for table in &self.tables {
            table.render(&mut out);
        }
        if !self.targets.is_empty() {
            let mut table = Table {
                title: "Targets".into(),
                header: vec!["figure".into(), "value".into(), "target".into(), "met".into()],
                rows: Vec::new(),
            };
            for (key, value, target) in &self.targets {
                let met = if target.met(*value) { "yes" } else { "NO" };
                table.row([key.clone(), format_figure(*value), target.describe(), met.into()]);
            }
            table.render(&mut out);
        }
        for note in &self.notes {
            let _ = writeln!(out, "\nnote: {note}");
        }
        out
    }

    /// Prints the report to standard output.
    pub fn print(&self, json: bool) {
        if json {
            println!("{}", self.to_json());
        } else {
            print!("{}", self.to_text());
        }
    }
}

/// A figure with a sensible number of digits for a table.
pub fn format_figure(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 1000.0 || value.fract() == 0.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.3}")
    }
}

/// "AMD EPYC ..., 2 cpus, 24 GiB, Linux 6.18.44": what the figures were measured on.
pub fn machine_description() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").map(|r| r.trim_start_matches([' ', '\t', ':'])))
        .unwrap_or("unknown cpu")
        .trim()
        .to_string();
    // The machine's CPUs, not the ones this process may use: under `--cpus` those are
    // reported on their own (the `cpus` field).
    let allowed = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let cpus = crate::cpus::online().unwrap_or(allowed);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mem_gib = (mem_kib as f64 / (1024.0 * 1024.0)).round();
    format!("{model}, {cpus} cpus, {mem_gib} GiB, Linux {}", kernel.trim())
}

/// Today's date in UTC as YYYY-MM-DD, from the system clock (civil-from-days).
pub fn today_utc() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_judged_both_ways() {
        let mut report = Report::new("t");
        report.judged("fast", 3.0, Target::AtLeast(2.0));
        report.judged("small", 13.0, Target::AtMost(12.0));
        let json = report.to_json();
        let targets = json["targets"].as_array().unwrap();
        assert_eq!(targets[0]["met"], Value::Bool(true));
        assert_eq!(targets[1]["met"], Value::Bool(false));
        let text = report.to_text();
        assert!(text.contains("NO"), "{text}");
    }

    #[test]
    fn date_is_iso() {
        let date = today_utc();
        assert_eq!(date.len(), 10);
        assert!(date.starts_with("20"), "{date}");
    }

    #[test]
    fn table_aligns_columns() {
        let mut report = Report::new("t");
        let table = report.table("T", &["name", "value"]);
        table.row(["a", "1"]);
        table.row(["longer", "12345"]);
        let text = report.to_text();
        assert!(text.contains("  a           1"), "{text}");
    }
}
