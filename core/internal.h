/*
 * internal.h: declarations shared by libcorral's own files.  Nothing here is
 * visible to programs that embed the library.
 */
#ifndef CORRAL_INTERNAL_H
#define CORRAL_INTERNAL_H

#include "corral.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <netinet/in.h>
#include <stdlib.h>

#define CORRAL__CACHELINE 64
#define CORRAL__LINGER_MS 2000
/* Connection buffers come in CORRAL__BUFFER_CLASSES fixed sizes, pooled per
 * loop (see loop.c for the sizes and the bound on each class's pool). */
#define CORRAL__BUFFER_CLASSES 3
#define CORRAL__POOL_DEPTH     64
/* Splice pipes: idle ones kept per loop, and the most in use at once. */
#define CORRAL__PIPE_POOL   16
#define CORRAL__SPLICES_MAX 256
/* The most a connection queues in either direction: 1 GiB. */
#define CORRAL__BUFFER_MAX (1u << 30)

/* Whether a public struct's reserved space (an array member, given whole)
 * is all zero: a member that a later corral.h placed there, set by a
 * program built against it, is refused rather than ignored (corral.h, "How
 * public structs grow"). */
#define CORRAL__RESERVED_CLEAR(array) corral__zero(array, sizeof(array))
static inline bool corral__zero(const void *bytes, size_t size)
{
    const unsigned char *p = bytes;
    for (size_t i = 0; i < size; i++)
        if (p[i] != 0)
            return false;
    return true;
}
/* The checks of corral_server_listen*()'s arguments; `options` may be NULL. */
static inline bool corral__listen_args_clear(const struct corral_listen_options *options,
                                             const struct corral_conn_handler *handler)
{
    return (options == NULL || CORRAL__RESERVED_CLEAR(options->reserved)) &&
           CORRAL__RESERVED_CLEAR(handler->reserved);
}

/* ---------------------------------------------------------------- logging */

#define corral__error(...) corral_log(CORRAL_LOG_ERROR, __VA_ARGS__)
#define corral__warn(...)  corral_log(CORRAL_LOG_WARN, __VA_ARGS__)
#define corral__info(...)  corral_log(CORRAL_LOG_INFO, __VA_ARGS__)
#define corral__debug(...) corral_log(CORRAL_LOG_DEBUG, __VA_ARGS__)

/* ------------------------------------------------------------------ loop */

/*
 * Everything registered in a loop's epoll set starts with a handle, and the
 * epoll data pointer points at it, so one dispatch serves watchers,
 * connections, listeners and the loop's own eventfd.
 */
struct corral__handle {
    void (*on_event)(struct corral__handle *handle, uint32_t epoll_events);
};

struct corral_timer {
    corral_loop *loop;
    corral_timer_cb cb;
    void *arg;
    uint64_t deadline;
    uint64_t seq;    /* start order, to break deadline ties */
    size_t heap_pos; /* index in loop->timers, or CORRAL__TIMER_IDLE */
};
#define CORRAL__TIMER_IDLE SIZE_MAX

/* A node of the multi-producer single-consumer post queue.  Nodes from
 * corral_loop_post() are allocated and freed by the loop; an embedded one
 * (`embedded`) belongs to its owner, who must not queue it again before
 * its callback has started. */
struct corral__post {
    _Atomic(struct corral__post *) next;
    corral_callback cb;
    void *arg;
    bool embedded;
};

struct corral__deferred {
    corral_callback cb;
    void *arg;
};

struct corral_loop {
    int epfd;
    bool stopping;
    uint64_t now;
    /* The thread in corral_loop_run(), for the ownership asserts: `thread`
     * is written before `running` is set (release), read after (acquire). */
    atomic_bool running;
    pthread_t thread;

    struct corral_timer **timers; /* binary min-heap on (deadline, seq) */
    size_t timer_count, timer_cap;
    size_t timer_reserved; /* timers that exist: each has a slot in `timers` */
    uint64_t timer_seq;

    struct corral__deferred *deferred; /* run at the end of each iteration */
    size_t deferred_count, deferred_cap;

    /* Cross-thread posts: Vyukov's MPSC queue with a stub node.  Producers
     * push at `post_head`; the loop pops at `post_tail`.  `post_wake_pending`
     * coalesces eventfd writes into one per batch. */
    struct corral__handle post_handle;
    int post_eventfd;
    _Atomic(struct corral__post *) post_head;
    struct corral__post *post_tail;
    struct corral__post post_stub;
    atomic_bool post_wake_pending;

    /* Connections with output to flush at the end of the iteration, and
     * closed connections to free once no event can refer to them. */
    corral_conn *flush_list;
    corral_conn *kick_list; /* connections to read from next iteration */
    corral_conn *closed_list;
    corral_conn *all_conns; /* every open connection, for stop and free */
    corral_io *freed_ios;   /* watchers freed this iteration, freed at its end */

    char *scratch; /* input lands here first, so idle connections hold no buffer */
    size_t scratch_size;

    /* Recently freed connection buffers, by size class, reused so that a
     * busy connection's buffers cost no malloc/free (and no heap trimming
     * or unmapping) per request, while idle ones still hold none. */
    char *pool[CORRAL__BUFFER_CLASSES][CORRAL__POOL_DEPTH];
    size_t pool_count[CORRAL__BUFFER_CLASSES];

    /* Splices between connections (splice.c): the links their connections
     * point at (conn->splice_slot), idle pipes kept for reuse, and
     * splices that ended and wait for their callback. */
    struct corral__splice_link *splice_links; /* CORRAL__SPLICES_MAX * 2, lazily */
    size_t splices_active;
    int pipes[CORRAL__PIPE_POOL][2];
    size_t pipe_count;
    struct corral__splice *splices_done;

    /* corral__loop_set_direct_write_min(); 0: the default. */
    size_t direct_write_min;
    /* io_batch.c: the ring sends and reads go through, made when the loop
     * runs or on first use; io_batch_off once refused or turned off. */
    struct corral__io_batch *io_batch;
    bool io_batch_off;
    /* CORRAL__READ_AHEAD_CONNS slices for corral__loop_read_ahead(), made
     * on first use. */
    char *read_ahead;

    corral_worker *worker; /* the worker running this loop, or NULL */
};

/* For assert(): whether the calling thread may use `loop`, that is, the
 * loop is not running or runs on this thread. */
static inline bool corral__loop_owned(const corral_loop *loop)
{
    return !atomic_load_explicit(&loop->running, memory_order_acquire) ||
           pthread_equal(loop->thread, pthread_self());
}

/* Registers, changes or removes a handle in the loop's epoll set. */
int corral__loop_watch(corral_loop *loop, int fd, struct corral__handle *handle, uint32_t events);
int corral__loop_rewatch(corral_loop *loop, int fd, struct corral__handle *handle, uint32_t events);
void corral__loop_unwatch(corral_loop *loop, int fd);

/* Closes `fd`, first taking it out of `loop`'s epoll set if it is
 * `watched` there: a copy open anywhere would keep it in the set. */
void corral__fd_share_close(corral_loop *loop, int fd, bool watched);

/* corral_loop_post() of an embedded node: allocates nothing, cannot fail. */
void corral__loop_post_node(corral_loop *loop, struct corral__post *post);

/* Runs one iteration: wait at most `timeout_ms` (-1 = until an event). */
int corral__loop_run_once(corral_loop *loop, int timeout_ms);

uint64_t corral__monotonic_ms(void);

/* Connection buffers: at least `need` bytes (at most CORRAL__BUFFER_MAX),
 * of the smallest class that holds them, from the loop's pool.  Beyond the
 * largest class, a power of two from malloc, freed when put back.  Returns
 * NULL on allocation failure; *cap is the real size, a power of two. */
char *corral__buffer_get(corral_loop *loop, size_t need, uint32_t *cap);
/* Grows `buf` (of *cap bytes, `used` of them live) to at least `need`: a
 * buffer of a larger class, the live bytes copied over. */
char *corral__buffer_grow(corral_loop *loop, char *buf, size_t used, uint32_t *cap, size_t need);
void corral__buffer_put(corral_loop *loop, char *buf, uint32_t cap);

/* Timer heap, in timer.c. */
void corral__timers_run(corral_loop *loop);
int corral__timers_next_timeout(const corral_loop *loop); /* ms, or -1 */
/* An embedded timer: init reserves its heap slot (0 or -ENOMEM), deinit
 * stops it and gives the slot back.  A loop freed whole needs no deinit. */
int corral__timer_init(struct corral_timer *timer, corral_loop *loop, corral_timer_cb cb,
                       void *arg);
void corral__timer_deinit(struct corral_timer *timer);

/* --------------------------------------------------------------- counters */

/*
 * Per-worker counters are written by one thread and read by any; relaxed
 * atomic loads and stores compile to plain moves, and the struct fills its
 * own cache lines so workers never share one.
 */
struct corral__stats {
    _Atomic uint64_t accepts;
    _Atomic uint64_t accept_wakeups;
    _Atomic uint64_t accept_wasted;
    _Atomic uint64_t accepts_local;
    _Atomic uint64_t connections_active;
    _Atomic uint64_t accept_pauses;
    /* Of connections_active, those opened by corral_connect(); and bytes
     * read and written (after TLS), by accepted and by outgoing ones. */
    _Atomic uint64_t connections_outgoing;
    _Atomic uint64_t bytes_in[2], bytes_out[2]; /* [conn->listener == NULL] */
} __attribute__((aligned(CORRAL__CACHELINE)));

static inline void corral__stat_add(_Atomic uint64_t *counter, int64_t delta)
{
    uint64_t value = atomic_load_explicit(counter, memory_order_relaxed);
    atomic_store_explicit(counter, value + (uint64_t)delta, memory_order_relaxed);
}

static inline uint64_t corral__stat_read(const _Atomic uint64_t *counter)
{
    return atomic_load_explicit(counter, memory_order_relaxed);
}

/* ------------------------------------------------------------ connections */

enum corral__conn_state {
    CORRAL__CONN_CONNECTING,
    CORRAL__CONN_OPEN,
    CORRAL__CONN_CLOSING,   /* flushing output before the lingering close */
    CORRAL__CONN_LINGERING, /* write side shut, discarding input until EOF */
    CORRAL__CONN_CLOSED,    /* on_close pending or done; freed at iteration end */
};

struct corral_conn {
    struct corral__handle handle;
    int fd;
    enum corral__conn_state state;
    corral_loop *loop; /* and its worker, if any: loop->worker */
    corral_listener *listener;
    const struct corral_conn_handler *handler;
    void *data;
    /* The peer of an accepted TCP connection, from accept4() itself. */
    union {
        struct sockaddr sa;
        struct sockaddr_in in;
        struct sockaddr_in6 in6;
    } peer;
    socklen_t peer_len; /* 0: unknown (outgoing, unix) */

    const struct corral_transport *transport;
    void *transport_state;

    /* 32-bit sizes keep idle connections small: queues are bounded by
     * CORRAL__BUFFER_MAX. */
    char *in; /* unconsumed input, allocated only while some is kept */
    uint32_t in_len, in_cap;
    char *out; /* unsent output: out[out_off, out_off + out_len) */
    uint32_t out_off, out_len, out_cap;
    uint32_t high_watermark, low_watermark;

    bool registered : 1;       /* in the loop's epoll set */
    bool readable : 1;         /* the socket may have input (edge-triggered) */
    bool writable : 1;         /* the socket may take output */
    bool read_paused : 1;      /* by the application */
    bool over_high : 1;        /* output exceeded the high watermark */
    bool shutdown_pending : 1; /* half-close once output is flushed */
    bool shutdown_done : 1;
    bool no_linger : 1; /* close right after the flush */
    bool eof : 1;
    bool peer_hup : 1; /* epoll reported the peer's FIN, an error or hang-up */
    bool peer_fin : 1; /* ... and of those only the FIN (EPOLLRDHUP), so far */
    bool in_flush_list : 1;
    bool hold_output : 1; /* corral_conn_hold_output(): flushed at batch end only */
    bool in_kick_list : 1;
    bool in_on_data : 1;    /* on_data is running */
    bool splicing_from : 1; /* the source of a splice: not read meanwhile */
    bool splicing_to : 1;   /* the destination of a splice */
    bool detaching : 1;     /* corral_conn_detach(): leaves at iteration end */
    /* A batched send failed (conn_io.c): close_error holds its -errno
     * until the flush handles it. */
    bool batch_failed : 1;
    /* Input was read ahead into slice read_ahead_slot of the loop's
     * read_ahead, close_error holding the read's result, until the
     * connection's own event takes it (conn_io.c). */
    bool read_ahead : 1;
    uint8_t read_ahead_slot : 3;
    uint16_t splice_slot; /* 1 + index in loop->splice_links, or 0 */
    int close_error;      /* for on_close; before, see batch_failed */

    uint32_t read_timeout_ms, write_timeout_ms;
    uint64_t last_read, last_write, linger_deadline;
    uint64_t app_deadline; /* corral_conn_set_deadline(); 0 = none */
    union {
        struct corral_timer timer; /* read/write timeouts and the linger bound */
        /* Between corral_conn_adopt() and its arrival, when the connection
         * belongs to no loop and so has no timer. */
        struct corral__post adopt_post;
    };

    corral_conn *flush_next;
    corral_conn *kick_next;
    corral_conn *closed_next;
    corral_conn *all_prev, *all_next;
};

/* Whether the connection wants input now: open, and neither paused, backed
 * up, at EOF nor holding a full input buffer. */
static inline bool corral__conn_reading_active(const corral_conn *conn)
{
    return (conn->state == CORRAL__CONN_OPEN || conn->state == CORRAL__CONN_CONNECTING) &&
           !conn->read_paused && !conn->over_high && !conn->eof && !conn->splicing_from &&
           !conn->detaching && conn->in_len < conn->high_watermark;
}

/* Starting a connection, in conn_open.c. */
/* Wraps an accepted or connecting socket in a connection.  Takes `fd`. */
int corral__conn_new(corral_loop *loop, int fd, const struct corral_conn_handler *handler,
                     void *data, corral_conn **out);
/* Starts an accepted connection: calls on_open and reads it this iteration;
 * it joins the epoll set when it has to wait. */
void corral__conn_open(corral_conn *conn);
/* Wraps and starts `fd`, accepted from `listener`'s socket, on `worker`
 * (its thread): counted, with the peer address and the listener's
 * watermarks, told of a stop already under way.  Returns the connection,
 * or NULL when out of memory (the socket closed). */
corral_conn *corral__conn_open_accepted(corral_worker *worker, corral_listener *listener, int fd,
                                        const struct sockaddr_storage *peer, socklen_t peer_len);

/* The connection object, in conn.c. */
/* Adds the socket to the loop's epoll set, edge-triggered both ways. */
int corral__conn_register(corral_conn *conn);
/* Give the input or output buffer back to the loop's pool. */
void corral__conn_drop_input(corral_conn *conn);
void corral__conn_drop_output(corral_conn *conn);
/* Closes the socket now (with a RST if `reset`); on_close and the free
 * follow at iteration end.  corral__conn_destroy() resets on any error. */
void corral__conn_end(corral_conn *conn, int error, bool reset);
void corral__conn_destroy(corral_conn *conn, int error);
/* Undoes corral__conn_new() before any callback saw the connection. */
void corral__conn_free_unopened(corral_conn *conn);
void corral__loop_free_closed(corral_loop *loop);
/* Calls on_stop on every connection (graceful stop). */
void corral__loop_stop_conns(corral_loop *loop);
void corral__loop_abort_conns(corral_loop *loop);

/* The data path, in conn_io.c. */
void corral__conn_on_event(struct corral__handle *handle, uint32_t epoll_events);
/* Queues the connection to be read (and its kept input delivered) at the
 * end of this iteration. */
void corral__conn_kick(corral_conn *conn);
/* Flushes the connections with queued output; `mid_batch`: between events
 * of a batch, when those holding their output (corral_conn_hold_output())
 * wait for the batch's end. */
void corral__loop_flush(corral_loop *loop, bool mid_batch);
void corral__loop_kick(corral_loop *loop);

/* Sets the size from which a plain transport's write goes out at once on
 * `loop` (conn_io.c; 0: the default, 64 KiB), so that the benchmark can
 * compare both paths at every size.  Loop thread, or before it runs. */
void corral__loop_set_direct_write_min(corral_loop *loop, size_t min);

/* Sends in one system call, in io_batch.c. */
#define CORRAL__IO_BATCH_MAX    64 /* connections per call */
#define CORRAL__IO_BATCH_UNSENT INT32_MIN
/* Sends each connection's queued output (one piece, out + out_off,
 * out_len) as plain_writev() would, and sets results[i] to the result for
 * conns[i], a byte count or -errno, or to CORRAL__IO_BATCH_UNSENT where
 * the ring is not available. */
void corral__io_batch_send(corral_loop *loop, corral_conn *const *conns, int32_t *results,
                           size_t count);
/* Makes the ring now (corral_loop_run(), in the loop's thread), so that
 * the loop's descriptors are all there from its start. */
void corral__io_batch_start(corral_loop *loop);
void corral__io_batch_free(corral_loop *loop);
/* Receives up to `len` bytes for each connection into bufs[i], with the
 * results as for corral__io_batch_send(). */
void corral__io_batch_recv(corral_loop *loop, corral_conn *const *conns, char *const *bufs,
                           size_t len, int32_t *results, size_t count);
/* Reading ahead for a group of events (conn_io.c, called by loop.c). */
#define CORRAL__READ_AHEAD_CONNS 8
#define CORRAL__READ_AHEAD_LEN   (16 * 1024)
struct epoll_event;
void corral__loop_read_ahead(corral_loop *loop, const struct epoll_event *events, int count);
/* The flags of a plain transport's send (conn.c). */
int corral__plain_send_flags(const corral_conn *conn);

/* Registers the connection in the epoll set once it has to wait. */
void corral__conn_register_if_waiting(corral_conn *conn);

/* Splices, in splice.c.  The two halves of a connection's part in them. */
struct corral__splice_link {
    struct corral__splice *as_from, *as_to;
};
struct corral__splice {
    corral_loop *loop;
    corral_conn *from, *to; /* `from` NULL: a file's bytes (corral_conn_sendfile()) */
    int file_fd;
    off_t file_off;
    uint64_t max;
    uint64_t moved_in, moved_out; /* into the pipe, out of it */
    corral_splice_cb cb;
    void *arg;
    int pipe[2];
    uint32_t pipe_size;
    int error;
    bool from_eof;
    bool done; /* ended; the callback is pending */
    struct corral__splice *done_next;
};
/* Moves what it can for the splices `conn` takes part in (after an event). */
void corral__splice_on_event(corral_conn *conn);
/* Ends the splices `conn` takes part in with `error` (0: -ECANCELED). */
void corral__splice_cancel(corral_conn *conn, int error);
/* Ends only the splice that writes to `conn`, if any: a half-close ends
 * its sending side, and a splice that reads from it goes on. */
void corral__splice_cancel_to(corral_conn *conn, int error);
/* Bytes in the pipe of the splice `conn` is the destination of. */
size_t corral__splice_pending(const corral_conn *conn);
/* Whether the splice `conn` is the source of waits for its input. */
bool corral__splice_waits_for_input(const corral_conn *conn);
/* Runs the callbacks of the splices that ended; frees them. */
void corral__loop_splices_done(corral_loop *loop);
/* Closes the pooled pipes (loop free). */
void corral__loop_free_pipes(corral_loop *loop);

/* Timeouts, in conn_timeout.c. */
/* Re-arms the connection's one timer for its earliest deadline. */
void corral__conn_update_timer(corral_conn *conn);
void corral__conn_on_timer(corral_timer *timer, void *arg);

/* -------------------------------------------------------------- listeners */

struct corral_listener {
    corral_server *server;
    corral_listener *next;
    char *address_text;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    struct corral_listen_options options;
    const struct corral_conn_handler *handler;
    void *data;
    int fd;         /* the bound socket (shared by all workers, or worker 0's) */
    int *fds;       /* per-worker sockets in a reuseport group, else NULL */
    size_t index;   /* position in the server's list */
    bool owns_path; /* a unix socket this listener created and still owns */
    /* corral_server_listen_beside()'s program is still on the group (no
     * mode's own steering replaced it). */
    bool steered_beside;
};

/* What corral__listen_socket() does with SO_REUSEPORT. */
enum corral__reuseport {
    CORRAL__REUSEPORT_NONE, /* a socket alone on its port */
    /* The first socket of a new group: bound without SO_REUSEPORT, which
     * fails with EADDRINUSE where any other socket listens (another
     * process's group of the same user would otherwise be joined), and set
     * before listen() so that the rest of the group can join it. */
    CORRAL__REUSEPORT_FIRST,
    CORRAL__REUSEPORT_JOIN, /* joins the group listening on the port */
};

/* Creates, binds and listens on one socket for `listener`'s address, in a
 * SO_REUSEPORT group as `reuseport` says.  Returns the fd or -errno. */
int corral__listen_socket(const corral_listener *listener, enum corral__reuseport reuseport);

/* Sets on a TCP listening socket what accepted sockets inherit from it:
 * TCP_NODELAY and TCP_DEFER_ACCEPT, as listener->options say. */
int corral__set_accept_options(const corral_listener *listener, int fd);

/* Closes the listener's sockets, and removes the file of a unix socket it
 * still owns; the listener stays, with no socket.  _free() also frees it. */
void corral__listener_close(corral_listener *listener);
void corral__listener_free(corral_listener *listener);

/* -------------------------------------------------------------------- UDP */

/* The socket options of UDP segmentation offload (linux/udp.h), which older
 * C libraries' netinet/udp.h lacks; the kernel's numbers never change. */
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

/* The send table's size: entries per sendmmsg(). */
#define CORRAL__UDP_SEND_BATCH 64
/* Room for the control messages of one datagram either way: a pktinfo
 * (IPv6's is the larger), the TOS or traffic class, and the GRO or GSO
 * segment size. */
#define CORRAL__UDP_CONTROL                                                                        \
    (CMSG_SPACE(sizeof(struct in6_pktinfo)) + CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(int)) +  \
     CMSG_SPACE(sizeof(uint16_t)))

struct corral__udp_stats {
    _Atomic uint64_t received, received_bytes, recv_batches, truncated;
    _Atomic uint64_t sent, sent_bytes, send_calls, send_full, send_errors;
    _Atomic uint64_t gso_sends, gso_fallbacks;
} __attribute__((aligned(CORRAL__CACHELINE)));

/* One control buffer, aligned for struct cmsghdr. */
union corral__udp_control {
    struct cmsghdr align;
    char bytes[CORRAL__UDP_CONTROL];
};

/* Where a send table entry ends in the caller's messages. */
struct corral__udp_entry_end {
    size_t msg;    /* the message it is part of */
    size_t offset; /* the message's bytes it ends at */
    bool gso;      /* sent with UDP_SEGMENT */
};

struct corral_udp_socket {
    struct corral__handle handle;
    struct corral__udp_stats stats;
    corral_udp *udp;
    corral_worker *worker;
    int fd;
    bool registered;    /* in the worker's epoll set */
    bool want_writable; /* corral_udp_wait_writable() is pending */
    bool gro;           /* UDP_GRO is on */
    /* The receive batch, allocated at corral_server_start(). */
    struct mmsghdr *recv_msgs;
    struct iovec *recv_iov;
    struct sockaddr_storage *recv_names;
    union corral__udp_control *recv_control;
    char *recv_buffers; /* recv_batch * recv_size */
    size_t recv_size;
    struct corral_udp_msg *recv_out;
    /* The send table, likewise. */
    struct mmsghdr *send_msgs;
    struct iovec *send_iov;
    union corral__udp_control *send_control;
    struct corral__udp_entry_end *send_ends;
    struct quic_slot *quic_slot; /* its worker's in the QUIC steering program, or NULL */
};

struct corral_udp {
    corral_server *server;
    corral_udp *next;
    char *address_text;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    struct corral_udp_options options; /* steer_cbpf cleared: not kept */
    const struct corral_udp_handler *handler;
    void *data;
    int *fds;                   /* one per worker, -1 once closed */
    corral_udp_socket *sockets; /* one per worker */
    atomic_bool gso;            /* GSO is used: cleared for good when the kernel refuses it */
    atomic_bool gso_fallback_logged;
    /* Steering (udp_steer.c): the eBPF program, or NULL; what is used
     * (corral_udp_steering()) and why not eBPF. */
    struct corral__udp_steer *steer;
    bool steered_cbpf;
    const char *steering, *steering_initials;
    char steering_reason[160];
};

/* QUIC steering, in udp_steer.c: attaches the eBPF program for a listen
 * whose sockets are made (main thread, before the start; falls back
 * silently but for a log line), frees it with the listen, and reads a
 * worker's counts. */
struct corral_udp_quic_ids;
void corral__udp_steer_attach(corral_udp *udp, const struct corral_udp_quic_ids *ids);
void corral__udp_steer_free(corral_udp *udp);
void corral__udp_steer_stats(const corral_udp_socket *sock, uint64_t *steered_new,
                             uint64_t *steered_owned);

/* The UDP listens' part in a server's life, in udp.c: allocates each
 * worker's buffers and registers its sockets in its loop (main thread,
 * before the workers run; 0 or -errno), takes a worker's sockets out of
 * its loop (its thread, or once it has exited), tells the handlers that
 * the worker's loop ended (its thread), and closes the sockets and frees
 * the listens (server free). */
int corral__udp_start(corral_server *server);
void corral__udp_detach(corral_worker *worker);
void corral__udp_stopped(corral_worker *worker);
/* A graceful stop began on `worker`: each UDP handler's on_stopping. */
void corral__udp_stopping(corral_worker *worker);
void corral__udp_free_all(corral_server *server);

/* The data path, in udp_io.c. */
void corral__udp_on_event(struct corral__handle *handle, uint32_t epoll_events);
/* sendmmsg() itself, replaceable by a test to see how the send path takes
 * what only a real device's kernel answers (EAGAIN on a full queue, EIO
 * from a device that cannot segment).  Set before the server starts. */
extern int (*corral__udp_sendmmsg)(int fd, struct mmsghdr *msgs, unsigned int count, int flags);

/* ---------------------------------------------------------- wakeup modes */

struct corral__accept_entry; /* a worker's registration of one listener */

/*
 * A wakeup mode: how listening sockets are registered in the workers' epoll
 * sets.  `setup` runs once on the main thread before workers start; the
 * others run on the worker that owns the entries.  NULL slots do nothing.
 */
struct corral_wakeup_ops {
    enum corral_wakeup_mode mode;
    const char *impl;
    const char *description;
    bool per_worker_sockets; /* each worker gets its own socket per listener */
    bool pins_workers;       /* worker i runs on the i-th allowed CPU */
    /* Connections taken per accept wakeup; 0 means the default batch.  A
     * mechanism whose kernel wakes one worker per connection sets 1, so a
     * woken worker does not take what was meant for the next one. */
    unsigned accept_batch;
    /* Returns true when `caps` can run this mechanism, else sets *why. */
    bool (*probe)(const struct corral_kernel_caps *caps, const char **why);
    int (*setup)(corral_server *server);
    void (*teardown)(corral_server *server);
    int (*attach)(corral_worker *worker);
    void (*on_drained)(corral_worker *worker, struct corral__accept_entry *entry);
    void (*detach)(corral_worker *worker);
};

extern const struct corral_wakeup_ops corral__wakeup_native_rotate;
extern const struct corral_wakeup_ops corral__wakeup_native_affinity;
extern const struct corral_wakeup_ops corral__wakeup_rotate;
extern const struct corral_wakeup_ops corral__wakeup_cbpf_cpu;
extern const struct corral_wakeup_ops corral__wakeup_exclusive;
extern const struct corral_wakeup_ops corral__wakeup_reuseport;
extern const struct corral_wakeup_ops corral__wakeup_herd;
extern const struct corral_wakeup_ops corral__wakeup_ebpf_roundrobin;
extern const struct corral_wakeup_ops corral__wakeup_ebpf_balanced;
extern const struct corral_wakeup_ops corral__wakeup_ebpf_affinity;

/* eBPF steering, in wakeup_ebpf.c.  The probe loads the program once and
 * records why it could not.  The worker's hooks publish its load; callers
 * check worker->steer_slot first, so other mechanisms pay nothing. */
bool corral__ebpf_probe(void);
void corral__steer_accepted(corral_worker *worker);
void corral__steer_drained(corral_worker *worker);
void corral__steer_closed(corral_worker *worker);
void corral__steer_busy(corral_worker *worker, bool busy); /* the loop: woke, or waits */
/* The loop, before it waits: balanced takes the connections left waiting
 * on other workers' sockets; returns whether it took any.  If some wait
 * that are not old enough to take yet, *look_again_ns is set to when they
 * will be (else 0), and the wait should end then. */
bool corral__steer_take(corral_worker *worker, uint64_t *look_again_ns);
/* Sets how long a connection waits on a busy worker's socket before
 * balanced takes it (0: STEER_TAKE_NS), so that a test can lengthen it to
 * see a worker end its wait for one.  Before corral_server_start(). */
void corral__steer_set_take_ns(corral_server *server, uint64_t take_ns);
/* Counts an accepted connection in accepts_local if it arrived on the
 * worker's CPU; nothing (no system call) unless the server keeps the
 * statistic. */
void corral__count_locality(corral_worker *worker, int fd);
/* Whether an accept4() error concerns only the connection it took off the
 * queue (or an interruption), so that the next accept may still succeed. */
bool corral__accept_error_passes(int err);

/* Picks the ops for the server's requested mode along its fallback chain. */
const struct corral_wakeup_ops *corral__wakeup_choose(enum corral_wakeup_mode requested,
                                                      const struct corral_kernel_caps *caps,
                                                      struct corral_wakeup_info *info);
/* Runs the resolved mode's setup and logs the resolution. */
int corral__wakeup_setup(corral_server *server);

/* ----------------------------------------------------------------- server */

struct corral__accept_entry {
    struct corral__handle handle;
    corral_worker *worker;
    corral_listener *listener;
    int fd; /* the socket this worker accepts from */
    bool registered;
};

/* worker->stop_ms while no stop was asked for. */
#define CORRAL__NO_STOP UINT64_MAX

struct corral_worker {
    struct corral__stats stats;
    corral_server *server;
    unsigned index;
    int cpu;
    pthread_t thread;
    bool thread_started; /* main thread only: pthread_create succeeded */
    corral_loop *loop;
    /* Stop requests, from any thread: the shortest grace asked for, and
     * whether `stop_post` is queued on the loop (see corral_server_stop). */
    _Atomic uint64_t stop_ms;
    atomic_bool stop_queued;
    struct corral__post stop_post;
    /* corral_server_close_listeners(): cleared by the worker once it no
     * longer watches the listening sockets (released, or exited). */
    atomic_bool holds_listeners;
    struct corral__post release_post;
    struct corral__accept_entry *entries; /* one per listener */
    size_t entry_count;
    bool attached;          /* entries registered through the wakeup mode */
    unsigned pause_reasons; /* CORRAL__PAUSE_* bits; accept only while 0 */
    bool emfile_logged;     /* one log line per run of EMFILE/ENFILE */
    bool stopping;
    unsigned holds; /* corral_worker_hold()s not yet released; loop thread */
    struct corral_timer emfile_timer;
    struct corral_timer stop_timer;
    struct corral__handle nested_handle; /* native modes: the shared set is ready */
    struct steer_slot *steer_slot;       /* ebpf: where this worker publishes its load */
};

struct corral_server {
    struct corral_server_config config;
    unsigned worker_count;
    corral_worker *workers;
    corral_listener *listeners;
    size_t listener_count;
    struct corral_kernel_caps caps;
    const struct corral_wakeup_ops *wakeup;
    struct corral_wakeup_info wakeup_info;
    bool count_locality;         /* accepts_local is kept (corral__count_locality()) */
    int nested_epfd;             /* native modes: the shared set holding the listeners */
    struct corral__steer *steer; /* ebpf: the steering program this server holds */
    atomic_bool started;         /* between corral_server_start() and _wait() */
    _Atomic unsigned workers_running;
    corral_loop *main_loop;
    struct corral__signal_handler *signal_handlers;
    corral_loop *exit_loop;        /* corral_server_on_exit() */
    struct corral__post exit_post; /* embedded: the last worker out cannot fail to post it */
    unsigned next_adopter;         /* corral_listener_adopt()'s turn, main thread */
    uint64_t steer_take_ns;        /* corral__steer_set_take_ns(); 0: the default */
    corral_udp *udps;              /* UDP listens (udp.c) */
    /* corral_server_close_tcp_listeners(): the workers' release leaves the
     * UDP listens watched.  Set before the release posts, which publish it. */
    atomic_bool keep_udp;
};

enum {
    CORRAL__PAUSE_FULL = 1u << 0,    /* at max_connections */
    CORRAL__PAUSE_NO_FDS = 1u << 1,  /* accept4 failed with EMFILE/ENFILE */
    CORRAL__PAUSE_STOPPED = 1u << 2, /* the worker is stopping */
    CORRAL__PAUSE_CLOSED = 1u << 3,  /* the listening sockets are being closed */
};

/* Accept path, in wakeup.c. */
void corral__entry_init(struct corral__accept_entry *entry, corral_worker *worker,
                        corral_listener *listener);
int corral__entry_register(struct corral__accept_entry *entry, uint32_t extra_events);
void corral__entry_unregister(struct corral__accept_entry *entry);
/* Registers every entry of the worker (unwinding on failure), or none. */
int corral__attach_all(corral_worker *worker, uint32_t extra_events);
void corral__detach_all(corral_worker *worker);
/* attach() for modes whose entries are plain, or EPOLLEXCLUSIVE. */
int corral__attach_level(corral_worker *worker);
int corral__attach_exclusive(corral_worker *worker);
bool corral__probe_epoll_exclusive(const struct corral_kernel_caps *caps, const char **why);
/* rotate's on_drained: re-registers the exclusive entry at the tail of the
 * socket's wait queue. */
void corral__rotate_requeue(corral_worker *worker, struct corral__accept_entry *entry);
/* Accepts what entry's socket has queued: the accept path of every mode. */
void corral__accept_from(struct corral__accept_entry *entry);
int corral__worker_start_accepting(corral_worker *worker);
void corral__worker_stop_accepting(corral_worker *worker, unsigned reason);
void corral__worker_maybe_resume(corral_worker *worker, uint64_t active);
void corral__worker_on_emfile_timer(corral_timer *timer, void *arg);
void corral__worker_pin(corral_worker *worker);
/* Called by the worker's loop after it freed a connection. */
void corral__worker_conn_closed(corral_worker *worker);
/* Accepts what the server's listening sockets hold, which no worker
 * watches any more, and sends each connection to a worker in turn, before
 * they are closed (server.c).  Main thread. */
void corral__server_drain_listeners(corral_server *server);

/* Whether the kernel has round-robin and CPU-affinity epoll sets, asked
 * once (wakeup_native.c); the native ops explain a refusal. */
void corral__native_probe(bool *rotate, bool *affinity);

/* Kernel capabilities, in probe.c. */
/* How many workers share one CPU's slot in affinity mode (CPU `slot` of
 * `cpus_used` hosts workers slot, slot + cpus_used, ...). */
unsigned corral__cpus_used(const corral_server *server);
void corral__loop_set_busy_poll(corral_loop *loop, unsigned usecs);

/* Counts `n` bytes read (`out` false) or written on `conn`, by accepted
 * and outgoing connections, in its worker's counters. */
static inline void corral__stat_bytes(const corral_conn *conn, bool out, size_t n)
{
    corral_worker *worker = conn->loop->worker;
    if (worker == NULL)
        return;
    _Atomic uint64_t *counters = out ? worker->stats.bytes_out : worker->stats.bytes_in;
    corral__stat_add(&counters[conn->listener == NULL], (int64_t)n);
}

#endif /* CORRAL_INTERNAL_H */
