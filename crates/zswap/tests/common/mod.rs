//! A stand-in for the engine around one pool: a swap device as a map of slots, with the
//! swap cache's pin per slot, and the engine's swap-out / swap-in / free paths as the
//! contract describes them (store and invalidate of one slot never at once; a load or a
//! writeback of a slot only while it is pinned; invalidate with the "cluster lock" held).
//!
//! Every test file uses it, not all of every part.
#![allow(dead_code)]

use parking_lot::Mutex;
use slots::{SwapEntry, SwapType};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use zswap::compress::{CompressorConfig, PAGE_SIZE};
use zswap::corpus::{fill_page, PageKind, SplitMix64};
use zswap::{Reject, WritebackPin, WritebackTarget, Zswap, ZswapConfig};

pub type Page = [u8; PAGE_SIZE];

/// A test's hook on a slot.
pub type SlotHook = Mutex<Option<Box<dyn Fn(SwapEntry) + Send + Sync>>>;

/// Slot `offset` of device type 0.
pub fn slot(offset: u64) -> SwapEntry {
    SwapEntry::new(SwapType::new(0).expect("type 0"), offset)
}

/// A page of `kind` from `seed`.
pub fn page(kind: PageKind, seed: u64) -> Box<Page> {
    let mut page = Box::new([0u8; PAGE_SIZE]);
    fill_page(kind, &mut SplitMix64::new(seed), &mut page);
    page
}

/// A compressible page (text) from `seed`.
pub fn text_page(seed: u64) -> Box<Page> {
    page(PageKind::Text, seed)
}

/// A configuration over `budget_bytes` with compressor `name`.
pub fn config(name: &str, budget_bytes: u64) -> ZswapConfig {
    let kind = name.parse().expect("compressor name");
    ZswapConfig::new(CompressorConfig::new(kind), budget_bytes)
}

#[derive(Default)]
struct SlotState {
    allocated: bool,
    pinned: bool,
    data: Option<Box<Page>>,
}

/// The swap device and its swap-cache pins.
#[derive(Default)]
pub struct Device {
    /// The "cluster lock": every slot's state.
    slots: Mutex<HashMap<SwapEntry, SlotState>>,
    next_pin: AtomicU64,
    pins: Mutex<HashMap<u64, SwapEntry>>,
    /// Make every device write fail.
    pub fail_writes: AtomicBool,
    /// Fail one device write in this many (0: never), by a counter.
    pub fail_one_write_in: AtomicU64,
    writes: AtomicU64,
    /// Called inside `pin` after pinning (tests that play a racer).
    pub on_pin: SlotHook,
    /// Called first thing in `pin`, with no lock held (tests that free a slot just then).
    pub before_pin: SlotHook,
    /// Called first thing in `write`, with no lock held (tests that play a racer after
    /// writeback copied the entry out).
    pub on_write: SlotHook,
}

impl Device {
    pub fn new() -> Arc<Self> {
        Arc::new(Device::default())
    }

    /// Allocates `entry` (the slot must be free).
    pub fn alloc(&self, entry: SwapEntry) {
        let mut slots = self.slots.lock();
        let state = slots.entry(entry).or_default();
        assert!(!state.allocated, "{entry:?} allocated twice");
        state.allocated = true;
    }

    /// Pins the slot for a swap-out or swap-in, waiting while writeback holds it.
    pub fn pin_wait(&self, entry: SwapEntry) {
        loop {
            {
                let mut slots = self.slots.lock();
                let state = slots.entry(entry).or_default();
                assert!(state.allocated, "{entry:?} pinned while free");
                if !state.pinned {
                    state.pinned = true;
                    return;
                }
            }
            std::thread::yield_now();
        }
    }

    pub fn unpin_slot(&self, entry: SwapEntry) {
        let mut slots = self.slots.lock();
        let state = slots.get_mut(&entry).expect("slot");
        assert!(state.pinned);
        state.pinned = false;
    }

    /// The engine's swap-out of one page: pin, offer to the pool, write to the device if
    /// the pool refused, unpin.
    pub fn swap_out(&self, zswap: &Zswap, entry: SwapEntry, page: &Page) -> Result<(), Reject> {
        self.pin_wait(entry);
        let result = zswap.store(entry, page);
        if result.is_err() {
            let mut slots = self.slots.lock();
            slots.get_mut(&entry).expect("slot").data = Some(Box::new(*page));
        }
        self.unpin_slot(entry);
        result
    }

    /// The engine's swap-in of one page: pin, load from the pool or else the device.
    /// `Err` for a decompression failure.
    pub fn swap_in(&self, zswap: &Zswap, entry: SwapEntry) -> Result<Box<Page>, zswap::Error> {
        self.pin_wait(entry);
        let mut page = Box::new([0u8; PAGE_SIZE]);
        let result = zswap.load(entry, &mut page);
        let result = match result {
            Ok(true) => Ok(page),
            Ok(false) => {
                let slots = self.slots.lock();
                let data = slots.get(&entry).and_then(|s| s.data.clone());
                Ok(data.unwrap_or_else(|| panic!("{entry:?}: neither in the pool nor on disk")))
            }
            Err(error) => Err(error),
        };
        self.unpin_slot(entry);
        result
    }

    /// Frees the slot: waits until it is unpinned, then with the slot map locked (the
    /// cluster lock) drops the device copy and invalidates the pool's.
    pub fn free(&self, zswap: &Zswap, entry: SwapEntry) {
        loop {
            {
                let mut slots = self.slots.lock();
                let state = slots.get_mut(&entry).expect("slot");
                assert!(state.allocated, "{entry:?} freed twice");
                if !state.pinned {
                    state.allocated = false;
                    state.data = None;
                    zswap.invalidate(entry);
                    return;
                }
            }
            std::thread::yield_now();
        }
    }

    /// Marks the slot free without invalidating the pool yet (the moment inside the
    /// device's free path before its hook runs).
    pub fn mark_free(&self, entry: SwapEntry) {
        let mut slots = self.slots.lock();
        slots.get_mut(&entry).expect("slot").allocated = false;
    }

    /// The device's copy of a slot.
    pub fn data(&self, entry: SwapEntry) -> Option<Box<Page>> {
        self.slots.lock().get(&entry).and_then(|s| s.data.clone())
    }

    /// Device writes done.
    pub fn writes(&self) -> u64 {
        self.writes.load(Relaxed)
    }

    /// Pins currently held by writeback.
    pub fn pins_held(&self) -> usize {
        self.pins.lock().len()
    }
}

impl WritebackTarget for Device {
    fn pin(&self, entry: SwapEntry) -> Option<WritebackPin> {
        if let Some(hook) = self.before_pin.lock().as_ref() {
            hook(entry);
        }
        {
            let mut slots = self.slots.lock();
            let state = slots.get_mut(&entry)?;
            if !state.allocated || state.pinned {
                return None;
            }
            state.pinned = true;
        }
        let id = self.next_pin.fetch_add(1, Relaxed);
        self.pins.lock().insert(id, entry);
        if let Some(hook) = self.on_pin.lock().as_ref() {
            hook(entry);
        }
        Some(WritebackPin(id))
    }

    fn write(&self, pin: &WritebackPin, page: &Page) -> Result<(), String> {
        let entry = *self.pins.lock().get(&pin.0).expect("pin");
        if let Some(hook) = self.on_write.lock().as_ref() {
            hook(entry);
        }
        let n = self.writes.fetch_add(1, Relaxed) + 1;
        let one_in = self.fail_one_write_in.load(Relaxed);
        if self.fail_writes.load(Relaxed) || (one_in != 0 && n.is_multiple_of(one_in)) {
            return Err(format!("injected write failure at {entry:?}"));
        }
        let mut slots = self.slots.lock();
        let state = slots.get_mut(&entry).expect("slot");
        assert!(state.allocated && state.pinned, "{entry:?} written while not pinned");
        state.data = Some(Box::new(*page));
        Ok(())
    }

    fn unpin(&self, pin: WritebackPin, _written: bool) {
        let entry = self.pins.lock().remove(&pin.0).expect("pin");
        self.unpin_slot(entry);
    }
}

/// Clears the referenced bit of every entry of a pool holding `entries` (even) entries,
/// writing nothing back: `entries` looks at the LRU, each a second chance.
pub fn clear_referenced(zswap: &Zswap, device: &Device, entries: u64) {
    assert!(entries.is_multiple_of(2));
    let spared = zswap.stats().writeback_second_chance;
    assert_eq!(zswap.writeback(device, entries / 2), 0);
    assert_eq!(zswap.stats().writeback_second_chance, spared + entries);
}
