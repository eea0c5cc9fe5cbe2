//! [`FarBackend`]: the backend trait over the servers; the read path and the flusher.
//!
//! Read of `nr` slots (one folio, or a readahead window):
//!
//! ```text
//!   per slot: seq 0 → zeros; staged (that very write) → copy; else pending
//!   round: each pending slot picks its next holder (rendezvous order, up ones first)
//!          one pipelined mg batch per server, all sent before any is read
//!          good value (seq, crc) → done (a failover if not the first holder tried)
//!          missing / stale / corrupt → bad copy: holder removed, slot queued for repair
//!          server error or timeout → server down; its slots try their next holder
//!   no holder left for a slot → Error::Unavailable (lost_pages): the engine poisons it
//! ```
//!
//! Lock order: staging's mutex, then a table stripe (the flusher commits holders before it
//! removes the staged page, so a reader that misses the page finds the holders). No lock is
//! held while the network is used.

use crate::proto::Reply;
use crate::repair::Repair;
use crate::rest::Rest;
use crate::server::Server;
use crate::staging::{Staging, Taken};
use crate::stats::FarStats;
use crate::table::Table;
use crate::{value_header, value_is, Error, FarConfig, Key, HEADER_BYTES, PAGE_SIZE};
use backend::{check_range, check_request, Backend, ForkStep};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The tier's name in errors and messages.
pub(crate) const TIER: &str = "far tier (memcached)";

/// What the far tier's threads and its callers share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: FarConfig,
    /// This run's identity in every key.
    pub(crate) run: u64,
    pub(crate) servers: Box<[Server]>,
    pub(crate) seeds: Box<[u64]>,
    pub(crate) table: Table,
    pub(crate) staging: Staging,
    pub(crate) stats: FarStats,
    pub(crate) repair: Repair,
    pub(crate) nr_pages: u64,
    pub(crate) shutdown: AtomicBool,
    /// The flushers' and the repairer's pause for a fork (src/rest.rs).
    pub(crate) rest: Rest,
    /// This run's entry in the process's ledger (src/ledger.rs), once it has one, and the
    /// slots it covers: no copy of a slot at or past the mark is sent.
    ledger_entry: parking_lot::Mutex<Option<usize>>,
    ledger_mark: std::sync::atomic::AtomicU64,
    /// One past the highest slot a copy was sent of.
    sent_high: std::sync::atomic::AtomicU64,
}

/// A swap device in a memcached cluster (crate essay).
#[derive(Debug)]
pub struct FarBackend {
    shared: Arc<Shared>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// This copy is a forked child's ([`ForkStep::Inherited`]).
    forked: std::sync::atomic::AtomicBool,
}

/// A page of a read still looking for a good copy.
#[derive(Debug, Clone, Copy)]
struct Pending {
    /// Its page in the caller's buffer.
    page: usize,
    slot: u64,
    seq: u64,
    /// Servers tried.
    tried: u32,
    /// The server asked now is not the first of the slot's ranking (a replica's copy).
    replica: bool,
}

impl Shared {
    pub(crate) fn key(&self, slot: u64) -> Key {
        Key { run: self.run, slot }
    }

    /// Servers in `slot`'s rendezvous order.
    pub(crate) fn ranking(&self, slot: u64) -> ([u8; crate::MAX_SERVERS], usize) {
        let mut order = [0u8; crate::MAX_SERVERS];
        let n = crate::place::rank(&self.seeds, slot, &mut order);
        (order, n)
    }

    /// Whether any server is up.
    fn servers_up(&self) -> usize {
        self.servers.iter().filter(|s| s.is_up()).count()
    }

    /// A request to `server` failed: marks it down, and has the repairer make copies of its
    /// slots on the servers up if it was up.
    pub(crate) fn server_failed(&self, server: usize) {
        Shared::add(&self.stats.counters.request_errors);
        if self.servers[server].mark_down(&self.stats.servers[server]) {
            self.repair.server_down();
        }
    }

    fn add(counter: &std::sync::atomic::AtomicU64) {
        FarStats::add(counter, 1);
    }

    /// The next holder `p` should try: an up one in rendezvous order, else a down one (it
    /// may be back), else none. With it, whether it is not the slot's first-ranked server.
    fn next_holder(&self, p: &Pending) -> Option<(usize, bool)> {
        let holders = self.table.get(p.slot).holders & !p.tried;
        let (order, n) = self.ranking(p.slot);
        let candidates = order[..n].iter().map(|&s| s as usize);
        let mut down = None;
        for s in candidates.filter(|&s| holders & self.servers[s].bit != 0) {
            if self.servers[s].is_up() {
                return Some((s, s != order[0] as usize));
            }
            down.get_or_insert((s, s != order[0] as usize));
        }
        down
    }

    /// Reads slots `offset ..` into `buf` (module essay).
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), backend::Error> {
        let mut pending = Vec::new();
        for (i, page) in buf.chunks_exact_mut(PAGE_SIZE).enumerate() {
            let slot = offset + i as u64;
            let seq = self.table.get(slot).seq;
            if seq == 0 {
                page.fill(0);
            } else if self.staging.get(slot, seq, page) {
                Shared::add(&self.stats.counters.pages_read_staged);
            } else {
                pending.push(Pending { page: i, slot, seq, tried: 0, replica: false });
            }
        }
        FarStats::add(&self.stats.counters.pages_read, (buf.len() / PAGE_SIZE) as u64);
        let mut why = String::new();
        while !pending.is_empty() {
            let mut batches: Vec<(usize, Vec<Pending>)> = Vec::new();
            for mut p in pending.drain(..) {
                let Some((server, replica)) = self.next_holder(&p) else {
                    return Err(self.lost(p.slot, &why));
                };
                p.replica = replica;
                match batches.iter_mut().find(|(s, b)| *s == server && b.len() < crate::BATCH_PAGES)
                {
                    Some((_, batch)) => batch.push(p),
                    None => batches.push((server, vec![p])),
                }
            }
            pending = self.read_round(&batches, buf, &mut why);
        }
        Ok(())
    }

    /// One round of a read: a pipelined batch per server, all sent, then all read. Returns
    /// the pages still without a good copy.
    fn read_round(
        &self,
        batches: &[(usize, Vec<Pending>)],
        buf: &mut [u8],
        why: &mut String,
    ) -> Vec<Pending> {
        let started = Instant::now();
        let mut sent = Vec::with_capacity(batches.len());
        for (server, batch) in batches {
            let conn = self.servers[*server].conn().and_then(|mut conn| {
                batch.iter().for_each(|p| conn.push_get(&self.key(p.slot)));
                conn.send().map(|()| conn)
            });
            Shared::add(&self.stats.counters.requests);
            sent.push(conn);
        }
        let mut again = Vec::new();
        for ((server, batch), conn) in batches.iter().zip(sent) {
            let (server, bit) = (*server, self.servers[*server].bit);
            let mut conn = match conn {
                Ok(conn) => conn,
                Err(e) => {
                    let _ = write!(why, "{}: {e}; ", self.servers[server].addr);
                    self.server_failed(server);
                    again.extend(batch.iter().map(|p| Pending { tried: p.tried | bit, ..*p }));
                    continue;
                }
            };
            let mut failed = None;
            for (k, p) in batch.iter().enumerate() {
                let page = &mut buf[p.page * PAGE_SIZE..(p.page + 1) * PAGE_SIZE];
                let mut header = [0u8; HEADER_BYTES];
                match conn.read_reply(&mut [&mut header, page]) {
                    Ok(Reply::Value(n))
                        if n == crate::VALUE_BYTES && value_is(&header, p.seq, p.slot, page) =>
                    {
                        if p.tried != 0 {
                            Shared::add(&self.stats.counters.failovers);
                        }
                        if p.replica {
                            Shared::add(&self.stats.counters.replica_reads);
                        }
                    }
                    Ok(reply) => {
                        let _ = write!(why, "{}: {reply:?}; ", self.servers[server].addr);
                        self.bad_copy(p, bit);
                        again.push(Pending { tried: p.tried | bit, ..*p });
                    }
                    Err(e) => {
                        let _ = write!(why, "{}: {e}; ", self.servers[server].addr);
                        failed = Some(k);
                        break;
                    }
                }
            }
            match failed {
                None => self.servers[server].put_back(conn),
                Some(k) => {
                    self.server_failed(server);
                    again.extend(batch[k..].iter().map(|p| Pending { tried: p.tried | bit, ..*p }));
                }
            }
        }
        self.stats.latency.record(started.elapsed().as_nanos() as u64);
        again
    }

    /// A server answered for `p` without a good copy: it no longer holds one.
    fn bad_copy(&self, p: &Pending, bit: u32) {
        Shared::add(&self.stats.counters.bad_copies);
        if let Some(locked) = self.table.lock(p.slot) {
            locked.remove_holders(p.seq, bit);
        }
        self.repair.slot(p.slot);
    }

    /// No server returned `slot` good: counts it, says so once in a while, and makes the
    /// error the engine turns into a poisoned page.
    fn lost(&self, slot: u64, why: &str) -> backend::Error {
        let lost = self.stats.counters.lost_pages.fetch_add(1, Relaxed) + 1;
        let why = if why.is_empty() {
            "no server holds a copy".to_string()
        } else {
            format!("no server returned a good copy ({})", why.trim_end_matches("; "))
        };
        if lost.is_power_of_two() {
            eprintln!(
                "uswap: {TIER}: page at slot {slot} lost, {why}: its access raises SIGBUS \
                 ({lost} pages lost so far)"
            );
        }
        backend::Error::Unavailable { tier: TIER, op: "read", offset: slot, why }
    }

    /// Stages the pages of a write (crate essay, "Writes").
    ///
    /// Every slot gets its new write number first, outside staging's lock (a table stripe
    /// can be held across a request by the repairer): a write that fails part-way leaves
    /// the slots past the failure with a write number and no data, as the failed one, and
    /// the engine reads none of them (it keeps the pages).
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), backend::Error> {
        let mut seqs = [0u64; crate::BATCH_PAGES];
        let nr = data.len() / PAGE_SIZE;
        for chunk in 0..nr.div_ceil(seqs.len()) {
            let from = chunk * seqs.len();
            let pages = (nr - from).min(seqs.len());
            for (i, seq) in seqs[..pages].iter_mut().enumerate() {
                *seq = self.table.begin_write(offset + (from + i) as u64);
            }
            let part = &data[from * PAGE_SIZE..(from + pages) * PAGE_SIZE];
            let staged = self.staging.put_all(
                offset + from as u64,
                part,
                &seqs[..pages],
                self.config.timeout,
            );
            if let Err(slot) = staged {
                return Err(self.write_refused(slot));
            }
        }
        FarStats::add(&self.stats.counters.pages_written, (data.len() / PAGE_SIZE) as u64);
        Ok(())
    }

    /// A write that found the write-behind buffer full for the whole timeout, at `slot`.
    fn write_refused(&self, slot: u64) -> backend::Error {
        Shared::add(&self.stats.counters.write_refused);
        let why = format!(
            "no server took writes for {} ms (the write-behind buffer of {} pages is full; \
             {} of {} servers up)",
            self.config.timeout.as_millis(),
            self.config.staging_pages,
            self.servers_up(),
            self.servers.len()
        );
        backend::Error::Unavailable { tier: TIER, op: "write", offset: slot, why }
    }

    /// The servers write `seq` of `slot` goes to: the first `replicas` up ones in its
    /// rendezvous order.
    fn targets(&self, slot: u64) -> u32 {
        let (order, n) = self.ranking(slot);
        let up = order[..n].iter().filter(|&&s| self.servers[s as usize].is_up());
        up.take(self.config.replicas).fold(0, |mask, &s| mask | self.servers[s as usize].bit)
    }

    /// Stores `taken` (pages in `pages`, in order) on their targets: one pipeline of quiet
    /// sets per server, all sent, then all read. Returns the servers that stored each.
    ///
    /// A server answers only the sets it failed (an error line, which does not say which
    /// set), so a server that answered any error line before the `MN` is taken to have
    /// stored none of its batch: the pages go round again, and a second store of the same
    /// write is the same value.
    fn store(&self, taken: &[Taken], pages: &[u8], targets: &[u32]) -> Vec<u32> {
        let mut stored = vec![0u32; taken.len()];
        let started = Instant::now();
        let page = |k: usize| &pages[k * PAGE_SIZE..(k + 1) * PAGE_SIZE];
        let headers: Vec<[u8; HEADER_BYTES]> =
            taken.iter().enumerate().map(|(k, t)| value_header(t.seq, t.slot, page(k))).collect();
        let mut sent = Vec::new();
        for (s, server) in self.servers.iter().enumerate() {
            let mine: Vec<usize> =
                (0..taken.len()).filter(|&k| targets[k] & server.bit != 0).collect();
            if mine.is_empty() {
                continue;
            }
            let conn = server.conn().and_then(|mut conn| {
                let sets = mine.iter().map(|&k| (self.key(taken[k].slot), headers[k], page(k)));
                conn.send_quiet_sets(sets).map(|()| conn)
            });
            Shared::add(&self.stats.counters.requests);
            sent.push((s, mine, conn));
        }
        for (s, mine, conn) in sent {
            let Ok(mut conn) = conn else {
                self.server_failed(s);
                continue;
            };
            match conn.read_until_noop() {
                Ok(errors) => {
                    if errors == 0 {
                        mine.iter().for_each(|&k| stored[k] |= self.servers[s].bit);
                    } else {
                        // Refused (out of memory): the pages go round again, placed anew;
                        // a full server that stays up refuses them until it has room
                        // (`-M` evicts nothing), and they wait staged meanwhile.
                        FarStats::add(&self.stats.counters.sets_refused, errors);
                    }
                    self.servers[s].put_back(conn);
                }
                Err(_) => self.server_failed(s),
            }
        }
        self.stats.latency.record(started.elapsed().as_nanos() as u64);
        stored
    }

    /// Before the copies of `taken` leave: the ledger's mark covers their slots
    /// (src/ledger.rs). A ledger that has no entry for the run yet (the process has not
    /// joined its run) is asked again at the next flush, the copies going out meanwhile:
    /// its first mark covers every slot below it.
    fn mark_ledger(&self, taken: &[Taken]) {
        let Some(ledger) = crate::ledger::ledger() else { return };
        let batch_high = taken.iter().map(|t| t.slot + 1).max().unwrap_or(0);
        // Past copies count too: those sent while there was no entry.
        let high = self.sent_high.fetch_max(batch_high, Relaxed).max(batch_high);
        if high <= self.ledger_mark.load(Relaxed) {
            return;
        }
        let mut entry = self.ledger_entry.lock();
        if entry.is_none() {
            *entry = ledger.enter(self.run);
        }
        let Some(entry) = *entry else {
            Shared::add(&self.stats.counters.ledger_misses);
            return;
        };
        let mark = high.div_ceil(crate::REACH_STEP) * crate::REACH_STEP;
        ledger.reach(entry, mark);
        self.ledger_mark.fetch_max(mark, Relaxed);
    }

    /// The flusher's loop: batches of staged pages to their servers, committed when stored.
    pub(crate) fn flusher(&self) {
        let (mut taken, mut pages, mut committed) = (Vec::new(), Vec::new(), Vec::new());
        while !self.shutdown.load(Relaxed) {
            self.rest.rest_while_paused(&self.shutdown);
            self.staging.take_batch(
                crate::BATCH_PAGES,
                Duration::from_millis(50),
                &|| self.rest.is_paused(),
                &mut taken,
                &mut pages,
            );
            if taken.is_empty() {
                continue;
            }
            self.mark_ledger(&taken);
            let targets: Vec<u32> = taken.iter().map(|t| self.targets(t.slot)).collect();
            let stored = self.store(&taken, &pages, &targets);
            let mut retried = false;
            committed.clear();
            for (k, t) in taken.iter().enumerate() {
                // Stored on every target (up ones when it was placed): committed. A target
                // that refused or failed makes it go round again, placed anew.
                if targets[k] != 0 && stored[k] == targets[k] {
                    if let Some(locked) = self.table.lock(t.slot) {
                        locked.add_holders(t.seq, stored[k]);
                    }
                    committed.push(*t);
                    Shared::add(&self.stats.counters.pages_flushed);
                    FarStats::add(
                        &self.stats.counters.copies_written,
                        u64::from(stored[k].count_ones()),
                    );
                    if stored[k].count_ones() < self.config.replicas as u32 {
                        self.repair.slot(t.slot); // fewer servers up than replicas
                    }
                } else {
                    self.staging.retry(t.slot, t.seq);
                    Shared::add(&self.stats.counters.flush_retries);
                    retried = true;
                }
            }
            self.staging.commit_all(&committed);
            if retried {
                // The servers that failed are down now; give the repairer a moment to
                // probe them rather than spin.
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

impl FarBackend {
    /// Connects to every server of `config` (each must answer), draws the run id, and
    /// starts the flusher and the repairer. The device holds `nr_pages` slots.
    ///
    /// # Errors
    /// [`Error::Config`], [`Error::Unreachable`] for a server that does not answer
    /// `stats`, [`Error::Random`], [`Error::Thread`].
    ///
    /// Context: blocks up to the timeout per server; allocates the slot table's chunk index
    /// and the write-behind buffer; spawns two threads.
    pub fn connect(config: FarConfig, nr_pages: u64) -> Result<FarBackend, Error> {
        config.validate()?;
        let servers: Box<[Server]> = config
            .servers
            .iter()
            .enumerate()
            .map(|(i, addr)| Server::new(i, *addr, config.timeout))
            .collect();
        let stats = FarStats::new(servers.len());
        for (server, st) in servers.iter().zip(&stats.servers) {
            let identity = server
                .fetch_identity()
                .map_err(|source| Error::Unreachable { server: server.addr, source })?;
            server.set_identity(identity);
            server.mark_up(st);
        }
        let mut run = [0u8; 8];
        rustix::rand::getrandom(&mut run, rustix::rand::GetRandomFlags::empty())
            .map_err(|e| Error::Random(e.into()))?;
        let shared = Arc::new(Shared {
            run: u64::from_le_bytes(run) & 0xffff_ffff_ffff,
            seeds: servers.iter().map(|s| s.seed).collect(),
            servers,
            table: Table::new(nr_pages),
            staging: Staging::new(config.staging_pages),
            stats,
            repair: Repair::new(),
            nr_pages,
            shutdown: AtomicBool::new(false),
            rest: Rest::default(),
            ledger_entry: parking_lot::Mutex::new(None),
            ledger_mark: std::sync::atomic::AtomicU64::new(0),
            sent_high: std::sync::atomic::AtomicU64::new(0),
            config,
        });
        let mut threads = Vec::new();
        for (name, work) in [
            ("uswap-far-flush0", Shared::flusher as fn(&Shared)),
            ("uswap-far-flush1", Shared::flusher as fn(&Shared)),
            ("uswap-far-repair", Shared::repairer as fn(&Shared)),
        ] {
            let shared = shared.clone();
            let thread = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || work(&shared))
                .map_err(Error::Thread)?;
            threads.push(thread);
        }
        Ok(FarBackend { shared, threads, forked: std::sync::atomic::AtomicBool::new(false) })
    }

    /// The counters.
    pub fn stats(&self) -> &FarStats {
        &self.shared.stats
    }

    /// Waits until every page written is stored on its servers, at most `timeout`; true if
    /// so (benchmarks and tests: the staged pages are on the servers).
    pub fn flush(&self, timeout: Duration) -> bool {
        self.shared.staging.wait_empty(timeout)
    }

    /// This run's id, as it appears at the start of every key (12 hex digits).
    pub fn run_id(&self) -> String {
        format!("{:012x}", self.shared.run)
    }
}

impl Drop for FarBackend {
    /// Stops the threads and deletes this run's copies from the servers (best effort,
    /// bounded by the timeout per server): ciphertext under a key that is gone is of no
    /// use to anyone, and it holds server memory that `-M` never frees.
    ///
    /// A forked child's copy does neither: the threads and the copies are the parent's.
    fn drop(&mut self) {
        if self.forked.load(Relaxed) {
            std::mem::forget(std::mem::take(&mut self.threads));
            return;
        }
        self.shared.shutdown.store(true, Relaxed);
        self.shared.rest.resume();
        self.shared.staging.shutdown();
        self.shared.repair.wake();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        self.shared.delete_all();
    }
}

impl FarBackend {
    /// Fork prepare ([`ForkStep::Prepare`]).
    fn rest_for_fork(&self) {
        let shared = &self.shared;
        self.flush(shared.config.timeout);
        let deadline = Instant::now() + shared.config.timeout * 2;
        let wake = || {
            shared.staging.wake_flushers();
            shared.repair.wake();
        };
        if !shared.rest.pause(self.threads.len(), deadline, wake) {
            FarStats::add(&shared.stats.counters.fork_unrested, 1);
        }
    }

    /// The error of every I/O of a forked child's copy ([`ForkStep::Inherited`]).
    fn in_child_error() -> backend::Error {
        let why = "a forked child cannot use its parent's connections to the far tier";
        backend::Error::Io { op: "far", offset: 0, source: std::io::Error::other(why) }
    }
}

impl Backend for FarBackend {
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), backend::Error> {
        check_request(offset, data.len(), self.shared.nr_pages)?;
        if self.forked.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(Self::in_child_error());
        }
        self.shared.write(offset, data)
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), backend::Error> {
        check_request(offset, buf.len(), self.shared.nr_pages)?;
        self.shared.read(offset, buf)
    }

    /// Prepare: stores every staged page (at most the request timeout: the child reads its
    /// copy of the buffer for the rest), then brings the flushers and the repairer to rest
    /// holding nothing, out of parking_lot's queues (src/rest.rs), until Resume.
    ///
    /// Inherited: the flusher and repair threads and the idle connections are the
    /// parent's. A forked child reads the pages it inherited (the parent keeps their slots
    /// for it) through connections of its own, and from its copy of the staging buffer for
    /// pages not yet flushed at the fork; it writes its own pages to a far tier of its own,
    /// never here. A child's copy neither rests nor resumes threads: they do not exist in it.
    fn fork(&self, step: ForkStep) {
        let child_copy = self.forked.load(Relaxed);
        match step {
            ForkStep::Inherited => {
                self.forked.store(true, Relaxed);
                for server in self.shared.servers.iter() {
                    server.forget_connections_in_child();
                }
            }
            ForkStep::Prepare if !child_copy => self.rest_for_fork(),
            ForkStep::Resume if !child_copy => self.shared.rest.resume(),
            ForkStep::Prepare | ForkStep::Resume => {}
        }
    }

    /// Forgets the slots (they read as zeros) and drops their staged pages; the servers'
    /// copies stay until overwritten or deleted at the end (a delete per page would cost a
    /// request per page for memory the next write of the slot reuses).
    fn discard(&self, offset: u64, nr: u64) -> Result<(), backend::Error> {
        check_range(offset, nr, self.shared.nr_pages)?;
        for slot in offset..offset + nr {
            self.shared.table.forget(slot);
            self.shared.staging.remove(slot);
        }
        Ok(())
    }

    fn is_synchronous(&self) -> bool {
        false
    }

    fn nr_pages(&self) -> u64 {
        self.shared.nr_pages
    }

    fn counters(&self, out: &mut dyn FnMut(&'static str, u64)) {
        let servers = &self.shared.servers;
        self.shared.stats.each(&|i| servers[i].addr_number(), out);
        out("far_staged_pages", self.shared.staging.len() as u64);
        out("far_replicas", self.shared.config.replicas as u64);
    }
}
