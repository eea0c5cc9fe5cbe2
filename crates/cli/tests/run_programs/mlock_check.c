/* mlockall in a program under uswap run: `mlock_check`. Fills 48 MiB (most of it goes out
 * under the test's 16M), calls mlockall(MCL_CURRENT | MCL_FUTURE), checks every word, maps
 * and fills 8 MiB more (locked as it is mapped), checks again, and prints "mlock: bad N,
 * locked L MiB, resident R MiB" from /proc/self/status; then unlocks, fills 16 MiB more
 * and checks everything again ("unlocked: bad N"). Exits 0 when N is 0. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#define WORDS ((48u << 20) / 8)
#define MORE ((8u << 20) / 8)
static uint64_t pat(size_t i) { return (i + 1) * 0x9E3779B97F4A7C15ull; }
static long status_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, strlen(key))) kib = atol(line + strlen(key));
    if (f) fclose(f);
    return kib;
}
int main(void) {
    uint64_t *p = malloc((size_t)WORDS * 8);
    if (!p) return 2;
    for (size_t i = 0; i < WORDS; i++) p[i] = pat(i);
    if (mlockall(MCL_CURRENT | MCL_FUTURE)) { perror("mlockall"); return 2; }
    size_t bad = 0;
    for (size_t i = 0; i < WORDS; i++) bad += p[i] != pat(i);
    uint64_t *q = mmap(NULL, (size_t)MORE * 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q == MAP_FAILED) return 2;
    for (size_t i = 0; i < MORE; i++) q[i] = pat(i + WORDS);
    for (size_t i = 0; i < WORDS; i++) bad += p[i] != pat(i);
    for (size_t i = 0; i < MORE; i++) bad += q[i] != pat(i + WORDS);
    printf("mlock: bad %zu, locked %ld MiB, resident %ld MiB\n", bad, status_kib("VmLck:") >> 10,
           status_kib("VmRSS:") >> 10);
    fflush(stdout);
    /* Unlocked, the engine pages out again through staging slots the call filled: every
     * word must still read back, and 16 MiB more with them. */
    munlockall();
    uint64_t *r = mmap(NULL, (size_t)MORE * 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) return 2;
    for (size_t i = 0; i < MORE * 2; i++) r[i] = pat(i + 2 * WORDS);
    for (size_t i = 0; i < WORDS; i++) bad += p[i] != pat(i);
    for (size_t i = 0; i < MORE * 2; i++) bad += r[i] != pat(i + 2 * WORDS);
    printf("unlocked: bad %zu\n", bad);
    return bad != 0;
}
