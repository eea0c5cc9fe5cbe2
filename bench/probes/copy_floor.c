/* The floor under an order-4 page-in from a raw pool: copying 16 cold 4 KiB pages into one
 * cold 64 KiB folio, with nothing else, per page. 32768 pages (128 MiB, past the L3) each
 * side; 64 MiB written between rounds to push both out of the caches. Sources in address
 * order (as a fresh pool lays a folio's pages out) or shuffled; base pages, or both sides
 * advised MADV_HUGEPAGE (as the pool's chunks and `uswap bench engine`'s frames are).
 * Build and run: gcc -O2 -o /tmp/copy_floor bench/probes/copy_floor.c && /tmp/copy_floor
 * (docs/benchmarks.md, "Full zspages unlisted"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define PAGE 4096
#define PAGES 32768
#define FOLIO 16
#define ROUNDS 5
#define JUNK (64 << 20)

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void run(int shuffled, int huge) {
    size_t bytes = (size_t)PAGES * PAGE;
    char *src = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *dst = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *junk = malloc(JUNK);
    size_t *order = malloc(PAGES * sizeof *order);
    if (src == MAP_FAILED || dst == MAP_FAILED || !junk || !order) {
        perror("memory");
        exit(1);
    }
    if (huge) {
        madvise(src, bytes, MADV_HUGEPAGE);
        madvise(dst, bytes, MADV_HUGEPAGE);
    }
    memset(src, 1, bytes);
    memset(dst, 2, bytes);
    for (size_t i = 0; i < PAGES; i++)
        order[i] = i;
    srand(1);
    for (size_t i = PAGES - 1; shuffled && i > 0; i--) {
        size_t j = (size_t)rand() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    double best = 1e18;
    for (int round = 0; round < ROUNDS; round++) {
        memset(junk, round, JUNK);
        double start = now_ns();
        for (size_t folio = 0; folio < PAGES / FOLIO; folio++)
            for (size_t i = 0; i < FOLIO; i++) {
                size_t page = folio * FOLIO + i;
                memcpy(dst + page * PAGE, src + order[page] * PAGE, PAGE);
            }
        double per_page = (now_ns() - start) / PAGES;
        best = per_page < best ? per_page : best;
    }
    printf("%-9s %-11s %6.0f ns a page (best of %d)\n", shuffled ? "shuffled" : "in order",
           huge ? "huge pages" : "base pages", best, ROUNDS);
    munmap(src, bytes);
    munmap(dst, bytes);
    free(junk);
    free(order);
}

int main(void) {
    for (int huge = 0; huge < 2; huge++)
        for (int shuffled = 0; shuffled < 2; shuffled++)
            run(shuffled, huge);
    return 0;
}
