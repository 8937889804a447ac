/*
 * cache.c: the cache module (cache.h): its phase handler (look up, serve
 * a hit from the entry's file by sendfile where the framer can, as the
 * static module does), its store filter (a miss's response into a
 * temporary file, then renamed and indexed), $upstream_cache_status.
 */
#include "proto/cache/cache.h"

#include "proto/cache/cache_conf.h"
#include "proto/cache/cache_file.h"
#include "proto/cache/cache_hot.h"
#include "proto/cache/cache_key.h"
#include "proto/cache/cache_policy.h"
#include "proto/http/module.h"
#include "proto/http/subrequest.h"
#include "proto/http/vars.h"
#include "proto/policy/add_header.h"
#include "proto/static/static_cond.h"
#include "proto/static/static_range.h"
#include "proto/static/static_send.h"
#include "proto/thread_exit.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define KEY_MAX     4096 /* a longer key is not cached */
#define VARIANT_MAX 2048 /* nor a longer set of Vary values */
#define READ_FIRST  4096 /* what a hit reads first: most headers fit */

static struct exchange_filter cache_filter;

/* A miss being stored, in the module's second slot. */
struct cache_store {
    const struct cache_loc *loc;
    uint8_t id[CACHE_ID_LEN]; /* the key's */
    char *key;
    size_t key_len;
    char *req_block; /* the request's copy, for Vary's values */
    struct http_request req;
    struct http_header *headers; /* what the proxy forwards: no Range, no If-* */
    bool authorization;
    bool storing;
    bool locked; /* it holds the key's proxy_cache_lock */
    struct cache_zone *zone;
    /* The stale entry there is, served instead of an error where
     * proxy_cache_use_stale or its stale-if-error says so. */
    bool has_stale;
    uint8_t stale_id[CACHE_ID_LEN];
    struct cache_entry_info stale;
    int stale_fd;      /* serving it: the backend's body is dropped */
    bool revalidating; /* its validators went to the backend */
    /* A background update's (proxy_cache_background_update): nobody
     * reads its response, so a stale entry is never replayed into it. */
    bool background;
    char *validators; /* "If-None-Match: ...\0If-Modified-Since: ...": values kept */
    uint64_t stale_off, stale_end;
    int fd;
    char temp[PATH_MAX];
    char *strings; /* key, vary, variant and head, which `meta` points into */
    struct cache_file_meta meta;
    uint8_t final_id[CACHE_ID_LEN];
    bool varies;
    uint64_t body_len;
    uint32_t crc;
    int64_t content_length;
};

static unsigned status_slot(void)
{
    return cache_module.slot;
}

static unsigned store_slot(void)
{
    return cache_module.slot + 1;
}

/* A request waiting for another's fetch of its key (proxy_cache_lock),
 * in the module's third slot. */
struct cache_wait {
    struct cache_waiter w;
    struct exchange *ex;
    struct cache_zone *zone;
    char *req_block; /* the request, kept for router_resume() */
    struct http_request req;
    corral_timer *timer; /* proxy_cache_lock_timeout */
    uint64_t deadline_ms;
    bool waiting; /* queued, or its wake posted */
    bool gave_up; /* the timeout passed: fetched, not stored */
};

static unsigned wait_slot(void)
{
    return cache_module.slot + 2;
}

static void set_status(struct exchange *ex, enum cache_status s)
{
    exchange_set_ctx(ex, status_slot(), (void *)(uintptr_t)s);
}

static void count(struct cache_zone *zone, enum cache_status s)
{
    struct cache_zone_counters *c = cache_zone_counters(zone);
    atomic_uint_fast64_t *n = NULL;
    switch (s) {
    case CACHE_STATUS_HIT: n = &c->hits; break;
    case CACHE_STATUS_MISS: n = &c->misses; break;
    case CACHE_STATUS_EXPIRED: n = &c->expired; break;
    case CACHE_STATUS_BYPASS: n = &c->bypass; break;
    case CACHE_STATUS_STALE: n = &c->stale; break;
    case CACHE_STATUS_UPDATING: n = &c->updating; break;
    case CACHE_STATUS_REVALIDATED: n = &c->revalidated; break;
    default: return;
    }
    atomic_fetch_add_explicit(n, 1, memory_order_relaxed);
}

/* Whether one of `list`'s values is neither empty nor "0" (nginx's
 * proxy_cache_bypass and proxy_no_cache). */
static bool any_condition(const struct vars_template *const *list, size_t n, struct vars_ctx *ctx)
{
    for (size_t i = 0; i < n; i++) {
        char buf[2];
        size_t len = vars_eval_into(list[i], ctx, buf, sizeof(buf));
        if (len > 0 && !(len == 1 && buf[0] == '0'))
            return true;
    }
    return false;
}

static const struct http_header *find_header(const struct http_request *req, const char *name)
{
    for (size_t i = 0; i < req->header_count; i++)
        if (http_str_equal_nocase(req->headers[i].name, name))
            return &req->headers[i];
    return NULL;
}

/* ------------------------------------------------------------ the hit */

static void hit_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)ex, (void)req, (void)data; /* the phase handler answers */
}

static const struct http_handler hit_handler = {
    .name = "cache",
    .on_request = hit_on_request,
    .on_drain = static_send_on_drain,
    .on_abort = static_send_on_abort,
};

static void log_once(struct cache_zone *zone, const char *what, const char *path, int err)
{
    struct cache_zone_counters *c = cache_zone_counters(zone);
    if (!atomic_exchange(&c->error_logged, true))
        corral_log(CORRAL_LOG_ERROR,
                   "cache zone \"%s\": %s \"%s\": %s (logged once; such responses are served "
                   "uncached)",
                   cache_zone_name(zone), what, path, strerror(err));
}

/* The location's add_header lines on the answer, as the proxy puts them
 * on a miss's (proto/policy/add_header.h), with the values that read the
 * request evaluated now: the caller begins the response before the
 * request goes, then forgets them. */
static struct vars_buf add_header_begin(struct exchange *ex, const struct http_request *req)
{
    add_header_set_rules(ex, ex->loc != NULL ? ex->loc->add_headers : ex->vhost->add_headers);
    struct vars_buf early;
    vars_buf_init(&early, NULL, 0);
    add_header_early(ex, req, &early);
    return early;
}

/* An entry's file, open and checked: its header in `buf` (`first`, or
 * malloc'd for a long one), parsed into `m`. */
struct opened {
    int fd;
    size_t got; /* bytes of the file in `first` */
    struct stat st;
    struct cache_file_meta m;
    uint8_t *buf;
    uint8_t first[READ_FIRST];
};

static void opened_free_header(struct opened *o)
{
    if (o->buf != o->first)
        free(o->buf);
    o->buf = o->first;
}

/* Opens entry `id` of `key` and checks it: its header's CRC, its length,
 * its key.  False (gone, torn, corrupted, not this key's): the entry is
 * dropped from the index. */
static bool entry_open(struct cache_zone *zone, const uint8_t id[CACHE_ID_LEN], struct http_str key,
                       struct opened *o)
{
    char path[PATH_MAX];
    o->buf = o->first;
    if (cache_zone_path(zone, id, path, false) != 0)
        return false;
    o->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    if (o->fd == -1) {
        cache_zone_drop(zone, id);
        return false;
    }
    ssize_t n = pread(o->fd, o->first, sizeof(o->first), 0);
    o->got = n > 0 ? (size_t)n : 0;
    int rc = n > 0 ? cache_file_parse(o->first, (size_t)n, &o->m) : -EINVAL;
    if (rc == -EAGAIN) {
        size_t need = o->m.header_len;
        if ((o->buf = malloc(need)) == NULL) {
            o->buf = o->first;
            close(o->fd);
            return false;
        }
        n = pread(o->fd, o->buf, need, 0);
        rc = n == (ssize_t)need ? cache_file_parse(o->buf, need, &o->m) : -EINVAL;
    }
    if (rc != 0 || fstat(o->fd, &o->st) == -1 ||
        (uint64_t)o->st.st_size != o->m.header_len + o->m.body_len || o->m.key.len != key.len ||
        memcmp(o->m.key.data, key.data, key.len) != 0) {
        atomic_fetch_add_explicit(&cache_zone_counters(zone)->corrupt, 1, memory_order_relaxed);
        close(o->fd);
        opened_free_header(o);
        cache_zone_drop(zone, id);
        return false;
    }
    return true;
}

/* A client's precondition on a stored 200 (RFC 9110 13.2.2, through the
 * static module's evaluation): true when its If-None-Match, or else its
 * If-Modified-Since, says it has this response, and a 304 is written
 * into `out` (`cap` bytes): the stored fields a 304 carries (RFC 9110
 * 15.4.5) and `age`.  Other outcomes (412) are left to the full
 * response. */
static bool not_modified(const struct http_request *req, const struct cache_file_meta *m,
                         const char *age, size_t age_len, char *out, size_t cap, size_t *len)
{
    if (m->status != 200 || (find_header(req, "if-none-match") == NULL &&
                             find_header(req, "if-modified-since") == NULL))
        return false;
    struct static_validators v = {.mtime = INT64_MAX, .size = m->body_len};
    const char *p = m->head.data, *end = m->head.data + m->head.len;
    while (p < end) {
        struct http_str name, value;
        p = http_head_next_line(p, end, &name, &value);
        if (http_str_equal_nocase(name, "etag")) {
            v.etag = value.data;
            v.etag_len = value.len;
        } else if (http_str_equal_nocase(name, "last-modified")) {
            int64_t t;
            if (static_date_parse(value, &t))
                v.mtime = t;
        }
    }
    if (static_cond_check(req, &v, STATIC_IMS_BEFORE) != 304)
        return false;
    size_t n = 0;
    p = m->head.data;
    while (p < end) {
        const char *start = p;
        struct http_str name, value;
        p = http_head_next_line(p, end, &name, &value);
        if (!(http_str_equal_nocase(name, "cache-control") ||
              http_str_equal_nocase(name, "content-location") ||
              http_str_equal_nocase(name, "etag") || http_str_equal_nocase(name, "expires") ||
              http_str_equal_nocase(name, "vary") || http_str_equal_nocase(name, "last-modified")))
            continue;
        if (n + (size_t)(p - start) > cap)
            return false;
        memcpy(out + n, start, (size_t)(p - start));
        n += (size_t)(p - start);
    }
    if (n + age_len + 1 > cap)
        return false;
    memcpy(out + n, age, age_len);
    out[n + age_len] = '\0';
    *len = n + age_len;
    return true;
}

/* Answers from entry `id` (at `version` in the index) if its file checks
 * out: true.  False: the request goes on as a miss.  The file comes from
 * the thread's table of open entries when it holds this version, else it
 * is opened, checked and kept there. */
static bool serve_hit(struct router_walk *w, struct cache_zone *zone,
                      const uint8_t id[CACHE_ID_LEN], struct http_str key, uint64_t version,
                      int64_t now)
{
    struct exchange *ex = w->ex;
    const struct cache_hot_entry *h = cache_hot_get(zone, id, version, now);
    struct opened opened;
    bool own = false; /* `opened` serves, the table kept nothing */
    if (h == NULL) {
        if (!entry_open(zone, id, key, &opened))
            return false;
        const uint8_t *body =
            opened.buf == opened.first && opened.m.header_len + opened.m.body_len <= opened.got
                ? opened.first + opened.m.header_len
                : NULL;
        h = cache_hot_put(zone, id, version, opened.fd, &opened.st, now, opened.buf, &opened.m,
                          body);
        if (h != NULL)
            opened_free_header(&opened); /* the table has a copy, and the fd */
        else
            own = true;
    }
    const struct cache_file_meta *m = own ? &opened.m : &h->m;
    const uint8_t *body =
        own ? (opened.buf == opened.first && m->header_len + m->body_len <= opened.got
                   ? opened.first + m->header_len
                   : NULL)
            : h->body;

    /* The stored head, its Age, and what a Range asks of it. */
    const struct http_request *req = &w->req;
    unsigned status = m->status;
    struct static_range range;
    size_t range_count = 0;
    const struct http_header *rh = status == 200 ? find_header(req, "range") : NULL;
    char extra[160];
    /* "Age: N\r\n" without printf's cost, a hit's largest but the key's. */
    char *x = http_append_uint(
        (char *)memcpy(extra, "Age: ", 5) + 5,
        (uint64_t)cache_policy_age(m->initial_age, m->stored, now)); /* never negative */
    memcpy(x, "\r\n", 2);
    int extra_len = (int)(x + 2 - extra);
    char fields[2048];
    size_t fields_len;
    if (not_modified(req, m, extra, (size_t)extra_len, fields, sizeof(fields), &fields_len)) {
        if (own) {
            close(opened.fd);
            opened_free_header(&opened);
        }
        router_routed(w);
        ex->_ops->set_handler(ex, &hit_handler);
        struct vars_buf early = add_header_begin(ex, req);
        exchange_respond(ex, 304, fields, "", 0);
        add_header_forget_early(ex);
        vars_buf_free(&early);
        return true;
    }
    bool unsatisfiable = false;
    if (rh != NULL && find_header(req, "if-range") == NULL) {
        size_t cnt = 0;
        struct static_range ranges[STATIC_RANGES_MAX];
        switch (static_range_parse(rh->value, m->body_len, ranges, &cnt)) {
        case STATIC_RANGE_OK:
            if (cnt == 1) { /* several: the whole body, as RFC 9110 14.2 allows */
                range = ranges[0];
                range_count = 1;
                status = 206;
                /* At most 27 + 85 bytes with the Age line: never cut. */
                int n = snprintf(extra + extra_len, sizeof(extra) - (size_t)extra_len,
                                 "Content-Range: bytes %llu-%llu/%llu\r\n",
                                 (unsigned long long)range.first, (unsigned long long)range.last,
                                 (unsigned long long)m->body_len);
                assert(n > 0 && (size_t)n < sizeof(extra) - (size_t)extra_len);
                extra_len += n;
            }
            break;
        case STATIC_RANGE_UNSATISFIABLE:
            unsatisfiable = true;
            snprintf(extra, sizeof(extra), "Content-Range: bytes */%llu\r\n",
                     (unsigned long long)m->body_len);
            break;
        case STATIC_RANGE_IGNORE: break;
        }
    }
    uint64_t from = range_count == 1 ? range.first : 0;
    uint64_t length = range_count == 1 ? range.last - range.first + 1 : m->body_len;
    /* What sends the body from the file: the table's descriptor stays
     * the table's, so a send that outlives this turn gets its own. */
    int fd = -1;
    if (!unsatisfiable && !req->head && length > 0 && body == NULL) {
        fd = own ? opened.fd : fcntl(h->fd, F_DUPFD_CLOEXEC, 0);
        if (fd == -1)
            return false;
    } else if (own) {
        close(opened.fd);
    }
    size_t head_len = m->head.len + (size_t)extra_len;
    char stack[2048];
    char *head = head_len <= sizeof(stack) ? stack : malloc(head_len);
    if (head == NULL) {
        if (fd >= 0)
            close(fd);
        if (own)
            opened_free_header(&opened);
        return false;
    }
    memcpy(head, m->head.data, m->head.len);
    memcpy(head + m->head.len, extra, (size_t)extra_len);
    struct stat st = own ? opened.st : h->st;
    uint64_t header_len = m->header_len, body_len = m->body_len;
    /* The body in memory is the table's (or `opened`'s, this frame's):
     * written before either goes. */
    router_routed(w);
    ex->_ops->set_handler(ex, &hit_handler);
    struct vars_buf early = add_header_begin(ex, req);
    if (unsatisfiable) {
        exchange_respond(ex, 416, extra, "", 0);
    } else {
        exchange_begin(ex, status, head, head_len, (int64_t)length);
        if (fd == -1) {
            if (!req->head && length > 0)
                exchange_write(ex, (const char *)body + from, (size_t)length);
            exchange_end(ex);
        }
    }
    add_header_forget_early(ex); /* `early` goes with this frame */
    vars_buf_free(&early);
    if (head != stack)
        free(head);
    if (own)
        opened_free_header(&opened);
    if (fd == -1)
        return true;
    struct static_file file = {.fd = fd, .st = st, ._entry = NULL};
    struct static_send_plan plan = {.size = body_len,
                                    .ranges = range_count == 1 ? &range : NULL,
                                    .count = range_count,
                                    .sendfile = true,
                                    .base = header_len};
    static_send_start(ex, &file, &plan);
    return true;
}

/* ------------------------------------------------ the background update */

/* The background update being started: the subrequest's own content
 * phase, which runs inside subrequest_start_detached(), finds its key
 * here and takes the key's lock over from the request that started it. */
struct background_claim {
    uint8_t id[CACHE_ID_LEN];
    bool claimed;
};
static _Thread_local struct background_claim *claim;

/* The background updates a thread runs.  Its loop tells each when it is
 * over; a worker that stops with one under way (a reload, a stop) no
 * longer runs its loop, so the thread's end cuts them off: each lets its
 * key's lock go and is freed (the loop outlives its thread). */
struct background {
    struct subrequest *sr;
    struct background *prev, *next;
};
static _Thread_local struct background running; /* the list's head */

static void running_end(void *arg)
{
    struct background *head = arg;
    while (head->next != head) {
        struct background *b = head->next;
        assert(b->prev == head);
        b->prev->next = b->next;
        b->next->prev = b->prev;
        subrequest_free(b->sr);
        free(b);
    }
}

/* The update is over (stored, found good again, or failed, its lock let
 * go by the store filter or the module's release): nothing waits for it. */
static void background_done(struct subrequest *sr, void *arg)
{
    struct background *b = arg;
    b->prev->next = b->next;
    b->next->prev = b->prev;
    free(b);
    subrequest_free(sr);
}

/* proxy_cache_background_update: a GET of the request's target, detached
 * from the client, refreshes entry `id`, whose lock the caller holds.
 * True: the subrequest took the lock over.  False (out of memory, or its
 * key came out another, say by $server_port): the lock is still the
 * caller's. */
static bool background_start(struct router_walk *w, const uint8_t id[CACHE_ID_LEN])
{
    if (running.next == NULL) {
        if (thread_exit_call(running_end, &running) != 0)
            return false;
        running.next = running.prev = &running;
    }
    struct background *b = malloc(sizeof(*b));
    if (b == NULL)
        return false;
    struct background_claim c = {.claimed = false};
    memcpy(c.id, id, CACHE_ID_LEN);
    claim = &c;
    b->sr = subrequest_start_detached(w->ex, &w->req, w->req.target.data, w->req.target.len,
                                      background_done, b);
    claim = NULL;
    if (b->sr == NULL || !c.claimed) {
        subrequest_free(b->sr);
        free(b);
        return false;
    }
    b->next = running.next;
    b->prev = &running;
    running.next->prev = b;
    running.next = b;
    return true;
}

/* ------------------------------------------------------------ the miss */

static bool conditional_field(struct http_str name)
{
    return http_str_equal_nocase(name, "range") || http_str_equal_nocase(name, "if-range") ||
           http_str_equal_nocase(name, "if-none-match") ||
           http_str_equal_nocase(name, "if-modified-since") ||
           http_str_equal_nocase(name, "if-match") ||
           http_str_equal_nocase(name, "if-unmodified-since");
}

static void store_unlock(struct cache_store *st)
{
    if (st->locked) {
        st->locked = false;
        cache_zone_unlock(st->zone, st->id);
    }
}

static void store_free(struct cache_store *st)
{
    store_unlock(st);
    if (st->stale_fd >= 0)
        close(st->stale_fd);
    if (st->fd >= 0) {
        close(st->fd);
        (void)unlink(st->temp);
    }
    free(st->strings);
    free(st->validators);
    free(st->headers);
    free(st->req_block);
    free(st->key);
    free(st);
}

/* The stale entry's validators (proxy_cache_revalidate): its ETag as
 * If-None-Match, its Last-Modified as If-Modified-Since, kept in
 * st->validators.  Returns how many (0: none, or its file did not
 * check out). */
static size_t read_validators(struct cache_store *st, struct http_header out[2])
{
    struct opened o;
    if (!entry_open(st->zone, st->stale_id, (struct http_str){st->key, st->key_len}, &o))
        return 0;
    struct http_str etag = {NULL, 0}, lm = {NULL, 0};
    const char *p = o.m.head.data, *end = o.m.head.data + o.m.head.len;
    while (p < end) {
        struct http_str name, value;
        p = http_head_next_line(p, end, &name, &value);
        if (http_str_equal_nocase(name, "etag"))
            etag = value;
        else if (http_str_equal_nocase(name, "last-modified"))
            lm = value;
    }
    size_t n = 0;
    if ((etag.len > 0 || lm.len > 0) && (st->validators = malloc(etag.len + lm.len + 2)) != NULL) {
        char *v = st->validators;
        if (etag.len > 0) {
            memcpy(v, etag.data, etag.len);
            out[n++] = (struct http_header){{"If-None-Match", 13}, {v, etag.len}};
            v += etag.len;
        }
        if (lm.len > 0) {
            memcpy(v, lm.data, lm.len);
            out[n++] = (struct http_header){{"If-Modified-Since", 17}, {v, lm.len}};
        }
    }
    close(o.fd);
    opened_free_header(&o);
    return n;
}

/* Sets the miss up: the store filter on, with what it needs once the
 * response comes, and the request the proxy forwards without Range and
 * preconditions, so that the backend sends the whole response to keep
 * (nginx does the same).  False: out of memory, nothing stored. */
static bool store_prepare(struct router_walk *w, const struct cache_loc *loc,
                          const uint8_t id[CACHE_ID_LEN], struct http_str key, bool locked,
                          const uint8_t *stale_id, const struct cache_entry_info *stale)
{
    struct exchange *ex = w->ex;
    struct cache_store *st = calloc(1, sizeof(*st));
    if (st == NULL) {
        if (locked)
            cache_zone_unlock(loc->zone, id);
        return false;
    }
    st->fd = -1;
    st->stale_fd = -1;
    st->loc = loc;
    st->zone = loc->zone;
    st->locked = locked;
    memcpy(st->id, id, CACHE_ID_LEN);
    st->key = malloc(key.len + 1);
    st->req_block = exchange_request_copy(&w->req, &st->req);
    if (st->key == NULL || st->req_block == NULL) {
        store_free(st);
        return false;
    }
    memcpy(st->key, key.data, key.len);
    st->key_len = key.len;
    if (stale_id != NULL) {
        st->has_stale = true;
        memcpy(st->stale_id, stale_id, CACHE_ID_LEN);
        st->stale = *stale;
    }
    st->authorization = find_header(&w->req, "authorization") != NULL;
    struct http_header validators[2];
    size_t vcount = st->has_stale && loc->revalidate ? read_validators(st, validators) : 0;
    assert(vcount <= sizeof(validators) / sizeof(validators[0]));
    size_t drop = 0;
    for (size_t i = 0; i < w->req.header_count; i++)
        drop += conditional_field(w->req.headers[i].name);
    if (drop > 0 || vcount > 0) {
        st->headers = malloc((w->req.header_count + vcount) * sizeof(*st->headers));
        if (st->headers == NULL) {
            store_free(st);
            return false;
        }
        size_t n = 0;
        for (size_t i = 0; i < w->req.header_count; i++)
            if (!conditional_field(w->req.headers[i].name))
                st->headers[n++] = w->req.headers[i];
        for (size_t i = 0; i < vcount; i++)
            st->headers[n++] = validators[i];
        st->revalidating = vcount > 0;
        w->req.headers = st->headers;
        w->req.header_count = n;
    }
    exchange_set_ctx(ex, store_slot(), st);
    exchange_add_filter(ex, &cache_filter);
    return true;
}

/* ------------------------------------------------------------ the lock */

static void wait_free(struct cache_wait *cw)
{
    if (cw->timer != NULL)
        corral_timer_free(cw->timer);
    free(cw->req_block);
    free(cw);
}

/* The lock went, or the wait timed out: the walk goes on from the
 * content phase, which looks the key up again. */
static void wait_resume(struct cache_wait *cw)
{
    cw->waiting = false;
    if (cw->timer != NULL)
        corral_timer_stop(cw->timer);
    router_resume(cw->ex, &cw->req, ROUTER_CONTENT);
}

static void on_wake(void *arg)
{
    struct cache_wait *cw = arg;
    if (!cache_zone_woken(cw->zone, &cw->w)) {
        /* Its exchange went meanwhile.  Here only this runs on the
         * thread that let the lock go, when it had no memory to post
         * with (cache_waiter). */
        wait_free(cw);
        return;
    }
    wait_resume(cw);
}

/* How soon a lock_timeout that met a wake being posted looks again. */
#define LOCK_RECHECK_MS 10

static void on_lock_timeout(corral_timer *timer, void *arg)
{
    (void)timer;
    struct cache_wait *cw = arg;
    if (!cache_zone_cancel(cw->zone, &cw->w, false)) {
        /* Its wake is on its way, unless the lock's holder finds no
         * memory to post it with (cache_zone_unlock()), counting on this
         * timer: which comes back to see.  The wake stops it. */
        corral_timer_start(cw->timer, LOCK_RECHECK_MS);
        return;
    }
    cw->gave_up = true;
    wait_resume(cw);
}

/* Never a location's handler: a waiting request has no body (only those
 * wait) and its end is the module's release. */
static const struct http_handler waiting_handler = {.name = "cache lock"};

enum { LOCK_TAKEN = 100, LOCK_GAVE_UP, LOCK_NONE, LOCK_CHANGED };

/* proxy_cache_lock: the key's fetch is this request's (LOCK_TAKEN), or
 * it waits for the one under way (ROUTER_DONE), or it gave up waiting
 * (LOCK_GAVE_UP: fetched, not stored), or it cannot wait (LOCK_NONE:
 * out of memory; fetched and stored as without the lock), or `entry`
 * changed since its lookup saw `version` (LOCK_CHANGED: look again;
 * cache_zone_lock() says why). */
static int lock_or_wait(struct router_walk *w, const struct cache_loc *loc,
                        const uint8_t id[CACHE_ID_LEN], const uint8_t *entry, uint64_t version)
{
    struct exchange *ex = w->ex;
    struct cache_wait *cw = exchange_ctx(ex, wait_slot());
    if (cw != NULL && cw->gave_up)
        return LOCK_GAVE_UP;
    uint64_t now_ms = corral_monotonic_ns() / 1000000;
    if (cw == NULL) {
        if ((cw = calloc(1, sizeof(*cw))) == NULL)
            return LOCK_NONE;
        cw->ex = ex;
        cw->zone = loc->zone;
        cw->w.loop = exchange_loop(ex);
        cw->w.wake = on_wake;
        cw->w.arg = cw;
        cw->deadline_ms = now_ms + loc->lock_timeout_ms;
        exchange_set_ctx(ex, wait_slot(), cw);
    }
    /* The waiter is queued only once what its wait needs is in place:
     * one queued and then taken out again (out of memory for the copy or
     * the timer, or past its time) may have been woken meanwhile by the
     * lock's holder on another thread, and its wake would resume the walk
     * this request goes on with, from a copy never made.  So the lock is
     * tried first without queueing: what fails then fails before anybody
     * can wake it. */
    enum cache_lock_result taken = cache_zone_lock(loc->zone, id, entry, version, NULL);
    if (taken == CACHE_LOCK_HELD) {
        if (now_ms >= cw->deadline_ms) {
            cw->gave_up = true;
            return LOCK_GAVE_UP;
        }
        /* Back from a wait, the request is the kept copy already. */
        if ((cw->req_block == NULL &&
             (cw->req_block = exchange_request_copy(&w->req, &cw->req)) == NULL) ||
            (cw->timer == NULL &&
             corral_timer_new(exchange_loop(ex), on_lock_timeout, cw, &cw->timer) != 0))
            return LOCK_NONE; /* nothing queued: fetched from the live request */
        /* Let go, or changed, since: as it says. */
        taken = cache_zone_lock(loc->zone, id, entry, version, &cw->w);
    }
    if (taken == CACHE_LOCK_TAKEN)
        return LOCK_TAKEN;
    if (taken == CACHE_LOCK_CHANGED)
        return LOCK_CHANGED;
    if (taken == CACHE_LOCK_NONE)
        return LOCK_NONE;
    corral_timer_start(cw->timer, cw->deadline_ms - now_ms);
    cw->waiting = true;
    router_routed(w);
    ex->_ops->set_handler(ex, &waiting_handler);
    return ROUTER_DONE;
}

/* How many times a request looks its key up again when the entry changed
 * between its lookup and the lock (another request stored it meanwhile):
 * once finds it, unless another store comes at each turn (say of
 * responses stale at once); past that the lock is taken anyway. */
#define LOOKS_MAX 4

/* The content phase, `looks` looks again into it so far. */
static int cache_look(struct router_walk *w, unsigned looks)
{
    struct exchange *ex = w->ex;
    const struct cache_loc *loc = http_module_built(ex, &cache_module);
    if (loc == NULL)
        return ROUTER_DECLINED;
    const struct http_request *req = &w->req;
    unsigned method = http_str_equal_nocase(req->method, "GET")    ? CACHE_METHOD_GET
                      : http_str_equal_nocase(req->method, "HEAD") ? CACHE_METHOD_HEAD
                      : http_str_equal_nocase(req->method, "POST") ? CACHE_METHOD_POST
                                                                   : 0;
    /* nginx: GET and HEAD always, whatever proxy_cache_methods lists. */
    if (!((loc->methods | CACHE_METHOD_GET | CACHE_METHOD_HEAD) & method))
        return ROUTER_DECLINED;
    struct vars_ctx ctx = {.ex = ex, .req = req};
    char keybuf[KEY_MAX];
    size_t key_len = vars_eval_into(loc->key, &ctx, keybuf, sizeof(keybuf));
    if (key_len > sizeof(keybuf))
        return ROUTER_DECLINED;
    struct http_str key = {keybuf, key_len};
    bool no_store = any_condition(loc->no_cache, loc->no_cache_count, &ctx);
    uint8_t id[CACHE_ID_LEN];
    cache_key_id(key, (struct http_str){NULL, 0}, id);
    /* This is the background update of the key being started. */
    bool background = claim != NULL && ex->subrequest && !claim->claimed &&
                      memcmp(claim->id, id, CACHE_ID_LEN) == 0;
    if (any_condition(loc->bypass, loc->bypass_count, &ctx)) {
        set_status(ex, CACHE_STATUS_BYPASS);
        count(loc->zone, CACHE_STATUS_BYPASS);
        if (!no_store && !req->head)
            store_prepare(w, loc, id, key, false, NULL, NULL);
        return ROUTER_DECLINED;
    }
    int64_t now = (int64_t)time(NULL);
    /* Counted once for proxy_cache_min_uses: not when it looks again
     * (its entry changed) nor back from a wait (the lock's state is in
     * its slot from the first look on). */
    bool counted = looks > 0 || exchange_ctx(ex, wait_slot()) != NULL;
    struct cache_found found;
    cache_zone_lookup(loc->zone, id, now, !counted, &found);
    const uint8_t *entry = id;
    uint8_t vid[CACHE_ID_LEN];
    if (found.state == CACHE_LOOKUP_VARY) {
        char variant[VARIANT_MAX];
        size_t vlen = cache_key_variant((struct http_str){found.vary, strlen(found.vary)},
                                        req->headers, req->header_count, variant, sizeof(variant));
        if (vlen > sizeof(variant))
            return ROUTER_DECLINED;
        cache_key_id(key, (struct http_str){variant, vlen}, vid);
        uint32_t uses = found.uses;
        cache_zone_lookup(loc->zone, vid, now, !counted, &found);
        found.uses = uses > found.uses ? uses : found.uses;
        entry = vid;
    }
    enum cache_status status = CACHE_STATUS_MISS;
    bool locked = false, stale = false;
    if (found.state == CACHE_LOOKUP_STALE && method != CACHE_METHOD_POST && background) {
        stale = true;
        claim->claimed = true;
        locked = true; /* the lock its starter took */
    } else if (found.state == CACHE_LOOKUP_STALE && method != CACHE_METHOD_POST) {
        stale = true;
        /* Another request is fetching it: the stale response meanwhile,
         * where proxy_cache_use_stale updating or the response's
         * stale-while-revalidate allows (RFC 5861 3). */
        const struct cache_entry_info *e = &found.entry;
        bool updating = !e->must_revalidate && ((loc->use_stale & CACHE_STALE_UPDATING) ||
                                                now < e->expires + (int64_t)e->swr);
        if (updating) {
            enum cache_lock_result taken = cache_zone_lock(
                loc->zone, id, looks < LOOKS_MAX ? entry : NULL, found.version, NULL);
            if (taken == CACHE_LOCK_CHANGED)
                return cache_look(w, looks + 1); /* updated meanwhile */
            if (taken == CACHE_LOCK_TAKEN) {
                /* With proxy_cache_background_update the stale response
                 * goes at once and a subrequest updates it; without, this
                 * request does. */
                if (loc->background_update && !ex->subrequest && background_start(w, id)) {
                    set_status(ex, CACHE_STATUS_STALE);
                    if (serve_hit(w, loc->zone, entry, key, found.version, now)) {
                        count(loc->zone, CACHE_STATUS_STALE);
                        return ROUTER_DONE;
                    }
                    stale = false; /* its file did not check out: a miss */
                } else {
                    locked = true; /* this request updates it */
                }
            } else if (taken == CACHE_LOCK_HELD) {
                set_status(ex, CACHE_STATUS_UPDATING);
                if (serve_hit(w, loc->zone, entry, key, found.version, now)) {
                    count(loc->zone, CACHE_STATUS_UPDATING);
                    return ROUTER_DONE;
                }
                stale = false; /* its file did not check out */
            }
            /* CACHE_LOCK_NONE: this request updates it, without the lock. */
        }
    }
    if (found.state == CACHE_LOOKUP_FRESH && method != CACHE_METHOD_POST) {
        /* Set first: a small body ends the exchange, and logs it,
         * inside serve_hit(). */
        set_status(ex, CACHE_STATUS_HIT);
        if (serve_hit(w, loc->zone, entry, key, found.version, now)) {
            count(loc->zone, CACHE_STATUS_HIT);
            return ROUTER_DONE;
        }
    } else if (found.state == CACHE_LOOKUP_STALE) {
        status = CACHE_STATUS_EXPIRED;
    }
    /* A HEAD's response has no body to keep. */
    bool store = !no_store && found.uses >= loc->min_uses && !req->head;
    if (locked && !store) {
        cache_zone_unlock(loc->zone, id);
        locked = false;
    }
    if (store && !locked && loc->lock && !req->has_body) {
        int rc = lock_or_wait(w, loc, id, looks < LOOKS_MAX ? entry : NULL, found.version);
        if (rc == LOCK_CHANGED)
            return cache_look(w, looks + 1); /* stored meanwhile: a hit, likely */
        if (rc == ROUTER_DONE)
            return ROUTER_DONE;
        locked = rc == LOCK_TAKEN;
        store = rc != LOCK_GAVE_UP;
    }
    set_status(ex, status);
    count(loc->zone, status);
    if (store && store_prepare(w, loc, id, key, locked, stale ? entry : NULL, &found.entry))
        ((struct cache_store *)exchange_ctx(ex, store_slot()))->background = background;
    return ROUTER_DECLINED;
}

static int cache_phase(struct router_walk *w)
{
    return cache_look(w, 0);
}

/* ------------------------------------------------------- the store filter */

static void store_abandon(struct exchange *ex, struct cache_store *st)
{
    if (st->fd >= 0) {
        close(st->fd);
        (void)unlink(st->temp);
        st->fd = -1;
    }
    st->storing = false;
    store_unlock(st);
    exchange_remove_filter(ex, &cache_filter);
}

/* The head's lines without Age, which a hit writes anew. */
static size_t copy_head(const char *lines, size_t len, char *out)
{
    const char *p = lines, *end = lines + len;
    size_t n = 0;
    while (p < end) {
        const char *start = p;
        struct http_str name, value;
        p = http_head_next_line(p, end, &name, &value);
        if (http_str_equal_nocase(name, "age"))
            continue;
        memcpy(out + n, start, (size_t)(p - start));
        n += (size_t)(p - start);
    }
    return n;
}

/* Whether the response beginning is one that proxy_cache_use_stale, or
 * the stale entry's own stale-if-error (RFC 5861 4), replaces with the
 * stale entry: the backend could not be reached (error), did not answer
 * in time (timeout: the proxy's 504), or answered a status listed. */
static bool stale_wanted(const struct exchange *ex, const struct cache_store *st, unsigned status,
                         int64_t now)
{
    if (!st->has_stale || st->stale.must_revalidate)
        return false;
    unsigned n = ex->upstream_try_count;
    bool failed = n == 0 || ex->upstream_tries[n - 1].header_ms == EXCHANGE_UPSTREAM_UNKNOWN;
    unsigned flag = 0;
    if (failed)
        flag = status == 504 ? CACHE_STALE_TIMEOUT : CACHE_STALE_ERROR;
    else if (status == 500)
        flag = CACHE_STALE_500;
    else if (status == 502)
        flag = CACHE_STALE_502;
    else if (status == 503)
        flag = CACHE_STALE_503;
    else if (status == 504)
        flag = CACHE_STALE_504;
    else if (status == 403)
        flag = CACHE_STALE_403;
    else if (status == 404)
        flag = CACHE_STALE_404;
    else if (status == 429)
        flag = CACHE_STALE_429;
    if (flag == 0)
        return false;
    bool by_response =
        (failed || status >= 500) && now < st->stale.expires + (int64_t)st->stale.sie;
    /* A malformed head is a failure of the proxy's: invalid_header is error. */
    unsigned use = st->loc->use_stale;
    if (use & CACHE_STALE_INVALID_HEADER)
        use |= CACHE_STALE_ERROR;
    return (use & flag) || by_response;
}

/* The stale entry's head instead of the response's: its body follows
 * at the end (stale_end()), the backend's is dropped.  False: its file
 * did not check out, and the response goes on. */
static bool replace_begin(struct exchange *ex, const struct exchange_filter *self,
                          struct cache_store *st, struct opened *opened, int64_t now,
                          enum cache_status status)
{
    char age[48];
    int age_len =
        snprintf(age, sizeof(age), "Age: %lld\r\n",
                 (long long)cache_policy_age(opened->m.initial_age, opened->m.stored, now));
    size_t len = opened->m.head.len + (size_t)age_len;
    char *lines = malloc(len);
    if (lines == NULL) {
        close(opened->fd);
        opened_free_header(opened);
        return false;
    }
    memcpy(lines, opened->m.head.data, opened->m.head.len);
    memcpy(lines + opened->m.head.len, age, (size_t)age_len);
    st->stale_fd = opened->fd;
    st->stale_off = opened->m.header_len;
    st->stale_end = opened->m.header_len + opened->m.body_len;
    struct exchange_head head = {.status = opened->m.status,
                                 .headers = lines,
                                 .headers_len = len,
                                 .content_length = (int64_t)opened->m.body_len};
    opened_free_header(opened);
    set_status(ex, status);
    count(st->zone, status);
    exchange_filter_begin_next(ex, self, &head);
    free(lines);
    return true;
}

static bool stale_begin(struct exchange *ex, const struct exchange_filter *self,
                        struct cache_store *st, int64_t now)
{
    struct opened o;
    if (!entry_open(st->zone, st->stale_id, (struct http_str){st->key, st->key_len}, &o))
        return false;
    return replace_begin(ex, self, st, &o, now, CACHE_STATUS_STALE);
}

/* The head lines of a 304 merged into the stored ones for the freshness
 * they give (RFC 9111 4.3.4): each field the 304 has stands for the
 * stored one of its name. */
static size_t merge_lines(struct http_str stored, const char *lines, size_t len, char *out)
{
    size_t n = 0;
    const char *p = stored.data, *end = stored.data + stored.len;
    while (p < end) {
        const char *start = p;
        struct http_str name, value;
        p = http_head_next_line(p, end, &name, &value);
        bool replaced = false;
        const char *q = lines, *qend = lines + len;
        while (q < qend && !replaced) {
            struct http_str qname, qvalue;
            q = http_head_next_line(q, qend, &qname, &qvalue);
            replaced = qname.len == name.len && name.len > 0 &&
                       strncasecmp(qname.data, name.data, name.len) == 0;
        }
        if (!replaced) {
            memcpy(out + n, start, (size_t)(p - start));
            n += (size_t)(p - start);
        }
    }
    memcpy(out + n, lines, len);
    return n + len;
}

/* A 304 to the validators the cache sent (proxy_cache_revalidate): the
 * stored response is good again.  Its freshness is renewed from the
 * merged head, in its file's header (rewritten in place: same length,
 * its CRC anew; a torn write fails the CRC and drops it) and in the
 * index, and it answers the request.  False: its file did not check
 * out, and the 304 goes on. */
static bool revalidated_begin(struct exchange *ex, const struct exchange_filter *self,
                              struct cache_store *st, const struct exchange_head *head, int64_t now)
{
    struct opened o;
    if (!entry_open(st->zone, st->stale_id, (struct http_str){st->key, st->key_len}, &o))
        return false;
    char *merged = malloc(o.m.head.len + head->headers_len + 1);
    if (merged != NULL) {
        size_t len = merge_lines(o.m.head, head->headers, head->headers_len, merged);
        struct cache_policy_in in = {.status = o.m.status,
                                     .lines = merged,
                                     .len = len,
                                     .now = now,
                                     .valid = cache_conf_valid(st->loc, o.m.status),
                                     .authorization = st->authorization,
                                     .ignore = st->loc->ignore};
        struct cache_policy policy;
        cache_policy_decide(&in, &policy);
        if (policy.refusal == CACHE_STORE) {
            struct cache_file_meta m = o.m;
            m.stored = now;
            m.expires = policy.expires;
            m.initial_age = policy.initial_age;
            m.swr = policy.swr;
            m.sie = policy.sie;
            m.flags = policy.must_revalidate ? CACHE_FILE_MUST_REVALIDATE : 0;
            uint8_t *header = malloc(o.m.header_len);
            if (header != NULL) {
                cache_file_encode(&m, header);
                assert(m.header_len == o.m.header_len);
                char path[PATH_MAX];
                int fd = cache_zone_path(st->zone, st->stale_id, path, false) == 0
                             ? open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW)
                             : -1;
                if (fd >= 0 && pwrite(fd, header, m.header_len, 0) == (ssize_t)m.header_len) {
                    struct cache_entry_info info = {.size = (uint64_t)o.st.st_size,
                                                    .expires = m.expires,
                                                    .swr = m.swr,
                                                    .sie = m.sie,
                                                    .must_revalidate =
                                                        m.flags & CACHE_FILE_MUST_REVALIDATE};
                    cache_zone_stored(st->zone, st->stale_id, &info);
                }
                if (fd >= 0)
                    close(fd);
                free(header);
                o.m.stored = m.stored; /* the Age it goes out with */
                o.m.initial_age = m.initial_age;
            }
        }
        free(merged);
    }
    if (st->background) { /* nobody reads it: the 304 goes on */
        close(o.fd);
        opened_free_header(&o);
        set_status(ex, CACHE_STATUS_REVALIDATED);
        count(st->zone, CACHE_STATUS_REVALIDATED);
        exchange_filter_begin_next(ex, self, head);
        return true;
    }
    return replace_begin(ex, self, st, &o, now, CACHE_STATUS_REVALIDATED);
}

/* The stale entry's body, at the end of the response it replaced. */
static void stale_end(struct exchange *ex, const struct exchange_filter *self,
                      struct cache_store *st)
{
    char *buf = malloc(64 * 1024);
    while (buf != NULL && st->stale_off < st->stale_end) {
        uint64_t left = st->stale_end - st->stale_off;
        size_t want = left < 64 * 1024 ? (size_t)left : 64 * 1024;
        ssize_t n = pread(st->stale_fd, buf, want, (off_t)st->stale_off);
        if (n <= 0)
            break;
        st->stale_off += (uint64_t)n;
        exchange_filter_write_next(ex, self, buf, (size_t)n);
    }
    free(buf);
    close(st->stale_fd);
    st->stale_fd = -1;
    if (st->stale_off < st->stale_end) {
        exchange_abort(ex); /* shorter than its length said: cut off */
        return;
    }
    exchange_filter_end_next(ex, self, NULL, 0);
}

static void store_begin(struct exchange *ex, const struct exchange_filter *self,
                        const struct exchange_head *head)
{
    struct cache_store *st = exchange_ctx(ex, store_slot());
    if (st != NULL && !ex->redirected && st->revalidating && head->status == 304) {
        store_unlock(st); /* found good again: those waiting go on */
        if (revalidated_begin(ex, self, st, head, (int64_t)time(NULL)))
            return;
    }
    if (st != NULL && !ex->redirected && stale_wanted(ex, st, head->status, (int64_t)time(NULL))) {
        store_unlock(st);     /* nothing is stored: those waiting go on */
        if (st->background) { /* the stale entry stays, as it is */
            store_abandon(ex, st);
            exchange_filter_begin_next(ex, self, head);
            return;
        }
        if (stale_begin(ex, self, st, (int64_t)time(NULL)))
            return;
    }

    if (st == NULL || ex->redirected || head->codings.len > 0) {
        if (st != NULL)
            store_abandon(ex, st);
        exchange_filter_begin_next(ex, self, head);
        return;
    }
    const struct cache_loc *loc = st->loc;
    int64_t now = (int64_t)time(NULL);
    struct cache_policy_in in = {.status = head->status,
                                 .lines = head->headers,
                                 .len = head->headers_len,
                                 .now = now,
                                 .valid = cache_conf_valid(loc, head->status),
                                 .authorization = st->authorization,
                                 .ignore = loc->ignore};
    struct cache_policy policy;
    cache_policy_decide(&in, &policy);
    if (policy.refusal != CACHE_STORE || policy.vary.len > CACHE_VARY_MAX ||
        head->headers_len > CACHE_FILE_HEADER_MAX / 2) {
        store_abandon(ex, st);
        exchange_filter_begin_next(ex, self, head);
        return;
    }
    char variant[VARIANT_MAX];
    size_t vlen = 0;
    if (policy.vary.len > 0) {
        vlen = cache_key_variant(policy.vary, st->req.headers, st->req.header_count, variant,
                                 sizeof(variant));
        if (vlen > sizeof(variant)) {
            store_abandon(ex, st);
            exchange_filter_begin_next(ex, self, head);
            return;
        }
        st->varies = true;
    }
    size_t total = st->key_len + policy.vary.len + vlen + head->headers_len;
    if (CACHE_FILE_FIXED + total > CACHE_FILE_HEADER_MAX ||
        (st->strings = malloc(total + 1)) == NULL) {
        store_abandon(ex, st);
        exchange_filter_begin_next(ex, self, head);
        return;
    }
    char *s = st->strings;
    memcpy(s, st->key, st->key_len);
    st->meta.key = (struct http_str){s, st->key_len};
    s += st->key_len;
    for (size_t i = 0; i < policy.vary.len; i++) {
        char c = policy.vary.data[i];
        s[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    st->meta.vary = (struct http_str){s, policy.vary.len};
    s += policy.vary.len;
    memcpy(s, variant, vlen);
    st->meta.variant = (struct http_str){s, vlen};
    s += vlen;
    st->meta.head = (struct http_str){s, copy_head(head->headers, head->headers_len, s)};
    st->meta.status = (uint16_t)head->status;
    st->meta.flags = policy.must_revalidate ? CACHE_FILE_MUST_REVALIDATE : 0;
    st->meta.stored = now;
    st->meta.expires = policy.expires;
    st->meta.initial_age = policy.initial_age;
    st->meta.swr = policy.swr;
    st->meta.sie = policy.sie;
    cache_key_id(st->meta.key, st->meta.variant, st->final_id);
    st->content_length = head->content_length;

    struct cache_zone *zone = loc->zone;
    if (cache_zone_temp_path(zone, st->temp) != 0) {
        store_abandon(ex, st);
        exchange_filter_begin_next(ex, self, head);
        return;
    }
    st->fd = open(st->temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (st->fd == -1 || lseek(st->fd, (off_t)cache_file_header_len(&st->meta), SEEK_SET) == -1) {
        log_once(zone, "cannot create", st->temp, errno);
        atomic_fetch_add_explicit(&cache_zone_counters(zone)->store_errors, 1,
                                  memory_order_relaxed);
        store_abandon(ex, st);
        exchange_filter_begin_next(ex, self, head);
        return;
    }
    st->storing = true;
    exchange_filter_begin_next(ex, self, head);
}

static bool write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n == -1 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = ENOSPC;
            return false;
        }
        data += n;
        len -= (size_t)n;
    }
    return true;
}

static void store_write(struct exchange *ex, const struct exchange_filter *self, const char *data,
                        size_t len)
{
    struct cache_store *st = exchange_ctx(ex, store_slot());
    if (st != NULL && st->stale_fd >= 0)
        return; /* the stale entry's body replaces it */
    if (st != NULL && st->storing) {
        if (write_all(st->fd, data, len)) {
            st->crc = cache_file_crc(st->crc, data, len);
            st->body_len += len;
        } else {
            /* ENOSPC, EIO: the client gets its response all the same. */
            log_once(st->loc->zone, "cannot write", st->temp, errno);
            atomic_fetch_add_explicit(&cache_zone_counters(st->loc->zone)->store_errors, 1,
                                      memory_order_relaxed);
            store_abandon(ex, st);
        }
    }
    exchange_filter_write_next(ex, self, data, len);
}

/* The whole response is in the temporary file: its header goes in front,
 * and the file into its place in the zone. */
static void store_finish(struct exchange *ex, struct cache_store *st)
{
    struct cache_zone *zone = st->loc->zone;
    if (st->content_length >= 0 && (uint64_t)st->content_length != st->body_len) {
        store_abandon(ex, st);
        return;
    }
    st->meta.body_len = st->body_len;
    st->meta.body_crc = st->crc;
    size_t hlen = cache_file_header_len(&st->meta);
    uint8_t *header = malloc(hlen);
    char path[PATH_MAX];
    int err = 0;
    if (header == NULL)
        err = ENOMEM;
    else {
        cache_file_encode(&st->meta, header);
        ssize_t n = pwrite(st->fd, header, hlen, 0);
        if (n != (ssize_t)hlen)
            err = n == -1 ? errno : ENOSPC;
        else if (close(st->fd) == -1)
            err = errno;
        else {
            st->fd = -1;
            int rc = cache_zone_path(zone, st->final_id, path, true);
            if (rc != 0)
                err = -rc;
            else if (rename(st->temp, path) == -1)
                err = errno;
        }
    }
    free(header);
    if (err != 0) {
        if (err != ENOMEM)
            log_once(zone, "cannot store", st->temp, err);
        atomic_fetch_add_explicit(&cache_zone_counters(zone)->store_errors, 1,
                                  memory_order_relaxed);
        if (st->fd == -1)
            (void)unlink(st->temp);
        store_abandon(ex, st);
        return;
    }
    if (st->varies)
        cache_zone_set_vary(zone, st->id, st->meta.vary.data, st->meta.vary.len);
    struct cache_entry_info info = {.size = hlen + st->body_len,
                                    .expires = st->meta.expires,
                                    .swr = st->meta.swr,
                                    .sie = st->meta.sie,
                                    .must_revalidate = st->meta.flags & CACHE_FILE_MUST_REVALIDATE};
    cache_zone_stored(zone, st->final_id, &info);
    st->storing = false;
    store_unlock(st); /* those waiting find it stored */
}

static void store_end(struct exchange *ex, const struct exchange_filter *self, const char *trailers,
                      size_t len)
{
    struct cache_store *st = exchange_ctx(ex, store_slot());
    if (st != NULL && st->stale_fd >= 0) {
        stale_end(ex, self, st);
        return;
    }
    if (st != NULL && st->storing)
        store_finish(ex, st);
    exchange_filter_end_next(ex, self, trailers, len);
}

static struct exchange_filter cache_filter = {
    .name = "cache",
    .begin = store_begin,
    .write = store_write,
    .end = store_end,
};

static void cache_release(struct exchange *ex)
{
    struct cache_wait *cw = exchange_ctx(ex, wait_slot());
    if (cw != NULL) {
        exchange_set_ctx(ex, wait_slot(), NULL);
        if (cw->waiting && !cache_zone_cancel(cw->zone, &cw->w, true)) {
            /* Its wake is posted: what it needs is the waiter alone. */
            if (cw->timer != NULL)
                corral_timer_free(cw->timer);
            cw->timer = NULL;
            free(cw->req_block);
            cw->req_block = NULL;
        } else {
            wait_free(cw);
        }
    }
    struct cache_store *st = exchange_ctx(ex, store_slot());
    if (st != NULL) {
        exchange_set_ctx(ex, store_slot(), NULL);
        store_free(st);
    }
}

/* ------------------------------------------------------------ variables */

static bool var_status(const struct exchange *ex, const char *suffix, size_t len,
                       struct http_str *out)
{
    (void)suffix, (void)len;
    static const char *const names[] = {
        [CACHE_STATUS_MISS] = "MISS",         [CACHE_STATUS_BYPASS] = "BYPASS",
        [CACHE_STATUS_EXPIRED] = "EXPIRED",   [CACHE_STATUS_STALE] = "STALE",
        [CACHE_STATUS_UPDATING] = "UPDATING", [CACHE_STATUS_REVALIDATED] = "REVALIDATED",
        [CACHE_STATUS_HIT] = "HIT",
    };
    if (ex == NULL)
        return false;
    uintptr_t s = (uintptr_t)exchange_ctx(ex, status_slot());
    if (s == CACHE_STATUS_NONE || s >= sizeof(names) / sizeof(names[0]))
        return false;
    *out = (struct http_str){names[s], strlen(names[s])};
    return true;
}

static const struct vars_module_var cache_vars[] = {
    {.name = "upstream_cache_status", .get = var_status},
    {.name = NULL},
};

static const struct http_phase_handler cache_phases[] = {
    {ROUTER_CONTENT, cache_phase},
};

struct http_module cache_module = {
    .name = "cache",
    .conf =
        {
            .name = "cache",
            .directives = cache_directives,
            .size = sizeof(struct cache_conf),
            .init = cache_conf_init,
            .merge = cache_conf_merge,
            .check = cache_conf_check,
            .free = cache_conf_free,
        },
    .build = cache_conf_build,
    .phases = cache_phases,
    .phase_count = 1,
    .slots = 3,
    .filter = &cache_filter,
    .release = cache_release,
    .vars = cache_vars,
};
