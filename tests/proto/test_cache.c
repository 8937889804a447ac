/*
 * test_cache.c: the cache module's content phase (proto/cache/cache.c) on
 * a fake framer, for what the daemon tests cannot make happen at will:
 * proxy_cache_lock out of memory (the waiter's copy as the lock goes on
 * another thread, the lock itself, the wake's post as its exchange goes
 * or as its lock_timeout passes), and a request that looks its key up
 * again counted once for proxy_cache_min_uses.  malloc and calloc are
 * wrapped (-Wl,--wrap) so that one call fails, or first does what another
 * thread could do at that moment.
 */
#include "../helpers.h"
#include "fake_framer.h"
#include "proto/cache/cache.h"
#include "proto/cache/cache_conf.h"
#include "proto/cache/cache_key.h"
#include "proto/cache/cache_zone.h"
#include "proto/http/http_conn.h"
#include "proto/http/module.h"
#include "proto/http/router.h"
#include "proto/http/site.h"
#include "proto/http/vars.h"
#include "proto/modules.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------- the injection */

void *__real_malloc(size_t size);
void *__real_calloc(size_t count, size_t size);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t count, size_t size);

enum hook { HOOK_WAIT, HOOK_DONE, HOOK_FAIL /* and the calloc fails */ };

static struct {
    bool fail_malloc; /* the next malloc of `size` (0: any) fails */
    size_t size;
    void (*before)(void); /* what another thread does at that moment */
    /* Each calloc runs this first until it says it is done (enum hook). */
    int (*calloc_hook)(void);
} inject;

void *__wrap_malloc(size_t size)
{
    if (inject.fail_malloc && (inject.size == 0 || inject.size == size)) {
        inject.fail_malloc = false;
        if (inject.before != NULL)
            inject.before();
        return NULL;
    }
    return __real_malloc(size);
}

void *__wrap_calloc(size_t count, size_t size)
{
    if (inject.calloc_hook != NULL) {
        int done = inject.calloc_hook();
        if (done != HOOK_WAIT)
            inject.calloc_hook = NULL;
        if (done == HOOK_FAIL)
            return NULL;
    }
    return __real_calloc(count, size);
}

/* ------------------------------------------------------- the location */

static char dir[PATH_MAX];
static struct cache_zone *zone;
static struct vars_template *key;
static struct cache_loc cache;
static const void *built[HTTP_MODULES_MAX];
static struct http_location loc;
static struct http_vhost vhost;
static corral_loop *loop;
static struct http_conn conn;
static uint8_t id[CACHE_ID_LEN]; /* the key's: "/x" */

/* What the location's handler (the proxy's place) was given. */
static struct {
    int count;
    char method[16], target[16];
    size_t headers;
} got;

static void fetch_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)ex, (void)data;
    got.count++;
    snprintf(got.method, sizeof(got.method), "%.*s", (int)req->method.len,
             req->method.data != NULL ? req->method.data : "");
    snprintf(got.target, sizeof(got.target), "%.*s", (int)req->target.len,
             req->target.data != NULL ? req->target.data : "");
    got.headers = req->header_count;
    corral_loop_stop(loop);
}

static const struct http_handler fetch_handler = {.name = "fetch", .on_request = fetch_on_request};

static void setup(unsigned min_uses, uint32_t lock_timeout_ms)
{
    modules_init();
    ck_assert_int_eq(corral_loop_new(&loop), 0);
    conn = (struct http_conn){.loop = loop};
    snprintf(dir, sizeof(dir), "/tmp/corral-cache-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    struct cache_zone_conf zc = {
        .name = "test", .path = dir, .keys_size = 64 * 1024, .inactive_s = 600};
    ck_assert_int_eq(cache_zone_get(&zc, &zone), 0);
    ck_assert(cache_zone_wait_loaded(zone, 5000));
    struct vars_error error;
    ck_assert_int_eq(vars_compile("/x", NULL, &key, &error), 0);
    cache = (struct cache_loc){.zone = zone,
                               .key = key,
                               .min_uses = min_uses,
                               .lock = true,
                               .lock_timeout_ms = lock_timeout_ms};
    built[cache_module.index] = &cache;
    loc = (struct http_location){
        .path = "/", .path_len = 1, .handler = &fetch_handler, .modules = built};
    vhost = (struct http_vhost){.locations = &loc, .location_count = 1};
    cache_key_id((struct http_str){"/x", 2}, (struct http_str){NULL, 0}, id);
    memset(&got, 0, sizeof(got));
    memset(&inject, 0, sizeof(inject));
}

static void teardown(void)
{
    vars_template_free(key);
    corral_loop_free(loop);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* A padding header long enough that its request's copy has a size of
 * its own, for the malloc to fail. */
static char pad[300];
static struct http_header pad_header;

static struct http_request get_x(void)
{
    memset(pad, 'p', sizeof(pad) - 1);
    pad_header = (struct http_header){{"X-Pad", 5}, {pad, sizeof(pad) - 1}};
    return (struct http_request){.method = {"GET", 3},
                                 .target = {"/x", 2},
                                 .path = {"/x", 2},
                                 .headers = &pad_header,
                                 .header_count = 1};
}

/* exchange_request_copy()'s block for get_x(). */
static size_t copy_size(void)
{
    return sizeof(struct http_header) + 3 + 2 + 2 + 5 + sizeof(pad) - 1 + 1;
}

static void start(struct exchange *ex)
{
    *ex = fake_exchange();
    ex->conn = &conn;
    struct http_request req = get_x();
    router_start(ex, &vhost, &req, 0);
}

static void on_guard(corral_timer *timer, void *arg)
{
    (void)timer;
    corral_loop_stop(arg);
}

/* Runs the loop until the handler has been given `count` requests, or
 * `ms` passed. */
static void run_until(int count, uint64_t ms)
{
    if (got.count >= count)
        return;
    corral_timer *guard;
    ck_assert_int_eq(corral_timer_new(loop, on_guard, loop, &guard), 0);
    uint64_t until = test_now_ms() + ms, now;
    while (got.count < count && (now = test_now_ms()) < until) {
        corral_timer_start(guard, until - now);
        ck_assert_int_eq(corral_loop_run(loop), 0);
    }
    corral_timer_free(guard);
}

static uint32_t uses_now(void)
{
    struct cache_found f;
    cache_zone_lookup(zone, id, (int64_t)time(NULL), false, &f);
    return f.uses;
}

/* ------------------------------------------------------------ the cases */

static void let_go(void)
{
    cache_zone_unlock(zone, id);
}

/* A request finds the key's lock held, and has no memory to keep its
 * request for the wait; the holder lets the lock go at that moment.  It
 * is fetched at once, from its request as it came: no wake resumes it
 * later from a copy that was never made. */
START_TEST(lock_copy_fails_as_lock_goes)
{
    setup(1, 10000);
    static struct exchange a, b;
    start(&a);
    ck_assert_int_eq(got.count, 1); /* a fetches, holding the lock */
    inject.fail_malloc = true;
    inject.size = copy_size();
    inject.before = let_go;
    start(&b);
    run_until(2, 300);
    ck_assert(!inject.fail_malloc); /* the copy was asked for */
    ck_assert_int_eq(got.count, 2);
    ck_assert_str_eq(got.method, "GET");
    ck_assert_str_eq(got.target, "/x");
    ck_assert_uint_eq(got.headers, 1);
    run_until(3, 50); /* and nothing else comes */
    ck_assert_int_eq(got.count, 2);
    router_end(&b);
    router_end(&a);
    teardown();
}
END_TEST

/* The lock goes, and its holder has no memory to post the waiter's
 * wake: the waiter's lock_timeout passes just then (the loop runs while
 * the wake is marked posted). */
static void timeout_meanwhile(void)
{
    corral_timer *guard;
    ck_assert_int_eq(corral_timer_new(loop, on_guard, loop, &guard), 0);
    corral_timer_start(guard, 20); /* past the waiter's 1 ms */
    ck_assert_int_eq(corral_loop_run(loop), 0);
    corral_timer_free(guard);
}

/* A waiter whose wake could not be posted is resumed by its
 * lock_timeout, even when that timeout passed while the wake was being
 * posted: fetched, not stored. */
START_TEST(lock_timeout_meets_unposted_wake)
{
    setup(1, 1);
    static struct exchange a, b;
    start(&a);
    ck_assert_int_eq(got.count, 1);
    start(&b);
    ck_assert_int_eq(got.count, 1); /* b waits */
    inject.fail_malloc = true;
    inject.size = 0;
    inject.before = timeout_meanwhile;
    cache_zone_unlock(zone, id); /* the post fails */
    ck_assert(!inject.fail_malloc);
    ck_assert_int_eq(got.count, 1); /* the timeout found the wake posted */
    run_until(2, 1000);
    ck_assert_int_eq(got.count, 2);
    ck_assert_str_eq(got.method, "GET");
    router_end(&b);
    router_end(&a);
    teardown();
}
END_TEST

static struct exchange *leaving;

static void leave(void)
{
    router_end(leaving);
}

/* A waiter's exchange goes while its wake is being posted, and the post
 * finds no memory: the waiter is freed all the same (else LeakSanitizer
 * finds it in the ASan build), and nothing resumes the exchange gone. */
START_TEST(lock_waiter_gone_as_post_fails)
{
    setup(1, 10000);
    static struct exchange a, b;
    start(&a);
    start(&b);
    ck_assert_int_eq(got.count, 1); /* b waits */
    leaving = &b;
    inject.fail_malloc = true;
    inject.size = 0;
    inject.before = leave;
    cache_zone_unlock(zone, id); /* b goes, then the post fails */
    ck_assert(!inject.fail_malloc);
    run_until(2, 100);
    ck_assert_int_eq(got.count, 1);
    router_end(&a);
    teardown();
}
END_TEST

/* The first request for the key finds no memory for its lock: it
 * fetches without one, and lets go none when it ends, not the one the
 * next request took meanwhile, for which a third waits. */
static bool looked;

static int fail_lock(void)
{
    /* The lock's, under the zone's mutex: nothing of the zone here. */
    if (looked)
        return HOOK_FAIL;
    /* The waiter's state, first after the lookup. */
    looked = cache_zone_count(zone) > 0;
    return HOOK_WAIT;
}

START_TEST(lock_out_of_memory_lets_none_go)
{
    setup(1, 10000);
    static struct exchange a, b, c;
    looked = false;
    inject.calloc_hook = fail_lock;
    start(&a);
    ck_assert_ptr_null(inject.calloc_hook);
    ck_assert_int_eq(got.count, 1);
    ck_assert_ptr_nonnull(exchange_ctx(&a, cache_module.slot + 1)); /* stored all the same */
    start(&b);                                                      /* takes the lock */
    ck_assert_int_eq(got.count, 2);
    start(&c); /* waits for b's fetch */
    ck_assert_int_eq(got.count, 2);
    router_end(&a);
    run_until(3, 100);
    ck_assert_int_eq(got.count, 2); /* still waiting */
    router_end(&b);
    run_until(3, 1000);
    ck_assert_int_eq(got.count, 3);
    router_end(&c);
    teardown();
}
END_TEST

/* A request that waits for the lock, and is woken when it goes, looks
 * its key up again: counted once for proxy_cache_min_uses. */
START_TEST(min_uses_once_after_wait)
{
    setup(1, 10000);
    static struct exchange a, b;
    start(&a);
    start(&b);
    ck_assert_int_eq(got.count, 1); /* b waits */
    ck_assert_uint_eq(uses_now(), 2);
    router_end(&a); /* nothing stored: the lock goes, b fetches */
    run_until(2, 1000);
    ck_assert_int_eq(got.count, 2);
    ck_assert_uint_eq(uses_now(), 2);
    router_end(&b);
    teardown();
}
END_TEST

/* Between a request's lookup and its lock (whose state is its first
 * calloc after the lookup), another stores the entry, stale already:
 * it looks again, and is counted once. */
static int store_stale(void)
{
    if (uses_now() < 2)
        return HOOK_WAIT; /* not looked up yet */
    cache_zone_stored(zone, id, &(struct cache_entry_info){.size = 10, .expires = 1});
    return HOOK_DONE;
}

START_TEST(min_uses_once_after_change)
{
    setup(2, 10000);
    static struct exchange a, b;
    start(&a); /* one use: fetched, not stored */
    ck_assert_int_eq(got.count, 1);
    ck_assert_ptr_null(exchange_ctx(&a, cache_module.slot + 1));
    inject.calloc_hook = store_stale;
    start(&b); /* two: stored, under the lock */
    ck_assert_ptr_null(inject.calloc_hook);
    ck_assert_int_eq(got.count, 2);
    /* Its first lookup found nothing, its second the stale entry. */
    ck_assert_uint_eq((uintptr_t)exchange_ctx(&b, cache_module.slot), CACHE_STATUS_EXPIRED);
    ck_assert_ptr_nonnull(exchange_ctx(&b, cache_module.slot + 1));
    ck_assert_uint_eq(uses_now(), 2);
    router_end(&b);
    router_end(&a);
    teardown();
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/cache");
    TCase *tc = tcase_create("lock");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, lock_copy_fails_as_lock_goes);
    tcase_add_test(tc, lock_timeout_meets_unposted_wake);
    tcase_add_test(tc, lock_waiter_gone_as_post_fails);
    tcase_add_test(tc, lock_out_of_memory_lets_none_go);
    tcase_add_test(tc, min_uses_once_after_wait);
    tcase_add_test(tc, min_uses_once_after_change);
    suite_add_tcase(suite, tc);
    return suite;
}
