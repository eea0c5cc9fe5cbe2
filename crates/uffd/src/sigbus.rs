//! SIGBUS mode: resolve missing faults in the faulting thread itself.
//!
//! A uffd created with [`Features::SIGBUS`](crate::Features::SIGBUS) sends no fault messages:
//! the faulting thread receives SIGBUS. A [`SigbusResolver`] arms a range in the process-wide
//! handler (`sys::signal`), which resolves the page with `UFFDIO_COPY` from a mirror mapping
//! (or `UFFDIO_ZEROPAGE`) and returns; the faulting access then completes. There is no
//! cross-thread wake-up, which on a virtual machine is most of a fault's cost.
//!
//! What SIGBUS mode cannot do: serve a fault taken in kernel mode. A `read(2)` into a missing
//! page of such a range fails with EFAULT (no signal is sent), so it suits memory the program
//! touches only from user space, or programs that tolerate EFAULT.
//!
//! The resolver borrows the uffd and the mirror, and disarms (waiting for handlers in flight)
//! when dropped, so neither can be closed or unmapped while the handler may use them.

pub use crate::sys::signal::{
    program_action, run_on_alternate_stacks, set_program_action, Dispatch, DispatchFn, Hook,
    SigbusFault, SigbusResolver, SLOTS,
};

/// `si_code` of a userfaultfd SIGBUS.
pub const BUS_ADRERR: i32 = libc::BUS_ADRERR;
/// `si_code` of an access to a poisoned page (`UFFDIO_POISON`, memory errors).
pub const BUS_MCEERR_AR: i32 = libc::BUS_MCEERR_AR;
