/*
 * log.c: the daemon's error log.  Every line, from any thread, is one
 * writev(2) on an O_APPEND descriptor, so lines never interleave; reopening
 * swaps the file under the same descriptor number with dup2(), so a thread
 * writing at that moment never sees a closed descriptor.
 */
#include "cmd/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

static int log_fd = STDERR_FILENO;
static char *log_path;
static bool plain; /* -t: bare "file:line:col: message" lines, as compilers print */

void daemon_log_write(enum corral_log_level level, const char *message, void *arg)
{
    (void)arg;
    /* Only the prefix is formatted, and its fields have bounded widths; the
     * message follows it as it is, so a line of any length keeps its end
     * and its newline. */
    char prefix[CORRAL_LOG_PREFIX_MAX];
    size_t prefix_len = 0;
    if (!plain)
        prefix_len = corral_log_prefix(level, prefix, sizeof(prefix));
    else if (level == CORRAL_LOG_WARN)
        prefix_len = (size_t)snprintf(prefix, sizeof(prefix), "warning: ");
    struct iovec line[] = {
        {prefix, prefix_len},
        {(void *)message, strlen(message)},
        {(void *)"\n", 1},
    };
    /* One writev(2) per line: on an O_APPEND file it lands whole, so lines
     * from several threads never interleave. */
    while (writev(log_fd, line, 3) == -1 && errno == EINTR)
        ;
}

int daemon_log_open(const char *path)
{
    if (path != NULL) {
        char *copy = strdup(path);
        if (copy == NULL)
            return -ENOMEM;
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd == -1) {
            int err = -errno;
            free(copy);
            return err;
        }
        log_fd = fd;
        free(log_path);
        log_path = copy;
    }
    corral_set_logger(daemon_log_write, NULL);
    return 0;
}

int daemon_log_reopen(void)
{
    if (log_path == NULL)
        return 0;
    int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd == -1)
        return -errno;
    int err = dup3(fd, log_fd, O_CLOEXEC) == -1 ? -errno : 0;
    close(fd);
    return err;
}

void daemon_log_plain(bool on)
{
    plain = on;
}
