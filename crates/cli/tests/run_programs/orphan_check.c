/* `uswap run` killed under the program: `orphan_check RESULT`. Fills 32 MiB, says "ready",
 * then waits (up to 30 s) until its parent changes (uswap run gone: it is init's now),
 * writes a second pattern over half and checks every word of both (pages go out and come
 * back: the engine inside the program still runs), and writes "bad N" to RESULT. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#define WORDS ((32u << 20) / 8)
static uint64_t pat(size_t i, uint64_t round) { return (i + 1) * 0x9E3779B97F4A7C15ull ^ round; }
int main(int argc, char **argv) {
    if (argc != 2) return 2;
    uint64_t *p = malloc((size_t)WORDS * 8);
    if (!p) return 2;
    for (size_t i = 0; i < WORDS; i++) p[i] = pat(i, 1);
    pid_t parent = getppid();
    printf("ready\n");
    fflush(stdout);
    for (int i = 0; i < 3000 && getppid() == parent; i++) usleep(10000);
    size_t bad = getppid() == parent;
    for (size_t i = 0; i < WORDS / 2; i++) p[i] = pat(i, 2);
    for (size_t i = 0; i < WORDS; i++) bad += p[i] != pat(i, i < WORDS / 2 ? 2 : 1);
    FILE *out = fopen(argv[1], "w");
    if (!out) return 2;
    fprintf(out, "bad %zu\n", bad);
    fclose(out);
    return bad != 0;
}
