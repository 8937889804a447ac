/*
 * proxy_next.c: when a failed request goes on to the next server
 * (proxy_next_upstream, as nginx decides it), and the error-log lines
 * that name the upstream, the server, the client and the request.
 */
#include "proto/upstream/proxy_next.h"

#include <stdio.h>
#include <string.h>

/* A request line longer than this is cut in the log. */
#define LOGGED_REQUEST_MAX 256

unsigned proxy_next_condition(enum proxy_error_kind kind)
{
    switch (kind) {
    case PROXY_ERROR_TIMEOUT: return PROXY_NEXT_TIMEOUT;
    case PROXY_ERROR_INVALID: return PROXY_NEXT_INVALID_HEADER;
    case PROXY_ERROR_CONNECT:
    case PROXY_ERROR_RESET:
    case PROXY_ERROR_TLS:
    case PROXY_ERROR_KINDS: break;
    }
    return PROXY_NEXT_ERROR;
}

unsigned proxy_next_status_condition(unsigned status)
{
    switch (status) {
    case 500: return PROXY_NEXT_HTTP_500;
    case 502: return PROXY_NEXT_HTTP_502;
    case 503: return PROXY_NEXT_HTTP_503;
    case 504: return PROXY_NEXT_HTTP_504;
    case 429: return PROXY_NEXT_HTTP_429;
    default: return 0;
    }
}

bool proxy_next_allowed(const struct proxy_conf *conf, unsigned condition,
                        const struct proxy_attempt *attempt)
{
    if (condition == 0 || !(conf->next_upstream & condition))
        return false;
    /* A POST that reached a server may have taken effect there: sent
     * again, it would take effect twice. */
    if (attempt->sent && !attempt->idempotent && !(conf->next_upstream & PROXY_NEXT_NON_IDEMPOTENT))
        return false;
    if (conf->next_upstream_tries != 0 && attempt->tries >= conf->next_upstream_tries)
        return false;
    return conf->next_upstream_timeout_ms == 0 ||
           attempt->elapsed_ms < conf->next_upstream_timeout_ms;
}

void proxy_next_log_failure(struct proxy_upstream *up, unsigned server, uint64_t now,
                            enum proxy_error_kind kind, int error, unsigned status,
                            const char *client, const char *head, size_t head_len)
{
    static const char *const what[PROXY_ERROR_KINDS] = {
        [PROXY_ERROR_CONNECT] = "could not connect",
        [PROXY_ERROR_TIMEOUT] = "timed out",
        [PROXY_ERROR_RESET] = "closed the connection before the response was complete",
        [PROXY_ERROR_INVALID] = "sent an invalid response",
        [PROXY_ERROR_TLS] = "TLS handshake or certificate check failed",
    };
    unsigned skipped;
    if (kind >= PROXY_ERROR_KINDS || !upstream_log_turn(up, server, now, &skipped))
        return;
    char text[160];
    if (status != 0)
        snprintf(text, sizeof(text), "answered %u, trying the next server", status);
    else if (error != 0 && kind != PROXY_ERROR_TIMEOUT)
        snprintf(text, sizeof(text), "%s (%s)", what[kind], strerror(-error));
    else
        snprintf(text, sizeof(text), "%s", what[kind]);
    /* The request line without its version; the client side checked it
     * holds no control characters. */
    const char *eol = memchr(head, '\r', head_len);
    size_t line = eol != NULL ? (size_t)(eol - head) : head_len;
    if (line > 9 && memcmp(head + line - 9, " HTTP/1.1", 9) == 0)
        line -= 9;
    bool cut = line > LOGGED_REQUEST_MAX;
    if (cut)
        line = LOGGED_REQUEST_MAX;
    char more[32] = "";
    if (skipped > 0)
        snprintf(more, sizeof(more), " (%u more)", skipped);
    corral_log(status != 0 ? CORRAL_LOG_WARN : CORRAL_LOG_ERROR,
               "upstream %s: %s: %s, client: %s, request: \"%.*s%s\"%s", up->name,
               up->servers[server].address, text, client, (int)line, head, cut ? "..." : "", more);
}
