//! Writeback from the compressed pool to the swap device, the engine's side of the kernel's
//! protocol (mm/zswap.c, `zswap_writeback_entry`): zswap picks cold entries and, for each,
//!
//! 1. asks us to *pin* the slot: we insert a locked folio into the swap cache for it (which
//!    pins the slot in the device only while a page table still refers to it). A swap-in
//!    in flight owns the slot's folio already: refused, zswap stops (the warm end). A freed
//!    slot: refused, zswap skips it.
//! 2. re-checks that its index still holds the same entry, decompresses it, and asks us to
//!    *write* the page: we copy it into the folio (a swap-in waiting on the pin maps it from
//!    there) and write it to the device;
//! 3. erases its entry if the write succeeded, and *unpins*: we unlock the folio (up to date
//!    if it holds the data, abandoned if zswap never gave it any — a waiter then reads the
//!    slot again, from wherever the data still is) and delete it from the swap cache,
//!    putting back the shadow it displaced.
//!
//! The pool's copy is erased only after the device holds the data, and the slot cannot be
//! freed and reused while pinned: nothing is lost, nothing stale is written.

use crate::engine::Core;
use crate::stats::Stats;
use crate::swap_cache::{AddOrGet, Folio, Unlock};
use crate::sync::Mutex;
use crate::workingset::Shadow;
use crate::PAGE_SIZE;
use slots::SwapEntry;
use std::collections::HashMap;
use std::sync::Arc;
use zswap::{WritebackPin, WritebackTarget};

/// One pinned slot: its folio, the shadow it displaced, and whether it holds data.
struct Pinned {
    entry: SwapEntry,
    folio: Arc<Folio>,
    shadow: Option<Shadow>,
    filled: bool,
}

/// The engine as zswap's writeback target, for one writeback call.
pub(crate) struct Target<'a> {
    core: &'a Core,
    pins: Mutex<HashMap<u64, Pinned>>,
}

impl<'a> Target<'a> {
    pub(crate) fn new(core: &'a Core) -> Self {
        Target { core, pins: Mutex::new(HashMap::new()) }
    }
}

impl WritebackTarget for Target<'_> {
    fn pin(&self, entry: SwapEntry) -> Option<WritebackPin> {
        let core = self.core;
        let device = &core.storage.device;
        let folio = Folio::new_locked(entry.offset(), 0);
        let pin = || device.try_pin_cache_range(entry, 1).is_ok();
        let shadow = match core.cache_folio(&folio, pin) {
            AddOrGet::Added(shadow) => shadow,
            AddOrGet::Exists(_) | AddOrGet::Stale | AddOrGet::Conflict => return None,
        };
        core.budget.charge_swapcache(PAGE_SIZE as u64);
        folio.charge();
        let token = entry.to_raw();
        let pinned = Pinned { entry, folio, shadow, filled: false };
        let previous = self.pins.lock().insert(token, pinned);
        assert!(previous.is_none(), "slot {entry:?} pinned twice by one writeback");
        Some(WritebackPin(token))
    }

    fn write(&self, pin: &WritebackPin, page: &[u8; PAGE_SIZE]) -> Result<(), String> {
        let (entry, folio) = {
            let mut pins = self.pins.lock();
            let pinned = pins.get_mut(&pin.0).expect("write of an unknown pin");
            pinned.filled = true;
            (pinned.entry, pinned.folio.clone())
        };
        folio.with_data_mut(|data| data.copy_from_slice(page));
        let c = &self.core.stats.counters;
        match self.core.storage.device.backend().write(entry.offset(), page) {
            Ok(()) => {
                Stats::add(&c.pswpout, 1);
                Ok(())
            }
            Err(error) => {
                Stats::add(&c.swpout_error, 1);
                Err(format!("writeback to slot {}: {error}", entry.offset()))
            }
        }
    }

    fn unpin(&self, pin: WritebackPin, written: bool) {
        let pinned = self.pins.lock().remove(&pin.0).expect("unpin of an unknown pin");
        pinned.folio.unlock(if pinned.filled {
            Unlock::Uptodate { zero: false }
        } else {
            Unlock::Abandoned
        });
        if written {
            Stats::add(&self.core.stats.counters.zswpwb, 1);
        }
        self.core.delete_folio(&pinned.folio, pinned.shadow);
    }
}
