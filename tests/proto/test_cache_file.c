/*
 * test_cache_file.c: a cache entry's file header (proto/cache/cache_file.c)
 * and the zone's index (proto/cache/cache_zone.c) without sockets: the
 * header round-trips, every flipped byte and every cut is refused; the
 * index finds, ages, evicts the least recently used past max_size and
 * keys_zone, and its loader indexes a directory, removing what a crash
 * left and what does not check out.
 */
#include "../helpers.h"
#include "proto/cache/cache_file.h"
#include "proto/cache/cache_key.h"
#include "proto/cache/cache_zone.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static size_t sample(uint8_t *out, struct cache_file_meta *m)
{
    *m = (struct cache_file_meta){.status = 200,
                                  .body_len = 5,
                                  .stored = 1700000000,
                                  .expires = 1700000060,
                                  .initial_age = 3,
                                  .swr = 1,
                                  .sie = 2,
                                  .body_crc = cache_file_crc(0, "hello", 5),
                                  .key = {"httpexample.com/a", 17},
                                  .vary = {"accept-encoding", 15},
                                  .variant = {"accept-encoding:gzip\n", 21},
                                  .head = {"Content-Type: text/plain\r\n", 26}};
    cache_file_encode(m, out);
    return cache_file_header_len(m);
}

START_TEST(file_round_trip)
{
    uint8_t buf[512];
    struct cache_file_meta m, got;
    size_t len = sample(buf, &m);
    ck_assert_uint_eq(len, CACHE_FILE_FIXED + 17 + 15 + 21 + 26);
    ck_assert_int_eq(cache_file_parse(buf, len, &got), 0);
    ck_assert_uint_eq(got.header_len, len);
    ck_assert_uint_eq(got.status, 200);
    ck_assert_uint_eq(got.body_len, 5);
    ck_assert_int_eq(got.expires, 1700000060);
    ck_assert_int_eq(got.initial_age, 3);
    ck_assert_uint_eq(got.body_crc, m.body_crc);
    ck_assert(got.key.len == 17 && memcmp(got.key.data, "httpexample.com/a", 17) == 0);
    ck_assert(got.head.len == 26 && memcmp(got.head.data, "Content-Type", 12) == 0);
    ck_assert(got.variant.len == 21);
}
END_TEST

/* Any one byte changed: refused, never read as another header. */
START_TEST(file_every_flip)
{
    uint8_t buf[512];
    struct cache_file_meta m, got;
    size_t len = sample(buf, &m);
    for (size_t i = 0; i < len; i++)
        for (int bit = 0; bit < 8; bit++) {
            buf[i] ^= (uint8_t)(1u << bit);
            int rc = cache_file_parse(buf, len, &got);
            ck_assert_msg(rc == -EINVAL || rc == -EAGAIN, "byte %zu bit %d: %d", i, bit, rc);
            buf[i] ^= (uint8_t)(1u << bit);
        }
    ck_assert_int_eq(cache_file_parse(buf, len, &got), 0);
}
END_TEST

/* Cut anywhere: -EAGAIN (with the length to read) or -EINVAL, reading
 * nothing past the cut (ASan watches each copy). */
START_TEST(file_every_cut)
{
    uint8_t buf[512];
    struct cache_file_meta m, got;
    size_t len = sample(buf, &m);
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *copy = malloc(cut > 0 ? cut : 1);
        memcpy(copy, buf, cut);
        int rc = cache_file_parse(copy, cut, &got);
        if (cut >= 8)
            ck_assert_int_eq(rc, -EAGAIN);
        else
            ck_assert_int_eq(rc, -EINVAL);
        if (rc == -EAGAIN)
            ck_assert_uint_gt(got.header_len, cut);
        free(copy);
    }
}
END_TEST

START_TEST(file_bad_lengths)
{
    uint8_t buf[512];
    struct cache_file_meta m, got;
    size_t len = sample(buf, &m);
    /* A header length past the bound, with a matching CRC. */
    uint8_t big[CACHE_FILE_FIXED];
    memcpy(big, buf, sizeof(big));
    big[16] = 0xff, big[17] = 0xff, big[18] = 0xff, big[19] = 0x7f;
    ck_assert_int_eq(cache_file_parse(big, sizeof(big), &got), -EINVAL);
    /* Another version. */
    buf[8] = 2;
    ck_assert_int_eq(cache_file_parse(buf, len, &got), -EINVAL);
}
END_TEST

/* The fixed part's padding not zero, with a CRC that matches it: refused
 * (it would not encode back to the same bytes). */
START_TEST(file_padding_not_zero)
{
    uint8_t buf[512];
    struct cache_file_meta m, got;
    size_t len = sample(buf, &m);
    buf[CACHE_FILE_FIXED - 1] = 0x01;
    memset(buf + 12, 0, 4);
    uint32_t crc = cache_file_crc(0, buf, len);
    for (int i = 0; i < 4; i++)
        buf[12 + i] = (uint8_t)(crc >> (8 * i));
    ck_assert_int_eq(cache_file_parse(buf, len, &got), -EINVAL);
    /* The same with zero padding parses: only the padding is refused. */
    buf[CACHE_FILE_FIXED - 1] = 0;
    memset(buf + 12, 0, 4);
    crc = cache_file_crc(0, buf, len);
    for (int i = 0; i < 4; i++)
        buf[12 + i] = (uint8_t)(crc >> (8 * i));
    ck_assert_int_eq(cache_file_parse(buf, len, &got), 0);
}
END_TEST

/* ------------------------------------------------------------ the zone */

static char dir[PATH_MAX];

static void make_dir(void)
{
    snprintf(dir, sizeof(dir), "/tmp/corral-cache-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void)
{
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static struct cache_zone *zone_make(const char *name, size_t keys_size, uint64_t max_size)
{
    struct cache_zone_conf conf = {.name = name,
                                   .path = dir,
                                   .levels = {1, 2},
                                   .keys_size = keys_size,
                                   .max_size = max_size,
                                   .inactive_s = 600};
    struct cache_zone *z = NULL;
    ck_assert_int_eq(cache_zone_get(&conf, &z), 0);
    ck_assert(cache_zone_wait_loaded(z, 5000));
    return z;
}

static void id_of(const char *key, uint8_t id[CACHE_ID_LEN])
{
    cache_key_id((struct http_str){key, strlen(key)}, (struct http_str){NULL, 0}, id);
}

/* Writes a valid entry for `key` where the zone puts it; returns its size. */
static uint64_t write_entry(struct cache_zone *z, const char *key, size_t body_len)
{
    uint8_t id[CACHE_ID_LEN];
    id_of(key, id);
    char *body = malloc(body_len + 1);
    memset(body, 'x', body_len);
    struct cache_file_meta m = {.status = 200,
                                .body_len = body_len,
                                .expires = 4000000000,
                                .body_crc = cache_file_crc(0, body, body_len),
                                .key = {key, strlen(key)},
                                .head = {"A: b\r\n", 6}};
    uint8_t header[1024];
    cache_file_encode(&m, header);
    char path[PATH_MAX];
    ck_assert_int_eq(cache_zone_path(z, id, path, true), 0);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, header, m.header_len), (ssize_t)m.header_len);
    ck_assert_int_eq(write(fd, body, body_len), (ssize_t)body_len);
    close(fd);
    free(body);
    return m.header_len + body_len;
}

static bool exists(struct cache_zone *z, const char *key)
{
    uint8_t id[CACHE_ID_LEN];
    id_of(key, id);
    char path[PATH_MAX];
    ck_assert_int_eq(cache_zone_path(z, id, path, false), 0);
    return access(path, F_OK) == 0;
}

START_TEST(zone_lookup_and_stale)
{
    make_dir();
    struct cache_zone *z = zone_make("lookup", 64 * 1024, 0);
    uint8_t id[CACHE_ID_LEN];
    id_of("k", id);
    struct cache_found f;
    cache_zone_lookup(z, id, 100, true, &f);
    ck_assert_int_eq(f.state, CACHE_LOOKUP_MISS);
    ck_assert_uint_eq(f.uses, 1);
    cache_zone_lookup(z, id, 100, true, &f);
    ck_assert_uint_eq(f.uses, 2); /* proxy_cache_min_uses counts */
    cache_zone_lookup(z, id, 100, false, &f);
    ck_assert_uint_eq(f.uses, 2); /* a request's look again does not */
    cache_zone_stored(z, id, &(struct cache_entry_info){.size = 10, .expires = 200});
    cache_zone_lookup(z, id, 199, true, &f);
    ck_assert_int_eq(f.state, CACHE_LOOKUP_FRESH);
    cache_zone_lookup(z, id, 200, true, &f);
    ck_assert_int_eq(f.state, CACHE_LOOKUP_STALE);
    ck_assert_uint_eq(cache_zone_size(z), 10);
    cache_zone_set_vary(z, id, "accept-language", 15);
    cache_zone_lookup(z, id, 150, true, &f);
    ck_assert_int_eq(f.state, CACHE_LOOKUP_VARY);
    ck_assert_str_eq(f.vary, "accept-language");
    ck_assert_uint_eq(cache_zone_size(z), 0);
    ck_assert(cache_zone_drop(z, id));
    ck_assert(!cache_zone_drop(z, id));
    /* Gone with its count: the look again counts the request anew. */
    cache_zone_lookup(z, id, 100, false, &f);
    ck_assert_uint_eq(f.uses, 1);
    remove_dir();
}
END_TEST

/* proxy_cache_lock's race: a request looks a cold key up (a miss), and
 * before it takes the lock another fetches the key whole, stores it and
 * lets its lock go.  Taking the lock now would fetch a second time: the
 * lock is refused for a look again, which finds the entry. */
START_TEST(zone_lock_after_store_looks_again)
{
    make_dir();
    struct cache_zone *z = zone_make("lockrace", 64 * 1024, 0);
    uint8_t id[CACHE_ID_LEN];
    id_of("k", id);
    struct cache_found first, late;
    cache_zone_lookup(z, id, 100, true, &first);
    ck_assert_int_eq(first.state, CACHE_LOOKUP_MISS);
    ck_assert_int_eq(cache_zone_lock(z, id, id, first.version, NULL), CACHE_LOCK_TAKEN);
    cache_zone_lookup(z, id, 100, true, &late); /* a miss too */
    ck_assert_int_eq(late.state, CACHE_LOOKUP_MISS);
    /* Held: nobody else fetches. */
    ck_assert_int_eq(cache_zone_lock(z, id, id, late.version, NULL), CACHE_LOCK_HELD);
    cache_zone_stored(z, id, &(struct cache_entry_info){.size = 10, .expires = 200});
    cache_zone_unlock(z, id);
    ck_assert_int_eq(cache_zone_lock(z, id, id, late.version, NULL), CACHE_LOCK_CHANGED);
    cache_zone_lookup(z, id, 100, true, &late);
    ck_assert_int_eq(late.state, CACHE_LOOKUP_FRESH);

    /* Stale: one updates it, and another that saw it stale does not. */
    struct cache_found stale;
    cache_zone_lookup(z, id, 300, true, &stale);
    ck_assert_int_eq(stale.state, CACHE_LOOKUP_STALE);
    ck_assert_int_eq(cache_zone_lock(z, id, id, stale.version, NULL), CACHE_LOCK_TAKEN);
    cache_zone_stored(z, id, &(struct cache_entry_info){.size = 10, .expires = 400});
    cache_zone_unlock(z, id);
    ck_assert_int_eq(cache_zone_lock(z, id, id, stale.version, NULL), CACHE_LOCK_CHANGED);
    /* Without the check it is taken, as with what the lookup saw. */
    cache_zone_lookup(z, id, 300, true, &late);
    ck_assert_int_eq(late.state, CACHE_LOOKUP_FRESH);
    ck_assert_int_eq(cache_zone_lock(z, id, NULL, stale.version, NULL), CACHE_LOCK_TAKEN);
    cache_zone_unlock(z, id);
    ck_assert_int_eq(cache_zone_lock(z, id, id, late.version, NULL), CACHE_LOCK_TAKEN);
    cache_zone_unlock(z, id);

    /* A key whose first response has Vary: its variant is stored under
     * another id, and the key itself changes to name the Vary. */
    uint8_t key[CACHE_ID_LEN], variant[CACHE_ID_LEN];
    id_of("v", key);
    cache_key_id((struct http_str){"v", 1}, (struct http_str){"en", 2}, variant);
    cache_zone_lookup(z, key, 100, true, &first);
    ck_assert_int_eq(cache_zone_lock(z, key, key, first.version, NULL), CACHE_LOCK_TAKEN);
    cache_zone_lookup(z, key, 100, true, &late);
    cache_zone_set_vary(z, key, "accept-language", 15);
    cache_zone_stored(z, variant, &(struct cache_entry_info){.size = 10, .expires = 200});
    cache_zone_unlock(z, key);
    ck_assert_int_eq(cache_zone_lock(z, key, key, late.version, NULL), CACHE_LOCK_CHANGED);
    cache_zone_lookup(z, key, 100, true, &late);
    ck_assert_int_eq(late.state, CACHE_LOOKUP_VARY);
    remove_dir();
}
END_TEST

/* Past max_size, the least recently used go, files and all. */
START_TEST(zone_evicts_lru)
{
    make_dir();
    struct cache_zone *z = zone_make("lru", 64 * 1024, 3000);
    const char *keys[] = {"a", "b", "c", "d"};
    uint64_t size = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t id[CACHE_ID_LEN];
        id_of(keys[i], id);
        struct cache_found f;
        cache_zone_lookup(z, id, 100, true, &f);
        size = write_entry(z, keys[i], 900);
        cache_zone_stored(z, id, &(struct cache_entry_info){.size = size, .expires = 4000000000});
        if (i == 2) { /* "a" used again: "b" is now the oldest */
            id_of("a", id);
            cache_zone_lookup(z, id, 100, true, &f);
        }
    }
    ck_assert_uint_le(cache_zone_size(z), 3000);
    ck_assert(exists(z, "a"));
    ck_assert(!exists(z, "b"));
    ck_assert(exists(z, "c") && exists(z, "d"));
    ck_assert_uint_ge(atomic_load(&cache_zone_counters(z)->evictions), 1);
    remove_dir();
}
END_TEST

/* keys_zone bounds the entries: the oldest node is given up. */
START_TEST(zone_bounded_by_keys)
{
    make_dir();
    size_t keys = 4096;
    struct cache_zone *z = zone_make("keys", keys, 0);
    size_t cap = cache_zone_capacity(keys);
    ck_assert_uint_gt(cap, 0);
    for (size_t i = 0; i < cap * 3; i++) {
        char key[32];
        snprintf(key, sizeof(key), "key%zu", i);
        uint8_t id[CACHE_ID_LEN];
        id_of(key, id);
        struct cache_found f;
        cache_zone_lookup(z, id, 100, true, &f);
    }
    ck_assert_uint_eq(cache_zone_count(z), cap);
    remove_dir();
}
END_TEST

/* The loader indexes what is there, removes temporary files and files
 * that do not check out (a flipped body byte, a cut file, a stray). */
START_TEST(zone_loader)
{
    make_dir();
    struct cache_zone *first = zone_make("writer", 64 * 1024, 0);
    uint64_t good = write_entry(first, "good", 100);
    write_entry(first, "flipped", 100);
    write_entry(first, "cut", 100);
    char path[PATH_MAX];
    uint8_t id[CACHE_ID_LEN];
    id_of("flipped", id);
    ck_assert_int_eq(cache_zone_path(first, id, path, false), 0);
    int fd = open(path, O_WRONLY);
    ck_assert_int_eq(pwrite(fd, "y", 1, 150), 1); /* in the body */
    close(fd);
    id_of("cut", id);
    ck_assert_int_eq(cache_zone_path(first, id, path, false), 0);
    ck_assert_int_eq(truncate(path, 150), 0);
    char temp[PATH_MAX + 16];
    snprintf(temp, sizeof(temp), "%s/.tmp.1.1", dir);
    test_write_file(temp, "half");
    /* Another zone over the same directory: its loader runs now. */
    struct cache_zone_conf conf = {
        .name = "reader", .path = dir, .levels = {1, 2}, .keys_size = 64 * 1024, .inactive_s = 600};
    struct cache_zone *z = NULL;
    ck_assert_int_eq(cache_zone_get(&conf, &z), 0);
    ck_assert(cache_zone_wait_loaded(z, 5000));
    ck_assert_uint_eq(atomic_load(&cache_zone_counters(z)->loader_files), 1);
    ck_assert_uint_eq(atomic_load(&cache_zone_counters(z)->corrupt), 2);
    ck_assert_uint_eq(cache_zone_size(z), good);
    ck_assert(exists(z, "good"));
    ck_assert(!exists(z, "flipped"));
    ck_assert(!exists(z, "cut"));
    ck_assert_int_eq(access(temp, F_OK), -1);
    struct cache_found f;
    id_of("good", id);
    cache_zone_lookup(z, id, 100, true, &f);
    ck_assert_int_eq(f.state, CACHE_LOOKUP_FRESH);
    remove_dir();
}
END_TEST

static bool zone_empty(void *arg)
{
    return cache_zone_count(arg) == 0;
}

/* The manager takes an entry out of the index under the zone's lock and
 * unlinks its file after: the file may outlive the count for a moment. */
static bool idle_gone(void *arg)
{
    return zone_empty(arg) && !exists(arg, "idle");
}

/* inactive: the manager removes what nobody used for that long, file and
 * all, fresh or not. */
START_TEST(zone_inactive_expiry)
{
    make_dir();
    struct cache_zone_conf conf = {
        .name = "idle", .path = dir, .levels = {1, 2}, .keys_size = 64 * 1024, .inactive_s = 1};
    struct cache_zone *z = NULL;
    ck_assert_int_eq(cache_zone_get(&conf, &z), 0);
    ck_assert(cache_zone_wait_loaded(z, 5000));
    uint8_t id[CACHE_ID_LEN];
    id_of("idle", id);
    struct cache_found f;
    cache_zone_lookup(z, id, (int64_t)time(NULL), true, &f);
    uint64_t size = write_entry(z, "idle", 100);
    cache_zone_stored(z, id, &(struct cache_entry_info){.size = size, .expires = 4000000000});
    ck_assert(exists(z, "idle"));
    ck_assert(test_poll_until(idle_gone, z, 5000));
    ck_assert_uint_eq(cache_zone_size(z), 0);
    remove_dir();
}
END_TEST

/* The same name again (a reload) is the same zone; another path is not. */
START_TEST(zone_kept_by_name)
{
    make_dir();
    struct cache_zone *a = zone_make("kept", 64 * 1024, 0);
    struct cache_zone *b = zone_make("kept", 64 * 1024, 100);
    ck_assert_ptr_eq(a, b);
    ck_assert_ptr_eq(cache_zone_find("kept"), a);
    struct cache_zone_conf conf = {
        .name = "kept", .path = "/tmp", .levels = {1, 2}, .keys_size = 64 * 1024};
    struct cache_zone *c;
    ck_assert_int_eq(cache_zone_get(&conf, &c), -EEXIST);
    remove_dir();
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/cache_file");
    TCase *tc = tcase_create("file");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, file_round_trip);
    tcase_add_test(tc, file_every_flip);
    tcase_add_test(tc, file_every_cut);
    tcase_add_test(tc, file_bad_lengths);
    tcase_add_test(tc, file_padding_not_zero);
    tcase_add_test(tc, zone_lookup_and_stale);
    tcase_add_test(tc, zone_lock_after_store_looks_again);
    tcase_add_test(tc, zone_evicts_lru);
    tcase_add_test(tc, zone_bounded_by_keys);
    tcase_add_test(tc, zone_loader);
    tcase_add_test(tc, zone_kept_by_name);
    tcase_add_test(tc, zone_inactive_expiry);
    suite_add_tcase(suite, tc);
    return suite;
}
