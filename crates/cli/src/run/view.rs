//! The broker's view of the tree: what the summary prints after the run and what `uswap
//! stat` reads while it runs (the run directory's `tree` file, rewritten every second).
//!
//! ```text
//!   # uswap tree v1
//!   broker 4100                 `name value` lines, any order
//!   budget_bytes 100663296
//!   peak_bytes 98041856         the tree's resident memory at its sampled peak
//!   ...
//!   proc<TAB>4101<TAB>member<TAB>share<TAB>rss<TAB>peak<TAB>name<TAB>why
//! ```

use anyhow::{bail, Result};
use std::collections::BTreeMap;

/// The first line of the tree file.
pub const MAGIC: &str = "# uswap tree v1";

/// A process's state in the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcState {
    /// Its engine is a member: it has a share.
    Member,
    /// It runs without an engine; its resident memory is charged to the tree.
    Unmanaged,
    /// It has exited.
    Exited,
}

impl ProcState {
    /// The state's word in the tree file (and `uswap stat --json`).
    pub fn name(self) -> &'static str {
        match self {
            ProcState::Member => "member",
            ProcState::Unmanaged => "unmanaged",
            ProcState::Exited => "exited",
        }
    }

    fn from_name(name: &str) -> Option<ProcState> {
        [ProcState::Member, ProcState::Unmanaged, ProcState::Exited]
            .into_iter()
            .find(|s| s.name() == name)
    }
}

/// One process of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcView {
    /// Its pid.
    pub pid: u32,
    /// Now.
    pub state: ProcState,
    /// Its share of the budget now (members), bytes.
    pub share_bytes: u64,
    /// Its resident set at the last sample.
    pub rss_bytes: u64,
    /// Its resident set at its sampled peak.
    pub peak_bytes: u64,
    /// Its command, short.
    pub name: String,
    /// Why it ran unmanaged (empty for a process that was a member all along).
    pub why: String,
}

/// The whole view (module essay).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeView {
    /// Figures by name: `broker`, `budget_bytes`, `peak_bytes`, ... (see
    /// `broker::Broker::view`).
    pub values: BTreeMap<String, u64>,
    /// The budget's source, in words.
    pub budget_source: String,
    /// Every process seen, by pid.
    pub procs: Vec<ProcView>,
}

impl TreeView {
    /// The value of `name`, zero when absent.
    pub fn get(&self, name: &str) -> u64 {
        self.values.get(name).copied().unwrap_or(0)
    }

    /// Sets `name`.
    pub fn set(&mut self, name: &str, value: u64) {
        self.values.insert(name.to_string(), value);
    }

    /// The process `pid`, if the tree had it.
    pub fn proc(&self, pid: u32) -> Option<&ProcView> {
        self.procs.iter().find(|p| p.pid == pid)
    }

    /// The text form (module essay).
    pub fn to_text(&self) -> String {
        let mut out = format!("{MAGIC}\n");
        for (name, value) in &self.values {
            out.push_str(&format!("{name} {value}\n"));
        }
        out.push_str(&format!("budget_source {}\n", self.budget_source.replace('\n', " ")));
        for p in &self.procs {
            let clean = |s: &str| s.replace(['\t', '\n'], " ");
            out.push_str(&format!(
                "proc\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                p.pid,
                p.state.name(),
                p.share_bytes,
                p.rss_bytes,
                p.peak_bytes,
                clean(&p.name),
                clean(&p.why)
            ));
        }
        out
    }

    /// Parses [`TreeView::to_text`].
    ///
    /// # Errors
    /// A message naming the first bad line.
    pub fn parse(text: &str) -> Result<TreeView> {
        let mut lines = text.lines();
        if lines.next() != Some(MAGIC) {
            bail!("not a uswap tree file");
        }
        let mut view = TreeView::default();
        for line in lines {
            if let Some(rest) = line.strip_prefix("proc\t") {
                view.procs.push(parse_proc(rest).ok_or_else(|| anyhow::anyhow!("{line:?}"))?);
            } else if let Some(rest) = line.strip_prefix("budget_source ") {
                view.budget_source = rest.to_string();
            } else {
                let (name, value) = line.split_once(' ').unwrap_or((line, ""));
                let value = value.parse().map_err(|_| anyhow::anyhow!("{line:?}"))?;
                view.values.insert(name.to_string(), value);
            }
        }
        Ok(view)
    }
}

fn parse_proc(rest: &str) -> Option<ProcView> {
    let f: Vec<&str> = rest.split('\t').collect();
    Some(ProcView {
        pid: f.first()?.parse().ok()?,
        state: ProcState::from_name(f.get(1)?)?,
        share_bytes: f.get(2)?.parse().ok()?,
        rss_bytes: f.get(3)?.parse().ok()?,
        peak_bytes: f.get(4)?.parse().ok()?,
        name: f.get(5)?.to_string(),
        why: f.get(6).unwrap_or(&"").to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tree_file_round_trips() {
        let mut view = TreeView { budget_source: "--budget".into(), ..TreeView::default() };
        view.set("budget_bytes", 96 << 20);
        view.set("peak_bytes", 99 << 20);
        view.procs.push(ProcView {
            pid: 12,
            state: ProcState::Member,
            share_bytes: 40 << 20,
            rss_bytes: 30 << 20,
            peak_bytes: 41 << 20,
            name: "python3 child.py".into(),
            why: String::new(),
        });
        view.procs.push(ProcView {
            pid: 13,
            state: ProcState::Unmanaged,
            share_bytes: 0,
            rss_bytes: 1 << 20,
            peak_bytes: 2 << 20,
            name: "static\tprog".into(),
            why: "statically linked".into(),
        });
        let back = TreeView::parse(&view.to_text()).unwrap();
        assert_eq!(back.get("budget_bytes"), 96 << 20);
        assert_eq!(back.budget_source, "--budget");
        assert_eq!(back.procs[0], view.procs[0]);
        assert_eq!(back.proc(13).unwrap().name, "static prog");
        assert_eq!(back.proc(13).unwrap().why, "statically linked");
        assert!(TreeView::parse("pid 3\n").is_err());
    }
}
