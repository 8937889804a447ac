/*
 * test_acme_pebble.c: the ACME client against Debian's pebble, the ACME
 * test server of Let's Encrypt, on loopback with a CA made here: a first
 * issue validated for real over HTTP-01, a restart that finds the stored
 * certificate, renewal of a short-lived one, a challenge that fails, and
 * pebble down at start.  The client runs on a loop of its own in the
 * test, as it runs on the daemon's main loop; the HTTP-01 answers are
 * served from the shared table by a plain listener on this loop.
 */
#include "../daemon.h"
#include "../helpers.h"
#include "proto/tls/acme_client.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PEBBLE "/usr/bin/pebble"

static char dir[64];
static char state[128];
static int pebble_port, http_port;
static int alpn_port; /* where pebble validates TLS-ALPN-01; 0: http_port */
static pid_t pebble_pid;
static int ari_port; /* the ARI proxy's, the directory's when not 0 */
/* External account binding: pebble requires it with this key for
 * "kid-1"; the client binds with eab_kid and eab_key (NULL: does not). */
#define EAB_KEY "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W"
static bool eab_required;
static const char *eab_kid, *eab_key;
static pid_t ari_pid;

static void run_ok(const char *cmd)
{
    char out[2048];
    int rc = test_run(cmd, out, sizeof(out));
    ck_assert_msg(rc == 0, "%s: %s", cmd, out);
}

/* pebble's HTTPS certificate, from a CA the client is told to trust: made
 * once, by the runner before the first case (an unchecked fixture), and
 * linked into each case's directory. */
static char certs[64];

static void certs_make(void)
{
    strcpy(certs, "/tmp/test_acme_pebble-certs.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(certs));
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "cd %s && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
             "-keyout ca.key -out ca.pem -subj /CN=test-ca -days 2 2>&1 && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout key.pem "
             "-out req.csr -subj /CN=localhost 2>&1 && "
             "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > ext && "
             "openssl x509 -req -in req.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
             "-extfile ext -days 2 -out cert.pem 2>&1",
             certs);
    run_ok(cmd);
}

static void certs_remove(void)
{
    char cmd[128], out[64];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", certs);
    test_run(cmd, out, sizeof(out));
}

static void setup(void)
{
    strcpy(dir, "/tmp/test_acme_pebble.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(state, sizeof(state), "%s/state", dir);
    static const char *const files[] = {"ca.pem", "cert.pem", "key.pem"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        char target[128], link[128];
        snprintf(target, sizeof(target), "%s/%s", certs, files[i]);
        snprintf(link, sizeof(link), "%s/%s", dir, files[i]);
        ck_assert_int_eq(symlink(target, link), 0);
    }
    int fd = test_reserve_port(&pebble_port);
    close(fd);
    fd = test_reserve_port(&http_port);
    close(fd);
    pebble_pid = 0;
    alpn_port = 0;
    ari_port = 0;
    ari_pid = 0;
    eab_required = false;
    eab_kid = eab_key = NULL;
}

static void stop_pebble(void)
{
    if (pebble_pid > 0) {
        kill(pebble_pid, SIGTERM);
        if (test_wait_exit(pebble_pid, 5000) < 0) {
            kill(pebble_pid, SIGKILL);
            test_wait_exit(pebble_pid, 5000);
        }
    }
    pebble_pid = 0;
}

static void teardown(void)
{
    stop_pebble();
    if (ari_pid > 0) {
        kill(ari_pid, SIGTERM);
        test_wait_exit(ari_pid, 5000);
    }
    char cmd[128], out[64];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    test_run(cmd, out, sizeof(out));
}

/* Starts pebble: `always_valid` skips validation; `validity_s` (0: its
 * default) is the certificates' lifetime. */
static void start_pebble(bool always_valid, unsigned validity_s)
{
    char config[256], text[1024], validity[64] = "", eab[160] = "";
    snprintf(config, sizeof(config), "%s/pebble.json", dir);
    int mgmt_port;
    close(test_reserve_port(&mgmt_port));
    if (validity_s)
        snprintf(validity, sizeof(validity), ", \"certificateValidityPeriod\": %u", validity_s);
    if (eab_required)
        snprintf(eab, sizeof(eab), ", \"externalAccountMACKeys\": {\"kid-1\": \"%s\"}", EAB_KEY);
    /* httpPort: pebble validates HTTP-01 on the responder's port. */
    snprintf(text, sizeof(text),
             "{\"pebble\": {\"listenAddress\": \"127.0.0.1:%d\", \"managementListenAddress\": "
             "\"127.0.0.1:%d\", \"certificate\": \"%s/cert.pem\", \"privateKey\": "
             "\"%s/key.pem\", \"httpPort\": %d, \"tlsPort\": %d, \"ocspResponderURL\": \"\", "
             "\"externalAccountBindingRequired\": %s%s%s}}\n",
             pebble_port, mgmt_port, dir, dir, http_port, alpn_port ? alpn_port : http_port,
             eab_required ? "true" : "false", validity, eab);
    test_write_file(config, text);
    char log[256];
    snprintf(log, sizeof(log), "%s/pebble.log", dir);
    pebble_pid = fork();
    ck_assert_int_ge(pebble_pid, 0);
    if (pebble_pid == 0) {
        int out = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        dup2(out, 1);
        dup2(out, 2);
        setenv("PEBBLE_VA_NOSLEEP", "1", 1);
        setenv("PEBBLE_WFE_NONCEREJECT", "0", 1);
        setenv("PEBBLE_AUTHZREUSE", "0", 1);
        if (always_valid)
            setenv("PEBBLE_VA_ALWAYS_VALID", "1", 1);
        execl(PEBBLE, PEBBLE, "-config", config, (char *)NULL);
        _exit(127);
    }
    ck_assert_msg(test_daemon_wait_port(pebble_port, TEST_WAIT_MS), "pebble did not start");
}

/* ------------------------------------------------ the HTTP-01 responder */

/* A plain listener answering GET /.well-known/acme-challenge/TOKEN from
 * the shared table (acme_challenge_lookup()), 404 otherwise; it counts
 * the answers it gave. */
static _Atomic unsigned answered;

static size_t on_responder_data(corral_conn *conn, const char *data, size_t len)
{
    const char *end = memmem(data, len, "\r\n\r\n", 4);
    if (end == NULL)
        return len > 8192 ? (corral_conn_abort(conn, -EMSGSIZE), len) : 0;
    const char *sp1 = memchr(data, ' ', (size_t)(end - data));
    const char *sp2 = sp1 != NULL ? memchr(sp1 + 1, ' ', (size_t)(end - sp1 - 1)) : NULL;
    char answer[512], head[256];
    long n = sp2 != NULL
                 ? acme_challenge_lookup(sp1 + 1, (size_t)(sp2 - sp1 - 1), answer, sizeof(answer))
                 : -1;
    if (n >= 0)
        answered++;
    int h = snprintf(head, sizeof(head),
                     "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %ld\r\n"
                     "Connection: close\r\n\r\n",
                     n >= 0 ? "200 OK" : "404 Not Found", n >= 0 ? n : 0);
    corral_conn_write(conn, head, (size_t)h);
    if (n > 0)
        corral_conn_write(conn, answer, (size_t)n);
    corral_conn_close(conn);
    return len;
}

static const struct corral_conn_handler responder = {.on_data = on_responder_data};

static corral_server *start_responder(void)
{
    struct corral_server_config config;
    corral_server_config_init(&config);
    config.workers = 1;
    corral_server *server;
    ck_assert_int_eq(corral_server_new(&config, &server), 0);
    corral_listener *listener;
    char address[32];
    snprintf(address, sizeof(address), "127.0.0.1:%d", http_port);
    ck_assert_int_eq(corral_server_listen(server, address, NULL, &responder, NULL, &listener), 0);
    ck_assert_int_eq(corral_server_start(server), 0);
    return server;
}

/* ------------------------------------------------------ driving a client */

static struct acme_client *client_new(bool fail_ok)
{
    char uri[128], ca[128];
    snprintf(uri, sizeof(uri), "https://127.0.0.1:%d/dir", ari_port ? ari_port : pebble_port);
    snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
    static const char *const contacts[] = {"admin@example.test"};
    static const char *const domains[] = {"localhost"};
    struct acme_issuer_conf issuer = {.name = "pebble",
                                      .uri = uri,
                                      .state_path = state,
                                      .trusted_ca = ca,
                                      .contacts = contacts,
                                      .contact_count = 1,
                                      .accept_terms_of_service = true,
                                      .retry_ms = 200,
                                      .eab_kid = eab_kid,
                                      .eab_key = eab_key};
    struct acme_certificate_conf cert = {.domains = domains, .domain_count = 1};
    struct acme_client *c;
    char why[256] = "";
    int err = acme_client_new(&issuer, &cert, &c, why, sizeof(why));
    ck_assert_msg(err == 0 || fail_ok, "%s", why);
    return err == 0 ? c : NULL;
}

struct drive {
    corral_loop *loop;
    struct acme_client *client;
    uint64_t issued, failures; /* stop once both are reached */
    uint64_t deadline_ms;
    void (*at_tick)(struct drive *d);
    bool timed_out;
};

static void on_tick(corral_timer *timer, void *arg)
{
    struct drive *d = arg;
    const struct acme_client_stats *st = acme_client_stats(d->client);
    if (d->at_tick != NULL)
        d->at_tick(d);
    if (st->issued >= d->issued && st->failures >= d->failures) {
        corral_loop_stop(d->loop);
        return;
    }
    if (test_now_ms() > d->deadline_ms) {
        d->timed_out = true;
        corral_loop_stop(d->loop);
        return;
    }
    corral_timer_start(timer, 20);
}

/* Runs `c` on a loop until it has issued `issued` and failed `failures`
 * times, or for `max_ms`: false if it did not get there. */
static bool drive(struct acme_client *c, uint64_t issued, uint64_t failures, int max_ms,
                  void (*at_tick)(struct drive *d))
{
    corral_loop *loop;
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    struct drive d = {loop, c, issued, failures, test_now_ms() + (uint64_t)max_ms, at_tick, false};
    corral_timer *tick;
    ck_assert_int_eq(corral_timer_new(loop, on_tick, &d, &tick), 0);
    corral_timer_start(tick, 20);
    ck_assert_int_eq(acme_client_start(c, loop), 0);
    corral_loop_run(loop);
    /* The client's timer and any request in flight go with it. */
    acme_client_free(c);
    corral_timer_free(tick);
    corral_loop_free(loop);
    return !d.timed_out;
}

/* The stored certificate and key file, open for reading. */
static FILE *stored_file(void)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/localhost.pem", state);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    return f;
}

static X509 *stored(void)
{
    FILE *f = stored_file();
    X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    ck_assert_ptr_nonnull(x);
    return x;
}

static bool is_placeholder(X509 *x)
{
    return X509_check_issued(x, x) == X509_V_OK;
}

static mode_t mode_of(const char *name)
{
    char path[256];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", state, name);
    ck_assert_int_eq(stat(path, &st), 0);
    return st.st_mode & 0777;
}

/* ---------------------------------------------------------------- cases */

/* pebble validates HTTP-01 for real: it fetches the token from the
 * responder; then a second client on the same state_path finds the
 * certificate and does not order (pebble is gone: ordering would fail). */
START_TEST(issue_validated_then_restart)
{
    corral_server *resp = start_responder();
    start_pebble(false, 0);
    struct acme_client *c = client_new(false);
    X509 *x = stored();
    ck_assert(is_placeholder(x)); /* served until the order completes */
    X509_free(x);
    ck_assert_int_eq(mode_of("localhost.pem"), 0600);
    ck_assert_int_eq(mode_of("account.key"), 0600);
    ck_assert_msg(drive(c, 1, 0, 20000, NULL), "not issued");
    ck_assert_uint_ge(answered, 1);
    x = stored();
    ck_assert(!is_placeholder(x));
    ck_assert_int_eq(X509_check_host(x, "localhost", 0, 0, NULL), 1);
    X509_free(x);
    ck_assert_int_eq(mode_of("localhost.pem"), 0600);
    /* The file's key is the certificate's. */
    x = stored();
    FILE *f = stored_file();
    EVP_PKEY *key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
    fclose(f);
    ck_assert_msg(key != NULL, "no private key in %s/localhost.pem", state);
    ck_assert_int_eq(EVP_PKEY_eq(X509_get0_pubkey(x), key), 1);
    EVP_PKEY_free(key);
    X509_free(x);

    stop_pebble();
    test_stop_server(resp);
    c = client_new(false);
    /* No order: nothing issued, nothing failed, for a while. */
    ck_assert(!drive(c, 1, 1, 1500, NULL));
    x = stored();
    ck_assert(!is_placeholder(x));
    X509_free(x);
}
END_TEST

/* A lifetime of 6 s: renewed at two thirds (4 s), not at once. */
START_TEST(renewal)
{
    start_pebble(true, 6);
    struct acme_client *c = client_new(false);
    uint64_t start = test_now_ms();
    ck_assert_msg(drive(c, 2, 0, 30000, NULL), "not renewed");
    uint64_t took = test_now_ms() - start;
    /* The second came at two thirds of the first's life, not at once. */
    ck_assert_msg(took >= 3000, "renewed after %llu ms", (unsigned long long)took);
    X509 *x = stored();
    ck_assert(!is_placeholder(x));
    X509_free(x);
}
END_TEST

/* pebble really validates, and no one answers the challenge: the order
 * fails, is tried again, and the placeholder serves on. */
START_TEST(challenge_failure)
{
    start_pebble(false, 0);
    struct acme_client *c = client_new(false);
    ck_assert_msg(drive(c, 0, 2, 20000, NULL), "no failure");
    X509 *x = stored();
    ck_assert(is_placeholder(x));
    X509_free(x);
}
END_TEST

/* pebble starts after the client: connection refused, the placeholder
 * in place, then an issue once pebble is up. */
static void start_late(struct drive *d)
{
    if (pebble_pid == 0 && acme_client_stats(d->client)->failures >= 1)
        start_pebble(true, 0);
}

START_TEST(pebble_down_at_start)
{
    struct acme_client *c = client_new(false);
    X509 *x = stored();
    ck_assert(is_placeholder(x));
    X509_free(x);
    ck_assert_msg(drive(c, 1, 1, 20000, start_late), "not issued once pebble came up");
    x = stored();
    ck_assert(!is_placeholder(x));
    X509_free(x);
}
END_TEST

/* Another instance sharing state_path holds the order lease: this one
 * orders nothing while the lease runs (pebble is up: an order would
 * succeed), and orders once it is given back. */
static void give_back_lease(struct drive *d)
{
    static uint64_t since;
    if (since == 0)
        since = test_now_ms();
    const struct acme_client_stats *st = acme_client_stats(d->client);
    ck_assert_uint_eq(st->failures, 0);
    if (test_now_ms() - since < 1500) {
        ck_assert_uint_eq(st->issued, 0);
        return;
    }
    char lock[256];
    snprintf(lock, sizeof(lock), "%s/localhost.lock", state);
    acme_store_release(lock, "other-host:1");
}

START_TEST(lease_held_elsewhere)
{
    start_pebble(true, 0);
    ck_assert_int_eq(mkdir(state, 0700), 0);
    char lock[256];
    snprintf(lock, sizeof(lock), "%s/localhost.lock", state);
    ck_assert_int_eq(acme_store_lease(lock, "other-host:1", time(NULL), 3600), 1);
    struct acme_client *c = client_new(false);
    ck_assert_msg(drive(c, 1, 0, 20000, give_back_lease), "not issued after the lease");
    X509 *x = stored();
    ck_assert(!is_placeholder(x));
    X509_free(x);
}
END_TEST

/* pebble 2.4.0 serves no renewal information (ARI): this proxy in front
 * of it adds renewalInfo to the directory and answers it with a window
 * that has passed, logging the paths asked; everything else goes to
 * pebble, which builds its URLs from the Host header, so they name the
 * proxy too. */
static const char ari_proxy[] =
    "import http.client, http.server, json, ssl, sys\n"
    "port, pebble, cert, key, log = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], "
    "sys.argv[4], sys.argv[5]\n"
    "insecure = ssl._create_unverified_context()\n"
    "class Handler(http.server.BaseHTTPRequestHandler):\n"
    "    protocol_version = 'HTTP/1.1'\n"
    "    def log_message(self, *args): pass\n"
    "    def answer(self, status, headers, body):\n"
    "        self.send_response(status)\n"
    "        for k, v in headers: self.send_header(k, v)\n"
    "        self.send_header('Content-Length', str(len(body)))\n"
    "        self.send_header('Connection', 'close')\n"
    "        self.end_headers()\n"
    "        if self.command != 'HEAD': self.wfile.write(body)\n"
    "        self.close_connection = True\n"
    "    def forward(self):\n"
    "        with open(log, 'a') as f: f.write(self.command + ' ' + self.path + '\\n')\n"
    "        if self.path.startswith('/ari/'):\n"
    "            body = json.dumps({'suggestedWindow': {'start': '2020-01-01T00:00:00Z', "
    "'end': '2020-01-02T00:00:00Z'}}).encode()\n"
    "            return self.answer(200, [('Content-Type', 'application/json')], body)\n"
    "        n = int(self.headers.get('Content-Length') or 0)\n"
    "        data = self.rfile.read(n) if n else None\n"
    "        c = http.client.HTTPSConnection('127.0.0.1', pebble, context=insecure, timeout=10)\n"
    "        headers = {k: v for k, v in self.headers.items() if k.lower() != 'connection'}\n"
    "        c.request(self.command, self.path, body=data, headers=headers)\n"
    "        r = c.getresponse()\n"
    "        body = r.read()\n"
    "        if self.path == '/dir':\n"
    "            d = json.loads(body)\n"
    "            d['renewalInfo'] = 'https://127.0.0.1:%d/ari/' % port\n"
    "            body = json.dumps(d).encode()\n"
    "        keep = [(k, v) for k, v in r.getheaders() if k.lower() not in "
    "('content-length', 'connection', 'transfer-encoding')]\n"
    "        self.answer(r.status, keep, body)\n"
    "    do_GET = do_POST = do_HEAD = forward\n"
    "server = http.server.ThreadingHTTPServer(('127.0.0.1', port), Handler)\n"
    "tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)\n"
    "tls.load_cert_chain(cert, key)\n"
    "server.socket = tls.wrap_socket(server.socket, server_side=True)\n"
    "server.serve_forever()\n";

static void start_ari_proxy(void)
{
    char script[256], port[16], pebble[16], cert[256], key[256], log[256];
    snprintf(script, sizeof(script), "%s/ari_proxy.py", dir);
    test_write_file(script, ari_proxy);
    close(test_reserve_port(&ari_port));
    snprintf(port, sizeof(port), "%d", ari_port);
    snprintf(pebble, sizeof(pebble), "%d", pebble_port);
    snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
    snprintf(key, sizeof(key), "%s/key.pem", dir);
    snprintf(log, sizeof(log), "%s/ari.log", dir);
    ari_pid = fork();
    ck_assert_int_ge(ari_pid, 0);
    if (ari_pid == 0) {
        execlp("python3", "python3", script, port, pebble, cert, key, log, (char *)NULL);
        _exit(127);
    }
    ck_assert_msg(test_daemon_wait_port(ari_port, TEST_WAIT_MS), "the ARI proxy did not start");
}

/* A stored certificate far from two thirds of its hour: a restart asks
 * the CA's renewal information for it (the path names its RFC 9773
 * identifier), is told the window has passed, and renews at once. */
START_TEST(ari_window_past_renews_at_once)
{
    start_pebble(true, 3600);
    start_ari_proxy();
    struct acme_client *c = client_new(false);
    ck_assert_msg(drive(c, 1, 0, 20000, NULL), "not issued");
    X509 *first = stored();
    ck_assert(!is_placeholder(first));
    char *id = acme_ari_cert_id(first);
    ck_assert_ptr_nonnull(id);
    char path[256], want[256];
    snprintf(path, sizeof(path), "%s/ari.log", dir);
    /* The first order was due (the placeholder): no ARI asked. */
    char *asked = test_read_file(path);
    ck_assert_ptr_null(strstr(asked, "/ari/"));
    free(asked);

    c = client_new(false);
    ck_assert_msg(drive(c, 1, 0, 20000, NULL), "not renewed after the ARI window");
    snprintf(want, sizeof(want), "GET /ari/%s\n", id);
    asked = test_read_file(path);
    ck_assert_msg(strstr(asked, want) != NULL, "%s", asked);
    free(asked);
    X509 *second = stored();
    ck_assert_int_ne(
        ASN1_INTEGER_cmp(X509_get0_serialNumber(first), X509_get0_serialNumber(second)), 0);
    X509_free(first);
    X509_free(second);
    free(id);
}
END_TEST

/* pebble requires external account binding: without one the client
 * refuses to order (the directory says so) and says what is missing;
 * with a wrong MAC key pebble refuses the account; with the right one
 * the certificate is issued. */
START_TEST(external_account_binding)
{
    eab_required = true;
    start_pebble(true, 0);
    struct acme_client *c = client_new(false);
    ck_assert_msg(drive(c, 0, 1, 20000, NULL), "no failure without a binding");
    eab_kid = "kid-1";
    eab_key = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    c = client_new(false);
    ck_assert_msg(drive(c, 0, 1, 20000, NULL), "no failure with another key");
    X509 *x = stored();
    ck_assert(is_placeholder(x));
    X509_free(x);
    eab_key = EAB_KEY;
    c = client_new(false);
    ck_assert_msg(drive(c, 1, 0, 20000, NULL), "not issued with the binding");
    x = stored();
    ck_assert(!is_placeholder(x));
    X509_free(x);
}
END_TEST

/* ------------------------------------------- TLS to the daemon, by hand */

/* One TLS connection to 127.0.0.1:port for "localhost", kept open across
 * requests; the served certificate is not verified but looked at. */
struct tls_peer {
    SSL_CTX *ctx;
    SSL *ssl;
    int fd;
};

/* Connects and handshakes: false when either fails. */
static bool tls_peer_open(struct tls_peer *p, int port)
{
    *p = (struct tls_peer){.fd = test_connect(port)};
    if (p->fd < 0)
        return false;
    p->ctx = SSL_CTX_new(TLS_client_method());
    ck_assert_ptr_nonnull(p->ctx);
    p->ssl = SSL_new(p->ctx);
    ck_assert_ptr_nonnull(p->ssl);
    SSL_set_fd(p->ssl, p->fd);
    SSL_set_tlsext_host_name(p->ssl, "localhost");
    return SSL_connect(p->ssl) == 1;
}

static void tls_peer_close(struct tls_peer *p)
{
    if (p->ssl != NULL)
        SSL_free(p->ssl);
    if (p->ctx != NULL)
        SSL_CTX_free(p->ctx);
    if (p->fd >= 0)
        close(p->fd);
    *p = (struct tls_peer){.fd = -1};
}

/* The served certificate's serial in hex into `out`; whether a CA issued
 * it (false: the self-signed placeholder). */
static bool tls_peer_serial(const struct tls_peer *p, char *out, size_t size)
{
    X509 *x = SSL_get1_peer_certificate(p->ssl);
    ck_assert_ptr_nonnull(x);
    BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get_serialNumber(x), NULL);
    char *hex = BN_bn2hex(bn);
    snprintf(out, size, "%s", hex);
    OPENSSL_free(hex);
    BN_free(bn);
    bool issued = !is_placeholder(x);
    X509_free(x);
    return issued;
}

/* A new handshake's serial into `out`: whether a CA issued it; false
 * (and "") when the handshake fails. */
static bool served_serial(int port, char *out, size_t size)
{
    struct tls_peer p;
    bool issued = false;
    out[0] = '\0';
    if (tls_peer_open(&p, port))
        issued = tls_peer_serial(&p, out, size);
    tls_peer_close(&p);
    return issued;
}

/* The issuer of the certificate corral serves on `port` for
 * "localhost", in `out`; "" when the handshake fails. */
static void served_issuer(int port, char *out, size_t size)
{
    struct tls_peer p;
    out[0] = '\0';
    if (tls_peer_open(&p, port)) {
        X509 *x = SSL_get1_peer_certificate(p.ssl);
        if (x != NULL)
            X509_NAME_oneline(X509_get_issuer_name(x), out, (int)size);
        X509_free(x);
    }
    tls_peer_close(&p);
}

static bool issued_served(int port)
{
    char issuer[512];
    served_issuer(port, issuer, sizeof(issuer));
    return strstr(issuer, "Pebble") != NULL;
}

/* The daemon with `challenge tls-alpn-01` and no plain listener: pebble
 * validates in a handshake with corral's TLS listener (ALPN acme-tls/1,
 * RFC 8737), and the issued certificate then serves. */
START_TEST(daemon_tls_alpn)
{
    int tls_port;
    close(test_reserve_port(&tls_port));
    alpn_port = tls_port;
    start_pebble(false, 0);
    struct test_daemon d = {0};
    snprintf(d.conf, sizeof(d.conf), "%s/corral.conf", dir);
    snprintf(d.log, sizeof(d.log), "%s/corral.log", dir);
    char conf[2048];
    snprintf(conf, sizeof(conf),
             "acme_issuer pebble {\n"
             "    uri https://127.0.0.1:%d/dir;\n"
             "    state_path %s;\n"
             "    ssl_trusted_certificate %s/ca.pem;\n"
             "    challenge tls-alpn-01;\n"
             "    accept_terms_of_service;\n"
             "}\n"
             "server {\n"
             "    listen 127.0.0.1:%d tls;\n"
             "    server_name localhost;\n"
             "    acme_certificate pebble;\n"
             "    tls_certificate $acme_certificate;\n"
             "    tls_certificate_key $acme_certificate_key;\n"
             "    location / { return 200 \"ok\\n\"; }\n"
             "}\n",
             pebble_port, state, dir, tls_port);
    test_daemon_write_config(&d, conf);
    test_daemon_spawn(&d, -1);
    ck_assert(test_daemon_wait_port(tls_port, TEST_WAIT_MS));
    uint64_t deadline = test_now_ms() + 30000;
    while (!issued_served(tls_port) && test_now_ms() < deadline)
        test_sleep_ms(100);
    char issuer[512];
    served_issuer(tls_port, issuer, sizeof(issuer));
    char *log = test_read_file(d.log);
    ck_assert_msg(strstr(issuer, "Pebble") != NULL, "served issuer \"%s\"; log:\n%s", issuer, log);
    free(log);
    test_daemon_stop(&d);
}
END_TEST

/* The value of the /metrics line that begins with `series`, or -1. */
static long long metric_line(const struct test_daemon *d, const char *series)
{
    static char body[1 << 16];
    ck_assert_int_eq(test_daemon_admin_get(d, "/metrics", body, sizeof(body)), 200);
    for (const char *line = body; line != NULL; line = strchr(line, '\n')) {
        line += *line == '\n';
        if (strncmp(line, series, strlen(series)) == 0 && line[strlen(series)] == ' ')
            return strtoll(line + strlen(series) + 1, NULL, 10);
    }
    return -1;
}

/* The daemon's config: `acme_certificate` from pebble on a TLS listener
 * at `tls_port`, HTTP-01 on http_port, an admin listener for /metrics;
 * the directive `trust` (ca_certificate, or nginx's name of it,
 * ssl_trusted_certificate) names pebble's CA, and `extra` holds more of
 * the issuer's lines. */
static void daemon_config(struct test_daemon *d, int tls_port, const char *trust, const char *extra)
{
    snprintf(d->conf, sizeof(d->conf), "%s/corral.conf", dir);
    snprintf(d->log, sizeof(d->log), "%s/corral.log", dir);
    char conf[2048];
    snprintf(conf, sizeof(conf),
             "acme_issuer pebble {\n"
             "    uri https://127.0.0.1:%d/dir;\n"
             "    state_path %s;\n"
             "    %s %s/ca.pem;\n"
             "%s"
             "    accept_terms_of_service;\n"
             "}\n"
             "admin { listen 127.0.0.2:0; }\n"
             "server {\n"
             "    listen 127.0.0.1:%d;\n"
             "    location / { return 404; }\n"
             "}\n"
             "server {\n"
             "    listen 127.0.0.1:%d tls;\n"
             "    server_name localhost;\n"
             "    acme_certificate pebble;\n"
             "    tls_certificate $acme_certificate;\n"
             "    tls_certificate_key $acme_certificate_key;\n"
             "    location / { return 200 \"ok\\n\"; }\n"
             "}\n",
             pebble_port, state, trust, dir, extra, http_port, tls_port);
    test_daemon_write_config(d, conf);
}

/* The daemon: its placeholder serves at start, pebble validates HTTP-01
 * on its plain listener (whose only location answers 404), and the issued
 * certificate is served without a reload; /metrics counts it and tells
 * the time to its expiry. */
START_TEST(daemon_issues_and_serves)
{
    start_pebble(false, 0);
    int tls_port;
    close(test_reserve_port(&tls_port));
    struct test_daemon d = {0};
    daemon_config(&d, tls_port, "ssl_trusted_certificate", "    contact admin@example.test;\n");
    test_daemon_spawn(&d, -1);
    test_daemon_wait_listening(&d);
    ck_assert(test_daemon_wait_port(tls_port, TEST_WAIT_MS));
    char *log = test_daemon_wait_log(&d, "self-signed placeholder serves");
    free(log);
    uint64_t deadline = test_now_ms() + 30000;
    while (!issued_served(tls_port) && test_now_ms() < deadline)
        test_sleep_ms(100);
    char issuer[512];
    served_issuer(tls_port, issuer, sizeof(issuer));
    log = test_read_file(d.log);
    ck_assert_msg(strstr(issuer, "Pebble") != NULL, "served issuer \"%s\"; log:\n%s", issuer, log);
    ck_assert_ptr_nonnull(strstr(log, "tls_certificate_watch: "));
    free(log);
    ck_assert_int_eq(metric_line(&d, "corral_acme_certificates_issued_total"), 1);
    ck_assert_int_eq(metric_line(&d, "corral_acme_order_failures_total"), 0);
    /* pebble's certificates live years; the placeholder a day */
    long long left =
        metric_line(&d, "corral_acme_certificate_expiry_seconds{certificate=\"localhost\"}");
    ck_assert_msg(left > 7 * 86400, "expiry in %lld s", left);
    test_daemon_stop(&d);
}
END_TEST

/* GET / on the open connection, keep-alive: true on "200" with the body
 * "ok\n", read whole (its length is known from the route). */
static bool tls_peer_get(struct tls_peer *p)
{
    static const char req[] = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
    if (SSL_write(p->ssl, req, (int)strlen(req)) != (int)strlen(req))
        return false;
    char buf[2048];
    size_t len = 0;
    for (;;) {
        buf[len] = '\0';
        const char *end = strstr(buf, "\r\n\r\n");
        if (end != NULL && strcmp(end + 4, "ok\n") == 0)
            return strncmp(buf, "HTTP/1.1 200", 12) == 0;
        if (len + 1 >= sizeof(buf))
            return false;
        int n = SSL_read(p->ssl, buf + len, (int)(sizeof(buf) - 1 - len));
        if (n <= 0)
            return false;
        len += (size_t)n;
    }
}

/* Polls new handshakes for up to `ms` until a CA-issued certificate
 * whose serial is not `other` serves; its serial into `out`. */
static bool wait_issued(int port, const char *other, char *out, size_t size, int ms)
{
    uint64_t deadline = test_now_ms() + (uint64_t)ms;
    do {
        if (served_serial(port, out, size) && strcmp(out, other) != 0)
            return true;
        test_sleep_ms(50);
    } while (test_now_ms() < deadline);
    return false;
}

/* The daemon gets its certificate from pebble and is stopped; pebble goes
 * too.  A daemon started again serves the stored certificate from its
 * first handshake (the same serial) and orders nothing. */
START_TEST(daemon_restart_serves_stored)
{
    start_pebble(true, 0);
    int tls_port;
    close(test_reserve_port(&tls_port));
    struct test_daemon d = {0};
    daemon_config(&d, tls_port, "ca_certificate", "");
    test_daemon_spawn(&d, -1);
    test_daemon_wait_listening(&d);
    char serial[128], again[128];
    bool issued = wait_issued(tls_port, "", serial, sizeof(serial), 30000);
    char *log = test_daemon_log(&d);
    ck_assert_msg(issued, "not issued; log:\n%s", log);
    /* The first ordered, which the second must not. */
    ck_assert_ptr_nonnull(strstr(log, "acme: ordering \"localhost\""));
    free(log);
    test_daemon_stop(&d);
    stop_pebble();

    test_daemon_spawn(&d, -1);
    test_daemon_wait_listening(&d);
    ck_assert(test_daemon_wait_port(tls_port, TEST_WAIT_MS));
    ck_assert_msg(served_serial(tls_port, again, sizeof(again)), "placeholder served");
    ck_assert_str_eq(again, serial);
    /* An order would go to pebble, which is down, and fail at once. */
    test_sleep_ms(500);
    log = test_daemon_log(&d);
    ck_assert_msg(strstr(log, "acme: ordering") == NULL, "ordered again; log:\n%s", log);
    ck_assert_msg(strstr(log, "placeholder") == NULL, "placeholder; log:\n%s", log);
    free(log);
    ck_assert_int_eq(metric_line(&d, "corral_acme_certificates_issued_total"), 0);
    ck_assert_int_eq(metric_line(&d, "corral_acme_order_failures_total"), 0);
    test_daemon_stop(&d);
}
END_TEST

/* Certificates living 4 s are renewed at two thirds of that; each new
 * one serves to new handshakes without a reload, while a keep-alive
 * connection opened under the old one keeps being answered. */
START_TEST(daemon_renewal_keeps_connections)
{
    start_pebble(true, 4);
    int tls_port;
    close(test_reserve_port(&tls_port));
    struct test_daemon d = {0};
    daemon_config(&d, tls_port, "ca_certificate", "");
    test_daemon_spawn(&d, -1);
    test_daemon_wait_listening(&d);
    char first[128], old[128], renewed[128];
    ck_assert_msg(wait_issued(tls_port, "", first, sizeof(first), 30000), "not issued");
    struct tls_peer p;
    ck_assert(tls_peer_open(&p, tls_port));
    ck_assert(tls_peer_serial(&p, old, sizeof(old)));
    ck_assert(tls_peer_get(&p));
    bool issued = wait_issued(tls_port, old, renewed, sizeof(renewed), 15000);
    char *log = test_daemon_log(&d);
    ck_assert_msg(issued, "not renewed; log:\n%s", log);
    ck_assert_msg(strstr(log, "reload") == NULL, "reloaded; log:\n%s", log);
    free(log);
    /* The connection from before is still the old certificate's, and
     * answered. */
    ck_assert_msg(tls_peer_get(&p), "the connection from before the renewal failed");
    ck_assert(tls_peer_get(&p));
    tls_peer_close(&p);
    ck_assert_int_ge(metric_line(&d, "corral_acme_certificates_issued_total"), 2);
    test_daemon_stop(&d);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("acme_pebble");
    TCase *tc = tcase_create("pebble");
    tcase_add_unchecked_fixture(tc, certs_make, certs_remove);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, issue_validated_then_restart);
    tcase_add_test(tc, renewal);
    tcase_add_test(tc, ari_window_past_renews_at_once);
    tcase_add_test(tc, external_account_binding);
    tcase_add_test(tc, challenge_failure);
    tcase_add_test(tc, pebble_down_at_start);
    tcase_add_test(tc, daemon_issues_and_serves);
    tcase_add_test(tc, lease_held_elsewhere);
    tcase_add_test(tc, daemon_tls_alpn);
    tcase_add_test(tc, daemon_restart_serves_stored);
    tcase_add_test(tc, daemon_renewal_keeps_connections);
    suite_add_tcase(s, tc);
    return s;
}
