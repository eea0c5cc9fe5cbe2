/* Prints whether the uswap shim manages this process ("managing 1") or not ("managing 0",
 * also without the shim), then allocates and checks 16 MiB and sleeps `argv[1]` ms, so
 * that a broker's scans see it. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv) {
    int (*managing)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "uswap_shim_managing");
    printf("managing %d\n", managing ? managing() : 0);
    fflush(stdout);
    size_t n = 16u << 20;
    unsigned char *p = malloc(n);
    if (!p) return 2;
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 7);
    long ms = argc > 1 ? atol(argv[1]) : 0;
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 7)) return 3;
    return 0;
}
