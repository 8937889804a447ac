/*
 * test_fd_share.c: closing a connection takes its socket out of the loop's
 * epoll set whoever else holds a copy of it: a child started with or
 * without fork handlers, a dup().  The set's entries are read from
 * /proc/self/fdinfo: a socket's entry stays there while any copy is open,
 * unless the close removed it first.
 */
#include "../helpers.h"
#include "internal.h"
#include "pair.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const struct corral_conn_handler quiet_handler = {0};

/* Whether the epoll set `epfd` has an entry for descriptor `fd`. */
static bool set_watches(int epfd, int fd)
{
    char path[64], line[256], want[32];
    snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", epfd);
    snprintf(want, sizeof(want), "tfd: %8d ", fd);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    bool found = false;
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = strncmp(line, want, strlen(want)) == 0;
    fclose(f);
    return found;
}

/* Who holds a copy of the connection's socket across its close. */
enum holder {
    FORKED_CHILD,     /* fork(): pthread_atfork() handlers run */
    CLONED_CHILD,     /* a raw clone, as a sanitizer starts its symbolizer:
                       * no fork handler runs, as for posix_spawn(), vfork() */
    DUPLICATE,        /* a dup() in this process */
    DUPLICATE_QUIETED /* a dup(), the program having said nothing is shared */
};

/* Holds copies of every descriptor until killed.  Only system calls: a
 * child of a raw clone must not touch the C library's state. */
static void hold_forever(void)
{
    for (;;)
        pause();
}

/* Starts the holder; returns the child's pid, or -1 and a copy in *dup_fd. */
static pid_t hold_copy(enum holder holder, int fd, int *dup_fd)
{
    pid_t pid = -1;
    *dup_fd = -1;
    switch (holder) {
    case FORKED_CHILD: pid = fork(); break;
    case CLONED_CHILD:
        /* The flags come first on every architecture; the rest are unused. */
        pid = (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
        break;
    case DUPLICATE_QUIETED:
        corral_fds_unshared();
        /* fall through */
    case DUPLICATE:
        *dup_fd = dup(fd);
        ck_assert_int_ge(*dup_fd, 0);
        return -1;
    }
    ck_assert_int_ne(pid, -1);
    if (pid == 0)
        hold_forever();
    return pid;
}

/* Opens a connection and closes it while `holder` holds a copy of its
 * socket, runs the loop's iteration that frees it, and then has the peer
 * end the stream, which the socket (kept open by the copy) reports to any
 * set it is still in.  Asserts that the entry went with the close, and
 * that the loop's set reports nothing, so no event refers to the freed
 * connection. */
static void close_with_a_copy_held(enum holder holder)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    int peer;
    corral_conn *conn = pair_open(loop, &quiet_handler, NULL, &peer);
    int fd = corral_conn_fd(conn);
    ck_assert(conn->registered && set_watches(loop->epfd, fd));
    int dup_fd;
    pid_t child = hold_copy(holder, fd, &dup_fd);
    corral_conn_abort(conn, 0);
    ck_assert_int_eq(corral__loop_run_once(loop, 0), 0); /* frees it */
    ck_assert_ptr_null(loop->all_conns);
    bool left = set_watches(loop->epfd, fd);
    close(peer); /* the held socket reads the end: EPOLLIN | EPOLLRDHUP */
    struct epoll_event events[4];
    int reported = epoll_wait(loop->epfd, events, 4, 100);
    if (child != -1) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    }
    if (dup_fd != -1)
        close(dup_fd);
    corral_loop_free(loop);
    ck_assert_msg(!left, "the closed socket is still in the loop's epoll set");
    ck_assert_int_eq(reported, 0);
}

START_TEST(a_close_with_a_forked_child_takes_the_socket_out_of_the_set)
{
    close_with_a_copy_held(FORKED_CHILD);
}
END_TEST

/* The case a fork handler cannot see: what a sanitizer's symbolizer,
 * posix_spawn(), vfork(), system() and popen() start. */
START_TEST(a_close_with_a_child_started_without_fork_handlers_takes_it_out)
{
    /* Nothing shared, as the program says once its children have exec'd;
     * the clone that follows tells no one. */
    corral_fds_unshared();
    close_with_a_copy_held(CLONED_CHILD);
}
END_TEST

START_TEST(a_close_with_a_dup_open_takes_the_socket_out_of_the_set)
{
    close_with_a_copy_held(DUPLICATE);
}
END_TEST

START_TEST(a_close_after_corral_fds_unshared_still_takes_it_out)
{
    close_with_a_copy_held(DUPLICATE_QUIETED);
}
END_TEST

/* Without copies the entry goes with the close as well. */
START_TEST(a_close_without_copies_empties_the_set)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    int peer;
    corral_conn *conn = pair_open(loop, &quiet_handler, NULL, &peer);
    int fd = corral_conn_fd(conn);
    corral_conn_abort(conn, 0);
    ck_assert(!set_watches(loop->epfd, fd));
    close(peer);
    corral_loop_free(loop);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("core/fd_share");
    TCase *tc = tcase_create("close");
    tcase_add_test(tc, a_close_with_a_forked_child_takes_the_socket_out_of_the_set);
    tcase_add_test(tc, a_close_with_a_child_started_without_fork_handlers_takes_it_out);
    tcase_add_test(tc, a_close_with_a_dup_open_takes_the_socket_out_of_the_set);
    tcase_add_test(tc, a_close_after_corral_fds_unshared_still_takes_it_out);
    tcase_add_test(tc, a_close_without_copies_empties_the_set);
    suite_add_tcase(suite, tc);
    return suite;
}
