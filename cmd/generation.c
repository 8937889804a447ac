/*
 * generation.c: the life of generations.  Starts one from a configuration
 * on the sockets of the one before it (or systemd's, or new ones), reloads
 * on SIGHUP, stops them, and keeps the counters of those that have exited.
 */
#include "cmd/generation.h"
#include "cmd/runtime_acme.h"
#include "cmd/metrics.h"
#include "cmd/notify.h"
#include "cmd/process.h"
#include "cmd/runtime.h"
#include "cmd/runtime_vars.h"
#include "proto/upstream/health.h"
#include "proto/upstream/resolve.h"
#include "proto/http1/http1.h" /* the handover of idle HTTP/1.1 connections */
#include "proto/http3/http3.h" /* a quic listen's handler */

#include <assert.h>
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>

struct daemon_state daemon_state = {.lock = PTHREAD_MUTEX_INITIALIZER};

static corral_loop *main_loop;
static bool stopping;
static int exit_status;      /* 1 once the daemon stops because it cannot serve */
static bool listened_beside; /* the last generation_start() joined the old sockets' group */

/* The new process of a binary upgrade, which takes over idle connections
 * on this socket once it serves: -1 until then.  Set before the stop that
 * makes connections idle, read on the workers. */
static atomic_int upgrade_channel = -1;

void generations_pass_to(int channel)
{
    atomic_store_explicit(&upgrade_channel, channel, memory_order_release);
}

/* Passes a detached plain connection of `site` to the new process: its
 * socket, and the address it was accepted on for the new process to find
 * its site.  Then frees it here, which leaves the socket open there. */
static int pass_connection(int channel, const struct site *site, corral_conn *conn)
{
    char address[128];
    int err = corral_listener_address(site->listener, address, sizeof(address));
    if (err != 0)
        return err;
    int fd = corral_conn_fd(conn);
    union {
        struct cmsghdr align;
        char space[CMSG_SPACE(sizeof(int))];
    } control = {0};
    struct iovec iov = {.iov_base = address, .iov_len = strlen(address) + 1};
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = control.space,
                         .msg_controllen = sizeof(control.space)};
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
    ssize_t sent;
    while ((sent = sendmsg(channel, &msg, MSG_DONTWAIT | MSG_NOSIGNAL)) == -1 && errno == EINTR)
        ;
    if (sent == -1)
        return -errno; /* a full socket: closed here, as without an upgrade */
    corral_conn_close_detached(conn, 0);
    return 0;
}

/* http1's handover: a stopping generation's idle connection goes on to the
 * newest generation's site for the same address, on its workers in turn,
 * or else to the new process of a binary upgrade if it is plain (TLS state
 * cannot leave the process) and holds no unconsumed input.  The choice and
 * the post to the worker happen under the lock, so that the newest
 * generation cannot exit between the two. */
static int hand_over(const struct http_site *from, corral_conn *conn, bool detached)
{
    static atomic_uint turn;
    const struct site *old =
        (const struct site *)((const char *)from - offsetof(struct site, http));
    int err = -ENOENT;
    pthread_mutex_lock(&daemon_state.lock);
    struct generation *newest = daemon_state.generations;
    struct site *site =
        newest != NULL && !newest->stop_requested ? find_site(newest, old->address) : NULL;
    if (site != NULL && site != old && site->listener != NULL) {
        err = 0;
        if (detached) {
            unsigned index = atomic_fetch_add_explicit(&turn, 1, memory_order_relaxed) %
                             corral_server_worker_count(newest->server);
            http1_conn_rebind(conn, &site->http, index);
            corral_conn_adopt(corral_server_worker(newest->server, index), conn, site->listener);
        }
    }
    pthread_mutex_unlock(&daemon_state.lock);
    int channel = atomic_load_explicit(&upgrade_channel, memory_order_acquire);
    if (err != 0 && channel != -1 && corral_conn_transport_state(conn) == NULL &&
        corral_conn_kept_input(conn) == 0)
        err = detached ? pass_connection(channel, old, conn) : 0;
    return err;
}

void generations_init(corral_loop *loop)
{
    main_loop = loop;
    http1_set_handover(hand_over);
}

int generations_exit_status(void)
{
    return exit_status;
}

/* Listens for `site` in `gen`: on the previous generation's sockets when it
 * had the same address with the same socket layout, on a socket passed by
 * systemd, else on a new one.  Returns -EADDRINUSE when the previous
 * generation holds the address with another layout. */
static int site_listen(struct generation *gen, struct site *site, struct generation *previous)
{
    struct site *old = find_site(previous, site->address);
    if (old != NULL && old->listener != NULL) {
        const int *fds;
        unsigned count = corral_listener_fds(old->listener, &fds);
        if (count != corral_server_sockets_per_listener(gen->server))
            return -EADDRINUSE;
        return corral_server_listen_fds(gen->server, fds, count, &site->listen_options,
                                        site_handler(site), site_handler_data(site),
                                        &site->listener);
    }
    const int *activated;
    unsigned count = activated_sockets_find(site->address, &activated);
    /* One socket serves in any layout; a group passed by the process this
     * one upgrades is used as it is, or joined in another layout. */
    if (count == 1 || (count > 0 && count == corral_server_sockets_per_listener(gen->server)))
        return corral_server_listen_fds(gen->server, activated, count, &site->listen_options,
                                        site_handler(site), site_handler_data(site),
                                        &site->listener);
    if (count > 0)
        return corral_server_listen_beside(gen->server, activated, count, &site->listen_options,
                                           site_handler(site), site_handler_data(site),
                                           &site->listener);
    return corral_server_listen(gen->server, site->address, &site->listen_options,
                                site_handler(site), site_handler_data(site), &site->listener);
}

/* Listens for the udp sites of `gen` (stream udp and quic listens): on the
 * previous generation's sockets for the same address (so a reload neither
 * closes the port nor
 * loses what its sockets queued), or on those a binary upgrade or systemd
 * passed, else on new ones.  A udp listen is one
 * socket per worker whatever the wakeup mode, so a change of mode or
 * worker count keeps the sockets too (corral_server_udp_fds() adds or
 * leaves some).  Returns 0 or -errno (logged). */
static int udp_sites_listen(struct generation *gen, struct generation *previous)
{
    for (size_t i = 0; i < gen->udp_site_count; i++) {
        struct site *site = &gen->udp_sites[i];
        struct site *old = find_udp_site(previous, site->address);
        struct corral_udp_options options;
        corral_udp_options_init(&options);
        options.max_datagram = 65535; /* nginx reads datagrams whole, up to UDP's bound */
        options.recv_batch = 8;
        /* A burst of a QUIC connection's datagrams read in one run
         * (libcorral reads one by one where the kernel refuses it). */
        options.gro = site->quic != NULL;
        /* Every datagram of a connection to the worker that owns it, also
         * when the client's address changes (docs/http3.md). */
        if (site->quic != NULL && gen->config->quic_bpf) {
            options.steer_quic = &h3_endpoint_quic_ids;      /* eBPF, */
            options.steer_cbpf = &h3_endpoint_steer_program; /* else classic BPF */
        }
        int err;
        const int *fds;
        unsigned count = 0;
        if (old != NULL && old->udp != NULL)
            count = corral_udp_fds(old->udp, &fds);
        else /* passed by the process this one upgrades, or by systemd */
            count = activated_udp_sockets_find(site->address, &fds);
        const struct corral_udp_handler *handler =
            site->quic != NULL ? &h3_udp_handler : &stream_udp_handler;
        void *data = site->quic != NULL ? (void *)site->quic : (void *)site->stream;
        /* The connections open on the previous generation keep theirs: the
         * new one passes them their datagrams (docs/http3.md, Reload). */
        if (site->quic != NULL && old != NULL && old->quic != NULL && old->udp != NULL)
            h3_udp_site_follow(site->quic, old->quic);
        if (count > 0) {
            err =
                corral_server_udp_fds(gen->server, fds, count, &options, handler, data, &site->udp);
        } else {
            err = corral_server_listen_udp(gen->server, site->address, &options, handler, data,
                                           &site->udp);
        }
        if (err != 0) {
            log_error("listen %s %s: %s", site->address, site->quic != NULL ? "quic" : "udp",
                      strerror(-err));
            return err;
        }
    }
    return 0;
}

/* The listen of `gen` or `previous` (NULL: none) other than `site` whose
 * socket has `port`, or NULL. */
static const struct site *site_on_port(const struct generation *gen, const struct site *site,
                                       int port)
{
    for (size_t i = 0; gen != NULL && i < gen->site_count; i++)
        if (&gen->sites[i] != site && gen->sites[i].listener != NULL &&
            corral_listener_port(gen->sites[i].listener) == port)
            return &gen->sites[i];
    return NULL;
}

/* A new socket for `site` found its port taken.  By a listen of this
 * configuration, or of the running one, on an overlapping address (`*:80`
 * and `127.0.0.1:80`), as nginx refuses it too.  Otherwise by a socket
 * this process does not have: another corral or another service, whose
 * SO_REUSEPORT group corral does not join, as that would split the port's
 * connections with it. */
static void log_address_in_use(const struct generation *gen, const struct site *site,
                               const struct generation *previous)
{
    struct sockaddr_storage addr;
    socklen_t len;
    int port = 0;
    if (corral_parse_address(site->address, &addr, &len) != 0)
        addr.ss_family = AF_UNSPEC;
    if (addr.ss_family == AF_INET)
        port = ntohs(((const struct sockaddr_in *)&addr)->sin_port);
    else if (addr.ss_family == AF_INET6)
        port = ntohs(((const struct sockaddr_in6 *)&addr)->sin6_port);
    const struct site *own = port != 0 ? site_on_port(gen, site, port) : NULL;
    const struct site *running =
        port != 0 && own == NULL ? site_on_port(previous, site, port) : NULL;
    if (own != NULL)
        log_error("listen %s: address already in use (by listen %s of this configuration)",
                  site->address, own->address);
    else if (running != NULL)
        log_error("listen %s: address already in use (by listen %s of the running configuration)",
                  site->address, running->address);
    else
        log_error("listen %s: address already in use (another process listens there)",
                  site->address);
}

/* After the previous generation closed its sockets: new ones on the very
 * address it had bound (the same port even where the config says 0). */
static int site_relisten(struct generation *gen, struct site *site, struct generation *previous)
{
    char bound[128];
    struct site *old = find_site(previous, site->address);
    if (old == NULL || corral_listener_address(old->listener, bound, sizeof(bound)) != 0)
        return site_listen(gen, site, NULL);
    return corral_server_listen(gen->server, bound, &site->listen_options, site_handler(site),
                                site_handler_data(site), &site->listener);
}

/* A change of socket layout (shared socket or one per worker, or another
 * worker count): the new generation listens beside the previous one's
 * sockets, in one SO_REUSEPORT group with them, so that the port never
 * stops accepting; closing the old sockets once the previous generation
 * stops hands over what they queued (corral_server_close_listeners()).
 * Returns 0, or -errno for the sites still without a listener. */
static int listen_beside(struct generation *gen, struct generation *previous)
{
    int err = 0;
    for (size_t i = 0; i < gen->site_count && err == 0; i++) {
        struct site *site = &gen->sites[i];
        struct site *old = find_site(previous, site->address);
        if (site->listener != NULL || old == NULL || old->listener == NULL)
            continue;
        const int *fds;
        unsigned count = corral_listener_fds(old->listener, &fds);
        err = corral_server_listen_beside(gen->server, fds, count, &site->listen_options,
                                          site_handler(site), site_handler_data(site),
                                          &site->listener);
    }
    return err;
}

/* After a layout change, once the previous generation's sockets are closed:
 * the groups pick sockets as new ones do, and a shared socket leaves the
 * SO_REUSEPORT group it was made in, so that another process binding its
 * port fails again. */
static void leave_reuseport_groups(struct generation *gen)
{
    corral_server_listeners_settled(gen->server);
    if (corral_server_sockets_per_listener(gen->server) != 1)
        return;
    int zero = 0;
    for (size_t i = 0; i < gen->site_count; i++) {
        const int *fds;
        if (gen->sites[i].listener != NULL && corral_listener_port(gen->sites[i].listener) != 0 &&
            corral_listener_fds(gen->sites[i].listener, &fds) == 1)
            setsockopt(fds[0], SOL_SOCKET, SO_REUSEPORT, &zero, sizeof(zero));
    }
}

/* Whether `fd` is a socket of one of `gen`'s TCP listeners: the same
 * socket through another descriptor (a generation listens on copies). */
static bool generation_holds(const struct generation *gen, int fd)
{
    struct stat passed;
    if (fstat(fd, &passed) != 0)
        return false;
    for (size_t i = 0; i < gen->site_count; i++) {
        const int *fds;
        /* corral_listener_fds() on a unix listener would disown its file. */
        if (gen->sites[i].listener == NULL || corral_listener_port(gen->sites[i].listener) == 0)
            continue;
        unsigned count = corral_listener_fds(gen->sites[i].listener, &fds);
        for (unsigned k = 0; k < count; k++) {
            struct stat held;
            if (fds[k] != -1 && fstat(fds[k], &held) == 0 && held.st_dev == passed.st_dev &&
                held.st_ino == passed.st_ino)
                return true;
        }
    }
    for (size_t i = 0; i < gen->udp_site_count; i++) {
        const int *fds;
        if (gen->udp_sites[i].udp == NULL)
            continue;
        unsigned count = corral_udp_fds(gen->udp_sites[i].udp, &fds);
        for (unsigned k = 0; k < count; k++) {
            struct stat held;
            if (fstat(fds[k], &held) == 0 && held.st_dev == passed.st_dev &&
                held.st_ino == passed.st_ino)
                return true;
        }
    }
    return false;
}

/* The listener of `gen` bound to `address` (as the kernel reports it), or
 * NULL. */
static corral_listener *generation_listener_at(const struct generation *gen, const char *address)
{
    for (size_t i = 0; i < gen->site_count; i++) {
        char bound[128];
        if (gen->sites[i].listener != NULL &&
            corral_listener_address(gen->sites[i].listener, bound, sizeof(bound)) == 0 &&
            strcmp(bound, address) == 0)
            return gen->sites[i].listener;
    }
    return NULL;
}

/* activated_sockets_release() for the generation `arg`, the newest.  A
 * passed socket it does not hold must not stay open: in a SO_REUSEPORT
 * group it would take its share of the port's new connections, which no
 * one accepts.  This happens when the new process of a binary upgrade, or a
 * reload after one, changes the socket layout and keeps fewer sockets than
 * were passed.  What such a socket queued goes to the generation's own
 * listener on the address first.  A passed socket whose address it does
 * not serve is closed too when an upgrade passed it; one from systemd is
 * kept (systemd holds and queues on it anyway) for a later reload that
 * listens there again.  Unix sockets are never in a group, and stay. */
static bool passed_socket_unused(int fd, const char *address, bool udp, bool upgraded, void *arg)
{
    const struct generation *gen = arg;
    if (strncmp(address, "unix:", 5) == 0 || generation_holds(gen, fd))
        return false;
    /* A datagram socket has no queue a listener could take: one the
     * generation does not hold would take its share of the port's
     * datagrams, which no one reads. */
    if (udp)
        return upgraded;
    corral_listener *listener = generation_listener_at(gen, address);
    if (listener == NULL)
        return upgraded;
    /* -EINVAL before the generation starts (re-created sockets): the
     * queue is reset, as the re-creation refuses connections anyway. */
    corral_listener_take_queue(listener, fd);
    return true;
}

void generations_release_passed(void)
{
    if (daemon_state.generations != NULL)
        activated_sockets_release(passed_socket_unused, daemon_state.generations);
}

static void on_generation_exit(void *arg);

/* Starts the upstreams' health checks and name re-resolution on the main
 * loop, each from the health (and resolved addresses) its namesake in
 * `previous` found, so that a reload neither sends requests to a server
 * known to be down nor restarts a slow start. */
static int upstreams_check_health(struct generation *gen, const struct generation *previous)
{
    for (size_t i = 0; i < gen->upstream_count; i++) {
        struct proxy_upstream *up = gen->upstreams[i].upstream;
        for (size_t j = 0; previous != NULL && j < previous->upstream_count; j++) {
            const struct proxy_upstream *old = previous->upstreams[j].upstream;
            if (strcmp(upstream_name(old), upstream_name(up)) == 0) {
                upstream_take_health(up, old);
                break;
            }
        }
        int err = health_start(up, main_loop);
        if (err == 0)
            err = resolve_start(up, main_loop);
        if (err != 0)
            return err;
    }
    return 0;
}

/* Main loop: access_log flush=: each worker writes the lines it gathered. */
static void on_log_flush(corral_timer *timer, void *arg)
{
    struct generation *gen = arg;
    for (size_t i = 0; i < gen->log_count; i++)
        access_log_post_flushes(gen->logs[i], gen->server);
    corral_timer_start(timer, gen->log_flush_ms);
}

/* Adds `log` to the list of `gen` (`count` of them), which frees it. */
static int logs_add(struct access_log ***list, size_t *count, struct access_log *log)
{
    struct access_log **grown = realloc(*list, (*count + 1) * sizeof(*grown));
    if (grown == NULL) {
        access_log_free(log);
        return -ENOMEM;
    }
    grown[(*count)++] = log;
    *list = grown;
    return 0;
}

/* Opens the file of one access_log line. */
static int log_open(struct generation *gen, const struct conf_access_log *conf, unsigned workers,
                    struct access_log **out)
{
    const struct vars_template *format;
    enum vars_escape escape;
    int err = runtime_vars_log_format_for(gen->vars, gen->config, conf->format, &format, &escape);
    if (err != 0)
        return err;
    struct access_log *log;
    err = access_log_open_compiled(conf->path, format, &log);
    if (err != 0) {
        log_error("access_log %s: %s", conf->path, strerror(-err));
        return err;
    }
    access_log_set_escape(log, escape);
    if (conf->buffer > 0 && (err = access_log_set_buffer(log, conf->buffer, workers)) != 0) {
        access_log_free(log);
        return err;
    }
    if (conf->flush_ms > 0 && (gen->log_flush_ms == 0 || conf->flush_ms < gen->log_flush_ms))
        gen->log_flush_ms = conf->flush_ms;
    *out = log;
    return logs_add(&gen->logs, &gen->log_count, log);
}

/* The log of one level's access_log lines (a tee over their files), NULL
 * when the level has none (it inherits). */
static int level_log(struct generation *gen, const struct conf_access_logs *conf, unsigned workers,
                     struct access_log **out)
{
    *out = NULL;
    if (!conf->set)
        return 0;
    struct access_log **files = calloc(conf->count > 0 ? conf->count : 1, sizeof(*files));
    if (files == NULL)
        return -ENOMEM;
    int err = 0;
    for (size_t i = 0; i < conf->count && err == 0; i++)
        err = log_open(gen, &conf->items[i], workers, &files[i]);
    struct access_log *tee = NULL;
    if (err == 0)
        err = access_log_tee(files, conf->count, &tee);
    free(files);
    if (err == 0)
        err = logs_add(&gen->tees, &gen->tee_count, tee);
    *out = err == 0 ? tee : NULL;
    return err;
}

/* A stream's access_log lines: the stream block's, or its server's,
 * which replace them; none from the top level, which is HTTP's.  Each
 * server of an address shared by several has its own. */
static int stream_logs_attach(struct generation *gen, unsigned workers)
{
    const struct conf_stream *stream = &gen->config->stream;
    struct access_log *top;
    int err = level_log(gen, &stream->access_logs, workers, &top);
    struct access_log **own = calloc(stream->server_count + 1, sizeof(*own));
    if (own == NULL)
        return -ENOMEM;
    for (size_t s = 0; s < stream->server_count && err == 0; s++) {
        err = level_log(gen, &stream->servers[s].access_logs, workers, &own[s]);
        if (own[s] == NULL)
            own[s] = top;
    }
    for (size_t i = 0; i < gen->site_count + gen->udp_site_count && err == 0; i++) {
        struct site *site =
            i < gen->site_count ? &gen->sites[i] : &gen->udp_sites[i - gen->site_count];
        if (site->stream == NULL)
            continue;
        size_t count = site->stream->vhost_count > 0 ? site->stream->vhost_count : 1;
        for (size_t v = 0; v < count; v++) {
            struct stream_site *st =
                site->stream->vhost_count > 0 ? site->stream->vhosts[v] : site->stream;
            const struct conf_stream_server *server = st->origin;
            st->log = own[server - stream->servers];
        }
    }
    free(own);
    return err;
}

/* access_log at the top, server and location levels: each level's files
 * opened once, and each site, vhost and location given the log of its
 * level (NULL: the enclosing one's, see access_log_route()).  buffer= and
 * flush=: lines gathered per worker, and a main-loop timer that has them
 * written.  Returns 0 or -errno (logged). */
static int logs_attach(struct generation *gen, unsigned workers)
{
    const struct conf_config *config = gen->config;
    struct access_log *top;
    int err = level_log(gen, &config->access_logs, workers, &top);
    size_t location_total = 0;
    for (size_t s = 0; s < config->server_count; s++)
        location_total += config->servers[s].location_count;
    struct access_log **servers = calloc(config->server_count + 1, sizeof(*servers));
    struct access_log **locations = calloc(location_total + 1, sizeof(*locations));
    if (servers == NULL || locations == NULL)
        err = -ENOMEM;
    for (size_t s = 0, l = 0; s < config->server_count && err == 0; s++) {
        const struct conf_server *server = &config->servers[s];
        err = level_log(gen, &server->access_logs, workers, &servers[s]);
        for (size_t i = 0; i < server->location_count && err == 0; i++)
            err = level_log(gen, &server->locations[i].access_logs, workers, &locations[l++]);
    }
    /* The HTTP sites, then the quic ones among the udp listens. */
    for (size_t i = 0; i < gen->site_count + gen->udp_site_count && err == 0; i++) {
        struct site *site =
            i < gen->site_count ? &gen->sites[i] : &gen->udp_sites[i - gen->site_count];
        if (site->admin || site->stream != NULL)
            continue;
        site->http.access_log = top;
        for (size_t v = 0; v < site->http.vhost_count; v++) {
            struct http_vhost *vhost = &site->vhosts[v];
            unsigned s = vhost->stats_slot; /* its server block */
            assert(s < config->server_count);
            size_t first = 0;
            for (unsigned k = 0; k < s; k++)
                first += config->servers[k].location_count;
            assert(first + vhost->location_count <= location_total);
            vhost->access_log = servers[s];
            for (size_t l = 0; l < vhost->location_count; l++)
                ((struct http_location *)&vhost->locations[l])->access_log = locations[first + l];
        }
        for (size_t n = 0; n < site->nested_count; n++)
            site->locations[site->location_count + n].access_log =
                site->locations[site->nested_parent[n]].access_log;
    }
    free(servers);
    free(locations);
    if (err == 0)
        err = stream_logs_attach(gen, workers);
    if (err == 0 && gen->log_flush_ms > 0 && main_loop != NULL) {
        err = corral_timer_new(main_loop, on_log_flush, gen, &gen->log_flush);
        if (err == 0)
            corral_timer_start(gen->log_flush, gen->log_flush_ms);
    }
    if (err == -ENOMEM)
        log_error("access_log: %s", strerror(-err));
    return err;
}

int generation_start(struct conf_config *config, struct generation *previous,
                     struct generation **out)
{
    int err;
    struct generation *gen = calloc(1, sizeof(*gen));
    if (gen == NULL) {
        conf_free(config);
        return -ENOMEM;
    }
    gen->config = config;
    struct corral_server_config server_config;
    corral_server_config_init(&server_config);
    server_config.workers = config->workers;
    server_config.wakeup = config->wakeup;
    server_config.wakeup_spill = config->wakeup_spill;
    server_config.max_connections = config->max_connections;
    server_config.busy_poll_usecs = config->busy_poll_usecs;
    server_config.io_uring_off = !config->io_uring;
    err = corral_server_new(&server_config, &gen->server);
    if (err != 0)
        goto fail;
    unsigned workers = corral_server_worker_count(gen->server);
    if (workers > DAEMON_MAX_WORKERS) {
        log_error("workers %u: at most %d are supported", workers, DAEMON_MAX_WORKERS);
        err = -EINVAL;
        goto fail;
    }
    gen->stats = aligned_alloc(64, workers * sizeof(*gen->stats));
    if (gen->stats == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    memset(gen->stats, 0, workers * sizeof(*gen->stats));
    err = metrics_attach(gen, workers);
    if (err != 0)
        goto fail;

    privileged_reads(true); /* certificates and keys; no thread starts meanwhile */
    err = sites_build(gen, config, workers);
    privileged_reads(false);
    if (err != 0)
        goto fail;
    err = upstreams_check_health(gen, previous);
    if (err != 0)
        goto fail;
    err = logs_attach(gen, workers);
    if (err != 0)
        goto fail;
    for (size_t i = 0; i < gen->site_count; i++) {
        struct site *site = &gen->sites[i];
        site->http.stats = gen->stats;
        /* Tickets issued before a reload keep resuming after it. */
        struct site *old = find_site(previous, site->address);
        if (site->http.tls != NULL && old != NULL && old->http.tls != NULL) {
            tls_server_take_ticket_keys(site->http.tls, old->http.tls);
            tls_server_take_staples(site->http.tls, old->http.tls);
        }
        /* OCSP responses are fetched once for every worker. */
        if (site->http.tls != NULL && main_loop != NULL &&
            (err = tls_server_stapling_start(site->http.tls, main_loop)) != 0)
            goto fail;
    }
    /* ACME orders and renewals run on the main loop too. */
    if (main_loop != NULL && (err = runtime_acme_start(gen->acme, main_loop)) != 0)
        goto fail;

    /* Inherit what can be inherited first, so that closing the previous
     * generation's sockets (for a layout change) cannot pull any we need. */
    bool layout_changed = false;
    for (size_t i = 0; i < gen->site_count; i++) {
        struct site *site = &gen->sites[i];
        const struct site *old = find_site(previous, site->address);
        err = site_listen(gen, site, previous);
        if (err == -EADDRINUSE && old != NULL && old->listener != NULL) {
            layout_changed = true;
            continue;
        }
        if (err == -EADDRINUSE) {
            log_address_in_use(gen, site, previous);
            goto fail;
        }
        if (err != 0) {
            log_error("listen %s: %s", site->address, strerror(-err));
            goto fail;
        }
    }
    listened_beside = layout_changed;
    if (layout_changed && listen_beside(gen, previous) != 0) {
        listened_beside = false;
        /* Switching between shared and per-worker sockets needs new sockets
         * on the same ports, which the old ones block when they cannot be
         * joined (another user made them, before the privilege drop). */
        log_warn("the listening socket layout changes (wakeup or workers): closing the "
                 "sockets to re-create them; connections arriving meanwhile are refused");
        corral_server_close_listeners(previous->server);
        previous->listeners_closed = true;
        /* The copies passed in by an upgrade would hold the ports. */
        activated_sockets_release(passed_socket_unused, gen);
        for (size_t i = 0; i < gen->site_count; i++) {
            struct site *site = &gen->sites[i];
            if (site->listener != NULL)
                continue;
            err = site_relisten(gen, site, previous);
            if (err != 0) {
                log_error("listen %s: %s; generation %u no longer accepts", site->address,
                          strerror(-err), previous->number);
                goto fail;
            }
        }
    }
    for (size_t i = 0; i < gen->udp_site_count; i++)
        gen->udp_sites[i].http.stats = gen->stats; /* a quic site's */
    err = udp_sites_listen(gen, previous);
    if (err != 0)
        goto fail;
    corral_server_on_exit(gen->server, main_loop, on_generation_exit, gen);
    err = corral_server_start(gen->server);
    if (err != 0)
        goto fail;
    gen->number = ++daemon_state.generation_count;
    *out = gen;
    return 0;

fail:
    generation_free(gen);
    return err;
}

/* Adds an exited generation's counters to the retired totals. */
static void retire_counters(struct generation *gen)
{
    struct retired_totals *retired = &daemon_state.retired;
    for (unsigned i = 0; i < corral_server_worker_count(gen->server); i++) {
        struct corral_worker_stats stats;
        corral_server_stats(gen->server, i, &stats);
        retired->accepts[i] += stats.accepts;
        retired->accept_wakeups[i] += stats.accept_wakeups;
        retired->accept_wasted[i] += stats.accept_wasted;
        retired->accepts_local[i] += stats.accepts_local;
        for (unsigned s = 0; s < HTTP_MAX_STATUS; s++)
            retired->responses[s] += atomic_load(&gen->stats[i].responses[s]);
        for (unsigned k = 0; k < HTTP_TIMEOUT_KINDS; k++)
            retired->timeouts[k] += atomic_load(&gen->stats[i].timeouts[k]);
        for (int k = 0; k < HTTP2_COUNTERS; k++)
            retired->http2[k] += atomic_load(&gen->stats[i].http2[k]);
        for (int k = 0; k < PROXY_PROTOCOL_FAILURES; k++)
            retired->proxy_protocol[k] += atomic_load(&gen->stats[i].proxy_protocol[k]);
        tls_totals_add(&retired->tls, gen, i);
    }
    for (size_t i = 0; i < gen->upstream_count; i++)
        upstream_errors_add(retired->upstreams, &retired->upstream_count,
                            gen->upstreams[i].upstream);
    metrics_retire(gen);
    metrics_stream_retire(gen);
}

/* Main loop: the last worker of `arg` has exited. */
static void on_generation_exit(void *arg)
{
    struct generation *gen = arg;
    corral_server_wait(gen->server);
    pthread_mutex_lock(&daemon_state.lock);
    struct generation **link = &daemon_state.generations;
    while (*link != gen)
        link = &(*link)->next;
    *link = gen->next;
    retire_counters(gen);
    pthread_mutex_unlock(&daemon_state.lock);
    if (gen->stop_requested || stopping) {
        log_info("generation %u finished", gen->number);
    } else {
        /* Only the newest generation is never asked to stop: its workers
         * failed (the errors are logged above) and nothing accepts any more.
         * Exit with an error for a supervisor to restart the daemon, as a
         * process that ran on would look alive while refusing every
         * connection.  Older generations still draining may finish. */
        log_error("generation %u: every worker stopped on its own; stopping", gen->number);
        exit_status = 1;
        stop_all(gen->config->drain_timeout_ms);
    }
    generation_free(gen);
    if (daemon_state.generations == NULL && stopping)
        corral_loop_stop(main_loop);
}

void log_wakeup(const struct generation *gen)
{
    struct corral_wakeup_info info;
    corral_server_wakeup(gen->server, &info);
    log_info("generation %u: %u workers, wakeup %s resolved to %s (%s)", gen->number,
             corral_server_worker_count(gen->server), corral_wakeup_mode_name(info.requested),
             corral_wakeup_mode_name(info.mode), info.impl);
}

/* Logs each error of a config as the parser finds it. */
static void log_config_error(void *arg, const char *message)
{
    unsigned *count = arg;
    ++*count;
    log_error("%s", message);
}

int load_config(const char *path, struct conf_config **out)
{
    runtime_modules_init(); /* the modules' directives, before the first parse */
    struct conf_error error;
    unsigned count = 0;
    int rc = path != NULL
                 ? conf_load_each(path, log_config_error, &count, out, &error)
                 : conf_parse_each("<built-in>", conf_default_text, strlen(conf_default_text), NULL,
                                   NULL, log_config_error, &count, out, &error);
    if (rc != 0) {
        if (count == 0)
            log_error("%s", error.text[0] != '\0' ? error.text : "invalid configuration");
        else if (count >= CONF_ERRORS_MAX)
            log_error("%s: stopped after %u errors", path != NULL ? path : "<built-in>", count);
        else if (count > 1)
            log_error("%s: %u errors", path != NULL ? path : "<built-in>", count);
        return -EINVAL;
    }
    if (check_servable(*out) != 0) {
        conf_free(*out);
        *out = NULL;
        return -EINVAL;
    }
    return 0;
}

/* Closes the generation's listening sockets, then stops it.  Closing comes
 * first, while every worker runs to let go of the sockets (a draining
 * generation's workers exit one by one), and only once.  On a reload the
 * new generation serves the same sockets through its own descriptors; on a
 * stop the sockets close with this, and new clients are refused at once
 * instead of queueing where no one will accept them. */
static void generation_stop(struct generation *gen, uint32_t graceful_ms)
{
    /* A stop with no one to take the udp sockets over keeps them read by
     * the stopping workers, so that QUIC connections can finish their
     * requests; a reload's new generation, or an upgrade's new process,
     * reads them from now on. */
    bool upgraded = atomic_load_explicit(&upgrade_channel, memory_order_relaxed) != -1;
    bool keep_udp = stopping && !upgraded;
    for (size_t i = 0; i < gen->udp_site_count; i++) {
        struct site *site = &gen->udp_sites[i];
        /* Nothing will read a quic listen's datagrams here any more: its
         * connections are told at once rather than left to stall. */
        if (site->quic != NULL && !keep_udp &&
            (upgraded || find_udp_site(daemon_state.generations, site->address) == NULL))
            h3_udp_site_close_on_stop(site->quic);
    }
    if (!gen->listeners_closed) {
        if (keep_udp)
            corral_server_close_tcp_listeners(gen->server);
        else
            corral_server_close_listeners(gen->server);
        gen->listeners_closed = true;
    }
    /* Under the lock: the handover reads it on the workers. */
    pthread_mutex_lock(&daemon_state.lock);
    gen->stop_requested = true;
    pthread_mutex_unlock(&daemon_state.lock);
    /* The newer generation checks the servers now. */
    for (size_t i = 0; i < gen->upstream_count; i++) {
        health_stop(gen->upstreams[i].upstream);
        resolve_stop(gen->upstreams[i].upstream);
    }
    for (size_t i = 0; i < gen->site_count; i++)
        if (gen->sites[i].http.tls != NULL)
            tls_server_stapling_stop(gen->sites[i].http.tls);
    runtime_acme_stop(gen->acme);
    corral_server_stop(gen->server, graceful_ms);
}

/* Whether two optional strings of a config differ. */
static bool setting_changed(const char *was, const char *now)
{
    return (was == NULL) != (now == NULL) || (was != NULL && strcmp(was, now) != 0);
}

/* A reload leaves what is read at start as it was: each such directive it
 * changes is named, with what to do, rather than ignored in silence. */
static void warn_start_only(const struct generation *previous, struct generation *gen)
{
    const struct conf_config *was = previous->config, *now = gen->config;
    static const char fix[] = "read at start only: restart corral (or upgrade it, SIGUSR2) to "
                              "apply it";
    const struct {
        const char *name, *was, *now;
    } settings[] = {
        {"user", was->user, now->user},
        {"group", was->group, now->group},
        {"pid_file", was->pid_file, now->pid_file},
        {"error_log", was->error_log, now->error_log}, /* its level applies */
    };
    for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++)
        if (setting_changed(settings[i].was, settings[i].now))
            log_warn("reload: \"%s\" changed from %s to %s; it is %s", settings[i].name,
                     settings[i].was != NULL ? settings[i].was : "none",
                     settings[i].now != NULL ? settings[i].now : "none", fix);
    /* A removed address closes with the reload, unless systemd passed its
     * socket: systemd keeps it open, and clients queue there unanswered. */
    for (size_t i = 0; i < previous->site_count; i++) {
        const char *address = previous->sites[i].address;
        const int *fds;
        if (find_site(gen, address) == NULL && activated_sockets_find(address, &fds) > 0)
            log_warn("reload: listen %s was removed, but its socket is systemd's and stays "
                     "open; remove it from the .socket unit and restart corral",
                     address);
    }
}

/* For corral_reloads_total and /status. */
static void count_reload(bool ok)
{
    atomic_fetch_add(ok ? &daemon_state.reloads_ok : &daemon_state.reloads_failed, 1);
    atomic_store(&daemon_state.last_reload_failed, !ok);
}

/* SIGHUP, once the daemon is known to be serving. */
static void reload_generation(void)
{
    struct generation *previous = daemon_state.generations, *gen;
    struct conf_config *config;
    log_info("SIGHUP: reloading %s",
             daemon_state.config_path ? daemon_state.config_path : "the built-in configuration");
    privileged_reads(true);
    int loaded = load_config(daemon_state.config_path, &config);
    privileged_reads(false);
    if (loaded != 0) {
        log_error("reload failed; generation %u keeps serving", previous->number);
        count_reload(false);
        return;
    }
    int err = generation_start(config, previous, &gen);
    if (err != 0 && previous->listeners_closed) {
        /* A socket layout change closed its sockets and new ones could not
         * be made: it serves what it has in flight but accepts nothing, as
         * when its workers stop on their own. */
        log_error("reload failed (%s); generation %u no longer accepts; stopping", strerror(-err),
                  previous->number);
        exit_status = 1;
        count_reload(false);
        stop_all(previous->config->drain_timeout_ms);
        return;
    }
    if (err != 0) {
        log_error("reload failed (%s); generation %u keeps serving", strerror(-err),
                  previous->number);
        count_reload(false);
        return;
    }
    pthread_mutex_lock(&daemon_state.lock);
    gen->next = daemon_state.generations;
    daemon_state.generations = gen;
    pthread_mutex_unlock(&daemon_state.lock);
    count_reload(true);
    log_wakeup(gen);
    warn_start_only(previous, gen);
    for (size_t i = 0; i < gen->site_count; i++) {
        if (find_site(previous, gen->sites[i].address) != NULL)
            continue;
        char bound[128];
        corral_listener_address(gen->sites[i].listener, bound, sizeof(bound));
        log_info("listening on %s%s", bound, gen->sites[i].admin ? " (admin)" : "");
    }
    for (size_t i = 0; i < gen->udp_site_count; i++) {
        char bound[128];
        if (find_udp_site(previous, gen->udp_sites[i].address) == NULL &&
            corral_udp_address(gen->udp_sites[i].udp, bound, sizeof(bound)) == 0)
            log_info("listening on %s %s", bound, gen->udp_sites[i].quic != NULL ? "quic" : "udp");
    }
    corral_set_log_level(config->log_level);
    /* The old generation stops accepting (its sockets live on in the new
     * one), finishes what is in flight, and exits within the drain timeout. */
    log_info("generation %u: draining (up to %u ms)", previous->number,
             previous->config->drain_timeout_ms);
    generation_stop(previous, previous->config->drain_timeout_ms);
    atomic_store(&daemon_state.accepting, gen->number);
    /* Before the random-pick program comes off: until then, no new
     * connection goes to a socket the new generation does not hold. */
    generations_release_passed();
    if (listened_beside)
        leave_reuseport_groups(gen);
}

void reload(void)
{
    /* No generation left means stopping: when the newest one exits on its
     * own, the daemon stops. */
    if (stopping || daemon_state.generations == NULL)
        return;
    notify_reloading();
    reload_generation();
    /* Ready again, on the new configuration or on the one before. */
    if (!stopping)
        generations_notify("READY=1\n");
}

void generations_notify(const char *state)
{
    if (!notify_enabled())
        return;
    uint64_t connections = 0;
    /* The list changes only on this thread; the counters are atomic. */
    for (struct generation *g = daemon_state.generations; g != NULL; g = g->next) {
        for (unsigned i = 0; i < corral_server_worker_count(g->server); i++) {
            struct corral_worker_stats stats;
            corral_server_stats(g->server, i, &stats);
            connections += stats.connections_active;
        }
    }
    const struct generation *newest = daemon_state.generations;
    notify_send("%sSTATUS=generation %u, %llu connections", state, newest ? newest->number : 0,
                (unsigned long long)connections);
}

/* Stops every generation; the main loop ends when the last has exited, or
 * now if none is left. */
void stop_all(uint32_t graceful_ms)
{
    if (!stopping)
        generations_notify("STOPPING=1\n");
    stopping = true;
    /* The list changes only on this thread: no lock needed to walk it. */
    for (struct generation *g = daemon_state.generations; g != NULL; g = g->next)
        generation_stop(g, graceful_ms);
    /* No generation will take over the sockets systemd passed. */
    activated_sockets_close();
    if (daemon_state.generations == NULL)
        corral_loop_stop(main_loop);
}
