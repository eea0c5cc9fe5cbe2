//! zpool: uswap's zsmalloc-like allocator for compressed pages.
//!
//! zswap compresses a 4 KiB page into an object of 1..=4096 bytes and must keep it somewhere
//! that wastes little memory, lets it be freed in any order, and gives memory back when
//! objects go away. A general-purpose heap does the first badly at scale (every freed hole
//! stays in the heap; nothing can move) and the kernel's slab does it worse (a page
//! compressed to 60% in a 4 KiB slab "loses the savings in fragmentation"). zsmalloc's
//! answer, rebuilt here:
//!
//! - **Size classes** ([`class`]): object sizes 32 B .. 4 KiB in 16 B steps (255 steps),
//!   every request rounded up to its step. Each class stores its objects in **zspages**:
//!   chains of 1..=8 base pages, the length chosen per class to waste the least tail space.
//!   Steps whose (pages per zspage, objects per zspage) are identical are merged into the
//!   larger one, since a smaller size there would save nothing.
//! - **Objects straddle pages** ([`zspage`]): objects are packed end to end across the
//!   zspage's pages, so a 48-byte class wastes nothing at a page edge; a straddling object
//!   is copied in two pieces.
//! - **Indirect handles** ([`handle`]): a [`Handle`] names a slot in its class's handle
//!   table, and the slot holds the object's location. Compaction moves an object by copying
//!   it and rewriting the slot; the handle the user holds never changes.
//! - **Fullness groups**: each class keeps its zspages in 12 groups by in-use ratio (empty,
//!   1-9%, 10-19%, .., 90-99%, full). `malloc` fills the fullest non-full zspage first;
//!   [`ZsPool::compact`] moves objects from the emptiest zspage into the fullest until the
//!   emptiest one is empty, then frees it.
//! - **The huge class**: sizes that fit one object per one page (near-incompressible
//!   pages) share one class; [`ZsPool::huge_class_size`] tells zswap where it begins, since
//!   a page compressed to that size saves nothing over storing it raw.
//!
//! ```text
//!   Handle ──► class k handle table ──► slot { zspage 7, obj 3, size, generation }
//!                                                  │
//!   class k (size 1360 B, 1 zspage = 3 pages, 9 objects, Mutex<ClassState>)
//!   zspage 7:  page 0                    page 1                    page 2
//!             [obj0 |obj1 |obj2 |ob][j3 |obj4 |obj5 |o][bj6 |obj7 |obj8 |  tail]
//!                                 ^ straddles        ^ straddles          ^ 48 B waste
//!   fullness groups: [0%][1-9%]..[90-99%][full]   each a list of zspage ids
//! ```
//!
//! Concurrency: every class has its own mutex; an object's class never changes, and its
//! handle names the class, so `read`, `write`, `free` and the object moves of compaction
//! all take that one lock and nothing else. A reader therefore sees an object entirely
//! before or entirely after a move, never half of it. Page memory is allocated and freed
//! outside every lock.
//!
//! Memory accounting ([`ZsPool::total_bytes`]) is exact for what this crate holds:
//!
//! - 4096 bytes per page held by a live zspage;
//! - per live zspage: the `ZsPage` struct, its page pointers and its 4-byte object slots;
//! - per class, by capacity: the handle table (12 bytes a slot, kept at its high water:
//!   handles name slots, so the table cannot shrink), the zspage table (8 bytes an id), the
//!   free lists and the fullness-group lists;
//! - the fixed pool structure (the classes and their locks).
//!
//! Not counted: the system allocator's chunk headers around the metadata allocations, and
//! the free pages the page arena ([`arena`]) keeps resident for the next zspage: bounded
//! (an eighth of the pages in use, at least 64), reported in [`PoolStats::arena`], and
//! given back to the kernel by [`ZsPool::compact`]. Those pages are in the process's
//! resident set all the same: [`ZsPool::memory_bytes`] counts every resident page of the
//! arena, and is what a budget charges. A pool from 16 MiB in use takes its pages from
//! 2 MiB chunks advised for huge pages, so a cold load's walk to the object's bytes costs
//! fewer TLB misses (the arena's essay). `uswap bench zpool` measures both views.
//!
//! Conventions in this crate: `ppz` = pages per zspage, `obj` = an object index inside a
//! zspage, `slot` = an index in a class's handle table, `step` = a 16 B size step.

#![deny(unsafe_code)]

mod arena;
pub mod class;
mod error;
pub mod handle;
mod pool;
mod state;
mod stats;
mod zspage;

pub use arena::{ArenaStats, CHUNK_BYTES, HUGE_FROM_PAGES};
pub use class::{ClassGeometry, ClassIndex, ClassTable};
pub use error::Error;
pub use handle::Handle;
pub use pool::{AllocAttempt, AllocFailHook, ObjLocation, PoolConfig, ZsPool};
pub use stats::{ClassStats, CompactStats, Counters, PoolStats};

/// A base page: the unit zspages are made of and the largest object.
pub const PAGE_SIZE: usize = 4096;

/// The smallest class: a smaller request is rounded up to it.
pub const MIN_ALLOC_BYTES: usize = 32;

/// The largest object: a whole page stored raw.
pub const MAX_ALLOC_BYTES: usize = PAGE_SIZE;

/// Class spacing, `PAGE_SIZE >> 8` as in the kernel: 255 steps from 32 B to 4 KiB.
pub const CLASS_DELTA_BYTES: usize = PAGE_SIZE >> 8;

/// The longest zspage chain (the kernel's default `CONFIG_ZSMALLOC_CHAIN_SIZE`).
pub const MAX_PAGES_PER_ZSPAGE: usize = 8;

/// Size steps before merging: (4096 - 32) / 16 + 1.
pub const SIZE_STEPS: usize = (MAX_ALLOC_BYTES - MIN_ALLOC_BYTES) / CLASS_DELTA_BYTES + 1;

/// Fullness groups per class: empty, 1-9%, 10-19%, .., 90-99%, full.
pub const FULLNESS_GROUPS: usize = 12;

/// The most objects one zspage can hold: 8 pages of 32 B objects.
pub const MAX_OBJS_PER_ZSPAGE: usize = MAX_PAGES_PER_ZSPAGE * PAGE_SIZE / MIN_ALLOC_BYTES;

const _: () = assert!(SIZE_STEPS == 255);
const _: () = assert!(MIN_ALLOC_BYTES.is_multiple_of(CLASS_DELTA_BYTES));
const _: () = assert!(MAX_OBJS_PER_ZSPAGE < u16::MAX as usize);
