/*
 * fuzz_http1.c: libFuzzer over the request path: raw bytes go to a real
 * corral server (proxy_pair.h) whose locations answer with `return` or
 * proxy to a second listener, so parsing, routing, the header rewriting
 * and the response parsing all run on every input.  Sanitizers watch; the
 * input's response is read until the server closes.
 */
#include "proxy_pair.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    proxy_pair_start("fuzz", NULL);
    proxy_pair_exchange(NULL, 0, data, size);
    return 0;
}
