//! Batched writes through io_uring: many page writes at scattered offsets submitted with
//! one `io_uring_enter`, to measure against a loop of `pwrite` (docs/benchmarks.md). The
//! only place the crate talks to io_uring; its unsafe code is the submission of entries
//! that point at caller buffers.
//!
//! Locks: the ring sits behind a mutex; one batch at a time per backend.

#![allow(unsafe_code)]

use io_uring::{opcode, types, IoUring};
use parking_lot::Mutex;
use std::os::fd::RawFd;

/// Entries per ring: a batch larger than this is submitted in several rounds.
const RING_ENTRIES: u32 = 64;

/// One io_uring instance.
pub(crate) struct Uring {
    ring: Mutex<IoUring>,
}

impl std::fmt::Debug for Uring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Uring")
    }
}

impl Uring {
    /// A ring of [`RING_ENTRIES`] entries.
    ///
    /// # Errors
    /// When the kernel refuses io_uring (disabled by sysctl, seccomp, too old).
    pub(crate) fn new() -> std::io::Result<Uring> {
        Ok(Uring { ring: Mutex::new(IoUring::new(RING_ENTRIES)?) })
    }

    /// Writes every `(byte position, data)` of `writes` to `fd`, then waits for all of
    /// them. Returns the index of the first write that failed and its error.
    ///
    /// Context: takes the ring's lock; blocks until every submitted write completed.
    pub(crate) fn write_all(
        &self,
        fd: RawFd,
        writes: &[(u64, &[u8])],
    ) -> Result<(), (usize, std::io::Error)> {
        let mut ring = self.ring.lock();
        let mut first_error: Option<(usize, std::io::Error)> = None;
        for (round, chunk) in writes.chunks(RING_ENTRIES as usize).enumerate() {
            let base = round * RING_ENTRIES as usize;
            for (i, &(pos, data)) in chunk.iter().enumerate() {
                let entry = opcode::Write::new(types::Fd(fd), data.as_ptr(), data.len() as u32)
                    .offset(pos)
                    .build()
                    .user_data((base + i) as u64);
                // SAFETY: (1) the entry points at `data`, borrowed from `writes` for this
                // whole call; (2) this function does not return before every entry of
                // the round has completed (the wait loop below collects exactly
                // `chunk.len()` completions), so the kernel never touches the buffer
                // after the borrow ends; (3) the ring has RING_ENTRIES free entries at
                // the start of each round and a round pushes at most that many.
                let pushed = unsafe { ring.submission().push(&entry) };
                assert!(pushed.is_ok(), "submission queue full with {} entries", chunk.len());
            }
            let mut done = 0;
            while done < chunk.len() {
                if let Err(e) = ring.submit_and_wait(chunk.len() - done) {
                    if e.kind() == std::io::ErrorKind::Interrupted {
                        continue;
                    }
                    // The entries may still be in flight: the buffers must stay valid,
                    // so a failure to wait is fatal rather than returned.
                    panic!("io_uring_enter failed with writes in flight: {e}");
                }
                for cqe in ring.completion() {
                    done += 1;
                    let index = cqe.user_data() as usize;
                    let want = writes[index].1.len() as i32;
                    let failed = match cqe.result() {
                        r if r < 0 => Some(std::io::Error::from_raw_os_error(-r)),
                        r if r != want => Some(std::io::Error::new(
                            std::io::ErrorKind::WriteZero,
                            format!("short write: {r} of {want} bytes"),
                        )),
                        _ => None,
                    };
                    if let Some(e) = failed {
                        if first_error.as_ref().is_none_or(|(i, _)| index < *i) {
                            first_error = Some((index, e));
                        }
                    }
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
