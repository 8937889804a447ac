/*
 * fuzz_trace_context.c: libFuzzer over what the tracing module reads of a
 * client's headers: traceparent_parse() and tracestate_valid().  Each
 * input is a header value.  A traceparent that parses formats back to
 * the same 55 bytes (a strict parse admits one spelling only), and the
 * span JSON built from it is bounded whatever the input.
 */
#include "proto/policy/trace_context.h"
#include "proto/policy/trace_span.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A copy of its own size, so that a read past the value is caught. */
    char *text = malloc(size > 0 ? size : 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    struct trace_context ctx;
    if (traceparent_parse(text, size, &ctx)) {
        char again[TRACEPARENT_LEN + 1];
        traceparent_format(&ctx, again);
        assert(size == TRACEPARENT_LEN && memcmp(again, text, size) == 0);
    }
    bool valid = tracestate_valid(text, size);
    assert(!valid || size <= TRACESTATE_MAX);
    /* The value as a span's name and attribute: valid JSON, bounded. */
    struct trace_attr attr = {.key = "k", .str = {text, size}};
    struct trace_span span = {
        .kind = TRACE_SPAN_SERVER, .name = {text, size}, .attrs = &attr, .attr_count = 1};
    struct vars_buf out;
    vars_buf_init(&out, NULL, 0);
    trace_span_json(&span, &out);
    assert(out.len < 2048 + 12 * TRACE_SPAN_STRING_MAX);
    vars_buf_free(&out);
    free(text);
    return 0;
}
