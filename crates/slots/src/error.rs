//! The one error type of the slots crate. Setup errors say what was wrong with the
//! request; slot-operation errors carry the entry, with the kernel's errno in mind
//! (`SlotFree` is `-ENOENT`, `CacheBusy` is `-EEXIST`, `CountOverflow` is `-EINVAL`).

use crate::SwapEntry;
use std::fmt;

/// Everything the swap device layer can refuse or fail at.
#[derive(Debug)]
pub enum Error {
    /// Setup: a device smaller than one cluster.
    TooSmall {
        /// Slots offered (the backend's pages).
        nr_slots: u64,
        /// At least this many.
        min_slots: u64,
    },
    /// Setup: a device larger than the allocator's bound.
    TooLarge {
        /// Slots offered.
        nr_slots: u64,
        /// At most this many.
        max_slots: u64,
    },
    /// Setup: all `MAX_SWAPFILES` device types are in use.
    TooManyDevices {
        /// The limit.
        max: usize,
    },
    /// No 2^order aligned free slots on the device (for order > 0 the caller splits).
    NoSpace {
        /// The order asked for.
        order: u32,
    },
    /// An order above `MAX_ORDER`.
    BadOrder {
        /// The order asked for.
        order: u32,
    },
    /// The entry names another device.
    WrongDevice {
        /// The entry.
        entry: SwapEntry,
    },
    /// The entry (or `nr` slots from it) lies outside the device, or `nr` is zero.
    OutOfRange {
        /// First slot.
        entry: SwapEntry,
        /// Number of slots.
        nr: u32,
    },
    /// The `nr` slots cross a cluster boundary (a folio's slots never do).
    CrossesCluster {
        /// First slot.
        entry: SwapEntry,
        /// Number of slots.
        nr: u32,
    },
    /// The slot is free (kernel: `-ENOENT`).
    SlotFree {
        /// The slot.
        entry: SwapEntry,
    },
    /// The slot is the header or past the end of the device (`SWAP_MAP_BAD`).
    BadSlot {
        /// The slot.
        entry: SwapEntry,
    },
    /// The slot is cache-pinned already: a swap-in is in flight (kernel: `-EEXIST`).
    CacheBusy {
        /// The slot.
        entry: SwapEntry,
    },
    /// `put_cache` on a slot that is not cache-pinned.
    NotCached {
        /// The slot.
        entry: SwapEntry,
    },
    /// `put` on a slot whose swap count is zero.
    CountUnderflow {
        /// The slot.
        entry: SwapEntry,
    },
    /// `dup` past `u32::MAX` references (kernel: `-EINVAL`).
    CountOverflow {
        /// The slot.
        entry: SwapEntry,
    },
    /// The backend failed (a discard of a freed cluster). The slot operation that
    /// triggered it has completed; only the storage was not given back.
    Backend(backend::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::TooSmall { nr_slots, min_slots } => write!(
                f,
                "swap device of {nr_slots} slots is smaller than one cluster ({min_slots} slots)"
            ),
            Error::TooLarge { nr_slots, max_slots } => {
                write!(f, "swap device of {nr_slots} slots exceeds the limit of {max_slots}")
            }
            Error::TooManyDevices { max } => write!(f, "too many swap devices (at most {max})"),
            Error::NoSpace { order } => write!(f, "no free order-{order} slots on the device"),
            Error::BadOrder { order } => write!(f, "order {order} is larger than a cluster"),
            Error::WrongDevice { entry } => write!(f, "{entry:?} belongs to another device"),
            Error::OutOfRange { entry, nr } => write!(f, "{entry:?}+{nr} is outside the device"),
            Error::CrossesCluster { entry, nr } => {
                write!(f, "{entry:?}+{nr} crosses a cluster boundary")
            }
            Error::SlotFree { entry } => write!(f, "{entry:?} is free"),
            Error::BadSlot { entry } => write!(f, "{entry:?} is the header or past the end"),
            Error::CacheBusy { entry } => write!(f, "{entry:?} is pinned by the swap cache"),
            Error::NotCached { entry } => write!(f, "{entry:?} is not pinned by the swap cache"),
            Error::CountUnderflow { entry } => write!(f, "{entry:?} has a swap count of zero"),
            Error::CountOverflow { entry } => write!(f, "{entry:?} swap count overflow"),
            Error::Backend(e) => write!(f, "backend: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Backend(e) => Some(e),
            _ => None,
        }
    }
}

impl From<backend::Error> for Error {
    fn from(e: backend::Error) -> Self {
        Error::Backend(e)
    }
}
