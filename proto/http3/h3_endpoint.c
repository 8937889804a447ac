/*
 * h3_endpoint.c: the QUIC endpoint of one worker's UDP socket: its TLS
 * credentials (GnuTLS, the listener's PEM files), the table from
 * connection IDs to connections, the IDs it issues, and the first look at
 * a datagram: to its connection, a new one for a valid Initial, or
 * dropped.
 */
#include "proto/http3/http3_internal.h"

#include <assert.h>
#include <errno.h>
#include <gnutls/crypto.h>
#include <linux/filter.h>
#include <stdlib.h>
#include <string.h>

/* Connection IDs this endpoint issues (H3_CID_LEN bytes):
 *
 *   byte 0      H3_CID_VERSION: the layout below
 *   bytes 1-2   the owning worker's index, big-endian
 *   byte 3      the endpoint's generation tag (config.generation)
 *   bytes 4-15  random
 *
 * A short-header packet carries its destination ID right after its
 * first byte, so an eBPF sk_reuseport program (or a user-space hand-off)
 * reads the owner at a fixed offset, bytes 2 and 3 of the UDP payload,
 * as nginx's quic_bpf reads its key.  The generation tag comes after
 * the index, which stays where the steering programs read it: a worker
 * of a newer generation that reads a packet of an older one's
 * connection (a reload) passes it to that generation (h3_udp.c).  The
 * random part keeps IDs
 * unlinkable enough for a first step; encrypting the ID (as QUIC-LB
 * does) is for later. */
#define H3_CID_VERSION 0x01

int h3_endpoint_cid_worker(const uint8_t *cid, size_t len)
{
    if (len != H3_CID_LEN || cid[0] != H3_CID_VERSION)
        return -1;
    return (int)((unsigned)cid[1] << 8 | cid[2]);
}

int h3_endpoint_cid_generation(const uint8_t *cid, size_t len)
{
    return h3_endpoint_cid_worker(cid, len) >= 0 ? cid[3] : -1;
}

/* The destination ID of a datagram's first packet: its bytes and length,
 * or NULL when the datagram is too short to hold it. */
static const uint8_t *packet_dcid(const uint8_t *pkt, size_t len, size_t *cid_len)
{
    if (len == 0)
        return NULL;
    if ((pkt[0] & 0x80) == 0) { /* short header: the ID right after the first byte */
        *cid_len = H3_CID_LEN;
        return len >= 1 + H3_CID_LEN ? pkt + 1 : NULL;
    }
    /* Long header: flags, version (4 bytes), the ID's length, the ID. */
    if (len < 6 || len - 6 < pkt[5])
        return NULL;
    *cid_len = pkt[5];
    return pkt + 6;
}

int h3_endpoint_packet_worker(const uint8_t *pkt, size_t len)
{
    size_t cid_len;
    const uint8_t *cid = packet_dcid(pkt, len, &cid_len);
    return cid != NULL ? h3_endpoint_cid_worker(cid, cid_len) : -1;
}

int h3_endpoint_packet_generation(const uint8_t *pkt, size_t len)
{
    size_t cid_len;
    const uint8_t *cid = packet_dcid(pkt, len, &cid_len);
    return cid != NULL ? h3_endpoint_cid_generation(cid, cid_len) : -1;
}

/* h3_endpoint_packet_worker() in classic BPF.  The kernel runs it on the
 * UDP payload; an absolute load past the end would end it with 0 (the
 * first worker), so the length is checked first.  cBPF's loads are
 * big-endian, as the index is written. */
static struct sock_filter steer_code[] = {
    /* 0 */ BPF_STMT(BPF_LD | BPF_W | BPF_LEN, 0),
    /* 1 */ BPF_STMT(BPF_MISC | BPF_TAX, 0),
    /* 2 */ BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 0),
    /* 3 */ BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x80, 6, 0), /* a long header: to 10 */
    /* 4 */ BPF_STMT(BPF_MISC | BPF_TXA, 0),
    /* 5 */ BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 1 + H3_CID_LEN, 0, 12),
    /* 6 */ BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 1),
    /* 7 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, H3_CID_VERSION, 0, 10),
    /* 8 */ BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 2),
    /* 9 */ BPF_STMT(BPF_RET | BPF_A, 0),
    /* 10 */ BPF_STMT(BPF_MISC | BPF_TXA, 0),
    /* 11 */ BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 6 + H3_CID_LEN, 0, 6),
    /* 12 */ BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 5),
    /* 13 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, H3_CID_LEN, 0, 4),
    /* 14 */ BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 6),
    /* 15 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, H3_CID_VERSION, 0, 2),
    /* 16 */ BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 7),
    /* 17 */ BPF_STMT(BPF_RET | BPF_A, 0),
    /* 18: no ID of ours; out of range, so the kernel's hash picks */
    BPF_STMT(BPF_RET | BPF_K, 0xffffffff),
};

const struct sock_fprog h3_endpoint_steer_program = {
    .len = sizeof(steer_code) / sizeof(steer_code[0]),
    .filter = steer_code,
};

const struct corral_udp_quic_ids h3_endpoint_quic_ids = {
    .length = H3_CID_LEN,
    .marker = H3_CID_VERSION,
    .index_offset = 1,
};

int h3_endpoint_new_cid(struct h3_endpoint *ep, ngtcp2_cid *cid, uint8_t *token)
{
    cid->datalen = H3_CID_LEN;
    cid->data[0] = H3_CID_VERSION;
    cid->data[1] = (uint8_t)(ep->config.worker_index >> 8);
    cid->data[2] = (uint8_t)ep->config.worker_index;
    cid->data[3] = ep->config.generation;
    if (gnutls_rnd(GNUTLS_RND_NONCE, cid->data + 4, H3_CID_LEN - 4) != 0)
        return -1;
    if (token != NULL && ngtcp2_crypto_generate_stateless_reset_token(
                             token, ep->reset_secret, sizeof(ep->reset_secret), cid) != 0)
        return -1;
    return 0;
}

/* FNV-1a over the ID's bytes: its random part spreads it. */
static size_t bucket_of(const ngtcp2_cid *cid)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < cid->datalen; i++)
        h = (h ^ cid->data[i]) * 16777619u;
    return h & (H3_CID_BUCKETS - 1);
}

static bool cid_equal(const ngtcp2_cid *a, const uint8_t *data, size_t len)
{
    return a->datalen == len && memcmp(a->data, data, len) == 0;
}

static struct h3_cid_entry *find(const struct h3_endpoint *ep, const uint8_t *data, size_t len)
{
    ngtcp2_cid cid;
    if (len > NGTCP2_MAX_CIDLEN)
        return NULL;
    ngtcp2_cid_init(&cid, data, len);
    for (struct h3_cid_entry *e = ep->buckets[bucket_of(&cid)]; e != NULL; e = e->next)
        if (cid_equal(&e->cid, data, len))
            return e;
    return NULL;
}

int h3_endpoint_add_cid(struct h3_endpoint *ep, const ngtcp2_cid *cid, struct h3_conn *conn)
{
    struct h3_cid_entry *e = malloc(sizeof(*e));
    if (e == NULL)
        return -ENOMEM;
    size_t b = bucket_of(cid);
    *e = (struct h3_cid_entry){.next = ep->buckets[b], .conn = conn, .cid = *cid};
    ep->buckets[b] = e;
    return 0;
}

void h3_endpoint_remove_cid(struct h3_endpoint *ep, const ngtcp2_cid *cid)
{
    for (struct h3_cid_entry **p = &ep->buckets[bucket_of(cid)]; *p != NULL; p = &(*p)->next) {
        if (cid_equal(&(*p)->cid, cid->data, cid->datalen)) {
            struct h3_cid_entry *e = *p;
            *p = e->next;
            free(e);
            return;
        }
    }
}

void h3_endpoint_remove_conn(struct h3_endpoint *ep, struct h3_conn *conn)
{
    /* A walk over the table: a connection goes once, and its IDs are
     * few, but where they are is known only by hashing each, which
     * ngtcp2 would have to list (ngtcp2_conn_get_scid) while the
     * connection still exists. */
    for (size_t b = 0; b < H3_CID_BUCKETS; b++) {
        struct h3_cid_entry **p = &ep->buckets[b];
        while (*p != NULL) {
            struct h3_cid_entry *e = *p;
            if (e->conn == conn && conn->closing != NULL) {
                e->conn = NULL;
                e->closing = conn->closing;
            } else if (e->conn == conn) {
                *p = e->next;
                free(e);
                continue;
            }
            p = &e->next;
        }
    }
}

void h3_endpoint_remove_closing(struct h3_endpoint *ep, const struct h3_closing *rec)
{
    /* A walk over the table, as for a connection. */
    for (size_t b = 0; b < H3_CID_BUCKETS; b++) {
        struct h3_cid_entry **p = &ep->buckets[b];
        while (*p != NULL) {
            struct h3_cid_entry *e = *p;
            if (e->conn == NULL && e->closing == rec) {
                *p = e->next;
                free(e);
            } else {
                p = &e->next;
            }
        }
    }
}

/* Loads `pair` and the pairs after it (pair->next...) into *cred, one
 * set of credentials.  Returns 0, -ENOMEM, or -EINVAL (logged). */
static int load_credentials(const struct h3_certificate *pair,
                            gnutls_certificate_credentials_t *cred)
{
    if (gnutls_certificate_allocate_credentials(cred) != GNUTLS_E_SUCCESS)
        return -ENOMEM;
    int rc = GNUTLS_E_SUCCESS;
    for (; pair != NULL && rc >= 0; pair = pair->next) {
        if (pair->by_name) /* read per SNI name (h3_sni_certs.c) */
            continue;
        /* >= 0: with GNUTLS_CERTIFICATE_API_V2 it is the pair's index. */
        rc = gnutls_certificate_set_x509_key_file(*cred, pair->cert_file, pair->key_file,
                                                  GNUTLS_X509_FMT_PEM);
        if (rc < 0)
            corral_log(CORRAL_LOG_ERROR, "http3: cannot load \"%s\" and \"%s\": %s",
                       pair->cert_file, pair->key_file, gnutls_strerror(rc));
    }
    if (rc >= 0)
        return 0;
    gnutls_certificate_free_credentials(*cred);
    *cred = NULL;
    return rc == GNUTLS_E_MEMORY_ERROR ? -ENOMEM : -EINVAL;
}

/* Whether two vhosts' lists of pairs name the same files in the same
 * order (one set of credentials serves both). */
static bool same_pairs(const struct h3_certificate *a, const struct h3_certificate *b)
{
    for (; a != NULL && b != NULL; a = a->next, b = b->next)
        if (strcmp(a->cert_file, b->cert_file) != 0 || strcmp(a->key_file, b->key_file) != 0 ||
            a->by_name != b->by_name)
            return false;
    return a == NULL && b == NULL;
}

static void free_credentials(struct h3_endpoint *ep)
{
    if (ep->creds != NULL) {
        for (size_t v = 0; v < ep->site->vhost_count; v++)
            if (ep->owned[v])
                gnutls_certificate_free_credentials(ep->creds[v]);
    } else if (ep->cred != NULL) {
        gnutls_certificate_free_credentials(ep->cred);
    }
    free(ep->creds);
    free(ep->owned);
}

/* Each vhost's credentials: one load per distinct pair of files, so that
 * many server blocks with one certificate cost one. */
static int load_vhost_credentials(struct h3_endpoint *ep)
{
    const struct h3_certificate *pairs = ep->config.vhost_certificates;
    size_t count = ep->site->vhost_count;
    assert(count > 0);
    ep->creds = calloc(count, sizeof(*ep->creds));
    ep->owned = calloc(count, sizeof(*ep->owned));
    if (ep->creds == NULL || ep->owned == NULL) {
        free(ep->creds);
        free(ep->owned);
        ep->creds = NULL;
        ep->owned = NULL;
        return -ENOMEM;
    }
    for (size_t v = 0; v < count; v++) {
        for (size_t u = 0; u < v && ep->creds[v] == NULL; u++)
            if (same_pairs(&pairs[u], &pairs[v]))
                ep->creds[v] = ep->creds[u];
        if (ep->creds[v] != NULL)
            continue;
        int err = load_credentials(&pairs[v], &ep->creds[v]);
        if (err != 0)
            return err;
        ep->owned[v] = true;
    }
    ep->cred = ep->creds[0];
    return 0;
}

int h3_credentials_check(const char *cert_file, const char *key_file)
{
    gnutls_certificate_credentials_t cred;
    int err = load_credentials(
        &(struct h3_certificate){.cert_file = cert_file, .key_file = key_file}, &cred);
    if (err == 0)
        gnutls_certificate_free_credentials(cred);
    return err;
}

/* Whether a vhost's list of pairs has one read by SNI name. */
static bool has_by_name(const struct h3_certificate *pair)
{
    for (; pair != NULL; pair = pair->next)
        if (pair->by_name)
            return true;
    return false;
}

gnutls_certificate_credentials_t h3_endpoint_credentials(struct h3_endpoint *ep, const char *name,
                                                         size_t len, struct h3_sni_cred **held)
{
    *held = NULL;
    if (ep->creds == NULL)
        return ep->cred;
    size_t v = (size_t)(site_find_vhost(ep->site, name, len) - ep->site->vhosts);
    const struct h3_certificate *pairs = &ep->config.vhost_certificates[v];
    /* The pair named by SNI first, as the TCP listens choose; the
     * vhost's other pairs when it does not load (none: no certificate,
     * the handshake fails). */
    if (has_by_name(pairs)) {
        gnutls_certificate_credentials_t cred = h3_sni_certs_get(ep, v, pairs, name, held);
        if (cred != NULL)
            return cred;
    }
    return ep->creds[v];
}

/* GnuTLS's anti-replay for early data: the worker's of the listen's
 * store (h3_replay.c), or of one of the endpoint's own. */
static int anti_replay_new(struct h3_endpoint *ep)
{
    unsigned worker = ep->config.replay_worker;
    if (ep->config.replay_store == NULL) {
        int err = h3_replay_store_new(1, &ep->replay_store);
        if (err != 0)
            return err;
        ep->owns_replay_store = true;
        worker = 0;
    } else {
        ep->replay_store = ep->config.replay_store;
    }
    ep->anti_replay = h3_replay_store_attach(ep->replay_store, worker, ep);
    return ep->anti_replay != NULL ? 0 : -EINVAL;
}

static void anti_replay_free(struct h3_endpoint *ep)
{
    if (ep->anti_replay != NULL)
        h3_replay_store_attach(ep->replay_store,
                               ep->owns_replay_store ? 0 : ep->config.replay_worker, NULL);
    if (ep->owns_replay_store)
        h3_replay_store_free(ep->replay_store);
    ep->anti_replay = NULL;
    ep->replay_store = NULL;
}

int h3_endpoint_new(const struct h3_endpoint_config *config, struct h3_endpoint **out)
{
    assert(config->site != NULL && config->loop != NULL && config->output != NULL);
    struct h3_endpoint *ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return -ENOMEM;
    ep->config = *config;
    ep->site = config->site;
    if (ep->config.stream_buffer_size == 0)
        ep->config.stream_buffer_size = 64 * 1024;
    if (ep->config.max_concurrent_streams == 0)
        ep->config.max_concurrent_streams = 128;
    if (ep->config.idle_timeout_ms == 0)
        ep->config.idle_timeout_ms = 60000;
    int err = config->vhost_certificates != NULL
                  ? load_vhost_credentials(ep)
                  : load_credentials(&(struct h3_certificate){.cert_file = config->cert_file,
                                                              .key_file = config->key_file},
                                     &ep->cred);
    if (err != 0) {
        free_credentials(ep);
        free(ep);
        return err;
    }
    if (config->token_secret != NULL)
        memcpy(ep->token_secret, config->token_secret, sizeof(ep->token_secret));
    if (config->ticket_key != NULL)
        memcpy(ep->ticket_key, config->ticket_key, sizeof(ep->ticket_key));
    ep->ticket_datum = (gnutls_datum_t){ep->ticket_key, sizeof(ep->ticket_key)};
    if (config->reset_secret != NULL)
        memcpy(ep->reset_secret, config->reset_secret, sizeof(ep->reset_secret));
    if ((config->reset_secret == NULL &&
         gnutls_rnd(GNUTLS_RND_KEY, ep->reset_secret, sizeof(ep->reset_secret)) != 0) ||
        (config->token_secret == NULL &&
         gnutls_rnd(GNUTLS_RND_KEY, ep->token_secret, sizeof(ep->token_secret)) != 0) ||
        (config->ticket_key == NULL &&
         gnutls_rnd(GNUTLS_RND_KEY, ep->ticket_key, sizeof(ep->ticket_key)) != 0)) {
        free_credentials(ep);
        free(ep);
        return -EIO;
    }
    if (config->early_data && (err = anti_replay_new(ep)) != 0) {
        anti_replay_free(ep);
        free_credentials(ep);
        free(ep);
        return err;
    }
    *out = ep;
    return 0;
}

void h3_endpoint_free(struct h3_endpoint *ep)
{
    if (ep == NULL)
        return;
    ep->drained = NULL; /* its owner is going away with it */
    if (ep->drain_timer != NULL)
        corral_timer_free(ep->drain_timer);
    while (ep->conns != NULL)
        h3_conn_free(ep->conns);
    h3_closing_free_all(ep);
    h3_sni_certs_free_all(ep);
    for (size_t b = 0; b < H3_CID_BUCKETS; b++)
        assert(ep->buckets[b] == NULL);
    free_credentials(ep);
    anti_replay_free(ep);
    explicit_bzero(ep->ticket_key, sizeof(ep->ticket_key));
    free(ep);
}

int h3_host_key_derive(const uint8_t *key, size_t len, uint8_t token_secret[32],
                       uint8_t reset_secret[32])
{
    /* HMAC-SHA-256 of a label per use, keyed by the file's bytes. */
    static const char token_label[] = "corral quic retry token",
                      reset_label[] = "corral quic stateless reset";
    if (len < 32)
        return -EINVAL;
    if (gnutls_hmac_fast(GNUTLS_MAC_SHA256, key, len, token_label, strlen(token_label),
                         token_secret) != 0 ||
        gnutls_hmac_fast(GNUTLS_MAC_SHA256, key, len, reset_label, strlen(reset_label),
                         reset_secret) != 0)
        return -EINVAL;
    return 0;
}

int h3_host_key_ticket_key(const uint8_t *key, size_t len, uint8_t ticket_key[H3_TICKET_KEY_LEN])
{
    /* Two HMACs of their own labels: 64 bytes, as GnuTLS's ticket key. */
    static const char label_a[] = "corral quic session ticket 1",
                      label_b[] = "corral quic session ticket 2";
    if (len < 32)
        return -EINVAL;
    if (gnutls_hmac_fast(GNUTLS_MAC_SHA256, key, len, label_a, strlen(label_a), ticket_key) != 0 ||
        gnutls_hmac_fast(GNUTLS_MAC_SHA256, key, len, label_b, strlen(label_b), ticket_key + 32) !=
            0)
        return -EINVAL;
    return 0;
}

const struct h3_counter_info h3_counter_info[H3_COUNTER_COUNT] = {
#define H3_COUNTER_INFO(id, kind, name, help) [H3_##id] = {kind, name, help},
    H3_COUNTERS(H3_COUNTER_INFO)
#undef H3_COUNTER_INFO
};

void h3_endpoint_counters(const struct h3_endpoint *ep, uint64_t out[H3_COUNTER_COUNT])
{
    memcpy(out + H3_FIRST_ENDPOINT_COUNTER, ep->count + H3_FIRST_ENDPOINT_COUNTER,
           (H3_COUNTER_COUNT - H3_FIRST_ENDPOINT_COUNTER) * sizeof(*out));
    out[H3_CONNECTIONS] = ep->conn_count;
    out[H3_HANDSHAKING] = ep->handshaking;
    out[H3_CLOSING] = ep->closing_count;
}

uint64_t h3_endpoint_handshakes(const struct h3_endpoint *ep)
{
    return ep->count[H3_HANDSHAKES];
}

size_t h3_endpoint_conn_count(const struct h3_endpoint *ep)
{
    return ep->conn_count;
}

void h3_endpoint_close(struct h3_endpoint *ep)
{
    while (ep->conns != NULL)
        h3_conn_close_now(ep->conns);
}

/* The longest smoothed RTT of the endpoint's connections, at least 5 ms
 * and at most 1 s: a GOAWAY's notice gets two of them to reach the
 * client before the final GOAWAY follows (nghttp3's advice). */
static uint64_t drain_step_ms(const struct h3_endpoint *ep)
{
    uint64_t rtt = 0;
    for (const struct h3_conn *c = ep->conns; c != NULL; c = c->next) {
        ngtcp2_conn_stat stat;
        ngtcp2_conn_get_conn_stat(c->quic, &stat);
        if (stat.smoothed_rtt > rtt)
            rtt = stat.smoothed_rtt;
    }
    uint64_t ms = 2 * rtt / NGTCP2_MILLISECONDS;
    return ms < 5 ? 5 : ms > 1000 ? 1000 : ms;
}

/* Each step of a drain: every connection's GOAWAY one stage further (the
 * notice to one whose handshake has completed since), again while one
 * has not had its final GOAWAY. */
static void on_drain_step(corral_timer *timer, void *arg)
{
    struct h3_endpoint *ep = arg;
    bool again = false;
    for (struct h3_conn *c = ep->conns; c != NULL; c = c->next)
        again |= !h3_conn_goaway(c);
    if (again)
        corral_timer_start(timer, drain_step_ms(ep));
}

void h3_endpoint_drain(struct h3_endpoint *ep, void (*done)(void *arg), void *arg)
{
    if (ep->draining)
        return;
    ep->draining = true;
    ep->drained = done;
    ep->drained_arg = arg;
    for (struct h3_conn *c = ep->conns; c != NULL; c = c->next)
        h3_conn_goaway(c);
    /* Without a timer, the connections close at the grace's end instead
     * of at their last stream's. */
    if (ep->conns != NULL &&
        corral_timer_new(ep->config.loop, on_drain_step, ep, &ep->drain_timer) == 0)
        corral_timer_start(ep->drain_timer, drain_step_ms(ep));
    h3_endpoint_conn_gone(ep);
}

void h3_endpoint_conn_gone(struct h3_endpoint *ep)
{
    if (!ep->draining || ep->conn_count > 0 || ep->drained == NULL)
        return;
    void (*done)(void *) = ep->drained;
    ep->drained = NULL;
    done(ep->drained_arg);
}

/* Answers a client Initial without a token with a Retry whose token
 * holds its first ID, address and time (RFC 9000 8.1.2).  Returns 0: the
 * datagram was answered. */
static int send_retry(struct h3_endpoint *ep, const ngtcp2_pkt_hd *hd, const struct sockaddr *local,
                      socklen_t local_len, const struct sockaddr *peer, socklen_t peer_len)
{
    ngtcp2_cid scid;
    uint8_t token[NGTCP2_CRYPTO_MAX_RETRY_TOKENLEN], pkt[NGTCP2_MAX_UDP_PAYLOAD_SIZE];
    if (h3_endpoint_new_cid(ep, &scid, NULL) != 0)
        return -ENOENT;
    ngtcp2_ssize token_len = ngtcp2_crypto_generate_retry_token(
        token, ep->token_secret, sizeof(ep->token_secret), hd->version,
        (const ngtcp2_sockaddr *)peer, (ngtcp2_socklen)peer_len, &scid, &hd->dcid, h3_conn_now());
    if (token_len < 0)
        return -ENOENT;
    ngtcp2_ssize n = ngtcp2_crypto_write_retry(pkt, sizeof(pkt), hd->version, &hd->scid, &scid,
                                               &hd->dcid, token, (size_t)token_len);
    if (n < 0)
        return -ENOENT;
    ep->config.output(ep->config.output_arg, local, local_len, peer, peer_len, pkt, (size_t)n, 0);
    ep->count[H3_RETRIES]++;
    return 0;
}

/* A short-header packet for an ID of ours that no connection has (its
 * connection ended, or lived in another generation): a stateless reset
 * (RFC 9000 10.3), which the client recognises by the token this
 * endpoint's key (or another's of the same quic_host_key) gave the ID,
 * and closes at once instead of at its idle timeout.  Shorter than what
 * came, so that two endpoints never answer each other's resets. */
static void send_stateless_reset(struct h3_endpoint *ep, const ngtcp2_version_cid *vc, size_t len,
                                 const struct sockaddr *local, socklen_t local_len,
                                 const struct sockaddr *peer, socklen_t peer_len)
{
    enum { TOKEN = NGTCP2_STATELESS_RESET_TOKENLEN, MIN = NGTCP2_MIN_STATELESS_RESET_RANDLEN };
    if (len <= MIN + TOKEN + 1)
        return;
    /* Per second, a bound: a flood of packets with made-up IDs of our
     * layout would otherwise cost an HMAC and a datagram each. */
    uint64_t second = h3_conn_now() / NGTCP2_SECONDS;
    unsigned limit = ep->config.max_resets_per_second > 0 ? ep->config.max_resets_per_second : 100;
    if (second != ep->reset_second) {
        ep->reset_second = second;
        ep->resets_in_second = 0;
    }
    if (ep->resets_in_second >= limit) {
        ep->count[H3_RESETS_LIMITED]++;
        return;
    }
    ep->resets_in_second++;
    size_t out_len = len - 1 < 41 ? len - 1 : 41;
    ngtcp2_cid cid;
    ngtcp2_cid_init(&cid, vc->dcid, vc->dcidlen);
    uint8_t token[TOKEN], rand[41], pkt[41 + TOKEN];
    if (ngtcp2_crypto_generate_stateless_reset_token(token, ep->reset_secret,
                                                     sizeof(ep->reset_secret), &cid) != 0 ||
        gnutls_rnd(GNUTLS_RND_NONCE, rand, out_len - TOKEN) != 0)
        return;
    ngtcp2_ssize n =
        ngtcp2_pkt_write_stateless_reset(pkt, sizeof(pkt), token, rand, out_len - TOKEN);
    if (n <= 0)
        return;
    ep->config.output(ep->config.output_arg, local, local_len, peer, peer_len, pkt, (size_t)n, 0);
    ep->count[H3_RESETS]++;
}

/* A client Initial whose Retry token does not verify: closed at once
 * with INVALID_TOKEN (RFC 9000 8.1.2), in an Initial packet made from
 * its header alone, costing no state; the client gives up instead of
 * retrying to its handshake timeout. */
static void send_invalid_token(struct h3_endpoint *ep, const ngtcp2_pkt_hd *hd,
                               const struct sockaddr *local, socklen_t local_len,
                               const struct sockaddr *peer, socklen_t peer_len)
{
    ep->count[H3_TOKENS_REFUSED]++;
    uint8_t pkt[NGTCP2_MAX_UDP_PAYLOAD_SIZE];
    ngtcp2_ssize n = ngtcp2_crypto_write_connection_close(pkt, sizeof(pkt), hd->version, &hd->scid,
                                                          &hd->dcid, NGTCP2_INVALID_TOKEN, NULL, 0);
    if (n > 0)
        ep->config.output(ep->config.output_arg, local, local_len, peer, peer_len, pkt, (size_t)n,
                          0);
}

/* A long-header packet of a version not spoken here: a Version
 * Negotiation packet naming QUIC v1 (RFC 9000 6.1), only for a datagram
 * of at least 1200 bytes (as a client's first Initial of any version
 * must be), so that the answer, far shorter, amplifies nothing.  Its
 * IDs, up to 255 bytes in an unknown version, are echoed swapped. */
static void send_version_negotiation(struct h3_endpoint *ep, const ngtcp2_version_cid *vc,
                                     size_t len, const struct sockaddr *local, socklen_t local_len,
                                     const struct sockaddr *peer, socklen_t peer_len)
{
    static const uint32_t versions[] = {NGTCP2_PROTO_VER_V1};
    if (len < NGTCP2_MAX_UDP_PAYLOAD_SIZE)
        return;
    uint8_t pkt[1 + 4 + 2 * (1 + 255) + sizeof(versions)], unused;
    if (gnutls_rnd(GNUTLS_RND_NONCE, &unused, 1) != 0)
        return;
    ngtcp2_ssize n = ngtcp2_pkt_write_version_negotiation(
        pkt, sizeof(pkt), unused, vc->scid, vc->scidlen, vc->dcid, vc->dcidlen, versions, 1);
    if (n <= 0)
        return;
    ep->config.output(ep->config.output_arg, local, local_len, peer, peer_len, pkt, (size_t)n, 0);
    ep->count[H3_VERSION_NEGOTIATIONS]++;
}

/* Whether the Initial's Retry token (its magic byte checked) is one of
 * this key, for this address, in time; its first ID in *odcid then. */
static bool retry_token_valid(struct h3_endpoint *ep, const ngtcp2_pkt_hd *hd,
                              const struct sockaddr *peer, socklen_t peer_len, ngtcp2_cid *odcid)
{
    uint64_t timeout_ms =
        ep->config.retry_token_timeout_ms > 0 ? ep->config.retry_token_timeout_ms : 10000;
    return ngtcp2_crypto_verify_retry_token(
               odcid, hd->token.base, hd->token.len, ep->token_secret, sizeof(ep->token_secret),
               hd->version, (const ngtcp2_sockaddr *)peer, (ngtcp2_socklen)peer_len, &hd->dcid,
               timeout_ms * NGTCP2_MILLISECONDS, h3_conn_now()) == 0;
}

/* Whether the Initial's token is a NEW_TOKEN token of this key for this
 * address (ngtcp2 binds it to the IP address, not the port: a client's
 * next connection comes from another port), in time. */
static bool new_token_valid(struct h3_endpoint *ep, const ngtcp2_pkt_hd *hd,
                            const struct sockaddr *peer, socklen_t peer_len)
{
    uint64_t timeout_ms =
        ep->config.new_token_timeout_ms > 0 ? ep->config.new_token_timeout_ms : 600000;
    return ngtcp2_crypto_verify_regular_token(
               hd->token.base, hd->token.len, ep->token_secret, sizeof(ep->token_secret),
               (const ngtcp2_sockaddr *)peer, (ngtcp2_socklen)peer_len,
               timeout_ms * NGTCP2_MILLISECONDS, h3_conn_now()) == 0;
}

int h3_endpoint_new_token(struct h3_endpoint *ep, const struct sockaddr *peer, socklen_t peer_len,
                          uint8_t token[NGTCP2_CRYPTO_MAX_REGULAR_TOKENLEN])
{
    ngtcp2_ssize n = ngtcp2_crypto_generate_regular_token(
        token, ep->token_secret, sizeof(ep->token_secret), (const ngtcp2_sockaddr *)peer,
        (ngtcp2_socklen)peer_len, h3_conn_now());
    if (n < 0)
        return -1;
    ep->count[H3_NEW_TOKENS_SENT]++;
    return (int)n;
}

/* Whether a client Initial without a token that validates its address
 * gets a Retry: always with `retry`, else while the handshakes in
 * progress reach the threshold (a flood of Initials: each would hold a
 * connection until its handshake timeout; a Retry holds nothing and
 * costs a spoofed source its answer). */
static bool wants_retry(struct h3_endpoint *ep)
{
    if (ep->config.retry)
        return true;
    return ep->config.retry_threshold > 0 && ep->handshaking >= ep->config.retry_threshold;
}

int h3_endpoint_input(struct h3_endpoint *ep, const struct sockaddr *local, socklen_t local_len,
                      const struct sockaddr *peer, socklen_t peer_len, const uint8_t *pkt,
                      size_t len, unsigned ecn)
{
    /* ngtcp2 asserts a datagram is not empty (and Debian's keeps its
     * asserts): a zero-length UDP payload is legal and must not abort. */
    if (len == 0)
        return -ENOENT;
    ngtcp2_version_cid vc;
    int rc = ngtcp2_pkt_decode_version_cid(&vc, pkt, len, H3_CID_LEN);
    if (rc == NGTCP2_ERR_VERSION_NEGOTIATION) {
        send_version_negotiation(ep, &vc, len, local, local_len, peer, peer_len);
        return -ENOENT;
    }
    if (rc != 0) /* garbage */
        return -ENOENT;
    /* Closing periods over by now end first (their records are few, and
     * the oldest is at the head). */
    if (ep->closing_head != NULL)
        h3_closing_reap(ep, h3_conn_now());
    struct h3_cid_entry *entry = find(ep, vc.dcid, vc.dcidlen);
    if (entry != NULL && entry->conn == NULL &&
        h3_closing_input(ep, entry->closing, local, local_len, peer, peer_len))
        return 0;
    struct h3_conn *conn = entry != NULL ? entry->conn : NULL;
    if (conn == NULL) {
        ngtcp2_pkt_hd hd;
        /* Only a client's Initial opens a connection (RFC 9000 7.2:
         * ngtcp2_accept checks its type, its length of at least 1200
         * bytes and its IDs); a short-header packet of a connection
         * gone earns a stateless reset. */
        if (ngtcp2_accept(&hd, pkt, len) != 0) {
            if ((pkt[0] & 0x80) == 0 && h3_endpoint_cid_worker(vc.dcid, vc.dcidlen) >= 0)
                send_stateless_reset(ep, &vc, len, local, local_len, peer, peer_len);
            return -ENOENT;
        }
        /* A draining endpoint takes no new connection: the next
         * generation does, or none on a stop. */
        if (ep->draining)
            return -ENOENT;
        /* A Retry token is checked whether or not Retry is wanted now
         * (the threshold may have passed since it was sent); one that
         * fails is closed with INVALID_TOKEN.  A NEW_TOKEN token that
         * fails (expired, another address, another key) is as none
         * (RFC 9000 8.1.3). */
        ngtcp2_cid odcid;
        bool retried = false, validated = false;
        if (hd.token.len > 0 && hd.token.base[0] == NGTCP2_CRYPTO_TOKEN_MAGIC_RETRY) {
            if (!retry_token_valid(ep, &hd, peer, peer_len, &odcid)) {
                send_invalid_token(ep, &hd, local, local_len, peer, peer_len);
                return -ENOENT;
            }
            retried = validated = true;
        } else if (hd.token.len > 0 && hd.token.base[0] == NGTCP2_CRYPTO_TOKEN_MAGIC_REGULAR &&
                   new_token_valid(ep, &hd, peer, peer_len)) {
            validated = true;
            ep->count[H3_NEW_TOKENS_TAKEN]++;
        }
        if (!validated && wants_retry(ep)) {
            int sent = send_retry(ep, &hd, local, local_len, peer, peer_len);
            if (sent == 0 && !ep->config.retry)
                ep->count[H3_FLOOD_RETRIES]++;
            return sent;
        }
        conn = h3_conn_accept(ep, &hd, retried ? &odcid : NULL, validated, local, local_len, peer,
                              peer_len);
        if (conn == NULL)
            return -ENOENT;
    }
    h3_conn_input(conn, local, local_len, peer, peer_len, pkt, len, ecn);
    return 0;
}
