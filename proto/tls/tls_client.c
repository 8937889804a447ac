/*
 * tls_client.c: the client side of TLS, towards upstreams: verifying them
 * by name or address, showing a client certificate when configured, and
 * keeping each worker's last session of each server so that the next
 * connection resumes it.
 */
#include "proto/tls/tls_internal.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int on_new_session(SSL *ssl, SSL_SESSION *session)
{
    struct tls_conn *tc = SSL_get_app_data(ssl);
    if (tc->session == NULL)
        return 0; /* not kept: OpenSSL frees it */
    if (*tc->session != NULL)
        SSL_SESSION_free(*tc->session);
    *tc->session = session;
    return 1; /* kept */
}

/* The certificate and key shown to an upstream that asks for one (mTLS):
 * OpenSSL sends them only when the server requests a certificate. */
static int load_identity(SSL_CTX *ctx, const struct tls_client_conf *conf, char *error,
                         size_t error_len)
{
    assert(conf->certificate_key != NULL); /* the config pairs them */
    tls_clear_errors();
    if (SSL_CTX_use_certificate_chain_file(ctx, conf->certificate) != 1) {
        snprintf(error, error_len, "cannot load certificate \"%s\": %s", conf->certificate,
                 tls_openssl_reason());
        return -EINVAL;
    }
    /* OpenSSL checks that the key is the certificate's ("key values
     * mismatch"). */
    if (SSL_CTX_use_PrivateKey_file(ctx, conf->certificate_key, SSL_FILETYPE_PEM) != 1) {
        snprintf(error, error_len, "cannot load key \"%s\" for certificate \"%s\": %s",
                 conf->certificate_key, conf->certificate, tls_openssl_reason());
        return -EINVAL;
    }
    return 0;
}

int tls_client_new(const struct tls_client_conf *conf, unsigned workers, size_t server_count,
                   struct tls_client **out, char *error, size_t error_len)
{
    struct tls_client *client = calloc(1, sizeof(*client));
    if (client == NULL)
        return -ENOMEM;
    client->workers = workers;
    client->server_count = server_count;
    client->sessions = calloc((size_t)workers * server_count, sizeof(*client->sessions));
    client->server_name = strdup(conf->server_name);
    client->ctx = SSL_CTX_new(TLS_client_method());
    if (client->sessions == NULL || client->server_name == NULL || client->ctx == NULL) {
        tls_client_free(client);
        return -ENOMEM;
    }
    struct in6_addr ip;
    client->name_is_address = inet_pton(AF_INET, conf->server_name, &ip) == 1 ||
                              inet_pton(AF_INET6, conf->server_name, &ip) == 1;
    SSL_CTX *ctx = client->ctx;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                                 SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_read_ahead(ctx, 1); /* as on the server side: see tls.c */
    static const unsigned char alpn_h2[] = "\x02h2";
    if (conf->http2)
        SSL_CTX_set_alpn_protos(ctx, alpn_h2, sizeof(alpn_h2) - 1);
    else
        SSL_CTX_set_alpn_protos(ctx, alpn_http11, sizeof(alpn_http11) - 1);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx, on_new_session);
    if (conf->certificate != NULL && load_identity(ctx, conf, error, error_len) != 0) {
        tls_client_free(client);
        return -EINVAL;
    }
    if (conf->verify) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        tls_clear_errors();
        int ok = conf->ca_file != NULL ? SSL_CTX_load_verify_locations(ctx, conf->ca_file, NULL)
                                       : SSL_CTX_set_default_verify_paths(ctx);
        if (ok != 1) {
            snprintf(error, error_len, "cannot load CA certificates from \"%s\": %s",
                     conf->ca_file != NULL ? conf->ca_file : "the default store",
                     tls_openssl_reason());
            tls_client_free(client);
            return -EINVAL;
        }
    }
    *out = client;
    return 0;
}

void tls_client_free(struct tls_client *client)
{
    if (client == NULL)
        return;
    for (size_t i = 0; client->sessions != NULL && i < client->workers * client->server_count; i++)
        SSL_SESSION_free(client->sessions[i]);
    free(client->sessions);
    free(client->server_name);
    SSL_CTX_free(client->ctx);
    free(client);
}

int tls_client_connect(struct tls_client *client, corral_conn *conn, size_t server, bool resume)
{
    struct tls_conn *tc = tls_conn_new(client->ctx, conn);
    if (tc == NULL)
        return -ENOMEM;
    corral_worker *worker = corral_conn_worker(conn);
    size_t index = worker != NULL ? corral_worker_index(worker) : 0;
    assert(index < client->workers && server < client->server_count);
    tc->client = client;
    tc->session = resume ? &client->sessions[index * client->server_count + server] : NULL;
    SSL *ssl = tc->ssl;
    SSL_set_connect_state(ssl);
    if (client->name_is_address) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), client->server_name);
    } else {
        SSL_set_tlsext_host_name(ssl, client->server_name);
        SSL_set1_host(ssl, client->server_name);
    }
    if (tc->session != NULL && *tc->session != NULL)
        SSL_set_session(ssl, *tc->session);
    corral_conn_set_transport(conn, &tls_transport, tc);
    return 0;
}
