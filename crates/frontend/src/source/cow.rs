//! Copy-on-write breaks: pages a MOVE refused (EBUSY: shared with a forked child, or
//! pinned) are queued here and broken by a thread that holds no engine lock (the source's
//! essay, **Take refused**), so that reclaim can take them the next time it meets them.
//!
//! Lock order: `cow_breaking`, then `cow`, a leaf.

use super::{add, lock, UffdSource, COW_QUEUE_MAX};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::PoisonError;
use uffd::types::Range;

impl UffdSource {
    /// Queues a range MOVE refused with EBUSY for a copy-on-write break.
    pub(super) fn queue_cow(&self, addr: u64, len: u64) {
        let mut queue = lock(&self.cow);
        if queue.contains(&(addr, len)) {
            return;
        }
        if queue.len() >= COW_QUEUE_MAX {
            add(&self.counters.cow_queue_full, 1);
            return;
        }
        queue.push_back((addr, len));
        add(&self.counters.cow_queued, 1);
        self.cow_ready.notify_one();
    }

    /// Breaks the copy-on-write sharing of every queued range starting in `[addr, addr +
    /// len)` (all queued ranges for `None`), after any break the breaker thread has in
    /// flight, with `MADV_POPULATE_WRITE`: it takes the write
    /// fault without writing, so the data is unchanged, and on a page that went missing
    /// meanwhile it faults through the uffd like an access (so the reader must be running);
    /// on an unmapped range it fails quietly (ENOMEM) where a user-space write would be
    /// SIGSEGV. Returns ranges broken.
    ///
    /// Context: the caller holds no engine lock and is not the uffd's reader (a fault here
    /// waits for the reader). May block on such a fault.
    pub fn break_cow_pending(&self, range: Option<(u64, u64)>) -> usize {
        let _breaking = lock(&self.cow_breaking);
        let ranges: Vec<(u64, u64)> = {
            let mut queue = lock(&self.cow);
            let (addr, len) = range.unwrap_or((0, u64::MAX));
            let end = addr.saturating_add(len);
            let (mine, rest): (Vec<_>, Vec<_>) =
                queue.drain(..).partition(|(a, _)| *a >= addr && *a < end);
            queue.extend(rest);
            mine
        };
        for &(addr, len) in &ranges {
            self.populate_write(addr, len);
        }
        ranges.len()
    }

    /// Parks the breaker thread for a fork, once its break in flight is done (whose
    /// faults are still served: call it before the handler's fork mode): a lock of the
    /// source held by it at the fork would stay locked in the child.
    /// [`UffdSource::resume_cow`] lets it run again.
    pub fn pause_cow(&self) {
        self.cow_paused.store(true, SeqCst);
        self.wake_cow_breaker();
        while !self.cow_parked.load(SeqCst) {
            std::thread::yield_now();
        }
    }

    /// Lets the breaker run again after [`UffdSource::pause_cow`].
    pub fn resume_cow(&self) {
        self.cow_paused.store(false, SeqCst);
        self.wake_cow_breaker();
    }

    /// Waits for a queued COW break or for `stop`, then does one break (the breaker
    /// thread's loop body). Returns ranges broken. No timeout: whoever sets `stop` calls
    /// [`UffdSource::wake_cow_breaker`], which notifies under the queue's lock, and `stop`
    /// is read under it, so the wake-up cannot fall between the check and the wait.
    pub fn break_cow_wait(&self, stop: &std::sync::atomic::AtomicBool) -> usize {
        if self.cow_paused.load(SeqCst) {
            self.cow_parked.store(true, SeqCst);
            while self.cow_paused.load(SeqCst) && !stop.load(SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            self.cow_parked.store(false, SeqCst);
            return 0;
        }
        {
            let queue = lock(&self.cow);
            let _ready = self
                .cow_ready
                .wait_while(queue, |q| {
                    q.is_empty() && !stop.load(SeqCst) && !self.cow_paused.load(SeqCst)
                })
                .unwrap_or_else(PoisonError::into_inner);
        }
        if self.cow_paused.load(SeqCst) {
            return 0;
        }
        // Held from the pop to the end of the break: a `break_cow_pending` caller that finds
        // the queue empty knows no break of its range is still in flight.
        let _breaking = lock(&self.cow_breaking);
        let range = lock(&self.cow).pop_front();
        match range {
            Some((addr, len)) => {
                self.populate_write(addr, len);
                1
            }
            None => 0,
        }
    }

    /// Wakes a thread in [`UffdSource::break_cow_wait`] (to stop it: set its flag first).
    pub fn wake_cow_breaker(&self) {
        let _queue = lock(&self.cow);
        self.cow_ready.notify_all();
    }

    fn populate_write(&self, addr: u64, len: u64) {
        let Ok(range) = Range::new(addr as usize, len as usize) else { return };
        if uffd::mm::populate_write(range).is_ok() {
            add(&self.counters.cow_broken, range.page_count() as u64);
        }
    }
}
