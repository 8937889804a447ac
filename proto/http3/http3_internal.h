/*
 * http3_internal.h: what the HTTP/3 files share: the endpoint (its
 * connection-ID table and TLS credentials, h3_endpoint.c), the QUIC
 * connection with its nghttp3 session (h3_conn.c) and the request streams
 * as exchanges (h3_stream.c).
 */
#ifndef CORRAL_PROTO_HTTP3_INTERNAL_H
#define CORRAL_PROTO_HTTP3_INTERNAL_H

#include "proto/http/exchange.h"
#include "proto/http/fields.h"
#include "proto/http/site.h"
#include "proto/http3/http3.h"

#include <gnutls/gnutls.h>
#include <nghttp3/nghttp3.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include <stdint.h>

/* A connection in its closing or draining period (h3_closing.c). */
struct h3_closing {
    struct h3_closing *prev, *next; /* the endpoint's, oldest first */
    uint64_t expires;               /* h3_conn_now(): three PTOs after the close */
    uint64_t packets;               /* received for it since */
    size_t len;                     /* its CONNECTION_CLOSE datagram's; 0: drop them */
    uint8_t pkt[];
};

/* Records kept per endpoint at most (config.max_closing's default): the
 * oldest goes first beyond. */
#define H3_CLOSING_MAX 1024

/* One entry of the endpoint's table: a connection ID and its owner, an
 * open connection or (conn NULL) a closed one's record. */
struct h3_cid_entry {
    struct h3_cid_entry *next; /* in its bucket */
    struct h3_conn *conn;
    struct h3_closing *closing;
    ngtcp2_cid cid;
};

#define H3_CID_BUCKETS 1024 /* a power of two */

struct h3_endpoint {
    struct h3_endpoint_config config;
    const struct http_site *site;
    gnutls_certificate_credentials_t cred; /* vhost 0's, for a client without SNI */
    /* Per vhost (NULL: `cred` for all), some shared: creds[v] is owned
     * when owned[v]. */
    gnutls_certificate_credentials_t *creds;
    bool *owned;
    uint8_t reset_secret[32]; /* for stateless reset tokens */
    struct h3_cid_entry *buckets[H3_CID_BUCKETS];
    struct h3_conn *conns; /* open ones */
    size_t conn_count;
    /* Its counters, by enum h3_counter (the endpoint's, from
     * H3_FIRST_ENDPOINT_COUNTER; the gauges are read when asked). */
    uint64_t count[H3_COUNTER_COUNT];
    uint8_t token_secret[32]; /* config.token_secret's, or random */
    /* h3_endpoint_drain(): no new connection; `drained` once none is left. */
    bool draining;
    void (*drained)(void *arg);
    void *drained_arg;
    corral_timer *drain_timer;     /* the GOAWAY stages' */
    size_t handshaking;            /* connections whose handshake has not completed */
    struct h3_sni_cred *sni_creds; /* read by SNI name (h3_sni_certs.c) */
    uint64_t sni_clock;
    struct h3_closing *closing_head, *closing_tail; /* oldest first */
    size_t closing_count;
    uint8_t ticket_key[H3_TICKET_KEY_LEN]; /* config.ticket_key's, or random */
    gnutls_datum_t ticket_datum;           /* points at it */
    /* With early_data: GnuTLS's anti-replay, its worker's of the
     * store (config.replay_store, or one of its own when owned). */
    gnutls_anti_replay_t anti_replay;
    struct h3_replay_store *replay_store;
    bool owns_replay_store;
    uint64_t reset_second; /* the second the count below is of */
    unsigned resets_in_second;
};

/* Makes a server connection ID (H3_CID_LEN bytes) naming the endpoint's
 * worker, and its stateless reset token when `token` is not NULL.
 * Returns 0 or -1 (no randomness). */
int h3_endpoint_new_cid(struct h3_endpoint *ep, ngtcp2_cid *cid, uint8_t *token);
/* Files `cid` as `conn`'s.  Returns 0 or -ENOMEM. */
int h3_endpoint_add_cid(struct h3_endpoint *ep, const ngtcp2_cid *cid, struct h3_conn *conn);
/* Takes `cid` out of the table (nothing if it is not there). */
void h3_endpoint_remove_cid(struct h3_endpoint *ep, const ngtcp2_cid *cid);
/* The credentials for a client whose SNI is `name` (`len` bytes, a
 * NUL after them): those of the vhost the name picks, or those read for
 * the name when the vhost's certificate is named by it (held in *held
 * then, until released). */
gnutls_certificate_credentials_t h3_endpoint_credentials(struct h3_endpoint *ep, const char *name,
                                                         size_t len, struct h3_sni_cred **held);
/* Makes a NEW_TOKEN token for a client at `peer` (counted as sent).
 * Returns its length, or -1. */
int h3_endpoint_new_token(struct h3_endpoint *ep, const struct sockaddr *peer, socklen_t peer_len,
                          uint8_t token[NGTCP2_CRYPTO_MAX_REGULAR_TOKENLEN]);
/* Takes every ID of `conn` out, or, once it has a closing record
 * (conn->closing), files them as the record's. */
void h3_endpoint_remove_conn(struct h3_endpoint *ep, struct h3_conn *conn);
/* Takes every ID of a closing record out. */
void h3_endpoint_remove_closing(struct h3_endpoint *ep, const struct h3_closing *rec);

/* h3_replay.c */
/* The anti-replay object of `worker` in the store, its replays counted
 * on `ep` from now on (NULL: on none); NULL for a worker past the
 * store's. */
gnutls_anti_replay_t h3_replay_store_attach(struct h3_replay_store *store, unsigned worker,
                                            struct h3_endpoint *ep);

/* h3_sni_certs.c */
/* Credentials cached per endpoint at most; the least recently taken go. */
#define H3_SNI_CACHED 64
/* The credentials of vhost `vhost`'s by-name pairs (`pairs`, its list)
 * for the SNI name `name`: from the endpoint's cache, or read now.  The
 * caller holds them (*held) until it releases them.  NULL (logged) when
 * the name is unsafe or its files do not load. */
gnutls_certificate_credentials_t h3_sni_certs_get(struct h3_endpoint *ep, size_t vhost,
                                                  const struct h3_certificate *pairs,
                                                  const char *name, struct h3_sni_cred **held);
/* Lets go of credentials held (NULL: nothing). */
void h3_sni_certs_release(struct h3_sni_cred *c);
/* Empties the endpoint's cache (the connections' stay theirs). */
void h3_sni_certs_free_all(struct h3_endpoint *ep);

/* h3_closing.c */
/* `conn`, about to be freed, enters its closing period with the
 * CONNECTION_CLOSE datagram it sent (`len` bytes), or its draining
 * period (`len` 0: the peer closed).  Its IDs lead to the record from
 * h3_conn_free() on, for three PTOs. */
void h3_closing_begin(struct h3_conn *conn, const uint8_t *pkt, size_t len);
/* A datagram from `peer` for a record's ID: its CONNECTION_CLOSE again,
 * at a falling rate, or nothing.  Returns false when the record had
 * expired (it is freed: the datagram is as one of no connection). */
bool h3_closing_input(struct h3_endpoint *ep, struct h3_closing *rec, const struct sockaddr *local,
                      socklen_t local_len, const struct sockaddr *peer, socklen_t peer_len);
/* Frees the records whose period is over by `now` (oldest first). */
void h3_closing_reap(struct h3_endpoint *ep, uint64_t now);
/* Frees every record (the endpoint goes). */
void h3_closing_free_all(struct h3_endpoint *ep);
/* A connection of it was freed: tells a drain's `done` once none is left. */
void h3_endpoint_conn_gone(struct h3_endpoint *ep);

/* A growable byte buffer read from its front: at first, when `data` is
 * not NULL, storage inside its owner's record; grown into small_mem's. */
struct h3_buf {
    uint8_t *data;
    size_t off, len, cap; /* unread bytes: data[off, off + len) */
    bool grown;           /* data is small_mem's, not the owner's storage */
};

/* The request head's bytes and field spans that a stream record holds
 * itself: a larger head moves into allocated blocks.  Enough for the
 * pseudo-headers and a dozen short fields. */
#define H3_HEAD_INLINE   512
#define H3_FIELDS_INLINE 16

/* A piece of a response body handed to nghttp3, which keeps pointing into
 * it until the peer acknowledges it (nghttp3 0.8 does not copy). */
struct h3_chunk {
    struct h3_chunk *next;
    size_t len;
    uint8_t data[];
};

/* The request head's size (RFC 9114 4.2.2: names, values and 32 each)
 * beyond which it is answered 431, as SETTINGS_MAX_FIELD_SECTION_SIZE
 * tells the client. */
#define H3_MAX_FIELD_SECTION (64 * 1024)

/* One request stream, one exchange. */
struct h3_stream {
    struct exchange base; /* what handlers get; base.conn is its h3_conn's */
    struct h3_stream *prev, *next;
    int64_t id;
    unsigned number; /* of the connection's requests, from 1 */
    const struct http_vhost *vhost;
    const struct http_handler *handler;
    /* The request head: names and values back to back, and their spans;
     * only until on_request. */
    struct h3_buf head;
    struct http_field_ref *fields;
    size_t field_count, field_cap, head_size;
    bool head_refused; /* over the limits: 431 */
    bool handler_owns; /* on_request ran; neither the end nor on_abort yet */
    bool request_done; /* the client's FIN */
    bool body_paused;
    bool body_end_delivered;
    bool body_dropped;
    struct h3_buf in; /* body bytes the handler has not taken (paused) */
    uint64_t body_received;
    bool response_started, response_body, response_done, head_method;
    bool was_backed_up; /* on_drain is owed once the output drains */
    bool data_blocked;  /* the reader said WOULDBLOCK: resume on new data */
    unsigned status;
    /* The response body: chunks handed to nghttp3 or waiting for it.
     * `unsent` is the first not handed out; `unacked` counts every byte
     * still held. */
    struct h3_chunk *chunks, *unsent, *last;
    size_t unacked, acked_in_first;
    char *trailers; /* CRLF lines to send after the body, or NULL */
    size_t trailers_len;
    uint64_t started_ns;
    char *log_fields;
    struct access_log *log;
    /* Last, so that a new record is zeroed only up to here: the storage
     * of `head` and `fields` while they fit. */
    struct http_field_ref fields_inline[H3_FIELDS_INLINE];
    uint8_t head_inline[H3_HEAD_INLINE];
};

static inline struct h3_stream *h3_stream_of(const struct exchange *ex)
{
    return (struct h3_stream *)ex;
}
_Static_assert(offsetof(struct h3_stream, base) == 0, "h3_stream_of() casts");

struct h3_conn {
    /* First, so that a handler's ex->conn leads back here. */
    struct http_conn c;
    struct http_conn_datagram dgram;
    struct h3_endpoint *ep;
    struct h3_conn *prev, *next; /* the endpoint's */
    ngtcp2_conn *quic;
    nghttp3_conn *h3;
    gnutls_session_t tls;
    ngtcp2_crypto_conn_ref conn_ref;
    ngtcp2_cid client_dcid; /* the client's first destination ID, filed too */
    corral_timer *timer;
    uint64_t timer_expiry; /* the ngtcp2 expiry it is armed for; UINT64_MAX: not armed */
    struct h3_stream *streams;
    size_t stream_count;
    unsigned streams_begun;
    ngtcp2_connection_close_error ccerr; /* what its CONNECTION_CLOSE says */
    struct h3_closing *closing;          /* its record, once it has closed */
    struct h3_sni_cred *sni_cred;        /* the credentials read for its SNI name, held */
    bool flush_scheduled;                /* a flush deferred to the loop's turn */
    bool gone;                           /* freed but for the struct, which that flush frees */
    bool listed;                         /* in the endpoint's list */
    bool closed;      /* failed or asked to close: closed and freed at the flush */
    bool in_input;    /* inside h3_conn_input(): it flushes on return */
    bool drains_owed; /* some stream's output drained: on_drain to deliver */
    /* The endpoint drains: 1 once the GOAWAY notice (the largest ID) is
     * queued, 2 once the final GOAWAY is; at 2 the connection closes when
     * its last request stream has ended. */
    unsigned goaway;
    bool handshaking; /* counted in ep->handshaking */
    /* Until the client's address is validated (a token, a Handshake
     * packet from it, the handshake's end): the bytes it sent and we
     * sent, to see the 3x amplification limit ngtcp2 enforces reached
     * (it does not say so). */
    bool validated, amplification_limited;
    uint64_t unvalidated_in, unvalidated_out;
    /* The name its client sent by SNI (dgram.server_name points here once
     * there is one), as received: at most 255 bytes, no NUL among them. */
    char server_name[256];
    size_t max_udp; /* of a datagram it sends */
};

static inline struct h3_conn *h3_stream_conn(const struct h3_stream *st)
{
    return (struct h3_conn *)st->base.conn;
}

/* h3_conn.c */
/* Sends what the connection has to send: at once inside input, else at
 * the end of the loop's turn. */
void h3_conn_schedule(struct h3_conn *conn);
/* The connection's clock for ngtcp2. */
uint64_t h3_conn_now(void);
/* Makes a connection for a client's Initial; `odcid`: the ID of the
 * client's first Initial its Retry token carried, or NULL without Retry;
 * `validated`: its token (Retry or NEW_TOKEN) proved its address, which
 * lifts the amplification limit.  Returns it or NULL. */
struct h3_conn *h3_conn_accept(struct h3_endpoint *ep, const ngtcp2_pkt_hd *hd,
                               const ngtcp2_cid *odcid, bool validated,
                               const struct sockaddr *local, socklen_t local_len,
                               const struct sockaddr *peer, socklen_t peer_len);
/* Frees it at once: exchanges aborted, IDs out of the table. */
void h3_conn_free(struct h3_conn *conn);
/* Sends its CONNECTION_CLOSE (H3_NO_ERROR once HTTP/3 is up), then frees
 * it. */
void h3_conn_close_now(struct h3_conn *conn);
/* Moves its GOAWAY one stage on (h3_conn.goaway) and sends it.  Returns
 * true once the final GOAWAY is queued. */
bool h3_conn_goaway(struct h3_conn *conn);

/* h3_stream.c */
extern const struct exchange_ops h3_exchange_ops;
/* nghttp3's callbacks: request heads, bodies, acknowledgements. */
extern const nghttp3_callbacks h3_stream_callbacks;
/* Frees the stream, telling its handler first if it still holds it. */
void h3_stream_free(struct h3_stream *st);
/* Calls on_drain of the streams whose output fell below the mark. */
void h3_stream_drains(struct h3_conn *conn);

#endif
