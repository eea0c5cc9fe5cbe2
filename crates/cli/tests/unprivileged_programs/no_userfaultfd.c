/* no_userfaultfd CMD ARGS...: runs CMD under a seccomp filter that makes the userfaultfd
 * system call fail with EPERM, as Docker's and containerd's default profiles do (their
 * default action is SCMP_ACT_ERRNO, errno EPERM, and userfaultfd is on no allow list), then
 * execs CMD. Needs no privilege (PR_SET_NO_NEW_PRIVS first). Exit 126 if the filter cannot
 * be installed. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: no_userfaultfd CMD ARGS...\n"); return 2; }
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_userfaultfd, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { sizeof code / sizeof code[0], code };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
        perror("no_userfaultfd: seccomp");
        return 126;
    }
    if (syscall(__NR_userfaultfd, 0) != -1 || errno != EPERM) {
        fprintf(stderr, "no_userfaultfd: the filter let userfaultfd through\n");
        return 126;
    }
    execvp(argv[1], argv + 1);
    perror("no_userfaultfd: exec");
    return 127;
}
