//! The frontend's one error type: the kernel interface's errors, forwarded, and the
//! library's own.
//!
//! Most failures of the frontend are the kernel's ([`uffd::Error`]: a probe that says what to
//! do, an ioctl's errno with its partial progress), and are passed on whole in
//! [`Error::Kernel`] (`?` converts). The library adds what only it can get wrong: a
//! configuration value, the swap file, the engine's refusal, a thread that cannot start,
//! an object used in a forked child. The message of a kernel error is the kernel
//! interface's, unchanged: a user reads the same advice whichever layer reports it.

/// Everything that can go wrong in the frontend.
#[derive(Debug)]
pub enum Error {
    /// The kernel interface's error (the probe, a uffd, a syscall).
    Kernel(uffd::Error),
    /// A value given to the builder or to `map` is unusable; the text names it.
    Config { what: String },
    /// The swap file cannot be created or sized.
    SwapFile { path: std::path::PathBuf, why: String },
    /// The engine refused an operation.
    Engine(engine::Error),
    /// A thread could not be started.
    Thread { what: &'static str, error: std::io::Error },
    /// The object belongs to the parent of this forked process: its engine and threads are
    /// not here.
    ForkedChild,
}

impl Error {
    /// The kernel interface's error behind this one, if it is one.
    pub fn kernel(&self) -> Option<&uffd::Error> {
        match self {
            Error::Kernel(error) => Some(error),
            _ => None,
        }
    }
}

impl From<uffd::Error> for Error {
    fn from(error: uffd::Error) -> Error {
        Error::Kernel(error)
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Kernel(error) => write!(f, "{error}"),
            Error::Config { what } => write!(f, "bad configuration: {what}"),
            Error::SwapFile { path, why } => {
                write!(f, "swap file {}: {why}", path.display())
            }
            Error::Engine(error) => write!(f, "engine: {error}"),
            Error::Thread { what, error } => write!(f, "cannot start {what}: {error}"),
            Error::ForkedChild => write!(
                f,
                "this uswap object belongs to the parent process; a forked child cannot use it"
            ),
        }
    }
}

// No `source()`: each message already includes the one it wraps, and a chain printer
// (anyhow's `{:#}`) would say it twice.
impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_error_reads_as_the_kernel_interface_says() {
        let kernel = uffd::Error::NotBuilt;
        let text = kernel.to_string();
        let e = Error::from(kernel);
        assert_eq!(e.to_string(), text);
        assert!(matches!(e.kernel(), Some(uffd::Error::NotBuilt)));
        assert!(Error::ForkedChild.kernel().is_none());
    }
}
