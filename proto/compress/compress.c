/*
 * compress.c: the compress module (compress.h): its phase handler, which
 * reads the request's Accept-Encoding once the location is known; its
 * header filter, which decides from the response head as nginx's gzip
 * filter does and codes the head; its body filter, which codes the body
 * piece by piece and writes what the coder holds when the producer pauses
 * (exchange_flush()); and the release of its stream.
 */
#include "proto/compress/compress.h"

#include "proto/compress/compress_codec.h"
#include "proto/compress/compress_gunzip.h"
#include "proto/compress/compress_head.h"
#include "proto/http/module.h"
#include "proto/http/regex.h"
#include "proto/http/vars.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The module's slot holds NULL (nothing to do), the request's facts in a
 * tagged word (bit 0 set: no allocation for a request whose response is
 * not coded), the response's compress_stream once one is coded, or its
 * struct gunzip (bit 0 clear, bit 1 set) once one is decoded. */
#define FACT_TAG    ((uintptr_t)1 << 0)
#define GUNZIP_TAG  ((uintptr_t)1 << 1)
#define FACT_HEAD   ((uintptr_t)1 << 7)
#define FACT_VIA    ((uintptr_t)1 << 8)
#define FACT_AUTH   ((uintptr_t)1 << 9)
#define FACT_OFF    ((uintptr_t)1 << 10) /* gzip_disable or gzip_http_version */
#define ORDER_SHIFT 1 /* then COMPRESS_CODINGS fields of 2 bits: coding + 1, best first */
_Static_assert(ORDER_SHIFT + 2 * COMPRESS_CODINGS <= 7 && COMPRESS_CODINGS < 4,
               "the order's fields fit below FACT_HEAD, each coding + 1 in 2 bits");

static struct exchange_filter compress_filter;

/* A gzip-coded response decoded (nginx's gunzip): its decoder, and the
 * end of the response when it came while the decoder held input back. */
struct gunzip {
    struct compress_gunzip *g;
    bool failed; /* the body is no gzip: the response was cut off */
    bool ending;
    char *trailers;
    size_t trailers_len;
};

static struct compress_stream *stream_of(const struct exchange *ex)
{
    uintptr_t v = (uintptr_t)exchange_ctx(ex, compress_module.slot);
    return (v & (FACT_TAG | GUNZIP_TAG)) ? NULL : (struct compress_stream *)v;
}

static struct gunzip *gunzip_of(const struct exchange *ex)
{
    uintptr_t v = (uintptr_t)exchange_ctx(ex, compress_module.slot);
    return (v & (FACT_TAG | GUNZIP_TAG)) == GUNZIP_TAG ? (struct gunzip *)(v & ~GUNZIP_TAG) : NULL;
}

static void compress_release(struct exchange *ex)
{
    struct gunzip *gz = gunzip_of(ex);
    if (gz != NULL) {
        compress_gunzip_free(gz->g);
        free(gz->trailers);
        free(gz);
    } else {
        compress_stream_free(stream_of(ex));
    }
    exchange_set_ctx(ex, compress_module.slot, NULL);
}

/* --------------------------------------------------------- the request */

/* Whether gzip_disable takes this User-Agent; a regex that gives up on a
 * crafted value takes it too: nothing is lost but the compression. */
static bool user_agent_disabled(const struct compress_built *built, const struct http_header *h)
{
    size_t ovector[2 * HTTP_REGEX_PAIRS];
    for (size_t i = 0; i < built->disable_count; i++)
        if (regex_match(built->disable[i], h->value.data, h->value.len, ovector) != 0)
            return true;
    return false;
}

/* Once the location is known: where some coding is on, the filter is on
 * (also for a client that accepts none: the response may still need its
 * Vary), with what the request says that the head will need. */
static int compress_phase(struct router_walk *w)
{
    struct exchange *ex = w->ex;
    compress_release(ex);
    const struct compress_built *built = http_module_built(ex, &compress_module);
    if (built == NULL || !built->on) {
        exchange_remove_filter(ex, &compress_filter);
        return ROUTER_DECLINED;
    }
    struct compress_accept accept;
    compress_accept_init(&accept);
    uintptr_t facts = FACT_TAG | (w->req.head ? FACT_HEAD : 0);
    /* gzip_http_version: too old a client gets its Vary, not a coding. */
    if (w->req.http10 && built->conf->http_version > 10)
        facts |= FACT_OFF;
    for (size_t i = 0; i < w->req.header_count; i++) {
        const struct http_header *h = &w->req.headers[i];
        if (http_str_equal_nocase(h->name, "accept-encoding"))
            compress_accept_parse(&accept, h->value.data, h->value.len);
        else if (http_str_equal_nocase(h->name, "via"))
            facts |= FACT_VIA;
        else if (http_str_equal_nocase(h->name, "authorization"))
            facts |= FACT_AUTH;
        else if (http_str_equal_nocase(h->name, "user-agent") && user_agent_disabled(built, h))
            facts |= FACT_OFF;
    }
    enum compress_coding order[COMPRESS_CODINGS];
    size_t n = compress_accept_order(&accept, order);
    assert(n <= COMPRESS_CODINGS);
    for (size_t i = 0; i < n; i++)
        facts |= (uintptr_t)(order[i] + 1) << (ORDER_SHIFT + 2 * i);
    exchange_set_ctx(ex, compress_module.slot, (void *)facts);
    exchange_add_filter(ex, &compress_filter);
    return ROUTER_DECLINED;
}

/* ----------------------------------------------------------- the head */

/* nginx's gzip_proxied (ngx_http_gzip_ok()): whether a request that came
 * through a proxy (Via) may get a coded response, by what the response
 * says of its caching. */
static bool proxied_allows(unsigned p, uintptr_t facts, const struct compress_head *h)
{
    if (!(facts & FACT_VIA))
        return true;
    if (p & COMPRESS_PROXIED_OFF)
        return false;
    if (p & COMPRESS_PROXIED_ANY)
        return true;
    if ((facts & FACT_AUTH) && (p & COMPRESS_PROXIED_AUTH))
        return true;
    if (h->expires)
        return (p & COMPRESS_PROXIED_EXPIRED) && h->expires_valid && h->expires_at < time(NULL);
    if (h->cache_control)
        return ((p & COMPRESS_PROXIED_NO_CACHE) && h->no_cache) ||
               ((p & COMPRESS_PROXIED_NO_STORE) && h->no_store) ||
               ((p & COMPRESS_PROXIED_PRIVATE) && h->private_cache);
    if ((p & COMPRESS_PROXIED_NO_LM) && h->last_modified)
        return false;
    if ((p & COMPRESS_PROXIED_NO_ETAG) && h->etag)
        return false;
    return true;
}

/* The codings this response may go out in, by what its head says: none
 * unless 200, 403 or 404 (nginx's list), not coded already (by the
 * handler, or by transfer codings from a backend), not no-transform;
 * then each coding that is on, whose types take its Content-Type and
 * whose min_length its length (when known) reaches. */
static unsigned eligible_codings(const struct compress_conf *conf, const struct exchange_head *head,
                                 const struct compress_head *h)
{
    if (head->status != 200 && head->status != 403 && head->status != 404)
        return 0;
    if (head->codings.len > 0 || h->encoded || h->no_transform)
        return 0;
    unsigned mask = 0;
    for (int c = 0; c < COMPRESS_CODINGS; c++) {
        const struct compress_coding_conf *k = &conf->coding[c];
        if (!k->on)
            continue;
        if (head->content_length >= 0 && (uint64_t)head->content_length < k->min_length)
            continue;
        if (!compress_conf_takes(k, h->content_type.data, h->content_type.len))
            continue;
        mask |= 1u << c;
    }
    return mask;
}

static void emit(void *arg, const char *data, size_t len)
{
    exchange_filter_write_next(arg, &compress_filter, data, len);
}

/* Passes `head` on with its lines as compress_head_write() makes them.
 * Returns false when out of memory: the head went on as it was, the body
 * to go the same way. */
static bool begin_changed(struct exchange *ex, const struct exchange_head *head,
                          enum compress_head_change change, const char *coding, bool vary)
{
    char small[1024];
    struct vars_buf lines;
    vars_buf_init(&lines, small, sizeof(small));
    compress_head_write(head->headers, head->headers_len, change, coding, vary, &lines);
    bool ok = !lines.failed;
    if (!ok) {
        compress_release(ex);
        exchange_remove_filter(ex, &compress_filter);
        exchange_filter_begin_next(ex, &compress_filter, head);
    } else {
        struct exchange_head coded = *head;
        coded.headers = lines.data;
        coded.headers_len = lines.len;
        if (change != COMPRESS_HEAD_SAME)
            coded.content_length = -1; /* the framer chunks it, or sends DATA frames */
        exchange_filter_begin_next(ex, &compress_filter, &coded);
    }
    vars_buf_free(&lines);
    return ok;
}

static void begin_with(struct exchange *ex, const struct exchange_head *head, const char *coding,
                       bool vary)
{
    (void)begin_changed(ex, head, coding != NULL ? COMPRESS_HEAD_CODED : COMPRESS_HEAD_SAME, coding,
                        vary);
}

/* ------------------------------------------------------------- gunzip */

/* Whether the client takes this response coded with gzip: nginx's
 * ngx_http_gzip_ok(), which its gunzip asks (Accept-Encoding, and
 * gzip_http_version, gzip_disable and gzip_proxied). */
static bool takes_gzip(const struct compress_conf *conf, uintptr_t facts,
                       const struct compress_head *h)
{
    if (facts & FACT_OFF)
        return false;
    bool named = false;
    for (size_t i = 0; i < COMPRESS_CODINGS; i++)
        named |= ((facts >> (ORDER_SHIFT + 2 * i)) & 3u) == COMPRESS_GZIP + 1u;
    return named && proxied_allows(conf->proxied, facts, h);
}

static bool gunzip_emit(void *arg, const char *data, size_t len)
{
    struct exchange *ex = arg;
    exchange_filter_write_next(ex, &compress_filter, data, len);
    return !exchange_backed_up(ex);
}

/* A response coded with gzip alone under gunzip: passed on as it is to a
 * client that takes gzip, decoded for one that does not.  Both get
 * `Vary: Accept-Encoding` under gzip_vary, as nginx's gunzip marks them
 * (r->gzip_vary).  Statuses without a body whose coding could be undone,
 * 206 (a part of the coded body) among them, go as they are. */
static void begin_gunzip(struct exchange *ex, const struct compress_conf *conf, uintptr_t facts,
                         const struct exchange_head *head, const struct compress_head *h)
{
    bool vary = conf->vary && !h->vary_listed;
    if (takes_gzip(conf, facts, h)) {
        exchange_remove_filter(ex, &compress_filter);
        compress_release(ex);
        begin_with(ex, head, NULL, vary);
        return;
    }
    compress_release(ex);
    struct gunzip *gz = NULL;
    if (!(facts & FACT_HEAD)) {
        gz = calloc(1, sizeof(*gz));
        if (gz != NULL)
            gz->g = compress_gunzip_new(conf->gunzip_piece, gunzip_emit, ex);
        if (gz == NULL || gz->g == NULL) { /* out of memory: cut off, never coded bytes as plain */
            free(gz);
            exchange_remove_filter(ex, &compress_filter);
            exchange_filter_begin_next(ex, &compress_filter, head);
            exchange_abort(ex);
            return;
        }
        assert(((uintptr_t)gz & GUNZIP_TAG) == 0);
        exchange_set_ctx(ex, compress_module.slot, (void *)((uintptr_t)gz | GUNZIP_TAG));
    } else {
        exchange_remove_filter(ex, &compress_filter); /* HEAD: the head GET would get */
    }
    if (!begin_changed(ex, head, COMPRESS_HEAD_DECODED, NULL, vary) && gz != NULL)
        exchange_abort(ex); /* its head went on coded, but the filter is gone */
}

/* The body is no gzip, or memory ran out: the client sees the response
 * cut off, and nothing more of it. */
static void gunzip_fail(struct exchange *ex, struct gunzip *gz)
{
    gz->failed = true;
    exchange_abort(ex);
}

static void gunzip_finish(struct exchange *ex, struct gunzip *gz, const char *trailers, size_t len)
{
    if (!compress_gunzip_complete(gz->g)) { /* cut off in a member */
        gunzip_fail(ex, gz);
        return;
    }
    exchange_filter_end_next(ex, &compress_filter, trailers, len);
}

static void write_gunzip(struct exchange *ex, struct gunzip *gz, const char *data, size_t len)
{
    if (!gz->failed && !gz->ending && compress_gunzip_write(gz->g, data, len) != 0)
        gunzip_fail(ex, gz);
}

static void end_gunzip(struct exchange *ex, struct gunzip *gz, const char *trailers, size_t len)
{
    if (gz->failed || gz->ending)
        return;
    if (!compress_gunzip_holds(gz->g)) {
        gunzip_finish(ex, gz, trailers, len);
        return;
    }
    /* The output is backed up: the end follows what is held, on drain. */
    gz->ending = true;
    if (len > 0) {
        gz->trailers = malloc(len);
        if (gz->trailers == NULL) {
            gunzip_fail(ex, gz);
            return;
        }
        memcpy(gz->trailers, trailers, len);
        gz->trailers_len = len;
    }
}

static bool drain_gunzip(struct exchange *ex, const struct exchange_filter *self)
{
    (void)self;
    struct gunzip *gz = gunzip_of(ex);
    if (gz == NULL)
        return true;
    if (gz->failed) /* cut off: the abort is under way */
        return false;
    if (!compress_gunzip_holds(gz->g))
        return true;
    if (compress_gunzip_write(gz->g, NULL, 0) != 0) {
        gunzip_fail(ex, gz);
        return false;
    }
    if (compress_gunzip_holds(gz->g))
        return false;
    if (gz->ending) {
        gunzip_finish(ex, gz, gz->trailers != NULL ? gz->trailers : "", gz->trailers_len);
        return false;
    }
    return true;
}

static void begin_compressing(struct exchange *ex, const struct exchange_filter *self,
                              const struct exchange_head *head)
{
    uintptr_t facts = (uintptr_t)exchange_ctx(ex, compress_module.slot);
    const struct compress_built *built = http_module_built(ex, &compress_module);
    if (head->status < 200 || !(facts & FACT_TAG) || built == NULL) {
        /* interim (the final head comes later), or a second head */
        exchange_filter_begin_next(ex, self, head);
        return;
    }
    const struct compress_conf *conf = built->conf;
    struct compress_head h;
    compress_head_read(head->headers, head->headers_len, &h);
    if (conf->gunzip && h.gzip && head->codings.len == 0 && head->status != 204 &&
        head->status != 206 && head->status != 304) {
        begin_gunzip(ex, conf, facts, head, &h);
        return;
    }
    unsigned eligible = eligible_codings(conf, head, &h);
    /* From here on the filter has a body to code or nothing more to do. */
    int chosen = -1;
    if (eligible != 0 && !(facts & FACT_OFF) && proxied_allows(conf->proxied, facts, &h))
        for (size_t i = 0; i < COMPRESS_CODINGS && chosen < 0; i++) {
            unsigned c = (unsigned)(facts >> (ORDER_SHIFT + 2 * i)) & 3u;
            if (c != 0 && (eligible & (1u << (c - 1))))
                chosen = (int)c - 1;
        }
    /* The response varies with Accept-Encoding wherever it could be
     * coded, for this client or not (nginx's gzip_vary). */
    bool vary = eligible != 0 && conf->vary && !h.vary_listed;
    if (chosen < 0 || (facts & FACT_HEAD)) {
        /* HEAD gets the head GET would, with no body to code. */
        exchange_remove_filter(ex, self);
        compress_release(ex);
        if (chosen < 0 && !vary)
            exchange_filter_begin_next(ex, self, head);
        else
            begin_with(ex, head, chosen >= 0 ? compress_coding_name(chosen) : NULL, vary);
        return;
    }
    const struct compress_codec *codec = compress_codec_of((enum compress_coding)chosen);
    struct compress_stream *s =
        compress_stream_new(codec, conf->coding[chosen].level, head->content_length, emit, ex);
    if (s == NULL) { /* out of memory: sent as it is */
        exchange_remove_filter(ex, self);
        compress_release(ex);
        exchange_filter_begin_next(ex, self, head);
        return;
    }
    exchange_set_ctx(ex, compress_module.slot, s);
    begin_with(ex, head, compress_coding_name(chosen), vary);
}

/* ----------------------------------------------------------- the body */

static void write_compressed(struct exchange *ex, const struct exchange_filter *self,
                             const char *data, size_t len)
{
    struct compress_stream *s = stream_of(ex);
    if (s == NULL) {
        struct gunzip *gz = gunzip_of(ex);
        if (gz != NULL)
            write_gunzip(ex, gz, data, len);
        else
            exchange_filter_write_next(ex, self, data, len);
        return;
    }
    /* A failure (out of memory) shows at the end: the response is cut off. */
    (void)compress_stream_write(s, data, len, COMPRESS_RUN);
}

static void flush_compressed(struct exchange *ex, const struct exchange_filter *self)
{
    struct compress_stream *s = stream_of(ex);
    if (s != NULL)
        (void)compress_stream_write(s, NULL, 0, COMPRESS_FLUSH);
    exchange_filter_flush_next(ex, self);
}

static void end_compressed(struct exchange *ex, const struct exchange_filter *self,
                           const char *trailers, size_t len)
{
    struct compress_stream *s = stream_of(ex);
    if (s == NULL) {
        struct gunzip *gz = gunzip_of(ex);
        if (gz != NULL)
            end_gunzip(ex, gz, trailers, len);
        else
            exchange_filter_end_next(ex, self, trailers, len);
        return;
    }
    int err = compress_stream_write(s, NULL, 0, COMPRESS_END);
    compress_release(ex); /* its memory goes now, not with the exchange */
    if (err != 0) {
        exchange_abort(ex);
        return;
    }
    exchange_filter_end_next(ex, self, trailers, len);
}

static struct exchange_filter compress_filter = {
    .name = "compress",
    .begin = begin_compressing,
    .write = write_compressed,
    .end = end_compressed,
    .flush = flush_compressed,
    .drain = drain_gunzip,
};

unsigned compress_http_version(const struct exchange *ex)
{
    const struct compress_built *built = http_module_built(ex, &compress_module);
    return built != NULL ? built->conf->http_version : 11;
}

static const struct http_phase_handler compress_phases[] = {
    {ROUTER_FIND_LOCATION, compress_phase},
};

struct http_module compress_module = {
    .name = "compress",
    .conf =
        {
            .name = "compress",
            .directives = compress_directives,
            .size = sizeof(struct compress_conf),
            .init = compress_conf_init,
            .merge = compress_conf_merge,
            .free = compress_conf_free,
        },
    .build = compress_conf_build,
    .slots = 1,
    .phases = compress_phases,
    .phase_count = 1,
    .filter = &compress_filter,
    .release = compress_release,
    .release_on_redirect = true,
};
