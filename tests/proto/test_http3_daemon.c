/*
 * test_http3_daemon.c: HTTP/3 through build/corral: a `listen ... quic`
 * answered by Debian's gtlsclient (ngtcp2's GnuTLS client) over real UDP:
 * a `return`, a 1 MB response proxied from an HTTP/1.1 backend (each byte
 * checked), the same with 0%, 5% and 20% loss each way with a 10 MB POST
 * through the proxy and 100 streams on one connection (every byte
 * checked), the access log's HTTP/3.0, Alt-Svc on the server's TLS listen
 * (or a location's own), a reload that keeps the UDP port, http3 off, and
 * what -t refuses.
 */
#include "../daemon.h"
#include "../helpers.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------- backend */

#define BIG_LEN (1024 * 1024)
/* The size of each of bulk_at()'s 100 streams: 4 KB under ASan, whose
 * daemon takes several times as long per byte; the count of streams on
 * one connection is what those check, and stays the same. */
#if TEST_ASAN
#define PIECE_LEN (4 * 1024)
#else
#define PIECE_LEN (16 * 1024)
#endif

static uint8_t pattern(size_t i)
{
    return (uint8_t)((i * 131 + (i >> 11)) & 0xff);
}

static uint8_t big[BIG_LEN]; /* pattern(0) on, filled by backend_start() */

/* POST /count: reads the body its Content-Length announces (`req`, `have`
 * bytes, holds the head and what came with it), each byte checked against
 * pattern(), and answers "len=N" (N: the bytes read, 0 if one differed). */
static void count_body(int fd, const char *req, size_t have)
{
    const char *cl = strcasestr(req, "\r\ncontent-length:");
    const char *end = strstr(req, "\r\n\r\n");
    size_t want = cl != NULL ? strtoul(cl + 17, NULL, 10) : 0, got = 0;
    bool same = cl != NULL && end != NULL;
    uint8_t buf[16384];
    size_t inbuf = end != NULL ? have - (size_t)(end + 4 - req) : 0;
    for (size_t i = 0; i < inbuf && got < want; i++, got++)
        same &= (uint8_t)end[4 + i] == pattern(got);
    while (got < want) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++, got++)
            same &= buf[i] == pattern(got);
    }
    char answer[256], text[64];
    int len = snprintf(text, sizeof(text), "len=%zu", same ? got : 0);
    int n =
        snprintf(answer, sizeof(answer),
                 "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len, text);
    (void)!send(fd, answer, (size_t)n, MSG_NOSIGNAL);
}

/* Answers a connection's request with BIG_LEN bytes of pattern(), or
 * POST /count with what count_body() found (a test_backend serve(): each
 * connection on a thread of its own, so that bulk_each_loss()'s clients
 * running at once do not wait for each other's slow uploads). */
static void backend_serve(int fd, void *data)
{
    (void)data;
    char req[8192];
    size_t have = 0;
    while (have < sizeof(req) - 1) {
        ssize_t n = recv(fd, req + have, sizeof(req) - 1 - have, 0);
        if (n <= 0)
            break;
        have += (size_t)n;
        req[have] = '\0';
        if (strstr(req, "\r\n\r\n") != NULL)
            break;
    }
    char head[256];
    if (have > 12 && strncmp(req, "POST /count ", 12) == 0) {
        count_body(fd, req, have);
        return;
    }
    /* GET /piece/K: PIECE_LEN bytes from pattern(K) on. */
    const uint8_t *from = big;
    size_t len = BIG_LEN;
    if (have > 11 && strncmp(req, "GET /piece/", 11) == 0) {
        size_t k = strtoul(req + 11, NULL, 10);
        from = big + (k < BIG_LEN - PIECE_LEN ? k : 0);
        len = PIECE_LEN;
    }
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", len);
    if (send(fd, head, (size_t)n, MSG_NOSIGNAL) == n)
        for (size_t off = 0; off < len;) {
            ssize_t sent = send(fd, from + off, len - off, MSG_NOSIGNAL);
            if (sent <= 0)
                break;
            off += (size_t)sent;
        }
}

static void backend_start(struct test_backend *b)
{
    for (size_t i = 0; i < BIG_LEN; i++)
        big[i] = pattern(i);
    test_backend_start(b, "127.0.0.1", 0, backend_serve, NULL);
}

static void backend_stop(struct test_backend *b)
{
    ck_assert(test_backend_stop(b, 5000));
}

/* -------------------------------------------------------------- helpers */

/* A UDP port free now on 127.0.0.1, for a quic listen with a port known
 * before the daemon binds it (Alt-Svc names it). */
static int free_udp_port(void)
{
    int port;
    close(test_bind_udp(&port));
    return port;
}

static bool have_tools(void)
{
    char out[256];
    if (test_run("command -v gtlsclient && command -v curl && command -v openssl", out,
                 sizeof(out)) == 0)
        return true;
    printf("skipped: needs gtlsclient (ngtcp2-client), curl and openssl\n");
    return false;
}

#define EC_P256 "ec -pkeyopt ec_paramgen_curve:P-256"

/* The self-signed pairs the cases use: their files `key` and `cert`, for
 * the name `cn`, the key openssl req's -newkey `kind`.  Made once, by the
 * runner before the first case (an unchecked fixture), in the group's
 * directory; make_pair() links them into a case's. */
static const struct pair {
    const char *key, *cert, *cn, *kind;
} pairs[] = {
    {"key.pem", "cert.pem", "localhost", EC_P256},
    {"a.key", "a.pem", "a.test", EC_P256},
    {"b.key", "b.pem", "b.test", EC_P256},
    {"rsa.key", "rsa.pem", "localhost", "rsa:2048"},
};

/* In the runner, where a failed assertion would end the program without
 * a word: what goes wrong is printed, and make_pair() then fails the case
 * that needs the missing pair.  Without openssl the cases skip. */
static void pairs_make(void)
{
    char cmd[PATH_MAX + 512], out[4096];
    if (test_run("command -v openssl", out, sizeof(out)) != 0)
        return;
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        snprintf(cmd, sizeof(cmd),
                 "cd %s && openssl req -x509 -newkey %s -nodes -keyout %s -out %s -subj /CN=%s "
                 "-days 1 2>&1",
                 test_daemon_group_dir(), pairs[i].kind, pairs[i].key, pairs[i].cert, pairs[i].cn);
        if (test_run(cmd, out, sizeof(out)) != 0)
            fprintf(stderr, "openssl for %s: %s\n", pairs[i].cert, out);
    }
}

/* Links the pair `key` and `cert` (for `cn`, of `kind`; one of pairs[])
 * into the daemon's directory. */
static void make_pair(const char *key, const char *cert, const char *cn, const char *kind)
{
    const struct pair *pair = NULL;
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]) && pair == NULL; i++)
        if (strcmp(pairs[i].key, key) == 0 && strcmp(pairs[i].cert, cert) == 0 &&
            strcmp(pairs[i].cn, cn) == 0 && strcmp(pairs[i].kind, kind) == 0)
            pair = &pairs[i];
    ck_assert_msg(pair != NULL, "no pair %s, %s for %s in pairs[]", key, cert, cn);
    const char *const files[] = {key, cert};
    for (int i = 0; i < 2; i++) {
        char target[PATH_MAX], link[PATH_MAX + 64];
        snprintf(target, sizeof(target), "%s/%s", test_daemon_group_dir(), files[i]);
        ck_assert_msg(access(target, R_OK) == 0, "%s was not made (see the output above)", target);
        test_daemon_file(link, sizeof(link), files[i]);
        ck_assert_int_eq(symlink(target, link), 0);
    }
}

static void make_certificate(void)
{
    make_pair("key.pem", "cert.pem", "localhost", EC_P256);
}

/* gtlsclient's requests for `uris` (one or more, space-separated) to
 * 127.0.0.1:port on one connection, with `extra` arguments, the answers
 * saved in DIR/`into`/: returns its exit status (0: every stream
 * completed).  Safe on several threads at once, each into its own. */
static int h3_requests_into(const char *into, int port, const char *uris, const char *extra)
{
    char cmd[PATH_MAX + 8192], out[4096], dl[PATH_MAX];
    test_daemon_file(dl, sizeof(dl), into);
    mkdir(dl, 0700);
    int n = snprintf(cmd, sizeof(cmd),
                     "timeout 30 gtlsclient -q --exit-on-all-streams-close --timeout=10s "
                     "--download %s %s 127.0.0.1 %d %s >/dev/null 2>&1",
                     dl, extra, port, uris);
    ck_assert(n > 0 && (size_t)n < sizeof(cmd));
    return test_run(cmd, out, sizeof(out));
}

/* h3_requests_into() DIR/dl/. */
static int h3_requests(int port, const char *uris, const char *extra)
{
    return h3_requests_into("dl", port, uris, extra);
}

/* gtlsclient's request for `path` (see h3_requests()). */
static int h3_request(int port, const char *path, const char *extra)
{
    char uri[PATH_MAX];
    snprintf(uri, sizeof(uri), "https://localhost%s", path);
    return h3_requests(port, uri, extra);
}

static int h3_get(int port, const char *path)
{
    return h3_request(port, path, "");
}

/* What gtlsclient saved for `name` in DIR/`from`/; free it. */
static char *downloaded_from(const char *from, const char *name, size_t *len)
{
    char path[PATH_MAX + 64], dl[PATH_MAX];
    test_daemon_file(dl, sizeof(dl), from);
    snprintf(path, sizeof(path), "%s/%s", dl, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "gtlsclient saved no %s/%s", from, name);
    size_t cap = BIG_LEN + 1, n = 0;
    char *data = malloc(cap + 1);
    ck_assert_ptr_nonnull(data);
    size_t got;
    while ((got = fread(data + n, 1, cap - n, f)) > 0)
        n += got;
    fclose(f);
    data[n] = '\0';
    *len = n;
    return data;
}

/* What h3_get() saved for `name`; free it. */
static char *downloaded(const char *name, size_t *len)
{
    return downloaded_from("dl", name, len);
}

/* The response head of a GET over the TLS listen on `port` (curl). */
static void tls_head(int port, const char *path, char *head, size_t size)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "curl -sk -o /dev/null -D - https://127.0.0.1:%d%s", port, path);
    ck_assert_int_eq(test_run(cmd, head, size), 0);
}

/* The port of the log's "listening on 127.0.0.1:PORT" line for the TCP
 * listen (not quic, not admin). */
static int tcp_port(const struct test_daemon *d)
{
    char *log = test_daemon_log(d);
    int port = 0;
    for (char *at = log; (at = strstr(at, "listening on 127.0.0.1:")) != NULL; at++) {
        const char *end = strchr(at, '\n');
        const char *quic = strstr(at, " quic");
        if (quic == NULL || (end != NULL && quic > end))
            port = atoi(at + strlen("listening on 127.0.0.1:"));
    }
    free(log);
    ck_assert_int_gt(port, 0);
    return port;
}

static void write_config_workers(struct test_daemon *d, unsigned workers, int quic_port,
                                 int backend_port, const char *extra)
{
    char text[4 * PATH_MAX + 1024], dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", test_daemon_dir());
    snprintf(text, sizeof(text),
             "workers %u;\n"
             "admin { listen 127.0.0.2:0; }\n"
             "access_log %s/access.log;\n"
             "%s"
             "server {\n"
             "  listen 127.0.0.1:0 tls;\n"
             "  listen 127.0.0.1:%d quic reuseport;\n"
             "  tls_certificate %s/cert.pem;\n"
             "  tls_certificate_key %s/key.pem;\n"
             "  location / { return 200 \"hello h3\\n\"; }\n"
             "  location /big { proxy_pass http://127.0.0.1:%d; }\n"
             "  location /count { proxy_pass http://127.0.0.1:%d; }\n"
             "  location /piece/ { proxy_pass http://127.0.0.1:%d; }\n"
             "  location /noalt { add_header Alt-Svc \"\"; return 204; }\n"
             "  location /own { add_header alt-svc 'h3=\":1\"'; return 204; }\n"
             "}\n",
             workers, dir, extra, quic_port, dir, dir, backend_port, backend_port, backend_port);
    test_daemon_write_config(d, text);
}

static void write_config(struct test_daemon *d, int quic_port, int backend_port, const char *extra)
{
    write_config_workers(d, 2, quic_port, backend_port, extra);
}

/* A case's daemon (`workers`, write_config_workers() with `extra`) in
 * front of the pattern backend, both started: the quic port, or 0 when
 * the tools are missing (the case is skipped then, nothing started). */
static int h3_case_start(struct test_backend *backend, struct test_daemon *d, unsigned workers,
                         const char *extra)
{
    if (!have_tools())
        return 0;
    make_certificate();
    backend_start(backend);
    test_daemon_init(d, "h3");
    int quic = free_udp_port();
    write_config_workers(d, workers, quic, backend->port, extra);
    test_daemon_start(d);
    return quic;
}

/* The value of a metric line "NAME VALUE" in /metrics; -1 if absent. */
static long long metric(struct test_daemon *d, const char *name)
{
    static char body[65536];
    ck_assert_int_eq(test_daemon_admin_get(d, "/metrics", body, sizeof(body)), 200);
    char line[128];
    snprintf(line, sizeof(line), "\n%s ", name);
    const char *at = strstr(body, line);
    return at != NULL ? atoll(at + strlen(line)) : -1;
}

/* The value of a metric line "NAME VALUE" as a real number; -1 if absent. */
static double metric_real(struct test_daemon *d, const char *name)
{
    static char body[65536];
    ck_assert_int_eq(test_daemon_admin_get(d, "/metrics", body, sizeof(body)), 200);
    char line[128];
    snprintf(line, sizeof(line), "\n%s ", name);
    const char *at = strstr(body, line);
    return at != NULL ? strtod(at + strlen(line), NULL) : -1;
}

/* ---------------------------------------------------------------- cases */

/* A return and a proxied 1 MB answer over HTTP/3, logged as HTTP/3.0;
 * Alt-Svc on the TLS listen names the quic port, unless a location's
 * add_header sets it empty. */
START_TEST(serves_http3)
{
    struct test_backend backend;
    struct test_daemon d;
    int quic = h3_case_start(&backend, &d, 2, "");
    if (quic == 0)
        return;
    ck_assert_int_eq(d.port, quic); /* its "listening on ... quic" line comes last */

    ck_assert_int_eq(h3_get(quic, "/"), 0);
    size_t len;
    char *body = downloaded("index.html", &len);
    ck_assert_str_eq(body, "hello h3\n");
    free(body);

    ck_assert_int_eq(h3_get(quic, "/big"), 0);
    body = downloaded("big", &len);
    ck_assert_uint_eq(len, BIG_LEN);
    for (size_t i = 0; i < len; i++)
        if ((uint8_t)body[i] != pattern(i))
            ck_abort_msg("byte %zu differs", i);
    free(body);

    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/access.log", test_daemon_dir());
    char *log = test_wait_file(path, "\"GET /big HTTP/3.0\" 200 1048576", 5000);
    ck_assert_ptr_nonnull(log);
    ck_assert_ptr_nonnull(strstr(log, "\"GET / HTTP/3.0\" 200 9 "));
    free(log);

    char head[4096], want[64];
    int tls = tcp_port(&d);
    tls_head(tls, "/", head, sizeof(head));
    snprintf(want, sizeof(want), "alt-svc: h3=\":%d\"; ma=86400\r\n", quic);
    ck_assert_msg(strcasestr(head, want) != NULL, "no %s in:\n%s", want, head);
    tls_head(tls, "/noalt", head, sizeof(head));
    ck_assert_msg(strcasestr(head, "alt-svc") == NULL, "Alt-Svc in:\n%s", head);
    tls_head(tls, "/own", head, sizeof(head)); /* its own line only */
    const char *own = strcasestr(head, "alt-svc: h3=\":1\"\r\n");
    ck_assert_msg(own != NULL && strcasestr(own + 1, "alt-svc") == NULL &&
                      strcasestr(head, "alt-svc") == own,
                  "not one Alt-Svc of its own in:\n%s", head);

    test_daemon_stop(&d);
    backend_stop(&backend);
}
END_TEST

/* The POST bodies of bulk_each_loss(): 10 MB, also at 20% loss each way
 * (about 3 s, with the client's BBR; its CUBIC takes over 10 s there);
 * ASan's daemon and backend take 5 s or more over that, so 2 MB at each
 * loss there (still many flow-control windows of the daemon's 64 KB per
 * stream and 1 MB per connection). */
#if TEST_ASAN
#define POST_LEN (2 * 1024 * 1024)
#else
#define POST_LEN (10 * 1024 * 1024)
#endif
#define STREAMS 100

/* One gtlsclient connection of bulk_each_loss(), on a thread of its own:
 * `uris` with `args` (whose loss is `loss`) saved in DIR/`into`/, and its
 * exit status. */
struct bulk_conn {
    int quic;
    double loss;
    const char *into, *uris;
    char args[PATH_MAX + 128];
    int status;
};

static void *bulk_conn_main(void *arg)
{
    struct bulk_conn *c = arg;
    c->status = h3_requests_into(c->into, c->quic, c->uris, c->args);
    return NULL;
}

/* What the connections of one loss saved into DIR/`from`/, each byte
 * checked: `get` the 1 MB GET, `post` the POST of post_len bytes, `pieces`
 * the STREAMS GETs of PIECE_LEN. */
static void bulk_check(const char *from, double loss, const struct bulk_conn *get,
                       const struct bulk_conn *post, const struct bulk_conn *pieces,
                       size_t post_len)
{
    ck_assert_msg(get->status == 0, "GET /big at %g loss: exit %d", loss, get->status);
    size_t len;
    char *body = downloaded_from(from, "big", &len);
    ck_assert_uint_eq(len, BIG_LEN);
    for (size_t i = 0; i < len; i++)
        if ((uint8_t)body[i] != pattern(i))
            ck_abort_msg("byte %zu differs at %g loss", i, loss);
    free(body);

    ck_assert_msg(post->status == 0, "POST at %g loss: exit %d", loss, post->status);
    body = downloaded_from(from, "count", &len);
    char want[64];
    snprintf(want, sizeof(want), "len=%zu", post_len);
    ck_assert_msg(strcmp(body, want) == 0, "got \"%s\" at %g loss", body, loss);
    free(body);

    ck_assert_msg(pieces->status == 0, "%d streams at %g loss: exit %d", STREAMS, loss,
                  pieces->status);
    for (unsigned k = 1; k <= STREAMS; k++) {
        char name[32];
        snprintf(name, sizeof(name), "%u", k);
        body = downloaded_from(from, name, &len);
        ck_assert_msg(len == PIECE_LEN, "stream %u: %zu bytes at %g loss", k, len, loss);
        for (size_t i = 0; i < len; i++)
            if ((uint8_t)body[i] != pattern(k + i))
                ck_abort_msg("stream %u: byte %zu differs at %g loss", k, i, loss);
        free(body);
    }
}

/* With no loss, 5% and 20% of the datagrams lost each way, on one daemon:
 * a 1 MB GET, a POST of POST_LEN through the proxy checked byte for byte
 * by the backend, and STREAMS GETs of PIECE_LEN on one connection, each
 * byte checked.  The nine connections run at once: most of a lossy one's
 * time is the client's and the daemon's loss-recovery timers, not CPU, so
 * the case takes about as long as its slowest connection. */
START_TEST(bulk_each_loss)
{
    struct test_backend backend;
    struct test_daemon d;
    int quic = h3_case_start(&backend, &d, 2, "client_max_body_size 16m;\n");
    if (quic == 0)
        return;

    char post[PATH_MAX + 32];
    test_daemon_file(post, sizeof(post), "post");
    FILE *f = fopen(post, "wb");
    ck_assert_ptr_nonnull(f);
    for (size_t i = 0; i < POST_LEN; i++)
        fputc(pattern(i), f);
    fclose(f);
    static char uris[STREAMS * 40];
    size_t at = 0;
    for (unsigned k = 1; k <= STREAMS; k++)
        at += (size_t)snprintf(uris + at, sizeof(uris) - at, "%shttps://localhost/piece/%u",
                               k > 1 ? " " : "", k);
    ck_assert_uint_lt(at, sizeof(uris));

    static const double losses[] = {0, 0.05, 0.2};
    static const char *const dirs[] = {"dl0", "dl5", "dl20"};
    static struct bulk_conn conns[3][3]; /* [loss][the GET, the POST, the pieces] */
    pthread_t threads[3][3];
    for (int l = 0; l < 3; l++) {
        double loss = losses[l];
        for (int k = 0; k < 3; k++)
            conns[l][k] = (struct bulk_conn){.quic = quic, .loss = loss, .into = dirs[l]};
        conns[l][0].uris = "https://localhost/big";
        snprintf(conns[l][0].args, sizeof(conns[l][0].args), "-t %g -r %g", loss, loss);
        /* The client sends this one: with its default CUBIC, 20% loss
         * keeps its window small for long; BBR does not read loss as
         * congestion. */
        conns[l][1].uris = "https://localhost/count";
        snprintf(conns[l][1].args, sizeof(conns[l][1].args), "--cc=bbr -m POST -t %g -r %g -d %s",
                 loss, loss, post);
        conns[l][2].uris = uris;
        snprintf(conns[l][2].args, sizeof(conns[l][2].args), "-t %g -r %g", loss, loss);
        for (int k = 0; k < 3; k++)
            ck_assert_int_eq(pthread_create(&threads[l][k], NULL, bulk_conn_main, &conns[l][k]), 0);
    }
    for (int l = 0; l < 3; l++)
        for (int k = 0; k < 3; k++)
            pthread_join(threads[l][k], NULL);
    for (int l = 0; l < 3; l++)
        bulk_check(dirs[l], losses[l], &conns[l][0], &conns[l][1], &conns[l][2], POST_LEN);

    char path[PATH_MAX + 32], want[96];
    snprintf(path, sizeof(path), "%s/access.log", test_daemon_dir());
    snprintf(want, sizeof(want), "\"GET /piece/%d HTTP/3.0\" 200 %d", STREAMS, PIECE_LEN);
    char *log = test_wait_file(path, want, 5000);
    ck_assert_ptr_nonnull(log);
    free(log);
    test_daemon_stop(&d);
    backend_stop(&backend);
}
END_TEST

/* A reload hands the UDP sockets over: the same port answers new
 * connections from the new generation, and is not bound again. */
START_TEST(reload_keeps_port)
{
    struct test_backend backend;
    struct test_daemon d;
    int quic = h3_case_start(&backend, &d, 2, "");
    if (quic == 0)
        return;
    ck_assert_int_eq(h3_get(quic, "/"), 0);
    kill(d.pid, SIGHUP);
    test_daemon_wait_generation(&d, 2);
    for (int i = 0; i < 3; i++) {
        char dl[PATH_MAX + 32];
        test_daemon_file(dl, sizeof(dl), "dl/index.html");
        unlink(dl);
        ck_assert_int_eq(h3_get(quic, "/"), 0);
        size_t len;
        char *body = downloaded("index.html", &len);
        ck_assert_str_eq(body, "hello h3\n");
        free(body);
    }
    char *log = test_daemon_log(&d);
    const char *first = strstr(log, " quic\n");
    ck_assert_ptr_nonnull(first);
    ck_assert_ptr_null(strstr(first + 1, " quic\n")); /* the reload bound nothing new */
    free(log);
    test_daemon_stop(&d);
    backend_stop(&backend);
}
END_TEST

/* Clients that change their source port after the handshake (migration
 * with path validation, and NAT rebinding without) and only then ask for
 * 1 MB keep their connections, every byte checked.  With 4 workers, the
 * kernel's 4-tuple hash would send the new port's datagrams to another
 * worker 3 times in 4: with quic_bpf (the default) the steering program
 * sends them to the owner the connection ID names, and none is handed
 * off; with quic_bpf off, the worker that gets one hands it to the owner
 * (counted in /metrics).  Without either, 8 clients in a row would all
 * land on their owner once in 65536 runs. */
static void migrate(const char *extra, bool steered)
{
    struct test_backend backend;
    struct test_daemon d;
    int quic = h3_case_start(&backend, &d, 4, extra);
    if (quic == 0)
        return;
    for (int i = 0; i < 8; i++) {
        char dl[PATH_MAX + 32];
        test_daemon_file(dl, sizeof(dl), "dl/big");
        unlink(dl);
        const char *args = i % 2 == 0
                               ? "--change-local-addr=5ms --delay-stream=150ms"
                               : "--change-local-addr=5ms --nat-rebinding --delay-stream=150ms";
        ck_assert_msg(h3_request(quic, "/big", args) == 0, "client %d (%s) failed", i, args);
        size_t len;
        char *body = downloaded("big", &len);
        ck_assert_msg(len == BIG_LEN, "client %d (%s): %zu bytes", i, args, len);
        for (size_t k = 0; k < len; k++)
            if ((uint8_t)body[k] != pattern(k))
                ck_abort_msg("client %d: byte %zu differs", i, k);
        free(body);
    }
    if (steered)
        ck_assert_int_eq(metric(&d, "corral_quic_handed_off_total"), 0);
    else
        ck_assert_int_gt(metric(&d, "corral_quic_handed_off_total"), 0);
    /* Each hand-off's wait is timed: some, but not seconds per datagram. */
    double delay = metric_real(&d, "corral_quic_handoff_delay_seconds_total");
    if (steered)
        ck_assert(delay == 0);
    else
        ck_assert_msg(delay > 0 && delay < metric(&d, "corral_quic_handed_off_total"),
                      "hand-offs waited %f s in all", delay);
    ck_assert_int_ge(metric(&d, "corral_quic_handshakes_total"), 8);
    ck_assert_int_gt(metric(&d, "corral_quic_datagrams_received_total"), 8 * 10);
    /* 1 MB each in datagrams of at most 1472 bytes */
    ck_assert_int_gt(metric(&d, "corral_quic_datagrams_sent_total"), 8 * 700);
    ck_assert_int_ge(metric(&d, "corral_quic_connections"), 0);
    test_daemon_stop(&d);
    backend_stop(&backend);
}

/* The sum of worker w's series of `family` with these labels after it. */
static long long worker_metric(struct test_daemon *d, const char *family, unsigned w,
                               const char *more)
{
    char name[160];
    snprintf(name, sizeof(name), "%s{worker=\"%u\"%s}", family, w, more);
    return metric(d, name);
}

/* The handshakes the daemon's 4 workers completed. */
static long long handshakes_done(struct test_daemon *d)
{
    long long done = 0;
    for (unsigned w = 0; w < 4; w++)
        done += worker_metric(d, "corral_quic_worker_handshakes_total", w, "");
    return done;
}

/* How long the steering cases wait for every client's handshake: what
 * they check is where each datagram went, not how soon a loaded machine
 * completes them all (1,000 take about a second on an idle one). */
#define STEER_WAIT_MS 20000

/* build/h3load beside the daemon's binary opens `clients` connections at
 * once to https://HOST:port/, each asking for / again and again, until
 * `d`'s 4 workers have completed `clients` handshakes (or STEER_WAIT_MS
 * have passed); then it is killed, its load (-D) being longer than the
 * wait.  Its connections stay open at the daemon until its
 * drain_timeout.  A client that has not completed a handshake in 10 s
 * (ngtcp2's timeout) opens a new connection instead: it counts again as
 * new, and its first connection never completes. */
static void steer_burst(struct test_daemon *d, const char *host, int port, unsigned clients)
{
    char tool[PATH_MAX], url[128], count[16], out[PATH_MAX + 32];
    snprintf(tool, sizeof(tool), "%s", test_daemon_binary());
    char *slash = strrchr(tool, '/');
    ck_assert_ptr_nonnull(slash);
    snprintf(slash + 1, sizeof(tool) - (size_t)(slash + 1 - tool), "h3load");
    snprintf(url, sizeof(url), "https://%s:%d/", host, port);
    snprintf(count, sizeof(count), "%u", clients);
    test_daemon_file(out, sizeof(out), "h3load.out");
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ck_assert_int_ge(fd, 0);
    pid_t parent = getpid();
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(tool, tool, "-c", count, "-m", "1", "-D", "30", "--drain", "1", url, (char *)NULL);
        _exit(127);
    }
    close(fd);
    uint64_t deadline = test_now_ms() + STEER_WAIT_MS;
    long long done = 0;
    while ((done = handshakes_done(d)) < clients && test_now_ms() < deadline &&
           waitpid(pid, NULL, WNOHANG) == 0)
        test_sleep_ms(50);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    char *said = test_read_file(out);
    ck_assert_msg(done >= clients, "%lld of %u handshakes completed; h3load: %s", done, clients,
                  said);
    free(said);
}

/* What steer_burst() of `clients` left at `d`: no datagram handed off
 * (each reached the worker that owns its connection); the new
 * connections spread round robin, a quarter to each worker exactly (a
 * client that gave up a handshake adds one); each worker completed the
 * handshakes of connections steered to it, and of no others. */
static void steer_check(struct test_daemon *d, unsigned clients)
{
    ck_assert_int_eq(metric(d, "corral_quic_handed_off_total"), 0);
    long long fresh[4], total = 0;
    for (unsigned w = 0; w < 4; w++) {
        fresh[w] = worker_metric(d, "corral_quic_steered_total", w, ",kind=\"new\"");
        total += fresh[w];
    }
    ck_assert_int_ge(total, clients);
    for (unsigned w = 0; w < 4; w++) {
        long long done = worker_metric(d, "corral_quic_worker_handshakes_total", w, "");
        ck_assert_msg(fresh[w] == total / 4 || fresh[w] == (total + 3) / 4,
                      "worker %u: %lld new connections of %lld", w, fresh[w], total);
        ck_assert_msg(done <= fresh[w], "worker %u: %lld handshakes, %lld connections", w, done,
                      fresh[w]);
    }
}

/* `clients` QUIC connections at once to a daemon of 4 workers whose quic
 * listen is on HOST (`wakeup roundrobin`): the eBPF program sends each
 * worker a quarter of the new connections, exactly, and every datagram of
 * a connection to the worker that owns it (no hand-off at all): each
 * worker completes the handshakes of the connections steered to it, and
 * of no others (steer_check()).  With `reload`, again after a SIGHUP, by
 * the new generation's program. */
static void steered_connections(const char *host, unsigned clients, bool reload)
{
    if (!have_tools())
        return;
    struct corral_kernel_caps caps;
    corral_probe(&caps);
    if (!caps.ebpf) {
        fprintf(stderr, "SKIPPED: eBPF steering is unavailable here\n");
        return;
    }
    make_certificate();
    struct test_daemon d;
    test_daemon_init(&d, "h3");
    char text[4 * PATH_MAX + 512], dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", test_daemon_dir());
    /* drain_timeout: h3load's connections stay open after it is stopped,
     * and hold a reload's old generation and the stop until then. */
    snprintf(text, sizeof(text),
             "workers 4;\nwakeup roundrobin;\ndrain_timeout 1s;\n"
             "admin { listen 127.0.0.2:0; }\n"
             "server {\n"
             "  listen 127.0.0.1:0;\n" /* the harness waits for a 127.0.0.1 line */
             "  listen %s:0 quic reuseport;\n"
             "  tls_certificate %s/cert.pem;\n"
             "  tls_certificate_key %s/key.pem;\n"
             "  location / { return 200 \"hello h3\\n\"; }\n"
             "}\n",
             host, dir, dir);
    test_daemon_write_config(&d, text);
    test_daemon_start(&d);
    char *log = test_daemon_log(&d), listening[64];
    ck_assert_ptr_nonnull(strstr(log, "steered by ebpf, new connections roundrobin"));
    snprintf(listening, sizeof(listening), "listening on %s:", host);
    int port = 0;
    for (char *at = log; (at = strstr(at, listening)) != NULL; at++) {
        const char *end = strchr(at, '\n'), *quic = strstr(at, " quic");
        if (quic != NULL && (end == NULL || quic < end))
            port = atoi(at + strlen(listening));
    }
    free(log);
    ck_assert_int_gt(port, 0);

    steer_burst(&d, host, port, clients);
    steer_check(&d, clients);
    if (reload) {
        /* The new generation loads its own program, after taking the
         * sockets out of the old one's array (else it would fall back to
         * the classic program, with a warning), and spreads in turn. */
        kill(d.pid, SIGHUP);
        test_daemon_wait_generation(&d, 2);
        log = test_daemon_log(&d);
        char *second = strstr(log, "steered by ebpf, new connections roundrobin");
        ck_assert_ptr_nonnull(second);
        ck_assert_msg(strstr(second + 1, "steered by ebpf, new connections roundrobin") != NULL,
                      "%s", log);
        ck_assert_ptr_null(strstr(log, "no eBPF steering"));
        free(log);
        /* The counts are every running generation's: the old one's end
         * at its drain_timeout. */
        char status[8192] = "";
        test_wait_for(test_daemon_admin_get(&d, "/status", status, sizeof(status)) == 200 &&
                          strstr(status, "\"generations_running\": 1,") != NULL,
                      TEST_WAIT_MS, "the old generation still runs: %s", status);
        steer_burst(&d, host, port, 40);
        steer_check(&d, 40);
    }
    test_daemon_stop(&d);
}

/* ASan's daemon completes 1,000 handshakes at once too slowly for the
 * client's timeouts (it opens new connections then). */
#if TEST_ASAN
#define MANY_CONNECTIONS 100
#else
#define MANY_CONNECTIONS 1000
#endif

START_TEST(thousand_connections_steered)
{
    steered_connections("127.0.0.1", MANY_CONNECTIONS, false);
}
END_TEST

START_TEST(connections_steered_over_ipv6)
{
    steered_connections("[::1]", 100, true);
}
END_TEST

START_TEST(migration_steered)
{
    migrate("", true);
}
END_TEST

START_TEST(migration_handed_off)
{
    /* and the other tuning directives off their defaults */
    migrate("quic_bpf off;\nquic_gso off;\nhttp3_stream_buffer_size 16k;\n"
            "http3_max_concurrent_streams 4;\n",
            false);
}
END_TEST

/* quic_retry on, with a quic_host_key: every new connection is asked to
 * come back with a token (gtlsclient follows the Retry), and is served
 * then; the Retries are counted, no token refused. */
START_TEST(retry_then_served)
{
    char key[PATH_MAX + 32], extra[PATH_MAX + 64];
    test_daemon_file(key, sizeof(key), "host.key");
    test_write_file(key, "0123456789abcdef0123456789abcdef0123456789\n");
    snprintf(extra, sizeof(extra), "quic_retry on;\nquic_host_key %s;\n", key);
    struct test_backend backend;
    struct test_daemon d;
    int quic = h3_case_start(&backend, &d, 2, extra);
    if (quic == 0)
        return;
    for (int i = 0; i < 2; i++) {
        char dl[PATH_MAX + 32];
        test_daemon_file(dl, sizeof(dl), "dl/index.html");
        unlink(dl);
        ck_assert_int_eq(h3_get(quic, "/"), 0);
        size_t len;
        char *body = downloaded("index.html", &len);
        ck_assert_str_eq(body, "hello h3\n");
        free(body);
    }
    ck_assert_int_eq(metric(&d, "corral_quic_retries_total"), 2);
    ck_assert_int_eq(metric(&d, "corral_quic_tokens_refused_total"), 0);
    ck_assert_int_eq(metric(&d, "corral_quic_handshakes_total"), 2);
    /* quic_retry on: none of them for a flood; each connection got a
     * NEW_TOKEN token (gtlsclient keeps none for its next run). */
    ck_assert_int_eq(metric(&d, "corral_quic_flood_retries_total"), 0);
    ck_assert_int_eq(metric(&d, "corral_quic_new_tokens_sent_total"), 2);
    ck_assert_int_eq(metric(&d, "corral_quic_new_tokens_taken_total"), 0);
    ck_assert_int_eq(metric(&d, "corral_quic_handshakes_in_progress"), 0);
    /* Retry validated each address: no amplification limit to reach. */
    ck_assert_int_eq(metric(&d, "corral_quic_amplification_limited_total"), 0);
    test_daemon_stop(&d);
    backend_stop(&backend);
}
END_TEST

/* A returning client, with Debian's gtlsclient (another implementation's
 * client, not the test's): its first connection, under quic_retry on,
 * is asked to retry, and leaves it a session ticket and the server's
 * transport parameters in files.  Its second connection resumes the
 * session and sends its GET in 0-RTT (ssl_early_data on), which is
 * served from early data.  After a reload, the ticket (whose key comes
 * from quic_host_key) still resumes the session, but its early data is
 * refused: the new generation's anti-replay window began after the
 * ticket was issued, so it cannot know the ClientHellos before it; the
 * GET is served after the handshake. */
START_TEST(returning_client_resumes_in_0rtt)
{
    char key[PATH_MAX + 32], extra[PATH_MAX + 96];
    test_daemon_file(key, sizeof(key), "host.key");
    test_write_file(key, "0123456789abcdef0123456789abcdef0123456789\n");
    snprintf(extra, sizeof(extra), "quic_retry on;\nquic_host_key %s;\nssl_early_data on;\n", key);
    /* One worker: another's endpoint, made at its first datagram, after
     * the ticket, would refuse its early data as the reload's does. */
    struct test_backend backend;
    struct test_daemon d;
    int quic = h3_case_start(&backend, &d, 1, extra);
    if (quic == 0)
        return;
    char files[3 * PATH_MAX + 64], session[PATH_MAX], tp[PATH_MAX], token[PATH_MAX];
    test_daemon_file(session, sizeof(session), "session.pem");
    test_daemon_file(tp, sizeof(tp), "tp");
    test_daemon_file(token, sizeof(token), "token");
    snprintf(files, sizeof(files), "--session-file=%s --tp-file=%s --token-file=%s", session, tp,
             token);
    ck_assert_int_eq(h3_request(quic, "/", files), 0);
    ck_assert_int_eq(metric(&d, "corral_quic_retries_total"), 1);
    ck_assert_int_eq(metric(&d, "corral_quic_new_tokens_sent_total"), 1);
    ck_assert_int_eq(metric(&d, "corral_quic_early_requests_total"), 0);
    ck_assert_int_eq(metric(&d, "corral_quic_resumed_total"), 0);
    ck_assert_int_eq(h3_request(quic, "/", files), 0);
    ck_assert_int_eq(metric(&d, "corral_quic_resumed_total"), 1);
    ck_assert_int_eq(metric(&d, "corral_quic_early_requests_total"), 1);
    kill(d.pid, SIGHUP);
    test_daemon_wait_generation(&d, 2);
    char dl[PATH_MAX + 32];
    test_daemon_file(dl, sizeof(dl), "dl/index.html");
    unlink(dl);
    ck_assert_int_eq(h3_request(quic, "/", files), 0);
    size_t len;
    char *body = downloaded("index.html", &len);
    ck_assert_str_eq(body, "hello h3\n");
    free(body);
    /* The counters are the new generation's.  Debian's gtlsclient writes
     * its token file but cannot read it back ("Could not read token"),
     * so it is asked to retry again (test_http3 shows a token taken). */
    ck_assert_int_eq(metric(&d, "corral_quic_retries_total"), 1);
    ck_assert_int_eq(metric(&d, "corral_quic_resumed_total"), 1);
    ck_assert_int_eq(metric(&d, "corral_quic_early_requests_total"), 0);
    ck_assert_int_eq(metric(&d, "corral_quic_too_early_total"), 0);
    ck_assert_int_eq(metric(&d, "corral_quic_tokens_refused_total"), 0);
    test_daemon_stop(&d);
    backend_stop(&backend);
}
END_TEST

/* A backend that holds every request until the test opens its gate, so
 * that the requests are known to be in flight across a reload or a stop:
 * then answers GET /s/N with GATE_LEN bytes of gate_byte(N, i). */
#define GATE_LEN    (32 * 1024)
#define GATE_MAX    128
#define GATE_STREAM 100

static uint8_t gate_byte(unsigned n, size_t i)
{
    return pattern(i + n * 7);
}

struct gate_backend {
    int fd, port;
    pthread_t thread;
    atomic_int held; /* requests read and waiting */
    atomic_bool open, quit;
    int fds[GATE_MAX];
    unsigned ns[GATE_MAX];
};

static void gate_answer(int fd, unsigned n)
{
    static uint8_t body[GATE_LEN];
    for (size_t i = 0; i < GATE_LEN; i++)
        body[i] = gate_byte(n, i);
    char head[128];
    int len =
        snprintf(head, sizeof(head),
                 "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", GATE_LEN);
    if (send(fd, head, (size_t)len, MSG_NOSIGNAL) == len)
        for (size_t off = 0; off < GATE_LEN;) {
            ssize_t sent = send(fd, body + off, GATE_LEN - off, MSG_NOSIGNAL);
            if (sent <= 0)
                break;
            off += (size_t)sent;
        }
    close(fd);
}

static void *gate_run(void *arg)
{
    struct gate_backend *b = arg;
    int count = 0;
    while (!atomic_load(&b->quit)) {
        if (atomic_load(&b->open)) {
            for (int i = 0; i < count; i++)
                gate_answer(b->fds[i], b->ns[i]);
            count = 0;
        }
        struct pollfd p = {.fd = b->fd, .events = POLLIN};
        if (poll(&p, 1, 5) != 1)
            continue;
        int fd = accept(b->fd, NULL, NULL);
        if (fd < 0)
            continue;
        char req[4096];
        (void)test_recv_head(fd, req, sizeof(req)); /* a head cut short is kept */
        unsigned n = strncmp(req, "GET /s/", 7) == 0 ? (unsigned)atoi(req + 7) : 0;
        if (count == GATE_MAX) {
            close(fd);
            continue;
        }
        b->fds[count] = fd;
        b->ns[count++] = n;
        atomic_fetch_add(&b->held, 1);
    }
    for (int i = 0; i < count; i++)
        close(b->fds[i]);
    return NULL;
}

static void gate_start(struct gate_backend *b)
{
    memset(b, 0, sizeof(*b));
    b->fd = test_listen(&b->port, GATE_MAX);
    ck_assert_int_eq(fcntl(b->fd, F_SETFL, O_NONBLOCK), 0);
    ck_assert_int_eq(pthread_create(&b->thread, NULL, gate_run, b), 0);
}

static void gate_stop(struct gate_backend *b)
{
    atomic_store(&b->quit, true);
    pthread_join(b->thread, NULL);
    close(b->fd);
}

/* Starts gtlsclient in the background with GATE_STREAM requests on one
 * connection, GET /s/0 ... /s/99, saved in DIR/dl/; its exit status goes
 * to DIR/client.rc as "rc=N". */
static void gate_client(int port)
{
    char dl[PATH_MAX], rc_path[PATH_MAX + 32], cmd[3 * PATH_MAX + GATE_STREAM * 40], out[256];
    test_daemon_file(dl, sizeof(dl), "dl");
    mkdir(dl, 0700);
    test_daemon_file(rc_path, sizeof(rc_path), "client.rc");
    unlink(rc_path);
    int at = snprintf(cmd, sizeof(cmd),
                      "(timeout 60 gtlsclient -q --exit-on-all-streams-close --timeout=30s "
                      "--download %s 127.0.0.1 %d",
                      dl, port);
    for (unsigned n = 0; n < GATE_STREAM; n++)
        at += snprintf(cmd + at, sizeof(cmd) - (size_t)at, " https://localhost/s/%u", n);
    snprintf(cmd + at, sizeof(cmd) - (size_t)at,
             " >/dev/null 2>&1; echo \"rc=$?\" > %s) >/dev/null 2>&1 &", rc_path);
    ck_assert_int_eq(test_run(cmd, out, sizeof(out)), 0);
}

/* Waits for the client's exit (gate_client()): its status, and every one
 * of its GATE_STREAM answers checked byte by byte. */
static void gate_client_check(void)
{
    char rc_path[PATH_MAX + 32];
    test_daemon_file(rc_path, sizeof(rc_path), "client.rc");
    char *rc = test_wait_file(rc_path, "rc=", 40000);
    ck_assert_ptr_nonnull(rc);
    ck_assert_msg(strncmp(rc, "rc=0", 4) == 0, "gtlsclient: %s", rc);
    free(rc);
    for (unsigned n = 0; n < GATE_STREAM; n++) {
        char name[32];
        snprintf(name, sizeof(name), "%u", n);
        size_t len;
        char *body = downloaded(name, &len);
        ck_assert_msg(len == GATE_LEN, "stream /s/%u: %zu bytes", n, len);
        for (size_t i = 0; i < len; i++)
            if ((uint8_t)body[i] != gate_byte(n, i))
                ck_abort_msg("stream /s/%u: byte %zu differs", n, i);
        free(body);
    }
}

static void gate_config(struct test_daemon *d, int quic_port, int backend_port, const char *drain,
                        const char *extra)
{
    char text[4 * PATH_MAX + 1024], dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", test_daemon_dir());
    snprintf(text, sizeof(text),
             "workers 2;\n"
             "admin { listen 127.0.0.2:0; }\n"
             "drain_timeout %s;\n"
             "%s\n"
             "server {\n"
             "  listen 127.0.0.1:%d quic reuseport;\n"
             "  tls_certificate %s/cert.pem;\n"
             "  tls_certificate_key %s/key.pem;\n"
             "  location / { return 200 \"hello h3\\n\"; }\n"
             "  location /s/ { proxy_pass http://127.0.0.1:%d; }\n"
             "}\n",
             drain, extra, quic_port, dir, dir, backend_port);
    test_daemon_write_config(d, text);
}

/* A reload with 100 requests in flight on one QUIC connection: the
 * backend holds every request until the new generation has taken the
 * UDP sockets over, then answers.  The old generation still owns the
 * connection: the new one's workers pass it the client's datagrams
 * (acknowledgements, flow control), counted, and every response arrives
 * whole, each byte checked.  The old generation then ends on its own, well
 * before its drain_timeout (GOAWAY, then CONNECTION_CLOSE once the streams
 * are done), and a new connection is the new generation's.  Before
 * connection IDs named their generation, the new generation answered the
 * connection's datagrams with stateless resets and every stream failed. */
START_TEST(reload_keeps_open_connections)
{
    if (!have_tools())
        return;
    make_certificate();
    struct gate_backend backend;
    gate_start(&backend);
    struct test_daemon d;
    test_daemon_init(&d, "h3");
    int quic = free_udp_port();
    gate_config(&d, quic, backend.port, "20s", "");
    test_daemon_start(&d);
    gate_client(quic);
    test_wait_for(atomic_load(&backend.held) == GATE_STREAM, 20000,
                  "%d of %d requests reached the backend", atomic_load(&backend.held), GATE_STREAM);
    ck_assert_int_eq(metric(&d, "corral_quic_handshakes_total"), 1);
    kill(d.pid, SIGHUP);
    free(test_daemon_wait_log(&d, "generation 1: draining"));
    uint64_t opened_ms = test_now_ms();
    atomic_store(&backend.open, true);
    gate_client_check();
    ck_assert_int_gt(metric(&d, "corral_quic_handed_to_older_generation_total"), 0);
    char *log = test_daemon_wait_log(&d, "generation 1 finished");
    ck_assert_ptr_nonnull(log);
    free(log);
    printf("reload_keeps_open_connections: 100 x %d bytes through the old generation in %llu ms\n",
           GATE_LEN, (unsigned long long)(test_now_ms() - opened_ms));
    ck_assert_int_eq(h3_get(quic, "/"), 0);
    size_t len;
    char *body = downloaded("index.html", &len);
    ck_assert_str_eq(body, "hello h3\n");
    free(body);
    test_daemon_stop(&d);
    gate_stop(&backend);
}
END_TEST

/* A graceful stop (SIGTERM) with 100 requests in flight on one QUIC
 * connection: the daemon keeps reading the UDP socket and waits for them
 * (before, it exited at once and cut them), sends GOAWAY, and exits once
 * every response is acknowledged. */
START_TEST(stop_waits_for_streams)
{
    if (!have_tools())
        return;
    make_certificate();
    struct gate_backend backend;
    gate_start(&backend);
    struct test_daemon d;
    test_daemon_init(&d, "h3");
    int quic = free_udp_port();
    gate_config(&d, quic, backend.port, "20s", "");
    test_daemon_start(&d);
    gate_client(quic);
    test_wait_for(atomic_load(&backend.held) == GATE_STREAM, 20000,
                  "%d of %d requests reached the backend", atomic_load(&backend.held), GATE_STREAM);
    kill(d.pid, SIGTERM);
    free(test_daemon_wait_log(&d, "stopping gracefully"));
    /* It waits: still running while the requests are held. */
    test_sleep_ms(200);
    ck_assert_int_eq(waitpid(d.pid, NULL, WNOHANG), 0);
    atomic_store(&backend.open, true);
    gate_client_check();
    int status;
    uint64_t until = test_now_ms() + 10000;
    pid_t got = 0;
    while ((got = waitpid(d.pid, &status, WNOHANG)) == 0 && test_now_ms() < until)
        test_sleep_ms(TEST_POLL_MS);
    ck_assert_int_eq(got, d.pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    d.pid = -1;
    gate_stop(&backend);
}
END_TEST

/* A graceful stop whose drain_timeout (300 ms) ends before the held
 * requests are answered: the daemon exits then, and sends the connection
 * its CONNECTION_CLOSE, so that the client ends at once instead of at
 * its 30 s idle timeout. */
START_TEST(stop_closes_at_drain_timeout)
{
    if (!have_tools())
        return;
    make_certificate();
    struct gate_backend backend;
    gate_start(&backend);
    struct test_daemon d;
    test_daemon_init(&d, "h3");
    int quic = free_udp_port();
    gate_config(&d, quic, backend.port, "300ms", "");
    test_daemon_start(&d);
    gate_client(quic);
    test_wait_for(atomic_load(&backend.held) == GATE_STREAM, 20000,
                  "%d of %d requests reached the backend", atomic_load(&backend.held), GATE_STREAM);
    uint64_t signalled = test_now_ms();
    kill(d.pid, SIGTERM);
    int status;
    ck_assert_int_eq(waitpid(d.pid, &status, 0), d.pid);
    d.pid = -1;
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    uint64_t exited = test_now_ms();
    ck_assert_uint_ge(exited - signalled, 250);
    char rc_path[PATH_MAX + 32];
    test_daemon_file(rc_path, sizeof(rc_path), "client.rc");
    char *rc = test_wait_file(rc_path, "rc=", 10000);
    ck_assert_msg(rc != NULL, "the client still waits 10 s after the daemon exited");
    free(rc);
    printf("stop_closes_at_drain_timeout: exited %llu ms after SIGTERM, client closed %llu ms "
           "later\n",
           (unsigned long long)(exited - signalled), (unsigned long long)(test_now_ms() - exited));
    gate_stop(&backend);
}
END_TEST

/* A binary upgrade (SIGUSR2) with 100 requests in flight on a QUIC
 * connection: the new process takes the UDP sockets, and the old one,
 * which can no longer read its connections' datagrams, closes them at
 * once (CONNECTION_CLOSE) instead of leaving the client to its 30 s idle
 * timeout: the client ends within seconds, its requests not all answered.
 * The new process serves new connections.  Prints how long each step
 * took (docs/http3.md, Binary upgrade). */
START_TEST(upgrade_closes_open_connections)
{
    if (!have_tools())
        return;
    /* The new process is the old one's child: it becomes this one's when
     * the old one exits, to be stopped and waited for. */
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    make_certificate();
    struct gate_backend backend;
    gate_start(&backend);
    struct test_daemon d;
    test_daemon_init(&d, "h3");
    int quic = free_udp_port();
    char pid_file[PATH_MAX], extra[PATH_MAX + 32];
    test_daemon_file(pid_file, sizeof(pid_file), "corral.pid");
    snprintf(extra, sizeof(extra), "pid_file %s;", pid_file);
    gate_config(&d, quic, backend.port, "20s", extra);
    test_daemon_start(&d);
    gate_client(quic);
    test_wait_for(atomic_load(&backend.held) == GATE_STREAM, 20000,
                  "%d of %d requests reached the backend", atomic_load(&backend.held), GATE_STREAM);
    pid_t old = d.pid;
    uint64_t signalled = test_now_ms();
    ck_assert_int_eq(kill(old, SIGUSR2), 0);
    char *log = test_daemon_wait_log(&d, "serves; stopping gracefully");
    ck_assert_ptr_nonnull(log);
    uint64_t serves = test_now_ms();
    const char *at = strstr(log, "upgrade: process ");
    ck_assert_ptr_nonnull(at);
    pid_t pid = (pid_t)atoi(at + strlen("upgrade: process "));
    free(log);
    ck_assert_int_gt(pid, 0);
    int status;
    ck_assert_int_eq(waitpid(old, &status, 0), old);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    uint64_t old_gone = test_now_ms();
    d.pid = pid;
    char rc_path[PATH_MAX + 32];
    test_daemon_file(rc_path, sizeof(rc_path), "client.rc");
    char *rc = test_wait_file(rc_path, "rc=", 10000);
    ck_assert_msg(rc != NULL, "the client still waits 10 s after the upgrade");
    free(rc);
    uint64_t client_gone = test_now_ms();
    unsigned complete = 0;
    for (unsigned n = 0; n < GATE_STREAM; n++) {
        char path[PATH_MAX + 32], name[32];
        snprintf(name, sizeof(name), "dl/%u", n);
        test_daemon_file(path, sizeof(path), name);
        struct stat st;
        complete += stat(path, &st) == 0 && st.st_size == GATE_LEN;
    }
    ck_assert_uint_lt(complete, GATE_STREAM);
    printf("upgrade_closes_open_connections: new process serving %llu ms after SIGUSR2, old one "
           "gone %llu ms later, client closed %llu ms after that (%u of %u requests answered)\n",
           (unsigned long long)(serves - signalled), (unsigned long long)(old_gone - serves),
           (unsigned long long)(client_gone - old_gone), complete, GATE_STREAM);
    atomic_store(&backend.open, true);
    char dl[PATH_MAX + 32];
    test_daemon_file(dl, sizeof(dl), "dl/index.html");
    unlink(dl);
    ck_assert_int_eq(h3_get(quic, "/"), 0);
    size_t len;
    char *body = downloaded("index.html", &len);
    ck_assert_str_eq(body, "hello h3\n");
    free(body);
    test_daemon_stop(&d);
    gate_stop(&backend);
}
END_TEST

/* http3 off: the quic listen opens no socket, and no Alt-Svc is sent. */
START_TEST(http3_off)
{
    struct test_backend backend;
    struct test_daemon d;
    int quic = h3_case_start(&backend, &d, 2, "http3 off;\n");
    if (quic == 0)
        return;
    char *log = test_daemon_log(&d);
    ck_assert_ptr_null(strstr(log, " quic\n"));
    free(log);
    char head[4096];
    tls_head(tcp_port(&d), "/", head, sizeof(head));
    ck_assert_msg(strcasestr(head, "alt-svc") == NULL, "Alt-Svc in:\n%s", head);
    /* Nothing holds the UDP port: the test can bind it. */
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons((uint16_t)quic),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    close(fd);
    test_daemon_stop(&d);
    backend_stop(&backend);
}
END_TEST

/* gtlsclient's GET of "/" for `authority`: the body it saved, or ""
 * when it saved none; free it.  Debian's gtlsclient (ngtcp2 0.12, GnuTLS)
 * sends "localhost" by SNI for a numeric address whatever --sni says:
 * the unit test (test_http3.c) tries other names. */
static char *authority_get(int port, const char *authority)
{
    char cmd[PATH_MAX + 512], out[4096], dl[PATH_MAX], file[PATH_MAX + 32];
    test_daemon_file(dl, sizeof(dl), "dl");
    mkdir(dl, 0700);
    snprintf(file, sizeof(file), "%s/index.html", dl);
    unlink(file);
    snprintf(cmd, sizeof(cmd),
             "timeout 30 gtlsclient -q --exit-on-all-streams-close --timeout=10s --download %s "
             "127.0.0.1 %d https://%s/ >/dev/null 2>&1",
             dl, port, authority);
    test_run(cmd, out, sizeof(out));
    FILE *f = fopen(file, "rb");
    char *body = calloc(1, 4096);
    ck_assert_ptr_nonnull(body);
    if (f != NULL) {
        size_t n = fread(body, 1, 4095, f);
        body[n] = '\0';
        fclose(f);
    }
    return body;
}

/* Starts `d` with one worker, an admin listen and the server blocks
 * `servers`, whose quic listens are on the port `quic`. */
static void servers_start(struct test_daemon *d, int quic, const char *servers)
{
    test_daemon_init(d, "h3");
    size_t size = strlen(servers) + 64;
    char *text = malloc(size);
    ck_assert_ptr_nonnull(text);
    snprintf(text, size, "workers 1;\nadmin { listen 127.0.0.2:0; }\n%s", servers);
    test_daemon_write_config(d, text);
    free(text);
    test_daemon_start(d);
    ck_assert_int_eq(d->port, quic);
}

/* Several servers on one quic address, as on a TLS one: SNI ("localhost")
 * picks the server and its certificate, :authority the vhost among those
 * of the same certificate, $ssl_server_name is the SNI name, a request
 * for a server of another certificate is misdirected (421), and a server
 * with http3 off is not among them. */
START_TEST(servers_by_sni)
{
    if (!have_tools())
        return;
    make_certificate();
    make_pair("a.key", "a.pem", "a.test", EC_P256);
    make_pair("b.key", "b.pem", "b.test", EC_P256);
    const char *dir = test_daemon_dir();
    struct test_daemon d;
    int quic = free_udp_port();
    char text[10 * PATH_MAX + 2048];
    snprintf(text, sizeof(text),
             "server {\n"
             "  listen 127.0.0.1:%d quic;\n"
             "  tls_certificate %s/cert.pem; tls_certificate_key %s/key.pem;\n"
             "  location / { return 200 \"default [$ssl_server_name]\\n\"; }\n"
             "}\n"
             "server {\n"
             "  server_name localhost;\n"
             "  listen 127.0.0.1:%d quic;\n"
             "  tls_certificate %s/a.pem; tls_certificate_key %s/a.key;\n"
             "  location / { return 200 \"local [$ssl_server_name]\\n\"; }\n"
             "}\n"
             "server {\n"
             "  server_name same.test;\n"
             "  listen 127.0.0.1:%d quic;\n"
             "  tls_certificate %s/a.pem; tls_certificate_key %s/a.key;\n"
             "  location / { return 200 \"same\\n\"; }\n"
             "}\n"
             "server {\n"
             "  server_name *.b.test;\n"
             "  listen 127.0.0.1:%d quic;\n"
             "  tls_certificate %s/b.pem; tls_certificate_key %s/b.key;\n"
             "  location / { return 200 \"b\\n\"; }\n"
             "}\n"
             "server {\n"
             "  server_name off.test;\n"
             "  listen 127.0.0.1:%d quic;\n"
             "  http3 off;\n"
             "  tls_certificate %s/a.pem; tls_certificate_key %s/a.key;\n"
             "  location / { return 200 \"off\\n\"; }\n"
             "}\n",
             quic, dir, dir, quic, dir, dir, quic, dir, dir, quic, dir, dir, quic, dir, dir);
    servers_start(&d, quic, text);
    char *body = authority_get(quic, "localhost");
    ck_assert_str_eq(body, "local [localhost]\n");
    free(body);
    body = authority_get(quic, "same.test"); /* the same certificate: served */
    ck_assert_str_eq(body, "same\n");
    free(body);
    body = authority_get(quic, "x.b.test"); /* b's certificate is not localhost's */
    ck_assert_msg(strstr(body, "421") != NULL, "not misdirected: %s", body);
    free(body);
    body = authority_get(quic, "nobody.test"); /* the default server's neither */
    ck_assert_msg(strstr(body, "421") != NULL, "not misdirected: %s", body);
    free(body);
    body = authority_get(quic, "off.test"); /* not there: the default server's */
    ck_assert_msg(strstr(body, "421") != NULL, "http3 off served: %s", body);
    free(body);
    test_daemon_stop(&d);
}
END_TEST

/* A server with an ECDSA pair, one named by SNI and an RSA pair offers
 * over QUIC the one the client's signature algorithms take: a client
 * taking only RSA-PSS and one taking only ECDSA are both served (there
 * are no files for the client's name, so the SNI pair gives way to the
 * others over QUIC, not a failed handshake). */
START_TEST(certificate_by_signature_algorithms)
{
    if (!have_tools())
        return;
    make_certificate();
    make_pair("rsa.key", "rsa.pem", "localhost", "rsa:2048");
    const char *dir = test_daemon_dir();
    struct test_daemon d;
    int quic = free_udp_port();
    char text[6 * PATH_MAX + 1024];
    snprintf(text, sizeof(text),
             "server {\n"
             "  listen 127.0.0.1:%d quic;\n"
             "  tls_certificate %s/cert.pem; tls_certificate_key %s/key.pem;\n"
             "  tls_certificate %s/$ssl_server_name.pem;\n"
             "  tls_certificate_key %s/$ssl_server_name.key;\n"
             "  tls_certificate %s/rsa.pem; tls_certificate_key %s/rsa.key;\n"
             "  location / { return 200 \"hello h3\\n\"; }\n"
             "}\n",
             quic, dir, dir, dir, dir, dir, dir);
    servers_start(&d, quic, text);
    static const char *const sigs[] = {"RSA-PSS-RSAE-SHA256", "ECDSA-SECP256R1-SHA256"};
    for (size_t i = 0; i < 2; i++) {
        char args[256], dl[PATH_MAX + 32];
        test_daemon_file(dl, sizeof(dl), "dl/index.html");
        unlink(dl);
        snprintf(args, sizeof(args), "--ciphers=NORMAL:-VERS-ALL:+VERS-TLS1.3:-SIGN-ALL:+SIGN-%s",
                 sigs[i]);
        ck_assert_msg(h3_request(quic, "/", args) == 0, "not served with only %s", sigs[i]);
        size_t len;
        char *body = downloaded("index.html", &len);
        ck_assert_str_eq(body, "hello h3\n");
        free(body);
    }
    test_daemon_stop(&d);
}
END_TEST

/* -t: each config fails with its message. */
START_TEST(check_refuses)
{
    make_certificate();
    const char *dir = test_daemon_dir();
    char short_key[PATH_MAX + 32];
    snprintf(short_key, sizeof(short_key), "%s/short.key", dir);
    test_write_file(short_key, "31 bytes are not enough here...");
    static const struct {
        const char *body, *message;
    } cases[] = {
        {"server { listen 127.0.0.1:8443 quic; location / { return 200; } }",
         "quic needs a certificate"},
        {"server { listen 127.0.0.1:8443 quic tls; CERTS }", "tls, http2, proxy_protocol"},
        {"server { listen 127.0.0.1:8443 quic default_server; CERTS }\n"
         "server { server_name b; listen 127.0.0.1:8443 quic default_server; CERTS }",
         "already has a default_server"},
        {"server { listen 127.0.0.1:8443 quic; listen 127.0.0.1:8443 quic; CERTS }",
         "duplicate listen"},
        {"server { listen 127.0.0.1:8443 quic; tls_certificate DIR/key.pem; "
         "tls_certificate_key DIR/key.pem; }",
         NULL /* the TLS layer's own message: any failure */},
        {"http3 maybe;", "expected on or off"},
        {"quic_bpf maybe;", "on or off"},
        {"quic_gso 1;", "on or off"},
        {"quic_retry yes;", "on or off"},
        {"ssl_early_data 1;", "on or off"},
        {"server { ssl_early_data on; }", NULL /* top level only */},
        {"quic_retry_threshold -1;", NULL},
        {"quic_retry_threshold on;", NULL},
        {"server { quic_retry_threshold 8; }", NULL /* top level only */},
        {"quic_host_key DIR/none.key;\nserver { listen 127.0.0.1:8443 quic; CERTS }",
         "quic_host_key"},
        {"quic_host_key DIR/short.key;\nserver { listen 127.0.0.1:8443 quic; CERTS }",
         "at least 32 needed"},
        {"http3_max_concurrent_streams 0;", NULL},
        {"http3_stream_buffer_size 1k;", NULL},
        {"server { http3_max_concurrent_streams 8; }", NULL /* top level only */},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char body[1024], conf[PATH_MAX + 16], args[PATH_MAX + 32], out[4096];
        char certs[600];
        snprintf(certs, sizeof(certs),
                 "tls_certificate %s/cert.pem; tls_certificate_key %s/key.pem;", dir, dir);
        size_t n = 0;
        for (const char *p = cases[i].body; *p != '\0' && n < sizeof(body) - 600;) {
            if (strncmp(p, "CERTS", 5) == 0) {
                n += (size_t)snprintf(body + n, sizeof(body) - n, "%s", certs);
                p += 5;
            } else if (strncmp(p, "DIR", 3) == 0) {
                n += (size_t)snprintf(body + n, sizeof(body) - n, "%s", dir);
                p += 3;
            } else {
                body[n++] = *p++;
            }
        }
        body[n] = '\0';
        snprintf(conf, sizeof(conf), "%s/t.conf", dir);
        test_write_file(conf, body);
        snprintf(args, sizeof(args), "-t -c %s", conf);
        ck_assert_msg(test_daemon_run(args, out, sizeof(out)) != 0, "accepted: %s", body);
        if (cases[i].message != NULL)
            ck_assert_msg(strstr(out, cases[i].message) != NULL, "%s\ngave: %s", body, out);
    }
    /* And one that is right is valid. */
    char conf[PATH_MAX + 16], args[PATH_MAX + 32], out[4096], body[1024];
    snprintf(body, sizeof(body),
             "quic_bpf off; quic_gso off; http3_max_concurrent_streams 16; "
             "http3_stream_buffer_size 128k; quic_retry_threshold off; ssl_early_data on;\n"
             "server { listen 127.0.0.1:8443 tls; listen 127.0.0.1:8443 quic reuseport; "
             "tls_certificate %s/cert.pem; tls_certificate_key %s/key.pem; }",
             dir, dir);
    snprintf(conf, sizeof(conf), "%s/t.conf", dir);
    test_write_file(conf, body);
    snprintf(args, sizeof(args), "-t -c %s", conf);
    ck_assert_msg(test_daemon_run(args, out, sizeof(out)) == 0, "%s", out);
}
END_TEST

/* A UDP port another socket holds: the daemon does not start, and says
 * which listen failed. */
START_TEST(port_in_use_refuses_start)
{
    make_certificate();
    int quic;
    int fd = test_bind_udp(&quic);
    struct test_daemon d;
    test_daemon_init(&d, "h3");
    write_config(&d, quic, 9, "");
    char args[PATH_MAX + 16], out[8192], want[64];
    snprintf(args, sizeof(args), "-c %s", d.conf);
    ck_assert_int_ne(test_daemon_run(args, out, sizeof(out)), 0);
    snprintf(want, sizeof(want), "listen 127.0.0.1:%d quic: ", quic);
    ck_assert_msg(strstr(out, want) != NULL, "no \"%s\" in:\n%s", want, out);
    close(fd);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("proto/http3_daemon");
    TCase *tc = tcase_create("daemon");
    test_daemon_fixture(tc);
    tcase_add_unchecked_fixture(tc, pairs_make, NULL);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, serves_http3);
    tcase_add_test(tc, bulk_each_loss);
    tcase_add_test(tc, reload_keeps_port);
    tcase_add_test(tc, migration_steered);
    tcase_add_test(tc, migration_handed_off);
    tcase_add_test(tc, thousand_connections_steered);
    tcase_add_test(tc, connections_steered_over_ipv6);
    tcase_add_test(tc, retry_then_served);
    tcase_add_test(tc, reload_keeps_open_connections);
    tcase_add_test(tc, stop_waits_for_streams);
    tcase_add_test(tc, stop_closes_at_drain_timeout);
    tcase_add_test(tc, upgrade_closes_open_connections);
    tcase_add_test(tc, returning_client_resumes_in_0rtt);
    tcase_add_test(tc, http3_off);
    tcase_add_test(tc, servers_by_sni);
    tcase_add_test(tc, certificate_by_signature_algorithms);
    tcase_add_test(tc, check_refuses);
    tcase_add_test(tc, port_in_use_refuses_start);
    suite_add_tcase(s, tc);
    return s;
}
