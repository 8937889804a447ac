/*
 * test_auth_basic.c: auth_basic without sockets: htpasswd files (each
 * hash kind, made by htpasswd and openssl passwd, and the refused ones,
 * with their file and line), apr1 against openssl's, strict base64, the
 * check of Authorization values and the per-worker credential cache.
 */
#include "../helpers.h"
#include "proto/policy/auth_basic.h"
#include "proto/policy/auth_cache.h"
#include "proto/policy/base64.h"
#include "proto/policy/htpasswd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Made with `htpasswd -nbB -C 4`, `htpasswd -nbm`, `openssl passwd -6,
 * -5, -1, -apr1`. */
static const char users[] =
    "# comment, then a blank line\n"
    "\n"
    "alice:$2y$04$EA5l6pWczuNk4dkoSKFqbuERxUQT3FF1eebrBs0BypLd3cb.gDmy.\n"
    "bob:$apr1$JbSxrvBT$ZL4GHarpYV/fJpLTnYQwv.\r\n"
    "carol:$6$Xy7.saltsalt$bae2pp7VlArqENQQwDgEpQjsJjeiUuRjlhiUCEDDkFTBD5x/"
    "Gjv8YOMDHEFPuVeB7nR3HmkahNYyKI72Kbsth0\n"
    "dave:$5$abcd$F2faMfFCTweQouurU/mmw/HQR9LAxSiY.Uhbb5/pMM1\n"
    "erin:$1$q1w2e3r4$rl1hveYwqCOI62HnfjoM7.\n"
    "frank:$apr1$$YRFIt/ifsnwJoQI0a4Oxp1:extra field\n"
    "gina:$apr1$z$.gLCGOUAsBYRHNmHjndlB/\n"
    "alice:$apr1$JbSxrvBT$ZL4GHarpYV/fJpLTnYQwv.\n"; /* a second alice: the first wins */

static struct htpasswd *load(const char *text)
{
    struct htpasswd *h = NULL;
    char message[256];
    int rc = htpasswd_parse("users", text, strlen(text), &h, message, sizeof(message));
    ck_assert_msg(rc == 0, "%s", message);
    return h;
}

static bool verify(const struct htpasswd *h, const char *user, const char *password)
{
    const struct htpasswd_entry *e = htpasswd_find(h, user, strlen(user));
    ck_assert_ptr_nonnull(e);
    return htpasswd_verify(e->hash, e->kind, password, strlen(password));
}

/* Each kind verifies its own password and refuses another. */
START_TEST(each_hash_kind_verifies)
{
    struct htpasswd *h = load(users);
    ck_assert_uint_eq(h->count, 8);
    ck_assert(verify(h, "alice", "open sesame"));
    ck_assert(!verify(h, "alice", "open sesamE"));
    ck_assert(verify(h, "bob", "pw:with:colons"));
    ck_assert(!verify(h, "bob", "pw:with:colon"));
    ck_assert(verify(h, "carol", "carolpw"));
    ck_assert(!verify(h, "carol", "carolpx"));
    ck_assert(verify(h, "dave", "davepw"));
    ck_assert(!verify(h, "dave", ""));
    ck_assert(verify(h, "erin", "erinpw"));
    ck_assert(verify(h, "frank", "frankpw")); /* an empty salt, a third field */
    ck_assert(verify(h, "gina", ""));         /* an empty password */
    ck_assert(!verify(h, "gina", "x"));
    ck_assert_int_eq(htpasswd_find(h, "alice", 5)->kind, HTPASSWD_BCRYPT);
    ck_assert_ptr_null(htpasswd_find(h, "alic", 4));
    ck_assert_ptr_null(htpasswd_find(h, "zed", 3));
    /* rounds= (made with Python's crypt module, as mkpasswd -R does). */
    struct htpasswd *rounds = load("r:$6$rounds=6000$saltsalt$pu916RzbZAOLOJcNpNFVYgOgw3fRzUq4hMe3c"
                                   "axBYyrc7vVLE/VcARa4qB1ND9PbxPWoB/vZBRb0Rbzre6Q.8.\n");
    ck_assert(verify(rounds, "r", "roundspw"));
    ck_assert(!verify(rounds, "r", "roundspx"));
    htpasswd_free(rounds);
    /* A NUL in the password never matches what it starts with. */
    ck_assert(!htpasswd_verify(htpasswd_find(h, "dave", 4)->hash, HTPASSWD_SHA256, "davepw\0x", 8));
    htpasswd_free(h);
}
END_TEST

/* apr1 of a 40-byte password with an 8-byte salt, as openssl passwd
 * -apr1 -salt 12345678 makes it. */
START_TEST(apr1_matches_openssl)
{
    char out[HTPASSWD_APR1_MAX];
    const char *pw = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    ck_assert_int_eq(htpasswd_apr1(pw, strlen(pw), "$apr1$12345678$", out), 0);
    ck_assert_str_eq(out, "$apr1$12345678$ZB1vyDV5V.sOKjJ6rQyTE1");
    ck_assert_int_eq(htpasswd_apr1("frankpw", 7, "$apr1$$", out), 0);
    ck_assert_str_eq(out, "$apr1$$YRFIt/ifsnwJoQI0a4Oxp1");
    ck_assert_int_eq(htpasswd_apr1("x", 1, "$1$abc$", out), -1);
}
END_TEST

static void refused(const char *text, const char *expected)
{
    struct htpasswd *h = NULL;
    char message[256] = "";
    ck_assert_int_eq(htpasswd_parse("f.htpasswd", text, strlen(text), &h, message, sizeof(message)),
                     -1);
    ck_assert_ptr_null(h);
    ck_assert_msg(strstr(message, expected) != NULL, "\"%s\" lacks \"%s\"", message, expected);
}

/* Weak and malformed entries fail the load, naming the file and line. */
START_TEST(weak_and_bad_entries_are_refused)
{
    refused("# only\n\nplain:plainpw\n", "f.htpasswd:3: user \"plain\": plain-text");
    refused("des:HzCyLz.VEE2To\n", "f.htpasswd:1: user \"des\": DES-crypt hashes are refused");
    refused("sha:{SHA}qs67vlse11GdWHE+bbh7CYDxCOs=\n", "{SHA}");
    refused("a:$2y$04$short\n", "f.htpasswd:1: user \"a\": malformed bcrypt");
    refused("a:$6$salt$tooshort\n", "malformed SHA-512-crypt");
    refused("a:$5$salt\n", "malformed SHA-256-crypt");
    refused(
        "a:$6$rounds=x$salt$pu916RzbZAOLOJcNpNFVYgOgw3fRzUq4hMe3caxBYyrc7vVLE/VcARa4qB1ND9PbxPWoB"
        "/vZBRb0Rbzre6Q.8.\n",
        "malformed SHA-512-crypt");
    refused("a:$apr1$123456789$YRFIt/ifsnwJoQI0a4Oxp1\n", "malformed apr1"); /* salt of 9 */
    refused("ok:$1$q1w2e3r4$rl1hveYwqCOI62HnfjoM7.\nnocolon\n", "f.htpasswd:2: expected");
    refused(":$1$q1w2e3r4$rl1hveYwqCOI62HnfjoM7.\n", "expected \"user:hash\"");
    refused("# nobody\n", "no user");
    refused("a\tb:$1$q1w2e3r4$rl1hveYwqCOI62HnfjoM7.\n", "control byte");
}
END_TEST

START_TEST(files_load_from_disk)
{
    char path[] = "/tmp/corral-htpasswd-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, users, strlen(users)), (ssize_t)strlen(users));
    close(fd);
    struct htpasswd *h = NULL, *again = NULL;
    char message[256];
    ck_assert_int_eq(htpasswd_load(path, &h, message, sizeof(message)), 0);
    ck_assert_int_eq(htpasswd_load(path, &again, message, sizeof(message)), 0);
    ck_assert_uint_ne(h->generation, again->generation); /* each load its own */
    unlink(path);
    htpasswd_free(h);
    ck_assert_int_eq(htpasswd_load(path, &h, message, sizeof(message)), -1);
    ck_assert_ptr_null(h);
    ck_assert(strstr(message, "cannot open") != NULL);
    htpasswd_free(again);
}
END_TEST

START_TEST(base64_is_strict)
{
    uint8_t out[64];
    ck_assert_int_eq(base64_decode("YWxpY2U6c2VjcmV0", 16, false, out, sizeof(out)), 12);
    ck_assert_int_eq(memcmp(out, "alice:secret", 12), 0);
    ck_assert_int_eq(base64_decode("YQ==", 4, false, out, sizeof(out)), 1);
    ck_assert_int_eq(base64_decode("YQ", 2, false, out, sizeof(out)), -1);   /* unpadded */
    ck_assert_int_eq(base64_decode("YR==", 4, false, out, sizeof(out)), -1); /* stray bits */
    ck_assert_int_eq(base64_decode("Y Q=", 4, false, out, sizeof(out)), -1);
    ck_assert_int_eq(base64_decode("YQ", 2, true, out, sizeof(out)), 1);
    ck_assert_int_eq(base64_decode("YQ==", 4, true, out, sizeof(out)), -1); /* url: no padding */
    ck_assert_int_eq(base64_decode("-_8", 3, true, out, sizeof(out)), 2);
    ck_assert_int_eq(base64_decode("+/8", 3, true, out, sizeof(out)), -1);
    ck_assert_int_eq(base64_decode("Y", 1, true, out, sizeof(out)), -1);
    ck_assert_int_eq(base64_decode("YWxpY2U6c2VjcmV0", 16, false, out, 11), -1); /* no room */
}
END_TEST

static enum auth_basic_result check(const struct htpasswd *h, const char *value,
                                    struct auth_cache *cache, uint64_t now, char *user)
{
    size_t len = 0;
    enum auth_basic_result r =
        auth_basic_check(h, (struct http_str){value, strlen(value)}, cache, now, user, &len);
    user[r == AUTH_BASIC_OK ? len : 0] = '\0';
    return r;
}

/* "Basic " and base64 of user:password; a missing or other scheme is not
 * a failure, a malformed or wrong one is. */
START_TEST(authorization_values)
{
    struct htpasswd *h = load(users);
    char user[AUTH_BASIC_CREDENTIALS_MAX];
    /* carol:carolpw, dave:davepw */
    ck_assert_int_eq(check(h, "Basic Y2Fyb2w6Y2Fyb2xwdw==", NULL, 0, user), AUTH_BASIC_OK);
    ck_assert_str_eq(user, "carol");
    ck_assert_int_eq(check(h, "  basic   ZGF2ZTpkYXZlcHc= ", NULL, 0, user), AUTH_BASIC_OK);
    ck_assert_str_eq(user, "dave");
    ck_assert_int_eq(check(h, "Basic ZGF2ZTpkYXZlcHg=", NULL, 0, user), AUTH_BASIC_WRONG);
    ck_assert_int_eq(check(h, "Basic bm9ib2R5OmRhdmVwdw==", NULL, 0, user), AUTH_BASIC_WRONG);
    ck_assert_int_eq(check(h, "Basic ZGF2ZQ==", NULL, 0, user), AUTH_BASIC_WRONG); /* no ':' */
    ck_assert_int_eq(check(h, "Basic !!!!", NULL, 0, user), AUTH_BASIC_WRONG);
    ck_assert_int_eq(check(h, "", NULL, 0, user), AUTH_BASIC_MISSING);
    ck_assert_int_eq(check(h, "Bearer abc", NULL, 0, user), AUTH_BASIC_MISSING);
    ck_assert_int_eq(check(h, "Basicx", NULL, 0, user), AUTH_BASIC_MISSING);
    /* Longer than the bound: refused, not overrun. */
    static char big[4 * AUTH_BASIC_CREDENTIALS_MAX];
    memcpy(big, "Basic ", 6);
    memset(big + 6, 'Q', sizeof(big) - 7);
    ck_assert_int_eq(check(h, big, NULL, 0, user), AUTH_BASIC_WRONG);
    htpasswd_free(h);
}
END_TEST

/* A success goes to the cache; a hit there answers without the hash (a
 * key put by hand for a wrong password passes), until it expires; a
 * reload's file is another key. */
START_TEST(cache_keeps_successes_for_a_while)
{
    struct htpasswd *h = load(users);
    static struct auth_cache cache;
    memset(&cache, 0, sizeof(cache));
    char user[AUTH_BASIC_CREDENTIALS_MAX];
    struct auth_cache_key key;
    ck_assert_int_eq(auth_cache_key(h->generation, "dave", 4, "davepw", 6, &key), 0);
    ck_assert(!auth_cache_hit(&cache, &key, 1000));
    ck_assert_int_eq(check(h, "Basic ZGF2ZTpkYXZlcHc=", &cache, 1000, user), AUTH_BASIC_OK);
    ck_assert(auth_cache_hit(&cache, &key, 1000 + AUTH_CACHE_TTL_MS - 1));
    ck_assert(!auth_cache_hit(&cache, &key, 1000 + AUTH_CACHE_TTL_MS));
    /* Failures are never kept. */
    ck_assert_int_eq(auth_cache_key(h->generation, "dave", 4, "davepx", 6, &key), 0);
    ck_assert_int_eq(check(h, "Basic ZGF2ZTpkYXZlcHg=", &cache, 1000, user), AUTH_BASIC_WRONG);
    ck_assert(!auth_cache_hit(&cache, &key, 1000));
    auth_cache_put(&cache, &key, 2000);
    ck_assert_int_eq(check(h, "Basic ZGF2ZTpkYXZlcHg=", &cache, 2000, user), AUTH_BASIC_OK);
    ck_assert_int_eq(check(h, "Basic ZGF2ZTpkYXZlcHg=", &cache, 2000 + AUTH_CACHE_TTL_MS, user),
                     AUTH_BASIC_WRONG);
    struct htpasswd *reloaded = load(users);
    auth_cache_put(&cache, &key, 3000);
    ck_assert_int_eq(check(reloaded, "Basic ZGF2ZTpkYXZlcHg=", &cache, 3000, user),
                     AUTH_BASIC_WRONG);
    htpasswd_free(reloaded);
    htpasswd_free(h);
}
END_TEST

/* The cache holds AUTH_CACHE_ENTRIES at most: a full set drops its
 * oldest. */
START_TEST(cache_is_bounded)
{
    static struct auth_cache cache;
    memset(&cache, 0, sizeof(cache));
    struct auth_cache_key keys[3 * AUTH_CACHE_ENTRIES];
    for (unsigned i = 0; i < 3 * AUTH_CACHE_ENTRIES; i++) {
        char pw[16];
        int n = snprintf(pw, sizeof(pw), "%u", i);
        ck_assert_int_eq(auth_cache_key(1, "u", 1, pw, (size_t)n, &keys[i]), 0);
        auth_cache_put(&cache, &keys[i], 1000 + i);
    }
    unsigned hits = 0;
    for (unsigned i = 0; i < 3 * AUTH_CACHE_ENTRIES; i++)
        hits += auth_cache_hit(&cache, &keys[i], 5000);
    ck_assert_uint_le(hits, AUTH_CACHE_ENTRIES);
    ck_assert_uint_gt(hits, AUTH_CACHE_ENTRIES / 2);
    ck_assert(auth_cache_hit(&cache, &keys[3 * AUTH_CACHE_ENTRIES - 1], 5000)); /* the newest */
    ck_assert_ptr_eq(auth_cache_worker(), auth_cache_worker());
}
END_TEST

START_TEST(challenge_escapes_the_realm)
{
    char line[128];
    size_t n = auth_basic_challenge("a \"b\" \\c", line, sizeof(line));
    ck_assert_str_eq(line, "WWW-Authenticate: Basic realm=\"a \\\"b\\\" \\\\c\"\r\n");
    ck_assert_uint_eq(n, strlen(line));
    ck_assert_uint_eq(auth_basic_challenge("0123456789", line, 40), 0); /* does not fit */
}
END_TEST

/* CPU time of auth_basic_check() on `value`, in ns. */
static uint64_t cpu_ns(const struct htpasswd *h, const char *value)
{
    char user[AUTH_BASIC_CREDENTIALS_MAX];
    struct timespec a, b;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
    check(h, value, NULL, 0, user);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
    return (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000u + (uint64_t)b.tv_nsec -
           (uint64_t)a.tv_nsec;
}

/* An unknown user costs a bcrypt check too (cost 8: milliseconds), so
 * that timing tells no user names; without it, microseconds. */
START_TEST(unknown_users_cost_a_check)
{
    struct htpasswd *h =
        load("slow:$2y$08$4vgiKjFvswygYAq/xKnvNurbtRFS2ER/42rWluUF332Zu0IRz21eu\n");
    /* slow:wrong, nobody:wrong */
    uint64_t known = cpu_ns(h, "Basic c2xvdzp3cm9uZw==");
    uint64_t unknown = cpu_ns(h, "Basic bm9ib2R5Ondyb25n");
    ck_assert_msg(unknown > known / 3, "unknown user: %llu ns, known: %llu ns",
                  (unsigned long long)unknown, (unsigned long long)known);
    ck_assert_uint_gt(known, 1000000); /* bcrypt did its work */
    htpasswd_free(h);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("proto/auth_basic");
    TCase *tc = tcase_create("auth_basic");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, each_hash_kind_verifies);
    tcase_add_test(tc, apr1_matches_openssl);
    tcase_add_test(tc, weak_and_bad_entries_are_refused);
    tcase_add_test(tc, files_load_from_disk);
    tcase_add_test(tc, base64_is_strict);
    tcase_add_test(tc, authorization_values);
    tcase_add_test(tc, cache_keeps_successes_for_a_while);
    tcase_add_test(tc, cache_is_bounded);
    tcase_add_test(tc, challenge_escapes_the_realm);
    tcase_add_test(tc, unknown_users_cost_a_check);
    suite_add_tcase(suite, tc);
    return suite;
}
