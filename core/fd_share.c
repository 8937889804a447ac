/*
 * fd_share.c: whether another process may hold copies of this process's
 * descriptors, and closing a watched socket accordingly.
 *
 * close() takes a socket out of the epoll sets it is in only with the last
 * reference to the file.  A child between fork() and exec() (a binary
 * upgrade) holds one, and the set would go on reporting a connection that
 * is already freed; only then must a close remove the socket first, with
 * an EPOLL_CTL_DEL per connection that is otherwise a wasted system call.
 * posix_spawn() and vfork() run no fork handlers: corral starts no child
 * that way, and a program using libcorral that does must not either.
 */
#include "internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

/* Set before every fork() (pthread_atfork), cleared by corral_fds_unshared(). */
static atomic_bool shared;
/* Closes in progress that read `shared` as false: a fork waits for them. */
static atomic_uint closing;
static pthread_once_t registered = PTHREAD_ONCE_INIT;

/* In the forking thread, before the fork.  Sequentially consistent on both
 * sides: a close either sees `shared` set (and removes the socket from its
 * set itself) or counted itself in `closing` before this store, and then
 * this waits until its close() is done, before the child can copy it. */
static void fd_share_prepare(void)
{
    atomic_store(&shared, true);
    while (atomic_load(&closing) != 0)
        sched_yield();
}

static void fd_share_register(void)
{
    /* pthread_atfork() fails only with ENOMEM; then every close removes
     * its socket first, as it did before this was known. */
    if (pthread_atfork(fd_share_prepare, NULL, NULL) != 0)
        atomic_store(&shared, true);
}

void corral__fd_share_init(void)
{
    pthread_once(&registered, fd_share_register);
}

void corral__fd_share_close(corral_loop *loop, int fd, bool watched)
{
    atomic_fetch_add(&closing, 1);
    if (watched && atomic_load(&shared))
        corral__loop_unwatch(loop, fd);
    close(fd);
    atomic_fetch_sub(&closing, 1);
}

void corral_fds_unshared(void)
{
    atomic_store(&shared, false);
}
