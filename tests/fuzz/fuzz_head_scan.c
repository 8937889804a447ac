/*
 * fuzz_head_scan.c: libFuzzer over the framing checks of a response head
 * as the proxy reads it.  http_head_length_valid() must give the length
 * http_head_length() gives and, for a complete head, the answer of
 * http_head_lines_valid(): the one pass it saves must not change a
 * verdict on a backend's bytes.
 */
#include "proto/http/http.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
    assert(head == http_head_length(text, size));
    assert(head <= size);
    if (head > 0)
        assert(valid == http_head_lines_valid(text, head));
    free(text);
    return 0;
}
