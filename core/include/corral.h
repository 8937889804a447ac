/*
 * corral.h: the one public header of libcorral, a multi-threaded
 * acceptor/worker server framework for Linux built on epoll.
 *
 * Conventions: every function that can fail returns 0 or a negative errno
 * (-EAGAIN means "would block", never an error).  Objects are opaque and are
 * created and freed by the library.  Unless a contract says otherwise, an
 * object belongs to one loop and may only be used from that loop's thread.
 *
 * Out of memory: the library never aborts and never drops an object
 * silently.  A function that allocates says so and returns -ENOMEM, having
 * changed nothing.  A function that returns void allocates nothing and
 * cannot fail: a timer reserves its place when it is created, and stops,
 * frees and the library's own cross-thread messages use memory set aside
 * beforehand.  Where memory runs out with no caller to tell (input
 * arriving, output queued by corral_conn_write()), the connection concerned
 * ends with -ENOMEM, reported by its on_close.
 *
 * Internal invariants (connection states, buffer bounds, the timer heap,
 * which thread owns a loop) are checked with assert() in builds without
 * NDEBUG: a failed one is a bug in the library or a broken contract, such
 * as a loop's object used from a thread other than the one running it.
 *
 * How public structs grow: every struct here that a program allocates (the
 * options it fills, the callback tables it defines, the results the
 * library fills in) ends in reserved space, and a later minor version adds
 * a member by taking some of it, so that no struct's size or members'
 * offsets change within a major version (see CORRAL_VERSION_MAJOR).  A
 * program fills an options struct with its _init function before setting
 * members (corral_server_config_init(), corral_listen_options_init()),
 * defines a callback table with designated initializers, so that what it
 * does not name is NULL, and never writes reserved space: a zero or NULL
 * member that a program does not know of means what the version it was
 * built for did.  A function given an options struct or a callback table
 * whose reserved space is not zero (from a program built against a later
 * header, using a member this library lacks) returns -EINVAL rather than
 * ignore the member (corral_conn_set_transport(), which returns nothing,
 * asserts it).  The library zeroes the reserved space of what it
 * fills in.
 */
#ifndef CORRAL_H
#define CORRAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(CORRAL_BUILDING)
#define CORRAL_EXTERN __attribute__((visibility("default")))
#else
#define CORRAL_EXTERN
#endif

/* ---------------------------------------------------------------- version */

/*
 * The version of this header, MAJOR.MINOR.PATCH.  These three numbers are
 * the one place the version is written: the build takes the shared
 * library's soname (libcorral.so.MAJOR) from them, and the install its file
 * name and the pkg-config version.  A program built against one MAJOR runs
 * with a library of the same MAJOR and the same or a later MINOR; a MAJOR
 * changes when a function's contract or a public struct's layout does.
 */
#define CORRAL_VERSION_MAJOR 0
#define CORRAL_VERSION_MINOR 1
#define CORRAL_VERSION_PATCH 0

/* The version as one number, (major << 16) | (minor << 8) | patch, for
 * comparisons such as #if CORRAL_VERSION_HEX >= 0x000200. */
#define CORRAL_VERSION_HEX                                                                         \
    ((CORRAL_VERSION_MAJOR << 16) | (CORRAL_VERSION_MINOR << 8) | CORRAL_VERSION_PATCH)

#define CORRAL_STRINGIFY_(x) #x
#define CORRAL_STRINGIFY(x)  CORRAL_STRINGIFY_(x)
/* The version as a string literal, "0.1.0". */
#define CORRAL_VERSION                                                                             \
    CORRAL_STRINGIFY(CORRAL_VERSION_MAJOR)                                                         \
    "." CORRAL_STRINGIFY(CORRAL_VERSION_MINOR) "." CORRAL_STRINGIFY(CORRAL_VERSION_PATCH)

/** The version of the library the program runs with, as CORRAL_VERSION_HEX
 *  encodes it: the library's own, which may be later than the header's the
 *  program was built with.  Any thread, any time. */
CORRAL_EXTERN unsigned corral_version(void);

/** The same as a string, "MAJOR.MINOR.PATCH" (static storage, never
 *  freed).  Any thread, any time. */
CORRAL_EXTERN const char *corral_version_string(void);

typedef struct corral_loop corral_loop;
typedef struct corral_io corral_io;
typedef struct corral_timer corral_timer;
typedef struct corral_server corral_server;
typedef struct corral_worker corral_worker;
typedef struct corral_listener corral_listener;
typedef struct corral_conn corral_conn;
typedef struct corral_signals corral_signals;

/* ---------------------------------------------------------------- logging */

enum corral_log_level {
    CORRAL_LOG_ERROR,
    CORRAL_LOG_WARN,
    CORRAL_LOG_INFO,
    CORRAL_LOG_DEBUG,
};

typedef void (*corral_log_fn)(enum corral_log_level level, const char *message, void *arg);

/** Routes the library's log lines to `fn` (NULL restores the default, which
 *  writes timestamped lines to stderr).  Call before starting any server. */
CORRAL_EXTERN void corral_set_logger(corral_log_fn fn, void *arg);

/** Drops log lines less severe than `level` (default CORRAL_LOG_INFO). */
CORRAL_EXTERN void corral_set_log_level(enum corral_log_level level);

/** Logs a printf-style line through the library's sink, as the library's
 *  own lines go (and filtered by the same level).  Any thread.  A line
 *  longer than 1023 bytes is cut, ending in "...". */
CORRAL_EXTERN void corral_log(enum corral_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** Returns "error", "warn", "info" or "debug". */
CORRAL_EXTERN const char *corral_log_level_name(enum corral_log_level level);

/** The most bytes corral_log_prefix() writes, the terminating NUL included. */
#define CORRAL_LOG_PREFIX_MAX 64

/** Writes the start of a log line as the default logger writes it: the
 *  current UTC time to the millisecond and the level in brackets, then a
 *  space ("2026-12-03T04:33:16.293Z [error] "), NUL-terminated.  Returns its
 *  length; a `size` below CORRAL_LOG_PREFIX_MAX may cut it, as snprintf
 *  does, and the result is then the length that fit.  For a logger set with
 *  corral_set_logger() that keeps the default format.  Any thread;
 *  allocates nothing. */
CORRAL_EXTERN size_t corral_log_prefix(enum corral_log_level level, char *buf, size_t size);

/* ------------------------------------------------------------- event loop */

/** Creates an event loop (an epoll instance with timers, deferred and
 *  cross-thread callbacks).  Every worker owns one; a program may create
 *  others.  On success *out must later be freed with corral_loop_free().
 *  Returns 0, -ENOMEM, or the failing system call's -errno. */
CORRAL_EXTERN int corral_loop_new(corral_loop **out);

/** Frees a loop that is not running.  Connections still open on it are
 *  aborted first (their on_close runs); watchers and timers must already be
 *  freed by their owners. */
CORRAL_EXTERN void corral_loop_free(corral_loop *loop);

/** Does nothing.  It once told corral that no child held copies of its
 *  descriptors any more; a connection's socket now leaves the epoll set
 *  before it is closed whatever copies exist (see corral_conn_fd()).  Any
 *  thread. */
CORRAL_EXTERN void corral_fds_unshared(void);

/** Whether the loop batches through io_uring (on by default): the sends
 *  that leave together at the end of a group of events, and the first reads
 *  of the connections that group wakes, each batch in one system call
 *  instead of one per connection, on plain sockets (TLS reads and writes its
 *  own).  Where the kernel refuses a ring (before Linux 5.6, io_uring
 *  disabled, a container's seccomp filter) the loop logs it once and works
 *  as with it off.  Set it before the loop runs. */
CORRAL_EXTERN void corral_loop_set_io_uring(corral_loop *loop, bool on);

/** Runs the loop on the calling thread until corral_loop_stop().  Returns 0,
 *  or -errno if epoll_wait failed for a reason other than EINTR. */
CORRAL_EXTERN int corral_loop_run(corral_loop *loop);

/** Makes corral_loop_run() return after the current iteration.  Loop thread
 *  only; from other threads post a callback that calls it. */
CORRAL_EXTERN void corral_loop_stop(corral_loop *loop);

/** The loop's clock: monotonic milliseconds, refreshed once per iteration. */
CORRAL_EXTERN uint64_t corral_loop_now(const corral_loop *loop);

/** CLOCK_MONOTONIC now, in nanoseconds (a system call's worth: for what
 *  needs more than the loop's millisecond clock).  Any thread. */
CORRAL_EXTERN uint64_t corral_monotonic_ns(void);

typedef void (*corral_callback)(void *arg);

/** Runs cb(arg) on the loop's thread at the end of the current iteration
 *  (before output is flushed).  Loop thread only.  Returns 0 or -ENOMEM. */
CORRAL_EXTERN int corral_loop_defer(corral_loop *loop, corral_callback cb, void *arg);

/** Runs cb(arg) on the loop's thread soon.  Safe from any thread: a lock-free
 *  queue plus one eventfd write per batch, so a burst of posts costs the
 *  receiving loop one wakeup.  Each post runs exactly once, in the order
 *  each posting thread made them.  Returns 0 or -ENOMEM. */
CORRAL_EXTERN int corral_loop_post(corral_loop *loop, corral_callback cb, void *arg);

/* ---------------------------------------------------------- fd watchers */

enum {
    CORRAL_READABLE = 1u << 0,
    CORRAL_WRITABLE = 1u << 1,
    CORRAL_HANGUP = 1u << 2, /* error or hang-up; delivered whatever the interest */
};

typedef void (*corral_io_cb)(corral_io *io, unsigned events, void *arg);

/** Watches `fd` (owned by the caller, never closed by the library) on `loop`
 *  with level-triggered interest `events` (CORRAL_READABLE/WRITABLE).
 *  Returns 0, -ENOMEM, or epoll_ctl()'s -errno. */
CORRAL_EXTERN int corral_io_new(corral_loop *loop, int fd, unsigned events, corral_io_cb cb,
                                void *arg, corral_io **out);

/** Changes the interest set of a watcher. */
CORRAL_EXTERN int corral_io_set(corral_io *io, unsigned events);

/** Stops watching and frees the watcher (at the end of the loop iteration);
 *  safe inside its own callback.  Allocates nothing. */
CORRAL_EXTERN void corral_io_free(corral_io *io);

/* ---------------------------------------------------------------- signals */

typedef void (*corral_signals_cb)(int signo, void *arg);

/** Receives `signals` (a list ending with 0) on `loop` through a signalfd.
 *  Blocks them in the calling thread, so call it on the main thread before
 *  starting other threads (they inherit the block).  cb runs on the loop
 *  once per delivered signal.  Free with corral_signals_free(), which
 *  restores the previous signal mask. */
CORRAL_EXTERN int corral_signals_new(corral_loop *loop, const int *signals, corral_signals_cb cb,
                                     void *arg, corral_signals **out);
CORRAL_EXTERN void corral_signals_free(corral_signals *signals);

/* ----------------------------------------------------------------- timers */

typedef void (*corral_timer_cb)(corral_timer *timer, void *arg);

/** Creates a stopped timer on `loop`.  Timers live in a binary heap: start
 *  and stop are O(log n), so 100k live timers are cheap.  The timer's place
 *  in the heap is reserved here, so starting it never fails.  Returns 0 or
 *  -ENOMEM. */
CORRAL_EXTERN int corral_timer_new(corral_loop *loop, corral_timer_cb cb, void *arg,
                                   corral_timer **out);

/** (Re)arms the timer to fire once, `after_ms` from the loop's clock.  Timers
 *  due at the same millisecond fire in the order they were started.
 *  Allocates nothing. */
CORRAL_EXTERN void corral_timer_start(corral_timer *timer, uint64_t after_ms);

/** Disarms the timer; a no-op if it is not armed. */
CORRAL_EXTERN void corral_timer_stop(corral_timer *timer);

/** True while the timer is armed. */
CORRAL_EXTERN bool corral_timer_active(const corral_timer *timer);

/** Stops and frees the timer; safe inside its own callback. */
CORRAL_EXTERN void corral_timer_free(corral_timer *timer);

/* ------------------------------------------------------------ connections */

/*
 * A connection is a non-blocking stream socket with an input and an output
 * buffer, owned by one loop for its whole life.  Buffers exist only while
 * they hold data, so an idle connection costs a few hundred bytes.  They
 * come in fixed sizes (16, 64 and 256 KiB; larger ones only for output
 * queued past the high watermark) from a pool per loop that keeps at most
 * 1 MiB of each size (3 MiB per loop) for reuse.
 *
 * Backpressure: a connection stops reading while its unconsumed input or its
 * unsent output exceeds the high watermark, and resumes below the low one.
 *
 * Resets: whenever the library itself ends a connection with an error, the
 * close resets it as corral_conn_abort() with an error does: a server stop
 * (-ECONNABORTED), running out of memory (-ENOMEM), a write timeout
 * (-ETIMEDOUT, queued output dropped).  A read timeout with no output
 * queued cuts nothing off and ends with a FIN; so do the graceful closes.
 */
struct corral_conn_handler {
    /** Connection established (accepted, or an outgoing connect completed).
     *  Optional. */
    void (*on_open)(corral_conn *conn);
    /** New input: `data` holds all unconsumed input.  Return how many bytes
     *  were consumed; the rest is presented again with the next input. */
    size_t (*on_data)(corral_conn *conn, const char *data, size_t len);
    /** The peer closed its sending side.  Optional: NULL closes the
     *  connection once pending output is flushed. */
    void (*on_eof)(corral_conn *conn);
    /** Pending output fell to the low watermark after having exceeded the
     *  high one.  Optional; use it to resume a producer. */
    void (*on_drain)(corral_conn *conn);
    /** The deadline set with corral_conn_set_deadline() passed while the
     *  connection was open.  Optional. */
    void (*on_deadline)(corral_conn *conn);
    /** A graceful server stop began.  Optional: NULL lets the connection
     *  run until it closes itself or the stop's timeout ends it. */
    void (*on_stop)(corral_conn *conn);
    /** Called exactly once for every connection that was created (accepted,
     *  or corral_connect() returned 0), and never for one whose creation
     *  failed.  `error` is 0 or a negative errno (-ETIMEDOUT, -ECONNRESET,
     *  -ECONNREFUSED, ...).  It runs once the call that closed the
     *  connection has returned: at the end of the loop's iteration, or in
     *  corral_loop_free().  The connection is freed after it returns. */
    void (*on_close)(corral_conn *conn, int error);
    /** The peer closed its side, or the connection failed, while reading
     *  was paused (corral_conn_pause_read()): nothing reads the end until
     *  reading resumes, and a server waiting on a third party before it
     *  answers would hold the connection, and what it holds for it, until
     *  then.  Input may still be queued (corral_conn_input_pending()).
     *  Optional: NULL leaves the end to be read once reading resumes. */
    void (*on_hangup)(corral_conn *conn);
    void (*reserved[3])(void); /* NULL (see "How public structs grow" above) */
};

/*
 * Transport: how bytes move through the socket.  The default is plain
 * recv/sendmsg; TLS plugs in its own table without changing callers.  Each
 * function returns a byte count, 0 for end of stream (read only), -EAGAIN, or
 * another -errno.
 */
struct corral_transport {
    const char *name;
    /** True for a protocol layered over the socket with state of its own
     *  (TLS): it may hold read bytes back, so a short read does not mean
     *  the socket is drained; it may need to write in order to read, so
     *  socket space also wakes its reads; and it ends the stream with a
     *  message of its own, sent even on a close without lingering.  False
     *  for bytes straight to and from the socket. */
    bool layered;
    ssize_t (*read)(corral_conn *conn, void *buf, size_t len);
    ssize_t (*writev)(corral_conn *conn, const struct iovec *iov, int iovcnt);
    /** Sends end-of-stream (close_notify, FIN); optional. */
    int (*shutdown)(corral_conn *conn);
    /** Releases the transport's state; optional.  Sends nothing: a
     *  connection destroyed without `shutdown` was cut off, and its peer
     *  must not see an orderly end. */
    void (*destroy)(corral_conn *conn);
    /** Whether input is waiting to be read: bytes the transport holds
     *  back, or bytes in the socket.  Optional: NULL asks the socket. */
    bool (*input_pending)(const corral_conn *conn);
    /** Whether the read that just returned bytes left the socket empty and
     *  the transport holds nothing back, so the read that would only say
     *  EAGAIN can wait for the next edge.  Optional: NULL judges by a short
     *  read for a plain transport and never skips for a layered one. */
    bool (*drained)(const corral_conn *conn);
    void (*reserved[4])(void); /* NULL */
};

/* The default backpressure watermarks, bytes (corral_conn_set_watermarks()). */
#define CORRAL_HIGH_WATERMARK (256 * 1024)
#define CORRAL_LOW_WATERMARK  (64 * 1024)

/** Replaces the connection's transport; `state` is read back with
 *  corral_conn_transport_state().  Call from on_open, before any I/O; or
 *  from on_data, when the transport so far has read nothing past what it
 *  delivered (a preamble such as a PROXY header).  The old transport's
 *  `destroy` is not called.  `ops`'s reserved space must be NULL. */
CORRAL_EXTERN void corral_conn_set_transport(corral_conn *conn, const struct corral_transport *ops,
                                             void *state);
CORRAL_EXTERN void *corral_conn_transport_state(const corral_conn *conn);

/** The plain-socket transport, for transports that wrap it. */
CORRAL_EXTERN extern const struct corral_transport corral_plain_transport;

/** Whether input is waiting that on_data has not taken yet: bytes the
 *  connection read and holds (such as a pipelined request while reading is
 *  paused), or bytes in its transport (a layered one also counts what it
 *  holds back) or socket.  Does not read or block; for a connection
 *  deciding whether it is idle. */
CORRAL_EXTERN bool corral_conn_input_pending(const corral_conn *conn);

/** Sends `len` bytes.  A small write (under 64 KiB) is copied and queued;
 *  queued output is flushed once the event that produced it (and at most a
 *  few others) has been handled, so responses to pipelined requests leave
 *  in one syscall.  A large write goes to the socket at once, from `data`
 *  itself and behind what is queued, in one writev; only what the socket
 *  does not take is copied and queued.  Either way the caller's memory is
 *  free again when the call returns, and the bytes leave in call order.
 *
 *  Nothing to check: a write that cannot be queued ends the connection as a
 *  failed send does, and on_close reports why: -ENOBUFS if more than 1 GiB
 *  would be queued (the application ignored backpressure), -ENOMEM if the
 *  buffer cannot grow; the connection is reset.  Bytes written once the
 *  connection is closing, aborted or half-closed (corral_conn_shutdown())
 *  are dropped.  Either way, the caller goes on as if the peer had gone
 *  and lets on_close clean up. */
CORRAL_EXTERN void corral_conn_write(corral_conn *conn, const void *data, size_t len);

/** corral_conn_write() for a gather list. */
CORRAL_EXTERN void corral_conn_writev(corral_conn *conn, const struct iovec *iov, int iovcnt);

/** Bytes queued and not yet accepted by the kernel (a splice's bytes in its
 *  pipe included). */
CORRAL_EXTERN size_t corral_conn_pending_output(const corral_conn *conn);

/** While `hold` is set, output queued while the loop handles a batch of
 *  events leaves at the batch's end, not after every few events as
 *  otherwise (which lets the first answers of a large batch go while the
 *  rest is handled): for a connection that expects more output from
 *  events of the same batch, such as an HTTP/2 connection with several
 *  streams waiting for their responses, so that it takes fewer writes
 *  (over TLS, fewer records).  Output is never held past the batch, and a
 *  write large enough to go out at once still does.  Off by default. */
CORRAL_EXTERN void corral_conn_hold_output(corral_conn *conn, bool hold);

/** Sends end-of-stream once queued output is flushed (half-close); the
 *  connection keeps reading. */
CORRAL_EXTERN void corral_conn_shutdown(corral_conn *conn);

/** Closes gracefully: flushes queued output, half-closes, then discards
 *  input until the peer closes or 2 s pass, so the peer reads everything sent
 *  instead of a reset.  on_close(conn, 0) follows. */
CORRAL_EXTERN void corral_conn_close(corral_conn *conn);

/** corral_conn_close() without the lingering: for a peer that announced
 *  it will send nothing more (an HTTP client that asked to close), so the
 *  descriptor is released as soon as the output is flushed. */
CORRAL_EXTERN void corral_conn_close_no_linger(corral_conn *conn);

/** Closes at once, dropping queued output; on_close(conn, error) follows
 *  (error 0 or -errno).  With an error the connection is reset (SO_LINGER
 *  0, a RST): the peer's next read fails with ECONNRESET, so a peer that
 *  reads until the end of the stream (an HTTP/1.0 or close-delimited body)
 *  cannot take what it got for the whole of it.  With 0 it ends with a
 *  plain FIN, for a connection that is merely discarded.  An abort never
 *  sends a transport's end-of-stream (no TLS close_notify), so a layered
 *  peer sees the cut as well. */
CORRAL_EXTERN void corral_conn_abort(corral_conn *conn, int error);

/** Stops or resumes delivering input (for backpressure between two
 *  connections, e.g. a proxy pausing a client while its upstream drains). */
CORRAL_EXTERN void corral_conn_pause_read(corral_conn *conn);
/** Has the loop watch the connection from now on even while it neither
 *  reads nor has output waiting, so that its handler's on_hangup learns
 *  of the peer's end.  A connection whose first input came with its accept
 *  is otherwise put in the epoll set only once it waits for something,
 *  which saves a server that answers at once a system call.  Returns 0 or
 *  a negative errno (the connection is then closed with it). */
CORRAL_EXTERN int corral_conn_watch(corral_conn *conn);
CORRAL_EXTERN void corral_conn_resume_read(corral_conn *conn);

/** Read timeout: close with -ETIMEDOUT when reading is active and nothing
 *  arrived for `read_ms`.  Write timeout: close with -ETIMEDOUT when output is
 *  pending and none of it was sent for `write_ms`.  0 disables either. */
CORRAL_EXTERN void corral_conn_set_timeouts(corral_conn *conn, uint32_t read_ms, uint32_t write_ms);

/** The application's own deadline, in loop-clock milliseconds
 *  (corral_loop_now()); 0 clears it.  Once it passes, on_deadline runs (once).
 *  The connection's one timer serves it along with the timeouts above, so
 *  connections need no timer of their own, and moving a deadline later
 *  costs no timer operation. */
CORRAL_EXTERN void corral_conn_set_deadline(corral_conn *conn, uint64_t at_ms);

/** Sets the high and low watermarks (bytes) for backpressure; the high one
 *  is at most 512 MiB. */
CORRAL_EXTERN void corral_conn_set_watermarks(corral_conn *conn, size_t high, size_t low);
/** Whether the unsent output went over the high watermark and has not yet
 *  fallen to the low one: a producer feeding this connection from another
 *  should pause until on_drain. */
CORRAL_EXTERN bool corral_conn_backed_up(const corral_conn *conn);

CORRAL_EXTERN void corral_conn_set_data(corral_conn *conn, void *data);
CORRAL_EXTERN void *corral_conn_data(const corral_conn *conn);
/** The `data` given to the listener (NULL for outgoing connections). */
CORRAL_EXTERN void *corral_conn_listener_data(const corral_conn *conn);
/** The connection's socket, for system calls on it (getsockname(),
 *  setsockopt(), a MSG_PEEK recv()) from the loop's thread while the
 *  connection is open.  The connection owns it: never close() it, change
 *  its O_NONBLOCK flag or add it to an epoll set, and never use the number
 *  once the connection has closed (on_close), since the next socket opened
 *  may reuse it.  Copies are harmless to the loop (a forked or spawned
 *  child's, a dup(), one in flight in SCM_RIGHTS, another thread inside a
 *  system call on it): the socket leaves the loop's epoll set before its
 *  close, so no event reaches a freed connection; but a copy keeps the
 *  socket open, and the peer sees no end, until it is closed too. */
CORRAL_EXTERN int corral_conn_fd(const corral_conn *conn);
/** The peer address of an accepted TCP connection, as accept() reported it
 *  (no system call).  Returns 0, or -ENOTCONN for outgoing connections and
 *  unix sockets. */
CORRAL_EXTERN int corral_conn_peer(const corral_conn *conn, struct sockaddr_storage *addr,
                                   socklen_t *len);
/** Replaces what corral_conn_peer() reports: for a connection whose client
 *  is known from the protocol itself (a PROXY header from a load balancer
 *  in front).  `addr` is an IPv4 or IPv6 address.  Returns 0, or -EINVAL
 *  (another family, or `len` too short for it). */
CORRAL_EXTERN int corral_conn_set_peer(corral_conn *conn, const struct sockaddr *addr,
                                       socklen_t len);
CORRAL_EXTERN corral_loop *corral_conn_loop(const corral_conn *conn);
/** The worker that owns an accepted connection, or NULL. */
CORRAL_EXTERN corral_worker *corral_conn_worker(const corral_conn *conn);

/** Opens an outgoing non-blocking connection from `loop`.  Returns 0 and sets
 *  *out, after which handler->on_open runs once connected and on_close runs
 *  exactly once, a later failure reaching it with -ECONNREFUSED etc.  Or
 *  returns -errno for a failure found at once (socket(), connect(),
 *  registering with the loop; -ENOMEM; -EINVAL for reserved space in
 *  `handler` that is not zero): then nothing was created, no
 *  callback ever runs, and the caller still owns `data`.  Writes made
 *  before the connection is established are queued. */
CORRAL_EXTERN int corral_connect(corral_loop *loop, const struct sockaddr *addr, socklen_t addrlen,
                                 const struct corral_conn_handler *handler, void *data,
                                 corral_conn **out);

/* ------------------------------------------------ moving between workers */

/** Called with a connection that has just left its loop (corral_conn_detach()). */
typedef void (*corral_conn_detached_cb)(corral_conn *conn, void *arg);

/** Takes an accepted connection off its worker, to hand it to another one
 *  (of any server in this process) with corral_conn_adopt(): a daemon
 *  moving its idle connections to the workers of a new configuration.
 *  From this call on the connection is not read (input waits, in the socket
 *  or kept); at the end of the loop's iteration, when no event can refer to
 *  it any more, it leaves the loop (the worker no longer counts it) and
 *  `detached(conn, arg)` runs on the same thread.  From then on it belongs
 *  to no loop, and no callback runs for it until corral_conn_adopt() or
 *  corral_conn_close_detached().  Its socket, transport state, kept input,
 *  queued output, data, timeouts and deadline go with it.  If it closes or
 *  starts a splice before the iteration ends, it stays, and `detached` is
 *  not called.  Call on the connection's thread.  Returns 0, -EINVAL (not
 *  open, or an outgoing connection), -EBUSY (splicing, already leaving, or
 *  its input of this iteration read ahead of its event, which is handled
 *  first: see corral_loop_set_io_uring()), -ENOMEM. */
CORRAL_EXTERN int corral_conn_detach(corral_conn *conn, corral_conn_detached_cb detached,
                                     void *arg);

/** Hands a detached connection to `worker`: on its thread, the connection
 *  joins its loop, belongs to `listener` (for corral_conn_listener_data();
 *  NULL: none), and is read again; a worker that is stopping gracefully
 *  then calls its on_stop.  If the worker's loop has ended, the connection
 *  is closed there instead, on_close seeing -ECANCELED.  Any thread;
 *  allocates nothing, cannot fail. */
CORRAL_EXTERN void corral_conn_adopt(corral_worker *worker, corral_conn *conn,
                                     corral_listener *listener);

/** Bytes read from the connection's socket that on_data has not consumed
 *  yet (they are presented again with the next input), with those read
 *  ahead for an event of this iteration not yet handled. */
CORRAL_EXTERN size_t corral_conn_kept_input(const corral_conn *conn);

/** Serves `fd`, a connected socket of a client of `listener`'s address
 *  that another process accepted (the one a binary upgrade replaces): one
 *  of the server's workers, in turn, starts it as if it had accepted it
 *  from `listener` (stopping workers too).  Main thread, while the server
 *  runs.  Returns 0, or -ENOMEM with `fd` left to the caller. */
CORRAL_EXTERN int corral_listener_adopt(corral_listener *listener, int fd);

/** Empties `fd`, a listening socket of `listener`'s address that the
 *  server does not hold and that is about to be closed (one passed by
 *  another process, which the server's own sockets replace): accepts what
 *  it queued, made non-blocking first, and has the server's workers serve
 *  it as corral_listener_adopt() does, so that closing the socket resets
 *  no connection the kernel completed.  The caller keeps `fd`.  Main
 *  thread, while the server runs.  Returns 0, or -EINVAL if the server is
 *  not running. */
CORRAL_EXTERN int corral_listener_take_queue(corral_listener *listener, int fd);

/** Closes a detached connection on the calling thread (a FIN; no transport
 *  end-of-stream), runs on_close with `error`, and frees it. */
CORRAL_EXTERN void corral_conn_close_detached(corral_conn *conn, int error);

/* ---------------------------------------------------------------- splice */

/** How a splice ended, called once per corral_conn_splice() that returned
 *  0, at the end of the loop iteration in which it ended.  `moved` bytes
 *  reached `to`'s socket.  `error` is 0 when `max` bytes went through, or
 *  when `from` reached the end of its stream first (then `moved` < `max`);
 *  else -errno: `from`'s read failed or `from` was closed or aborted (the
 *  splice's bytes still in flight are lost), or `to`'s send failed or `to`
 *  was closed, aborted or half-closed.  A connection the splice ended with
 *  an error is already closed when the callback runs, and its on_close
 *  follows; both pointers stay valid during the callback. */
typedef void (*corral_splice_cb)(corral_conn *from, corral_conn *to, uint64_t moved, int error,
                                 void *arg);

/** Moves up to `max` bytes from `from`'s socket to `to`'s socket inside the
 *  kernel (splice(2) through a pipe), as a proxy forwards a body of known
 *  length (or, with `max` UINT64_MAX, one that ends with its stream) from
 *  one peer to the other without copying it through user space.  Both
 *  connections belong to the calling loop, are open and use the plain
 *  transport.
 *
 *  Order: bytes `from` has read already are not spliced.  The caller
 *  consumes them first (on_data returning all of its `len`) and forwards
 *  them with corral_conn_write(to, ...); output queued on `to` goes out
 *  before the spliced bytes.  Until `cb` runs, `from` is not read
 *  (on_data is not called) and the caller writes nothing to `to`; after
 *  it, `from` is read as usual again, its end of stream included.
 *
 *  Backpressure: the pipe holds at most `to`'s high watermark (and the
 *  pipe's size, 256 KiB where the system allows), and its bytes count in
 *  corral_conn_pending_output(to) and toward `to`'s write timeout; a slow
 *  `to` stalls the reads from `from`.  `from`'s read timeout applies while
 *  the splice waits for its bytes.
 *
 *  Pipes come from a pool per loop (at most 16 kept, at most 256 in use);
 *  a pipe that still holds bytes when a splice ends is closed, not kept.
 *  splice(2) into a socket whose peer is gone raises SIGPIPE (it has no
 *  MSG_NOSIGNAL): a program that splices ignores SIGPIPE, as corral does.
 *
 *  Returns 0 (then `cb` runs exactly once), -EOPNOTSUPP (a layered
 *  transport on either side, or a connection that is not a TCP or unix
 *  stream socket of this loop), -EBUSY (`from` is already the source, or
 *  `to` already the destination, of a splice; or they are the same), -EPIPE
 *  (either is not open, or `to` is half-closed), -EAGAIN (the loop's pipes
 *  are all in use: forward by copying instead) or -errno from pipe2(). */
CORRAL_EXTERN int corral_conn_splice(corral_conn *from, corral_conn *to, uint64_t max,
                                     corral_splice_cb cb, void *arg);

/** Sends `len` bytes of the file `fd` from `offset` to `to`'s socket inside
 *  the kernel (sendfile(2)), as a server sends a static file, driven by
 *  `to`'s write readiness: output queued on `to` goes out first, and until
 *  `cb` runs the caller writes nothing to `to`.  `cb` gets `from` NULL and
 *  `moved`, the bytes sent; `error` 0 with `moved` < `len` means the file
 *  ended first (it shrank), else as for corral_conn_splice().  The rest of
 *  the file counts in corral_conn_pending_output(to) and toward `to`'s
 *  write timeout.  `fd` stays the caller's: it is not closed, and must stay
 *  open until `cb`.  Returns 0 (then `cb` runs exactly once, later),
 *  -EOPNOTSUPP (a layered transport), -EINVAL (past 2^63), -EBUSY (`to` is
 *  already a splice's destination), -EPIPE (`to` is not open, or
 *  half-closed), -EAGAIN (the loop's splices are all in use) or -ENOMEM. */
CORRAL_EXTERN int corral_conn_sendfile(corral_conn *to, int fd, uint64_t offset, uint64_t len,
                                       corral_splice_cb cb, void *arg);

/* -------------------------------------------------------------- addresses */

/** Parses "127.0.0.1:8080", "[::1]:8080", "*:8080" or "8080" (all IPv4
 *  addresses), "localhost:8080" or "unix:/path/to.sock".  Returns 0,
 *  -ENOENT for a host name that does not resolve, or -EINVAL. */
CORRAL_EXTERN int corral_parse_address(const char *text, struct sockaddr_storage *addr,
                                       socklen_t *addrlen);

/** Formats an address as corral_parse_address() reads it.  Returns 0 or
 *  -ENOSPC. */
CORRAL_EXTERN int corral_format_address(const struct sockaddr *addr, socklen_t addrlen, char *buf,
                                        size_t len);

/* ----------------------------------------------------------- wakeup modes */

/*
 * How the workers share the listening sockets.  See docs/wakeup-modes.md.
 */
enum corral_wakeup_mode {
    CORRAL_WAKEUP_AUTO,       /* = roundrobin */
    CORRAL_WAKEUP_ROUNDROBIN, /* one shared accept queue, idle workers served in turn */
    CORRAL_WAKEUP_AFFINITY,   /* a connection is served on the CPU its packets arrived on */
    CORRAL_WAKEUP_EXCLUSIVE,  /* EPOLLEXCLUSIVE: wake one worker, the first idle one */
    CORRAL_WAKEUP_REUSEPORT,  /* one listener per worker, the kernel hashes connections */
    CORRAL_WAKEUP_HERD,       /* every worker woken for every connection (baseline) */
    CORRAL_WAKEUP_BALANCED,   /* least loaded: the less loaded of two random workers (eBPF) */
};

/** "auto", "roundrobin", "affinity", "exclusive", "reuseport", "herd" or
 *  "balanced". */
CORRAL_EXTERN const char *corral_wakeup_mode_name(enum corral_wakeup_mode mode);

/** Parses a mode name.  Returns 0 or -EINVAL. */
CORRAL_EXTERN int corral_wakeup_mode_parse(const char *name, enum corral_wakeup_mode *out);

/** What a server's requested wakeup mode resolved to on this kernel. */
struct corral_wakeup_info {
    enum corral_wakeup_mode requested;
    enum corral_wakeup_mode mode; /* the mode really in use after fallbacks */
    const char *impl;             /* the mechanism: "native", "ebpf", "rotate", "cbpf-cpu", ... */
    const char *reason;           /* why the mechanism preferred to it was passed over, or "" */
    uint64_t reserved[4];         /* zeroed by the library */
};

#define CORRAL_MAX_CPUS 1024

/*
 * What the kernel and this process can do for the accept path.  Probed once
 * per process; a copy can be edited (or masked with corral_caps_disable()) and
 * handed to a server, so every fallback path can be exercised on any kernel.
 */
struct corral_kernel_caps {
    bool epoll_exclusive; /* EPOLLEXCLUSIVE (Linux 4.5) */
    bool epoll_rotate;    /* a native round-robin epoll set (headers and kernel) */
    bool epoll_affinity;  /* a native CPU-affinity epoll set (headers and kernel) */
    bool reuseport;       /* SO_REUSEPORT (Linux 3.9) */
    bool reuseport_cbpf;  /* SO_ATTACH_REUSEPORT_CBPF (Linux 4.5) */
    bool incoming_cpu;    /* SO_INCOMING_CPU (Linux 4.4) */
    bool busy_poll;       /* per-epoll busy poll, EPIOCSPARAMS (Linux 6.9) */
    bool ebpf;            /* an sk_reuseport eBPF program loads (CAP_BPF, Linux 5.14) */
    unsigned cpu_count;   /* CPUs in the process's affinity mask */
    unsigned short cpus[CORRAL_MAX_CPUS]; /* their numbers, ascending */
    bool udp_gso;                         /* UDP_SEGMENT, send-side segmentation (Linux 4.18) */
    bool udp_gro;                         /* UDP_GRO, receive-side coalescing (Linux 5.0) */
    uint8_t reserved_bytes[6];            /* zeroed by corral_probe() */
    uint64_t reserved[3];                 /* zeroed by corral_probe() */
};

/** Fills `caps` with this process's capabilities.  The kernel is asked once;
 *  later calls copy the result.  Capabilities named in the environment
 *  variable CORRAL_CAPS_DISABLE (comma-separated, as for
 *  corral_caps_disable()) are reported missing: a testing aid. */
CORRAL_EXTERN void corral_probe(struct corral_kernel_caps *caps);

/** Turns off the capabilities named in `names`, a comma-separated list of
 *  epoll_exclusive, epoll_rotate, epoll_affinity, reuseport, reuseport_cbpf,
 *  incoming_cpu, busy_poll, ebpf, udp_gso, udp_gro.  Returns 0, or -EINVAL for an unknown name
 *  (nothing is changed then). */
CORRAL_EXTERN int corral_caps_disable(struct corral_kernel_caps *caps, const char *names);

/** Resolves `requested` along its fallback chain against `caps` (NULL: the
 *  probed capabilities), as a server would.  See docs/wakeup-modes.md. */
CORRAL_EXTERN void corral_wakeup_resolve(enum corral_wakeup_mode requested,
                                         const struct corral_kernel_caps *caps,
                                         struct corral_wakeup_info *info);

/* ----------------------------------------------------------------- server */

struct corral_server_config {
    unsigned workers;                      /* worker threads; 0 = CPUs in the affinity mask */
    enum corral_wakeup_mode wakeup;        /* default CORRAL_WAKEUP_AUTO */
    unsigned max_connections;              /* per worker; 0 = unlimited */
    unsigned busy_poll_usecs;              /* epoll busy poll per worker loop; 0 = off */
    const struct corral_kernel_caps *caps; /* NULL: corral_probe(); copied at creation */
    double wakeup_spill;       /* affinity over eBPF: a CPU whose workers' load exceeds their share
                                  by this factor spills new connections to others; 0 = 1.1 */
    bool count_locality;       /* fill accepts_local in every mode, at one getsockopt() per accept;
                                  the affinity mode always does, the others only with this */
    bool io_uring_off;         /* workers send and read a system call per connection, without
                                  batching through io_uring (see corral_loop_set_io_uring()) */
    uint8_t reserved_bytes[6]; /* zero, as corral_server_config_init() leaves it */
    uint64_t reserved[7];      /* zero, as corral_server_config_init() leaves it */
};

/** Fills `config` with the defaults, its reserved space zero.  Call it
 *  before setting members. */
CORRAL_EXTERN void corral_server_config_init(struct corral_server_config *config);

/** Creates a server (a pool of worker threads, not yet started).  Returns
 *  0, -EINVAL (reserved space in `config` not zero), -ENOMEM, ... */
CORRAL_EXTERN int corral_server_new(const struct corral_server_config *config, corral_server **out);

/** Frees a server that is stopped (or was never started), closing its
 *  listening sockets. */
CORRAL_EXTERN void corral_server_free(corral_server *server);

struct corral_listen_options {
    int backlog;             /* default 511 */
    bool tcp_nodelay;        /* default true */
    unsigned defer_accept_s; /* TCP_DEFER_ACCEPT seconds; 0 = off */
    size_t high_watermark;   /* backpressure, bytes; default 256 KiB */
    size_t low_watermark;    /* default 64 KiB */
    uint64_t reserved[8];    /* zero, as corral_listen_options_init() leaves it */
};

/** Fills `options` with the defaults, its reserved space zero.  Call it
 *  before setting members. */
CORRAL_EXTERN void corral_listen_options_init(struct corral_listen_options *options);

/** Binds and listens on `address` (see corral_parse_address(); port 0 picks
 *  an ephemeral port) before the server starts.  Accepted connections run
 *  `handler` with corral_conn_listener_data() returning `data`.  `options`
 *  may be NULL for the defaults.  The address must be free: where any
 *  other socket listens on it, a SO_REUSEPORT group of the same user
 *  included, this fails with -EADDRINUSE rather than join it (a successor
 *  server shares sockets through corral_server_listen_fds() or
 *  corral_server_listen_beside()).  Returns -EADDRINUSE, -EINVAL (also for
 *  reserved space in `options` or `handler` that is not zero; so do
 *  corral_server_listen_fds() and corral_server_listen_beside()), ... with
 *  no socket left open on failure. */
CORRAL_EXTERN int corral_server_listen(corral_server *server, const char *address,
                                       const struct corral_listen_options *options,
                                       const struct corral_conn_handler *handler, void *data,
                                       corral_listener **out);

/** Serves on listening sockets the caller already has: inherited from a
 *  previous server across a reload, or passed by systemd.  `count` is
 *  corral_server_sockets_per_listener() (a SO_REUSEPORT group in worker
 *  order), or 1 to share one socket among all workers in any mode.  The
 *  server dup()s the sockets; the caller keeps its own.  With `options`,
 *  the sockets take its backlog, TCP_NODELAY and TCP_DEFER_ACCEPT; NULL
 *  leaves them as they are.  Returns -EINVAL if a descriptor is not a
 *  listening stream socket. */
CORRAL_EXTERN int corral_server_listen_fds(corral_server *server, const int *fds, unsigned count,
                                           const struct corral_listen_options *options,
                                           const struct corral_conn_handler *handler, void *data,
                                           corral_listener **out);

/** How many sockets each listener of `server` has: 1 when the workers share
 *  them, the worker count when each worker has its own (reuseport modes). */
CORRAL_EXTERN unsigned corral_server_sockets_per_listener(const corral_server *server);

/** corral_server_listen_fds() for a successor whose socket layout differs
 *  (another wakeup mode or worker count): `fds` are the `count` sockets of
 *  a previous server's TCP listener, in its worker order.  This server keeps
 *  as many of them as it needs, in their SO_REUSEPORT group (set on them
 *  now), and new sockets on the same address join the group for the rest.
 *  Unless its wakeup mode steers the group itself, a BPF program on the
 *  group then sends each new connection to one of this server's sockets, at
 *  random: none to the previous server's other sockets, which
 *  corral_server_close_listeners() can then empty and close without
 *  resetting a connection.  The caller keeps its descriptors.  Returns 0,
 *  -EINVAL (a unix socket), -EADDRINUSE (the group cannot be joined: its
 *  sockets belong to another user), ... */
CORRAL_EXTERN int corral_server_listen_beside(corral_server *server, const int *fds, unsigned count,
                                              const struct corral_listen_options *options,
                                              const struct corral_conn_handler *handler, void *data,
                                              corral_listener **out);

/** Once the previous server's sockets in a group joined with
 *  corral_server_listen_beside() are closed: takes the random-pick program
 *  off the group again, so that the kernel's own choice (the 4-tuple hash)
 *  spreads the connections, as on a group made from scratch.  A mode that
 *  steers the group itself keeps its program.  Main thread. */
CORRAL_EXTERN void corral_server_listeners_settled(corral_server *server);

/** The listener's sockets, to hand to a successor server: sets *fds and
 *  returns their count.  From then on, freeing this server no longer
 *  removes a unix socket's file, which the successor still serves. */
CORRAL_EXTERN unsigned corral_listener_fds(corral_listener *listener, const int **fds);

/** Stops every worker from accepting and closes the server's listening
 *  sockets, returning once the workers have let go of them (a worker that
 *  has exited has let go); connections go on.  What the sockets had queued
 *  is accepted first and served by the workers (stopping ones too), so a
 *  close resets none of it.  Main thread; used when a reload must re-create
 *  a socket, and on a stop. */
CORRAL_EXTERN void corral_server_close_listeners(corral_server *server);

/** corral_server_close_listeners() for the TCP listeners only: the UDP
 *  listens stay in their workers' loops, read until each loop ends, so
 *  that a graceful stop whose UDP handler still serves (a QUIC connection
 *  draining, which holds its worker with corral_worker_hold()) keeps
 *  hearing its peers.  Main thread; on a stop with no successor. */
CORRAL_EXTERN void corral_server_close_tcp_listeners(corral_server *server);

/** The bound address, e.g. "127.0.0.1:41234" (useful with port 0). */
CORRAL_EXTERN int corral_listener_address(const corral_listener *listener, char *buf, size_t len);

/** The bound TCP port, or 0 for unix sockets. */
CORRAL_EXTERN int corral_listener_port(const corral_listener *listener);

/** Starts the workers.  The wakeup mode is resolved here and logged. */
CORRAL_EXTERN int corral_server_start(corral_server *server);

/** Stops the server; callable from any thread, a worker's callbacks
 *  included (even while corral_server_start() is still starting the other
 *  workers), any number of times until corral_server_wait() returns.  With
 *  `graceful_ms` > 0 the workers stop accepting, call on_stop for each open
 *  connection and wait up to `graceful_ms` for connections to close before
 *  aborting the rest; with 0 they abort every connection at once.  When
 *  stops overlap, the shortest wins.  Allocates nothing and cannot fail; a
 *  stop before corral_server_start() does nothing. */
CORRAL_EXTERN void corral_server_stop(corral_server *server, uint32_t graceful_ms);

/** Posts cb(arg) to `loop` once every worker has exited after a stop.  Set
 *  before corral_server_start().  The post uses memory inside the server,
 *  so it cannot fail; free the server no earlier than in cb itself. */
CORRAL_EXTERN void corral_server_on_exit(corral_server *server, corral_loop *loop,
                                         corral_callback cb, void *arg);

/** Waits until every worker has exited.  Returns 0. */
CORRAL_EXTERN int corral_server_wait(corral_server *server);

typedef void (*corral_signal_cb)(corral_server *server, int signo, void *arg);

/** Handles `signo` in corral_server_run() instead of the default action
 *  (SIGTERM/SIGINT: graceful stop within 10 s; SIGQUIT: immediate stop). */
CORRAL_EXTERN int corral_server_on_signal(corral_server *server, int signo, corral_signal_cb cb,
                                          void *arg);

/** Starts the server and runs the calling (main) thread's loop, which takes
 *  signals through a signalfd, until the workers have exited. */
CORRAL_EXTERN int corral_server_run(corral_server *server);

/** The main thread's loop while corral_server_run() runs, else NULL. */
CORRAL_EXTERN corral_loop *corral_server_main_loop(const corral_server *server);

/** What the wakeup mode resolved to (valid after corral_server_start()). */
CORRAL_EXTERN void corral_server_wakeup(const corral_server *server,
                                        struct corral_wakeup_info *info);

CORRAL_EXTERN unsigned corral_server_worker_count(const corral_server *server);
CORRAL_EXTERN corral_worker *corral_server_worker(const corral_server *server, unsigned index);

/* -------------------------------------------------------------------- UDP */

/*
 * A UDP listen: one socket per worker, all bound to the same address in a
 * SO_REUSEPORT group (whatever the wakeup mode: there is nothing to
 * accept, and a shared socket would wake every worker for every
 * datagram), each watched by its own worker's loop.  The kernel picks a
 * socket per datagram by a hash of its 4-tuple, so one peer's datagrams
 * reach one worker while the group does not change; a program given in
 * `steer_cbpf` picks instead.
 *
 * Datagrams are read in batches with recvmmsg() and handed to on_recv in
 * one call, each with its peer, the local address it was sent to
 * (IP_PKTINFO/IPV6_RECVPKTINFO: on a wildcard address, the answer must
 * leave from it), its ECN bits and, with `gro`, the segment size of a run
 * of datagrams the kernel coalesced.  corral_udp_send() writes batches
 * with sendmmsg(), and a run of equal-sized datagrams to one peer with UDP
 * GSO where the kernel offers it.
 *
 * Memory: each worker's socket holds recv_batch buffers of max_datagram
 * bytes (65535 with `gro`), allocated when the server starts, plus a fixed
 * send table of 64 entries; nothing is allocated per datagram.
 *
 * On a graceful stop the sockets are read until the worker's loop ends.
 * corral_server_close_listeners() takes them out of every worker's loop,
 * so that a successor that took them over reads alone, but leaves them
 * open until the server is freed: answers the old server still owes (its
 * sessions' upstream replies) leave from the address they are due from.
 */
typedef struct corral_udp corral_udp;
typedef struct corral_udp_socket corral_udp_socket;
struct sock_fprog; /* <linux/filter.h> */
struct corral_udp_quic_ids;

/* One datagram (or, with segment_size, a run of them) received or to send. */
struct corral_udp_msg {
    /* Received: the payload, in the library's buffer, valid until on_recv
     * returns.  To send: the bytes, the caller's. */
    void *data;
    size_t len;
    struct sockaddr_storage peer; /* received from / send to */
    socklen_t peer_len;
    /* Received: the address the datagram was sent to, its port the
     * socket's.  To send: the source address (its port is ignored), or
     * local_len 0 for the kernel's choice. */
    struct sockaddr_storage local;
    socklen_t local_len;
    unsigned ifindex; /* received on this interface; to send: 0, or the interface */
    uint8_t ecn;      /* the ECN bits of the IP header (0-3), both ways */
    /* Received: with `gro`, the kernel coalesced datagrams of this size
     * from one peer into `data` (the last may be shorter); 0: one datagram.
     * To send: `data` is datagrams of this size (the last may be shorter),
     * sent with UDP GSO where possible, else one by one; 0: one datagram. */
    uint16_t segment_size;
    uint64_t reserved[2]; /* zero (see "How public structs grow") */
};

struct corral_udp_handler {
    /** A batch of `count` datagrams read on `sock`, in arrival order, on
     *  the worker that owns it.  `msgs` and the payloads are the library's
     *  and valid until this returns; corral_udp_send() may be called from
     *  here (on `sock`, to answer, or on any socket of this worker). */
    void (*on_recv)(corral_udp_socket *sock, struct corral_udp_msg *msgs, size_t count);
    /** The socket can take output again after corral_udp_wait_writable().
     *  Optional (required to call corral_udp_wait_writable()). */
    void (*on_writable)(corral_udp_socket *sock);
    /** The worker's loop has ended (a stop), on the worker's thread, with
     *  the loop still there: free what lives on it for this socket
     *  (watchers, timers), as the loop must be empty when it is freed.
     *  Optional. */
    void (*on_stop)(corral_udp_socket *sock);
    /** A graceful stop began (corral_server_stop() with a grace) on the
     *  worker, on its thread: the loop runs on until the worker has no
     *  connection and no hold (corral_worker_hold()) left, or the grace
     *  ends; then on_stop.  Optional: without it, a stopping worker's UDP
     *  sessions do not keep it running. */
    void (*on_stopping)(corral_udp_socket *sock);
    void (*reserved[2])(void); /* NULL (see "How public structs grow" above) */
};

struct corral_udp_options {
    unsigned recv_batch; /* datagrams per recvmmsg(); default 16, at most 256 */
    /* The largest datagram read whole (default 4096, at most 65535); a
     * larger one is dropped and counted in `truncated`. */
    size_t max_datagram;
    bool gro;        /* UDP_GRO: receive runs of datagrams coalesced (65535-byte buffers) */
    bool gso;        /* default true: UDP_SEGMENT for runs given to corral_udp_send() */
    int recv_buffer; /* SO_RCVBUF bytes; 0 = the system default */
    int send_buffer; /* SO_SNDBUF bytes; 0 = the system default */
    /* A classic BPF program attached to the group with
     * SO_ATTACH_REUSEPORT_CBPF: it returns the index of the socket, which
     * is the worker's index, for each datagram (an index out of range
     * falls back to the hash).  NULL: the 4-tuple hash.  Not attached
     * with a single worker, whose one socket takes every datagram.  Not
     * kept after the call.  Under steer_quic, the fallback when its eBPF
     * program cannot be used. */
    const struct sock_fprog *steer_cbpf;
    /* QUIC steering by an eBPF sk_reuseport program (needs CAP_BPF, Linux
     * 5.14): a datagram whose destination connection ID (QUIC's invariant
     * header, RFC 8999) has this layout goes to the worker whose index
     * the ID carries; a client's Initial, whose ID is its own, opens a
     * connection on the worker the server's wakeup mode picks (roundrobin:
     * in turn; balanced: the less loaded of two random workers, by what
     * corral_udp_publish_load() says; affinity: the arrival CPU's), and
     * the client's next datagrams with that ID follow it; other modes and
     * other datagrams: the 4-tuple hash.  When the program cannot be used
     * (no CAP_BPF, CORRAL_CAPS_DISABLE=ebpf, a socket held by another
     * process's program), steer_cbpf stays attached, else the hash; which
     * one is logged and told by corral_udp_steering().  Not kept after the
     * call.  NULL: no eBPF. */
    const struct corral_udp_quic_ids *steer_quic;
    uint64_t reserved[7]; /* zero, as corral_udp_options_init() leaves it */
};

/* The connection IDs a QUIC server issues, as steer_quic reads them. */
struct corral_udp_quic_ids {
    uint8_t length;       /* of every ID (3-20 bytes) */
    uint8_t marker;       /* the ID's first byte */
    uint8_t index_offset; /* where in the ID the worker's index is: 2 bytes, big-endian */
    uint8_t reserved[5];  /* zero */
};

/* How a UDP listen's datagrams are steered to its workers. */
struct corral_udp_steering {
    const char *impl;     /* "ebpf", "cbpf", "hash", or "none" (one worker) */
    const char *initials; /* how new QUIC connections are spread: "roundrobin",
                             "balanced", "affinity" (eBPF), else "hash" */
    const char *reason;   /* why eBPF (steer_quic) is not used, or "" */
    uint64_t reserved[4]; /* zeroed by corral_udp_steering() */
};

/** What steers `udp`'s datagrams.  Any thread. */
CORRAL_EXTERN void corral_udp_steering(const corral_udp *udp, struct corral_udp_steering *out);

/** The load of `sock`'s worker that steer_quic's balanced mode weighs: its
 *  open connections.  Cheap (a few stores to the worker's own slot); does
 *  nothing without the eBPF program.  The socket's worker only. */
CORRAL_EXTERN void corral_udp_publish_load(corral_udp_socket *sock, uint64_t connections);

/** Fills `options` with the defaults, its reserved space zero. */
CORRAL_EXTERN void corral_udp_options_init(struct corral_udp_options *options);

/** Binds one UDP socket per worker on `address` (as corral_server_listen();
 *  port 0 picks an ephemeral port, shared by the group) before the server
 *  starts, with IP_PKTINFO (IPV6_RECVPKTINFO), IP_RECVTOS
 *  (IPV6_RECVTCLASS) and, with options->gro, UDP_GRO on each.  The address
 *  must be free, as for corral_server_listen().  on_recv runs with
 *  corral_udp_data() returning `data`.  `options` may be NULL.  Returns 0,
 *  -EADDRINUSE, -EINVAL (a unix address, bad options, reserved space not
 *  zero), -ENOMEM, ... with no socket left open on failure. */
CORRAL_EXTERN int corral_server_listen_udp(corral_server *server, const char *address,
                                           const struct corral_udp_options *options,
                                           const struct corral_udp_handler *handler, void *data,
                                           corral_udp **out);

/** Serves on a previous server's UDP sockets (corral_udp_fds(), in worker
 *  order), so that a reload keeps the port and what its sockets queued.
 *  The server dup()s the first min(count, workers) of them and sets its
 *  options on them; with fewer than it has workers, new sockets join their
 *  group for the rest.  Sockets beyond its workers stay the caller's:
 *  closing them drops what they queued, and until then the group hashes
 *  datagrams to them too.  Returns -EINVAL if a descriptor is not a bound
 *  UDP socket. */
CORRAL_EXTERN int corral_server_udp_fds(corral_server *server, const int *fds, unsigned count,
                                        const struct corral_udp_options *options,
                                        const struct corral_udp_handler *handler, void *data,
                                        corral_udp **out);

/** The listen's sockets, one per worker in worker order: sets *fds and
 *  returns their count. */
CORRAL_EXTERN unsigned corral_udp_fds(const corral_udp *udp, const int **fds);

/** The bound address, e.g. "127.0.0.1:41234", and port. */
CORRAL_EXTERN int corral_udp_address(const corral_udp *udp, char *buf, size_t len);
CORRAL_EXTERN int corral_udp_port(const corral_udp *udp);

/** Worker `index`'s socket of `udp` (valid from corral_server_start() until
 *  the server is freed). */
CORRAL_EXTERN corral_udp_socket *corral_udp_socket_of(corral_udp *udp, unsigned index);

/** The socket's listen, its `data`, and the worker that owns it. */
CORRAL_EXTERN corral_udp *corral_udp_socket_udp(const corral_udp_socket *sock);
CORRAL_EXTERN void *corral_udp_data(const corral_udp_socket *sock);
CORRAL_EXTERN corral_worker *corral_udp_socket_worker(const corral_udp_socket *sock);

/** Sends `count` messages from `sock`, in order, with as few sendmmsg()
 *  calls as the batch allows.  A message with segment_size goes out as one
 *  GSO send of up to 64 datagrams; when the kernel refuses GSO (EIO: the
 *  device cannot checksum it; EINVAL) the message is sent again as single
 *  datagrams and the listen sends no GSO from then on (logged once, and
 *  counted in gso_fallbacks).  A message the kernel refuses for a reason of
 *  its own (EMSGSIZE, EHOSTUNREACH, ...) is dropped and counted in
 *  send_errors; the others go on.  Returns how many messages, from the
 *  first, the library is done with: `count`, or fewer when the socket's
 *  buffer filled (EAGAIN): send the rest later, after
 *  corral_udp_wait_writable().  A message split into single datagrams
 *  when EAGAIN came may have had its first datagrams sent; they go again
 *  with it.  The socket's worker only; allocates nothing. */
CORRAL_EXTERN size_t corral_udp_send(corral_udp_socket *sock, const struct corral_udp_msg *msgs,
                                     size_t count);

/** Calls the handler's on_writable once when `sock` can take output again
 *  (EPOLLOUT), then stops watching for it.  Returns 0, -EINVAL (the
 *  handler has no on_writable), -EBADF (the sockets were released by
 *  corral_server_close_listeners(): no loop watches it), or epoll_ctl()'s
 *  -errno.  The socket's
 *  worker only. */
CORRAL_EXTERN int corral_udp_wait_writable(corral_udp_socket *sock);

/** Counters of one worker's socket, written by its worker, readable from
 *  any thread. */
struct corral_udp_stats {
    uint64_t received; /* datagrams, a GRO run counted as its datagrams */
    uint64_t received_bytes;
    uint64_t recv_batches; /* recvmmsg() calls that returned datagrams */
    uint64_t truncated;    /* dropped: larger than max_datagram */
    uint64_t sent;         /* datagrams, a GSO run counted as its datagrams */
    uint64_t sent_bytes;
    uint64_t send_calls;    /* sendmmsg() calls */
    uint64_t send_full;     /* times a send stopped on EAGAIN */
    uint64_t send_errors;   /* messages dropped for an error of their own */
    uint64_t gso_sends;     /* messages sent as one GSO send */
    uint64_t gso_fallbacks; /* GSO sends the kernel refused, sent again unsegmented */
    bool gso;               /* GSO in use on this listen now */
    bool gro;               /* GRO enabled on the socket */
    /* steer_quic's eBPF program: new connections it sent to this worker,
     * and datagrams it sent here by the connection ID the server gave. */
    uint64_t steered_new, steered_owned;
    uint64_t reserved[6]; /* zeroed by corral_udp_stats() */
};

/** Reads worker `index`'s counters of `udp`.  Returns 0 or -EINVAL (no
 *  such worker, or the server has not started).  Any thread. */
CORRAL_EXTERN int corral_udp_stats(const corral_udp *udp, unsigned index,
                                   struct corral_udp_stats *out);

/* ---------------------------------------------------------------- workers */

CORRAL_EXTERN unsigned corral_worker_index(const corral_worker *worker);
CORRAL_EXTERN corral_loop *corral_worker_loop(const corral_worker *worker);
CORRAL_EXTERN corral_server *corral_worker_server(const corral_worker *worker);
/** Whether the worker is stopping (a graceful stop): its connections
 *  should finish what they do and not be kept idle.  From the worker's
 *  thread. */
CORRAL_EXTERN bool corral_worker_stopping(const corral_worker *worker);

/** Keeps a stopping worker's loop running as an open connection does:
 *  a graceful stop ends it once it has no connection and no hold left (or
 *  when the grace runs out, whatever the holds).  For what the library does
 *  not count as a connection: a UDP handler's sessions (QUIC), which take a
 *  hold in on_stopping and give it back with corral_worker_release() once
 *  they have ended.  Holds are counted; each hold is released once.  From
 *  the worker's thread. */
CORRAL_EXTERN void corral_worker_hold(corral_worker *worker);
CORRAL_EXTERN void corral_worker_release(corral_worker *worker);

/** corral_loop_post() to the worker's loop; safe from any thread. */
CORRAL_EXTERN int corral_worker_post(corral_worker *worker, corral_callback cb, void *arg);

/** Per-worker counters; each is written only by its worker and may be read
 *  from any thread at any time. */
struct corral_worker_stats {
    uint64_t accepts;            /* connections accepted */
    uint64_t accept_wakeups;     /* times the worker woke with a listener ready */
    uint64_t accept_wasted;      /* of those, wakeups whose first accept() got EAGAIN */
    uint64_t accepts_local;      /* accepts whose SO_INCOMING_CPU is the worker's CPU: counted
                                    in the affinity mode or with count_locality, else 0 */
    uint64_t connections_active; /* open accepted connections */
    uint64_t accept_pauses;      /* times accepting paused (connection limit, EMFILE) */
    int cpu;                     /* the CPU the worker is pinned to, or -1 */
    /* Open connections made with corral_connect() (max_connections counts
     * them too); bytes read and written, after TLS, on accepted
     * connections and on outgoing ones. */
    uint64_t connections_outgoing;
    uint64_t client_bytes_in, client_bytes_out;
    uint64_t outgoing_bytes_in, outgoing_bytes_out;
    uint64_t reserved[8]; /* zeroed by corral_server_stats() */
};

/** Reads worker `index`'s counters.  Safe from any thread. */
CORRAL_EXTERN void corral_server_stats(const corral_server *server, unsigned index,
                                       struct corral_worker_stats *out);

/** What the eBPF steering program did for one worker (wakeup mechanism
 *  "ebpf"); the program and the worker write these, any thread may read. */
struct corral_steer_stats {
    uint64_t steered;     /* connections the program sent to this worker */
    uint64_t local;       /* affinity: kept on their arrival CPU, which is this worker's */
    uint64_t spills;      /* affinity: arrived on this worker's CPU, sent to a less loaded one */
    uint64_t load;        /* what the program weighs: open connections + steered, not accepted */
    bool accepting;       /* the program may choose this worker */
    bool stalled;         /* connections have waited on it, none accepted, for 2 ms */
    uint64_t taken;       /* balanced: connections it took off other workers' queues */
    uint64_t reserved[4]; /* zeroed by corral_server_steer_stats() */
};

/** Reads worker `index`'s steering counters.  Returns 0, -ENOTSUP when the
 *  server is not steered by eBPF (or a later server took its program over),
 *  or -EINVAL for a bad index.  Safe from
 *  any thread after corral_server_start(). */
CORRAL_EXTERN int corral_server_steer_stats(const corral_server *server, unsigned index,
                                            struct corral_steer_stats *out);

/** Lends the server's listening sockets to another process's eBPF steering
 *  program (`lend` true), or takes them back (false).  A socket can be in
 *  one program's array only, so a binary upgrade's new process can steer
 *  the sockets it inherits only once the old one has let them go; until
 *  either program has them, the kernel spreads connections by hash, and
 *  nothing is lost.  Returns 0 (also when the server is not steered by
 *  eBPF), or -errno from taking them back.  Call from the thread that
 *  started the server. */
CORRAL_EXTERN int corral_server_steer_lend(corral_server *server, bool lend);

#ifdef __cplusplus
}
#endif
#endif /* CORRAL_H */
