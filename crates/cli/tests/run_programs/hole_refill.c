/* A mapping made where the program unmapped the tail of an older one, while the rest of
 * that one lives on (crates/engine/src/region.rs, holes): 64 MiB mapped, its first 16 MiB
 * written, its last 48 MiB unmapped, and 48 MiB mapped again at that address (the hint is
 * free, so the kernel takes it) and written. Under a budget smaller than what is written,
 * the new mapping must be managed like any other: its pages go out and come back. Every
 * page is checked. Exit 0 when all agree. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#define MIB (1024ul * 1024ul)
#define PG 4096ul
static unsigned char val(size_t pg, unsigned tag) { return (unsigned char)((pg * 7 + tag) % 251 + 1); }
static void fill(unsigned char *p, size_t len, unsigned tag) {
    for (size_t pg = 0; pg < len / PG; pg++) memset(p + pg * PG, val(pg, tag), PG);
}
static size_t check(const unsigned char *p, size_t len, unsigned tag) {
    size_t bad = 0;
    for (size_t pg = 0; pg < len / PG; pg++)
        for (size_t i = 0; i < PG; i += 256) bad += p[pg * PG + i] != val(pg, tag);
    return bad;
}
int main(void) {
    const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
    unsigned char *a = mmap(NULL, 64 * MIB, prot, flags, -1, 0);
    if (a == MAP_FAILED) { perror("mmap"); return 2; }
    fill(a, 16 * MIB, 1);
    if (munmap(a + 16 * MIB, 48 * MIB)) { perror("munmap"); return 2; }
    unsigned char *b = mmap(a + 16 * MIB, 48 * MIB, prot, flags, -1, 0);
    if (b == MAP_FAILED) { perror("mmap"); return 2; }
    if (b != a + 16 * MIB) { printf("the new mapping is not in the hole\n"); return 3; }
    fill(b, 48 * MIB, 2);
    size_t bad = check(a, 16 * MIB, 1) + check(b, 48 * MIB, 2);
    printf("hole refilled: %zu pages checked, %zu bad\n", (64 * MIB) / PG, bad);
    return bad != 0;
}
