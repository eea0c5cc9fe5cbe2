/* A daemon's habit: closes the sockets among its descriptors (under uswap run, the shim's
 * connection to its broker) and puts a socket of its own under the same number. After
 * 500 ms (ten of the shim's reports), nothing may have arrived on it, and it must still be
 * open: prints "injected N kept K" (0 and 1 when the shim left it alone). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int main(void) {
    int taken = -1;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return 2;
    struct dirent *e;
    while ((e = readdir(d))) {
        int fd = atoi(e->d_name);
        char path[64], link[64] = {0};
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        if (fd > 2 && fd != dirfd(d) && readlink(path, link, sizeof link - 1) > 0 &&
            strncmp(link, "socket:", 7) == 0 && taken < 0)
            taken = fd;
    }
    closedir(d);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 3;
    if (taken >= 0 && dup2(sv[0], taken) != taken) return 4;
    int mine = taken >= 0 ? taken : sv[0];
    struct timespec t = {0, 500000000L};
    nanosleep(&t, NULL);
    char buf[4096];
    ssize_t got = recv(sv[1], buf, sizeof buf, MSG_DONTWAIT);
    int injected = got > 0 ? (int)got : 0;
    int kept = send(mine, "x", 1, MSG_NOSIGNAL) == 1 && recv(sv[1], buf, 1, 0) == 1;
    printf("socket %d injected %d kept %d\n", taken, injected, kept);
    return 0;
}
