/*
 * compress_accept.c: Accept-Encoding read without copying or allocating,
 * one element at a time, bounded by the value's length; and the choice of
 * a coding from what it says.
 */
#include "proto/compress/compress_accept.h"

#include <assert.h>
#include <strings.h>

static const char *const names[COMPRESS_CODINGS] = {
    [COMPRESS_ZSTD] = "zstd",
    [COMPRESS_BR] = "br",
    [COMPRESS_GZIP] = "gzip",
};

const char *compress_coding_name(enum compress_coding coding)
{
    return coding < COMPRESS_CODINGS ? names[coding] : "identity";
}

void compress_accept_init(struct compress_accept *a)
{
    for (int i = 0; i < COMPRESS_CODINGS; i++)
        a->q[i] = COMPRESS_Q_UNSET;
    a->any = COMPRESS_Q_UNSET;
    a->identity = COMPRESS_Q_UNSET;
}

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* tchar of RFC 9110 5.6.2. */
static bool is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~': return true;
    default: return false;
    }
}

static bool word_is(const char *p, size_t len, const char *word, size_t word_len)
{
    return len == word_len && strncasecmp(p, word, len) == 0;
}

/* A qvalue (RFC 9110 12.4.2): "0" ["." 0*3DIGIT] / "1" ["." 0*3("0")],
 * in thousandths; -1 when it is not one. */
static int parse_qvalue(const char *p, size_t len)
{
    if (len == 0 || (p[0] != '0' && p[0] != '1'))
        return -1;
    int q = (p[0] - '0') * 1000;
    if (len == 1)
        return q;
    if (p[1] != '.' || len > 5)
        return -1;
    int scale = 100;
    for (size_t i = 2; i < len; i++, scale /= 10) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        q += (p[i] - '0') * scale;
    }
    return q <= 1000 ? q : -1;
}

/* One element, p..end, without its comma: its q-value, -1 if malformed. */
static int element_q(const char *p, const char *end)
{
    int q = 1000;
    while (p < end) {
        /* p is at ";" or at junk */
        while (p < end && is_ows(*p))
            p++;
        if (p == end)
            break;
        if (*p != ';')
            return -1;
        p++;
        while (p < end && is_ows(*p))
            p++;
        const char *name = p;
        while (p < end && is_tchar((unsigned char)*p))
            p++;
        size_t name_len = (size_t)(p - name);
        if (name_len == 0 || p == end || *p != '=')
            return -1;
        p++;
        const char *value = p;
        if (p < end && *p == '"') { /* a quoted parameter, skipped whole */
            for (p++; p < end && *p != '"'; p++)
                if (*p == '\\' && p + 1 < end)
                    p++;
            if (p == end)
                return -1;
            p++;
        } else {
            while (p < end && is_tchar((unsigned char)*p))
                p++;
        }
        if (word_is(name, name_len, "q", 1)) {
            q = parse_qvalue(value, (size_t)(p - value));
            if (q < 0)
                return -1;
        }
    }
    return q;
}

static void take(uint16_t *slot, int q)
{
    if (*slot == COMPRESS_Q_UNSET) /* the first element naming it counts */
        *slot = (uint16_t)q;
}

void compress_accept_parse(struct compress_accept *a, const char *value, size_t len)
{
    const char *p = value, *end = value + len;
    while (p < end) {
        while (p < end && (is_ows(*p) || *p == ','))
            p++;
        const char *start = p;
        bool quoted = false; /* a comma inside a quoted parameter ends nothing */
        for (; p < end && (quoted || *p != ','); p++) {
            if (*p == '"')
                quoted = !quoted;
            else if (quoted && *p == '\\' && p + 1 < end)
                p++;
        }
        const char *stop = p; /* the element is start..stop */
        const char *t = start;
        while (t < stop && is_tchar((unsigned char)*t))
            t++;
        size_t token_len = (size_t)(t - start);
        if (token_len == 0)
            continue;
        int q = element_q(t, stop);
        if (q < 0)
            continue;
        if (word_is(start, token_len, "gzip", 4) || word_is(start, token_len, "x-gzip", 6))
            take(&a->q[COMPRESS_GZIP], q);
        else if (word_is(start, token_len, "br", 2))
            take(&a->q[COMPRESS_BR], q);
        else if (word_is(start, token_len, "zstd", 4))
            take(&a->q[COMPRESS_ZSTD], q);
        else if (word_is(start, token_len, "identity", 8))
            take(&a->identity, q);
        else if (word_is(start, token_len, "*", 1))
            take(&a->any, q);
    }
}

unsigned compress_accept_q(const struct compress_accept *a, enum compress_coding coding)
{
    if (a->q[coding] != COMPRESS_Q_UNSET)
        return a->q[coding];
    return a->any != COMPRESS_Q_UNSET ? a->any : 0;
}

size_t compress_accept_order(const struct compress_accept *a,
                             enum compress_coding order[COMPRESS_CODINGS])
{
    size_t n = 0;
    for (int c = 0; c < COMPRESS_CODINGS; c++) {
        unsigned q = compress_accept_q(a, (enum compress_coding)c);
        if (q == 0)
            continue;
        /* Insertion: after those worth as much or more (the enum's order
         * breaks ties, since c grows). */
        size_t at = n;
        while (at > 0 && compress_accept_q(a, order[at - 1]) < q) {
            order[at] = order[at - 1];
            at--;
        }
        assert(n < COMPRESS_CODINGS); /* each coding once */
        order[at] = (enum compress_coding)c;
        n++;
    }
    return n;
}

int compress_accept_choose(const struct compress_accept *a, unsigned offered)
{
    enum compress_coding order[COMPRESS_CODINGS];
    size_t n = compress_accept_order(a, order);
    assert(n <= COMPRESS_CODINGS);
    for (size_t i = 0; i < n; i++)
        if (offered & (1u << order[i]))
            return (int)order[i];
    return -1;
}
