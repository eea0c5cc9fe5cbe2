/* 8 threads each fill 12 MiB with their own pattern and check it over several rounds. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#define N (12u << 20)
static void *work(void *arg) {
    unsigned t = (unsigned)(size_t)arg;
    unsigned char *p = malloc(N);
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < N; i++) p[i] = (unsigned char)(i * (t + 3) + round + (i >> 12));
        for (size_t i = 0; i < N; i++)
            if (p[i] != (unsigned char)(i * (t + 3) + round + (i >> 12))) return (void *)1;
    }
    free(p);
    return NULL;
}
int main(void) {
    pthread_t th[8];
    for (size_t i = 0; i < 8; i++) pthread_create(&th[i], NULL, work, (void *)i);
    int bad = 0;
    for (int i = 0; i < 8; i++) { void *r; pthread_join(th[i], &r); bad |= r != NULL; }
    printf("%s\n", bad ? "mismatch" : "ok");
    return bad;
}
