/* A forked child that closes every inherited descriptor and puts a file of its own under
 * every number from 3 to 255 (as a daemon does after its fork), then reads its parent's
 * 32 MiB, mostly swapped out, through the swap its fork started, whose descriptors must
 * survive the closing and never be written through once reused: the file must stay empty.
 * Prints a line; exits 0 when every byte is right and the file is empty. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#define N (32u << 20)
static unsigned char pat(size_t i) { return (unsigned char)(i * 11 + (i >> 12) * 13 + 7); }
int main(void) {
    unsigned char *p = malloc(N);
    for (size_t i = 0; i < N; i++) p[i] = pat(i);
    char path[] = "/tmp/fork_closefds.XXXXXX";
    int probe = mkstemp(path);
    if (probe < 0) { perror("mkstemp"); return 1; }
    close(probe);
    pid_t pid = fork();
    if (pid == 0) {
        for (int fd = 3; fd < 256; fd++) close(fd);
        int own = open(path, O_RDWR | O_APPEND);
        if (own < 0) _exit(2);
        for (int fd = 3; fd < 256; fd++) if (fd != own) dup2(own, fd);
        for (size_t i = 0; i < N; i++) if (p[i] != pat(i)) _exit(3);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    struct stat st;
    if (stat(path, &st)) { perror("stat"); return 1; }
    unlink(path);
    int child = WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
    printf("closefds: child %d, its file %lld bytes\n", child, (long long)st.st_size);
    return child != 0 || st.st_size != 0;
}
