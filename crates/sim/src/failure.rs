//! What a failed run reports: what went wrong, where (thread, operation, scheduler step,
//! simulated time), with enough detail that the message alone usually names the bug. The
//! run's report adds the seed, the commit and the options (see [`crate::report`]).

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureKind {
    /// A read returned bytes other than the last ones written: the one thing that must
    /// never happen.
    WrongData {
        /// The address space (0: the program; others: forked children).
        mm: u32,
        /// The page's address.
        addr: u64,
        /// What the model expected.
        expected: String,
        /// What the read returned (decoded from the page's stamp).
        got: String,
        /// Who wrote the expected version, and when.
        last_write: String,
    },
    /// The engine (or the simulator) panicked: an assertion or an invariant.
    Panic {
        /// The panic message.
        message: String,
    },
    /// `Engine::check_invariants` failed at a quiescent point.
    Invariant {
        /// The panic message.
        message: String,
    },
    /// Every live thread waits on a folio and none can run: a deadlock.
    Deadlock {
        /// Each thread's state.
        states: String,
    },
    /// A thread waited on a folio for more scheduler steps than the bound.
    WaitTooLong {
        /// Steps waited.
        steps: u64,
    },
    /// The run took more scheduler steps than its bound (livelock or runaway).
    StepBound {
        /// The bound.
        steps: u64,
    },
    /// One access faulted again and again without its page appearing.
    Livelock {
        /// The page's address.
        addr: u64,
    },
    /// The engine returned an error the program cannot see in a correct run.
    Engine {
        /// The operation.
        op: String,
        /// The error.
        error: String,
    },
    /// No scheduler step for this long in wall-clock time: a thread blocks outside the
    /// scheduler (a real lock held across a yield point).
    Hang {
        /// Seconds without progress.
        seconds: u64,
    },
}

/// A failure, and where it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What went wrong.
    pub kind: FailureKind,
    /// The simulated thread (None: the controller).
    pub thread: Option<usize>,
    /// The thread's operation index, if inside an operation.
    pub op: Option<u64>,
    /// The scheduler step.
    pub step: u64,
    /// Simulated time, nanoseconds.
    pub now_ns: u64,
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FailureKind::WrongData { mm, addr, expected, got, last_write } => write!(
                f,
                "wrong data: mm {mm} page {addr:#x}: read {got}, expected {expected} \
                 ({last_write})"
            ),
            FailureKind::Panic { message } => write!(f, "panic: {message}"),
            FailureKind::Invariant { message } => write!(f, "invariant: {message}"),
            FailureKind::Deadlock { states } => {
                write!(f, "deadlock: every live thread waits on a folio ({states})")
            }
            FailureKind::WaitTooLong { steps } => {
                write!(f, "liveness: a thread waited {steps} scheduler steps on a folio")
            }
            FailureKind::StepBound { steps } => {
                write!(f, "liveness: the run passed its bound of {steps} scheduler steps")
            }
            FailureKind::Livelock { addr } => {
                write!(f, "liveness: an access to {addr:#x} faulted without end")
            }
            FailureKind::Engine { op, error } => write!(f, "engine error in {op}: {error}"),
            FailureKind::Hang { seconds } => write!(
                f,
                "hang: no scheduler step for {seconds} s (a thread blocked outside the \
                 scheduler)"
            ),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} [step {}", self.kind, self.step)?;
        if let Some(thread) = self.thread {
            write!(f, ", thread {thread}")?;
        }
        if let Some(op) = self.op {
            write!(f, ", op #{op}")?;
        }
        write!(f, ", t={} us]", self.now_ns / 1000)
    }
}

/// The message of a panic payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".into()
    }
}
