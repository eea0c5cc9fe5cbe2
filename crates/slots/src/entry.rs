//! Swap entries: (device type, slot offset) packed in one word.
//!
//! Encoding (documented once, here):
//!
//! ```text
//!   bit  63   62 .. 58    57 ........................ 0
//!       [ 0 ][ type (5) ][ offset (58)                   ]
//! ```
//!
//! Bit 63 is always zero, so a raw entry fits an XArray value entry (which keeps 63 bits:
//! `raw << 1 | 1`) and a shadow or page-table word can carry it unchanged. The type is the
//! index of the device in [`crate::SwapDevices`] (`MAX_SWAPFILES` = 32 needs 5 bits, as in
//! the kernel's `MAX_SWAPFILES_SHIFT`). The offset is the slot number; slot 0 of every
//! device is the header and never names a page.

use crate::MAX_SWAPFILES;
use std::fmt;

/// Bits of the offset field.
pub const SWP_OFFSET_BITS: u32 = 58;
/// Bits of the type field.
pub const SWP_TYPE_BITS: u32 = 5;
/// Largest offset an entry can carry.
pub const SWP_OFFSET_MAX: u64 = (1 << SWP_OFFSET_BITS) - 1;

const _: () = assert!(SWP_OFFSET_BITS + SWP_TYPE_BITS <= 63, "entry must fit an XArray value");
const _: () = assert!(MAX_SWAPFILES <= 1 << SWP_TYPE_BITS, "type field too small");

/// The index of a swap device: `0 .. MAX_SWAPFILES`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct SwapType(u8);

impl SwapType {
    /// A type number, if it is below `MAX_SWAPFILES`.
    pub const fn new(ty: u8) -> Option<SwapType> {
        if (ty as usize) < MAX_SWAPFILES {
            Some(SwapType(ty))
        } else {
            None
        }
    }

    /// The number.
    pub const fn get(self) -> u8 {
        self.0
    }
}

/// Where a swapped-out page lives: a device type and a slot offset on it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SwapEntry(u64);

impl SwapEntry {
    /// The entry for slot `offset` of device `ty`.
    ///
    /// # Panics
    /// If `offset > SWP_OFFSET_MAX` (devices are far smaller: a bug of the caller).
    pub const fn new(ty: SwapType, offset: u64) -> SwapEntry {
        assert!(offset <= SWP_OFFSET_MAX, "swap offset too large");
        SwapEntry((ty.0 as u64) << SWP_OFFSET_BITS | offset)
    }

    /// The device type.
    pub const fn swap_type(self) -> SwapType {
        SwapType((self.0 >> SWP_OFFSET_BITS) as u8)
    }

    /// The slot offset.
    pub const fn offset(self) -> u64 {
        self.0 & SWP_OFFSET_MAX
    }

    /// The packed word (bit 63 clear).
    pub const fn to_raw(self) -> u64 {
        self.0
    }

    /// Unpacks a word made by [`SwapEntry::to_raw`]; `None` if bit 63 is set or the type
    /// is not below `MAX_SWAPFILES`.
    pub const fn from_raw(raw: u64) -> Option<SwapEntry> {
        if raw >> 63 != 0 || (raw >> SWP_OFFSET_BITS) as usize >= MAX_SWAPFILES {
            return None;
        }
        Some(SwapEntry(raw))
    }

    /// The entry `n` slots further on the same device.
    ///
    /// # Panics
    /// If the offset would pass `SWP_OFFSET_MAX`.
    pub const fn add(self, n: u64) -> SwapEntry {
        SwapEntry::new(self.swap_type(), self.offset() + n)
    }
}

impl fmt::Debug for SwapEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SwapEntry({}:{})", self.swap_type().0, self.offset())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_fits_a_value_entry() {
        let ty = SwapType::new(31).unwrap();
        let entry = SwapEntry::new(ty, SWP_OFFSET_MAX);
        assert_eq!(entry.swap_type(), ty);
        assert_eq!(entry.offset(), SWP_OFFSET_MAX);
        assert!(entry.to_raw() < 1 << 63);
        assert_eq!(SwapEntry::from_raw(entry.to_raw()), Some(entry));
        assert_eq!(SwapEntry::from_raw(1 << 63), None);
        assert_eq!(SwapType::new(32), None);
        let e = SwapEntry::new(SwapType::new(2).unwrap(), 10).add(5);
        assert_eq!((e.swap_type().get(), e.offset()), (2, 15));
    }
}
