//! The environment protocol between `uswap run` and the shim.
//!
//! `uswap run` checks every flag, then hands the shim a [`RunConfig`] as `USWAP_*`
//! variables next to `LD_PRELOAD`. Every process of the run's tree that loads the shim
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
/// The budget in bytes.
pub const BUDGET: &str = "USWAP_BUDGET";
/// The compressed pool: `lz4`, `zstd` or `off`.
pub const ZSWAP: &str = "USWAP_ZSWAP";
/// The pool's share of the budget, percent.
pub const POOL_PERCENT: &str = "USWAP_POOL_PERCENT";
/// A pool of its own beside the budget, in bytes (unset: the pool is a share of the budget).
pub const POOL_SIZE: &str = "USWAP_POOL_SIZE";
/// An explicit swap file path (else a private file in the run directory).
pub const SWAP_FILE: &str = "USWAP_SWAP_FILE";
/// The swap device's size in bytes.
pub const SWAP_SIZE: &str = "USWAP_SWAP_SIZE";
/// Where to write the fault/eviction trace.
pub const RECORD: &str = "USWAP_RECORD";
/// The trace `uswap run` made at [`RECORD`], as `DEV:INO:T0`: the file's device and inode
/// (each image opens it by name, appending, and writes only to that file) and the
/// monotonic clock's nanoseconds at its start (every image's records count from there).
pub const RECORD_FILE: &str = "USWAP_RECORD_FILE";
/// How often the shim rewrites its live stats file, in milliseconds.
pub const STATS_INTERVAL_MS: &str = "USWAP_STATS_INTERVAL_MS";
/// The shim's own path, to take it out of `LD_PRELOAD` in unmanaged processes.
pub const PRELOAD_PATH: &str = "USWAP_PRELOAD_PATH";
/// The folio order first touches map and page-out moves whole (0 = 4 KiB pages).
pub const FOLIO_ORDER: &str = "USWAP_FOLIO_ORDER";
/// When a fault takes a large folio: `always` or `sequential`.
pub const LARGE_FOLIOS: &str = "USWAP_LARGE_FOLIOS";
/// The page `uswap run`'s idle pollers watch (uffd's `IdlePage`); unset: no pollers.
pub const IDLE_PAGE: &str = "USWAP_IDLE_PAGE";
/// `keep` or `drop`: whether the swap file's pages may stay in the page cache.
pub const SWAP_FILE_CACHE: &str = "USWAP_SWAP_FILE_CACHE";
/// `protected` or `charged`: how a read of a zero page is mapped (`uswap run --zero-pages`).
pub const ZERO_PAGES: &str = "USWAP_ZERO_PAGES";
/// `handler` or `sigbus`: who resolves a fault (`uswap run --delivery`).
pub const DELIVERY: &str = "USWAP_DELIVERY";
/// The CPUs the engine's reclaimer runs on, in taskset's list syntax (`uswap run
/// --reclaim-cpus`, or the CPUs left outside `--cpus`); unset: the program's.
pub const RECLAIM_CPUS: &str = "USWAP_RECLAIM_CPUS";
/// `follow` or `free`: whether the fault handler follows the thread it serves to its CPU
/// (`uswap run --handler-placement`).
pub const HANDLER_PLACEMENT: &str = "USWAP_HANDLER_PLACEMENT";

/// `on` or `off`: whether pages written to the swap file are sealed with AES-256-GCM
/// (`uswap run --encrypt`).
pub const ENCRYPT: &str = "USWAP_ENCRYPT";

/// The far tier's servers, `memcached://HOST:PORT,...` (`uswap run --far`); unset: a file.
pub const FAR: &str = "USWAP_FAR";
/// Copies of each page in the far tier (`uswap run --far-replicas`).
pub const FAR_REPLICAS: &str = "USWAP_FAR_REPLICAS";

/// The broker's control socket in the run directory.
pub const SOCKET: &str = "broker.sock";
/// The tree's swap-space counter in the run directory (`--swap-size` for the whole tree:
/// crates/preload/src/member/quota.rs).
pub const QUOTA_FILE: &str = "swap-quota";
/// The broker's view of the tree, rewritten while it runs (`uswap stat`).
pub const TREE_FILE: &str = "tree";

/// Every variable of the protocol (the shim removes them all in unmanaged processes).
pub const ALL: [&str; 24] = [
    RUN_DIR,
    PARENT_PID,
    RUN_TOKEN,
    BUDGET,
    ZSWAP,
    POOL_PERCENT,
    POOL_SIZE,
    SWAP_FILE,
    SWAP_SIZE,
    RECORD,
    RECORD_FILE,
    STATS_INTERVAL_MS,
    PRELOAD_PATH,
    FOLIO_ORDER,
    LARGE_FOLIOS,
    IDLE_PAGE,
    SWAP_FILE_CACHE,
    ZERO_PAGES,
    DELIVERY,
    RECLAIM_CPUS,
    HANDLER_PLACEMENT,
    ENCRYPT,
    FAR,
    FAR_REPLICAS,
];

/// What the shim needs to manage a program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunConfig {
    /// The private run directory.
    pub run_dir: String,
    /// `uswap run`'s pid.
    pub parent_pid: u32,
    /// The run's token ([`RUN_TOKEN`]).
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
    /// The trace's identity and time base ([`RECORD_FILE`]).
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

    /// The variables to set.
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        let mut vars = vec![
            (RUN_DIR, self.run_dir.clone()),
            (PARENT_PID, self.parent_pid.to_string()),
            (RUN_TOKEN, self.run_token.clone()),
            (BUDGET, self.budget_bytes.to_string()),
            (ZSWAP, self.zswap.clone()),
            (POOL_PERCENT, self.pool_percent.to_string()),
            (SWAP_SIZE, self.swap_size_bytes.to_string()),
            (SWAP_FILE_CACHE, self.swap_file_cache.to_string()),
            (STATS_INTERVAL_MS, self.stats_interval_ms.to_string()),
            (PRELOAD_PATH, self.preload_path.clone()),
            (FOLIO_ORDER, self.folio_order.to_string()),
            (LARGE_FOLIOS, self.large_folios.to_string()),
            (ZERO_PAGES, self.zero_pages.to_string()),
            (DELIVERY, self.delivery.to_string()),
            (HANDLER_PLACEMENT, self.handler_placement.to_string()),
            (ENCRYPT, self.encrypt.to_string()),
            (FAR_REPLICAS, self.far_replicas.to_string()),
        ];
        if let Some(url) = &self.far {
            vars.push((FAR, url.clone()));
        }
        if let Some(bytes) = self.pool_bytes {
            vars.push((POOL_SIZE, bytes.to_string()));
        }
        if let Some(path) = &self.swap_file {
            vars.push((SWAP_FILE, path.clone()));
        }
        if let Some(path) = &self.record {
            vars.push((RECORD, path.clone()));
        }
        if let Some(file) = &self.record_file {
            vars.push((RECORD_FILE, file.clone()));
        }
        if let Some(path) = &self.idle_page {
            vars.push((IDLE_PAGE, path.clone()));
        }
        if let Some(cpus) = &self.reclaim_cpus {
            vars.push((RECLAIM_CPUS, cpus.clone()));
        }
        vars
    }

    /// Reads the variables through `get`.
    ///
    /// # Errors
    /// A message naming a missing or malformed variable.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<RunConfig, String> {
        let need = |name: &str| get(name).ok_or_else(|| format!("{name} is not set"));
        let number = |name: &str| -> Result<u64, String> {
            need(name)?.parse().map_err(|_| format!("{name} is not a number"))
        };
        Ok(RunConfig {
            run_dir: need(RUN_DIR)?,
            parent_pid: number(PARENT_PID)? as u32,
            run_token: need(RUN_TOKEN)?,
            budget_bytes: number(BUDGET)?,
            zswap: need(ZSWAP)?,
            pool_percent: number(POOL_PERCENT)? as u32,
            pool_bytes: get(POOL_SIZE).map(|_| number(POOL_SIZE)).transpose()?,
            swap_file: get(SWAP_FILE),
            swap_size_bytes: number(SWAP_SIZE)?,
            swap_file_cache: named(SWAP_FILE_CACHE, &need(SWAP_FILE_CACHE)?)?,
            record: get(RECORD),
            record_file: get(RECORD_FILE),
            stats_interval_ms: number(STATS_INTERVAL_MS)?,
            preload_path: need(PRELOAD_PATH)?,
            folio_order: number(FOLIO_ORDER)? as u32,
            large_folios: named(LARGE_FOLIOS, &need(LARGE_FOLIOS)?)?,
            zero_pages: named(ZERO_PAGES, &need(ZERO_PAGES)?)?,
            delivery: named(DELIVERY, &need(DELIVERY)?)?,
            idle_page: get(IDLE_PAGE),
            reclaim_cpus: get(RECLAIM_CPUS),
            handler_placement: named(HANDLER_PLACEMENT, &need(HANDLER_PLACEMENT)?)?,
            encrypt: named(ENCRYPT, &need(ENCRYPT)?)?,
            far: get(FAR),
            far_replicas: number(FAR_REPLICAS)? as u32,
        })
    }
}

/// The value of variable `name`, one of a knob's names.
fn named<T: std::str::FromStr<Err = String>>(name: &str, text: &str) -> Result<T, String> {
    text.parse().map_err(|e| format!("{name} {e}"))
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
        let back = RunConfig::from_env(|k| vars.get(k).cloned()).unwrap();
        assert_eq!(back, config);
        let e = RunConfig::from_env(|k| (k != BUDGET).then(|| vars.get(k).cloned()).flatten());
        assert_eq!(e.unwrap_err(), "USWAP_BUDGET is not set");
        let e = RunConfig::from_env(|k| {
            if k == DELIVERY {
                Some("fast".into())
            } else {
                vars.get(k).cloned()
            }
        });
        assert_eq!(e.unwrap_err(), "USWAP_DELIVERY \"fast\": use handler or sigbus");
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
