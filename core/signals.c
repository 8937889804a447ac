/*
 * signals.c: process signals as loop events.  The signals are blocked and
 * read from a signalfd, so handlers run as ordinary callbacks on the loop's
 * thread instead of interrupting whatever code happens to be running.
 */
#include "internal.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

struct corral_signals {
    int fd;
    corral_io *io;
    sigset_t previous_mask;
    corral_signals_cb cb;
    void *arg;
};

static void signals_on_readable(corral_io *io, unsigned events, void *arg)
{
    (void)io;
    (void)events;
    corral_signals *signals = arg;
    struct signalfd_siginfo info;
    while (read(signals->fd, &info, sizeof(info)) == (ssize_t)sizeof(info))
        signals->cb((int)info.ssi_signo, signals->arg);
}

int corral_signals_new(corral_loop *loop, const int *list, corral_signals_cb cb, void *arg,
                       corral_signals **out)
{
    corral_signals *signals = calloc(1, sizeof(*signals));
    if (signals == NULL)
        return -ENOMEM;
    signals->cb = cb;
    signals->arg = arg;
    sigset_t set;
    sigemptyset(&set);
    for (const int *signo = list; *signo != 0; signo++)
        sigaddset(&set, *signo);
    pthread_sigmask(SIG_BLOCK, &set, &signals->previous_mask);

    int err;
    signals->fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (signals->fd == -1) {
        err = -errno;
        corral__error("signalfd: %s", strerror(errno));
        goto fail;
    }
    err = corral_io_new(loop, signals->fd, CORRAL_READABLE, signals_on_readable, signals,
                        &signals->io);
    if (err != 0)
        goto fail;
    *out = signals;
    return 0;

fail:
    if (signals->fd != -1)
        close(signals->fd);
    pthread_sigmask(SIG_SETMASK, &signals->previous_mask, NULL);
    free(signals);
    return err;
}

void corral_signals_free(corral_signals *signals)
{
    if (signals == NULL)
        return;
    corral_io_free(signals->io);
    close(signals->fd);
    pthread_sigmask(SIG_SETMASK, &signals->previous_mask, NULL);
    free(signals);
}
