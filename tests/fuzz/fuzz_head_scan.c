/*
 * fuzz_head_scan.c: libFuzzer over the framing checks of a head as the
 * request reader and the proxy read it.  http_head_length_valid() must
 * give the length and, for a complete head, the verdict of the plain
 * three-pass scans below (what both readers used before): the pass it
 * saves must not change a verdict on a client's or a backend's bytes.
 */
#include "proto/http/http.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The head's length through its empty line, or 0 while incomplete. */
static size_t reference_length(const char *data, size_t len)
{
    const char *p = data, *end = data + len;
    while ((p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        p++;
        if (p < end && *p == '\n')
            return (size_t)(p + 1 - data);
        if (p + 1 < end && p[0] == '\r' && p[1] == '\n')
            return (size_t)(p + 2 - data);
    }
    return 0;
}

/* Every line must end in CRLF, and no line may continue the one before
 * (obs-fold, which llhttp accepts): bare CRs, bare LFs and folded lines are
 * how request smuggling hides a header from one of two parsers. */
static bool reference_lines_valid(const char *head, size_t len)
{
    /* Each CR must start a CRLF not followed by a fold; then the LFs are all
     * the ones those CRLFs end exactly when there are as many LFs as CRs.
     * memchr, because this scans every head byte. */
    const char *end = head + len;
    size_t crs = 0, lfs = 0;
    for (const char *p = head; (p = memchr(p, '\r', (size_t)(end - p))) != NULL; p += 2, crs++) {
        if (p + 1 == end || p[1] != '\n')
            return false;
        if (p + 2 < end && (p[2] == ' ' || p[2] == '\t'))
            return false;
    }
    for (const char *p = head; (p = memchr(p, '\n', (size_t)(end - p))) != NULL; p++)
        lfs++;
    return lfs == crs;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of its own size, so that a read past the input is caught. */
    char *text = malloc(size > 0 ? size : 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    bool valid = false;
    size_t head = http_head_length_valid(text, size, &valid);
    assert(head == reference_length(text, size));
    assert(head <= size);
    if (head > 0)
        assert(valid == reference_lines_valid(text, head));
    free(text);
    return 0;
}
