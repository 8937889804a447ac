/*
 * test_fd_share.c: closing a connection takes its socket out of the loop's
 * epoll set only where another process may hold a copy: after a fork(),
 * until corral_fds_unshared().  The set's entries are read from
 * /proc/self/fdinfo: a socket's entry stays there while any copy is open.
 */
#include "../helpers.h"
#include "internal.h"
#include "pair.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
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

/* A child that holds copies of every descriptor until it is killed. */
static pid_t hold_copies(void)
{
    pid_t pid = fork();
    ck_assert_int_ne(pid, -1);
    if (pid == 0) {
        for (;;)
            pause();
    }
    return pid;
}

static void end_child(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* Opens a connection, closes it, and says whether its socket is still in
 * the loop's set while a forked child holds a copy of it. */
static bool left_in_set_with_a_child(bool unshared_after_fork)
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    int peer;
    corral_conn *conn = pair_open(loop, &quiet_handler, NULL, &peer);
    int fd = corral_conn_fd(conn);
    ck_assert(set_watches(loop->epfd, fd));
    pid_t child = hold_copies();
    if (unshared_after_fork)
        corral_fds_unshared(); /* against its contract: the child still holds them */
    corral_conn_abort(conn, 0);
    bool left = set_watches(loop->epfd, fd);
    end_child(child);
    close(peer);
    corral_loop_free(loop);
    return left;
}

START_TEST(a_close_after_a_fork_takes_the_socket_out_of_the_set)
{
    ck_assert(!left_in_set_with_a_child(false));
}
END_TEST

/* The other side: once told nothing is shared, a close makes no
 * EPOLL_CTL_DEL, which shows here as the entry a child's copy keeps. */
START_TEST(a_close_once_unshared_leaves_the_set_to_close)
{
    ck_assert(left_in_set_with_a_child(true));
}
END_TEST

/* Without a child the entry goes with the close, whichever way. */
START_TEST(a_close_without_copies_empties_the_set)
{
    corral_fds_unshared();
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
    tcase_add_test(tc, a_close_after_a_fork_takes_the_socket_out_of_the_set);
    tcase_add_test(tc, a_close_once_unshared_leaves_the_set_to_close);
    tcase_add_test(tc, a_close_without_copies_empties_the_set);
    suite_add_tcase(suite, tc);
    return suite;
}
