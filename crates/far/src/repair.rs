//! The repairer: health probes, restarts, re-replication.
//!
//! ```text
//!   every turn (woken, or every 200 ms):
//!     down servers: probe (connect + stats); back → up, its identity compared: another one
//!       means restarted, its copies gone: its bits leave every slot's holders (a scan)
//!     every second, up servers: identity compared, the same way
//!     sweep (every 2 s, when a server went down or came back, or when asked): copies per
//!       server (the stats gauges), and every slot with fewer holders *up* than replicas is
//!       repaired
//!     repair: read a good copy from a holder (verified), then, holding the slot's stripe
//!     lock, check the slot was not written meanwhile, store the copy on the next up servers
//!     of its ranking and add them to the holders
//! ```
//!
//! A server that goes down keeps its bits in the holders: it may only be slow (a timeout
//! under load), and its copies are good if it comes back as the same process. Reads skip it
//! while it is down (and try it last), and the sweep makes new copies on servers up, so no
//! slot stays one failure from lost; a slot may then have more holders than replicas. Only
//! a server seen restarted (another pid or start time) loses its bits: were a down server's
//! bits dropped, a slot whose holders all timed out under load would be forgotten while
//! every server still held it (tests/cluster.rs,
//! `servers_that_stall_and_come_back_lose_no_page`).
//!
//! The stripe lock is held across the network on purpose (crate essay, "Ordering of
//! copies"): a write of the slot, or of another slot of the stripe, waits at most one
//! request's timeout.
//!
//! Slots the read path found bad are queued here (at most [`QUEUE_MAX`]; past that a sweep
//! finds them).

use crate::backend::Shared;
use crate::proto::Reply;
use crate::server::Server;
use crate::stats::FarStats;
use crate::{value_header, value_is, HEADER_BYTES, PAGE_SIZE};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

/// Slots queued for repair at most (8 bytes each).
const QUEUE_MAX: usize = 4096;

/// How often up servers' identities are compared.
const IDENTITY_PERIOD: Duration = Duration::from_secs(1);

/// How often the whole table is swept.
const SWEEP_PERIOD: Duration = Duration::from_secs(2);

#[derive(Debug, Default)]
struct State {
    slots: Vec<u64>,
    /// A sweep is needed (the queue overflowed, a server came back).
    sweep: bool,
}

/// Work for the repairer.
#[derive(Debug, Default)]
pub(crate) struct Repair {
    state: Mutex<State>,
    wake: Condvar,
}

impl Repair {
    pub(crate) fn new() -> Repair {
        Repair::default()
    }

    /// `slot` has fewer good copies than it should.
    pub(crate) fn slot(&self, slot: u64) {
        let mut state = self.state.lock();
        if state.slots.len() < QUEUE_MAX {
            state.slots.push(slot);
        } else {
            state.sweep = true;
        }
        drop(state);
        self.wake.notify_one();
    }

    /// A server went down: its slots need copies on servers up.
    pub(crate) fn server_down(&self) {
        self.state.lock().sweep = true;
        self.wake.notify_one();
    }

    /// Wakes the repairer, under the lock its wait checks its condition under (a pause for a
    /// fork, src/rest.rs: it never sleeps through one).
    pub(crate) fn wake(&self) {
        let _state = self.state.lock();
        self.wake.notify_all();
    }
}

impl Shared {
    /// The repairer's loop (module essay).
    pub(crate) fn repairer(&self) {
        let (mut last_identity, mut last_sweep) = (Instant::now(), Instant::now());
        while !self.shutdown.load(Relaxed) {
            self.rest.rest_while_paused(&self.shutdown);
            let (slots, mut sweep) = {
                let mut state = self.repair.state.lock();
                if state.slots.is_empty() && !state.sweep && !self.rest.is_paused() {
                    self.repair.wake.wait_for(&mut state, Duration::from_millis(200));
                }
                let state = std::mem::take(&mut *state);
                (state.slots, state.sweep)
            };
            if self.shutdown.load(Relaxed) {
                break;
            }
            sweep |= self.probe_down_servers();
            if last_identity.elapsed() >= IDENTITY_PERIOD {
                sweep |= self.check_identities();
                last_identity = Instant::now();
            }
            if sweep || last_sweep.elapsed() >= SWEEP_PERIOD {
                let under = self.sweep();
                self.repair_slots(&under);
                last_sweep = Instant::now();
            }
            self.repair_slots(&slots);
        }
    }

    /// Takes the servers of `lost` (restarted: their copies are gone) out of every slot's
    /// holders.
    fn drop_copies(&self, lost: u32) {
        FarStats::add(&self.stats.counters.scans, 1);
        self.table.for_each_written(|slot, snap| {
            if snap.holders & lost != 0 {
                if let Some(locked) = self.table.lock(slot) {
                    locked.remove_holders(snap.seq, lost);
                }
            }
        });
    }

    /// Probes every down server; true if one came back.
    fn probe_down_servers(&self) -> bool {
        let mut back = false;
        for (s, server) in self.servers.iter().enumerate().filter(|(_, s)| !s.is_up()) {
            let Ok(identity) = server.fetch_identity() else { continue };
            let old = server.set_identity(identity);
            if old != 0 && !Server::same_identity(old, identity) {
                FarStats::add(&self.stats.servers[s].restarts, 1);
                self.drop_copies(server.bit);
            }
            server.mark_up(&self.stats.servers[s]);
            back = true;
        }
        back
    }

    /// Compares every up server's identity with the last one seen: a server restarted
    /// between two requests kept none of its copies. True if one was.
    fn check_identities(&self) -> bool {
        let mut restarted = false;
        for (s, server) in self.servers.iter().enumerate().filter(|(_, s)| s.is_up()) {
            match server.fetch_identity() {
                Err(_) => self.server_failed(s),
                Ok(identity) => {
                    let old = server.set_identity(identity);
                    if old != 0 && !Server::same_identity(old, identity) {
                        FarStats::add(&self.stats.servers[s].restarts, 1);
                        self.drop_copies(server.bit);
                        restarted = true;
                    }
                }
            }
        }
        restarted
    }

    /// Counts the copies per server (the gauges) and returns the slots with fewer holders
    /// than replicas that a server up could take.
    fn sweep(&self) -> Vec<u64> {
        let up: u32 = self.servers.iter().filter(|s| s.is_up()).fold(0, |m, s| m | s.bit);
        let want = (self.config.replicas as u32).min(up.count_ones());
        let mut copies = vec![0u64; self.servers.len()];
        let mut under = Vec::new();
        self.table.for_each_written(|slot, snap| {
            for (s, server) in self.servers.iter().enumerate() {
                copies[s] += u64::from(snap.holders & server.bit != 0);
            }
            // Holders 0: staged (the flusher's), or lost (nothing to copy from).
            if snap.holders != 0 && (snap.holders & up).count_ones() < want {
                under.push(slot);
            }
        });
        for (st, n) in self.stats.servers.iter().zip(copies) {
            st.copies.store(n, Relaxed);
        }
        under
    }

    /// Re-creates the missing copies of `slots`, a batch at a time.
    fn repair_slots(&self, slots: &[u64]) {
        let mut page = vec![0u8; PAGE_SIZE];
        for &slot in slots {
            if self.shutdown.load(Relaxed) {
                return;
            }
            self.repair_one(slot, &mut page);
        }
    }

    /// Re-creates `slot`'s missing copies from a good one.
    fn repair_one(&self, slot: u64, page: &mut [u8]) {
        let snap = self.table.get(slot);
        if snap.seq == 0 || snap.holders == 0 {
            return;
        }
        let (order, n) = self.ranking(slot);
        let order = &order[..n];
        let is_up = |s: &&u8| self.servers[**s as usize].is_up();
        let holder = |s: &&u8| snap.holders & self.servers[**s as usize].bit != 0;
        // Copies on servers down count for nothing until they are back.
        let have = order.iter().filter(is_up).filter(holder).count();
        let missing = self.config.replicas.saturating_sub(have);
        let targets: u32 = order
            .iter()
            .filter(is_up)
            .filter(|s| !holder(s))
            .take(missing)
            .fold(0, |m, &s| m | self.servers[s as usize].bit);
        if targets == 0 {
            return;
        }
        let Some(source) = order.iter().filter(is_up).find(holder) else { return };
        if !self.fetch_copy(*source as usize, slot, snap.seq, page) {
            return;
        }
        // The slot's stripe is held while the copies are stored: a write of the slot waits,
        // so its flush comes after, and a copy of this (older) write can never land on a
        // server after the newer one's.
        let Some(locked) = self.table.lock(slot) else { return };
        if locked.get().seq != snap.seq {
            return;
        }
        let header = value_header(snap.seq, slot, page);
        let mut stored = 0;
        for (s, server) in self.servers.iter().enumerate().filter(|(_, s)| targets & s.bit != 0) {
            let done = server.conn().and_then(|mut conn| {
                conn.push_set(&self.key(slot), &[&header, page]);
                conn.send()?;
                let reply = conn.read_reply(&mut [])?;
                server.put_back(conn);
                Ok(reply)
            });
            FarStats::add(&self.stats.counters.requests, 1);
            match done {
                Ok(Reply::Done) => stored |= server.bit,
                Ok(_) => {}
                Err(_) => self.server_failed(s),
            }
        }
        if locked.add_holders(snap.seq, stored) {
            FarStats::add(&self.stats.counters.rereplications, u64::from(stored.count_ones()));
        }
    }

    /// Reads write `seq` of `slot` from `server` into `page`; true if it is there, good.
    fn fetch_copy(&self, server: usize, slot: u64, seq: u64, page: &mut [u8]) -> bool {
        let mut header = [0u8; HEADER_BYTES];
        let got = self.servers[server].conn().and_then(|mut conn| {
            conn.push_get(&self.key(slot));
            conn.send()?;
            let reply = conn.read_reply(&mut [&mut header, page])?;
            self.servers[server].put_back(conn);
            Ok(reply)
        });
        FarStats::add(&self.stats.counters.requests, 1);
        match got {
            Ok(Reply::Value(n))
                if n == crate::VALUE_BYTES && value_is(&header, seq, slot, page) =>
            {
                true
            }
            Ok(_) => {
                FarStats::add(&self.stats.counters.bad_copies, 1);
                if let Some(locked) = self.table.lock(slot) {
                    locked.remove_holders(seq, self.servers[server].bit);
                }
                false
            }
            Err(_) => {
                self.server_failed(server);
                false
            }
        }
    }

    /// Deletes every copy this run holds (quiet deletes, pipelined per server).
    pub(crate) fn delete_all(&self) {
        for (s, server) in self.servers.iter().enumerate() {
            if !server.is_up() {
                continue;
            }
            let mut keys = Vec::new();
            self.table.for_each_written(|slot, snap| {
                if snap.holders & server.bit != 0 {
                    keys.push(slot);
                }
            });
            let Ok(mut conn) = server.conn() else { continue };
            for batch in keys.chunks(1024) {
                batch.iter().for_each(|&slot| conn.push_delete(&self.key(slot)));
                conn.push_noop();
                if conn.send().and_then(|()| conn.read_until_noop()).is_err() {
                    self.server_failed(s);
                    break;
                }
            }
        }
    }
}
