//! Return codes and the per-thread last error message.

use std::cell::RefCell;
use std::ffi::CString;

/// The C return codes (`enum uswap_status` in uswap.h).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// A bad argument or configuration value.
    Invalid = -1,
    /// userfaultfd unusable (seccomp, not built, denied).
    Unavailable = -2,
    /// No permission (kernel-mode faults, forked children).
    Permission = -3,
    /// The kernel lacks a feature.
    Kernel = -4,
    /// The swap file cannot be created.
    SwapFile = -5,
    /// Any other system error.
    System = -6,
    /// Called in a forked child on its parent's object.
    Child = -7,
}

/// The code for a library error.
pub fn code_of(error: &frontend::Error) -> Status {
    use frontend::Error as E;
    use uffd::Error as K;
    match error {
        E::Config { .. } | E::Kernel(K::Misaligned { .. } | K::OutOfBounds { .. }) => {
            Status::Invalid
        }
        E::Engine(engine::Error::OutsideRegions { .. } | engine::Error::Config(_)) => {
            Status::Invalid
        }
        E::Kernel(K::Blocked { .. } | K::NotBuilt | K::Denied { .. }) => Status::Unavailable,
        E::Kernel(K::NoKernelFaultPermission { .. }) => Status::Permission,
        E::Kernel(K::KernelTooOld { .. }) => Status::Kernel,
        E::SwapFile { .. } => Status::SwapFile,
        E::ForkedChild => Status::Child,
        _ => Status::System,
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `message` as the calling thread's last error and returns `status`.
pub fn fail(status: Status, message: &str) -> Status {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|last| *last.borrow_mut() = text);
    status
}

/// Records a library error; returns its code.
pub fn fail_with(error: &frontend::Error) -> Status {
    fail(code_of(error), &error.to_string())
}

/// The calling thread's last error message (valid until its next failure).
pub fn last_error() -> *const std::ffi::c_char {
    LAST_ERROR.with(|last| last.borrow().as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_their_codes() {
        let e = frontend::Error::Config { what: "x".into() };
        assert_eq!(code_of(&e), Status::Invalid);
        assert_eq!(code_of(&uffd::Error::NotBuilt.into()), Status::Unavailable);
        assert_eq!(code_of(&frontend::Error::ForkedChild), Status::Child);
        let e = frontend::Error::SwapFile { path: "/p".into(), why: "ro".into() };
        assert_eq!(code_of(&e), Status::SwapFile);
        assert_eq!(fail_with(&e), Status::SwapFile);
        let text = LAST_ERROR.with(|last| last.borrow().clone());
        assert_eq!(text.to_str().unwrap(), "swap file /p: ro");
    }
}
