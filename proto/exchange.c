/*
 * exchange.c: the parts of the exchange API that are the same for every
 * framer, built on its ops table: whole responses and error answers.
 */
#include "proto/exchange.h"

#include <stdio.h>
#include <string.h>

void exchange_respond(struct exchange *ex, unsigned status, const char *headers, const char *body,
                      size_t body_len)
{
    if (exchange_response_started(ex))
        return;
    exchange_begin(ex, status, headers, strlen(headers), (int64_t)body_len);
    exchange_write(ex, body, body_len);
    exchange_end(ex);
}

void exchange_respond_error(struct exchange *ex, unsigned status)
{
    /* 10 digits and a reason of 31 characters at most; cut, never overrun */
    char body[64];
    int n = snprintf(body, sizeof(body), "%u %s\n", status, http_reason(status));
    if (n < 0 || (size_t)n >= sizeof(body))
        n = (int)sizeof(body) - 1;
    exchange_respond(ex, status, "Content-Type: text/plain\r\n", body, (size_t)n);
}
