/* Fills 48 MiB (most of it evicted under a small budget), forks; the child forks a
 * grandchild at once (its own FORK event while its parent's may be unprocessed), and each
 * checks every byte of the parent's data (served through the parent's handler, EVENT_FORK),
 * including through write(2) from the buffer (a kernel-mode fault), then changes its copy;
 * the parent checks its own copy is unchanged. Exit 0 when all agree. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#define N (48u << 20)
static unsigned char pat(size_t i) { return (unsigned char)(i * 31 + (i >> 12) * 7 + 1); }
static int check(const unsigned char *p, const char *who) {
    for (size_t i = 0; i < N; i++)
        if (p[i] != pat(i)) { fprintf(stderr, "%s: byte %zu is %u, not %u\n", who, i, p[i], pat(i)); return 1; }
    return 0;
}
int main(void) {
    unsigned char *p = malloc(N);
    for (size_t i = 0; i < N; i++) p[i] = pat(i);
    pid_t pid = fork();
    if (pid == 0) {
        pid_t grandchild = fork();
        int fds[2];
        if (pipe(fds) || write(fds[1], p + 4096 * 7, 4096) != 4096) _exit(3);
        unsigned char back[4096];
        if (read(fds[0], back, 4096) != 4096 || memcmp(back, p + 4096 * 7, 4096)) _exit(4);
        int bad = check(p, grandchild == 0 ? "grandchild" : "child");
        memset(p, 0xee, N / 2);
        if (grandchild == 0) _exit(bad ? 1 : 0);
        int gst = 0;
        if (grandchild < 0 || waitpid(grandchild, &gst, 0) != grandchild) _exit(5);
        if (!WIFEXITED(gst)) _exit(100 + WTERMSIG(gst));
        _exit(bad ? 1 : WEXITSTATUS(gst) ? 10 + WEXITSTATUS(gst) : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    int bad = check(p, "parent");
    printf("child %d parent %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status), bad);
    return (WIFEXITED(status) && WEXITSTATUS(status) == 0 && !bad) ? 0 : 1;
}
