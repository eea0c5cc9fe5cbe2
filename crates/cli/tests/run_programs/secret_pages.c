/* Writes a secret (argv[1]) into every page of argv[2] MiB, a page index beside each copy,
 * says "ready" on stdout and waits for a line on stdin (while the test reads the swap
 * file), then checks every page and exits 0 when all are intact. Its pages are paged out
 * under the test's small budget, to the swap file (no pool). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#define PG 4096u
static void fill(unsigned char *page, size_t pg, const char *secret, size_t len) {
    for (size_t off = 0; off + len + 16 <= PG; off += len + 16) {
        memcpy(page + off, secret, len);
        snprintf((char *)page + off + len, 16, "#%014zu", pg);
    }
}
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    const char *secret = argv[1];
    size_t len = strlen(secret), bytes = strtoull(argv[2], NULL, 10) << 20;
    if (len == 0 || len > 256) return 2;
    unsigned char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                            -1, 0);
    if (p == MAP_FAILED) return 2;
    for (size_t pg = 0; pg < bytes / PG; pg++) fill(p + pg * PG, pg, secret, len);
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 3;
    unsigned char want[PG];
    for (size_t pg = 0; pg < bytes / PG; pg++) {
        memset(want, 0, PG);
        fill(want, pg, secret, len);
        if (memcmp(p + pg * PG, want, PG) != 0) {
            fprintf(stderr, "secret_pages: page %zu is wrong\n", pg);
            return 1;
        }
    }
    printf("ok\n");
    return 0;
}
