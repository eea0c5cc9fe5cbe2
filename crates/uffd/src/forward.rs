//! Forked children under SIGBUS delivery: a child's fault is forwarded to the parent's
//! handler thread, which resolves it into the child's uffd.
//!
//! ```text
//!   the child, in its SIGBUS handler                the parent's handler thread
//!   --------------------------------                ---------------------------
//!                                                   FORK: serve the child's uffd (mm N);
//!                                                     UFFDIO_COPY {MAGIC, N} into the
//!                                                     child's mailbox page
//!   fault at A: wait until the mailbox is there
//!     (mincore), read N
//!   claim a board slot (CAS), write {N, A, write},
//!     REQUESTED; wake the handler: its eventfd,     each turn, each REQUESTED slot: SERVING,
//!     or the doorbell (below)
//!   futex-wait on the slot's state                    engine.handle_fault_in(N, A, write)
//!                                                     (UFFDIO_COPY into the child), then
//!   RESOLVED: the access runs again;                  RESOLVED / NOT_MINE / FAILED, and a
//!     NOT_MINE: the program's own SIGBUS              futex wake
//!   free the slot
//! ```
//!
//! Why a mailbox: a FORK event carries the child's uffd and nothing that names the child
//! (no pid), and only the handler knows which uffd is whose. So the handler itself writes
//! the child's number into the child's memory, through that uffd, at a page registered
//! MISSING in the parent and never touched there, so every child has it missing until
//! then. `MADV_WIPEONFORK` keeps a child's filled mailbox from reaching a grandchild, whose
//! own FORK fills its own. Why a shared board: the answer must reach one process among
//! several, and the board (`MAP_SHARED`, made before any fork) is seen by all of them; a
//! slot is claimed by compare-and-swap and waited on with a process-shared futex.
//!
//! Waking the handler: the child writes the handler's eventfd, which it inherited, but only
//! once `kcmp(KCMP_FILE)` says its descriptor of that number is still the parent's: a
//! daemon closes every descriptor after its fork, and a write to a number reused since
//! could land in the child's own file. Otherwise (or where kcmp is not permitted) the
//! child rings the doorbell: `MADV_DONTNEED` on a page registered in its uffd, which only
//! the handler holds, and never populated, is a REMOVE event the handler reads (the madvise
//! returns once it has). Slower: the child's uffd refuses copies (EAGAIN) until the child
//! itself has returned from the madvise, so its request may wait a retry turn; the
//! closed-descriptors test's child forwarded 556 faults so in 0.19 s (docs/benchmarks.md).
//!
//! A request no one picks up in [`PICKUP_MAX`] (a handler gone or stuck) is withdrawn, and
//! so is one whose owner process is gone: [`Answer::Unanswered`], and the child dies of
//! the SIGBUS, loudly, as it did before forwarding existed. A request being served is
//! waited for as long as the owner lives. A slot whose child died holding it (killed while
//! it waited) is freed by the handler ([`Forward::free_abandoned`]): each slot records its
//! claimant's pid, 0 while it is being claimed or freed.

use crate::error::Error;
use crate::mm::{Advice, Mapping};
use crate::sys::{mem, process};
use crate::types::{CopyMode, RegisterMode};
use crate::uffd::Uffd;
use crate::PAGE_SIZE;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The mailbox's first word, so a child never takes stray bytes for its number.
const MAGIC: u64 = 0x7573_7761_705f_6d62;
/// Bytes of one board slot: state (u32), access (u32: bit 0 a write, bit 1 a write-protect
/// fault), child number (u64), address (u64), claimant's pid (u32).
const SLOT_BYTES: usize = 32;
/// Slots on the board: requests in flight at once, across every child.
const SLOTS: usize = PAGE_SIZE / SLOT_BYTES;
/// How long a child's request may wait to be picked up before it is withdrawn.
pub const PICKUP_MAX: Duration = Duration::from_secs(10);
/// How long a child waits for its mailbox (the parent's handler processes the FORK before
/// the parent's `fork()` returns).
const MAILBOX_MAX: Duration = Duration::from_secs(10);
/// One futex wait: between two looks at whether the owner still lives.
const WAIT_STEP: Duration = Duration::from_millis(100);
/// How long a child spins on its slot before it sleeps on the futex: about what the handler
/// takes to answer, and less than a sleeping thread's wake-up costs where an idle CPU halts
/// (15-70 us on dev-vm; docs/benchmarks.md, "Forked children under SIGBUS delivery").
const SPIN: Duration = Duration::from_micros(40);

/// The slot's state once answered, or once [`SPIN`] since `asked` has gone by.
fn spin_while_unanswered(state: &AtomicU32, asked: Instant) -> u32 {
    loop {
        let now = state.load(SeqCst);
        if now >= RESOLVED || asked.elapsed() >= SPIN {
            return now;
        }
        std::hint::spin_loop();
    }
}

/// A slot's states.
const FREE: u32 = 0;
const CLAIMED: u32 = 1;
const REQUESTED: u32 = 2;
const SERVING: u32 = 3;
const RESOLVED: u32 = 4;
const NOT_MINE: u32 = 5;
const FAILED: u32 = 6;

/// What the parent's handler made of a forwarded fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Mapped (or there already): the access may run again.
    Resolved,
    /// No region of the child holds the address: the program's own fault.
    NotMine,
    /// The page could not be read (poisoned now), or the child is not served.
    Failed,
    /// No answer: no handler picked the request up, or the owner is gone.
    Unanswered,
}

/// The board, the mailbox and the doorbell of one handler (module essay).
#[derive(Debug)]
pub struct Forward {
    board: Mapping,
    mailbox: Mapping,
    doorbell: Mapping,
    uffd: Arc<Uffd>,
}

impl Forward {
    /// Makes the board, the mailbox and the doorbell, the last two registered with the
    /// managed address space's `uffd`.
    ///
    /// # Errors
    /// mmap, madvise or register failures.
    pub fn new(uffd: Arc<Uffd>) -> Result<Forward, Error> {
        let board = Mapping::shared_anonymous(PAGE_SIZE)?;
        let mailbox = Mapping::anonymous(PAGE_SIZE)?;
        mailbox.advise(0, PAGE_SIZE, Advice::WipeOnFork)?;
        uffd.register(mailbox.range(), RegisterMode::MISSING)?;
        let doorbell = Mapping::anonymous(PAGE_SIZE)?;
        if let Err(e) = uffd.register(doorbell.range(), RegisterMode::MISSING) {
            let _ = uffd.unregister(mailbox.range());
            return Err(e);
        }
        Ok(Forward { board, mailbox, doorbell, uffd })
    }

    /// Whether `[start, end)` is the doorbell: its REMOVE is a child's ring, no event of the
    /// program's.
    pub fn is_doorbell(&self, start: usize, end: usize) -> bool {
        let bell = self.doorbell.range();
        (start, end) == (bell.start(), bell.end())
    }

    /// Child side: wakes the parent's handler (module essay). Returns once the handler read
    /// the ring, or at once where the doorbell is not registered any more (the owner gone).
    fn ring(&self) {
        let _ = self.doorbell.advise(0, PAGE_SIZE, Advice::DontNeed);
    }

    fn state(&self, slot: usize) -> &AtomicU32 {
        self.board.atomic_u32(slot * SLOT_BYTES)
    }

    fn claimant(&self, slot: usize) -> &AtomicU32 {
        self.board.atomic_u32(slot * SLOT_BYTES + 24)
    }

    /// Frees a slot its claimant holds (state CLAIMED): the pid first, so a new claimant
    /// never finds a stale one.
    fn free(&self, slot: usize) {
        self.claimant(slot).store(0, SeqCst);
        self.state(slot).store(FREE, SeqCst);
    }

    /// Handler side: frees the slots whose claimant is gone (a child killed while it waited
    /// for an answer, or before it took one). Returns how many.
    pub fn free_abandoned(&self) -> usize {
        let mut freed = 0;
        for slot in 0..SLOTS {
            let state = self.state(slot).load(SeqCst);
            let pid = self.claimant(slot).load(SeqCst);
            // SERVING is this thread's own, and never seen here.
            if state == FREE || state == SERVING || pid == 0 || process::exists(pid as i32) {
                continue;
            }
            if self.state(slot).compare_exchange(state, CLAIMED, SeqCst, SeqCst).is_ok() {
                self.free(slot);
                freed += 1;
            }
        }
        freed
    }

    /// Handler side, at a child's FORK: writes the child's number into its mailbox through
    /// the child's uffd.
    ///
    /// # Errors
    /// The copy's (ESRCH: the child is gone already).
    pub fn introduce(&self, child: &Uffd, number: u64) -> Result<(), Error> {
        let mut page = [0u8; PAGE_SIZE];
        page[..8].copy_from_slice(&MAGIC.to_ne_bytes());
        page[8..16].copy_from_slice(&number.to_ne_bytes());
        child.copy(self.mailbox.addr(), &page, CopyMode::DONTWAKE).map(drop)
    }

    /// Handler side: serves every request waiting, `serve(child number, address, write,
    /// write-protect fault)` giving the answer, or `None` to leave the request for the next
    /// turn (an event is unread). Returns whether a request was left.
    pub fn serve(&self, mut serve: impl FnMut(u64, u64, bool, bool) -> Option<Answer>) -> bool {
        let mut left = false;
        for slot in 0..SLOTS {
            let state = self.state(slot);
            if state.compare_exchange(REQUESTED, SERVING, SeqCst, SeqCst).is_err() {
                continue;
            }
            let base = slot * SLOT_BYTES;
            let access = self.board.atomic_u32(base + 4).load(SeqCst);
            let number = self.board.atomic_u64(base + 8).load(SeqCst);
            let addr = self.board.atomic_u64(base + 16).load(SeqCst);
            let next = match serve(number, addr, access & 1 != 0, access & 2 != 0) {
                Some(Answer::Resolved) => RESOLVED,
                Some(Answer::NotMine) => NOT_MINE,
                Some(Answer::Failed | Answer::Unanswered) => FAILED,
                None => {
                    left = true;
                    REQUESTED
                }
            };
            state.store(next, SeqCst);
            if next != REQUESTED {
                process::futex_wake_all(state);
            }
        }
        left
    }

    /// Child side: forwards a fault at `addr` (a write-protect fault when `wp`) to the
    /// handler of process `owner`, woken by `wake` (false: it could not: the doorbell then),
    /// and waits for the answer.
    ///
    /// Context: a forked child's SIGBUS handler (no allocation, no lock; system calls only).
    pub fn request(
        &self,
        owner: i32,
        wake: impl Fn() -> bool,
        addr: u64,
        write: bool,
        wp: bool,
    ) -> Answer {
        let Some(number) = self.number() else { return Answer::Unanswered };
        let Some(slot) = self.claim(owner) else { return Answer::Unanswered };
        self.claimant(slot).store(process::getpid() as u32, SeqCst);
        let base = slot * SLOT_BYTES;
        self.board.atomic_u32(base + 4).store(u32::from(write) | u32::from(wp) << 1, SeqCst);
        self.board.atomic_u64(base + 8).store(number, SeqCst);
        self.board.atomic_u64(base + 16).store(addr, SeqCst);
        let state = self.state(slot);
        state.store(REQUESTED, SeqCst);
        if !wake() {
            self.ring();
        }
        let asked = Instant::now();
        let answer = loop {
            let now = spin_while_unanswered(state, asked);
            match now {
                RESOLVED => break Answer::Resolved,
                NOT_MINE => break Answer::NotMine,
                FAILED => break Answer::Failed,
                _ => {}
            }
            let owner_gone = !process::exists(owner);
            if now == REQUESTED && (owner_gone || asked.elapsed() >= PICKUP_MAX) {
                // Withdrawn, unless the handler picked it up just now.
                if state.compare_exchange(REQUESTED, CLAIMED, SeqCst, SeqCst).is_ok() {
                    self.free(slot);
                    return Answer::Unanswered;
                }
                continue;
            }
            if now == SERVING && owner_gone {
                // Left SERVING for good: the slot stays taken (the board dies with the owner).
                return Answer::Unanswered;
            }
            process::futex_wait_for(state, now, WAIT_STEP);
        };
        self.free(slot);
        answer
    }

    /// The child's number, from its mailbox once the handler has filled it.
    fn number(&self) -> Option<u64> {
        let start = Instant::now();
        while !mem::resident(self.mailbox.addr()).ok()? {
            if start.elapsed() >= MAILBOX_MAX {
                return None;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        (self.mailbox.load_u64(0) == MAGIC).then(|| self.mailbox.load_u64(8))
    }

    /// A free slot, claimed; waits while all are taken, as long as the owner lives.
    fn claim(&self, owner: i32) -> Option<usize> {
        let start = Instant::now();
        loop {
            for slot in 0..SLOTS {
                if self.state(slot).compare_exchange(FREE, CLAIMED, SeqCst, SeqCst).is_ok() {
                    return Some(slot);
                }
            }
            if start.elapsed() >= PICKUP_MAX || !process::exists(owner) {
                return None;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

impl Drop for Forward {
    /// Unregisters the mailbox and the doorbell first: a registered range's munmap would
    /// wait for the handler to read its UNMAP event, and the handler may be gone.
    fn drop(&mut self) {
        let _ = self.uffd.unregister(self.mailbox.range());
        let _ = self.uffd.unregister(self.doorbell.range());
    }
}
