/*
 * fuzz_health.c: libFuzzer over the status line an active health check
 * reads from a server: whole, and at every length up to the whole, the
 * answer must be consistent and never read past what it was given.
 */
#include "proto/upstream/health.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy, so that ASan sees any read past the end. */
    char *copy = malloc(size > 0 ? size : 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    unsigned status = 0;
    int whole = health_status_line(copy, size, &status);
    if (whole == 1 && (status < 100 || status > 999 || memcmp(copy, "HTTP/1.", 7) != 0))
        abort();
    /* A prefix never decides differently from the whole, except by
     * waiting for more (0). */
    for (size_t len = 0; len < size && len < 600; len++) {
        unsigned s = 0;
        int part = health_status_line(copy, len, &s);
        if (part != 0 && (part != whole || s != status))
            abort();
    }
    free(copy);
    return 0;
}
