//! The environment protocol between `uswap run` and the shim.
//!
//! `uswap run` checks every flag, then hands the shim a [`RunConfig`] as one variable,
//! [`CONFIG`], next to `LD_PRELOAD`. Every process of the run's tree that loads the shim
//! (any depth: fork + exec, posix_spawn, pipelines) asks the run's broker to join: it
//! connects to the control socket [`SOCKET`] in the private run directory and sends the
//! run's random token ([`RUN_TOKEN`]); the broker checks the token, the peer's credentials
//! (`SO_PEERCRED`) and that the peer descends from `uswap run` (a child subreaper, so
//! orphans stay in the tree), and answers with the process's share of the run's one
//! budget ([`crate::proto`]). A process the broker refuses, or that finds no broker (one
//! outside the run that inherited the environment, a run that ended), runs unmanaged with
//! the shim and these variables removed from its environment: a budget is never
//! multiplied by the number of processes.

use crate::settings::{Delivery, FileCache, LargeFolios, Placement, Switch, ZeroPages};

/// The exit status of a process whose shim could not start: it said why on stderr, in one
/// line, before the program's `main`.
pub const START_FAILED: i32 = 125;

/// The free space the swap file leaves its file system: the file may be larger than the
/// disk's free space (it is sparse, and the pool in front of it writes few of its slots),
/// and writes to it stop while less than this is free (their pages stay in the pool or in
/// memory, and the failed writes are counted).
pub const SWAP_FILE_KEEP_FREE_BYTES: u64 = 64 << 20;

/// The lock file in the run directory: every member of the run holds it shared, and the
/// last one out removes the directory (`uswap run`'s rundir.rs).
pub const RUN_LOCK: &str = "lock";

/// The run directory (private, 0700): stats files, the default swap file.
pub const RUN_DIR: &str = "USWAP_RUN_DIR";
/// `uswap run`'s pid (the broker's: `uswap stat` finds a run by it).
pub const PARENT_PID: &str = "USWAP_PARENT_PID";
/// The run's token: 32 hex digits drawn at random by `uswap run`, proof that a process
/// was started inside this run (with the socket's place, which only the run's tree
/// knows).
pub const RUN_TOKEN: &str = "USWAP_RUN_TOKEN";
/// The run's settings: the [`RunConfig`] but its identity, as JSON. The identity is the
/// three variables above, one each, as readers outside the run look for them (`uswap
/// stat` reads a process's `/proc/PID/environ`, a broker its joiner's).
pub const CONFIG: &str = "USWAP_CONFIG";

/// The broker's control socket in the run directory.
pub const SOCKET: &str = "broker.sock";
/// The tree's swap-space counter in the run directory (`--swap-size` for the whole tree:
/// crates/preload/src/member/quota.rs).
pub const QUOTA_FILE: &str = "swap-quota";
/// The broker's view of the tree, rewritten while it runs (`uswap stat`).
pub const TREE_FILE: &str = "tree";

/// Every variable of the protocol (the shim removes them all in unmanaged processes).
pub const ALL: [&str; 4] = [RUN_DIR, PARENT_PID, RUN_TOKEN, CONFIG];

/// What the shim needs to manage a program: the one type a setting is written in, from
/// `uswap run`'s flags to the shim (a setting added here crosses with no more code).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunConfig {
    /// The private run directory ([`RUN_DIR`]).
    #[serde(skip)]
    pub run_dir: String,
    /// `uswap run`'s pid ([`PARENT_PID`]).
    #[serde(skip)]
    pub parent_pid: u32,
    /// The run's token ([`RUN_TOKEN`]).
    #[serde(skip)]
    pub run_token: String,
    /// The budget in bytes.
    pub budget_bytes: u64,
    /// `lz4`, `zstd` or `off`.
    pub zswap: String,
    /// The pool's share of the budget.
    pub pool_percent: u32,
    /// A pool of its own beside the budget, of at most this many bytes.
    pub pool_bytes: Option<u64>,
    /// An explicit swap file (created by the shim, removed by `uswap run`).
    pub swap_file: Option<String>,
    /// The swap device's size.
    pub swap_size_bytes: u64,
    /// Whether the page cache may hold the swap file's pages.
    pub swap_file_cache: FileCache,
    /// The trace to write, if any.
    pub record: Option<String>,
    /// The trace `uswap run` made at `record`, as `DEV:INO:T0`: the file's device and
    /// inode (each image opens it by name, appending, and writes only to that file) and the
    /// monotonic clock's nanoseconds at its start (every image's records count from there).
    pub record_file: Option<String>,
    /// The live stats file's period.
    pub stats_interval_ms: u64,
    /// The shim's path.
    pub preload_path: String,
    /// The engine's folio order.
    pub folio_order: u32,
    /// When a fault maps a large folio.
    pub large_folios: LargeFolios,
    /// How a read of a page of zeros is mapped.
    pub zero_pages: ZeroPages,
    /// Who serves a fault on a swapped page.
    pub delivery: Delivery,
    /// The idle pollers' page, if they run.
    pub idle_page: Option<String>,
    /// The CPUs for the engine's reclaimer (taskset's list syntax), if not the program's.
    pub reclaim_cpus: Option<String>,
    /// Where the fault handler runs.
    pub handler_placement: Placement,
    /// Whether pages written to the swap file are sealed.
    pub encrypt: Switch,
    /// The far tier's servers (`memcached://...`), if the swap device is remote.
    pub far: Option<String>,
    /// Copies of each page there.
    pub far_replicas: u32,
}

impl RunConfig {
    /// Whether faults are delivered as SIGBUS to the faulting thread (`--delivery sigbus`).
    pub fn sigbus_delivery(&self) -> bool {
        self.delivery == Delivery::Sigbus
    }

    /// Whether pages written to the swap file are encrypted (`--encrypt on`).
    pub fn encrypts(&self) -> bool {
        self.encrypt == Switch::On
    }

    /// Whether the fault handler follows the thread it serves (`--handler-placement
    /// follow`).
    pub fn handler_follows(&self) -> bool {
        self.handler_placement == Placement::Follow
    }

    /// The variables to set: the identity's, and [`CONFIG`].
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        let json = serde_json::to_string(self).expect("a run's settings serialize");
        vec![
            (RUN_DIR, self.run_dir.clone()),
            (PARENT_PID, self.parent_pid.to_string()),
            (RUN_TOKEN, self.run_token.clone()),
            (CONFIG, json),
        ]
    }

    /// Reads the variables through `get`.
    ///
    /// # Errors
    /// A message naming a variable missing or malformed (and the setting at fault).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<RunConfig, String> {
        let need = |name: &str| get(name).ok_or_else(|| format!("{name} is not set"));
        let json = need(CONFIG)?;
        let mut config: RunConfig =
            serde_json::from_str(&json).map_err(|e| format!("{CONFIG}: {e}"))?;
        config.run_dir = need(RUN_DIR)?;
        config.parent_pid =
            need(PARENT_PID)?.parse().map_err(|_| format!("{PARENT_PID} is not a number"))?;
        config.run_token = need(RUN_TOKEN)?;
        Ok(config)
    }
}

/// `LD_PRELOAD` without `path` (entries are separated by spaces or colons); `None` when
/// nothing is left.
pub fn preload_without(preload: &str, path: &str) -> Option<String> {
    let rest: Vec<&str> =
        preload.split([':', ' ']).filter(|entry| !entry.is_empty() && *entry != path).collect();
    (!rest.is_empty()).then(|| rest.join(":"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn config_round_trips_through_the_environment() {
        let config = RunConfig {
            run_dir: "/run/uswap-x".into(),
            parent_pid: 42,
            run_token: "00112233445566778899aabbccddeeff".into(),
            budget_bytes: 256 << 20,
            zswap: "lz4".into(),
            pool_percent: 20,
            pool_bytes: Some(768 << 20),
            swap_file: None,
            swap_size_bytes: 4 << 30,
            swap_file_cache: FileCache::Drop,
            record: Some("/run/t".into()),
            record_file: Some("2049:77:123".into()),
            stats_interval_ms: 1000,
            preload_path: "/x/libuswap_preload.so".into(),
            folio_order: 4,
            large_folios: LargeFolios::Sequential,
            zero_pages: ZeroPages::Charged,
            delivery: Delivery::Sigbus,
            idle_page: Some("/run/uswap-x/idle".into()),
            reclaim_cpus: Some("1-3".into()),
            handler_placement: Placement::Free,
            encrypt: Switch::Off,
            far: Some("memcached://127.0.0.1:11211".into()),
            far_replicas: 2,
        };
        let vars: HashMap<&str, String> = config.to_env().into_iter().collect();
        assert!(vars.keys().all(|k| ALL.contains(k)));
        assert_eq!(vars[RUN_DIR], config.run_dir, "the identity, for readers outside the run");
        assert!(!vars[CONFIG].contains(&config.run_token), "the token is not in the settings");
        let back = RunConfig::from_env(|k| vars.get(k).cloned()).unwrap();
        assert_eq!(back, config);
        let e = RunConfig::from_env(|k| (k != CONFIG).then(|| vars.get(k).cloned()).flatten());
        assert_eq!(e.unwrap_err(), "USWAP_CONFIG is not set");
        let bad = vars[CONFIG].replace(r#""delivery":"sigbus""#, r#""delivery":"fast""#);
        assert_ne!(bad, vars[CONFIG]);
        let e = RunConfig::from_env(|k| (k == CONFIG).then(|| bad.clone())).unwrap_err();
        assert!(e.starts_with("USWAP_CONFIG: \"fast\": use handler or sigbus"), "{e}");
    }

    #[test]
    fn the_shim_leaves_ld_preload() {
        let me = "/a/libuswap_preload.so";
        assert_eq!(preload_without(me, me), None);
        assert_eq!(
            preload_without(&format!("/b/x.so:{me} /c/y.so"), me).unwrap(),
            "/b/x.so:/c/y.so"
        );
    }
}
