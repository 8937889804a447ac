/*
 * fuzz_http3.c: libFuzzer over the HTTP/3 endpoint's packet input: the
 * input is a run of datagrams, each a 2-byte big-endian length and its
 * bytes (a length past the end takes what is left), handed in turn to
 * one endpoint from one client address, as its UDP socket would.  Every
 * connection the run opened is freed with the endpoint, so a leak is a
 * finding.  A seed that starts with a real client Initial (the corpus's
 * initial*) gets past the header checks into the Initial keys, the
 * CRYPTO frames and GnuTLS's ClientHello parsing.
 */
#include "proto/http/site.h"
#include "proto/http3/http3.h"
#include "proto/modules.h"
#include "proto/policy/return.h"

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct http_return ok = {.status = 200, .text = "ok\n", .text_len = 3};
static struct http_location locations[] = {
    {.path = "/", .path_len = 1, .handler = &http_return_handler, .handler_data = &ok}};
static struct http_vhost vhost = {.locations = locations, .location_count = 1};
static struct http_site site = {.vhosts = &vhost, .vhost_count = 1};

static corral_loop *loop;
static char cert_path[64], key_path[64];
static size_t sent;

static void output(void *arg, const struct sockaddr *local, socklen_t local_len,
                   const struct sockaddr *peer, socklen_t peer_len, const uint8_t *data, size_t len,
                   size_t gso_segment)
{
    (void)arg, (void)local, (void)local_len, (void)peer, (void)peer_len, (void)gso_segment;
    if (len == 0 || data == NULL)
        abort(); /* an empty datagram is never sent */
    sent += len;
}

static int write_pem(const char *path, const gnutls_datum_t *pem)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    size_t n = fwrite(pem->data, 1, pem->size, f);
    return fclose(f) == 0 && n == pem->size ? 0 : -1;
}

/* A self-signed P-256 certificate for "localhost" and its key. */
static int make_certificate(const char *dir)
{
    gnutls_x509_privkey_t key;
    gnutls_x509_crt_t crt;
    gnutls_datum_t pem;
    if (gnutls_x509_privkey_init(&key) != 0 ||
        gnutls_x509_privkey_generate(key, GNUTLS_PK_ECDSA,
                                     GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0) != 0 ||
        gnutls_x509_crt_init(&crt) != 0)
        return -1;
    time_t now = time(NULL);
    static const unsigned char serial[] = {1};
    if (gnutls_x509_crt_set_version(crt, 3) != 0 ||
        gnutls_x509_crt_set_serial(crt, serial, sizeof(serial)) != 0 ||
        gnutls_x509_crt_set_activation_time(crt, now - 3600) != 0 ||
        gnutls_x509_crt_set_expiration_time(crt, now + 86400) != 0 ||
        gnutls_x509_crt_set_dn(crt, "CN=localhost", NULL) != 0 ||
        gnutls_x509_crt_set_key(crt, key) != 0 ||
        gnutls_x509_crt_sign2(crt, crt, key, GNUTLS_DIG_SHA256, 0) != 0)
        return -1;
    snprintf(cert_path, sizeof(cert_path), "%s/cert.pem", dir);
    snprintf(key_path, sizeof(key_path), "%s/key.pem", dir);
    int rc = 0;
    if (gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &pem) != 0)
        return -1;
    rc |= write_pem(cert_path, &pem);
    gnutls_free(pem.data);
    if (gnutls_x509_privkey_export2(key, GNUTLS_X509_FMT_PEM, &pem) != 0)
        return -1;
    rc |= write_pem(key_path, &pem);
    gnutls_free(pem.data);
    gnutls_x509_crt_deinit(crt);
    gnutls_x509_privkey_deinit(key);
    return rc;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    static char dir[] = "/tmp/corral-fuzz-h3-XXXXXX";
    if (mkdtemp(dir) == NULL || make_certificate(dir) != 0 || corral_loop_new(&loop) != 0)
        abort();
    corral_set_log_level(CORRAL_LOG_ERROR);
    modules_init();
    vhost.limits = (struct http_limits)HTTP_LIMITS_DEFAULT;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct h3_endpoint_config config = {
        .site = &site,
        .loop = loop,
        .worker_index = 7,
        .cert_file = cert_path,
        .key_file = key_path,
        .output = output,
        /* Half the inputs meet Retry: their tokens are checked too. */
        .retry = size % 2 == 1,
    };
    struct h3_endpoint *ep;
    if (h3_endpoint_new(&config, &ep) != 0)
        abort();
    struct sockaddr_in client = {.sin_family = AF_INET, .sin_port = htons(40000)};
    struct sockaddr_in server = {.sin_family = AF_INET, .sin_port = htons(443)};
    client.sin_addr.s_addr = server.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    size_t off = 0;
    while (off + 2 <= size) {
        size_t len = (size_t)data[off] << 8 | data[off + 1];
        off += 2;
        if (len > size - off)
            len = size - off;
        /* A copy of its own, so that ASan sees a read past its end. */
        uint8_t *pkt = malloc(len ? len : 1);
        if (pkt == NULL)
            abort();
        memcpy(pkt, data + off, len);
        int owner = h3_endpoint_packet_worker(pkt, len); /* what steering reads */
        if (owner < -1 || owner > 0xffff)
            abort();
        h3_endpoint_input(ep, (struct sockaddr *)&server, sizeof(server),
                          (struct sockaddr *)&client, sizeof(client), pkt, len, 0);
        free(pkt);
        off += len;
    }
    h3_endpoint_free(ep);
    return 0;
}
