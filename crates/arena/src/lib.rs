//! The shim's allocator: every Rust allocation of the shim (the engine's page tables, the
//! pool's pages, folio buffers, std's own) comes from one private mapping, never from
//! glibc's `malloc`.
//!
//! Why: the program's heap is managed memory. A handler thread that called `malloc` could
//! touch an evicted page of it (a free chunk's header) and fault on memory only it can
//! bring back, or wait for an arena lock held by a program thread that is itself waiting
//! for the handler to serve a fault: either way the process hangs. So the engine's threads
//! allocate here, and the shim keeps this mapping out of the managed set (it is named
//! `[anon:uswap-arena]` in /proc/self/maps where the kernel supports names, and recorded
//! as the engine's in any case).
//!
//! ```text
//!   one reservation of ARENA_BYTES (a quarter of RLIMIT_AS if that is less), MAP_NORESERVE
//!   and PROT_NONE: the bottom is opened read-write 2 MiB at a time, the top block by block
//!   +------------------------------+------------------------+------------------------+
//!   | blocks below 2 MiB, bumped up |     never touched      | blocks of 2 MiB and    |
//!   |                              |                        | more, bumped down      |
//!   +------------------------------+------------------------+------------------------+
//!   ^ base                         ^ bottom                 ^ top        base + ARENA_BYTES
//!   free lists: one per size class, a freed block's first word links to the next; blocks
//!   of 64 KiB and more give their pages after the first back to the kernel when freed
//!   (MADV_DONTNEED: this mapping is not registered, so no event is sent).
//!   classes: 16, 32, 48, 64, then four per doubling (64 · 5/4, 6/4, 7/4, 2, ...) up to
//!   16 GiB: a request wastes at most a fifth of its block above 64 bytes.
//! ```
//!
//! Why four classes per doubling: the engine's most numerous blocks are not powers of
//! two. Its XArray nodes are 544 bytes; with one class per power of two each would take a
//! 1024-byte block, and at 1 GiB under 256 MiB the engine's 10,600 nodes would hold 10.9 MB
//! of arena for 5.8 MB of nodes, all of it charged to the budget (in the process's
//! resident set). A 640-byte class holds them in 6.8 MB. A block's alignment is
//! the largest power of two dividing its class size (a 640-byte block is aligned to 128),
//! so a request aligned more than its class allows takes the next class that allows it.
//!
//! Why two ends: the pool's 2 MiB chunks are advised `MADV_HUGEPAGE` one by one, and the
//! kernel splits a mapping where the advice changes. Bumped up among the small blocks, each
//! chunk would sit between small ones and be a mapping of its own: some 320 of them at
//! 1 GiB under 256 MiB, in a /proc/self/maps the shim's scan reads every 10 ms (a read of
//! 377 lines takes 173 us, of 61 lines 44 us). From the top down the chunks lie side by
//! side and merge into a few mappings.
//!
//! Why no access until used: `mlockall(MCL_CURRENT)` in the program makes every accessible
//! page of every mapping resident and locked, and a read-write reservation became 16.2 GiB
//! resident for a program using 222 MB. A page with no access is not populated by a lock;
//! the parts in use are (they are the engine's memory, resident anyway).
//!
//! Bounds: the reservation; an allocation past it fails (Rust aborts with an allocation
//! error, loudly). Locks: one mutex per size class (std's futex mutex, which never
//! allocates), held for a pointer swap. Blocks are never split or merged: a block of class
//! k serves only class k (engine allocations are mostly few sizes repeated: nodes, folio
//! buffers, pool pages).
//!
//! The allocator itself is the leaf module `arena` (raw memory: `unsafe` allowed there).

#![deny(unsafe_code)]

mod arena;

pub use arena::{
    address_space_limit, reservation_bytes, Arena, ArenaStats, ARENA_BYTES, MIN_RESERVATION_BYTES,
};
