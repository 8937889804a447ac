/*
 * log.c: the daemon's error log.  Every line, from any thread, is one
 * write(2) on an O_APPEND descriptor, so lines never interleave; reopening
 * swaps the file under the same descriptor number with dup2(), so a thread
 * writing at that moment never sees a closed descriptor.
 */
#include "cmd/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int log_fd = STDERR_FILENO;
static char *log_path;
static bool plain; /* -t: bare "file:line:col: message" lines, as compilers print */

static void log_write(enum corral_log_level level, const char *message, void *arg)
{
    (void)arg;
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    char line[1200];
    int n = plain ? snprintf(line, sizeof(line), "%s\n", message)
                  : snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ [%s] %s\n",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, corral_log_level_name(level), message);
    if (n > (int)sizeof(line))
        n = (int)sizeof(line);
    while (write(log_fd, line, (size_t)n) == -1 && errno == EINTR)
        ;
}

int daemon_log_open(const char *path)
{
    if (path != NULL) {
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd == -1)
            return -errno;
        log_fd = fd;
        free(log_path);
        log_path = strdup(path);
    }
    corral_set_logger(log_write, NULL);
    return 0;
}

int daemon_log_reopen(void)
{
    if (log_path == NULL)
        return 0;
    int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd == -1)
        return -errno;
    dup3(fd, log_fd, O_CLOEXEC);
    close(fd);
    return 0;
}

void daemon_log_plain(bool on)
{
    plain = on;
}

