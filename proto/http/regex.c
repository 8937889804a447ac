/*
 * regex.c: PCRE2 for map and location.  A match needs match data, which
 * PCRE2 allocates through a context: here the context hands out bytes of
 * an array on the caller's stack, so a request's match costs no malloc.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "proto/http/regex.h"

#include <corral.h>
#include <errno.h>
#include <pcre2.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct http_regex {
    pcre2_code *code;
};

/* PCRE2's JIT needs memory that is written, then executed, which a
 * sandbox may forbid (systemd's MemoryDenyWriteExecute=yes): the
 * interpreter then matches, slower.  Said once per process, not per
 * regex or per reload. */
static void note_jit(int rc)
{
    static atomic_bool told;
    if (rc == 0 || atomic_exchange(&told, true))
        return;
    PCRE2_UCHAR text[120];
    pcre2_get_error_message(rc, text, sizeof(text));
    corral_log(CORRAL_LOG_WARN,
               "regex: PCRE2's JIT is unavailable (%s); regexes run in the interpreter, slower "
               "(under systemd, MemoryDenyWriteExecute=yes does this)",
               (const char *)text);
}

int regex_compile(const char *pattern, bool caseless, struct http_regex **out, char *message,
                  size_t size, size_t *offset)
{
    struct http_regex *re = calloc(1, sizeof(*re));
    if (re == NULL)
        return -ENOMEM;
    int code;
    PCRE2_SIZE at;
    re->code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                             caseless ? PCRE2_CASELESS : 0, &code, &at, NULL);
    if (re->code == NULL) {
        free(re);
        PCRE2_UCHAR text[120];
        pcre2_get_error_message(code, text, sizeof(text));
        snprintf(message, size, "%s", (const char *)text);
        *offset = (size_t)at;
        return code == PCRE2_ERROR_NOMEMORY ? -ENOMEM : -EINVAL;
    }
    note_jit(pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE)); /* else the interpreter */
    *out = re;
    return 0;
}

void regex_free(struct http_regex *re)
{
    if (re == NULL)
        return;
    pcre2_code_free(re->code);
    free(re);
}

/* Room for the general context and match data of HTTP_REGEX_PAIRS pairs,
 * with margin for PCRE2's own headers. */
struct arena {
    alignas(max_align_t) unsigned char bytes[1024];
    size_t used;
};

/* Past the arena, the heap: without the JIT (a sandbox that forbids
 * executable memory), PCRE2's interpreter keeps its backtracking frames
 * (20 KiB at least) through this context, and a match that could not have
 * them would fail every request. */
static void *arena_malloc(size_t size, void *data)
{
    struct arena *a = data;
    size = (size + alignof(max_align_t) - 1) & ~(alignof(max_align_t) - 1);
    if (size > sizeof(a->bytes) - a->used)
        return malloc(size);
    void *p = a->bytes + a->used;
    a->used += size;
    return p;
}

static void arena_free(void *p, void *data)
{
    /* The arena goes with the caller's frame; what came from the heap
     * goes back there. */
    struct arena *a = data;
    uintptr_t at = (uintptr_t)p, start = (uintptr_t)a->bytes;
    if (p != NULL && (at < start || at >= start + sizeof(a->bytes)))
        free(p);
}

/* Every request can fail the same way: one line a second is enough. */
static void log_gave_up(int rc, size_t len)
{
    static _Thread_local time_t logged;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    if (logged != 0 && now.tv_sec == logged)
        return;
    logged = now.tv_sec != 0 ? now.tv_sec : 1;
    PCRE2_UCHAR text[120];
    pcre2_get_error_message(rc, text, sizeof(text));
    corral_log(CORRAL_LOG_ERROR, "regex match on a %zu-byte subject gave up: %s", len,
               (const char *)text);
}

int regex_match(const struct http_regex *re, const char *subject, size_t len,
                size_t ovector[2 * HTTP_REGEX_PAIRS])
{
    struct arena arena = {.used = 0};
    pcre2_general_context *gc = pcre2_general_context_create(arena_malloc, arena_free, &arena);
    pcre2_match_data *md = gc != NULL ? pcre2_match_data_create(HTTP_REGEX_PAIRS, gc) : NULL;
    if (md == NULL)
        return 0; /* cannot happen: the arena is sized for both */
    int rc = pcre2_match(re->code, (PCRE2_SPTR)subject, len, 0, 0, md, NULL);
    int pairs = 0;
    if (rc == PCRE2_ERROR_NOMATCH || rc == PCRE2_ERROR_PARTIAL) {
        pairs = 0;
    } else if (rc < 0) {
        log_gave_up(rc, len);
        pairs = HTTP_REGEX_GAVE_UP;
    } else {
        /* rc 0: more groups than pairs; every pair is set then. */
        pairs = rc == 0 ? HTTP_REGEX_PAIRS : rc;
        const PCRE2_SIZE *v = pcre2_get_ovector_pointer(md);
        for (int i = 0; i < pairs; i++) {
            bool unset = v[2 * i] == PCRE2_UNSET;
            ovector[2 * i] = unset ? 1 : v[2 * i]; /* start > end: unset */
            ovector[2 * i + 1] = unset ? 0 : v[2 * i + 1];
        }
    }
    pcre2_match_data_free(md); /* the interpreter's frames, if on the heap */
    return pairs;
}

int regex_group(const struct http_regex *re, const char *name, size_t len)
{
    char copy[64];
    if (len >= sizeof(copy))
        return -1;
    memcpy(copy, name, len);
    copy[len] = '\0';
    int n = pcre2_substring_number_from_name(re->code, (PCRE2_SPTR)copy);
    return n > 0 ? n : -1;
}
