/* What a forked child's fault costs under each delivery of `uswap run`: the parent fills
 * 256 MiB, reads one byte of every page in a scattered order (timed), forks, and the child
 * reads the same pages again (timed); under a small budget nearly every read is a fault.
 * The child runs a swap of its own under the same budget, started at its fork, and pages
 * out as it reads.
 *   gcc -O2 -o /tmp/child_faults bench/probes/child_faults.c
 *   uswap run --budget 32M --folio-order 0 --delivery sigbus -- /tmp/child_faults */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#define N (256u << 20)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(void) {
    unsigned char *p = malloc(N);
    for (size_t i = 0; i < N; i++) p[i] = (unsigned char)(i * 31 + (i >> 12) * 7 + 1);
    double t0 = now();
    unsigned s = 0;
    for (size_t i = 0; i < N; i += 4096) s += p[(i * 7919) % N & ~4095ul];
    double parent = now() - t0;
    pid_t c = fork();
    if (c == 0) {
        double t1 = now();
        unsigned x = 0;
        for (size_t i = 0; i < N; i += 4096) x += p[(i * 7919) % N & ~4095ul];
        printf("child reads 256 MiB at random: %.3f s (%u)\n", now() - t1, x);
        fflush(stdout); _exit(0);
    }
    int st; waitpid(c, &st, 0);
    printf("parent reads 256 MiB at random: %.3f s (%u)\n", parent, s);
    return 0;
}
