/* Fills argv[1] MiB with pseudo-random pages (each derived from its index, so nothing
 * compresses: the pages leave the pool for the swap device), says "ready", then for each
 * line on stdin: "check" verifies every page and says "verified"; "exit" says "ok" and
 * exits 0. A page that reads wrong ends it with status 1 and a message: wrong data is never
 * taken for right. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#define PG 4096u
static void fill(uint64_t *page, uint64_t pg) {
    uint64_t x = pg * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < PG / 8; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        page[i] = x;
    }
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
    uint64_t want[PG / 8];
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "exit", 4) == 0) break;
        for (size_t pg = 0; pg < bytes / PG; pg++) {
            fill(want, pg);
            if (memcmp(p + pg * PG, want, PG) != 0) {
                fprintf(stderr, "pages_check: page %zu is wrong\n", pg);
                return 1;
            }
        }
        printf("verified\n");
        fflush(stdout);
    }
    printf("ok\n");
    return 0;
}
