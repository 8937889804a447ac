/*
 * fuzz_tls.c: libFuzzer over the TLS server side: each input is what a
 * client sends (a ClientHello and the records after it) to a real corral
 * server listening with TLS on a unix socket, so tls_server_accept's
 * transport, SNI, ALPN, session tickets and the session cache, and client
 * certificates all see hostile bytes.  The certificates are made at start
 * in a temporary directory.  The reply is read until the server closes; a
 * server that never closes is wedged: abort.
 */
#include "proto/serve/serve.h"
#include "proto/modules.h"
#include "proto/policy/return.h"
#include "proto/http1/http1.h"
#include "proto/tls/tls.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define WEDGED_MS 10000 /* far beyond the 2 s handshake timeout */

static char dir[64] = "/tmp/corral-fuzz-tls-XXXXXX";
static char socket_path[128], ec_cert[128], ec_key[128], rsa_cert[128], rsa_key[128];

static struct http_return ok = {.status = 200, .text = "ok\n", .text_len = 3};
static struct http_location locations[] = {{.path = "/",
                                            .path_len = 1,
                                            .exact = false,
                                            .handler = &http_return_handler,
                                            .handler_data = &ok}};
static const char *const example_names[] = {"example.com"};
static const char *const wildcard_names[] = {"*.example.org"};
static struct http_vhost vhosts[] = {
    {.locations = locations, .location_count = 1},
    {.names = example_names, .name_count = 1, .locations = locations, .location_count = 1},
    {.names = wildcard_names, .name_count = 1, .locations = locations, .location_count = 1},
};
static struct http_stats stats[1];
static struct http_site site = {.vhosts = vhosts, .vhost_count = 3, .stats = stats};

static void remove_files(void)
{
    const char *paths[] = {socket_path, ec_cert, ec_key, rsa_cert, rsa_key};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        unlink(paths[i]);
    rmdir(dir);
}

/* A self-signed certificate for every name the site serves; it is also
 * the CA that client certificates are checked against. */
static void make_certificate(EVP_PKEY *key, long serial, const char *cert_path,
                             const char *key_path)
{
    X509 *x = X509_new();
    if (key == NULL || x == NULL)
        abort();
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), serial);
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 30L * 24 * 3600);
    X509_set_pubkey(x, key);
    X509_NAME *name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"default.test", -1,
                               -1, 0);
    X509_set_issuer_name(x, name);
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, x, x, NULL, NULL, 0);
    const struct {
        int nid;
        const char *value;
    } extensions[] = {
        {NID_basic_constraints, "critical,CA:TRUE"},
        {NID_key_usage, "critical,digitalSignature,keyEncipherment,keyCertSign"},
        {NID_subject_alt_name, "DNS:default.test,DNS:example.com,DNS:*.example.org"},
    };
    for (size_t i = 0; i < sizeof(extensions) / sizeof(extensions[0]); i++) {
        X509_EXTENSION *ext =
            X509V3_EXT_conf_nid(NULL, &ctx, extensions[i].nid, extensions[i].value);
        if (ext == NULL || X509_add_ext(x, ext, -1) != 1)
            abort();
        X509_EXTENSION_free(ext);
    }
    if (X509_sign(x, key, EVP_sha256()) == 0)
        abort();
    FILE *cert = fopen(cert_path, "w"), *pkey = fopen(key_path, "w");
    if (cert == NULL || pkey == NULL || PEM_write_X509(cert, x) != 1 ||
        PEM_write_PrivateKey(pkey, key, NULL, NULL, 0, NULL, NULL) != 1)
        abort();
    fclose(cert);
    fclose(pkey);
    X509_free(x);
    EVP_PKEY_free(key);
}

static void on_report(void *arg, enum tls_conf_item item, size_t vhost, size_t index, bool warning,
                      const char *message)
{
    (void)arg;
    fprintf(stderr, "fuzz_tls: item %d of vhost %zu (%zu): %s\n", (int)item, vhost, index, message);
    if (!warning)
        abort();
}

static void start_server(void)
{
    signal(SIGPIPE, SIG_IGN); /* OpenSSL writes with write(2) */
    if (mkdtemp(dir) == NULL)
        abort();
    snprintf(socket_path, sizeof(socket_path), "%s/tls.sock", dir);
    snprintf(ec_cert, sizeof(ec_cert), "%s/ec.pem", dir);
    snprintf(ec_key, sizeof(ec_key), "%s/ec.key", dir);
    snprintf(rsa_cert, sizeof(rsa_cert), "%s/rsa.pem", dir);
    snprintf(rsa_key, sizeof(rsa_key), "%s/rsa.key", dir);
    atexit(remove_files); /* the server itself runs until the process ends */
    make_certificate(EVP_EC_gen("P-256"), 1, ec_cert, ec_key);
    make_certificate(EVP_RSA_gen(2048), 2, rsa_cert, rsa_key);
    corral_set_log_level(CORRAL_LOG_ERROR);

    struct http_limits limits = HTTP_LIMITS_DEFAULT;
    limits.header_timeout_ms = limits.body_timeout_ms = 2000;
    for (size_t i = 0; i < 3; i++)
        vhosts[i].limits = limits;
    /* The default host has both key types, so that the client's offer
     * picks one. */
    const struct tls_certificate_files both[] = {{ec_cert, ec_key}, {rsa_cert, rsa_key}};
    const struct tls_vhost_conf tls_vhosts[] = {{.certificates = both,
                                                 .certificate_count = 2,
                                                 .client_ca = ec_cert,
                                                 .verify_client = TLS_VERIFY_CLIENT_OPTIONAL,
                                                 .protocols = TLS_PROTOCOL_1_2 | TLS_PROTOCOL_1_3},
                                                {.certificates = both,
                                                 .certificate_count = 1,
                                                 .verify_client = TLS_VERIFY_CLIENT_OFF,
                                                 .protocols = TLS_PROTOCOL_1_3},
                                                {.certificates = both + 1,
                                                 .certificate_count = 1,
                                                 .client_ca = ec_cert,
                                                 .verify_client = TLS_VERIFY_CLIENT_OPTIONAL,
                                                 .protocols = TLS_PROTOCOL_1_2,
                                                 .ciphers = "ECDHE+AESGCM"}};
    struct tls_server_conf conf = {
        .sni_select = site_sni_select,
        .sni_arg = &site,
        .protocols = TLS_PROTOCOL_1_2 | TLS_PROTOCOL_1_3,
        .session_tickets = true,
        .ticket_key_rotation_ms = 3600 * 1000,
        .session_cache = 64,
        .session_timeout_ms = 300 * 1000,
        .handshake_timeout_ms = 2000,
    };
    struct tls_report report = {on_report, NULL};
    if (tls_server_new(&conf, tls_vhosts, 3, 1, &report, &site.tls) != 0)
        abort();

    struct corral_server_config config;
    modules_init();
    corral_server_config_init(&config);
    config.workers = 1;
    corral_server *srv;
    char address[160];
    snprintf(address, sizeof(address), "unix:%s", socket_path);
    if (corral_server_new(&config, &srv) != 0 ||
        corral_server_listen(srv, address, NULL, &serve_handler, &site, NULL) != 0 ||
        corral_server_start(srv) != 0)
        abort();
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool started;
    if (!started) {
        start_server();
        started = true;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, socket_path, strlen(socket_path) + 1);
    if (fd == -1 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0)
        abort();
    /* The reply is small and the socket buffers large: everything is sent
     * first, then the reply read. */
    size_t sent = 0;
    while (sent < size) {
        ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
        if (n <= 0)
            break; /* the server gave up on the input already */
        sent += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    uint64_t start = now_ms();
    char buf[16384];
    for (;;) {
        uint64_t waited = now_ms() - start;
        if (waited >= WEDGED_MS) {
            fprintf(stderr, "fuzz_tls: the server did not close the connection in %d ms\n",
                    WEDGED_MS);
            abort();
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, (int)(WEDGED_MS - waited)) == 1 && recv(fd, buf, sizeof(buf), 0) <= 0)
            break;
    }
    close(fd);
    return 0;
}
