/* Forks 300 children that read 24 MiB, mostly swapped out, and kills each within 1 ms,
 * while the parent rewrites some of its pages; then one more child reads all of it. Each
 * child starts a swap of its own at its fork and dies in the middle of it or of its
 * faults; the parent releases the slots it kept for it when it is gone. Prints a line;
 * exits 0. */
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <unistd.h>
#include <time.h>
#include <sys/wait.h>
#define N (24u << 20)
static unsigned char pat(size_t i) { return (unsigned char)(i * 31 + (i >> 12) * 7 + 1); }
static int check(const unsigned char *p) { for (size_t i = 0; i < N; i++) if (p[i] != pat(i)) return 1; return 0; }
int main(void) {
    unsigned char *p = malloc(N);
    for (size_t i = 0; i < N; i++) p[i] = pat(i);
    int killed = 0;
    for (int r = 0; r < 300; r++) {
        pid_t c = fork();
        if (c == 0) { _exit(check(p)); }
        struct timespec ts = {0, 200000 + (r % 7) * 100000};
        nanosleep(&ts, NULL);
        kill(c, SIGKILL);
        int st; waitpid(c, &st, 0);
        if (WIFSIGNALED(st)) killed++;
        for (size_t i = (r * 4096 * 97) % N; i < N; i += 4096 * 13) p[i] = pat(i); /* churn */
    }
    pid_t c = fork();
    if (c == 0) _exit(check(p));
    int st; waitpid(c, &st, 0);
    printf("killed %d, last child %d, parent %d\n", killed, WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st), check(p));
    return 0;
}
