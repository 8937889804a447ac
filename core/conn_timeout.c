/*
 * conn_timeout.c: a connection's read, write and linger timeouts and its
 * application deadline, all served by one timer per connection.
 */
#include "internal.h"

#include <errno.h>

/* When the read, write or linger timeout would end the connection.
 * Inline: corral__conn_update_timer() runs it several times per request,
 * and the call's saving and restoring of registers was a third of it. */
static inline uint64_t conn_timeout_deadline(const corral_conn *conn)
{
    if (conn->state == CORRAL__CONN_LINGERING)
        return conn->linger_deadline;
    uint64_t deadline = UINT64_MAX;
    if (conn->read_timeout_ms > 0 &&
        (corral__conn_reading_active(conn) || corral__splice_waits_for_input(conn)))
        deadline = conn->last_read + conn->read_timeout_ms;
    /* corral_conn_pending_output(), without a call on the common path: this
     * runs several times per request. */
    bool pending = conn->out_len > 0 || (conn->splicing_to && corral__splice_pending(conn) > 0);
    if (conn->write_timeout_ms > 0 && pending &&
        conn->last_write + conn->write_timeout_ms < deadline)
        deadline = conn->last_write + conn->write_timeout_ms;
    return deadline;
}

static uint64_t conn_deadline(const corral_conn *conn)
{
    uint64_t deadline = conn_timeout_deadline(conn);
    if (conn->app_deadline != 0 && conn->app_deadline < deadline &&
        conn->state == CORRAL__CONN_OPEN)
        deadline = conn->app_deadline;
    return deadline;
}

/* Activity only moves timestamps; the one timer fires at the earliest
 * possible deadline and re-arms itself if activity pushed it back.  A
 * timer armed earlier than needed, or when nothing is due any more, stays
 * in the heap: it fires, finds nothing due and re-arms or not.  A keep-alive
 * connection moves between "no deadline" (a request being answered) and a
 * later one (the next idle period) on every request, and a heap removal
 * and insertion each time cost more than one early wake-up per period. */
void corral__conn_update_timer(corral_conn *conn)
{
    uint64_t deadline = conn_deadline(conn);
    if (conn->timer.heap_pos != CORRAL__TIMER_IDLE && conn->timer.deadline <= deadline)
        return;
    if (deadline == UINT64_MAX)
        return;
    uint64_t now = conn->loop->now;
    corral_timer_start(&conn->timer, deadline > now ? deadline - now : 0);
}

void corral__conn_on_timer(corral_timer *timer, void *arg)
{
    (void)timer;
    corral_conn *conn = arg;
    uint64_t now = conn->loop->now;
    if (conn->app_deadline != 0 && conn->app_deadline <= now && conn->state == CORRAL__CONN_OPEN) {
        conn->app_deadline = 0;
        if (conn->handler->on_deadline != NULL)
            conn->handler->on_deadline(conn);
        if (conn->state == CORRAL__CONN_CLOSED)
            return;
    }
    if (conn_timeout_deadline(conn) <= now) {
        /* A read timeout with nothing queued cuts nothing off, so it ends
         * with a FIN; with output dropped (the write timeout) it resets. */
        if (conn->state == CORRAL__CONN_LINGERING)
            corral__conn_destroy(conn, 0);
        else
            corral__conn_end(conn, -ETIMEDOUT, corral_conn_pending_output(conn) > 0);
        return;
    }
    corral__conn_update_timer(conn);
}

void corral_conn_set_timeouts(corral_conn *conn, uint32_t read_ms, uint32_t write_ms)
{
    /* Protocols set their timeouts again at every step of every request,
     * mostly to what they were.  The same timeouts again can only move
     * the read deadline later: the timer, armed at or before the earlier
     * one, stays (see corral__conn_update_timer()). */
    bool same = conn->read_timeout_ms == read_ms && conn->write_timeout_ms == write_ms;
    conn->read_timeout_ms = read_ms;
    conn->write_timeout_ms = write_ms;
    conn->last_read = conn->loop->now;
    if (!same && conn->state != CORRAL__CONN_CLOSED)
        corral__conn_update_timer(conn);
}

void corral_conn_set_deadline(corral_conn *conn, uint64_t at_ms)
{
    conn->app_deadline = at_ms;
    /* A deadline removed, or later than the timer already armed, brings
     * nothing forward: the timer, when it fires, finds what is due. */
    if (at_ms == 0 || (conn->timer.heap_pos != CORRAL__TIMER_IDLE && conn->timer.deadline <= at_ms))
        return;
    if (conn->state != CORRAL__CONN_CLOSED)
        corral__conn_update_timer(conn);
}
