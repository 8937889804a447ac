/*
 * return.c: the handler of `return CODE ["TEXT"]`: a fixed response, or a
 * redirect whose text is where it points; the text may hold $variables.
 * A `return` of an error code without text takes the error page.
 */
#include "proto/policy/add_header.h"
#include "proto/http/regex.h"
#include "proto/http/vars.h"

#include <stdlib.h>
#include <string.h>

static void return_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    const struct http_return *ret = data;
    /* nginx's 444: end the connection (HTTP/2: the stream) unanswered */
    if (ret->status == HTTP_RETURN_CLOSE) {
        exchange_abort(ex);
        return;
    }
    add_header_set_rules(ex, ret->add_headers);
    char early_small[256];
    struct vars_buf early;
    vars_buf_init(&early, early_small, sizeof(early_small));
    add_header_early(ex, req, &early);
    /* `return 404;` with no text is an error answer, as in nginx: its
     * error page, if the location has one, else (an error page's own
     * location among them) the built-in answer. */
    if (ret->text == NULL && ret->status >= 400 &&
        (ex->error_hook != NULL || ex->status_override != 0)) {
        exchange_respond_error(ex, ret->status);
        add_header_forget_early(ex);
        vars_buf_free(&early);
        return;
    }
    bool redirect = ret->status == 301 || ret->status == 302 || ret->status == 303 ||
                    ret->status == 307 || ret->status == 308;
    /* The text, its variables evaluated: a redirect's fit for its
     * Location line.  Sized from the values, on the stack when that fits. */
    char small[512];
    struct vars_buf text;
    vars_buf_init(&text, small, sizeof(small));
    if (ret->value != NULL) {
        struct vars_ctx ctx = {.ex = ex, .req = req, .escape = redirect ? VARS_HEADER : VARS_RAW};
        size_t ovector[2 * HTTP_REGEX_PAIRS];
        if (ret->captures != NULL)
            vars_set_captures(&ctx, ret->captures, ovector);
        vars_eval(ret->value, &ctx, &text);
    } else {
        vars_buf_add(&text, ret->text, ret->text_len);
    }
    if (text.failed) {
        vars_buf_free(&text);
        exchange_respond_error(ex, 500);
        add_header_forget_early(ex);
        vars_buf_free(&early);
        return;
    }
    if (redirect && text.len > 0) {
        /* As in nginx: a redirect's text is where it points. */
        char line_small[512];
        struct vars_buf line;
        vars_buf_init(&line, line_small, sizeof(line_small));
        vars_buf_add(&line, "Location: ", 10);
        vars_buf_add(&line, text.data, text.len);
        vars_buf_add(&line, "\r\n", 3); /* with its NUL */
        if (line.failed)
            exchange_respond_error(ex, 500);
        else
            exchange_respond(ex, ret->status, line.data, "", 0);
        vars_buf_free(&line);
    } else {
        exchange_respond(ex, ret->status, text.len > 0 ? "Content-Type: text/plain\r\n" : "",
                         text.data, text.len);
    }
    vars_buf_free(&text);
    add_header_forget_early(ex); /* `early` goes with this frame */
    vars_buf_free(&early);
}

const struct http_handler http_return_handler = {
    .name = "return",
    .on_request = return_on_request,
};
