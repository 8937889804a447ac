/*
 * return.c: the handler of `return CODE ["TEXT"]`: a fixed response, or a
 * redirect whose text is where it points.
 */
#include "proto/exchange.h"

#include <stdlib.h>
#include <string.h>

static void return_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)req;
    const struct http_return *ret = data;
    bool redirect = ret->status == 301 || ret->status == 302 || ret->status == 303 ||
                    ret->status == 307 || ret->status == 308;
    if (redirect && ret->text_len > 0) {
        /* As in nginx: a redirect's text is where it points.  The config
         * allows any length: the line is sized from it, on the stack when
         * that fits. */
        char small[512], *location = small;
        size_t len = ret->text_len;
        if (len + sizeof("Location: \r\n") > sizeof(small) &&
            (location = malloc(len + sizeof("Location: \r\n"))) == NULL) {
            exchange_respond_error(ex, 500);
            return;
        }
        memcpy(location, "Location: ", 10);
        memcpy(location + 10, ret->text, len);
        memcpy(location + 10 + len, "\r\n", 3);
        exchange_respond(ex, ret->status, location, "", 0);
        if (location != small)
            free(location);
        return;
    }
    exchange_respond(ex, ret->status, ret->text_len > 0 ? "Content-Type: text/plain\r\n" : "",
                     ret->text, ret->text_len);
}

const struct http_handler http_return_handler = {
    .name = "return",
    .on_request = return_on_request,
};
