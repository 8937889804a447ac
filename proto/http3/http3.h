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
 * owning worker's index, the rest random (h3_endpoint.c). */
#define H3_CID_LEN 16

/* A certificate chain and its key, PEM files. */
struct h3_certificate {
    const char *cert_file, *key_file;
};

struct h3_endpoint_config {
    const struct http_site *site; /* its vhosts, access log and limits */
    corral_loop *loop;            /* the worker's: its timers and clock */
    corral_worker *worker;        /* NULL on a bare loop */
    /* Written into every connection ID this endpoint issues, so that a
     * packet can be steered to its owner (docs/http3.md). */
    uint16_t worker_index;
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
    /* The key of Retry tokens, 32 bytes, shared by the endpoints of one
     * listen so that any worker verifies another's token; NULL: one of
     * the endpoint's own, at random. */
    const uint8_t *token_secret;
    /* The key of stateless reset tokens, 32 bytes, likewise. */
    const uint8_t *reset_secret;
};

/* The token and stateless-reset keys (32 bytes each) from a host key's
 * bytes (quic_host_key: at least 32 of them), so that every worker and
 * every generation that reads the same file makes and accepts the same
 * tokens.  Returns 0, or -EINVAL for a key too short. */
int h3_host_key_derive(const uint8_t *key, size_t len, uint8_t token_secret[32],
                       uint8_t reset_secret[32]);

/* Makes an endpoint: loads the certificate and key (GnuTLS).  Returns 0,
 * -ENOMEM, or -EINVAL when the files do not load (logged).  Loop thread
 * only from then on; free with h3_endpoint_free(). */
int h3_endpoint_new(const struct h3_endpoint_config *config, struct h3_endpoint **out);

/* Closes every connection at once (their exchanges are aborted, no
 * CONNECTION_CLOSE is sent) and frees the endpoint. */
void h3_endpoint_free(struct h3_endpoint *ep);

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

/* Retry packets sent, client Initials dropped for a token that did not
 * verify (forged, expired, from another address), and stateless resets
 * sent, since it was made. */
struct h3_endpoint_counters {
    uint64_t sent, refused, resets;
};
void h3_endpoint_counters(const struct h3_endpoint *ep, struct h3_endpoint_counters *out);

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
 * 1 MiB per worker; beyond that it is dropped, as a lost packet.  The
 * loop's end (on_stop) frees the worker's endpoint and its connections. */
struct h3_udp_site;
/* Checks the certificate and key, and makes the site for `workers`
 * workers; `config`'s strings, vhost_certificates and site must outlive it (its secrets are
 * copied; NULL ones are made at random, one for all the workers).  Returns 0,
 * -EINVAL (logged) or -ENOMEM. */
int h3_udp_site_new(const struct h3_endpoint_config *config, unsigned workers,
                    struct h3_udp_site **out);
/* Frees it (NULL: nothing), once every worker's on_stop has run or the
 * server never started. */
void h3_udp_site_free(struct h3_udp_site *site);
extern const struct corral_udp_handler h3_udp_handler;

/* A worker's counters.  Hand-offs: datagrams its socket read whose connection ID
 * names another worker of the listen (the kernel hashes the 4-tuple, so
 * a client whose address changed lands anywhere), passed to that worker
 * through its post queue; and datagrams it was passed. */
struct h3_udp_stats {
    uint64_t handed_off, handed_in;
    uint64_t handoff_ns;    /* how long the datagrams handed in waited for this worker, summed */
    uint64_t datagrams_in;  /* read by the worker's socket (each GRO segment counts) */
    uint64_t datagrams_out; /* given to the socket, or waiting for it (a GSO run: each) */
    uint64_t handshakes;    /* completed on the worker's endpoint */
    uint64_t connections;   /* open on it now */
    uint64_t retries_sent, tokens_refused, resets_sent; /* h3_endpoint_counters() */
};
/* Reads worker `index`'s counters; any thread.  Returns 0 or -EINVAL. */
int h3_udp_site_stats(const struct h3_udp_site *site, unsigned index, struct h3_udp_stats *out);

/* The worker index a server connection ID names, or -1 when `cid` is not
 * one this build's endpoints issue. */
int h3_endpoint_cid_worker(const uint8_t *cid, size_t len);

/* The worker index a datagram's destination connection ID names (short
 * or long header), or -1: no ID of ours, or too short to hold one.  A
 * client's first Initial carries an ID of its own choosing, which names
 * a worker only by chance, the same one for each of its Initials. */
int h3_endpoint_packet_worker(const uint8_t *pkt, size_t len);

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
