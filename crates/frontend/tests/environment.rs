//! Start-up in a hostile environment: the builder turns the probe's findings into errors
//! that say what to do, before anything is registered.
//!
//! Each case runs in a forked child that changes its own environment (a seccomp filter, a
//! lower user id) and reports through its exit code; the parent checks the code. These
//! children allocate and start threads, which glibc allows after fork (its fork handlers
//! reset the allocator), and end with `_exit`.

mod common;

use frontend::{Error, Uswap, PAGE_SIZE};

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `child` in a forked child; returns its exit code.
fn in_child(child: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child runs `child` and `_exit`s; see the file's doc for what it may do.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)).unwrap_or(99);
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: `status` is a live int; `pid` is our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "child died: status {status:#x}");
    libc::WEXITSTATUS(status)
}

/// Installs a seccomp filter that makes userfaultfd(2) fail with ENOSYS, as Docker's
/// default profile does.
fn block_userfaultfd() -> bool {
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const RET_ERRNO: u32 = 0x0005_0000;
    const RET_ALLOW: u32 = 0x7fff_0000;
    let filter = [
        libc::sock_filter { code: LD_W_ABS, jt: 0, jf: 0, k: 0 }, // seccomp_data.nr
        libc::sock_filter { code: JEQ_K, jt: 0, jf: 1, k: libc::SYS_userfaultfd as u32 },
        libc::sock_filter { code: RET_K, jt: 0, jf: 0, k: RET_ERRNO | libc::ENOSYS as u32 },
        libc::sock_filter { code: RET_K, jt: 0, jf: 0, k: RET_ALLOW },
    ];
    let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr() as *mut _ };
    // SAFETY: prctl with integer arguments, then with a pointer to a live filter program
    // (the kernel copies it).
    unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
            && libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog) == 0
    }
}

#[test]
fn userfaultfd_blocked_by_seccomp_is_a_clear_error() {
    let _serial = serial();
    let code = in_child(|| {
        if !block_userfaultfd() {
            return 2;
        }
        match Uswap::builder().swap_in_memory().build() {
            Err(e @ Error::Kernel(uffd::Error::Blocked { .. }))
                if e.to_string().contains("seccomp") =>
            {
                0
            }
            Err(e) => {
                eprintln!("unexpected error: {e}");
                1
            }
            Ok(_) => 1,
        }
    });
    assert_eq!(code, 0, "the build said Blocked, naming seccomp");
}

#[test]
fn no_permission_for_kernel_faults_is_a_clear_error_unless_waived() {
    let _serial = serial();
    if !root() {
        eprintln!("skipping: needs root to drop to another user");
        return;
    }
    let unprivileged_allowed = std::fs::read_to_string("/proc/sys/vm/unprivileged_userfaultfd")
        .is_ok_and(|v| v.trim() == "1");
    if unprivileged_allowed {
        eprintln!("skipping: vm.unprivileged_userfaultfd=1 lets every user trap kernel faults");
        return;
    }
    let code = in_child(|| {
        // SAFETY: setgid/setuid with integer ids.
        if unsafe { libc::setgid(65534) != 0 || libc::setuid(65534) != 0 } {
            return 2;
        }
        let builder = || Uswap::builder().budget_bytes(4 << 20).swap_in_memory();
        match builder().build() {
            Err(e @ Error::Kernel(uffd::Error::NoKernelFaultPermission { .. }))
                if e.to_string().contains("CAP_SYS_PTRACE") => {}
            Err(e) => {
                eprintln!("unexpected error: {e}");
                return 1;
            }
            Ok(_) => return 1,
        }
        // Waived: a user-mode-only uffd works for the program's own accesses.
        // postmortem: the handler's stale-page check opened /proc/self/pagemap and failed
        // the build here: after setuid the process is not dumpable and may not open it.
        // The handler now runs without the check instead.
        let swap = match builder().require_kernel_faults(false).exclude_from_fork(true).build() {
            Ok(swap) => swap,
            Err(e) => {
                eprintln!("waived build failed: {e}");
                return 3;
            }
        };
        if swap.traps_kernel_faults() {
            return 4;
        }
        let Ok(mut region) = swap.map(4 * PAGE_SIZE) else { return 5 };
        region.as_mut_slice()[PAGE_SIZE] = 42;
        if region.pageout(0, region.len()).is_err() || region.as_slice()[PAGE_SIZE] != 42 {
            return 6;
        }
        0
    });
    assert_eq!(code, 0, "refused twice with the advice, then worked user-mode-only when waived");
}
