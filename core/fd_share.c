/*
 * fd_share.c: closing a watched socket when other references to it may be
 * open anywhere: it leaves the epoll set before close(), always.
 *
 * close() takes a socket out of the epoll sets it is in only with the last
 * reference to its file, and references the loop cannot see are common in
 * a program that embeds it: a child between fork() and exec(); the same
 * from posix_spawn(), vfork(), and glibc's system() and popen() built on
 * them, which run no fork handler; a sanitizer starting its symbolizer
 * with a raw clone; a descriptor in flight in SCM_RIGHTS or dup()ed;
 * another thread inside a system call on the descriptor's number.  The
 * entry such a reference keeps goes on reporting events with the handle
 * of a connection that is freed by then: a use after free.
 *
 * Hence one EPOLL_CTL_DEL per connection that ever waited (one answered at
 * once never joins the set, see corral__conn_open()).  The removal is
 * the work close() would otherwise do itself: what the DEL adds is one
 * system call (measured in docs/benchmarks.md).  Rejected:
 *   - removing it only after a fork() seen by pthread_atfork() (what this
 *     did before): blind to every other case above;
 *   - a generation tag in the event's data: a table look-up per event, and
 *     entries left in the set for as long as a copy lives, their events
 *     read and thrown away;
 *   - freeing the connection only once epoll_wait() has returned after
 *     the close: a copy may outlive any number of waits.
 */
#include "internal.h"

#include <unistd.h>

void corral__fd_share_close(corral_loop *loop, int fd, bool watched)
{
    if (watched)
        corral__loop_unwatch(loop, fd);
    close(fd);
}

/* Kept for programs written against the version that needed it. */
void corral_fds_unshared(void)
{
}
