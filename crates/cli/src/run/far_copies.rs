//! The far tier's copies of a run, deleted when the run is over.
//!
//! Every far tier of the run (one per managed image with `--far`, one per forked child
//! that pages out) writes its run id and a mark over the slots it may have stored in the
//! run's counter file (far's ledger, runstat's `FAR_*` words) before any copy leaves. No
//! image may delete its own keys at exit: a forked child reads its parent's pages through
//! them. So `uswap run` deletes them once the run is over: when it is the last member of
//! the run directory (the others' shared locks gone, waited for at most [`MEMBERS_WAIT`]),
//! every key `<run id><slot>` below each mark, on every server.
//!
//! A process of the run still running past the wait keeps its copies: nothing is deleted
//! (the summary says so), as a page it may still read must stay.

use crate::rundir::RunDir;
use std::time::Duration;

/// How long the run's other members (children still exiting) are waited for.
pub const MEMBERS_WAIT: Duration = Duration::from_secs(5);

/// What became of the run's far copies.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The summary's line about it, if any.
    pub line: Option<String>,
    /// The deletion, if one was made.
    pub deleted: Option<far::Deleted>,
}

/// Deletes the run's far copies (module essay).
///
/// Context: blocks up to [`MEMBERS_WAIT`], then one request timeout per server at most
/// per pipeline of deletes.
pub fn delete(dir: &RunDir, url: &str, replicas: u32) -> Outcome {
    if !dir.alone_within(MEMBERS_WAIT) {
        let line = format!(
            "note: the far tier's copies stay on the servers: processes of the run still run \
             after {} s and may read them",
            MEMBERS_WAIT.as_secs()
        );
        return Outcome { line: Some(line), deleted: None };
    }
    let Ok(counter) = std::fs::read(dir.path.join(runstat::env::QUOTA_FILE)) else {
        return Outcome::default();
    };
    let runs: Vec<(u64, u64)> = runstat::proto::far_entries(&counter).collect();
    if runs.is_empty() {
        return Outcome::default();
    }
    let config = match far::FarConfig::parse(url, replicas as usize) {
        Ok(config) => config,
        Err(e) => {
            let line = format!("warning: the far tier's copies stay on the servers: --far {e}");
            return Outcome { line: Some(line), deleted: None };
        }
    };
    let done = far::delete_runs(&config, &runs);
    let line = (done.server_errors > 0).then(|| {
        format!(
            "warning: {} far servers did not take the deletion of the run's copies: they \
             keep them",
            done.server_errors
        )
    });
    Outcome { line, deleted: Some(done) }
}

/// Adds the deletion's figures to the run's totals.
pub fn add_figures(done: &far::Deleted, total: &mut runstat::stats::StatsFile) {
    total.set("far_deletes_sent", done.sent);
    total.set("far_copies_deleted", done.sent - done.not_found);
    total.set("far_delete_server_errors", done.server_errors);
}
