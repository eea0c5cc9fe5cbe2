/* Fills 24 MiB, then execs itself; the new image (a fresh engine) fills and checks its own
 * 24 MiB and exits 5 (the code uswap run must pass on). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define N (24u << 20)
int main(int argc, char **argv) {
    unsigned char *p = malloc(N);
    for (size_t i = 0; i < N; i++) p[i] = (unsigned char)(i * 13 + (i >> 12));
    for (size_t i = 0; i < N; i++) if (p[i] != (unsigned char)(i * 13 + (i >> 12))) return 1;
    if (argc < 2) {
        execl("/proc/self/exe", argv[0], "again", (char *)NULL);
        return 2;
    }
    printf("exec ok\n");
    return 5;
}
