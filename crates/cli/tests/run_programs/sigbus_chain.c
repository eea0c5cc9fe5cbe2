/* A program with a SIGBUS handler of its own (as servers install for crash reports): it
 * installs one, fills 32 MiB (most of it swapped out under a small budget) and checks it,
 * then takes a SIGBUS of its own (a touch past the end of a one-page file mapping), which
 * must reach its handler; then a forked child does both again (its own swap resolves its
 * faults and passes the file's SIGBUS on). Under `uswap run --delivery sigbus` the shim keeps its own SIGBUS handler
 * installed and passes the program's SIGBUS on. Prints a line, exits 0 when all agree. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#define N (32u << 20)
static sigjmp_buf back;
static volatile sig_atomic_t caught, code;
static void own(int sig, siginfo_t *info, void *ctx) {
    (void)sig; (void)ctx;
    caught++;
    code = info->si_code;
    siglongjmp(back, 1);
}
static unsigned char pat(size_t i) { return (unsigned char)(i * 13 + (i >> 12) * 5 + 3); }
int main(void) {
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = own;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, NULL)) { perror("sigaction"); return 1; }
    if (sigaction(SIGBUS, NULL, &old) || old.sa_sigaction != own) { fprintf(stderr, "reads back another handler\n"); return 2; }
    unsigned char *p = malloc(N);
    for (size_t i = 0; i < N; i++) p[i] = pat(i);
    for (size_t i = 0; i < N; i++) if (p[i] != pat(i)) { fprintf(stderr, "byte %zu is %u, not %u\n", i, p[i], pat(i)); return 3; }
    if (caught) { fprintf(stderr, "own handler called %d times for managed memory\n", (int)caught); return 4; }
    char path[] = "/tmp/sigbus_chain.XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || ftruncate(fd, 4096)) { perror("file"); return 1; }
    unlink(path);
    volatile char *m = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) { perror("mmap"); return 1; }
    if (!sigsetjmp(back, 1)) {
        (void)m[4096]; /* past the end of the file: SIGBUS */
        fprintf(stderr, "no SIGBUS past the end of the file\n");
        return 5;
    }
    if (caught != 1 || code != BUS_ADRERR) { fprintf(stderr, "caught %d, si_code %d\n", (int)caught, (int)code); return 6; }
    for (size_t i = 0; i < N; i += 4096) if (p[i] != pat(i)) { fprintf(stderr, "after: byte %zu\n", i); return 7; }
    pid_t pid = fork();
    if (pid == 0) {
        for (size_t i = 0; i < N; i++) if (p[i] != pat(i)) _exit(20);
        if (!sigsetjmp(back, 1)) { (void)m[4096]; _exit(21); }
        _exit(caught == 2 && code == BUS_ADRERR ? 0 : 22);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
        fprintf(stderr, "the forked child: status %#x\n", st);
        return 8;
    }
    printf("sigbus_chain: own handler called once, for its own SIGBUS; 32 MiB checked; the same in a forked child\n");
    return 0;
}
