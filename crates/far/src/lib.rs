//! Far memory: a swap device whose slots live in a memcached cluster.
//!
//! [`FarBackend`] implements backend's `Backend` over memcached servers that operators
//! already run (`memcached -M`: no eviction). It is the swap device in place of the local
//! file, below the compressed pool: the pool writes back to it, and pages the pool refuses go
//! to it directly. The engine stacks the crypt layer over it always (pages leave the
//! machine): what reaches a server is ciphertext bound to its slot.
//!
//! ```text
//!   engine ── CryptBackend (AES-256-GCM, nonce + tag in memory)
//!                └─ FarBackend ── write: stage the page (write-behind, bounded) ──┐
//!                     │                                                         flusher
//!                     │   read: staged? copy : mg from the first holder ...   ms ×R  │
//!                     │         verified by seq + crc32c, else the next one   ▼      ▼
//!                     └─ repairer: health probes, restarts, re-replication  servers 0..n
//! ```
//!
//! **Placement** (src/place.rs): rendezvous hashing. Each slot ranks the servers by
//! `hash(server, slot)`; its copies go to the first `replicas` servers that are up. Adding
//! or losing a server moves only the slots for which it ranks first among the chosen: 1/n
//! of them.
//!
//! **Keys** carry the run: `<run id, 48 random bits, 12 hex><slot in hex>`. Two runs, or two
//! machines, never write the same key (a collision needs the same 48-bit draw). Under
//! `uswap run` the keys are deleted when the run ends, by `uswap run`: before copies leave,
//! the flusher marks in the process's ledger how far the run's slots go (src/ledger.rs).
//!
//! **Values**: `seq (u64) ‖ crc32c (u32) ‖ page`. `seq` is the slot's write number, kept in
//! memory per slot with the set of servers holding that write (src/table.rs); the crc covers
//! seq, slot and page. A copy is good only if it is there, is of the slot's current write and
//! its crc matches: a miss (a server restarted empty), a stale copy (a server that missed a
//! rewrite) and a corrupt one are all told apart from good data, counted, and the copy is
//! re-created from another. End to end, the crypt layer above then authenticates the page.
//!
//! **Writes** are staged (src/staging.rs): `write` copies the page into a bounded buffer and
//! returns; the flusher sends batches as pipelined quiet `ms` to each slot's servers (no
//! reply per stored value, one `mn` to end the batch; the pages written from the batch
//! buffer, not copied into the command buffer) and commits the holders once every copy is
//! stored. Reads of a staged page are served from the buffer.
//! A buffer full of pages no server takes makes `write` fail after the timeout (the engine
//! keeps those pages in the pool or in memory): a page is never dropped for want of a
//! server.
//!
//! **Faults**: every request has a timeout; a server that fails or times out is marked down,
//! its connections dropped; reads go to the next holder (a failover, counted); writes are
//! placed on the servers up. The repairer probes down servers, compares each server's
//! identity (pid and start time from `stats`) every second, makes new copies on servers up
//! of the slots of a server that is down, forgets the copies of a server that came back
//! empty (restarted) and re-creates them, so every slot keeps `replicas` copies on servers
//! up.
//! A page that no server returns good is [`backend::Error::Unavailable`], counted, and the
//! engine poisons it: SIGBUS on access, never zeros or wrong data.
//!
//! **Ordering of copies**: two stores of one slot never race. A slot is in one flusher's
//! hands at a time (staging's in-flight mark), and the repairer stores its copies with the
//! slot's stripe lock held, so a newer write (which takes that lock first) is flushed after.
//! An older write's copy can therefore never land on a server after a newer one's.
//!
//! Threads: two flushers (`uswap-far-flush0`, `-flush1`: one waits for its servers' replies
//! while the other sends) and the repairer (`uswap-far-repair`), started by
//! [`FarBackend::connect`]. Everything allocates through Rust's allocator; sockets are std's.
//! Around a fork they rest, holding nothing and out of parking_lot's queues (src/rest.rs);
//! a forked child reads the pages it inherited through connections of its own.

#![deny(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

mod backend;
mod ledger;
mod place;
mod proto;
mod repair;
mod rest;
mod server;
mod staging;
mod stats;
mod table;
pub mod testing;

pub use crate::backend::FarBackend;
pub use ledger::{delete_runs, set_ledger, Deleted, Ledger, REACH_STEP};
pub use stats::{FarCounts, FarStats};

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// Bytes of a page.
pub const PAGE_SIZE: usize = ::backend::PAGE_SIZE;

/// Bytes of a value's header: the write number and the crc32c.
pub const HEADER_BYTES: usize = 12;

/// Bytes of one stored value: header and page.
pub const VALUE_BYTES: usize = HEADER_BYTES + PAGE_SIZE;

/// Most servers (a slot's holders are a 32-bit set).
pub const MAX_SERVERS: usize = 32;

/// Most pages in one pipelined request to one server.
pub const BATCH_PAGES: usize = 64;

/// Bytes memcached 1.6 accounts for one item of ours (its `bytes` stat): the item header
/// (48 bytes on 64-bit), the key and its NUL, the value and its CRLF, the CAS word.
pub const ITEM_BYTES: usize = 48 + KEY_LEN + 1 + VALUE_BYTES + 2 + 8;

/// Typical key length: 12 hex digits of run id and 5 of slot (a 4 GiB device).
const KEY_LEN: usize = 17;

/// The one error type of the far crate: set-up failures (the I/O path reports backend's).
#[derive(Debug)]
pub enum Error {
    /// The `--far` text is not `memcached://HOST:PORT,...`.
    BadUrl {
        /// What was given.
        url: String,
        /// What is wrong.
        why: String,
    },
    /// A server name does not resolve.
    Resolve {
        /// The server as given.
        server: String,
        /// What the resolver said.
        source: std::io::Error,
    },
    /// A server did not answer at set-up.
    Unreachable {
        /// The server.
        server: SocketAddr,
        /// What failed.
        source: std::io::Error,
    },
    /// A setting out of range (replicas, sizes).
    Config(String),
    /// A thread could not start.
    Thread(std::io::Error),
    /// The run id could not be drawn (getrandom).
    Random(std::io::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::BadUrl { url, why } => {
                write!(f, "{url}: {why} (use memcached://HOST:PORT,HOST:PORT,...)")
            }
            Error::Resolve { server, source } => write!(f, "cannot resolve {server}: {source}"),
            Error::Unreachable { server, source } => {
                write!(f, "memcached server {server} does not answer: {source}")
            }
            Error::Config(what) => write!(f, "{what}"),
            Error::Thread(e) => write!(f, "cannot start the far tier's thread: {e}"),
            Error::Random(e) => write!(f, "cannot draw the run id (getrandom): {e}"),
        }
    }
}

impl std::error::Error for Error {}

/// How a far tier is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FarConfig {
    /// The servers, in the order given (their index names them in stats).
    pub servers: Vec<SocketAddr>,
    /// Copies of each page (default 2).
    pub replicas: usize,
    /// Bound on every request (connect, send, each read).
    pub timeout: Duration,
    /// Pages the write-behind buffer holds at most.
    pub staging_pages: usize,
}

/// Default request timeout: generous against a loaded loopback, short against a fault.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(500);

/// Default write-behind buffer: 4,096 pages (16 MiB), 64 batches in flight's worth; an
/// engine with a budget bounds it by [`staging_pages_for`].
pub const DEFAULT_STAGING_PAGES: usize = 4096;

/// The smallest write-behind buffer a budget sets: four batches (1 MiB), one in flight
/// per flusher and as many filling.
pub const MIN_STAGING_PAGES: usize = 4 * BATCH_PAGES;

/// The write-behind buffer for an engine of `budget_bytes`: an eighth of the budget, at
/// least [`MIN_STAGING_PAGES`], at most [`DEFAULT_STAGING_PAGES`]. Its pages stay resident
/// once touched, as memory the engine cannot page out, so a buffer as large as a small
/// budget would keep the process over it (16 MiB of buffer beside a 16 MiB budget).
pub fn staging_pages_for(budget_bytes: u64) -> usize {
    let eighth = (budget_bytes / 8 / PAGE_SIZE as u64) as usize;
    eighth.clamp(MIN_STAGING_PAGES, DEFAULT_STAGING_PAGES)
}

impl FarConfig {
    /// Parses `memcached://HOST:PORT,HOST:PORT,...` and resolves every server.
    ///
    /// # Errors
    /// [`Error::BadUrl`], [`Error::Resolve`], [`Error::Config`] (no server, too many,
    /// replicas out of 1..=servers).
    ///
    /// Context: may call the system resolver (glibc's getaddrinfo, which allocates with
    /// malloc): call it where that is allowed, before the shim manages memory.
    pub fn parse(url: &str, replicas: usize) -> Result<FarConfig, Error> {
        let bad = |why: &str| Error::BadUrl { url: url.to_string(), why: why.to_string() };
        let list = url.strip_prefix("memcached://").ok_or_else(|| bad("not memcached://"))?;
        let mut servers = Vec::new();
        for server in list.split(',').filter(|s| !s.is_empty()) {
            if !server.contains(':') {
                return Err(bad(&format!("{server} has no port")));
            }
            let addr = server
                .to_socket_addrs()
                .map_err(|source| Error::Resolve { server: server.to_string(), source })?
                .next()
                .ok_or_else(|| bad(&format!("{server} resolves to nothing")))?;
            if servers.contains(&addr) {
                return Err(bad(&format!("{server} is given twice")));
            }
            servers.push(addr);
        }
        let config = FarConfig {
            servers,
            replicas,
            timeout: DEFAULT_TIMEOUT,
            staging_pages: DEFAULT_STAGING_PAGES,
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks the settings.
    ///
    /// # Errors
    /// [`Error::Config`] naming the bad one.
    pub fn validate(&self) -> Result<(), Error> {
        let n = self.servers.len();
        if n == 0 || n > MAX_SERVERS {
            return Err(Error::Config(format!("{n} servers: use 1..={MAX_SERVERS}")));
        }
        if self.replicas == 0 || self.replicas > n {
            return Err(Error::Config(format!(
                "--far-replicas {}: use 1..={n} (the number of servers)",
                self.replicas
            )));
        }
        if self.staging_pages < BATCH_PAGES {
            return Err(Error::Config(format!("a staging of {} pages", self.staging_pages)));
        }
        Ok(())
    }
}

/// Checks that every server of `config` answers (`stats`), each within the timeout.
///
/// # Errors
/// [`Error::Unreachable`] naming the first that does not.
pub fn check_servers(config: &FarConfig) -> Result<(), Error> {
    for (i, addr) in config.servers.iter().enumerate() {
        server::Server::new(i, *addr, config.timeout)
            .fetch_identity()
            .map_err(|source| Error::Unreachable { server: *addr, source })?;
    }
    Ok(())
}

/// A value's key: the run id and the slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    pub(crate) run: u64,
    pub(crate) slot: u64,
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:012x}{:x}", self.run, self.slot)
    }
}

/// The crc32c a value carries: over its write number, its slot and its page.
pub(crate) fn value_crc(seq: u64, slot: u64, page: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&seq.to_le_bytes());
    let crc = crc32c::crc32c_append(crc, &slot.to_le_bytes());
    crc32c::crc32c_append(crc, page)
}

/// A value's header for write `seq` of `slot` holding `page`.
pub(crate) fn value_header(seq: u64, slot: u64, page: &[u8]) -> [u8; HEADER_BYTES] {
    let mut header = [0u8; HEADER_BYTES];
    header[..8].copy_from_slice(&seq.to_le_bytes());
    header[8..].copy_from_slice(&value_crc(seq, slot, page).to_le_bytes());
    header
}

/// Whether a value read (`header`, `page`) is write `seq` of `slot`, intact.
pub(crate) fn value_is(header: &[u8; HEADER_BYTES], seq: u64, slot: u64, page: &[u8]) -> bool {
    let (got_seq, got_crc) = header.split_at(8);
    u64::from_le_bytes(got_seq.try_into().unwrap_or_default()) == seq
        && u32::from_le_bytes(got_crc.try_into().unwrap_or_default()) == value_crc(seq, slot, page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_bad_ones_say_why() {
        let c = FarConfig::parse("memcached://127.0.0.1:11211,127.0.0.1:11212", 2).unwrap();
        assert_eq!(c.servers.len(), 2);
        for (url, replicas, want) in [
            ("redis://127.0.0.1:1", 1, "not memcached://"),
            ("memcached://127.0.0.1", 1, "has no port"),
            ("memcached://", 1, "0 servers"),
            ("memcached://127.0.0.1:1,127.0.0.1:1", 1, "given twice"),
            ("memcached://127.0.0.1:1", 2, "--far-replicas 2: use 1..=1"),
        ] {
            let e = FarConfig::parse(url, replicas).unwrap_err().to_string();
            assert!(e.contains(want), "{url}: {e}");
        }
    }

    #[test]
    fn values_check_their_write_slot_and_bytes() {
        let page = vec![7u8; PAGE_SIZE];
        let header = value_header(5, 9, &page);
        assert!(value_is(&header, 5, 9, &page));
        assert!(!value_is(&header, 4, 9, &page), "an older write");
        assert!(!value_is(&header, 5, 8, &page), "another slot");
        let mut bent = page.clone();
        bent[100] ^= 1;
        assert!(!value_is(&header, 5, 9, &bent), "a flipped bit");
        assert_eq!(Key { run: 0xabc, slot: 0x1f }.to_string(), "000000000abc1f");
        assert_eq!(ITEM_BYTES, 4184);
    }

    #[test]
    fn the_write_behind_buffer_is_an_eighth_of_the_budget_within_bounds() {
        assert_eq!(staging_pages_for(16 << 20), 512);
        assert_eq!(staging_pages_for(4 << 20), MIN_STAGING_PAGES);
        assert_eq!(staging_pages_for(64 << 20), 2048);
        assert_eq!(staging_pages_for(1 << 40), DEFAULT_STAGING_PAGES);
        assert_eq!(staging_pages_for(0), MIN_STAGING_PAGES);
    }
}
