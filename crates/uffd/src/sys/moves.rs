//! `UFFDIO_MOVE` in its three forms.
//!
//! MOVE is the one resolving ioctl that changes memory outside the registered destination:
//! its *source* loses its pages (reads as zero next, or faults if registered). So the raw
//! form, with a caller-chosen source address, is `unsafe`; the forms whose source is a
//! [`Mapping`] (a region the caller owns, or a staging area) are safe, because a mapping's
//! memory is never covered by a Rust reference.
//!
//! | form | source | safe |
//! |---|---|---|
//! | [`Uffd::move_pages`] | any address | no |
//! | [`Uffd::move_from`] | a `Mapping`, bounds-checked | yes |
//! | [`Staging::move_out_raw`] | any address, into staging slots | no |
//!
//! The kernel's rules (mm/userfaultfd.c `move_pages`, `validate_move_areas`): both ranges
//! private anonymous with equal protection and mlock state, the destination inside a range
//! registered with this uffd and a hole (else EEXIST), the source without holes unless
//! `ALLOW_SRC_HOLES` (else ENOENT), every source page exclusive to this mm (a page shared
//! with a forked child, or pinned, is EBUSY). Partial progress is EAGAIN with the bytes.

use super::call;
use super::mapping::Mapping;
use crate::error::Error;
use crate::staging::{SlotRun, Staging};
use crate::sys;
use crate::types::MoveMode;
use crate::uffd::{finish, Uffd};
use crate::PAGE_SIZE;

impl Uffd {
    /// `UFFDIO_MOVE` (6.8): moves the pages at `src` to `dst` without copying. `dst` must be
    /// a hole inside a range registered with this uffd; `src` must be private anonymous memory
    /// with the same protection, its pages not shared with a forked child (else EBUSY).
    ///
    /// # Safety
    /// `[src, src + len)` loses its pages: no live Rust reference may cover it (it belongs to
    /// a [`Mapping`] or staging slot accessed only through their methods, or to another
    /// process's mm).
    ///
    /// # Errors
    /// The resolving errors of [`Error`]; `NoEntry` for a source hole, `Busy` for a shared
    /// source page.
    pub unsafe fn move_pages(
        &self,
        dst: usize,
        src: usize,
        len: usize,
        mode: MoveMode,
    ) -> Result<usize, Error> {
        let mut arg = sys::uffdio_move {
            dst: dst as u64,
            src: src as u64,
            len: len as u64,
            mode: mode.bits(),
            r#move: 0,
        };
        // SAFETY: the caller's contract covers the source range.
        let result = self.with_fd(|fd| unsafe { call::move_pages(fd, &mut arg) });
        finish(crate::error::Op::Move, result, arg.r#move, len)
    }

    /// Moves `len` bytes at byte `offset` of `src` to `dst` (see [`Uffd::move_pages`]).
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] / [`Error::Misaligned`] for a source outside `src`; otherwise
    /// as [`Uffd::move_pages`].
    pub fn move_from(
        &self,
        dst: usize,
        src: &Mapping,
        offset: usize,
        len: usize,
        mode: MoveMode,
    ) -> Result<usize, Error> {
        let range = src.sub(offset, len)?;
        // SAFETY: the source lies inside `src` (checked by `sub`), a Mapping, whose memory no
        // Rust reference covers; the borrow keeps it mapped for the call.
        unsafe { self.move_pages(dst, range.start(), len, mode) }
    }
}

impl Staging {
    /// Moves `run.pages` pages at `src` (any address) into the empty slots of `run`.
    ///
    /// # Safety
    /// As [`Uffd::move_pages`] for `[src, src + run.pages pages)`.
    ///
    /// # Errors
    /// As [`Uffd::move_pages`]; the slots filled before an error are marked present.
    ///
    /// # Panics
    /// If `run` is not an allocated run of empty slots, or `uffd` is not staging's.
    pub unsafe fn move_out_raw(
        &mut self,
        uffd: &Uffd,
        src: usize,
        run: SlotRun,
        mode: MoveMode,
    ) -> Result<usize, Error> {
        let dst = self.begin_move(uffd, run, false);
        // SAFETY: the caller's contract covers the source.
        let result = unsafe { uffd.move_pages(dst, src, run.pages as usize * PAGE_SIZE, mode) };
        self.end_move(run, false, &result);
        result
    }
}
