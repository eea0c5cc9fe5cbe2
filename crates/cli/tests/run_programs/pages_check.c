/* Fills argv[1] MiB with pseudo-random pages (each derived from its index, so nothing
 * compresses: the pages leave the pool for the swap device), says "ready", then for each
 * line on stdin: "check" verifies every page and says "verified"; "fork" forks a child
 * that verifies every page, and a grandchild of it that does too, and says "forked
 * verified" (or "forked bad STATUS"); "exit" says "ok" and exits 0. A page that reads
 * wrong ends it with status 1 and a message: wrong data is never taken for right. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#define PG 4096u
static void fill(uint64_t *page, uint64_t pg) {
    uint64_t x = pg * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < PG / 8; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        page[i] = x;
    }
}
static int verify(const unsigned char *p, size_t bytes) {
    uint64_t want[PG / 8];
    for (size_t pg = 0; pg < bytes / PG; pg++) {
        fill(want, pg);
        if (memcmp(p + pg * PG, want, PG) != 0) {
            fprintf(stderr, "pages_check: page %zu is wrong in pid %d\n", pg, (int)getpid());
            return 1;
        }
    }
    return 0;
}
/* A child that verifies, then forks a grandchild that verifies. Returns the wait status. */
static int forked_verify(const unsigned char *p, size_t bytes, int depth) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (verify(p, bytes)) _exit(1);
        if (depth > 1) {
            int status = forked_verify(p, bytes, depth - 1);
            _exit(WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 3);
        }
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
}
int main(int argc, char **argv) {
    if (argc != 2) return 2;
    size_t bytes = strtoull(argv[1], NULL, 10) << 20;
    unsigned char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                            -1, 0);
    if (p == MAP_FAILED) return 2;
    for (size_t pg = 0; pg < bytes / PG; pg++) fill((uint64_t *)(p + pg * PG), pg);
    printf("ready\n");
    fflush(stdout);
    char line[32];
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "exit", 4) == 0) break;
        if (strncmp(line, "fork", 4) == 0) {
            int status = forked_verify(p, bytes, 2);
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0) printf("forked verified\n");
            else printf("forked bad %x\n", status);
            fflush(stdout);
            continue;
        }
        if (verify(p, bytes)) return 1;
        printf("verified\n");
        fflush(stdout);
    }
    printf("ok\n");
    return 0;
}
