/* Frees a low descriptor and takes the number back, as shells and daemons do, again and
 * again for SECONDS, while uswap's threads do their file work (the stats files every
 * 10 ms under `--stats-every 0.01`): `fd_reuse DIR SECONDS [fork]`.
 *
 *   redirect   a shell's `echo x >> DIR/out`: fd 1 saved above 10, closed, the file
 *              dup2'd onto 1, one byte written through 1, fd 1 restored
 *   reopen     `close(0); open(DIR/in)`, which must return 0
 *
 * Each number stays free for 50 us, so a descriptor opened by another thread of the
 * process in that moment takes it. Prints "fd_reuse: bad N of M" (a write through 1 that
 * failed or went elsewhere, an open that did not return 0) on stderr, and exits 0 when N is 0 and
 * DIR/out holds one byte a round. With `fork`, a forked child (a shell's subshell) does the
 * rounds, writing through 16 MiB of its heap (malloc's brk heap) between them so that its engine pages out
 * all along, and the parent exits with the child's status. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void spin(double secs) {
    double until = now() + secs;
    while (now() < until) {
    }
}

static int same_file(int fd, const struct stat *want) {
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_dev == want->st_dev && st.st_ino == want->st_ino;
}

int main(int argc, char **argv) {
    int forked = argc == 4 && strcmp(argv[3], "fork") == 0;
    if (argc != 3 && !forked) {
        fprintf(stderr, "usage: fd_reuse DIR SECONDS [fork]\n");
        return 2;
    }
    /* The child's data, in chunks small enough for malloc's brk heap, where glibc also
     * puts what a new thread needs. */
    enum { CHUNKS = 4096, CHUNK = 4000 };
    char **heap = NULL;
    size_t cursor = 0;
    if (forked) {
        pid_t child = fork();
        if (child < 0) {
            perror("fork");
            return 2;
        }
        if (child > 0) {
            int status;
            if (waitpid(child, &status, 0) != child || !WIFEXITED(status))
                return 2;
            return WEXITSTATUS(status);
        }
        heap = calloc(CHUNKS, sizeof *heap);
        for (size_t i = 0; heap != NULL && i < CHUNKS; i++)
            if ((heap[i] = malloc(CHUNK)) == NULL)
                return 2;
        if (heap == NULL)
            return 2;
    }
    char out_path[4096], in_path[4096];
    snprintf(out_path, sizeof out_path, "%s/out", argv[1]);
    snprintf(in_path, sizeof in_path, "%s/in", argv[1]);
    int in = open(in_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    struct stat in_st, out_st;
    if (in < 0 || fstat(in, &in_st) != 0) {
        perror("in");
        return 2;
    }
    close(in);
    double secs = atof(argv[2]), t0 = now();
    long rounds = 0, bad = 0;
    while (now() - t0 < secs) {
        int out = open(out_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (out < 0 || fstat(out, &out_st) != 0) {
            perror("out");
            return 2;
        }
        int saved = fcntl(1, F_DUPFD, 10);
        close(1);
        spin(50e-6);
        dup2(out, 1);
        close(out);
        spin(50e-6);
        if (!same_file(1, &out_st) || write(1, "x", 1) != 1)
            bad++;
        dup2(saved, 1);
        close(saved);

        saved = fcntl(0, F_DUPFD, 10);
        close(0);
        spin(50e-6);
        int got = open(in_path, O_RDONLY);
        spin(50e-6);
        if (got != 0 || !same_file(0, &in_st))
            bad++;
        if (got > 0)
            close(got);
        dup2(saved, 0);
        close(saved);
        rounds++;
        for (size_t i = 0; heap != NULL && i < 64; i++, cursor = (cursor + 1) % CHUNKS)
            heap[cursor][0] = (char)rounds;
    }
    struct stat st;
    if (stat(out_path, &st) != 0 || st.st_size != rounds)
        bad++;
    fprintf(stderr, "fd_reuse: bad %ld of %ld\n", bad, rounds);
    return bad != 0;
}
