/* Writes over its own environment, as redis's process title does (setproctitle takes the
 * argv and environ memory), after filling 16 MiB; prints its pid and waits until stdin
 * closes. `uswap stat` must still find its live figures. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
extern char **environ;
int main(void) {
    size_t n = 16u << 20;
    unsigned char *p = malloc(n);
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 3 + (i >> 12));
    char *first = environ[0], *end = first;
    for (char **e = environ; *e; e++) end = *e + strlen(*e);
    memset(first, 'x', (size_t)(end - first));
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) {}
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 3 + (i >> 12))) return 1;
    return 0;
}
