//! The table of registered descriptors and its protocols (the crate essay): placement,
//! the users' guard, moves and ranges of closes.
//!
//! ```text
//!   slot: state  FREE -> PLACING -> LIVE <-> MOVING        LIVE -> DYING -> FREE
//!         current (epoch << 32 | number)   transient (the low number given up, or -1)
//!         users[epoch & 1]   identity (dev, ino)   kind   lost
//! ```
//!
//! Who waits for whom: a program thread (a move, a range of closes) may wait for an engine
//! thread (a placement, a guard, a drop), whose waits are a few system calls long; an engine
//! thread never waits for a program thread, which may be stopped on a fault only the engine
//! can serve. So a drop that meets a move leaves the close to the mover (`drop_pending`).

#![allow(unsafe_code)]

use crate::keeper;
use crate::sys::{self, Errno, Identity};
use crate::{Kind, STATS};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize};
use std::sync::Mutex;

/// How many descriptors the registry holds (a handful of the engine's, plus one userfaultfd
/// per forked child alive); past it a descriptor is kept unregistered ([`crate::Fd`]).
pub const SLOTS: usize = 1024;

/// The highest number a placement aims under: the soft `RLIMIT_NOFILE`, at most this. A
/// process whose soft limit is a million would otherwise carry a descriptor table of 8 MiB,
/// which every fork copies (the kernel copies the table up to its highest open number).
pub const CEILING: i32 = 1 << 16;
/// The width of the band a placement tries first, just under the top, and of each step down
/// when it is full.
pub const STEP: i32 = 64;
/// The lowest base a placement falls back to: below, the numbers programs pick by hand
/// (shells keep theirs at 10 and up, or 3 to 9 for a script's redirections).
pub const MIN_BASE: i32 = 10;

/// Spins of a move's wait for the guards of the old number before it yields (a few
/// microseconds: a guard is one system call).
const SPINS: u32 = 2000;

pub(crate) const FREE: u32 = 0;
pub(crate) const PLACING: u32 = 1;
pub(crate) const LIVE: u32 = 2;
pub(crate) const MOVING: u32 = 3;
pub(crate) const DYING: u32 = 4;

/// One registered descriptor (module essay).
pub(crate) struct Slot {
    pub(crate) state: AtomicU32,
    /// Its index in the table (the keeper's entry for it).
    index: AtomicUsize,
    /// The number, with the epoch of the last move above it.
    current: AtomicU64,
    /// A number being given up by a placement (module essay), or -1.
    transient: AtomicI32,
    /// Guards in progress, by the parity of the epoch they entered under.
    users: [AtomicU32; 2],
    dev: AtomicU64,
    ino: AtomicU64,
    /// What the descriptor is (for messages; read on slow paths only).
    kind: Mutex<Option<&'static Kind>>,
    /// The descriptor was found closed or replaced behind the registry's back.
    lost: AtomicBool,
    /// Its owner dropped it while a program thread moved it: the mover closes it.
    drop_pending: AtomicBool,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            state: AtomicU32::new(FREE),
            index: AtomicUsize::new(0),
            current: AtomicU64::new(pack(0, -1)),
            transient: AtomicI32::new(-1),
            users: [AtomicU32::new(0), AtomicU32::new(0)],
            dev: AtomicU64::new(0),
            ino: AtomicU64::new(0),
            kind: Mutex::new(None),
            lost: AtomicBool::new(false),
            drop_pending: AtomicBool::new(false),
        }
    }

    /// The number now (unguarded).
    pub(crate) fn number(&self) -> i32 {
        self.current.load(SeqCst) as u32 as i32
    }

    pub(crate) fn identity(&self) -> Identity {
        Identity { dev: self.dev.load(SeqCst), ino: self.ino.load(SeqCst) }
    }

    pub(crate) fn kind(&self) -> Option<&'static Kind> {
        *self.kind.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set_kind(&self, kind: Option<&'static Kind>) {
        *self.kind.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = kind;
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(SeqCst)
    }

    /// Marks the descriptor lost: the first time, one line on stderr and a count.
    pub(crate) fn mark_lost(&self, number: i32) {
        if self.lost.swap(true, SeqCst) {
            return;
        }
        STATS.lost.fetch_add(1, SeqCst);
        crate::say_lost(self.kind(), number);
    }

    /// Enters a guard (module essay): the number to use until [`Slot::exit`] with the
    /// parity returned.
    pub(crate) fn enter(&self) -> (i32, usize) {
        loop {
            let cur = self.current.load(SeqCst);
            let parity = ((cur >> 32) & 1) as usize;
            self.users[parity].fetch_add(1, SeqCst);
            if self.current.load(SeqCst) == cur {
                return (cur as u32 as i32, parity);
            }
            self.users[parity].fetch_sub(1, SeqCst);
        }
    }

    pub(crate) fn exit(&self, parity: usize) {
        self.users[parity].fetch_sub(1, SeqCst);
    }

    /// Runs `f` with the number inside a guard (module essay).
    pub(crate) fn with<R>(&self, f: impl FnOnce(std::os::fd::BorrowedFd<'_>) -> R) -> R {
        let (number, parity) = self.enter();
        let _guard = Guard { slot: self, parity };
        // SAFETY: the guard keeps `number` this slot's, and open, until it drops: a move
        // waits for it, and the owner's drop needs the `Fd`, which is borrowed meanwhile.
        unsafe { sys::with_borrowed(number, f) }
    }

    /// Publishes `number` as the descriptor's, then waits until no guard still uses the
    /// old one (each a system call long).
    fn flip(&self, number: i32) {
        // Lowered first: a close of the new number must find it ours from the moment it is.
        LOWEST.fetch_min(number, SeqCst);
        let cur = self.current.load(SeqCst);
        let epoch = ((cur >> 32) as u32).wrapping_add(1);
        self.current.store(pack(epoch, number), SeqCst);
        let old = ((cur >> 32) & 1) as usize;
        let mut spins = 0u32;
        while self.users[old].load(SeqCst) != 0 {
            // A guard is one system call: spin about as long, then give the CPU to it.
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                sys::yield_now();
            }
        }
        GENERATION.fetch_add(1, SeqCst);
    }

    /// Closes the descriptor and frees the slot (its state is DYING, no guard in it).
    fn close_and_free(&self) {
        while self.users[0].load(SeqCst) + self.users[1].load(SeqCst) != 0 {
            sys::yield_now();
        }
        if self.kept() {
            keeper::release(self.index.load(SeqCst));
        }
        let _ = sys::close(self.number());
        self.set_kind(None);
        self.lost.store(false, SeqCst);
        self.drop_pending.store(false, SeqCst);
        self.current.store(pack(0, -1), SeqCst);
        self.state.store(FREE, SeqCst);
    }

    /// Whether the keeper holds a second reference to it.
    fn kept(&self) -> bool {
        self.kind().is_some_and(|kind| kind.keep) && keeper::running()
    }

    /// Found closed or replaced at `number` (crate essay): taken back from the keeper and
    /// placed high again, or else marked lost for good. Returns whether the caller may try
    /// again: taken back, or changed by another thread meanwhile. False (and not marked)
    /// while another thread moves it or uses the keeper: a later try may succeed.
    ///
    /// Context: outside any guard of this slot (it waits for them); waits for no program
    /// thread.
    pub(crate) fn repair(&self, number: i32) -> bool {
        if !self.kept() {
            self.mark_lost(number);
            return false;
        }
        if self.state.compare_exchange(LIVE, MOVING, SeqCst, SeqCst).is_err() {
            return false;
        }
        if self.number() != number || self.is_lost() {
            let again = !self.is_lost();
            finish_move(self);
            return again;
        }
        PLACING_NOW.fetch_add(1, SeqCst);
        let installed = keeper::install(self.index.load(SeqCst));
        let taken = installed.map(|low| self.take_back(low));
        PLACING_NOW.fetch_sub(1, SeqCst);
        finish_move(self);
        match taken {
            Ok(Some(new)) => {
                STATS.recovered.fetch_add(1, SeqCst);
                crate::say_recovered(self.kind(), number, new);
                true
            }
            Err(libc::EBUSY) => false,
            Ok(None) | Err(_) => {
                self.mark_lost(number);
                false
            }
        }
    }

    /// Makes `low`, the keeper's copy just installed, this slot's number, placed high
    /// (MOVING held); the new number, or `None` if it is not this slot's file.
    fn take_back(&self, low: i32) -> Option<i32> {
        self.transient.store(low, SeqCst);
        TRANSIENTS.fetch_add(1, SeqCst);
        let high = dup_high(low).ok().filter(|&h| sys::identity(h) == Ok(self.identity()));
        let number = match high {
            Some(high) => {
                let _ = sys::close(low);
                Some(high)
            }
            None => (sys::identity(low) == Ok(self.identity())).then_some(low),
        };
        if let Some(number) = number {
            self.flip(number);
        }
        self.transient.store(-1, SeqCst);
        TRANSIENTS.fetch_sub(1, SeqCst);
        number
    }

    /// Whether `n` is this slot's number or the number it is giving up.
    fn holds(&self, n: i32) -> bool {
        self.state.load(SeqCst) != FREE && (self.number() == n || self.transient.load(SeqCst) == n)
    }
}

/// A guard in progress ([`Slot::with`]): left on drop.
struct Guard<'a> {
    slot: &'a Slot,
    parity: usize,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        self.slot.exit(self.parity);
    }
}

const fn pack(epoch: u32, number: i32) -> u64 {
    (epoch as u64) << 32 | number as u32 as u64
}

static TABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];
/// Slots ever claimed (the scans stop there).
static USED: AtomicUsize = AtomicUsize::new(0);
/// The lowest number ever registered (a close below it, with no transient, is not ours).
static LOWEST: AtomicI32 = AtomicI32::new(i32::MAX);
/// Placements giving up a low number now.
static TRANSIENTS: AtomicU32 = AtomicU32::new(0);
/// Placements in progress (engine threads).
static PLACING_NOW: AtomicU32 = AtomicU32::new(0);
/// Ranges of closes in progress (program threads).
static CLOSING: AtomicU32 = AtomicU32::new(0);
/// The band placements land in: `[BAND_LOW, BAND_TOP)`.
static BAND_LOW: AtomicI32 = AtomicI32::new(i32::MAX);
static BAND_TOP: AtomicI32 = AtomicI32::new(0);
/// Bumped by every move (a poll set of raw numbers is rebuilt when it changes).
pub(crate) static GENERATION: AtomicU64 = AtomicU64::new(0);
/// The process the registry belongs to (a forked or vforked child's calls pass by).
static OWNER: AtomicI32 = AtomicI32::new(0);
/// The program thread doing a move or a range of closes (0: none): the thread id, so a
/// signal handler that interrupted it and closes too does not wait for itself.
static RANGE: AtomicI32 = AtomicI32::new(0);

/// Whether the calling process is the one the registry belongs to.
pub(crate) fn in_owner() -> bool {
    OWNER.load(SeqCst) == sys::getpid()
}

/// The slot holding `n` (its number or its transient), if any.
pub(crate) fn find(n: i32) -> Option<&'static Slot> {
    if n < LOWEST.load(SeqCst) && TRANSIENTS.load(SeqCst) == 0 {
        return None;
    }
    TABLE[..USED.load(SeqCst)].iter().find(|slot| slot.holds(n))
}

/// Whether a number at least `min` may be ours (a cheap test before [`find`]).
pub(crate) fn may_hold_from(min: i32) -> bool {
    TRANSIENTS.load(SeqCst) != 0
        || USED.load(SeqCst) != 0 && {
            let highest = TABLE[..USED.load(SeqCst)]
                .iter()
                .filter(|s| s.state.load(SeqCst) != FREE)
                .map(Slot::number)
                .max();
            highest.is_some_and(|h| h >= min)
        }
}

/// A free slot for a descriptor of `kind`, PLACING; `None` when the table is full.
pub(crate) fn claim(kind: &'static Kind) -> Option<&'static Slot> {
    let _ = OWNER.compare_exchange(0, sys::getpid(), SeqCst, SeqCst);
    for (index, slot) in TABLE.iter().enumerate() {
        if slot.state.compare_exchange(FREE, PLACING, SeqCst, SeqCst).is_ok() {
            USED.fetch_max(index + 1, SeqCst);
            slot.index.store(index, SeqCst);
            slot.set_kind(Some(kind));
            return Some(slot);
        }
    }
    None
}

/// The top of the band: the soft limit when first asked, at most [`CEILING`].
fn band_top() -> i32 {
    let top = BAND_TOP.load(SeqCst);
    if top != 0 {
        return top;
    }
    let soft = sys::nofile_soft().min(CEILING as u64) as i32;
    let _ = BAND_TOP.compare_exchange(0, soft.max(4), SeqCst, SeqCst);
    BAND_TOP.load(SeqCst)
}

/// A copy of `fd` in the band (module essay), falling back a [`STEP`] at a time down to
/// [`MIN_BASE`]; never lowers the band while a range of closes runs (it could close the
/// copy): EBUSY then.
fn dup_high(fd: i32) -> Result<i32, Errno> {
    let top = band_top();
    let floor = MIN_BASE.min(top / 2).max(3);
    let mut base = (top - STEP).max(floor);
    loop {
        if base < BAND_LOW.load(SeqCst) {
            if CLOSING.load(SeqCst) > 0 {
                return Err(libc::EBUSY);
            }
            BAND_LOW.fetch_min(base, SeqCst);
        }
        match sys::dup_at_least(fd, base, true) {
            Ok(high) if high < top => return Ok(high),
            // Above the band (the soft limit was raised since): lower.
            Ok(high) => drop(sys::close(high)),
            // Nothing free from `base` up (EMFILE), or `base` past a lowered limit.
            Err(libc::EMFILE | libc::EINVAL) => {}
            Err(errno) => return Err(errno),
        }
        if base == floor {
            return Err(libc::EMFILE);
        }
        base = (base - STEP).max(floor);
    }
}

/// Registers `low` (a descriptor this process just made, now the slot's) in `slot` (from
/// [`claim`]) and moves it into the band. Context: an engine thread or set-up; waits for no
/// one.
pub(crate) fn place(slot: &Slot, low: i32) {
    slot.current.store(pack(0, low), SeqCst);
    slot.transient.store(low, SeqCst);
    TRANSIENTS.fetch_add(1, SeqCst);
    PLACING_NOW.fetch_add(1, SeqCst);
    let high = dup_high(low);
    let number = *high.as_ref().unwrap_or(&low);
    let identity = sys::identity(number).unwrap_or_default();
    slot.dev.store(identity.dev, SeqCst);
    slot.ino.store(identity.ino, SeqCst);
    slot.current.store(pack(0, number), SeqCst);
    LOWEST.fetch_min(number, SeqCst);
    slot.state.store(LIVE, SeqCst);
    if slot.kept() {
        keeper::keep(slot.index.load(SeqCst), number);
    }
    PLACING_NOW.fetch_sub(1, SeqCst);
    if high.is_ok() {
        let _ = sys::close(low);
    } else {
        STATS.placed_low.fetch_add(1, SeqCst);
    }
    slot.transient.store(-1, SeqCst);
    TRANSIENTS.fetch_sub(1, SeqCst);
    STATS.placed.fetch_add(1, SeqCst);
}

/// The owner gives the descriptor up (module essay: a move in progress closes it instead).
pub(crate) fn drop_slot(slot: &Slot) {
    slot.drop_pending.store(true, SeqCst);
    if slot.state.compare_exchange(LIVE, DYING, SeqCst, SeqCst).is_ok() {
        slot.close_and_free();
    }
}

/// The program thread's hold on moves and ranges of closes (module essay); reentrant for
/// a signal handler on the thread that holds it.
pub(crate) struct RangeLock {
    held: bool,
}

impl RangeLock {
    pub(crate) fn take() -> RangeLock {
        let tid = sys::gettid();
        if RANGE.load(SeqCst) == tid {
            return RangeLock { held: false };
        }
        while RANGE.compare_exchange(0, tid, SeqCst, SeqCst).is_err() {
            sys::yield_now();
        }
        RangeLock { held: true }
    }
}

impl Drop for RangeLock {
    fn drop(&mut self) {
        if self.held {
            RANGE.store(0, SeqCst);
        }
    }
}

/// Moves the registered descriptor at `n` out of the way of a call that puts a file at
/// `n` (program side, [`RangeLock`] held): `Ok(true)` when one was moved (`n` holds its
/// stale copy until the caller's call replaces it), `Ok(false)` when `n` is not ours.
///
/// # Errors
/// No free number anywhere for it (EMFILE): the caller's call fails so.
pub(crate) fn make_way(n: i32) -> Result<bool, Errno> {
    loop {
        let Some(slot) = find(n) else { return Ok(false) };
        if slot.transient.load(SeqCst) == n {
            sys::yield_now(); // a placement gives it up in a moment
            continue;
        }
        if slot.state.compare_exchange(LIVE, MOVING, SeqCst, SeqCst).is_err() {
            sys::yield_now(); // being placed or closed by its owner
            continue;
        }
        if slot.number() != n {
            finish_move(slot);
            continue;
        }
        let moved = dup_high(n).map(|high| {
            if sys::identity(high) != Ok(slot.identity()) {
                slot.mark_lost(n); // replaced before: a direct system call
            }
            slot.flip(high);
            STATS.moves.fetch_add(1, SeqCst);
            true
        });
        finish_move(slot);
        return moved;
    }
}

/// Ends a move: LIVE again, unless its owner dropped it meanwhile (then closed here).
fn finish_move(slot: &Slot) {
    slot.state.store(LIVE, SeqCst);
    if slot.drop_pending.load(SeqCst)
        && slot.state.compare_exchange(LIVE, DYING, SeqCst, SeqCst).is_ok()
    {
        slot.close_and_free();
    }
}

/// The numbers in `[first, last]` the registry holds (numbers and transients), sorted,
/// into `out`; how many.
fn ours_in(first: u32, last: u32, out: &mut [u32; SLOTS * 2]) -> usize {
    let mut n = 0;
    for slot in &TABLE[..USED.load(SeqCst)] {
        if slot.state.load(SeqCst) == FREE {
            continue;
        }
        for number in [slot.number(), slot.transient.load(SeqCst)] {
            if number >= 0 && (first..=last).contains(&(number as u32)) && n < out.len() {
                out[n] = number as u32;
                n += 1;
            }
        }
    }
    out[..n].sort_unstable();
    n
}

/// The lowest number at least `min` the registry holds.
pub(crate) fn lowest_from(min: i32) -> Option<i32> {
    let mut ours = [0u32; SLOTS * 2];
    let n = ours_in(min.max(0) as u32, u32::MAX, &mut ours);
    (n > 0).then(|| ours[0] as i32)
}

/// Closes every descriptor in `[first, last]` but the registry's (program side: the
/// program's `closefrom` and `close_range`). Below and above the band, by `close_range`
/// over the gaps between ours; inside it one number at a time, each open one closed once no
/// placement is in flight and it is not ours (a placement may take a free number there at
/// any moment; an open one it cannot take).
pub(crate) fn close_range_around(first: u32, last: u32, flags: u32) {
    let _lock = RangeLock::take();
    CLOSING.fetch_add(1, SeqCst);
    while PLACING_NOW.load(SeqCst) > 0 {
        sys::yield_now();
    }
    let mut ours = [0u32; SLOTS * 2];
    let n = ours_in(first, last, &mut ours);
    let mut at = u64::from(first);
    for &number in &ours[..n] {
        if u64::from(number) > at {
            close_gap(at, u64::from(number) - 1, flags);
        }
        at = at.max(u64::from(number) + 1);
    }
    if at <= u64::from(last) {
        close_gap(at, u64::from(last), flags);
    }
    CLOSING.fetch_sub(1, SeqCst);
    STATS.ranges_closed.fetch_add(1, SeqCst);
}

fn close_gap(first: u64, last: u64, flags: u32) {
    let band_low = u64::from(BAND_LOW.load(SeqCst).max(0) as u32);
    let band_top = u64::from(BAND_TOP.load(SeqCst).max(0) as u32);
    let (band_low, band_top) =
        if band_top == 0 { (u64::MAX, u64::MAX) } else { (band_low, band_top) };
    let range = |a: u64, b: u64| {
        if a <= b {
            let _ = sys::close_range(a as u32, b.min(u64::from(u32::MAX)) as u32, flags);
        }
    };
    range(first, last.min(band_low.saturating_sub(1)));
    for number in first.max(band_low)..=last.min(band_top.saturating_sub(1)) {
        let number = number as i32;
        if !sys::is_open(number) {
            continue;
        }
        while PLACING_NOW.load(SeqCst) > 0 {
            sys::yield_now();
        }
        if find(number).is_none() {
            let _ = sys::close_range(number as u32, number as u32, flags);
        }
    }
    range(first.max(band_top), last);
}
