//! One memcached server: its address, its health, its identity, its pooled connections.
//!
//! Health is a flag: up until a request to it fails or times out (or a probe does), then
//! down until a probe connects and reads its `stats`. Going down is an event the repairer
//! acts on (its copies are re-created elsewhere); see src/repair.rs.
//!
//! Identity: `pid` and start time (`time - uptime`) from `stats`, mixed into one number. A
//! server that comes back with another identity was restarted, and memcached keeps nothing
//! across a restart: every copy it held is gone.
//!
//! Connections: a stack of idle ones, at most [`POOL_MAX`]; a request takes one (or opens
//! one) and gives it back only if it completed cleanly. A connection that failed is dropped:
//! its replies may be out of step.

use crate::proto::Conn;
use crate::stats::ServerStats;
use parking_lot::Mutex;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Idle connections kept per server: the fault handler, the flusher, the repairer and a few
/// faulting threads (SIGBUS delivery) at once.
const POOL_MAX: usize = 8;

/// A server (module essay).
#[derive(Debug)]
pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    /// Its rendezvous seed (src/place.rs).
    pub(crate) seed: u64,
    /// Its bit in a slot's holders.
    pub(crate) bit: u32,
    up: AtomicBool,
    /// Its identity when last seen (0: never).
    identity: AtomicU64,
    pool: Mutex<Vec<Conn>>,
    timeout: Duration,
}

impl Server {
    pub(crate) fn new(index: usize, addr: SocketAddr, timeout: Duration) -> Server {
        Server {
            addr,
            seed: crate::place::seed_of(&addr),
            bit: 1 << index,
            up: AtomicBool::new(true),
            identity: AtomicU64::new(0),
            pool: Mutex::new(Vec::with_capacity(POOL_MAX)),
            timeout,
        }
    }

    /// Whether it is taken as up.
    pub(crate) fn is_up(&self) -> bool {
        self.up.load(Relaxed)
    }

    /// A connection: an idle one, or a new one.
    ///
    /// # Errors
    /// The connection's error.
    ///
    /// Context: may block up to the timeout (connect).
    pub(crate) fn conn(&self) -> io::Result<Conn> {
        if let Some(conn) = self.pool.lock().pop() {
            return Ok(conn);
        }
        Conn::connect(&self.addr, self.timeout)
    }

    /// In a forked child: the idle connections are the parent's streams (a request on one
    /// would interleave with the parent's); the child's copies of their descriptors are
    /// closed, and requests open connections of the child's own.
    pub(crate) fn forget_connections_in_child(&self) {
        if let Some(mut pool) = self.pool.try_lock() {
            pool.clear();
        }
    }

    /// Gives back a connection whose last request completed cleanly.
    pub(crate) fn put_back(&self, conn: Conn) {
        let mut pool = self.pool.lock();
        if pool.len() < POOL_MAX {
            pool.push(conn);
        }
    }

    /// A request to it failed: marks it down and drops its idle connections. Returns true
    /// if it was up (the caller reports the event).
    pub(crate) fn mark_down(&self, stats: &ServerStats) -> bool {
        let idle = std::mem::take(&mut *self.pool.lock());
        drop(idle);
        let was_up = self.up.swap(false, Relaxed);
        if was_up {
            stats.up.store(0, Relaxed);
            stats.down_events.fetch_add(1, Relaxed);
        }
        was_up
    }

    /// A probe reached it: marks it up.
    pub(crate) fn mark_up(&self, stats: &ServerStats) {
        self.up.store(true, Relaxed);
        stats.up.store(1, Relaxed);
    }

    /// Its identity now (a `stats` request on a fresh connection, kept if clean).
    ///
    /// # Errors
    /// The request's error, or `stats` without `pid` / `time` / `uptime`.
    pub(crate) fn fetch_identity(&self) -> io::Result<u64> {
        let mut conn = Conn::connect(&self.addr, self.timeout)?;
        let (mut pid, mut time, mut uptime) = (None, None, None);
        conn.stats(&mut |name, value| {
            let value = value.parse::<u64>().ok();
            match name {
                "pid" => pid = value,
                "time" => time = value,
                "uptime" => uptime = value,
                _ => {}
            }
        })?;
        let (Some(pid), Some(time), Some(uptime)) = (pid, time, uptime) else {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "stats without pid/uptime"));
        };
        self.put_back(conn);
        let started = time.saturating_sub(uptime) & 0xffff_ffff;
        Ok(((pid & 0xffff_ffff) << 32) | started)
    }

    /// Whether two identities are one server's: the same pid, started within 2 s of each
    /// other (its `time` and `uptime` are sampled apart, so the start time it reports can
    /// move by a second between two looks).
    pub(crate) fn same_identity(a: u64, b: u64) -> bool {
        a >> 32 == b >> 32 && (a & 0xffff_ffff).abs_diff(b & 0xffff_ffff) <= 2
    }

    /// Records `identity`; returns the one it replaces (0: none).
    pub(crate) fn set_identity(&self, identity: u64) -> u64 {
        self.identity.swap(identity, Relaxed)
    }

    /// Its address as a number for the stats file: IPv4 << 16 | port (0 for IPv6).
    pub(crate) fn addr_number(&self) -> u64 {
        match self.addr {
            SocketAddr::V4(v4) => (u64::from(u32::from(*v4.ip())) << 16) | u64::from(v4.port()),
            SocketAddr::V6(_) => 0,
        }
    }
}
