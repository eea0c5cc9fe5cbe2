/* Mappings that fill a region's hole and reach past the region's edge
 * (crates/engine/src/region.rs, holes; crates/preload/src/maps.rs, cut_at): a 96 MiB
 * region made inside an unmanaged PROT_NONE reservation; its first 16 MiB and its last 32
 * MiB unmapped; then 32 MiB mapped over [start - 16 MiB, start + 16 MiB) and 64 MiB over
 * [start + 64 MiB, start + 128 MiB), each half in the hole and half in the reservation
 * beyond the region (MAP_FIXED over PROT_NONE, which is not managed). A page below each
 * mapping is left unmapped: under SIGBUS delivery a writable mapping right above an
 * inaccessible one is taken for a thread's stack and left unmanaged (preload's maps.rs,
 * `candidates`). Under a budget
 * smaller than what is written, every part must be managed: the hole's part by the old
 * region, the part beyond by a new one. Two rounds of writing the new mappings and
 * checking every page, the old region's live part too.
 * Exit 0 when all agree. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#define MIB (1024ul * 1024ul)
#define PG 4096ul
static unsigned char val(size_t pg, unsigned tag) { return (unsigned char)((pg * 7 + tag) % 251 + 1); }
static void fill(unsigned char *p, size_t len, unsigned tag) {
    for (size_t pg = 0; pg < len / PG; pg++) memset(p + pg * PG, val(pg, tag), PG);
}
/* Checks `len` bytes at `p`, written by a fill whose first page was `first` pages before. */
static size_t check(const unsigned char *p, size_t len, unsigned tag, size_t first) {
    size_t bad = 0;
    for (size_t pg = 0; pg < len / PG; pg++)
        for (size_t i = 0; i < PG; i += 256) bad += p[pg * PG + i] != val(first + pg, tag);
    return bad;
}
int main(void) {
    const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
    unsigned char *res = mmap(NULL, 192 * MIB, PROT_NONE, flags | MAP_NORESERVE, -1, 0);
    if (res == MAP_FAILED) { perror("mmap reservation"); return 2; }
    /* The pages below the region and below the head mapping made later, left free (see
     * above). */
    if (munmap(res + 48 * MIB - PG, PG) || munmap(res + 32 * MIB - PG, PG)) {
        perror("munmap gaps");
        return 2;
    }
    unsigned char *a = mmap(res + 48 * MIB, 96 * MIB, prot, flags | MAP_FIXED, -1, 0);
    if (a != res + 48 * MIB) { perror("mmap region"); return 2; }
    fill(a, 96 * MIB, 1);
    if (munmap(a, 16 * MIB) || munmap(a + 64 * MIB, 32 * MIB)) { perror("munmap"); return 2; }
    unsigned char *head = mmap(a - 16 * MIB, 32 * MIB, prot, flags | MAP_FIXED, -1, 0);
    unsigned char *tail = mmap(a + 64 * MIB, 64 * MIB, prot, flags | MAP_FIXED, -1, 0);
    if (head != a - 16 * MIB || tail != a + 64 * MIB) { perror("mmap over"); return 2; }
    size_t bad = 0, checked = 0;
    for (unsigned round = 2; round <= 3; round++) {
        fill(head, 32 * MIB, round);
        fill(tail, 64 * MIB, round + 10);
        bad += check(head, 32 * MIB, round, 0) + check(tail, 64 * MIB, round + 10, 0);
        bad += check(a + 16 * MIB, 48 * MIB, 1, 16 * MIB / PG);
        checked += (32 + 64 + 48) * MIB / PG;
    }
    printf("holes filled past the region's edges: %zu pages checked, %zu bad\n", checked, bad);
    return bad != 0;
}
