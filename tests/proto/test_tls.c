/*
 * test_tls.c: TLS termination as a user runs it: build/corral with `listen
 * ... tls` and certificates made for this run by the openssl command, and a
 * client written here with OpenSSL that pins versions and ciphers, sends SNI
 * and ALPN, offers sessions and client certificates.  Versions, certificate
 * choice by SNI and by key type, ALPN, resumption by ticket and by cache
 * across workers, the handshake metrics, garbage and silent clients, client
 * certificates, TLS to an upstream (a second corral), what -t says about the
 * files, and kernel TLS.
 */
#include "../daemon.h"
#include "../helpers.h"
#include "proto/tls/tls_internal.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ocsp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define COUNT(array) ((int)(sizeof(array) / sizeof((array)[0])))

/* ------------------------------------------------------------ certificates */

/* Only what the script below asks for, so that the system's openssl.cnf
 * (which may add extensions of its own) plays no part. */
static const char openssl_conf[] = "[req]\n"
                                   "distinguished_name = dn\n"
                                   "[dn]\n"
                                   "[ca]\n"
                                   "basicConstraints = critical, CA:TRUE\n"
                                   "keyUsage = critical, keyCertSign, cRLSign\n"
                                   "subjectKeyIdentifier = hash\n";

/* Two unrelated CAs; leaves signed by the first for a.test, *.b.test and
 * default.test (P-256), default.test again with an RSA 2048 key, an expired
 * one, and a client certificate from each CA; an intermediate CA under the
 * first and, signed by it, chained.test, whose file holds the leaf and then
 * the intermediate; ocsp.test (serial 10, and 12 as ocsp2) and revoked.test
 * (11), must-staple certificates whose OCSP URL is http://127.0.0.1:1/;
 * ip (13) for the address 127.0.0.1.  NAME.pem with NAME.key. */
static const char make_certs[] =
    "set -e\n"
    "export OPENSSL_CONF=\"$PWD/openssl.cnf\"\n"
    "ec() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out \"$1.key\"; }\n"
    "ca() {\n"
    "    ec \"$1\"\n"
    "    openssl req -new -x509 -extensions ca -key \"$1.key\" -subj \"/CN=$2\" -days 30 \\\n"
    "        -out \"$1.pem\"\n"
    "}\n"
    "leaf() { # NAME CA CN SERIAL DAYS\n"
    "    printf 'basicConstraints = CA:FALSE\\n"
    "keyUsage = critical, digitalSignature, keyEncipherment\\n"
    "extendedKeyUsage = serverAuth, clientAuth\\n"
    "subjectAltName = DNS:%s\\n' \"$3\" > \"$1.ext\"\n"
    "    openssl req -new -key \"$1.key\" -subj \"/CN=$3\" -out \"$1.csr\"\n"
    "    openssl x509 -req -in \"$1.csr\" -CA \"$2.pem\" -CAkey \"$2.key\" -set_serial \"$4\" \\\n"
    "        -days \"$5\" -extfile \"$1.ext\" -out \"$1.pem\"\n"
    "}\n"
    "ca ca 'corral test CA'\n"
    "ca other-ca 'corral other CA'\n"
    "ec a && leaf a ca a.test 1 30\n"
    "ec b && leaf b ca '*.b.test' 2 30\n"
    "ec default && leaf default ca default.test 3 30\n"
    "openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out rsa.key\n"
    "leaf rsa ca default.test 4 30\n"
    "ec expired && leaf expired ca default.test 5 -1\n"
    "ec client && leaf client ca client 6 30\n"
    "ec other-client && leaf other-client other-ca client 7 30\n"
    "ec inter && openssl req -new -key inter.key -subj '/CN=corral test intermediate' \\\n"
    "    -out inter.csr\n"
    "openssl x509 -req -in inter.csr -CA ca.pem -CAkey ca.key -set_serial 8 -days 30 \\\n"
    "    -extfile openssl.cnf -extensions ca -out inter.pem\n"
    "ec chained && leaf chained inter chained.test 9 30 && cat inter.pem >>chained.pem\n"
    "ocspleaf() { # NAME CN SERIAL: must-staple, with an OCSP URL nothing answers at\n"
    "    printf 'basicConstraints = CA:FALSE\\n"
    "keyUsage = critical, digitalSignature\\n"
    "extendedKeyUsage = serverAuth\\n"
    "subjectAltName = DNS:%s\\n"
    "authorityInfoAccess = OCSP;URI:http://127.0.0.1:1/\\n"
    "tlsfeature = status_request\\n' \"$2\" > \"$1.ext\"\n"
    "    openssl req -new -key \"$1.key\" -subj \"/CN=$2\" -out \"$1.csr\"\n"
    "    openssl x509 -req -in \"$1.csr\" -CA ca.pem -CAkey ca.key -set_serial \"$3\" \\\n"
    "        -days 30 -extfile \"$1.ext\" -out \"$1.pem\"\n"
    "}\n"
    "ec ocsp && ocspleaf ocsp ocsp.test 10\n"
    "ec revoked && ocspleaf revoked revoked.test 11\n"
    "ec ocsp2 && ocspleaf ocsp2 ocsp.test 12\n"
    "ec ip && printf 'basicConstraints = CA:FALSE\\nextendedKeyUsage = serverAuth\\n"
    "subjectAltName = IP:127.0.0.1\\n' >ip.ext\n"
    "openssl req -new -key ip.key -subj /CN=127.0.0.1 -out ip.csr\n"
    "openssl x509 -req -in ip.csr -CA ca.pem -CAkey ca.key -set_serial 13 -days 30 \\\n"
    "    -extfile ip.ext -out ip.pem\n";

static char certs_dir[PATH_MAX];

/* Once per test case group, in the runner: the certificates every case
 * uses, in the group's directory. */
static void certs_make(void)
{
    int n = snprintf(certs_dir, sizeof(certs_dir), "%s/certs", test_daemon_group_dir());
    ck_assert_int_lt(n, (int)sizeof(certs_dir));
    ck_assert_int_eq(mkdir(certs_dir, 0755), 0);
    char path[PATH_MAX + 32], cmd[PATH_MAX + 128];
    snprintf(path, sizeof(path), "%s/openssl.cnf", certs_dir);
    test_write_file(path, openssl_conf);
    snprintf(path, sizeof(path), "%s/make-certs.sh", certs_dir);
    test_write_file(path, make_certs);
    snprintf(cmd, sizeof(cmd), "cd %s && sh make-certs.sh >make-certs.log 2>&1", certs_dir);
    int rc = system(cmd);
    snprintf(path, sizeof(path), "%s/make-certs.log", certs_dir);
    ck_assert_msg(rc == 0, "making the certificates failed:\n%s", test_read_file(path));
}

/* Before each case: DIR/certs, so that configs name the files
 * certs/NAME.pem (relative paths are resolved against the config's
 * directory); and EPIPE rather than SIGPIPE when the client writes to a
 * connection the daemon has closed. */
static void case_setup(void)
{
    char link[PATH_MAX];
    test_daemon_file(link, sizeof(link), "certs");
    ck_assert_int_eq(symlink(certs_dir, link), 0);
    signal(SIGPIPE, SIG_IGN);
}

/* ------------------------------------------------------------ the daemon */

#define ADMIN "admin { listen 127.0.0.2:0; }\n"
#define DEFAULT_CERT                                                                               \
    "    tls_certificate certs/default.pem;\n    tls_certificate_key certs/default.key;\n"

/* Writes the config, DIR/NAME.conf, from a format, and starts the daemon. */
__attribute__((format(printf, 3, 4))) static void start(struct test_daemon *d, const char *name,
                                                        const char *format, ...)
{
    test_daemon_init(d, name);
    char conf[8192];
    va_list args;
    va_start(args, format);
    int n = vsnprintf(conf, sizeof(conf), format, args);
    va_end(args);
    ck_assert_int_lt(n, (int)sizeof(conf));
    test_daemon_write_config(d, conf);
    test_daemon_start(d);
}

/* The usual daemon: `workers` workers, one server on a tls port with the
 * default.test certificate and `settings` (whole lines) in its block,
 * answering `text`. */
static void start_tls_server(struct test_daemon *d, const char *name, unsigned workers,
                             const char *settings, const char *text)
{
    start(d, name,
          "workers %u;\n" ADMIN "server {\n"
          "    listen 127.0.0.1:0 tls;\n" DEFAULT_CERT "%s"
          "    location / { return 200 \"%s\"; }\n"
          "}\n",
          workers, settings, text);
}

/* A port of 127.0.0.1 that was free a moment ago, for a config that names
 * one address in several servers. */
static int free_port(void)
{
    int port;
    close(test_reserve_port(&port));
    return port;
}

/* The sum of the series of metric `name` whose labels include `label`
 * (every series with NULL) on d's /metrics: 0 if none has it, -1 if `name`
 * has no series at all. */
static long long metric(const struct test_daemon *d, const char *name, const char *label)
{
    static char body[1 << 16];
    ck_assert_int_eq(test_daemon_admin_get(d, "/metrics", body, sizeof(body)), 200);
    long long sum = -1;
    size_t len = strlen(name);
    for (char *line = body, *next; line != NULL && *line != '\0'; line = next) {
        next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        if (strncmp(line, name, len) != 0 || (line[len] != '{' && line[len] != ' '))
            continue;
        const char *value = line[len] == '{' ? strchr(line, '}') : line + len;
        if (value == NULL)
            continue;
        bool match = label == NULL || (line[len] == '{' && strstr(line, label) != NULL &&
                                       strstr(line, label) < value);
        sum = (sum < 0 ? 0 : sum) + (match ? strtoll(value + 1, NULL, 10) : 0);
    }
    return sum;
}

/* metric(), asked again for up to 2 s until it is `expected`: counters are
 * summed from the workers, which may count a moment after the client saw
 * the end of its connection. */
static long long metric_becomes(const struct test_daemon *d, const char *name, const char *label,
                                long long expected)
{
    long long value = metric(d, name, label);
    for (int i = 0; i < 100 && value != expected; i++) {
        usleep(20000);
        value = metric(d, name, label);
    }
    return value;
}

#define HANDSHAKES   "corral_tls_handshakes_total"
#define ERRORS       "corral_tls_handshake_errors_total"
#define KTLS         "corral_tls_ktls_connections_total"
#define OCSP_FETCHES "corral_tls_ocsp_fetches_total"

/* ------------------------------------------------------------ the client */

struct client {
    int min_version, max_version; /* TLS1_x_VERSION; 0: OpenSSL's default */
    const char *sni;              /* NULL: none */
    const char *ciphers;          /* TLS 1.2 cipher list; NULL: the default */
    const char *sigalgs;          /* signature algorithms offered; NULL: the default */
    const char *alpn;             /* protocols offered, comma-separated; NULL: no ALPN */
    const char *certificate;      /* client certificate: certs/NAME.pem and .key */
    const char *trust;            /* verify the server against certs/NAME.pem */
    SSL_SESSION *session;         /* offered for resumption */
    bool status;                  /* ask for a stapled OCSP response */
};

struct tls {
    int fd;
    SSL_CTX *ctx;
    SSL *ssl;
    char error[512]; /* what went wrong last */
};

/* Records what made `what` fail with `rc`, OpenSSL's reason first. */
static void tls_note_error(struct tls *t, const char *what, int rc)
{
    int saved = errno;
    int code = SSL_get_error(t->ssl, rc);
    char reason[256] = "no OpenSSL error";
    unsigned long e = ERR_get_error();
    if (e != 0)
        ERR_error_string_n(e, reason, sizeof(reason));
    snprintf(t->error, sizeof(t->error), "%s: %s (SSL_get_error %d, errno %s)", what, reason, code,
             strerror(saved));
    ERR_clear_error();
}

/* Connects to 127.0.0.1:port as `c` says: whether the handshake succeeded
 * (if not, why is in t->error).  Close with tls_close() either way. */
static bool tls_open(struct tls *t, int port, const struct client *c)
{
    memset(t, 0, sizeof(*t));
    t->fd = -1;
    t->ctx = SSL_CTX_new(TLS_client_method());
    ck_assert_ptr_nonnull(t->ctx);
    if (c->max_version != 0 && c->max_version < TLS1_2_VERSION) {
        /* OpenSSL leaves out versions before 1.2 at its default security
         * level; the refusal must come from the server. */
        SSL_CTX_set_security_level(t->ctx, 0);
        ck_assert_int_eq(SSL_CTX_set_cipher_list(t->ctx, "DEFAULT:@SECLEVEL=0"), 1);
    }
    if (c->min_version != 0)
        ck_assert_int_eq(SSL_CTX_set_min_proto_version(t->ctx, c->min_version), 1);
    if (c->max_version != 0)
        ck_assert_int_eq(SSL_CTX_set_max_proto_version(t->ctx, c->max_version), 1);
    if (c->ciphers != NULL)
        ck_assert_int_eq(SSL_CTX_set_cipher_list(t->ctx, c->ciphers), 1);
    if (c->sigalgs != NULL)
        ck_assert_int_eq(SSL_CTX_set1_sigalgs_list(t->ctx, c->sigalgs), 1);
    if (c->alpn != NULL) {
        unsigned char wire[64];
        size_t len = 0;
        for (const char *p = c->alpn; *p != '\0';) {
            size_t n = strcspn(p, ",");
            ck_assert_uint_lt(len + 1 + n, sizeof(wire));
            wire[len++] = (unsigned char)n;
            memcpy(wire + len, p, n);
            len += n;
            p += n + (p[n] == ',');
        }
        ck_assert_int_eq(SSL_CTX_set_alpn_protos(t->ctx, wire, (unsigned)len), 0);
    }
    if (c->certificate != NULL) {
        char path[PATH_MAX + 16];
        snprintf(path, sizeof(path), "%s/%s.pem", certs_dir, c->certificate);
        ck_assert_int_eq(SSL_CTX_use_certificate_chain_file(t->ctx, path), 1);
        snprintf(path, sizeof(path), "%s/%s.key", certs_dir, c->certificate);
        ck_assert_int_eq(SSL_CTX_use_PrivateKey_file(t->ctx, path, SSL_FILETYPE_PEM), 1);
    }
    if (c->trust != NULL) {
        char path[PATH_MAX + 16];
        snprintf(path, sizeof(path), "%s/%s.pem", certs_dir, c->trust);
        ck_assert_int_eq(SSL_CTX_load_verify_locations(t->ctx, path, NULL), 1);
        SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
    }
    t->ssl = SSL_new(t->ctx);
    ck_assert_ptr_nonnull(t->ssl);
    if (c->sni != NULL)
        ck_assert_int_eq(SSL_set_tlsext_host_name(t->ssl, c->sni), 1);
    if (c->session != NULL)
        ck_assert_int_eq(SSL_set_session(t->ssl, c->session), 1);
    if (c->status)
        ck_assert_int_eq(SSL_set_tlsext_status_type(t->ssl, TLSEXT_STATUSTYPE_ocsp), 1);
    t->fd = test_connect(port); /* blocking, with 5 s timeouts */
    ck_assert_int_eq(SSL_set_fd(t->ssl, t->fd), 1);
    ERR_clear_error();
    int rc = SSL_connect(t->ssl);
    if (rc != 1) {
        tls_note_error(t, "handshake", rc);
        return false;
    }
    return true;
}

/* Closes as a well-behaved client does, with a close_notify after a
 * handshake: OpenSSL makes the session of a connection freed without one
 * unresumable. */
static void tls_close(struct tls *t)
{
    if (t->ssl != NULL && SSL_is_init_finished(t->ssl))
        SSL_shutdown(t->ssl);
    if (t->ssl != NULL)
        SSL_free(t->ssl);
    if (t->ctx != NULL)
        SSL_CTX_free(t->ctx);
    if (t->fd >= 0)
        close(t->fd);
    memset(t, 0, sizeof(*t));
    t->fd = -1;
}

/* GET `path` with Host `host` on the open connection, which stays open:
 * the status, the body in `body`; 0 without a whole response (why is in
 * t->error). */
static int tls_get(struct tls *t, const char *host, const char *path, char *body, size_t size)
{
    char request[256];
    int n = snprintf(request, sizeof(request), "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host);
    ERR_clear_error();
    int rc = SSL_write(t->ssl, request, n);
    if (rc != n) {
        tls_note_error(t, "sending the request", rc);
        return 0;
    }
    char response[16384];
    size_t len = 0, want = 0;
    const char *head_end = NULL;
    /* Each read adds at least a byte to a bounded buffer and waits at most
     * the socket's 5 s. */
    for (int i = 0; i < (int)sizeof(response); i++) {
        if (head_end != NULL && len >= want)
            break;
        if (len == sizeof(response) - 1) {
            snprintf(t->error, sizeof(t->error), "response over %zu bytes", len);
            return 0;
        }
        rc = SSL_read(t->ssl, response + len, (int)(sizeof(response) - 1 - len));
        if (rc <= 0) {
            tls_note_error(t, "reading the response", rc);
            return 0;
        }
        len += (size_t)rc;
        response[len] = '\0';
        if (head_end == NULL && (head_end = strstr(response, "\r\n\r\n")) != NULL) {
            const char *length = strcasestr(response, "\r\nContent-Length:");
            want = (size_t)(head_end + 4 - response);
            if (length != NULL && length < head_end)
                want += strtoul(length + 17, NULL, 10);
        }
    }
    if (head_end == NULL || len < want) {
        snprintf(t->error, sizeof(t->error), "an incomplete response: %.400s", response);
        return 0;
    }
    int status = 0;
    sscanf(response, "HTTP/1.1 %d", &status);
    snprintf(body, size, "%.*s", (int)(want - (size_t)(head_end + 4 - response)), head_end + 4);
    return status;
}

/* The common name of the server's certificate. */
static void peer_name(struct tls *t, char *name, size_t size)
{
    X509 *cert = SSL_get1_peer_certificate(t->ssl);
    ck_assert_ptr_nonnull(cert);
    name[0] = '\0';
    X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, name, (int)size);
    X509_free(cert);
}

/* EVP_PKEY_RSA or EVP_PKEY_EC: the type of the server certificate's key. */
static int peer_key_type(struct tls *t)
{
    X509 *cert = SSL_get1_peer_certificate(t->ssl);
    ck_assert_ptr_nonnull(cert);
    int type = EVP_PKEY_get_base_id(X509_get0_pubkey(cert));
    X509_free(cert);
    return type;
}

/* A connection as `c`, GET / with Host `host`: fails the test unless the
 * answer is 200 with `expected`. */
static void expect_body(int port, const struct client *c, const char *host, const char *expected)
{
    struct tls t;
    ck_assert_msg(tls_open(&t, port, c), "%s", t.error);
    char body[256];
    int status = tls_get(&t, host, "/", body, sizeof(body));
    ck_assert_msg(status == 200, "GET / (Host %s): status %d, %s", host, status, t.error);
    ck_assert_str_eq(body, expected);
    tls_close(&t);
}

/* Whether the server refuses `c`: the handshake fails, or the first request
 * (Host: the SNI name, else default.test) gets no response (in TLS 1.3 the
 * client finishes its handshake before the server has judged the client's
 * certificate).  An HTTP answer is not a refusal.  What happened goes to
 * `why`. */
static bool refused(int port, const struct client *c, char *why, size_t size)
{
    struct tls t;
    bool no = !tls_open(&t, port, c);
    if (!no) {
        char body[256];
        const char *host = c->sni != NULL ? c->sni : "default.test";
        int status = tls_get(&t, host, "/", body, sizeof(body));
        no = status == 0;
        if (!no)
            snprintf(t.error, sizeof(t.error), "answered %d \"%s\"", status, body);
    }
    snprintf(why, size, "%s", t.error);
    tls_close(&t);
    return no;
}

/* How many ms until the peer closes `fd`, whatever it sends meanwhile; -1
 * if it is still open after `limit_ms`. */
static int ms_until_closed(int fd, int limit_ms)
{
    uint64_t start = test_now_ms();
    for (int i = 0; i < limit_ms / 10 + 1 && test_now_ms() - start < (uint64_t)limit_ms; i++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 10) <= 0)
            continue;
        char buf[4096];
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n == 0 || (n == -1 && errno == ECONNRESET))
            return (int)(test_now_ms() - start);
    }
    return -1;
}

static const char *version_name(int version)
{
    return version == TLS1_3_VERSION ? "TLSv1.3" : version == TLS1_2_VERSION ? "TLSv1.2" : "other";
}

/* ============================================================ versions */

START_TEST(tls_1_2_and_1_3_are_served_and_older_versions_refused)
{
    struct test_daemon d;
    start_tls_server(&d, "corral", 1, "", "secure");
    static const int versions[] = {TLS1_2_VERSION, TLS1_3_VERSION};
    for (int i = 0; i < COUNT(versions); i++) {
        struct client c = {
            .min_version = versions[i], .max_version = versions[i], .sni = "default.test"};
        struct tls t;
        ck_assert_msg(tls_open(&t, d.port, &c), "%s: %s", version_name(versions[i]), t.error);
        ck_assert_int_eq(SSL_version(t.ssl), versions[i]);
        char body[64];
        ck_assert_msg(tls_get(&t, "default.test", "/", body, sizeof(body)) == 200, "%s: %s",
                      version_name(versions[i]), t.error);
        ck_assert_str_eq(body, "secure");
        tls_close(&t);
    }
    /* TLS 1.1 at most: the server answers the hello with an alert. */
    struct client old = {
        .min_version = TLS1_VERSION, .max_version = TLS1_1_VERSION, .sni = "default.test"};
    struct tls t;
    ck_assert_msg(!tls_open(&t, d.port, &old), "a TLS 1.1 client got %s", SSL_get_version(t.ssl));
    ck_assert_msg(strstr(t.error, "no protocols available") == NULL,
                  "the client offered nothing: %s", t.error);
    tls_close(&t);
    test_daemon_stop(&d);

    start_tls_server(&d, "tls13", 1, "    tls_protocols TLSv1.3;\n", "1.3 only");
    struct client tls12 = {
        .min_version = TLS1_2_VERSION, .max_version = TLS1_2_VERSION, .sni = "default.test"};
    ck_assert_msg(!tls_open(&t, d.port, &tls12), "tls_protocols TLSv1.3 let TLS 1.2 in");
    tls_close(&t);
    struct client tls13 = {.min_version = TLS1_3_VERSION, .sni = "default.test"};
    expect_body(d.port, &tls13, "default.test", "1.3 only");
    test_daemon_stop(&d);
}
END_TEST

/* ============================================================ certificates */

static const struct {
    const char *sni;         /* NULL: none */
    const char *host;        /* the request's Host */
    const char *certificate; /* the common name the client must see */
    const char *body;        /* the server block that answers */
} sni_cases[] = {
    {"a.test", "a.test", "a.test", "a"},
    {"x.b.test", "x.b.test", "*.b.test", "b"},
    {"deep.x.b.test", "deep.x.b.test", "*.b.test", "b"},
    {"unknown.test", "unknown.test", "default.test", "default"},
    {"default.test", "default.test", "default.test", "default"},
    {NULL, "default.test", "default.test", "default"},
};

START_TEST(sni_picks_the_server_blocks_certificate)
{
    int port = free_port();
    struct test_daemon d;
    start(&d, "corral",
          "workers 1;\n" ADMIN "server {\n"
          "    listen 127.0.0.1:%d tls;\n"
          "    server_name a.test;\n"
          "    tls_certificate certs/a.pem;\n"
          "    tls_certificate_key certs/a.key;\n"
          "    location / { return 200 \"a\"; }\n"
          "}\n"
          "server {\n"
          "    listen 127.0.0.1:%d tls;\n"
          "    server_name *.b.test;\n"
          "    tls_certificate certs/b.pem;\n"
          "    tls_certificate_key certs/b.key;\n"
          "    location / { return 200 \"b\"; }\n"
          "}\n"
          "server {\n"
          "    listen 127.0.0.1:%d tls default_server;\n"
          "    server_name default.test;\n" DEFAULT_CERT
          "    location / { return 200 \"default\"; }\n"
          "}\n",
          port, port, port);
    ck_assert_int_eq(d.port, port);
    for (int i = 0; i < COUNT(sni_cases); i++) {
        struct client c = {.sni = sni_cases[i].sni};
        struct tls t;
        const char *sni = sni_cases[i].sni != NULL ? sni_cases[i].sni : "(none)";
        ck_assert_msg(tls_open(&t, port, &c), "SNI %s: %s", sni, t.error);
        char name[256], body[64];
        peer_name(&t, name, sizeof(name));
        ck_assert_msg(strcmp(name, sni_cases[i].certificate) == 0,
                      "SNI %s: certificate for %s, expected %s", sni, name,
                      sni_cases[i].certificate);
        int status = tls_get(&t, sni_cases[i].host, "/", body, sizeof(body));
        ck_assert_msg(status == 200 && strcmp(body, sni_cases[i].body) == 0,
                      "SNI %s, Host %s: %d \"%s\" (%s), expected \"%s\"", sni, sni_cases[i].host,
                      status, body, status == 0 ? t.error : "", sni_cases[i].body);
        tls_close(&t);
    }
    test_daemon_stop(&d);
}
END_TEST

/* Requests whose Host names another server block than SNI did.  a.test and
 * shared.test share their certificate and settings, a-verify.test has it
 * too but asks for client certificates, a-strict.test too but speaks TLS
 * 1.3 only, *.b.test and default.test have their own. */
static const struct {
    const char *sni;  /* NULL: none */
    const char *host; /* the request's Host, or :authority */
    int status;
    const char *body; /* of a 200 */
} misdirected_cases[] = {
    {"a.test", "a.test", 200, "a"},
    {"a.test", "A.Test:443", 200, "a"},
    {"a.test", "shared.test", 200, "shared"},
    {"x.b.test", "y.b.test", 200, "b"},
    {"a.test", "x.b.test", 421, NULL},
    {"a.test", "default.test", 421, NULL},
    {"a.test", "a-verify.test", 421, NULL},
    {"a.test", "a-strict.test", 421, NULL},
    {"a-strict.test", "a-strict.test", 200, "a-strict"},
    {"x.b.test", "a.test", 421, NULL},
    {"unknown.test", "default.test", 200, "default"},
    {"unknown.test", "other.test", 200, "default"},
    {"unknown.test", "a.test", 421, NULL},
    {NULL, "a.test", 200, "a"},
};

/* A TLS connection belongs to the server block SNI picked: a request on it
 * for a block with other TLS settings (certificates, client certificates,
 * protocols)
 * gets 421 Misdirected Request, over HTTP/1.1 and HTTP/2 alike, so that the
 * client asks again on a connection of its own for that name. */
START_TEST(misdirected_requests_get_421)
{
    int port = free_port();
    struct test_daemon d;
    start(&d, "corral",
          "workers 1;\n" ADMIN "server {\n"
          "    listen 127.0.0.1:%d tls http2;\n"
          "    server_name a.test;\n"
          "    tls_certificate certs/a.pem;\n"
          "    tls_certificate_key certs/a.key;\n"
          "    location / { return 200 \"a\"; }\n"
          "}\n"
          "server {\n"
          "    listen 127.0.0.1:%d tls http2;\n"
          "    server_name shared.test;\n"
          "    tls_certificate certs/a.pem;\n"
          "    tls_certificate_key certs/a.key;\n"
          "    location / { return 200 \"shared\"; }\n"
          "}\n"
          "server {\n"
          "    listen 127.0.0.1:%d tls http2;\n"
          "    server_name a-verify.test;\n"
          "    tls_certificate certs/a.pem;\n"
          "    tls_certificate_key certs/a.key;\n"
          "    tls_client_certificate certs/ca.pem;\n"
          "    tls_verify_client optional;\n"
          "    location / { return 200 \"a-verify\"; }\n"
          "}\n"
          "server {\n"
          "    listen 127.0.0.1:%d tls http2;\n"
          "    server_name a-strict.test;\n"
          "    tls_certificate certs/a.pem;\n"
          "    tls_certificate_key certs/a.key;\n"
          "    tls_protocols TLSv1.3;\n"
          "    location / { return 200 \"a-strict\"; }\n"
          "}\n"
          "server {\n"
          "    listen 127.0.0.1:%d tls http2;\n"
          "    server_name *.b.test;\n"
          "    tls_certificate certs/b.pem;\n"
          "    tls_certificate_key certs/b.key;\n"
          "    location / { return 200 \"b\"; }\n"
          "}\n"
          "server {\n"
          "    listen 127.0.0.1:%d tls http2 default_server;\n"
          "    server_name default.test;\n" DEFAULT_CERT
          "    location / { return 200 \"default\"; }\n"
          "}\n",
          port, port, port, port, port, port);
    for (int i = 0; i < COUNT(misdirected_cases); i++) {
        const char *sni = misdirected_cases[i].sni;
        const char *host = misdirected_cases[i].host;
        int expected = misdirected_cases[i].status;
        struct client c = {.sni = sni};
        struct tls t;
        ck_assert_msg(tls_open(&t, port, &c), "SNI %s: %s", sni, t.error);
        char body[64];
        int status = tls_get(&t, host, "/", body, sizeof(body));
        ck_assert_msg(status == expected, "HTTP/1.1, SNI %s, Host %s: %d \"%s\" %s, expected %d",
                      sni, host, status, body, status == 0 ? t.error : "", expected);
        if (expected == 200)
            ck_assert_str_eq(body, misdirected_cases[i].body);
        tls_close(&t);
        if (sni == NULL)
            continue; /* curl sends the URL's name */

        /* HTTP/2: SNI from the URL's name, :authority from Host. */
        char command[512], out[256];
        snprintf(command, sizeof(command),
                 "curl -sk --max-time 10 --http2 --resolve %s:%d:127.0.0.1 -H 'Host: %s' "
                 "-w ' v=%%{http_version} code=%%{http_code}' https://%s:%d/",
                 sni, port, host, sni, port);
        FILE *curl = popen(command, "r");
        ck_assert_ptr_nonnull(curl);
        size_t len = fread(out, 1, sizeof(out) - 1, curl);
        out[len] = '\0';
        pclose(curl);
        char want[64];
        snprintf(want, sizeof(want), " v=2 code=%d", expected);
        ck_assert_msg(strstr(out, want) != NULL, "HTTP/2, SNI %s, :authority %s: \"%s\"", sni, host,
                      out);
        if (expected == 200)
            ck_assert_msg(
                strncmp(out, misdirected_cases[i].body, strlen(misdirected_cases[i].body)) == 0 &&
                    out[strlen(misdirected_cases[i].body)] == ' ',
                "HTTP/2, SNI %s, :authority %s: \"%s\"", sni, host, out);
    }
    test_daemon_stop(&d);
}
END_TEST

/* DIR/sni/ (its path in `dir`), for a tls_certificate named by
 * $ssl_server_name: links[i][0] in it links to the test certificate or
 * key links[i][1]. */
static void sni_dir(char *dir, size_t size, const char *const links[][2], int count)
{
    test_daemon_file(dir, size, "sni");
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    for (int i = 0; i < count; i++) {
        char link[PATH_MAX + 64], target[PATH_MAX + 64];
        snprintf(link, sizeof(link), "%s/%s", dir, links[i][0]);
        snprintf(target, sizeof(target), "%s/%s", certs_dir, links[i][1]);
        ck_assert_int_eq(symlink(target, link), 0);
    }
}

/* A server whose tls_certificate names its files by the SNI name reads
 * each name's pair in the handshake that first asks for it: a.test and
 * x.b.test have files (links to the test certificates), y.b.test has none
 * and is refused, as is a name that would climb out of the directory; a
 * file replaced after it was read is not read again (the cache). */
START_TEST(tls_certificate_named_by_sni)
{
    static const char *const links[][2] = {
        {"a.test.pem", "a.pem"},   {"a.test.key", "a.key"},   {"x.b.test.pem", "b.pem"},
        {"x.b.test.key", "b.key"}, {"c.b.test.pem", "a.pem"}, {"c.b.test.key", "b.key"},
    };
    char dir[PATH_MAX], link[PATH_MAX + 64], target[PATH_MAX + 64];
    sni_dir(dir, sizeof(dir), links, COUNT(links));
    int port = free_port();
    struct test_daemon d;
    start(&d, "corral",
          "workers 2;\n" ADMIN "server {\n"
          "    listen 127.0.0.1:%d tls;\n"
          "    server_name a.test *.b.test;\n"
          "    tls_certificate sni/$ssl_server_name.pem;\n"
          "    tls_certificate_key \"sni/${tls_server_name}.key\";\n"
          "    location / { return 200 \"sni\"; }\n"
          "}\n"
          "server {\n"
          "    listen 127.0.0.1:%d tls default_server;\n"
          "    server_name default.test;\n" DEFAULT_CERT
          "    location / { return 200 \"default\"; }\n"
          "}\n",
          port, port);
    static const struct {
        const char *sni, *certificate; /* NULL: refused */
    } cases[] = {
        {"a.test", "a.test"},
        {"x.b.test", "*.b.test"},
        {"A.Test", "a.test"},
        {"y.b.test", NULL},
        {"c.b.test", NULL},
        {"..b.test", NULL},
        {"default.test", "default.test"},
        {"x.b.test", "*.b.test"},
    };
    for (int i = 0; i < COUNT(cases); i++) {
        struct client c = {.sni = cases[i].sni};
        struct tls t;
        bool open = tls_open(&t, port, &c);
        if (cases[i].certificate == NULL) {
            ck_assert_msg(!open, "SNI %s: served", cases[i].sni);
            tls_close(&t);
            continue;
        }
        ck_assert_msg(open, "SNI %s: %s", cases[i].sni, t.error);
        char name[256];
        peer_name(&t, name, sizeof(name));
        ck_assert_msg(strcmp(name, cases[i].certificate) == 0, "SNI %s: certificate for %s",
                      cases[i].sni, name);
        tls_close(&t);
    }
    /* Cached: x.b.test's files now name a.test's certificate. */
    snprintf(link, sizeof(link), "%s/x.b.test.pem", dir);
    ck_assert_int_eq(unlink(link), 0);
    snprintf(target, sizeof(target), "%s/a.pem", certs_dir);
    ck_assert_int_eq(symlink(target, link), 0);
    for (int i = 0; i < 4; i++) {
        struct client c = {.sni = "x.b.test"};
        struct tls t;
        ck_assert_msg(tls_open(&t, port, &c), "%s", t.error);
        char name[256];
        peer_name(&t, name, sizeof(name));
        ck_assert_str_eq(name, "*.b.test");
        tls_close(&t);
    }
    free(test_daemon_wait_log(&d, "tls_certificate for SNI \"y.b.test\": cannot load"));
    test_daemon_stop(&d);

    /* Another variable is refused by -t. */
    char path[PATH_MAX], args[PATH_MAX + 16], out[4096];
    test_daemon_file(path, sizeof(path), "check.conf");
    test_write_file(path, "server {\n    listen 127.0.0.1:0 tls;\n"
                          "    tls_certificate sni/$host.pem;\n"
                          "    tls_certificate_key sni/$host.key;\n"
                          "    location / { return 204; }\n}\n");
    snprintf(args, sizeof(args), "-t -c '%s'", path);
    int rc = test_daemon_run(args, out, sizeof(out));
    ck_assert_msg(rc != 0 && strstr(out, "check.conf:3:21: ") != NULL &&
                      strstr(out, "the only variables a certificate's file name takes are "
                                  "$tls_server_name and $ssl_server_name") != NULL,
                  "exit %d:\n%s", rc, out);
}
END_TEST

START_TEST(rsa_and_ecdsa_certificates_side_by_side)
{
    struct test_daemon d;
    start_tls_server(&d, "corral", 1,
                     "    tls_certificate certs/rsa.pem;\n"
                     "    tls_certificate_key certs/rsa.key;\n",
                     "dual");
    static const struct {
        int version;
        const char *ciphers, *sigalgs;
        int key_type;
    } cases[] = {
        {TLS1_2_VERSION, "ECDHE-RSA-AES128-GCM-SHA256", NULL, EVP_PKEY_RSA},
        {TLS1_2_VERSION, "ECDHE-ECDSA-AES128-GCM-SHA256", NULL, EVP_PKEY_EC},
        {TLS1_3_VERSION, NULL, "rsa_pss_rsae_sha256", EVP_PKEY_RSA},
        {TLS1_3_VERSION, NULL, "ecdsa_secp256r1_sha256", EVP_PKEY_EC},
    };
    for (int i = 0; i < COUNT(cases); i++) {
        struct client c = {.min_version = cases[i].version,
                           .max_version = cases[i].version,
                           .sni = "default.test",
                           .ciphers = cases[i].ciphers,
                           .sigalgs = cases[i].sigalgs};
        const char *offer = cases[i].ciphers != NULL ? cases[i].ciphers : cases[i].sigalgs;
        struct tls t;
        ck_assert_msg(tls_open(&t, d.port, &c), "%s %s: %s", version_name(cases[i].version), offer,
                      t.error);
        int type = peer_key_type(&t);
        ck_assert_msg(type == cases[i].key_type, "%s %s: a %s certificate",
                      version_name(cases[i].version), offer,
                      type == EVP_PKEY_RSA  ? "RSA"
                      : type == EVP_PKEY_EC ? "ECDSA"
                                            : "other");
        char body[64];
        ck_assert_msg(tls_get(&t, "default.test", "/", body, sizeof(body)) == 200, "%s", t.error);
        ck_assert_str_eq(body, "dual");
        tls_close(&t);
    }
    test_daemon_stop(&d);
}
END_TEST

/* The certificate file's chain goes out with the leaf: a client that
 * trusts only the root verifies a leaf signed by an intermediate. */
START_TEST(the_chain_file_is_sent)
{
    struct test_daemon d;
    start(&d, "corral",
          "workers 1;\n" ADMIN "server {\n    listen 127.0.0.1:0 tls;\n"
          "    tls_certificate certs/chained.pem;\n    tls_certificate_key certs/chained.key;\n"
          "    location / { return 200 \"chained\"; }\n}\n");
    struct client c = {.sni = "chained.test", .trust = "ca"};
    struct tls t;
    ck_assert_msg(tls_open(&t, d.port, &c), "%s", t.error);
    ck_assert_int_eq(SSL_get_verify_result(t.ssl), X509_V_OK);
    STACK_OF(X509) *chain = SSL_get_peer_cert_chain(t.ssl);
    ck_assert_int_eq(sk_X509_num(chain), 2);
    tls_close(&t);
    test_daemon_stop(&d);
}
END_TEST

/* TLS 1.2 renegotiation is refused: the server answers a client's request
 * for one with a no_renegotiation warning or ends the connection. */
START_TEST(renegotiation_is_refused)
{
    struct test_daemon d;
    start_tls_server(&d, "corral", 1, "", "once");
    struct client c = {
        .min_version = TLS1_2_VERSION, .max_version = TLS1_2_VERSION, .sni = "default.test"};
    struct tls t;
    ck_assert_msg(tls_open(&t, d.port, &c), "%s", t.error);
    ck_assert_int_eq(SSL_renegotiate(t.ssl), 1);
    int rc = SSL_do_handshake(t.ssl);
    ck_assert_msg(rc != 1, "the server renegotiated");
    tls_close(&t);
    test_daemon_stop(&d);
}
END_TEST

/* tls_ciphers limits what a TLS 1.2 client may use. */
START_TEST(tls_ciphers_are_enforced)
{
    struct test_daemon d;
    start_tls_server(&d, "corral", 1, "    tls_ciphers ECDHE-ECDSA-AES128-GCM-SHA256;\n", "only");
    struct client allowed = {.max_version = TLS1_2_VERSION,
                             .sni = "default.test",
                             .ciphers = "ECDHE-ECDSA-AES128-GCM-SHA256"};
    struct client other = {.max_version = TLS1_2_VERSION,
                           .sni = "default.test",
                           .ciphers = "ECDHE-ECDSA-AES256-GCM-SHA384"};
    struct tls t;
    ck_assert_msg(tls_open(&t, d.port, &allowed), "%s", t.error);
    tls_close(&t);
    ck_assert_msg(!tls_open(&t, d.port, &other), "a cipher outside tls_ciphers was accepted");
    tls_close(&t);
    test_daemon_stop(&d);
}
END_TEST

START_TEST(alpn_settles_on_http_1_1)
{
    struct test_daemon d;
    start_tls_server(&d, "corral", 1, "", "alpn");
    static const char *const offers[] = {"h2,http/1.1", "http/1.1"};
    for (int i = 0; i < COUNT(offers); i++) {
        struct client c = {.sni = "default.test", .alpn = offers[i]};
        struct tls t;
        ck_assert_msg(tls_open(&t, d.port, &c), "ALPN %s: %s", offers[i], t.error);
        const unsigned char *selected;
        unsigned len;
        SSL_get0_alpn_selected(t.ssl, &selected, &len);
        ck_assert_msg(len == 8 && memcmp(selected, "http/1.1", 8) == 0,
                      "offered %s, the server chose \"%.*s\"", offers[i], (int)len, selected);
        char body[64];
        ck_assert_msg(tls_get(&t, "default.test", "/", body, sizeof(body)) == 200, "%s", t.error);
        ck_assert_str_eq(body, "alpn");
        tls_close(&t);
    }
    test_daemon_stop(&d);
}
END_TEST

/* ============================================================ resumption */

#define IN_A_ROW 5

/* IN_A_ROW connections pinned to `version`, each a whole request and
 * response (in TLS 1.3 the session tickets come after the handshake) and
 * each after the first offering the session of the one before: how many
 * were resumed. */
static int resumed_in_a_row(int port, int version)
{
    SSL_SESSION *session = NULL;
    int resumed = 0;
    for (int i = 0; i < IN_A_ROW; i++) {
        struct client c = {.min_version = version,
                           .max_version = version,
                           .sni = "default.test",
                           .session = session};
        struct tls t;
        ck_assert_msg(tls_open(&t, port, &c), "%s, connection %d: %s", version_name(version), i,
                      t.error);
        char body[64];
        ck_assert_msg(tls_get(&t, "default.test", "/", body, sizeof(body)) == 200,
                      "%s, connection %d: %s", version_name(version), i, t.error);
        resumed += SSL_session_reused(t.ssl);
        if (session != NULL)
            SSL_SESSION_free(session);
        session = SSL_get1_session(t.ssl);
        tls_close(&t);
    }
    if (session != NULL)
        SSL_SESSION_free(session);
    return resumed;
}

static const struct {
    const char *name;
    const char *settings; /* in the server block */
    bool resumes;
} resumption_cases[] = {
    {"tickets (the default)", "", true},
    {"tickets off: the session cache", "    tls_session_tickets off;\n", true},
    {"tickets off, cache off", "    tls_session_tickets off;\n    tls_session_cache off;\n", false},
};

/* On two workers: the ticket keys and the session cache must be theirs in
 * common, since a connection may land on either.  The handshake metrics
 * count every connection. */
START_TEST(sessions_resume_across_workers)
{
    struct test_daemon d;
    start_tls_server(&d, "corral", 2, resumption_cases[_i].settings, "again");
    static const int versions[] = {TLS1_2_VERSION, TLS1_3_VERSION};
    for (int v = 0; v < COUNT(versions); v++) {
        int resumed = resumed_in_a_row(d.port, versions[v]);
        int expected = resumption_cases[_i].resumes ? IN_A_ROW - 1 : 0;
        ck_assert_msg(resumed == expected, "%s, %s: %d of %d connections after the first resumed",
                      resumption_cases[_i].name, version_name(versions[v]), resumed, IN_A_ROW - 1);
    }
    long long full = resumption_cases[_i].resumes ? 2 : 2 * IN_A_ROW;
    long long resumed = 2 * IN_A_ROW - full;
    long long got = metric_becomes(&d, HANDSHAKES, "kind=\"full\"", full);
    ck_assert_msg(got == full, "%s{kind=\"full\"}: %lld, expected %lld", HANDSHAKES, got, full);
    got = metric_becomes(&d, HANDSHAKES, "kind=\"resumed\"", resumed);
    ck_assert_msg(got == resumed, "%s{kind=\"resumed\"}: %lld, expected %lld", HANDSHAKES, got,
                  resumed);
    test_daemon_stop(&d);
}
END_TEST

/* One TLS 1.2 connection offering `session` (NULL: none), with a whole
 * request: whether it resumed.  *next gets its session (free it). */
static bool resumes(int port, SSL_SESSION *session, SSL_SESSION **next)
{
    struct client c = {.min_version = TLS1_2_VERSION,
                       .max_version = TLS1_2_VERSION,
                       .sni = "default.test",
                       .session = session};
    struct tls t;
    ck_assert_msg(tls_open(&t, port, &c), "%s", t.error);
    char body[64];
    ck_assert_msg(tls_get(&t, "default.test", "/", body, sizeof(body)) == 200, "%s", t.error);
    bool reused = SSL_session_reused(t.ssl);
    if (next != NULL)
        *next = SSL_get1_session(t.ssl);
    tls_close(&t);
    return reused;
}

/* Ticket keys rotate every second here: a ticket still opens under the
 * next key, and no longer once that one has rotated too. */
START_TEST(ticket_keys_rotate)
{
    struct test_daemon d;
    start_tls_server(&d, "corral", 2,
                     "    tls_session_ticket_rotation 1s;\n    tls_session_cache off;\n",
                     "rotating");
    SSL_SESSION *first;
    ck_assert(!resumes(d.port, NULL, &first));
    usleep(1300 * 1000); /* the key that sealed `first` is now the previous one */
    ck_assert_msg(resumes(d.port, first, NULL), "a ticket from one rotation ago must resume");
    usleep(1500 * 1000); /* and now it is gone */
    ck_assert_msg(!resumes(d.port, first, NULL), "a ticket from two rotations ago must not resume");
    SSL_SESSION_free(first);
    test_daemon_stop(&d);
}
END_TEST

/* The configuration that follows a reload takes over the ticket keys: a
 * ticket from before it still resumes (the session cache is off, so only
 * the ticket can). */
START_TEST(tickets_resume_across_a_reload)
{
    static const char settings[] = "    tls_session_cache off;\n";
    struct test_daemon d;
    start_tls_server(&d, "corral", 2, settings, "before");
    SSL_SESSION *first;
    ck_assert(!resumes(d.port, NULL, &first));
    /* The same address, another answer: the new generation serves once it
     * is heard. */
    char conf[1024];
    snprintf(conf, sizeof(conf),
             "workers 2;\n" ADMIN "server {\n    listen 127.0.0.1:0 tls;\n" DEFAULT_CERT "%s"
             "    location / { return 200 \"after\"; }\n}\n",
             settings);
    test_daemon_write_config(&d, conf);
    ck_assert_int_gt(d.pid, 0);
    kill(d.pid, SIGHUP);
    struct client c = {.min_version = TLS1_2_VERSION, .sni = "default.test"};
    char body[64] = "";
    for (int i = 0; i < 100 && strcmp(body, "after") != 0; i++) {
        struct tls t;
        ck_assert_msg(tls_open(&t, d.port, &c), "%s", t.error);
        ck_assert_int_eq(tls_get(&t, "default.test", "/", body, sizeof(body)), 200);
        tls_close(&t);
        if (strcmp(body, "after") != 0)
            usleep(20 * 1000);
    }
    ck_assert_str_eq(body, "after");
    ck_assert_msg(resumes(d.port, first, NULL), "a ticket from before the reload must resume");
    SSL_SESSION_free(first);
    test_daemon_stop(&d);
}
END_TEST

/* TLS 1.3 tickets are for one use: a resumed connection brings a new one. */
START_TEST(tls_1_3_resumption_brings_a_fresh_ticket)
{
    struct test_daemon d;
    start_tls_server(&d, "corral", 1, "    tls_session_cache off;\n", "fresh");
    SSL_SESSION *session = NULL;
    for (int i = 0; i < 3; i++) {
        struct client c = {
            .min_version = TLS1_3_VERSION, .sni = "default.test", .session = session};
        struct tls t;
        ck_assert_msg(tls_open(&t, d.port, &c), "%s", t.error);
        char body[64];
        ck_assert_msg(tls_get(&t, "default.test", "/", body, sizeof(body)) == 200, "%s", t.error);
        ck_assert_int_eq(SSL_session_reused(t.ssl), i > 0);
        SSL_SESSION *next = SSL_get1_session(t.ssl);
        const unsigned char *old_ticket = NULL, *new_ticket = NULL;
        size_t old_len = 0, new_len = 0;
        if (session != NULL)
            SSL_SESSION_get0_ticket(session, &old_ticket, &old_len);
        SSL_SESSION_get0_ticket(next, &new_ticket, &new_len);
        ck_assert_uint_gt(new_len, 0);
        ck_assert_msg(old_len != new_len || memcmp(old_ticket, new_ticket, new_len) != 0,
                      "connection %d brought no new ticket", i);
        SSL_SESSION_free(session);
        session = next;
        tls_close(&t);
    }
    SSL_SESSION_free(session);
    test_daemon_stop(&d);
}
END_TEST

/* A response to "Connection: close" ends with close_notify, not a bare
 * FIN that a client must take for a possible truncation: answered by
 * corral itself, and proxied. */
START_TEST(connection_close_ends_with_close_notify)
{
    struct test_daemon back, front;
    start(&back, "back",
          "workers 1;\n" ADMIN "server {\n    listen 127.0.0.1:0;\n"
          "    location / { return 200 \"proxied\"; }\n}\n");
    start(&front, "front",
          "workers 1;\n" ADMIN "server {\n    listen 127.0.0.1:0 tls;\n" DEFAULT_CERT
          "    location /own { return 200 \"own\"; }\n"
          "    location / { proxy_pass http://127.0.0.1:%d; }\n}\n",
          back.port);
    static const char *const paths[] = {"/own", "/proxied"};
    for (int i = 0; i < COUNT(paths); i++) {
        struct client c = {.sni = "default.test"};
        struct tls t;
        ck_assert_msg(tls_open(&t, front.port, &c), "%s", t.error);
        char request[256];
        int n = snprintf(request, sizeof(request),
                         "GET %s HTTP/1.1\r\nHost: default.test\r\nConnection: close\r\n\r\n",
                         paths[i]);
        ck_assert_int_eq(SSL_write(t.ssl, request, n), n);
        char response[4096];
        int rc, reads = 0;
        while ((rc = SSL_read(t.ssl, response, sizeof(response))) > 0 && ++reads < 100)
            continue;
        ck_assert_msg(SSL_get_error(t.ssl, rc) == SSL_ERROR_ZERO_RETURN,
                      "%s: the stream ended without close_notify (SSL_get_error %d)", paths[i],
                      SSL_get_error(t.ssl, rc));
        tls_close(&t);
    }
    test_daemon_stop(&front);
    test_daemon_stop(&back);
}
END_TEST

/* Whether signal `sig` waits to be delivered to process `pid` (to one of
 * its threads, or to the process); not once the process has died. */
static bool signal_pending(pid_t pid, int sig)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    char *stat = test_read_file(path);
    const char *state = strrchr(stat, ')');
    bool dead = state == NULL || state[1] == '\0' || state[2] == 'Z' || state[2] == 'X';
    free(stat);
    if (dead)
        return false;
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    bool pending = false;
    DIR *tasks = opendir(path);
    ck_assert_ptr_nonnull(tasks);
    for (struct dirent *e; !pending && (e = readdir(tasks)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/%d/task/%.16s/status", (int)pid, e->d_name);
        FILE *f = fopen(path, "re");
        if (f == NULL)
            continue; /* the thread ended */
        while (!pending && fgets(line, sizeof(line), f) != NULL) {
            unsigned long long mask;
            if ((sscanf(line, "SigPnd: %llx", &mask) == 1 ||
                 sscanf(line, "ShdPnd: %llx", &mask) == 1) &&
                (mask >> (sig - 1) & 1))
                pending = true;
        }
        fclose(f);
    }
    closedir(tasks);
    return pending;
}

/* OpenSSL writes with write(2), so a write to a connection the client has
 * reset raises SIGPIPE: the daemon must ignore it rather than die. */
START_TEST(sigpipe_does_not_end_the_daemon)
{
    struct test_daemon d;
    start_tls_server(&d, "corral", 1, "", "alive");
    ck_assert_int_eq(kill(d.pid, SIGPIPE), 0);
    /* Delivered (or discarded, if ignored): a daemon that dies of it is
     * dying by now, and the exchange below fails. */
    test_wait_for(!signal_pending(d.pid, SIGPIPE), TEST_WAIT_MS, "SIGPIPE still pending");
    expect_body(d.port, &(struct client){.sni = "default.test"}, "default.test", "alive");
    test_daemon_stop(&d);
}
END_TEST

/* ============================================================ bad clients */

/* Plain HTTP, random bytes and silence on a tls port: each connection is
 * closed (silence after tls_handshake_timeout), counted by kind, and the
 * daemon goes on serving TLS. */
START_TEST(garbage_and_silence_are_closed_and_counted)
{
    struct test_daemon d;
    start_tls_server(&d, "corral", 2, "    tls_handshake_timeout 1s;\n", "still here");

    /* Plain HTTP gets nginx's answer, then the close. */
    int fd = test_connect(d.port);
    const char *plain = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    test_send_all(fd, plain, strlen(plain));
    char answer[1024];
    size_t len = test_recv_all(fd, answer, sizeof(answer) - 1);
    answer[len] = '\0';
    ck_assert_msg(strncmp(answer, "HTTP/1.1 400 ", 13) == 0, "%s", answer);
    const char *body = strstr(answer, "\r\n\r\n");
    ck_assert_msg(body != NULL &&
                      strcmp(body + 4, "The plain HTTP request was sent to HTTPS port\n") == 0,
                  "%s", answer);
    close(fd);

    /* Random, except that the first byte is no TLS record type: a
     * handshake record header could announce more than follows, and the
     * server would rightly wait for it (that is the silent case below). */
    unsigned char noise[1000];
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < sizeof(noise); i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        noise[i] = (unsigned char)x;
    }
    if (noise[0] >= 0x14 && noise[0] <= 0x18)
        noise[0] ^= 0x80;
    fd = test_connect(d.port);
    test_send_all(fd, noise, sizeof(noise));
    int ms = ms_until_closed(fd, 3000);
    ck_assert_msg(ms >= 0, "1000 random bytes left the connection open for 3 s");
    close(fd);

    fd = test_connect(d.port);
    ms = ms_until_closed(fd, 4000);
    ck_assert_msg(ms >= 800 && ms <= 3000,
                  "a silent connection closed after %d ms (tls_handshake_timeout 1s)", ms);
    close(fd);

    struct client c = {.sni = "default.test"};
    expect_body(d.port, &c, "default.test", "still here");

    long long got = metric_becomes(&d, ERRORS, "kind=\"protocol\"", 2);
    ck_assert_msg(got == 2, "%s{kind=\"protocol\"}: %lld after plain HTTP and random bytes", ERRORS,
                  got);
    got = metric_becomes(&d, ERRORS, "kind=\"timeout\"", 1);
    ck_assert_msg(got == 1, "%s{kind=\"timeout\"}: %lld after one silent connection", ERRORS, got);
    got = metric_becomes(&d, HANDSHAKES, "kind=\"full\"", 1);
    ck_assert_msg(got == 1, "%s{kind=\"full\"}: %lld after one TLS client", HANDSHAKES, got);
    test_daemon_stop(&d);
}
END_TEST

/* ============================================================ client certificates */

static const struct {
    const char *verify;      /* the server's tls_verify_client line */
    const char *certificate; /* the client's; NULL: none */
    bool served;
} client_cert_cases[] = {
    {"", NULL, false},
    {"", "client", true},
    {"", "other-client", false},
    {"    tls_verify_client on;\n", NULL, false},
    {"    tls_verify_client optional;\n", NULL, true},
    {"    tls_verify_client optional;\n", "client", true},
    {"    tls_verify_client optional;\n", "other-client", false},
};

START_TEST(client_certificates_are_verified)
{
    struct test_daemon d;
    const char *verify = NULL;
    static const int versions[] = {TLS1_2_VERSION, TLS1_3_VERSION};
    for (int i = 0; i < COUNT(client_cert_cases); i++) {
        if (verify == NULL || strcmp(verify, client_cert_cases[i].verify) != 0) {
            if (verify != NULL)
                test_daemon_stop(&d);
            verify = client_cert_cases[i].verify;
            char settings[256];
            snprintf(settings, sizeof(settings), "    tls_client_certificate certs/ca.pem;\n%s",
                     verify);
            start_tls_server(&d, "corral", 1, settings, "known");
        }
        const char *mode = verify[0] != '\0' ? verify + 4 : "(tls_verify_client unset)\n";
        const char *cert =
            client_cert_cases[i].certificate != NULL ? client_cert_cases[i].certificate : "no";
        for (int v = 0; v < COUNT(versions); v++) {
            struct client c = {.min_version = versions[v],
                               .max_version = versions[v],
                               .sni = "default.test",
                               .certificate = client_cert_cases[i].certificate};
            if (client_cert_cases[i].served) {
                struct tls t;
                ck_assert_msg(tls_open(&t, d.port, &c), "%s%s, %s certificate: %s", mode,
                              version_name(versions[v]), cert, t.error);
                char body[64];
                int status = tls_get(&t, "default.test", "/", body, sizeof(body));
                ck_assert_msg(status == 200 && strcmp(body, "known") == 0,
                              "%s%s, %s certificate: %d \"%s\" %s", mode, version_name(versions[v]),
                              cert, status, body, t.error);
                tls_close(&t);
            } else {
                char why[512];
                ck_assert_msg(refused(d.port, &c, why, sizeof(why)),
                              "%s%s, %s certificate: not refused: %s", mode,
                              version_name(versions[v]), cert, why);
            }
        }
    }
    test_daemon_stop(&d);
}
END_TEST

/* The client certificate's variables, under their tls_ and nginx's ssl_
 * names: what the client certificate says (CN=client, serial 6, issued by
 * the test CA for 30 days), and NONE without one. */
START_TEST(client_certificate_variables)
{
    struct test_daemon d;
    start_tls_server(&d, "corral", 1,
                     "    tls_client_certificate certs/ca.pem;\n    tls_verify_client optional;\n",
                     "$tls_client_verify|$ssl_client_s_dn|$tls_client_i_dn|$ssl_client_serial|"
                     "$tls_client_v_remain|$ssl_client_fingerprint|$tls_client_escaped_cert");
    struct client c = {.sni = "default.test", .certificate = "client"};
    struct tls t;
    ck_assert_msg(tls_open(&t, d.port, &c), "%s", t.error);
    static char body[8192];
    ck_assert_int_eq(tls_get(&t, "default.test", "/", body, sizeof(body)), 200);
    tls_close(&t);
    const char *days = strstr(body, "|CN=corral test CA|06|");
    ck_assert_msg(strncmp(body, "SUCCESS|CN=client|CN=corral test CA|06|", 39) == 0 && days != NULL,
                  "%s", body);
    days += strlen("|CN=corral test CA|06|");
    ck_assert_msg(strncmp(days, "29|", 3) == 0 || strncmp(days, "30|", 3) == 0, "%s", body);
    /* The SHA-1 of the DER, as openssl prints it, lowercase, no colons. */
    char command[PATH_MAX + 256], expect[128];
    snprintf(command, sizeof(command),
             "openssl x509 -in %s/client.pem -noout -fingerprint -sha1 | sed 's/.*=//; s/://g' | "
             "tr A-F a-f",
             certs_dir);
    FILE *p = popen(command, "r");
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_nonnull(fgets(expect, sizeof(expect), p));
    pclose(p);
    expect[strcspn(expect, "\n")] = '\0';
    ck_assert_uint_eq(strlen(expect), 40);
    ck_assert_msg(strstr(body, expect) != NULL, "no %s in %s", expect, body);
    ck_assert_msg(strstr(body, "|-----BEGIN%20CERTIFICATE-----%0A") != NULL, "%s", body);
    ck_assert_msg(strstr(body, "-----END%20CERTIFICATE-----%0A") != NULL, "%s", body);
    /* No certificate: NONE, and nothing else. */
    c.certificate = NULL;
    ck_assert_msg(tls_open(&t, d.port, &c), "%s", t.error);
    ck_assert_int_eq(tls_get(&t, "default.test", "/", body, sizeof(body)), 200);
    tls_close(&t);
    ck_assert_str_eq(body, "NONE||||||");
    test_daemon_stop(&d);
}
END_TEST

/* ============================================================ certificates that change */

/* Copies certs/FROM.pem and .key over the files at `pem` and `key`, each
 * written beside and renamed into place, as certbot and cert-manager do. */
static void replace_pair(const char *from_pem, const char *from_key, const char *pem,
                         const char *key)
{
    char command[4 * PATH_MAX + 64];
    snprintf(command, sizeof(command),
             "cp %s/%s %s.new && mv %s.new %s && cp %s/%s %s.new && mv %s.new %s", certs_dir,
             from_pem, pem, pem, pem, certs_dir, from_key, key, key, key);
    ck_assert_int_eq(system(command), 0);
}

/* The case's live.pem and live.key, into which certs/FROM's pair is
 * copied: their paths in `pem` and `key`, PATH_MAX bytes each. */
static void live_pair(const char *from_pem, const char *from_key, char *pem, char *key)
{
    test_daemon_file(pem, PATH_MAX, "live.pem");
    test_daemon_file(key, PATH_MAX, "live.key");
    replace_pair(from_pem, from_key, pem, key);
}

/* The serial of the certificate a new connection gets. */
static long served_serial(int port)
{
    struct client c = {.sni = "default.test"};
    struct tls t;
    long serial = -1;
    if (tls_open(&t, port, &c)) {
        X509 *cert = SSL_get0_peer_certificate(t.ssl);
        serial = cert != NULL ? ASN1_INTEGER_get(X509_get0_serialNumber(cert)) : -1;
    }
    tls_close(&t);
    return serial;
}

/* Polls new connections for up to 10 s until they get serial `want` (the
 * files are looked at when a connection comes, at most once a second). */
static bool serial_becomes(int port, long want)
{
    for (uint64_t until = test_now_ms() + 10000; test_now_ms() < until;) {
        if (served_serial(port) == want)
            return true;
        test_sleep_ms(20);
    }
    return false;
}

/* tls_certificate_watch on: a pair renamed into place serves new
 * handshakes within seconds, without a reload, while a connection made
 * before goes on with the old one; a pair that does not match is logged
 * and the last good one serves on. */
START_TEST(changed_certificate_files_serve_without_a_reload)
{
    char pem[PATH_MAX], key[PATH_MAX];
    live_pair("default.pem", "default.key", pem, key);
    struct test_daemon d;
    start(&d, "corral",
          "workers 2;\n" ADMIN "server {\n    listen 127.0.0.1:0 tls;\n"
          "    tls_certificate %s;\n    tls_certificate_key %s;\n"
          "    tls_certificate_watch on;\n"
          "    location / { return 200 \"ok\"; }\n}\n",
          pem, key);
    ck_assert_int_eq(served_serial(d.port), 3);
    struct client c = {.sni = "default.test"};
    struct tls before;
    ck_assert_msg(tls_open(&before, d.port, &c), "%s", before.error);
    replace_pair("rsa.pem", "rsa.key", pem, key);
    ck_assert_msg(serial_becomes(d.port, 4), "still serial %ld", served_serial(d.port));
    char body[64];
    ck_assert_int_eq(tls_get(&before, "default.test", "/", body, sizeof(body)), 200);
    ck_assert_str_eq(body, "ok");
    tls_close(&before);
    /* a.test's certificate with the RSA key: refused, logged, once the
     * next connections come. */
    replace_pair("a.pem", "rsa.key", pem, key);
    bool logged = false;
    for (uint64_t until = test_now_ms() + 10000; test_now_ms() < until && !logged;) {
        ck_assert_int_eq(served_serial(d.port), 4);
        char *text = test_read_file(d.log);
        logged = text != NULL && strstr(text, "tls_certificate_watch: key") != NULL;
        free(text);
        if (!logged)
            test_sleep_ms(20);
    }
    ck_assert_msg(logged, "the mismatched pair was not logged");
    test_daemon_stop(&d);
}
END_TEST

/* ============================================================ client certificates by SNI */

/* Two server blocks on one address, default.test (the default) and a.test,
 * each with its own client verification: SNI picks the block whose
 * verification applies, no SNI (or an unknown name) the default's. */
struct sni_verify_case {
    const char *sni;         /* NULL: none */
    const char *certificate; /* the client's; NULL: none */
    bool served;
};

#define VERIFY_ON "    tls_client_certificate certs/ca.pem;\n    tls_verify_client on;\n"
#define VERIFY_OPTIONAL                                                                            \
    "    tls_client_certificate certs/ca.pem;\n    tls_verify_client optional;\n"

static const struct sni_verify_case a_verifies[] = {
    {"a.test", NULL, false},      {"a.test", "client", true},   {"a.test", "other-client", false},
    {"default.test", NULL, true}, {"unknown.test", NULL, true}, {NULL, NULL, true},
};
static const struct sni_verify_case a_verifies_optionally[] = {
    {"a.test", NULL, true},
    {"a.test", "client", true},
    {"a.test", "other-client", false},
    {"default.test", NULL, true},
};
static const struct sni_verify_case default_verifies[] = {
    {"a.test", NULL, true},
    {"a.test", "other-client", true},
    {"default.test", NULL, false},
    {"default.test", "client", true},
    {"default.test", "other-client", false},
    {"unknown.test", NULL, false},
    {NULL, NULL, false},
    {NULL, "client", true},
};

static const struct {
    const char *name;
    const char *default_verify, *a_verify; /* lines in each block */
    const struct sni_verify_case *cases;
    int count;
} sni_verify_configs[] = {
    {"a.test verifies", "", VERIFY_ON, a_verifies, COUNT(a_verifies)},
    {"a.test verifies optionally", "", VERIFY_OPTIONAL, a_verifies_optionally,
     COUNT(a_verifies_optionally)},
    {"the default verifies, a.test does not", VERIFY_ON, "", default_verifies,
     COUNT(default_verifies)},
};

/* Appends at `conf` + `*n` (`size` bytes in all) two server blocks on
 * 127.0.0.1:`port` for SNI to pick from: default.test, the default
 * server, with the lines `default_lines`, and a.test with `a_lines`. */
static void sni_servers(char *conf, size_t size, int *n, int port, const char *default_lines,
                        const char *a_lines)
{
    *n += snprintf(conf + *n, size - (size_t)*n,
                   "server {\n"
                   "    listen 127.0.0.1:%d tls default_server;\n"
                   "    server_name default.test;\n" DEFAULT_CERT "%s"
                   "    location / { return 200 \"default\"; }\n"
                   "}\n"
                   "server {\n"
                   "    listen 127.0.0.1:%d tls;\n"
                   "    server_name a.test;\n"
                   "    tls_certificate certs/a.pem;\n"
                   "    tls_certificate_key certs/a.key;\n%s"
                   "    location / { return 200 \"a\"; }\n"
                   "}\n",
                   port, default_lines, port, a_lines);
    ck_assert_int_lt(*n, (int)size);
}

static void start_sni_verify(struct test_daemon *d, const char *default_verify,
                             const char *a_verify)
{
    int port = free_port();
    char conf[4096];
    int n = snprintf(conf, sizeof(conf), "workers 1;\n" ADMIN);
    sni_servers(conf, sizeof(conf), &n, port, default_verify, a_verify);
    start(d, "corral", "%s", conf);
    ck_assert_int_eq(d->port, port);
}

/* Every config of sni_verify_configs in one daemon (a daemon's start cost
 * more than its config's checks), config i's two blocks on an address of
 * their own, ports[i]: SNI picks between those two alone. */
static void start_sni_verify_all(struct test_daemon *d, int *ports)
{
    char conf[8192];
    int n = snprintf(conf, sizeof(conf), "workers 1;\n" ADMIN);
    for (int i = 0; i < COUNT(sni_verify_configs); i++) {
        ports[i] = free_port();
        sni_servers(conf, sizeof(conf), &n, ports[i], sni_verify_configs[i].default_verify,
                    sni_verify_configs[i].a_verify);
    }
    start(d, "corral", "%s", conf);
}

/* The CA names the server asked for a certificate from, as the client got
 * them: "corral test CA", or "" when none was asked for. */
static void requested_ca(struct tls *t, char *name, size_t size)
{
    STACK_OF(X509_NAME) *names = SSL_get_client_CA_list(t->ssl);
    name[0] = '\0';
    if (names != NULL && sk_X509_NAME_num(names) > 0)
        X509_NAME_get_text_by_NID(sk_X509_NAME_value(names, 0), NID_commonName, name, (int)size);
}

START_TEST(sni_picks_the_server_blocks_client_verification)
{
    struct test_daemon d;
    int ports[COUNT(sni_verify_configs)];
    start_sni_verify_all(&d, ports);
    static const int versions[] = {TLS1_2_VERSION, TLS1_3_VERSION};
    for (int config_i = 0; config_i < COUNT(sni_verify_configs); config_i++) {
        const char *config = sni_verify_configs[config_i].name;
        int port = ports[config_i];
        for (int i = 0; i < sni_verify_configs[config_i].count; i++) {
            const struct sni_verify_case *k = &sni_verify_configs[config_i].cases[i];
            const char *host = k->sni != NULL ? k->sni : "default.test";
            bool to_a = strcmp(host, "a.test") == 0;
            const char *verify = to_a ? sni_verify_configs[config_i].a_verify
                                      : sni_verify_configs[config_i].default_verify;
            for (int v = 0; v < COUNT(versions); v++) {
                struct client c = {.min_version = versions[v],
                                   .max_version = versions[v],
                                   .sni = k->sni,
                                   .certificate = k->certificate};
                char what[256];
                snprintf(what, sizeof(what), "%s, %s, SNI %s, %s certificate", config,
                         version_name(versions[v]), k->sni != NULL ? k->sni : "(none)",
                         k->certificate != NULL ? k->certificate : "no");
                if (!k->served) {
                    char why[512];
                    ck_assert_msg(refused(port, &c, why, sizeof(why)), "%s: not refused: %s", what,
                                  why);
                    continue;
                }
                struct tls t;
                ck_assert_msg(tls_open(&t, port, &c), "%s: %s", what, t.error);
                char got[64];
                int status = tls_get(&t, host, "/", got, sizeof(got));
                ck_assert_msg(status == 200 && strcmp(got, to_a ? "a" : "default") == 0,
                              "%s: %d \"%s\" %s", what, status, got, t.error);
                /* The CA list sent is the picked block's too. */
                char ca[128];
                requested_ca(&t, ca, sizeof(ca));
                ck_assert_msg(strcmp(ca, verify[0] != '\0' ? "corral test CA" : "") == 0,
                              "%s: asked for a certificate from \"%s\"", what, ca);
                tls_close(&t);
            }
        }
    }
    test_daemon_stop(&d);
}
END_TEST

/* tls_protocols, tls_ciphers and tls_ciphersuites are the block's that SNI
 * picks, not the default server's: the default takes TLS 1.3 only, a.test
 * both versions with one TLS 1.2 cipher, *.b.test TLS 1.2 only. */
START_TEST(sni_picks_the_server_blocks_protocols_and_ciphers)
{
    struct test_daemon d;
    int port = free_port();
    char conf[4096];
    int n = snprintf(conf, sizeof(conf), "workers 1;\n" ADMIN);
    sni_servers(conf, sizeof(conf), &n, port,
                "    tls_protocols TLSv1.3;\n"
                "    tls_ciphersuites TLS_CHACHA20_POLY1305_SHA256;\n",
                "    tls_ciphers ECDHE-ECDSA-AES128-GCM-SHA256;\n");
    start(&d, "corral",
          "%s"
          "server {\n"
          "    listen 127.0.0.1:%d tls;\n"
          "    server_name *.b.test;\n"
          "    tls_certificate certs/b.pem;\n"
          "    tls_certificate_key certs/b.key;\n"
          "    tls_protocols TLSv1.2;\n"
          "    location / { return 200 \"b\"; }\n"
          "}\n",
          conf, port);
    static const struct {
        const char *sni;
        int version;
        const char *ciphers;
        const char *served; /* NULL: refused */
        const char *cipher; /* the one agreed on; NULL: any */
    } cases[] = {
        {"default.test", TLS1_2_VERSION, NULL, NULL, NULL},
        {"default.test", TLS1_3_VERSION, NULL, "default", "TLS_CHACHA20_POLY1305_SHA256"},
        {NULL, TLS1_2_VERSION, NULL, NULL, NULL},
        {"a.test", TLS1_2_VERSION, "ECDHE-ECDSA-AES128-GCM-SHA256", "a", NULL},
        {"a.test", TLS1_2_VERSION, "ECDHE-ECDSA-AES256-GCM-SHA384", NULL, NULL},
        {"a.test", TLS1_3_VERSION, NULL, "a", "TLS_AES_256_GCM_SHA384"},
        {"x.b.test", TLS1_2_VERSION, NULL, "b", NULL},
        {"x.b.test", TLS1_3_VERSION, NULL, NULL, NULL},
    };
    for (int i = 0; i < COUNT(cases); i++) {
        struct client c = {.min_version = cases[i].version,
                           .max_version = cases[i].version,
                           .sni = cases[i].sni,
                           .ciphers = cases[i].ciphers};
        char what[256];
        snprintf(what, sizeof(what), "SNI %s, %s, ciphers %s",
                 cases[i].sni != NULL ? cases[i].sni : "(none)", version_name(cases[i].version),
                 cases[i].ciphers != NULL ? cases[i].ciphers : "(default)");
        if (cases[i].served == NULL) {
            char why[512];
            ck_assert_msg(refused(d.port, &c, why, sizeof(why)), "%s: not refused: %s", what, why);
            continue;
        }
        struct tls t;
        ck_assert_msg(tls_open(&t, d.port, &c), "%s: %s", what, t.error);
        const char *cipher = SSL_get_cipher_name(t.ssl);
        ck_assert_msg(cases[i].cipher == NULL || strcmp(cipher, cases[i].cipher) == 0,
                      "%s: cipher %s", what, cipher);
        char got[64];
        int status = tls_get(&t, cases[i].sni, "/", got, sizeof(got));
        ck_assert_msg(status == 200 && strcmp(got, cases[i].served) == 0, "%s: %d \"%s\" %s", what,
                      status, got, t.error);
        tls_close(&t);
    }
    test_daemon_stop(&d);
}
END_TEST

/* A session from a block that asks for no client certificate does not let
 * a client into one that requires one (a resumption asks for none), in TLS
 * 1.2 and 1.3; one from the verifying block itself still resumes there. */
START_TEST(a_session_does_not_skip_another_blocks_verification)
{
    struct test_daemon d;
    start_sni_verify(&d, "", VERIFY_ON);
    static const int versions[] = {TLS1_2_VERSION, TLS1_3_VERSION};
    for (int v = 0; v < COUNT(versions); v++) {
        const char *version = version_name(versions[v]);
        SSL_SESSION *plain = NULL, *verified = NULL;
        struct {
            const char *sni, *certificate;
            SSL_SESSION **session;
        } sources[] = {{"default.test", NULL, &plain}, {"a.test", "client", &verified}};
        for (int s = 0; s < COUNT(sources); s++) {
            struct client c = {.min_version = versions[v],
                               .max_version = versions[v],
                               .sni = sources[s].sni,
                               .certificate = sources[s].certificate};
            struct tls t;
            ck_assert_msg(tls_open(&t, d.port, &c), "%s, SNI %s: %s", version, c.sni, t.error);
            char body[64];
            /* A whole request: TLS 1.3 tickets come after the handshake. */
            ck_assert_msg(tls_get(&t, c.sni, "/", body, sizeof(body)) == 200, "%s, SNI %s: %s",
                          version, c.sni, t.error);
            *sources[s].session = SSL_get1_session(t.ssl);
            tls_close(&t);
        }
        struct client thief = {.min_version = versions[v],
                               .max_version = versions[v],
                               .sni = "a.test",
                               .session = plain};
        char why[512];
        ck_assert_msg(refused(d.port, &thief, why, sizeof(why)),
                      "%s, SNI a.test with default.test's session: not refused: %s", version, why);
        struct client again = {.min_version = versions[v],
                               .max_version = versions[v],
                               .sni = "a.test",
                               .certificate = "client",
                               .session = verified};
        struct tls t;
        ck_assert_msg(tls_open(&t, d.port, &again), "%s, resuming a.test: %s", version, t.error);
        char body[64];
        ck_assert_msg(tls_get(&t, "a.test", "/", body, sizeof(body)) == 200, "%s: %s", version,
                      t.error);
        ck_assert_msg(SSL_session_reused(t.ssl), "%s: a.test's own session did not resume",
                      version);
        tls_close(&t);
        SSL_SESSION_free(plain);
        SSL_SESSION_free(verified);
    }
    test_daemon_stop(&d);
}
END_TEST

/* ============================================================ the admin listener */

#define ADMIN_TLS(listen, verify)                                                                  \
    "admin {\n    listen " listen " tls;\n" DEFAULT_CERT                                           \
    "    tls_client_certificate certs/ca.pem;\n" verify "}\n"
#define PLAIN_SERVER "server {\n    listen 127.0.0.3:0;\n    location / { return 200 \"ok\"; }\n}\n"

/* An admin listener on TLS with client certificates: one from the CA gets
 * in; none, or one from another CA, does not get past the handshake. */
START_TEST(the_admin_listener_verifies_client_certificates)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    test_daemon_write_config(&d, "workers 1;\n" ADMIN_TLS("127.0.0.1:0", "") PLAIN_SERVER);
    test_daemon_start(&d);
    static const int versions[] = {TLS1_2_VERSION, TLS1_3_VERSION};
    for (int v = 0; v < COUNT(versions); v++) {
        struct client known = {.min_version = versions[v],
                               .max_version = versions[v],
                               .sni = "default.test",
                               .certificate = "client",
                               .trust = "ca"};
        struct tls t;
        ck_assert_msg(tls_open(&t, d.admin_port, &known), "%s: %s", version_name(versions[v]),
                      t.error);
        char body[8192];
        ck_assert_int_eq(tls_get(&t, "admin", "/status", body, sizeof(body)), 200);
        ck_assert_msg(strstr(body, "\"pid\"") != NULL, "%s", body);
        tls_close(&t);
        char why[512];
        struct client none = {
            .min_version = versions[v], .max_version = versions[v], .sni = "default.test"};
        ck_assert_msg(refused(d.admin_port, &none, why, sizeof(why)), "%s, no certificate: %s",
                      version_name(versions[v]), why);
        struct client stranger = none;
        stranger.certificate = "other-client";
        ck_assert_msg(refused(d.admin_port, &stranger, why, sizeof(why)),
                      "%s, a certificate from another CA: %s", version_name(versions[v]), why);
    }
    test_daemon_stop(&d);
}
END_TEST

/* A TLS admin listener on every address counts as guarded only when it
 * requires a client certificate. */
START_TEST(a_public_admin_listener_needs_verification_not_to_be_warned)
{
    static const struct {
        const char *conf;
        bool warned;
    } cases[] = {
        {ADMIN_TLS("*:9443", ""), false},
        {ADMIN_TLS("*:9443", "    tls_verify_client on;\n"), false},
        {ADMIN_TLS("*:9443", "    tls_verify_client optional;\n"), true},
        {ADMIN_TLS("*:9443", "    tls_verify_client off;\n"), true},
    };
    for (int i = 0; i < COUNT(cases); i++) {
        char path[PATH_MAX], args[PATH_MAX + 16], out[4096];
        test_daemon_file(path, sizeof(path), "check.conf");
        test_write_file(path, cases[i].conf);
        snprintf(args, sizeof(args), "-t -c '%s'", path);
        ck_assert_msg(test_daemon_run(args, out, sizeof(out)) == 0, "%s: %s", cases[i].conf, out);
        bool warned = strstr(out, "admin listen \"*:9443\" is not a loopback address") != NULL;
        ck_assert_msg(warned == cases[i].warned, "%s: %s", cases[i].conf, out);
    }
}
END_TEST

/* ============================================================ OCSP stapling */

/* The status in the OCSP response the server stapled for a client of
 * `sni`: V_OCSP_CERTSTATUS_*, or -1 for none. */
static int stapled_status(int port, const char *sni)
{
    struct client c = {.sni = sni, .status = true};
    struct tls t;
    ck_assert_msg(tls_open(&t, port, &c), "SNI %s: %s", sni, t.error);
    const unsigned char *der;
    long len = SSL_get_tlsext_status_ocsp_resp(t.ssl, &der);
    int status = -1;
    OCSP_RESPONSE *resp = len > 0 ? d2i_OCSP_RESPONSE(NULL, &der, len) : NULL;
    OCSP_BASICRESP *basic = resp != NULL ? OCSP_response_get1_basic(resp) : NULL;
    OCSP_SINGLERESP *single = basic != NULL ? OCSP_resp_get0(basic, 0) : NULL;
    if (single != NULL)
        status = OCSP_single_get0_status(single, NULL, NULL, NULL, NULL);
    ck_assert_msg(len <= 0 || single != NULL, "SNI %s: a staple that is not an OCSP response", sni);
    OCSP_BASICRESP_free(basic);
    OCSP_RESPONSE_free(resp);
    tls_close(&t);
    return status;
}

static int stapled_status_becomes(int port, const char *sni, int want)
{
    int status = stapled_status(port, sni);
    for (int i = 0; i < 250 && status != want; i++) {
        usleep(20 * 1000);
        status = stapled_status(port, sni);
    }
    return status;
}

/* Whether the kernel's table `path` has a socket listening on `port`. */
static bool port_listens(const char *path, int port)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    char line[512];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f) != NULL) {
        /* sl local_address rem_address st: LISTEN is 0A */
        char local[128], remote[128], state[8];
        const char *colon;
        if (sscanf(line, "%*s %127s %127s %7s", local, remote, state) == 3 &&
            (colon = strrchr(local, ':')) != NULL)
            found = strtol(colon + 1, NULL, 16) == port && strcmp(state, "0A") == 0;
    }
    fclose(f);
    return found;
}

/* `openssl ocsp` answering for the test CA on `port` from DIR/index.txt,
 * its answers signed by `signer` (the name of a certificate and key in
 * the fixtures). */
static pid_t ocsp_responder_start_signed(int port, const char *index, const char *signer)
{
    char path[PATH_MAX], ca[PATH_MAX + 16], key[PATH_MAX + 16], portbuf[16];
    test_daemon_file(path, sizeof(path), "index.txt");
    test_write_file(path, index);
    char rsigner[PATH_MAX + 16];
    snprintf(ca, sizeof(ca), "%s/ca.pem", certs_dir);
    snprintf(rsigner, sizeof(rsigner), "%s/%s.pem", certs_dir, signer);
    snprintf(key, sizeof(key), "%s/%s.key", certs_dir, signer);
    snprintf(portbuf, sizeof(portbuf), "%d", port);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        dup2(null, 2);
        execlp("openssl", "openssl", "ocsp", "-index", path, "-CA", ca, "-rsigner", rsigner,
               "-rkey", key, "-port", portbuf, "-ndays", "1", (char *)NULL);
        _exit(127);
    }
    /* Not by connecting: openssl ocsp serves one connection at a time and
     * waits on one that sends nothing. */
    bool listening = false;
    for (int i = 0; i < 250 && !listening; i++) {
        listening = port_listens("/proc/net/tcp", port) || port_listens("/proc/net/tcp6", port);
        if (!listening)
            usleep(20 * 1000);
    }
    ck_assert_msg(listening, "openssl ocsp does not listen on %d", port);
    return pid;
}

static pid_t ocsp_responder_start(int port, const char *index)
{
    return ocsp_responder_start_signed(port, index, "ca");
}

static void ocsp_responder_stop(pid_t pid)
{
    kill(pid, SIGTERM);
    ck_assert_int_ge(test_wait_exit(pid, 5000), 0);
}

/* Subjects are unique in an index: serial 12's is told apart. */
#define OCSP_INDEX                                                                                 \
    "V\t301231235959Z\t\t0A\tunknown\t/CN=ocsp.test\n"                                             \
    "R\t301231235959Z\t250101000000Z\t0B\tunknown\t/CN=revoked.test\n"                             \
    "V\t301231235959Z\t\t0C\tunknown\t/CN=ocsp.test/OU=12\n"

/* ocsp.test gets its good response stapled (fetched from the responder of
 * tls_stapling_responder, verified), revoked.test none (the responder
 * says revoked), unreachable.test none (its certificate's own URL does
 * not answer); a client that does not ask gets none; and after a reload
 * with the responder gone the response fetched before is still stapled. */
static const char stapling_conf[] = "workers 2;\n" ADMIN "tls_stapling on;\n"
                                    "tls_stapling_verify on;\n"
                                    "tls_trusted_certificate certs/ca.pem;\n"
                                    "server {\n"
                                    "    listen 127.0.0.1:%d tls default_server;\n"
                                    "    server_name ocsp.test;\n"
                                    "    tls_certificate certs/ocsp.pem;\n"
                                    "    tls_certificate_key certs/ocsp.key;\n"
                                    "    tls_stapling_responder http://127.0.0.1:%d/;\n"
                                    "    location / { return 200 \"ocsp\"; }\n"
                                    "}\n"
                                    "server {\n"
                                    "    listen 127.0.0.1:%d tls;\n"
                                    "    server_name revoked.test;\n"
                                    "    tls_certificate certs/revoked.pem;\n"
                                    "    tls_certificate_key certs/revoked.key;\n"
                                    "    ssl_stapling_responder http://127.0.0.1:%d/;\n"
                                    "    location / { return 200 \"revoked\"; }\n"
                                    "}\n"
                                    "server {\n"
                                    "    listen 127.0.0.1:%d tls;\n"
                                    "    server_name unreachable.test;\n"
                                    "    tls_certificate certs/ocsp.pem;\n"
                                    "    tls_certificate_key certs/ocsp.key;\n"
                                    "    location / { return 200 \"unreachable\"; }\n"
                                    "}\n";

/* What openssl s_client -status tells of ocsp.test on `port`, into `out`:
 * its staple must say "good". */
static void openssl_status_good(int port, char *out, size_t size)
{
    char command[512];
    snprintf(command, sizeof(command),
             "openssl s_client -connect 127.0.0.1:%d -servername ocsp.test -status "
             "</dev/null 2>&1",
             port);
    test_run(command, out, size);
    ck_assert_msg(strstr(out, "Cert Status: good") != NULL, "%s", out);
}

START_TEST(ocsp_responses_are_fetched_and_stapled)
{
    int port = free_port(), responder = free_port();
    pid_t pid = ocsp_responder_start(responder, OCSP_INDEX);
    struct test_daemon d;
    start(&d, "corral", stapling_conf, port, responder, port, responder, port);
    int status = stapled_status_becomes(d.port, "ocsp.test", V_OCSP_CERTSTATUS_GOOD);
    ck_assert_msg(status == V_OCSP_CERTSTATUS_GOOD, "ocsp.test: stapled %d; log:\n%s", status,
                  test_daemon_log(&d));
    free(test_daemon_wait_log(&d, "the certificate's status is \"revoked\""));
    free(test_daemon_wait_log(&d, "OCSP responder 127.0.0.1:1 for"));
    ck_assert_int_eq(stapled_status(d.port, "revoked.test"), -1);
    ck_assert_int_eq(stapled_status(d.port, "unreachable.test"), -1);
    ck_assert_int_eq(metric_becomes(&d, OCSP_FETCHES, "result=\"ok\"", 1), 1);
    ck_assert_int_eq(metric_becomes(&d, OCSP_FETCHES, "result=\"failed\"", 2), 2);
    struct client plain = {.sni = "ocsp.test"};
    struct tls t;
    ck_assert_msg(tls_open(&t, d.port, &plain), "%s", t.error);
    const unsigned char *der;
    ck_assert_int_le(SSL_get_tlsext_status_ocsp_resp(t.ssl, &der), 0);
    /* The certificate stapled above is a must-staple one. */
    X509 *served = SSL_get1_peer_certificate(t.ssl);
    ck_assert_int_ge(X509_get_ext_by_NID(served, NID_tlsfeature, -1), 0);
    X509_free(served);
    tls_close(&t);

    /* openssl s_client -status sees it too. */
    char out[16384];
    openssl_status_good(d.port, out, sizeof(out));

    ocsp_responder_stop(pid);
    char conf[4096];
    snprintf(conf, sizeof(conf), stapling_conf, port, responder, port, responder, port);
    test_daemon_write_config(&d, conf);
    kill(d.pid, SIGHUP);
    test_daemon_wait_generation(&d, 2);
    ck_assert_int_eq(stapled_status(d.port, "ocsp.test"), V_OCSP_CERTSTATUS_GOOD);
    test_daemon_stop(&d);
}
END_TEST

/* A connection for ocsp.test: the serial of the certificate served, and
 * the serial its staple is about with the status it gives (-1: none). */
struct stapled {
    long served, about;
    int status;
};

static struct stapled stapled_serials(int port)
{
    struct client c = {.sni = "ocsp.test", .status = true};
    struct tls t;
    struct stapled got = {-1, -1, -1};
    ck_assert_msg(tls_open(&t, port, &c), "%s", t.error);
    X509 *cert = SSL_get0_peer_certificate(t.ssl);
    got.served = cert != NULL ? ASN1_INTEGER_get(X509_get0_serialNumber(cert)) : -1;
    const unsigned char *der;
    long len = SSL_get_tlsext_status_ocsp_resp(t.ssl, &der);
    OCSP_RESPONSE *resp = len > 0 ? d2i_OCSP_RESPONSE(NULL, &der, len) : NULL;
    OCSP_BASICRESP *basic = resp != NULL ? OCSP_response_get1_basic(resp) : NULL;
    OCSP_SINGLERESP *single = basic != NULL ? OCSP_resp_get0(basic, 0) : NULL;
    ASN1_INTEGER *serial = NULL;
    if (single != NULL && OCSP_id_get0_info(NULL, NULL, NULL, &serial,
                                            (OCSP_CERTID *)OCSP_SINGLERESP_get0_id(single)) == 1) {
        got.about = ASN1_INTEGER_get(serial);
        got.status = OCSP_single_get0_status(single, NULL, NULL, NULL, NULL);
    }
    ck_assert_msg(len <= 0 || single != NULL, "a staple that is not an OCSP response");
    OCSP_BASICRESP_free(basic);
    OCSP_RESPONSE_free(resp);
    tls_close(&t);
    return got;
}

/* tls_certificate_watch with tls_stapling: a certificate renamed into
 * place (serial 12 for 10) gets its own response fetched and stapled
 * without a reload, and is never sent with the one of the certificate
 * it replaced. */
START_TEST(a_watched_certificate_is_stapled_without_a_reload)
{
    char pem[PATH_MAX], key[PATH_MAX];
    live_pair("ocsp.pem", "ocsp.key", pem, key);
    int port = free_port(), responder = free_port();
    pid_t pid = ocsp_responder_start(responder, OCSP_INDEX);
    struct test_daemon d;
    start(&d, "corral",
          "workers 2;\n" ADMIN "tls_stapling on;\n"
          "tls_stapling_verify on;\n"
          "tls_trusted_certificate certs/ca.pem;\n"
          "server {\n"
          "    listen 127.0.0.1:%d tls;\n"
          "    server_name ocsp.test;\n"
          "    tls_certificate %s;\n"
          "    tls_certificate_key %s;\n"
          "    tls_certificate_watch on;\n"
          "    tls_stapling_responder http://127.0.0.1:%d/;\n"
          "    location / { return 200 \"ocsp\"; }\n"
          "}\n",
          port, pem, key, responder);
    struct stapled got = stapled_serials(d.port);
    for (uint64_t until = test_now_ms() + 10000; test_now_ms() < until && got.about != 10;) {
        test_sleep_ms(20);
        got = stapled_serials(d.port);
    }
    ck_assert_msg(got.served == 10 && got.about == 10 && got.status == V_OCSP_CERTSTATUS_GOOD,
                  "served %ld, stapled %ld (%d); log:\n%s", got.served, got.about, got.status,
                  test_daemon_log(&d));
    replace_pair("ocsp2.pem", "ocsp2.key", pem, key);
    for (uint64_t until = test_now_ms() + 10000; test_now_ms() < until && got.about != 12;) {
        test_sleep_ms(20);
        got = stapled_serials(d.port);
        ck_assert_msg(got.about == -1 || got.about == got.served,
                      "serial %ld went out with the response for %ld", got.served, got.about);
    }
    ck_assert_msg(got.served == 12 && got.about == 12 && got.status == V_OCSP_CERTSTATUS_GOOD,
                  "served %ld, stapled %ld (%d); log:\n%s", got.served, got.about, got.status,
                  test_daemon_log(&d));
    ck_assert_int_ge(metric_becomes(&d, OCSP_FETCHES, "result=\"ok\"", 2), 2);

    /* openssl s_client -status sees it too. */
    char out[16384];
    openssl_status_good(d.port, out, sizeof(out));
    ck_assert_msg(strstr(out, "Serial Number: 0C") != NULL, "%s", out);
    test_daemon_stop(&d);
    ocsp_responder_stop(pid);
}
END_TEST

/* A must-staple certificate (TLS Feature status_request) is stapled
 * although tls_stapling is off, and says so in the log; a certificate
 * that is not must-staple, beside it, is not.  Its file rewritten with
 * the same certificate, the watch loads it again and the first
 * handshakes after still carry the response held, the responder gone. */
START_TEST(must_staple_certificates_are_stapled_without_tls_stapling)
{
    char pem[PATH_MAX], key[PATH_MAX];
    test_daemon_file(pem, sizeof(pem), "must.pem");
    test_daemon_file(key, sizeof(key), "must.key");
    replace_pair("ocsp.pem", "ocsp.key", pem, key);
    int port = free_port(), responder = free_port();
    pid_t pid = ocsp_responder_start(responder, OCSP_INDEX);
    struct test_daemon d;
    start(&d, "corral",
          "workers 2;\n" ADMIN "tls_stapling_verify on;\n"
          "tls_trusted_certificate certs/ca.pem;\n"
          "server {\n"
          "    listen 127.0.0.1:%d tls default_server;\n"
          "    server_name ocsp.test;\n"
          "    tls_certificate %s;\n"
          "    tls_certificate_key %s;\n"
          "    tls_certificate_watch on;\n"
          "    tls_stapling_responder http://127.0.0.1:%d/;\n"
          "    location / { return 200 \"ocsp\"; }\n"
          "}\n"
          "server {\n"
          "    listen 127.0.0.1:%d tls;\n"
          "    server_name a.test;\n"
          "    tls_certificate certs/a.pem;\n"
          "    tls_certificate_key certs/a.key;\n"
          "    tls_stapling_responder http://127.0.0.1:%d/;\n"
          "    location / { return 200 \"a\"; }\n"
          "}\n",
          port, pem, key, responder, port, responder);
    int status = stapled_status_becomes(d.port, "ocsp.test", V_OCSP_CERTSTATUS_GOOD);
    ck_assert_msg(status == V_OCSP_CERTSTATUS_GOOD, "ocsp.test: stapled %d; log:\n%s", status,
                  test_daemon_log(&d));
    free(test_daemon_wait_log(&d, "is a must-staple certificate"));
    ck_assert_int_eq(stapled_status(d.port, "a.test"), -1);
    ck_assert_int_eq(metric_becomes(&d, OCSP_FETCHES, "result=\"ok\"", 1), 1);

    char out[16384];
    openssl_status_good(d.port, out, sizeof(out));

    ocsp_responder_stop(pid);
    test_sleep_ms(20); /* a new modification time for the watch */
    replace_pair("ocsp.pem", "ocsp.key", pem, key);
    free(test_daemon_wait_log(&d, "tls_certificate_watch: \""));
    for (uint64_t until = test_now_ms() + 1500; test_now_ms() < until; test_sleep_ms(20)) {
        status = stapled_status(d.port, "ocsp.test");
        ck_assert_msg(status == V_OCSP_CERTSTATUS_GOOD, "stapled %d after the reload; log:\n%s",
                      status, test_daemon_log(&d));
    }
    test_daemon_stop(&d);
}
END_TEST

/* A response held without tls_stapling_verify is checked again when a
 * reload turns it on: one signed by a CA not trusted is not kept. */
static const char verify_reload_conf[] = "workers 1;\n" ADMIN "tls_stapling on;\n"
                                         "tls_stapling_verify %s;\n"
                                         "tls_trusted_certificate certs/ca.pem;\n"
                                         "server {\n"
                                         "    listen 127.0.0.1:%d tls;\n"
                                         "    server_name ocsp.test;\n"
                                         "    tls_certificate certs/ocsp.pem;\n"
                                         "    tls_certificate_key certs/ocsp.key;\n"
                                         "    tls_stapling_responder http://127.0.0.1:%d/;\n"
                                         "    location / { return 200 \"ocsp\"; }\n"
                                         "}\n";

START_TEST(a_reload_that_verifies_drops_a_response_that_does_not)
{
    int port = free_port(), responder = free_port();
    pid_t pid = ocsp_responder_start_signed(responder, OCSP_INDEX, "other-ca");
    struct test_daemon d;
    start(&d, "corral", verify_reload_conf, "off", port, responder);
    int status = stapled_status_becomes(d.port, "ocsp.test", V_OCSP_CERTSTATUS_GOOD);
    ck_assert_msg(status == V_OCSP_CERTSTATUS_GOOD, "stapled %d; log:\n%s", status,
                  test_daemon_log(&d));
    ocsp_responder_stop(pid);
    char conf[4096];
    snprintf(conf, sizeof(conf), verify_reload_conf, "on", port, responder);
    test_daemon_write_config(&d, conf);
    kill(d.pid, SIGHUP);
    test_daemon_wait_generation(&d, 2);
    free(test_daemon_wait_log(&d, "not kept"));
    ck_assert_int_eq(stapled_status(d.port, "ocsp.test"), -1);
    test_daemon_stop(&d);
}
END_TEST

static X509 *read_certificate(const char *name)
{
    char path[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/%s.pem", certs_dir, name);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    X509 *cert = PEM_read_X509(f, NULL, NULL, NULL);
    fclose(f);
    ck_assert_ptr_nonnull(cert);
    return cert;
}

/* A response signed by the test CA saying ocsp.test is good, with
 * thisUpdate and nextUpdate that many seconds from now: its DER in *der
 * (OPENSSL_free), its length returned. */
static int good_response(long this_s, long next_s, unsigned char **out)
{
    X509 *ca = read_certificate("ca"), *cert = read_certificate("ocsp");
    char key_path[PATH_MAX + 16];
    snprintf(key_path, sizeof(key_path), "%s/ca.key", certs_dir);
    FILE *f = fopen(key_path, "r");
    ck_assert_ptr_nonnull(f);
    EVP_PKEY *key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
    fclose(f);
    ck_assert_ptr_nonnull(key);
    OCSP_CERTID *id = OCSP_cert_to_id(NULL, cert, ca);
    OCSP_BASICRESP *basic = OCSP_BASICRESP_new();
    ASN1_TIME *this_update = X509_gmtime_adj(NULL, this_s);
    ASN1_TIME *next_update = X509_gmtime_adj(NULL, next_s);
    ck_assert_ptr_nonnull(OCSP_basic_add1_status(basic, id, V_OCSP_CERTSTATUS_GOOD, 0, NULL,
                                                 this_update, next_update));
    ck_assert_int_eq(OCSP_basic_sign(basic, ca, key, EVP_sha256(), NULL, 0), 1);
    OCSP_RESPONSE *resp = OCSP_response_create(OCSP_RESPONSE_STATUS_SUCCESSFUL, basic);
    *out = NULL;
    int len = i2d_OCSP_RESPONSE(resp, out);
    ck_assert_int_gt(len, 0);
    OCSP_RESPONSE_free(resp);
    ASN1_TIME_free(this_update);
    ASN1_TIME_free(next_update);
    OCSP_BASICRESP_free(basic);
    OCSP_CERTID_free(id);
    EVP_PKEY_free(key);
    X509_free(ca);
    X509_free(cert);
    return len;
}

/* One whose nextUpdate passed a day ago: `openssl ocsp` makes none such. */
static void write_expired_response(const char *path)
{
    unsigned char *der;
    int len = good_response(-2 * 86400, -86400, &der);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(der, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    OPENSSL_free(der);
}

/* A responder on the listening socket `fd`, in a thread: the first
 * request gets a good response made then, with a nextUpdate `valid_s`
 * seconds on (in `expires`, for the test to read once it is stapled), every
 * later one an HTTP 500; ends when `fd` is shut down.  Made at the fetch,
 * not before the daemon starts, so that however long the start takes the
 * daemon holds the response for all of `valid_s`. */
struct flaky_responder {
    int fd;
    long valid_s;
    _Atomic long long expires;
    pthread_t thread;
};

static void *flaky_responder_run(void *arg)
{
    struct flaky_responder *r = arg;
    unsigned char *der = NULL;
    int len = 0;
    for (int served = 0;; served++) {
        int conn = accept(r->fd, NULL, NULL);
        if (conn < 0)
            break;
        /* The request: its head, then Content-Length bytes. */
        char req[8192];
        size_t got = 0, want = SIZE_MAX;
        while (got < want && got < sizeof(req) - 1) {
            ssize_t n = read(conn, req + got, sizeof(req) - 1 - got);
            if (n <= 0)
                break;
            got += (size_t)n;
            req[got] = '\0';
            const char *end = strstr(req, "\r\n\r\n"), *cl = strcasestr(req, "Content-Length:");
            if (end != NULL && cl != NULL)
                want = (size_t)(end + 4 - req) + strtoul(cl + 15, NULL, 10);
        }
        /* Made within one second, so that `expires` is its nextUpdate. */
        for (time_t now = 0; served == 0 && der == NULL;) {
            now = time(NULL);
            len = good_response(-60, r->valid_s, &der);
            if (time(NULL) != now) {
                OPENSSL_free(der);
                der = NULL;
                continue;
            }
            atomic_store(&r->expires, (long long)now + r->valid_s);
        }
        char head[256];
        int n = served == 0 ? snprintf(head, sizeof(head),
                                       "HTTP/1.1 200 OK\r\nContent-Type: application/ocsp-response"
                                       "\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
                                       len)
                            : snprintf(head, sizeof(head),
                                       "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0"
                                       "\r\nConnection: close\r\n\r\n");
        if (write(conn, head, (size_t)n) != n ||
            (served == 0 && write(conn, der, (size_t)len) != len))
            served = -1; /* not answered: the next one is */
        close(conn);
    }
    OPENSSL_free(der);
    return NULL;
}

/* Within one configuration: a response good for 5 s is fetched again
 * before its nextUpdate; when that fetch fails it stays stapled, and it
 * is no longer once it has expired. */
START_TEST(a_failed_refresh_keeps_the_last_good_response_until_it_expires)
{
    struct flaky_responder r = {.valid_s = 5};
    atomic_init(&r.expires, 0);
    int port;
    int fd = r.fd = test_listen(&port, 8);
    ck_assert_int_eq(pthread_create(&r.thread, NULL, flaky_responder_run, &r), 0);
    struct test_daemon d;
    start(&d, "corral",
          "workers 2;\n" ADMIN "server {\n"
          "    listen 127.0.0.1:0 tls;\n"
          "    server_name ocsp.test;\n"
          "    tls_certificate certs/ocsp.pem;\n"
          "    tls_certificate_key certs/ocsp.key;\n"
          "    tls_stapling on;\n"
          "    tls_trusted_certificate certs/ca.pem;\n"
          "    tls_stapling_responder http://127.0.0.1:%d/;\n"
          "    location / { return 200 \"ocsp\"; }\n"
          "}\n",
          port);
    ck_assert_int_eq(stapled_status_becomes(d.port, "ocsp.test", V_OCSP_CERTSTATUS_GOOD),
                     V_OCSP_CERTSTATUS_GOOD);
    time_t expires = (time_t)atomic_load(&r.expires);
    ck_assert_int_gt(expires, 0);
    ck_assert_int_eq(metric_becomes(&d, OCSP_FETCHES, "result=\"ok\"", 1), 1);
    /* The refresh, halfway to nextUpdate, fails... */
    for (uint64_t until = test_now_ms() + 10000;
         test_now_ms() < until && metric(&d, OCSP_FETCHES, "result=\"failed\"") < 1;)
        test_sleep_ms(20);
    ck_assert_int_ge(metric(&d, OCSP_FETCHES, "result=\"failed\""), 1);
    ck_assert_int_lt(time(NULL), expires);
    /* ...and the response fetched before is still stapled until then: to
     * every handshake that ended before nextUpdate, so began before it (a
     * slow one may end after it, and then says nothing). */
    for (time_t now = time(NULL); now < expires; now = time(NULL)) {
        int status = stapled_status(d.port, "ocsp.test");
        if (time(NULL) < expires)
            ck_assert_int_eq(status, V_OCSP_CERTSTATUS_GOOD);
    }
    ck_assert_int_eq(metric(&d, OCSP_FETCHES, "result=\"ok\""), 1);
    while (time(NULL) <= expires)
        test_sleep_ms(20);
    ck_assert_int_eq(stapled_status(d.port, "ocsp.test"), -1);
    test_daemon_stop(&d);
    shutdown(fd, SHUT_RDWR);
    pthread_join(r.thread, NULL);
    close(fd);
}
END_TEST

/* tls_stapling_file: a good response saved by `openssl ocsp -respout` is
 * stapled as it is, with no fetch; an expired one is a warning and not
 * stapled. */
START_TEST(a_stapling_file_is_stapled_while_it_is_current)
{
    int responder = free_port();
    pid_t pid = ocsp_responder_start(responder, OCSP_INDEX);
    char good[PATH_MAX], expired[PATH_MAX], command[4 * PATH_MAX], out[8192];
    test_daemon_file(good, sizeof(good), "good.der");
    test_daemon_file(expired, sizeof(expired), "expired.der");
    snprintf(command, sizeof(command),
             "openssl ocsp -issuer %s/ca.pem -cert %s/ocsp.pem -url http://127.0.0.1:%d/ "
             "-respout %s -noverify 2>&1",
             certs_dir, certs_dir, responder, good);
    int rc = test_run(command, out, sizeof(out));
    ocsp_responder_stop(pid);
    ck_assert_msg(rc == 0 && strstr(out, ": good") != NULL, "%s", out);
    write_expired_response(expired);

    int port = free_port();
    struct test_daemon d;
    start(&d, "corral",
          "workers 1;\n" ADMIN "server {\n"
          "    listen 127.0.0.1:%d tls default_server;\n"
          "    server_name ocsp.test;\n"
          "    tls_certificate certs/ocsp.pem;\n"
          "    tls_certificate_key certs/ocsp.key;\n"
          "    tls_trusted_certificate certs/ca.pem;\n"
          "    tls_stapling on;\n"
          "    tls_stapling_file %s;\n"
          "    location / { return 200 \"ocsp\"; }\n"
          "}\n"
          "server {\n"
          "    listen 127.0.0.1:%d tls;\n"
          "    server_name expired.test;\n"
          "    tls_certificate certs/ocsp.pem;\n"
          "    tls_certificate_key certs/ocsp.key;\n"
          "    ssl_trusted_certificate certs/ca.pem;\n"
          "    ssl_stapling on;\n"
          "    ssl_stapling_file %s;\n"
          "    location / { return 200 \"expired\"; }\n"
          "}\n",
          port, good, port, expired);
    free(test_daemon_wait_log(&d, "the response has expired or is not valid yet; not stapled"));
    ck_assert_int_eq(stapled_status(d.port, "ocsp.test"), V_OCSP_CERTSTATUS_GOOD);
    ck_assert_int_eq(stapled_status(d.port, "expired.test"), -1);
    ck_assert_int_eq(metric(&d, OCSP_FETCHES, "result=\"ok\""), 0);
    ck_assert_int_eq(metric(&d, OCSP_FETCHES, "result=\"failed\""), 0);
    test_daemon_stop(&d);
}
END_TEST

/* An https:// responder: openssl ocsp behind a TLS server of the daemon
 * itself (ip.pem, for 127.0.0.1, from the test CA that only
 * tls_trusted_certificate trusts).  ocsp.test on the first port gets its
 * good response, fetched over TLS; ocsp2 on the second none, as its
 * responder's certificate (a.test) is not for 127.0.0.1. */
static const char https_stapling_conf[] = "workers 1;\n" ADMIN "tls_stapling_verify on;\n"
                                          "tls_trusted_certificate certs/ca.pem;\n"
                                          "server {\n"
                                          "    listen 127.0.0.1:%d tls;\n"
                                          "    tls_stapling on;\n"
                                          "    tls_certificate certs/ocsp.pem;\n"
                                          "    tls_certificate_key certs/ocsp.key;\n"
                                          "    tls_stapling_responder https://127.0.0.1:%d/;\n"
                                          "    location / { return 200 \"ocsp\"; }\n"
                                          "}\n"
                                          "server {\n"
                                          "    listen 127.0.0.1:%d tls;\n"
                                          "    tls_stapling on;\n"
                                          "    tls_certificate certs/ocsp2.pem;\n"
                                          "    tls_certificate_key certs/ocsp2.key;\n"
                                          "    tls_stapling_responder https://127.0.0.1:%d/;\n"
                                          "    location / { return 200 \"ocsp2\"; }\n"
                                          "}\n"
                                          "server {\n"
                                          "    listen 127.0.0.1:%d tls;\n"
                                          "    tls_certificate certs/ip.pem;\n"
                                          "    tls_certificate_key certs/ip.key;\n"
                                          "    location / { proxy_pass http://127.0.0.1:%d; }\n"
                                          "}\n"
                                          "server {\n"
                                          "    listen 127.0.0.1:%d tls;\n"
                                          "    tls_certificate certs/a.pem;\n"
                                          "    tls_certificate_key certs/a.key;\n"
                                          "    location / { proxy_pass http://127.0.0.1:%d; }\n"
                                          "}\n";

START_TEST(an_https_ocsp_responder_is_fetched_over_verified_tls)
{
    int port = free_port(), port2 = free_port(), front = free_port(), wrong = free_port();
    int responder = free_port();
    pid_t pid = ocsp_responder_start(responder, OCSP_INDEX);
    struct test_daemon d;
    start(&d, "corral", https_stapling_conf, port, front, port2, wrong, front, responder, wrong,
          responder);
    int status = stapled_status_becomes(port, "ocsp.test", V_OCSP_CERTSTATUS_GOOD);
    ck_assert_msg(status == V_OCSP_CERTSTATUS_GOOD, "ocsp.test: stapled %d; log:\n%s", status,
                  test_daemon_log(&d));
    char line[128];
    snprintf(line, sizeof(line), "OCSP responder 127.0.0.1:%d for", wrong);
    free(test_daemon_wait_log(&d, line));
    ck_assert_int_eq(stapled_status(port2, "ocsp.test"), -1);
    ck_assert_int_ge(metric_becomes(&d, OCSP_FETCHES, "result=\"failed\"", 1), 1);
    test_daemon_stop(&d);
    ocsp_responder_stop(pid);
}
END_TEST

/* Certificates named by SNI are stapled too: ocsp.test and revoked.test
 * are read in their first handshakes (which the staple does not hold
 * up), then the main loop fetches for them; ocsp.test's good response is
 * stapled to a later handshake, revoked.test gets none.  Both workers
 * serve from the one cache, so each handshake may land on either.
 * Without tls_stapling (_i 1) the same happens, as both are must-staple,
 * but a.test, which is not, is never stapled.  After reloads with the
 * responder gone, ocsp.test is stapled again with the response fetched
 * before. */
START_TEST(certificates_named_by_sni_are_stapled)
{
    static const char *const links[][2] = {
        {"ocsp.test.pem", "ocsp.pem"},
        {"ocsp.test.key", "ocsp.key"},
        {"revoked.test.pem", "revoked.pem"},
        {"revoked.test.key", "revoked.key"},
        {"a.test.pem", "a.pem"},
        {"a.test.key", "a.key"},
    };
    char dir[PATH_MAX];
    sni_dir(dir, sizeof(dir), links, COUNT(links));
    /* 0: tls_stapling on; 1: off, and the must-staple ones are stapled
     * all the same (ocsp.test and revoked.test), a.test not. */
    bool stapling = _i == 0;
    int port = free_port(), responder = free_port();
    pid_t pid = ocsp_responder_start(responder, OCSP_INDEX);
    struct test_daemon d;
    start(&d, "corral",
          "workers 2;\n" ADMIN "server {\n"
          "    listen 127.0.0.1:%d tls;\n"
          "    tls_certificate sni/$ssl_server_name.pem;\n"
          "    tls_certificate_key sni/$ssl_server_name.key;\n"
          "    %s\n"
          "    tls_stapling_verify on;\n"
          "    tls_trusted_certificate certs/ca.pem;\n"
          "    tls_stapling_responder http://127.0.0.1:%d/;\n"
          "    location / { return 200 \"sni\"; }\n"
          "}\n",
          port, stapling ? "tls_stapling on;" : "", responder);
    int status = stapled_status_becomes(port, "ocsp.test", V_OCSP_CERTSTATUS_GOOD);
    ck_assert_msg(status == V_OCSP_CERTSTATUS_GOOD, "ocsp.test: stapled %d; log:\n%s", status,
                  test_daemon_log(&d));
    ck_assert_int_eq(stapled_status(port, "revoked.test"), -1);
    free(test_daemon_wait_log(&d, "the certificate's status is \"revoked\""));
    ck_assert_int_eq(stapled_status(port, "revoked.test"), -1);
    ck_assert_int_eq(stapled_status(port, "ocsp.test"), V_OCSP_CERTSTATUS_GOOD);
    ck_assert_int_eq(metric_becomes(&d, OCSP_FETCHES, "result=\"ok\"", 1), 1);
    if (!stapling) {
        free(test_daemon_wait_log(&d, "SNI \"ocsp.test\" is must-staple"));
        ck_assert_int_eq(stapled_status(port, "a.test"), -1);
        ck_assert_int_eq(stapled_status(port, "ocsp.test"), V_OCSP_CERTSTATUS_GOOD);
        char *log = test_daemon_log(&d);
        ck_assert_msg(strstr(log, "\"a.test\"") == NULL, "a.test is stapled:\n%s", log);
        free(log);
    }
    /* Reloads with the responder gone: the pair is read again when it is
     * asked for, and its staple gets the response fetched before, kept
     * through a configuration that never read ocsp.test (2), then through
     * one that did (3). */
    ocsp_responder_stop(pid);
    for (unsigned gen = 2; gen <= 4; gen++) {
        kill(d.pid, SIGHUP);
        test_daemon_wait_generation(&d, gen);
        if (gen == 2)
            continue;
        status = stapled_status_becomes(port, "ocsp.test", V_OCSP_CERTSTATUS_GOOD);
        ck_assert_msg(status == V_OCSP_CERTSTATUS_GOOD,
                      "ocsp.test in generation %u: stapled %d; log:\n%s", gen, status,
                      test_daemon_log(&d));
    }
    test_daemon_stop(&d);
}
END_TEST

/* -t refuses a responder corral cannot fetch from. */
START_TEST(check_refuses_a_malformed_ocsp_responder)
{
    char path[PATH_MAX], args[PATH_MAX + 16], out[4096];
    test_daemon_file(path, sizeof(path), "check.conf");
    test_write_file(path, "server {\n    listen 127.0.0.1:0 tls;\n"
                          "    tls_certificate certs/ocsp.pem;\n"
                          "    tls_certificate_key certs/ocsp.key;\n"
                          "    tls_trusted_certificate certs/ca.pem;\n"
                          "    tls_stapling on;\n"
                          "    tls_stapling_responder ftp://127.0.0.1:1/;\n"
                          "    location / { return 204; }\n}\n");
    snprintf(args, sizeof(args), "-t -c '%s'", path);
    int rc = test_daemon_run(args, out, sizeof(out));
    ck_assert_msg(rc != 0 &&
                      strstr(out, "check.conf:7:28: OCSP responder \"ftp://127.0.0.1:1/\" is "
                                  "not an http:// or https:// URL") != NULL,
                  "exit %d:\n%s", rc, out);
}
END_TEST

/* ============================================================ upstream TLS */

/* A second corral as the TLS backend.  The front's locations differ in what
 * they trust; /fresh/ opens a new upstream connection per request, which
 * should resume the session of the one before. */
START_TEST(proxy_to_an_https_upstream)
{
    struct test_daemon back, front;
    start_tls_server(&back, "back", 1, "", "backend");
    start(&front, "front",
          "workers 1;\n" ADMIN "upstream fresh {\n"
          "    server 127.0.0.1:%d;\n"
          "    keepalive 0;\n"
          "}\n"
          "server {\n"
          "    listen 127.0.0.1:0;\n"
          "    location /trusted/ {\n"
          "        proxy_pass https://127.0.0.1:%d;\n"
          "        proxy_tls_trusted_certificate certs/ca.pem;\n"
          "        proxy_tls_name default.test;\n"
          "    }\n"
          "    location /untrusted/ {\n"
          "        proxy_pass https://127.0.0.1:%d;\n"
          "        proxy_tls_trusted_certificate certs/other-ca.pem;\n"
          "        proxy_tls_name default.test;\n"
          "    }\n"
          "    location /unverified/ {\n"
          "        proxy_pass https://127.0.0.1:%d;\n"
          "        proxy_tls_verify off;\n"
          "        proxy_tls_trusted_certificate certs/other-ca.pem;\n"
          "        proxy_tls_name default.test;\n"
          "    }\n"
          "    location /fresh/ {\n"
          "        proxy_pass https://fresh;\n"
          "        proxy_tls_trusted_certificate certs/ca.pem;\n"
          "        proxy_tls_name default.test;\n"
          "    }\n"
          "}\n",
          back.port, back.port, back.port, back.port);
    char body[256];
    int status = test_daemon_http_get("127.0.0.1", front.port, "/trusted/", body, sizeof(body));
    ck_assert_msg(status == 200 && strcmp(body, "backend") == 0,
                  "trusted CA: %d \"%s\"; front log:\n%s", status, body, test_daemon_log(&front));

    status = test_daemon_http_get("127.0.0.1", front.port, "/untrusted/", body, sizeof(body));
    ck_assert_msg(status == 502, "the other CA: %d \"%s\"", status, body);
    bool told = false;
    for (int i = 0; i < 50 && !told; i++) {
        char *log = test_daemon_log(&front);
        told = strcasestr(log, "verif") != NULL;
        free(log);
        if (!told)
            usleep(20000);
    }
    ck_assert_msg(told, "the front's log does not say the verification failed:\n%s",
                  test_daemon_log(&front));
    long long failed = metric_becomes(&front, "corral_upstream_errors_total", "kind=\"tls\"", 1);
    ck_assert_msg(failed >= 1, "corral_upstream_errors_total{kind=\"tls\"}: %lld", failed);

    status = test_daemon_http_get("127.0.0.1", front.port, "/unverified/", body, sizeof(body));
    ck_assert_msg(status == 200 && strcmp(body, "backend") == 0,
                  "proxy_tls_verify off: %d \"%s\"; front log:\n%s", status, body,
                  test_daemon_log(&front));

    long long before = metric(&back, HANDSHAKES, "kind=\"resumed\"");
    for (int i = 0; i < 4; i++) {
        status = test_daemon_http_get("127.0.0.1", front.port, "/fresh/", body, sizeof(body));
        ck_assert_msg(status == 200 && strcmp(body, "backend") == 0,
                      "/fresh/, request %d: %d \"%s\"", i, status, body);
    }
    long long after = metric_becomes(&back, HANDSHAKES, "kind=\"resumed\"", before + 3);
    ck_assert_msg(after > before,
                  "4 new upstream connections in a row, none resumed (backend: %lld full, "
                  "%lld resumed)",
                  metric(&back, HANDSHAKES, "kind=\"full\""), after);
    test_daemon_stop(&front);
    test_daemon_stop(&back);
}
END_TEST

/* A backend that requires a client certificate from the test CA serves
 * the location that shows one (proxy_tls_* and nginx's proxy_ssl_* names)
 * and refuses the others: one without, one with another CA's. */
START_TEST(proxy_shows_a_client_certificate_to_the_upstream)
{
    struct test_daemon back, front;
    start_tls_server(&back, "back", 1,
                     "    tls_client_certificate certs/ca.pem;\n    tls_verify_client on;\n",
                     "backend");
    start(&front, "front",
          "workers 1;\n" ADMIN "server {\n"
          "    listen 127.0.0.1:0;\n"
          "    location /with/ {\n"
          "        proxy_pass https://127.0.0.1:%d;\n"
          "        proxy_tls_trusted_certificate certs/ca.pem;\n"
          "        proxy_tls_name default.test;\n"
          "        proxy_tls_certificate certs/client.pem;\n"
          "        proxy_tls_certificate_key certs/client.key;\n"
          "    }\n"
          "    location /nginx/ {\n"
          "        proxy_pass https://127.0.0.1:%d;\n"
          "        proxy_ssl_trusted_certificate certs/ca.pem;\n"
          "        proxy_ssl_name default.test;\n"
          "        proxy_ssl_certificate certs/client.pem;\n"
          "        proxy_ssl_certificate_key certs/client.key;\n"
          "    }\n"
          "    location /without/ {\n"
          "        proxy_pass https://127.0.0.1:%d;\n"
          "        proxy_tls_trusted_certificate certs/ca.pem;\n"
          "        proxy_tls_name default.test;\n"
          "    }\n"
          "    location /stranger/ {\n"
          "        proxy_pass https://127.0.0.1:%d;\n"
          "        proxy_tls_trusted_certificate certs/ca.pem;\n"
          "        proxy_tls_name default.test;\n"
          "        proxy_tls_certificate certs/other-client.pem;\n"
          "        proxy_tls_certificate_key certs/other-client.key;\n"
          "    }\n"
          "}\n",
          back.port, back.port, back.port, back.port);
    static const struct {
        const char *path;
        int status;
    } cases[] = {{"/with/", 200}, {"/nginx/", 200}, {"/without/", 502}, {"/stranger/", 502}};
    for (int i = 0; i < COUNT(cases); i++) {
        char body[256];
        int status =
            test_daemon_http_get("127.0.0.1", front.port, cases[i].path, body, sizeof(body));
        ck_assert_msg(status == cases[i].status && (status != 200 || strcmp(body, "backend") == 0),
                      "%s: %d \"%s\"; front log:\n%s", cases[i].path, status, body,
                      test_daemon_log(&front));
    }
    test_daemon_stop(&front);
    test_daemon_stop(&back);
}
END_TEST

/* What -t says of a client certificate towards an upstream that cannot
 * be used: a key without its certificate, a key that is not the
 * certificate's. */
START_TEST(check_refuses_a_bad_upstream_client_certificate)
{
#define PROXY "proxy_pass https://127.0.0.1:1; "
#define GRPC  "grpc_pass grpcs://127.0.0.1:1; "
    static const struct {
        const char *lines, *expected; /* NULL: taken */
    } cases[] = {
        {PROXY
         "proxy_tls_certificate certs/client.pem; proxy_tls_certificate_key certs/client.key;",
         NULL},
        {PROXY "proxy_tls_certificate_key certs/client.key;",
         "\"proxy_tls_certificate_key\" needs \"proxy_tls_certificate\" in the same location"},
        {PROXY "proxy_ssl_certificate certs/client.pem;",
         "\"proxy_ssl_certificate\" needs \"proxy_ssl_certificate_key\" in the same location"},
        {PROXY "proxy_tls_certificate certs/client.pem; proxy_tls_certificate_key certs/a.key;",
         "cannot load key"},
        {PROXY "proxy_tls_certificate certs/missing.pem; proxy_tls_certificate_key certs/a.key;",
         "cannot load certificate"},
        {GRPC "grpc_ssl_certificate certs/client.pem;",
         "\"grpc_ssl_certificate\" needs \"grpc_ssl_certificate_key\" in the same location"},
        {GRPC "grpc_ssl_certificate certs/client.pem; grpc_ssl_certificate_key certs/a.key;",
         "cannot load key"},
        {"return 204; proxy_tls_certificate certs/client.pem; "
         "proxy_tls_certificate_key certs/client.key;",
         "\"proxy_tls_certificate\" needs \"proxy_pass https://...\" in the same location"},
    };
#undef PROXY
#undef GRPC
    for (int i = 0; i < COUNT(cases); i++) {
        char path[PATH_MAX], args[PATH_MAX + 16], out[4096], conf[1024];
        test_daemon_file(path, sizeof(path), "check.conf");
        snprintf(conf, sizeof(conf),
                 "server {\n    listen 127.0.0.1:0;\n    location / { %s }\n}\n", cases[i].lines);
        test_write_file(path, conf);
        snprintf(args, sizeof(args), "-t -c '%s'", path);
        int rc = test_daemon_run(args, out, sizeof(out));
        if (cases[i].expected == NULL)
            ck_assert_msg(rc == 0, "%s: exit %d:\n%s", cases[i].lines, rc, out);
        else
            ck_assert_msg(rc != 0 && strstr(out, cases[i].expected) != NULL, "%s: exit %d:\n%s",
                          cases[i].lines, rc, out);
    }
}
END_TEST

/* Active health checks to an https upstream speak TLS, and verify as the
 * proxied requests do: the good upstream stays up, the one whose check
 * uri answers 503 through TLS goes down for that reason. */
START_TEST(health_checks_speak_tls_to_an_https_upstream)
{
    struct test_daemon back, front;
    start(&back, "back",
          "workers 1;\n" ADMIN "server {\n"
          "    listen 127.0.0.1:0 tls;\n" DEFAULT_CERT "    location /sick { return 503; }\n"
          "    location / { return 200 \"backend\"; }\n"
          "}\n");
    start(&front, "front",
          "workers 1;\n" ADMIN "upstream good {\n"
          "    server 127.0.0.1:%d;\n"
          "    health_check interval=100ms timeout=1s rise=1 fall=1 uri=/healthz;\n"
          "}\n"
          "upstream sick {\n"
          "    server 127.0.0.1:%d;\n"
          "    health_check interval=100ms timeout=1s rise=1 fall=1 uri=/sick;\n"
          "}\n"
          "server {\n"
          "    listen 127.0.0.1:0;\n"
          "    location /good/ {\n"
          "        proxy_pass https://good;\n"
          "        proxy_tls_trusted_certificate certs/ca.pem;\n"
          "        proxy_tls_name default.test;\n"
          "    }\n"
          "    location /sick/ {\n"
          "        proxy_pass https://sick;\n"
          "        proxy_tls_trusted_certificate certs/ca.pem;\n"
          "        proxy_tls_name default.test;\n"
          "    }\n"
          "}\n",
          back.port, back.port);
    bool sick_down = false;
    for (int i = 0; i < 150 && !sick_down; i++) {
        char *log = test_daemon_log(&front);
        sick_down = strstr(log, "upstream sick: 127.0.0.1:") != NULL;
        free(log);
        if (!sick_down)
            usleep(20000);
    }
    usleep(500000); /* several more rounds of checks */
    char *log = test_daemon_log(&front);
    ck_assert_msg(strstr(log, "is down: 1 failed checks (status 503)") != NULL, "%s", log);
    ck_assert_msg(strstr(log, "upstream good") == NULL, "%s", log);
    free(log);
    char body[256];
    int status = test_daemon_http_get("127.0.0.1", front.port, "/good/", body, sizeof(body));
    ck_assert_msg(status == 200 && strcmp(body, "backend") == 0, "%d \"%s\"", status, body);
    status = test_daemon_http_get("127.0.0.1", front.port, "/sick/", body, sizeof(body));
    ck_assert_int_eq(status, 502);
    test_daemon_stop(&front);
    test_daemon_stop(&back);
}
END_TEST

/* ============================================================ corral -t */

/* The certificate's argument is at line 3, column 21; the key's at line 4,
 * column 25. */
static void write_pair_config(char *path, size_t size, const char *name, const char *certificate,
                              const char *key)
{
    test_daemon_file(path, size, name);
    char conf[1024];
    snprintf(conf, sizeof(conf),
             "server {\n"
             "    listen 127.0.0.1:0 tls;\n"
             "    tls_certificate %s;\n"
             "    tls_certificate_key %s;\n"
             "    location / { return 200 \"x\"; }\n"
             "}\n",
             certificate, key);
    test_write_file(path, conf);
}

START_TEST(check_reports_certificate_problems_where_they_are_named)
{
    char conf[PATH_MAX], args[PATH_MAX + 16], out[8192], at[PATH_MAX + 32], or_at[PATH_MAX + 32];

    write_pair_config(conf, sizeof(conf), "good.conf", "certs/a.pem", "certs/a.key");
    snprintf(args, sizeof(args), "-t -c %s", conf);
    int rc = test_daemon_run(args, out, sizeof(out));
    ck_assert_msg(rc == 0, "a good pair: exit %d:\n%s", rc, out);

    write_pair_config(conf, sizeof(conf), "missing.conf", "certs/a.pem", "certs/missing.key");
    snprintf(args, sizeof(args), "-t -c %s", conf);
    rc = test_daemon_run(args, out, sizeof(out));
    snprintf(at, sizeof(at), "%s:4:25: ", conf);
    ck_assert_msg(rc != 0 && strstr(out, at) != NULL,
                  "a missing key file: exit %d, expected an error at \"%s\":\n%s", rc, at, out);

    write_pair_config(conf, sizeof(conf), "mismatch.conf", "certs/a.pem", "certs/b.key");
    snprintf(args, sizeof(args), "-t -c %s", conf);
    rc = test_daemon_run(args, out, sizeof(out));
    snprintf(at, sizeof(at), "%s:4:25: ", conf);
    snprintf(or_at, sizeof(or_at), "%s:3:21: ", conf);
    ck_assert_msg(
        rc != 0 && (strstr(out, at) != NULL || strstr(out, or_at) != NULL),
        "a key of another certificate: exit %d, expected an error at \"%s\" or \"%s\":\n%s", rc, at,
        or_at, out);

    write_pair_config(conf, sizeof(conf), "expired.conf", "certs/expired.pem", "certs/expired.key");
    snprintf(args, sizeof(args), "-t -c %s", conf);
    rc = test_daemon_run(args, out, sizeof(out));
    snprintf(at, sizeof(at), "%s:3:21: ", conf);
    ck_assert_msg(rc == 0 && strstr(out, at) != NULL,
                  "an expired certificate: exit %d, expected 0 and a warning at \"%s\":\n%s", rc,
                  at, out);
}
END_TEST

/* ============================================================ kernel TLS */

/* With tls_ktls on, requests are served whether or not this kernel has TLS
 * offload; without it the daemon says so in its log, with it the metric
 * counts the connections. */
START_TEST(ktls_on_serves_either_way)
{
    struct test_daemon d;
    start_tls_server(&d, "corral", 1, "    tls_ktls on;\n", "kernel");
    static const int versions[] = {TLS1_2_VERSION, TLS1_3_VERSION};
    for (int v = 0; v < COUNT(versions); v++) {
        struct client c = {
            .min_version = versions[v], .max_version = versions[v], .sni = "default.test"};
        expect_body(d.port, &c, "default.test", "kernel");
    }
    long long ktls = metric(&d, KTLS, NULL);
    ck_assert_msg(ktls >= 0, "no %s series on /metrics", KTLS);
    char *log = test_daemon_log(&d);
    bool unavailable = strcasestr(log, "ktls") != NULL;
    free(log);
    if (!unavailable)
        ck_assert_msg(ktls > 0, "no kTLS connection counted, and the log says nothing of kTLS:\n%s",
                      test_daemon_log(&d));
    test_daemon_stop(&d);
}
END_TEST

/* The transport clears the thread's error queue before each OpenSSL call
 * only when something is in it: whatever is, goes, or SSL_get_error()
 * would take a stale entry for a failure of the call that follows. */
START_TEST(tls_clear_errors_empties_a_queue_with_entries)
{
    tls_clear_errors();
    ck_assert_uint_eq(ERR_peek_error(), 0);
    ERR_raise(ERR_LIB_SSL, SSL_R_BAD_LENGTH);
    ERR_raise(ERR_LIB_SYS, EPIPE);
    ck_assert_uint_ne(ERR_peek_error(), 0);
    tls_clear_errors();
    ck_assert_uint_eq(ERR_peek_error(), 0);
    ck_assert_uint_eq(ERR_peek_last_error(), 0);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/tls");
    TCase *tc = tcase_create("tls");
    test_daemon_fixture(tc);
    tcase_add_unchecked_fixture(tc, certs_make, NULL);
    tcase_add_checked_fixture(tc, case_setup, NULL);
    tcase_set_timeout(tc, 30);
    /* What the daemon's workers share, or what another thread changes
     * under them: the session cache and ticket keys, the certificates read
     * by SNI name, the watched certificates, the stapled responses and
     * their fetches, the upstreams' sessions and health.  The only cases
     * run under ThreadSanitizer. */
    tcase_add_loop_test(tc, sessions_resume_across_workers, 0, COUNT(resumption_cases));
    tcase_add_test(tc, ticket_keys_rotate);
    tcase_add_test(tc, tickets_resume_across_a_reload);
    tcase_add_test(tc, tls_1_3_resumption_brings_a_fresh_ticket);
    tcase_add_test(tc, a_session_does_not_skip_another_blocks_verification);
    tcase_add_test(tc, tls_certificate_named_by_sni);
    tcase_add_test(tc, changed_certificate_files_serve_without_a_reload);
    tcase_add_test(tc, garbage_and_silence_are_closed_and_counted);
    tcase_add_test(tc, ocsp_responses_are_fetched_and_stapled);
    tcase_add_test(tc, a_watched_certificate_is_stapled_without_a_reload);
    tcase_add_test(tc, must_staple_certificates_are_stapled_without_tls_stapling);
    tcase_add_test(tc, a_reload_that_verifies_drops_a_response_that_does_not);
    tcase_add_test(tc, a_failed_refresh_keeps_the_last_good_response_until_it_expires);
    tcase_add_test(tc, a_stapling_file_is_stapled_while_it_is_current);
    tcase_add_test(tc, an_https_ocsp_responder_is_fetched_over_verified_tls);
    tcase_add_loop_test(tc, certificates_named_by_sni_are_stapled, 0, 2);
    tcase_add_test(tc, proxy_to_an_https_upstream);
    tcase_add_test(tc, health_checks_speak_tls_to_an_https_upstream);
    /* One connection's handshake and requests, each in the worker that
     * accepted it, and corral -t (one thread): the release and ASan runs
     * have them. */
    if (!TEST_TSAN) {
        tcase_add_test(tc, tls_clear_errors_empties_a_queue_with_entries);
        tcase_add_test(tc, tls_1_2_and_1_3_are_served_and_older_versions_refused);
        tcase_add_test(tc, sni_picks_the_server_blocks_certificate);
        tcase_add_test(tc, misdirected_requests_get_421);
        tcase_add_test(tc, rsa_and_ecdsa_certificates_side_by_side);
        tcase_add_test(tc, the_chain_file_is_sent);
        tcase_add_test(tc, renegotiation_is_refused);
        tcase_add_test(tc, tls_ciphers_are_enforced);
        tcase_add_test(tc, alpn_settles_on_http_1_1);
        tcase_add_test(tc, connection_close_ends_with_close_notify);
        tcase_add_test(tc, sigpipe_does_not_end_the_daemon);
        tcase_add_test(tc, client_certificates_are_verified);
        tcase_add_test(tc, client_certificate_variables);
        tcase_add_test(tc, sni_picks_the_server_blocks_client_verification);
        tcase_add_test(tc, sni_picks_the_server_blocks_protocols_and_ciphers);
        tcase_add_test(tc, the_admin_listener_verifies_client_certificates);
        tcase_add_test(tc, a_public_admin_listener_needs_verification_not_to_be_warned);
        tcase_add_test(tc, proxy_shows_a_client_certificate_to_the_upstream);
        tcase_add_test(tc, ktls_on_serves_either_way);
        tcase_add_test(tc, check_refuses_a_malformed_ocsp_responder);
        tcase_add_test(tc, check_refuses_a_bad_upstream_client_certificate);
        tcase_add_test(tc, check_reports_certificate_problems_where_they_are_named);
    }
    suite_add_tcase(suite, tc);
    return suite;
}
