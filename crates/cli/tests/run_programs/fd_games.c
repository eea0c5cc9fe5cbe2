/* What programs do to their own descriptor table, in the middle of a run that pages out
 * far more than its budget: `fd_games MODE DIR`.
 *
 * Writes a pattern over 64 MiB of the heap, plays MODE, opens eight files of its own in DIR
 * (f0..f7: they take the lowest free numbers, where uswap's descriptors once sat), then
 * writes a second pattern over half of it and checks every word of both, so pages go out
 * to the swap file and come back after the game. It never writes to its files: the test
 * checks that they are empty.
 *
 *   closefrom     closefrom(3)
 *   close_range   close_range(3, ~0U, 0)
 *   close_loop    close() of every number from 3 to the soft limit
 *   dup2_low      f0 dup2'd onto every number from 3 to 255
 *   dup2_ours     f0 dup2'd onto every number the program did not open (/proc/self/fd):
 *                 uswap's own
 *   raw_swap      the swap file's descriptor closed with syscall(SYS_close), and f8 put at
 *                 its number with syscall(SYS_dup3): past the shim's interposers
 *   raw_uffd      the same with the first userfaultfd (the one serving the program's memory)
 *
 * Prints "fd_games MODE: bad N of M words, K numbers touched" and exits 0 when N is 0. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define WORDS ((64u << 20) / 8)

static uint64_t pat(size_t i, uint64_t round) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ round * 0xD1B54A32D192ED03ull;
    x ^= x >> 31;
    return x * 0xBF58476D1CE4E5B9ull;
}

static int open_file(const char *dir, int k) {
    char path[4096];
    snprintf(path, sizeof path, "%s/f%d", dir, k);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) { perror(path); exit(2); }
    return fd;
}

/* Numbers open now that are not 0-2, not `except`, not the directory scan's own. */
static int others(int *out, int max, int except) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) { perror("opendir"); exit(2); }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] == '.' || fd <= 2 || fd == dirfd(d) || fd == except) continue;
        out[n++] = fd;
    }
    closedir(d);
    return n;
}

/* Whether a /proc/self/fd link is uswap's swap file: a named one (`--swap-file`, or where
 * O_TMPFILE is refused) ends in .swap; a nameless one (O_TMPFILE) reads "DIR/#INODE
 * (deleted)". */
static int is_swap(const char *target) {
    return strstr(target, ".swap") || (strstr(target, "/#") && strstr(target, " (deleted)"));
}

/* The lowest-numbered descriptor whose /proc/self/fd link contains `what` (NULL: the swap
 * file). */
static int find_fd(const char *what) {
    int fds[64], n = others(fds, 64, -1), found = -1;
    for (int i = 0; i < n; i++) {
        char path[64], target[4096];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fds[i]);
        ssize_t len = readlink(path, target, sizeof target - 1);
        if (len <= 0) continue;
        target[len] = 0;
        int match = what ? strstr(target, what) != NULL : is_swap(target);
        if (match && (found < 0 || fds[i] < found)) found = fds[i];
    }
    return found;
}

static int game(const char *mode, const char *dir) {
    int touched = 0;
    if (!strcmp(mode, "closefrom")) {
        closefrom(3);
    } else if (!strcmp(mode, "close_range")) {
        if (close_range(3, ~0U, 0)) { perror("close_range"); exit(2); }
    } else if (!strcmp(mode, "close_loop")) {
        struct rlimit rl;
        getrlimit(RLIMIT_NOFILE, &rl);
        for (int fd = 3; fd < (int)rl.rlim_cur; fd++) touched += close(fd) == 0;
    } else if (!strcmp(mode, "dup2_low")) {
        int own = open_file(dir, 8);
        for (int fd = 3; fd < 256; fd++) if (fd != own) touched += dup2(own, fd) == fd;
    } else if (!strcmp(mode, "dup2_ours")) {
        int own = open_file(dir, 8), fds[256], n = others(fds, 256, own);
        for (int i = 0; i < n; i++) touched += dup2(own, fds[i]) == fds[i];
    } else if (!strcmp(mode, "raw_swap") || !strcmp(mode, "raw_uffd")) {
        int own = open_file(dir, 8);
        int fd = find_fd(!strcmp(mode, "raw_swap") ? NULL : "[userfaultfd]");
        if (fd < 0) { fprintf(stderr, "no such descriptor\n"); exit(2); }
        syscall(SYS_close, fd);
        touched += syscall(SYS_dup3, own, fd, 0) == fd;
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        exit(2);
    }
    return touched;
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: fd_games MODE DIR\n"); return 2; }
    uint64_t *p = malloc((size_t)WORDS * 8);
    if (!p) return 2;
    for (size_t i = 0; i < WORDS; i++) p[i] = pat(i, 1);
    int touched = game(argv[1], argv[2]);
    for (int k = 0; k < 8; k++) open_file(argv[2], k);
    size_t bad = 0;
    for (size_t i = 0; i < WORDS; i++) bad += p[i] != pat(i, 1);
    for (size_t i = 0; i < WORDS / 2; i++) p[i] = pat(i, 2);
    for (size_t i = 0; i < WORDS; i++) bad += p[i] != pat(i, i < WORDS / 2 ? 2 : 1);
    printf("fd_games %s: bad %zu of %u words, %d numbers touched\n", argv[1], bad, 2 * WORDS,
           touched);
    return bad != 0;
}
