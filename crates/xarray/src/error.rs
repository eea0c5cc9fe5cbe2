//! The crate's one error enum, and [`Refused`]: an error that hands the caller's entry back.
//!
//! Every refusal leaves the array exactly as it was (the model test checks this), and is
//! counted in [`Stats`](crate::Stats).

use crate::entry::Entry;
use std::fmt;

/// Why an operation was refused. Variants carry the data needed to act on them.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// A multi-index range must start at a multiple of its size.
    Misaligned {
        /// The index given.
        index: u64,
        /// The order given.
        order: u32,
    },
    /// Orders go up to 63: an order-64 entry would be the whole key space.
    OrderTooLarge {
        /// The order given.
        order: u32,
    },
    /// A value entry holds at most [`MAX_VALUE`](crate::MAX_VALUE).
    ValueTooLarge {
        /// The value given.
        value: u64,
    },
    /// `insert` found an entry in the range.
    Occupied {
        /// First index of the entry found.
        index: u64,
        /// Its order.
        order: u32,
    },
    /// A larger multi-index entry covers part of the range: split it first (the kernel
    /// requires the same; the cursor's one-walk add does it).
    Covered {
        /// First index of the covering entry.
        index: u64,
        /// Its order.
        order: u32,
    },
    /// No entry at this index.
    NotPresent {
        /// The index given.
        index: u64,
    },
    /// `compare_exchange` found a different entry (or none) at this index.
    Mismatch {
        /// The index given.
        index: u64,
    },
    /// A split can only make smaller entries.
    SplitToLarger {
        /// Order of the entry.
        order: u32,
        /// The order asked for.
        new_order: u32,
    },
    /// A split may multiply the entry count by at most
    /// 2^[`MAX_SPLIT_ORDERS`](crate::MAX_SPLIT_ORDERS) (a bound on the memory one call can
    /// allocate).
    SplitTooLarge {
        /// Order of the entry.
        order: u32,
        /// The order asked for.
        new_order: u32,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Misaligned { index, order } => {
                write!(f, "index {index:#x} is not aligned to order {order}")
            }
            Error::OrderTooLarge { order } => write!(f, "order {order} exceeds 63"),
            Error::ValueTooLarge { value } => write!(f, "value {value:#x} exceeds 63 bits"),
            Error::Occupied { index, order } => {
                write!(f, "an order-{order} entry at {index:#x} occupies the range")
            }
            Error::Covered { index, order } => {
                write!(f, "an order-{order} entry at {index:#x} covers part of the range")
            }
            Error::NotPresent { index } => write!(f, "no entry at {index:#x}"),
            Error::Mismatch { index } => write!(f, "a different entry is at {index:#x}"),
            Error::SplitToLarger { order, new_order } => {
                write!(f, "cannot split an order-{order} entry into order {new_order}")
            }
            Error::SplitTooLarge { order, new_order } => {
                write!(f, "splitting order {order} into order {new_order} makes too many entries")
            }
        }
    }
}

impl std::error::Error for Error {}

/// A refused store: the error and the entry the caller gave, handed back unchanged so
/// nothing the caller owned is dropped behind its back.
pub struct Refused<P> {
    /// Why.
    pub error: Error,
    /// The caller's entry (`None` when the operation was given none, as an erasing
    /// `compare_exchange`).
    pub entry: Option<Entry<P>>,
}

impl<P> Refused<P> {
    pub(crate) fn new(error: Error, entry: Entry<P>) -> Self {
        Refused { error, entry: Some(entry) }
    }
}

impl<P> fmt::Debug for Refused<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Refused")
            .field("error", &self.error)
            .field("entry_returned", &self.entry.is_some())
            .finish()
    }
}

impl<P> fmt::Display for Refused<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl<P> std::error::Error for Refused<P> {}

impl<P> From<Refused<P>> for Error {
    fn from(refused: Refused<P>) -> Self {
        refused.error
    }
}
