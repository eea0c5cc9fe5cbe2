//! What the shim's interposers of the program's descriptor calls do (crate essay): each
//! takes the program's arguments and libc's own function (`real`), and calls it when the
//! call concerns none of the registry's numbers, or in another process than the registry's
//! (a forked or vforked child). Fast path: one or two atomic loads.
//!
//! Context: program threads, at any time; a call may wait for an engine thread's placement
//! or guard (a few system calls), never the other way round.

use crate::registry::{self, RangeLock};
use crate::STATS;
use std::sync::atomic::Ordering::SeqCst;

/// `CLOSE_RANGE_CLOEXEC`: marks instead of closing (harmless to ours, which have it).
const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;

fn set_errno(value: i32) {
    crate::sys::set_errno(value);
}

/// The program's `close(fd)`: `true` when `fd` is ours, and the close is to report success
/// without closing anything.
pub fn close(fd: i32) -> bool {
    if registry::find(fd).is_none() || !registry::in_owner() {
        return false;
    }
    STATS.closes_ignored.fetch_add(1, SeqCst);
    true
}

/// The program's `close_range(first, last, flags)` (and `closefrom(first)`: `last`
/// `u32::MAX`): `None` when it concerns none of ours (call libc's), else its result.
pub fn close_range(first: u32, last: u32, flags: u32) -> Option<i32> {
    if first > last || flags & CLOSE_RANGE_CLOEXEC != 0 {
        return None;
    }
    let last_fd = i32::try_from(last).unwrap_or(i32::MAX);
    let first_fd = i32::try_from(first).unwrap_or(i32::MAX);
    if registry::lowest_from(first_fd).is_none_or(|low| low > last_fd) || !registry::in_owner() {
        return None;
    }
    registry::close_range_around(first, last, flags);
    Some(0)
}

/// The program's `dup2(old, new)` or `dup3(old, new, flags)`, made by `real`: if `new` is
/// ours, ours is moved away first, so the program gets `new` and the engine keeps its file.
pub fn dup_onto(new: i32, real: impl FnOnce() -> i32) -> i32 {
    if registry::find(new).is_none() || !registry::in_owner() {
        return real();
    }
    let _lock = RangeLock::take();
    match registry::make_way(new) {
        Ok(false) => real(),
        Ok(true) => {
            let result = real();
            if result < 0 {
                // The program's call failed: the number is free, as it would be without us.
                let errno = crate::sys::errno();
                let _ = crate::sys::close(new);
                set_errno(errno);
            }
            result
        }
        Err(errno) => {
            set_errno(errno);
            -1
        }
    }
}

/// The program's `fcntl(fd, F_DUPFD or F_DUPFD_CLOEXEC, min)`: the lowest number at least
/// `min` that is free or ours, as it would be without us (ours moved away for it).
pub fn dup_at_least(fd: i32, min: i32, cloexec: bool, real: impl FnOnce() -> i32) -> i32 {
    if min < 0 || !registry::may_hold_from(min) || !registry::in_owner() {
        return real();
    }
    let _lock = RangeLock::take();
    let got = real();
    let errno = crate::sys::errno();
    let Some(ours) = registry::lowest_from(min) else {
        set_errno(errno);
        return got;
    };
    let skipped = if got >= 0 { ours < got } else { errno == libc::EMFILE };
    if !skipped {
        set_errno(errno);
        return got;
    }
    match registry::make_way(ours) {
        Ok(true) => {}
        Ok(false) | Err(_) => {
            set_errno(errno);
            return got;
        }
    }
    let flags = if cloexec { libc::O_CLOEXEC } else { 0 };
    match crate::sys::dup3(fd, ours, flags) {
        Ok(number) => {
            if got >= 0 {
                let _ = crate::sys::close(got);
            }
            number
        }
        Err(e) => {
            let _ = crate::sys::close(ours);
            if got >= 0 {
                let _ = crate::sys::close(got);
            }
            set_errno(e);
            -1
        }
    }
}
