/*
 * http3.h: HTTP/3 over QUIC (ngtcp2, nghttp3, GnuTLS), socket-free: an
 * endpoint is fed the datagrams that arrive on its UDP socket and hands
 * the datagrams to send to an output callback, so that whatever owns the
 * socket (a worker's UDP listener, a test's in-memory wire) drives it.
 * Each request stream becomes a struct exchange on the pipeline, as an
 * HTTP/2 stream does.  docs/http3.md says what is done and what is not.
 */
#ifndef CORRAL_PROTO_HTTP3_H
#define CORRAL_PROTO_HTTP3_H

#include <corral.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct http_site;
struct h3_endpoint;
struct h3_conn;

/* Sends one datagram (or, with `gso_segment` > 0, `len` bytes of
 * datagrams of that size each but the last, for UDP GSO) from `local` to
 * `peer`.  The bytes are valid only during the call.  A send that fails
 * is a lost packet to QUIC: nothing is told back. */
typedef void (*h3_output_fn)(void *arg, const struct sockaddr *local, socklen_t local_len,
                             const struct sockaddr *peer, socklen_t peer_len, const uint8_t *data,
                             size_t len, size_t gso_segment);

/* How long a server connection ID is: 1 byte of version, 2 of the
 * owning worker's index, 1 of the generation tag, the rest random
 * (h3_endpoint.c). */
#define H3_CID_LEN 16

/* A certificate chain and its key, PEM files; `next`: the server's
 * other pairs (an RSA and an ECDSA one, say), or NULL.  All go into one
 * set of credentials, and GnuTLS offers one whose key suits the client's
 * signature algorithms. */
struct h3_certificate {
    const char *cert_file, *key_file;
    const struct h3_certificate *next;
    /* The file names hold $ssl_server_name: the pair is read for each
     * client's SNI name during its handshake (h3_sni_certs.c). */
    bool by_name;
};

struct h3_endpoint_config {
    const struct http_site *site; /* its vhosts, access log and limits */
    corral_loop *loop;            /* the worker's: its timers and clock */
    corral_worker *worker;        /* NULL on a bare loop */
    /* Written into every connection ID this endpoint issues, so that a
     * packet can be steered to its owner (docs/http3.md). */
    uint16_t worker_index;
    /* Written into every connection ID too (after the worker index), so
     * that a reload's next generation tells an older one's connections
     * from its own (h3_udp.c). */
    uint8_t generation;
    /* The server's certificate chain and key, PEM, as the TCP
     * listener's ssl_certificate and ssl_certificate_key. */
    const char *cert_file, *key_file;
    /* Per vhost of the site (NULL: cert_file and key_file for all): the
     * files whose certificate a client gets when its SNI names that vhost
     * (site_find_vhost(), as the TCP listens pick); a client without SNI
     * gets vhost 0's.  Vhosts with the same two files share one load. */
    const struct h3_certificate *vhost_certificates;
    h3_output_fn output;
    void *output_arg;
    /* Per request stream: response bytes queued and not yet acknowledged
     * beyond which the handler is told to wait (exchange_backed_up()),
     * and the request body window.  0: 64 KiB. */
    size_t stream_buffer_size;
    unsigned max_concurrent_streams; /* 0: 128 */
    uint64_t idle_timeout_ms;        /* 0: 60 s */
    /* A connection whose handshake has not completed by then is freed
     * (an Initial flood holds memory that long without Retry).  0:
     * ngtcp2's 10 s. */
    uint64_t handshake_timeout_ms;
    /* Datagrams of one flush that go to the same path with the same size
     * are given to `output` as one run (gso_segment > 0), up to 16, for
     * UDP GSO; false: one datagram per call. */
    bool gso;
    /* Address validation: a client Initial without a token is answered
     * with a Retry, and only one whose Retry token verifies (made by this
     * secret for its address, not older than retry_token_timeout_ms; 0:
     * 10 s) opens a connection; others are dropped and counted. */
    bool retry;
    uint64_t retry_token_timeout_ms;
    /* Without `retry`: a client Initial without a valid token is answered
     * with a Retry while this many connections of the endpoint are in
     * their handshake (an Initial flood), and opens a connection
     * otherwise.  0: never. */
    unsigned retry_threshold;
    /* How long a token sent in a NEW_TOKEN frame after a handshake
     * validates the client's address on its later connections (no
     * Retry, no amplification limit).  0: 10 minutes. */
    uint64_t new_token_timeout_ms;
    /* The key of Retry and NEW_TOKEN tokens, 32 bytes, shared by the endpoints of one
     * listen so that any worker verifies another's token; NULL: one of
     * the endpoint's own, at random. */
    const uint8_t *token_secret;
    /* The key of stateless reset tokens, 32 bytes, likewise. */
    const uint8_t *reset_secret;
    /* The key GnuTLS seals TLS session tickets with (H3_TICKET_KEY_LEN
     * bytes), likewise, so that a client resumes its session on any
     * worker, and after a reload with quic_host_key. */
    const uint8_t *ticket_key;
    /* 0-RTT (ssl_early_data): a client resuming a session may send
     * requests in early data; only GET and HEAD without a body are
     * served from it, others answered 425 (RFC 8470).  Replays are
     * refused by GnuTLS's anti-replay, whose table of the ClientHellos
     * seen in its window is `replay_store`'s. */
    bool early_data;
    /* With early_data: the replay record shared by the endpoints of one
     * listen (h3_replay_store_new()), so that a ClientHello replayed to
     * another worker is refused too, and this endpoint's worker in it
     * (< its workers); NULL: one of the endpoint's own. */
    struct h3_replay_store *replay_store;
    unsigned replay_worker;
    /* Stateless resets sent at most per second (each answers a packet of
     * a connection no longer known, and costs a token's HMAC); beyond,
     * such packets are dropped unanswered and counted.  0: 100. */
    unsigned max_resets_per_second;
    /* Connections kept in their closing or draining period (RFC 9000
     * 10.2: three PTOs after the close, their IDs answered with their
     * CONNECTION_CLOSE) at most; beyond, the oldest period ends early.
     * 0: 1024. */
    unsigned max_closing;
};

/* 0-RTT's record of the ClientHellos seen (h3_replay.c), for the
 * endpoints of `workers` workers (one listen's), with a GnuTLS
 * anti-replay object per worker made now: GnuTLS takes early data only
 * from tickets issued after its object was made, so it must predate
 * every endpoint's first ticket.  Returns 0, -EINVAL or -ENOMEM.  Freed
 * by h3_replay_store_free() once no endpoint uses it; an endpoint uses
 * its worker's part from its thread only. */
struct h3_replay_store;
int h3_replay_store_new(unsigned workers, struct h3_replay_store **out);
void h3_replay_store_free(struct h3_replay_store *store);

/* The token and stateless-reset keys (32 bytes each) from a host key's
 * bytes (quic_host_key: at least 32 of them), so that every worker and
 * every generation that reads the same file makes and accepts the same
 * tokens.  Returns 0, or -EINVAL for a key too short. */
int h3_host_key_derive(const uint8_t *key, size_t len, uint8_t token_secret[32],
                       uint8_t reset_secret[32]);

/* The ticket key from a host key's bytes, as h3_host_key_derive().
 * Returns 0, or -EINVAL for a key too short. */
#define H3_TICKET_KEY_LEN 64
int h3_host_key_ticket_key(const uint8_t *key, size_t len, uint8_t ticket_key[H3_TICKET_KEY_LEN]);

/* Makes an endpoint: loads the certificate and key (GnuTLS).  Returns 0,
 * -ENOMEM, or -EINVAL when the files do not load (logged).  Loop thread
 * only from then on; free with h3_endpoint_free(). */
int h3_endpoint_new(const struct h3_endpoint_config *config, struct h3_endpoint **out);

/* Closes every connection at once (their exchanges are aborted, no
 * CONNECTION_CLOSE is sent) and frees the endpoint. */
void h3_endpoint_free(struct h3_endpoint *ep);

/* A graceful stop or a reload: the endpoint takes no new connection; each
 * of its connections is sent HTTP/3's GOAWAY (a notice with the largest
 * ID, then, two RTTs on, the final one), finishes the requests it has
 * and then closes (CONNECTION_CLOSE, H3_NO_ERROR).  `done(arg)` runs once
 * none is left, at once if none is open; not if the endpoint is freed
 * before.  Loop thread. */
void h3_endpoint_drain(struct h3_endpoint *ep, void (*done)(void *arg), void *arg);

/* Sends every connection its CONNECTION_CLOSE (H3_NO_ERROR) and frees
 * it: the end of a drain's grace, or a stop without one. */
void h3_endpoint_close(struct h3_endpoint *ep);

/* A datagram that arrived from `peer` on `local`, with its ECN bits:
 * goes to the connection its destination connection ID names, or, for a
 * valid client Initial, to a new one.  Anything else is dropped.  Returns
 * 0 when a connection took it, -ENOENT when it was dropped. */
int h3_endpoint_input(struct h3_endpoint *ep, const struct sockaddr *local, socklen_t local_len,
                      const struct sockaddr *peer, socklen_t peer_len, const uint8_t *pkt,
                      size_t len, unsigned ecn);

/* The connections open on it. */
size_t h3_endpoint_conn_count(const struct h3_endpoint *ep);

/* The handshakes completed on it (ALPN h3 checked), since it was made. */
uint64_t h3_endpoint_handshakes(const struct h3_endpoint *ep);

/* Every QUIC counter, one line each: X(ID, KIND, metric name, help).
 * The first ones (to HANDED_TO_OLDER) are h3_udp.c's, counted per worker
 * as datagrams pass; the rest are an endpoint's (h3_endpoint_counters()),
 * which h3_udp.c copies per worker after each input.  /metrics sums each
 * over the workers and writes it with its name and help (KIND: a
 * counter, a gauge, or nanoseconds shown as seconds). */
#define H3_COUNTERS(X)                                                                             \
    X(DATAGRAMS_IN, H3_KIND_COUNTER, "corral_quic_datagrams_received_total",                       \
      "UDP datagrams read by the quic listens' sockets (each GRO segment counts).")                \
    X(DATAGRAMS_OUT, H3_KIND_COUNTER, "corral_quic_datagrams_sent_total",                          \
      "UDP datagrams the quic listens sent or queued for their sockets (a GSO run: each).")        \
    X(HANDED_OFF, H3_KIND_COUNTER, "corral_quic_handed_off_total",                                 \
      "Datagrams a worker read for a connection another worker owns (the client's address "        \
      "changed), passed to the owner.")                                                            \
    X(HANDED_IN, H3_KIND_COUNTER, "corral_quic_handed_in_total",                                   \
      "Datagrams a worker was passed by the worker that read them (its own connections').")        \
    X(HANDOFF_NS, H3_KIND_SECONDS, "corral_quic_handoff_delay_seconds_total",                      \
      "How long the datagrams handed off waited between the worker that read them and their "      \
      "owner, summed.")                                                                            \
    X(HANDED_TO_OLDER, H3_KIND_COUNTER, "corral_quic_handed_to_older_generation_total",            \
      "Datagrams a worker read for a connection open on an older generation (across a reload), "   \
      "passed to that generation's worker.")                                                       \
    X(HANDSHAKES, H3_KIND_COUNTER, "corral_quic_handshakes_total",                                 \
      "QUIC handshakes completed with ALPN h3.")                                                   \
    X(CONNECTIONS, H3_KIND_GAUGE, "corral_quic_connections", "QUIC connections open.")             \
    X(HANDSHAKING, H3_KIND_GAUGE, "corral_quic_handshakes_in_progress",                            \
      "QUIC connections in their handshake (quic_retry_threshold counts them per worker).")        \
    X(RETRIES, H3_KIND_COUNTER, "corral_quic_retries_total",                                       \
      "Retry packets sent to validate a client's address (quic_retry).")                           \
    X(FLOOD_RETRIES, H3_KIND_COUNTER, "corral_quic_flood_retries_total",                           \
      "Retry packets sent because a worker had quic_retry_threshold handshakes in progress (of "   \
      "corral_quic_retries_total).")                                                               \
    X(TOKENS_REFUSED, H3_KIND_COUNTER, "corral_quic_tokens_refused_total",                         \
      "Client Initials closed with INVALID_TOKEN for a Retry token that did not verify (forged, "  \
      "expired, from another address).")                                                           \
    X(NEW_TOKENS_SENT, H3_KIND_COUNTER, "corral_quic_new_tokens_sent_total",                       \
      "NEW_TOKEN tokens sent to clients after their handshake.")                                   \
    X(NEW_TOKENS_TAKEN, H3_KIND_COUNTER, "corral_quic_new_tokens_taken_total",                     \
      "Connections whose address a NEW_TOKEN token validated (no Retry, no amplification "         \
      "limit).")                                                                                   \
    X(AMPLIFICATION_LIMITED, H3_KIND_COUNTER, "corral_quic_amplification_limited_total",           \
      "QUIC connections that reached the 3x amplification limit (less than a full datagram of it " \
      "left) before their client's address was validated.")                                        \
    X(RESUMED, H3_KIND_COUNTER, "corral_quic_resumed_total",                                       \
      "QUIC handshakes that resumed a TLS session by its ticket.")                                 \
    X(EARLY_REQUESTS, H3_KIND_COUNTER, "corral_quic_early_requests_total",                         \
      "HTTP/3 requests served from 0-RTT early data (GET and HEAD without a body; "                \
      "ssl_early_data).")                                                                          \
    X(TOO_EARLY, H3_KIND_COUNTER, "corral_quic_too_early_total",                                   \
      "HTTP/3 requests in 0-RTT early data answered 425 Too Early (not replay-safe).")             \
    X(REPLAYS, H3_KIND_COUNTER, "corral_quic_early_data_replays_total",                            \
      "0-RTT ClientHellos refused early data as replays (per worker).")                            \
    X(RESETS, H3_KIND_COUNTER, "corral_quic_stateless_resets_total",                               \
      "Stateless resets sent for packets of connections no worker has.")                           \
    X(RESETS_LIMITED, H3_KIND_COUNTER, "corral_quic_stateless_resets_limited_total",               \
      "Packets of unknown connections left unanswered: over a worker's 100 stateless resets per "  \
      "second.")                                                                                   \
    X(VERSION_NEGOTIATIONS, H3_KIND_COUNTER, "corral_quic_version_negotiations_total",             \
      "Version Negotiation packets sent for Initials of a version other than QUIC v1.")            \
    X(CLOSING, H3_KIND_GAUGE, "corral_quic_closing_connections",                                   \
      "QUIC connections closed and in their closing or draining period (RFC 9000 10.2).")          \
    X(CLOSES_REPEATED, H3_KIND_COUNTER, "corral_quic_closes_repeated_total",                       \
      "CONNECTION_CLOSE datagrams sent again for packets of a connection in its closing period.")  \
    X(CLOSING_EVICTED, H3_KIND_COUNTER, "corral_quic_closing_evicted_total",                       \
      "Closing periods cut short: a worker's bound of closed connections kept was reached.")

enum h3_counter_kind { H3_KIND_COUNTER, H3_KIND_GAUGE, H3_KIND_SECONDS };

enum h3_counter {
#define H3_COUNTER_ID(id, kind, name, help) H3_##id,
    H3_COUNTERS(H3_COUNTER_ID)
#undef H3_COUNTER_ID
        H3_COUNTER_COUNT,
    /* The first of the endpoint's (h3_endpoint_counters()). */
    H3_FIRST_ENDPOINT_COUNTER = H3_HANDSHAKES
};

/* Each counter's kind, metric name and help, by enum h3_counter. */
struct h3_counter_info {
    enum h3_counter_kind kind;
    const char *name, *help;
};
extern const struct h3_counter_info h3_counter_info[H3_COUNTER_COUNT];

/* The endpoint's counters since it was made, into out[H3_FIRST_ENDPOINT_
 * COUNTER ...H3_COUNTER_COUNT) (the others are left as they are):
 * handshakes completed (ALPN h3), the connections open and in their
 * handshake now, Retry packets sent (FLOOD_RETRIES of them because
 * retry_threshold handshakes were in progress), client Initials closed
 * with INVALID_TOKEN for a Retry token that did not verify (forged,
 * expired, from another address), stateless resets sent and not sent
 * for the per-second limit, NEW_TOKEN tokens sent and taken back (a
 * connection whose address they validated), connections that reached
 * the 3x amplification limit before their client's address was
 * validated (less than a full datagram of it left after a flush),
 * handshakes that resumed a session by its ticket; 0-RTT: requests
 * served from early data, requests answered 425 (not replay-safe),
 * ClientHellos whose early data was refused as replays; Version
 * Negotiation packets sent (a client Initial of a version not spoken
 * here). */
void h3_endpoint_counters(const struct h3_endpoint *ep, uint64_t out[H3_COUNTER_COUNT]);

/* A datagram for `conn` (found by its connection ID): read, then what it
 * made the connection send goes out, and its timer is re-armed.  The
 * connection may be freed on return (closed, or drained). */
void h3_conn_input(struct h3_conn *conn, const struct sockaddr *local, socklen_t local_len,
                   const struct sockaddr *peer, socklen_t peer_len, const uint8_t *pkt, size_t len,
                   unsigned ecn);

/* Loads the PEM certificate chain and key as h3_endpoint_new() does, to
 * refuse a configuration before it serves.  Returns 0 or -EINVAL
 * (logged), -ENOMEM. */
int h3_credentials_check(const char *cert_file, const char *key_file);

/* h3_udp.c: HTTP/3 on a libcorral UDP listen (corral_server_listen_udp()
 * with h3_udp_handler and a struct h3_udp_site as its data): each worker
 * gets an endpoint from `config` (its site, certificate, key and limits;
 * the loop, worker, index and output are the worker's) on its first
 * datagram, which its socket's datagrams feed and whose output leaves by
 * that socket (with UDP GSO when the endpoint asks for it).  A datagram
 * the socket cannot take waits for it (corral_udp_wait_writable()), up to
 * 1 MiB per worker; beyond that it is dropped, as a lost packet.  A
 * graceful stop (on_stopping) drains the worker's endpoint
 * (h3_endpoint_drain()) and holds the worker (corral_worker_hold()) until
 * its connections are gone; the loop's end (on_stop: the grace is over)
 * closes those left (CONNECTION_CLOSE) and frees the endpoint. */
struct h3_udp_site;
/* Checks the certificate and key, and makes the site for `workers`
 * workers; `config`'s strings, vhost_certificates and site must outlive it (its secrets are
 * copied; NULL ones are made at random, one for all the workers).  Returns 0,
 * -EINVAL (logged) or -ENOMEM. */
int h3_udp_site_new(const struct h3_endpoint_config *config, unsigned workers,
                    struct h3_udp_site **out);
/* Frees it (NULL: nothing), once every worker's on_stop has run or the
 * server never started.  Any thread; a newer site no longer hands it
 * datagrams from then on. */
void h3_udp_site_free(struct h3_udp_site *site);

/* Makes `site` the successor of `previous` (the previous generation's site
 * on the same sockets), before `site`'s server starts: its connection IDs
 * carry the next generation tag, and a datagram its workers read for a
 * connection of `previous` (or of a site `previous` followed, still
 * draining) is handed to that site's worker of the index the ID names,
 * through the worker's post queue; that worker answers from its own
 * descriptor of the same socket.  Main thread. */
void h3_udp_site_follow(struct h3_udp_site *site, struct h3_udp_site *previous);

/* On its workers' stop, the connections close at once (CONNECTION_CLOSE)
 * instead of draining: nothing will read their datagrams any more (a
 * binary upgrade's new process took the sockets, or the reload dropped the
 * address).  Main thread, before the stop. */
void h3_udp_site_close_on_stop(struct h3_udp_site *site);
extern const struct corral_udp_handler h3_udp_handler;

/* A worker's counters, by enum h3_counter (H3_COUNTERS() says each). */
struct h3_udp_stats {
    uint64_t v[H3_COUNTER_COUNT];
};
/* Reads worker `index`'s counters; any thread.  Returns 0 or -EINVAL. */
int h3_udp_site_stats(const struct h3_udp_site *site, unsigned index, struct h3_udp_stats *out);

/* The worker index a server connection ID names, or -1 when `cid` is not
 * one this build's endpoints issue. */
int h3_endpoint_cid_worker(const uint8_t *cid, size_t len);

/* The generation tag of a server connection ID, or -1 as above. */
int h3_endpoint_cid_generation(const uint8_t *cid, size_t len);

/* The worker index a datagram's destination connection ID names (short
 * or long header), or -1: no ID of ours, or too short to hold one.  A
 * client's first Initial carries an ID of its own choosing, which names
 * a worker only by chance, the same one for each of its Initials. */
int h3_endpoint_packet_worker(const uint8_t *pkt, size_t len);

/* The generation tag a datagram's destination connection ID names, or -1
 * (as h3_endpoint_packet_worker()). */
int h3_endpoint_packet_generation(const uint8_t *pkt, size_t len);

/* h3_endpoint_packet_worker() as a classic BPF program for a listen's
 * SO_REUSEPORT group (corral_udp_options.steer_cbpf): a datagram goes to
 * the socket whose index in the group is the worker its connection ID
 * names, which is the worker's own socket when the group was made by one
 * listen in worker order; one with no ID of ours (a client's first
 * Initials) to the kernel's 4-tuple hash. */
struct sock_fprog;
extern const struct sock_fprog h3_endpoint_steer_program;

/* The same layout for libcorral's eBPF program (corral_udp_options.
 * steer_quic), which also spreads new connections by the wakeup mode. */
extern const struct corral_udp_quic_ids h3_endpoint_quic_ids;

#endif
