//! [`Event`]: a uffd message, decoded.
//!
//! Faults are synchronous (the faulting thread sleeps until a resolving ioctl or `wake`
//! covers its address); the other events are non-cooperative notifications that hold the
//! thread that caused them (fork, mremap, madvise, munmap) until the message is read:
//!
//! | event | caused by | what the handler must do |
//! |---|---|---|
//! | `PageFault` | an access to a missing (or write-protected) page | resolve it, or wake |
//! | `Fork` | fork() of a process with registered ranges | take the child's uffd and serve it |
//! | `Remap` | mremap() of a registered range | move its bookkeeping from `from` to `to` |
//! | `Remove` | MADV_DONTNEED / MADV_REMOVE | the range reads as zero next: drop its swap entries |
//! | `Unmap` | munmap(), or mremap shrinking / moving | forget the range |
//!
//! The last three come as `Event::Range`, a [`RangeEvent`]: addresses only, which a
//! handler can copy on to whoever else follows the ranges.
//!
//! While an event is unread, the resolving ioctls fail with EAGAIN (`mmap_changing`).

use crate::sys::{self, call::RawEvent};
use crate::uffd::Uffd;

/// A decoded uffd message.
#[derive(Debug)]
pub enum Event {
    /// A thread faulted on `addr` (page-aligned unless `EXACT_ADDRESS` was asked for).
    PageFault {
        /// The faulting address.
        addr: usize,
        /// A write access (`UFFD_PAGEFAULT_FLAG_WRITE`).
        write: bool,
        /// A write to a write-protected page (`UFFD_PAGEFAULT_FLAG_WP`).
        wp: bool,
        /// A minor fault (page cache hit, shmem / hugetlbfs).
        minor: bool,
        /// The faulting thread's id with `THREAD_ID`, else 0.
        thread_id: u32,
    },
    /// The process forked; `child` serves the child's copy of the registered ranges.
    Fork {
        /// The child's uffd, owned.
        child: Uffd,
    },
    /// mremap, madvise or munmap changed registered ranges.
    Range(RangeEvent),
    /// A message this crate does not know (a newer kernel with a newer feature asked for).
    Unknown {
        /// `uffd_msg.event`.
        event: u8,
    },
}

/// A change to registered ranges, told by a non-cooperative event: plain addresses, no
/// descriptor, so it can be copied on to whoever follows the ranges (the handler's hooks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeEvent {
    /// mremap moved `[from, from + len_bytes)` to `to`.
    Remap {
        /// Old start.
        from: usize,
        /// New start.
        to: usize,
        /// Length moved.
        len_bytes: usize,
    },
    /// `[start, end)` was zapped (MADV_DONTNEED / MADV_REMOVE): it reads as zero next.
    Remove {
        /// First byte.
        start: usize,
        /// One past the last byte.
        end: usize,
    },
    /// `[start, end)` was unmapped.
    Unmap {
        /// First byte.
        start: usize,
        /// One past the last byte.
        end: usize,
    },
}

impl Event {
    /// Decodes one message read from `uffd` (a FORK message's fd becomes an owned `Uffd`).
    pub(crate) fn decode(msg: &mut sys::uffd_msg, uffd: &Uffd) -> Event {
        match sys::call::decode_msg(msg) {
            RawEvent::PageFault { flags, address, ptid } => Event::PageFault {
                addr: address as usize,
                write: flags & sys::UFFD_PAGEFAULT_FLAG_WRITE != 0,
                wp: flags & sys::UFFD_PAGEFAULT_FLAG_WP != 0,
                minor: flags & sys::UFFD_PAGEFAULT_FLAG_MINOR != 0,
                thread_id: ptid,
            },
            RawEvent::Fork { ufd } => Event::Fork { child: Uffd::from_fork(ufd, uffd) },
            RawEvent::Remap { from, to, len } => Event::Range(RangeEvent::Remap {
                from: from as usize,
                to: to as usize,
                len_bytes: len as usize,
            }),
            RawEvent::Remove { start, end } => {
                Event::Range(RangeEvent::Remove { start: start as usize, end: end as usize })
            }
            RawEvent::Unmap { start, end } => {
                Event::Range(RangeEvent::Unmap { start: start as usize, end: end as usize })
            }
            RawEvent::Unknown { event } => Event::Unknown { event },
        }
    }
}
