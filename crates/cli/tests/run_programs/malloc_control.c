/* The control of the malloc check: a thread that names itself like an engine thread
 * ("uswap-control") calls malloc while the shim manages the program: the interposer must
 * count it (run.rs, the zstd test). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static void *work(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "uswap-control");
    char *volatile p = malloc(4321);
    if (p) memset(p, 1, 4321);
    free(p);
    return NULL;
}
int main(void) {
    pthread_t th;
    if (pthread_create(&th, NULL, work, NULL) != 0) return 2;
    pthread_join(th, NULL);
    puts("control ok");
    return 0;
}
