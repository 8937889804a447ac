/*
 * fuzz_http2.c: libFuzzer over the HTTP/2 framer: the connection preface,
 * then the input's bytes as frames, go to a real corral server
 * (proxy_pair.h) whose locations answer with `return` or proxy to a second
 * listener over HTTP/1.1.  Sanitizers watch; the output is read until the
 * server closes.
 */
#include "proxy_pair.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct http2_conf http2 = HTTP2_CONF_DEFAULT;
    http2.idle_timeout_ms = 2000;
    /* The least allowed: inputs of a few KB reach the header block cut. */
    http2.max_header_list_size = 1024;
    proxy_pair_start("fuzz2", &http2);
    /* The preface and an empty SETTINGS frame: the input starts where a
     * client's frames would. */
    static const char start[] = HTTP2_PREFACE "\0\0\0\4\0\0\0\0\0";
    proxy_pair_exchange(start, sizeof(start) - 1, data, size);
    return 0;
}
