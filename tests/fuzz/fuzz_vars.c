/*
 * fuzz_vars.c: libFuzzer target for the variable compiler and map: the
 * input's lines are a template, a map's source and the map's entries
 * ("KEY VALUE", KEY "default" or ~REGEX); what compiles is evaluated for a
 * fixed request, into a growing buffer and into a small fixed one.
 */
#include "proto/http/regex.h"
#include "proto/http/vars.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

static const struct exchange_ops ops = {0};

/* A connection without a socket: the client's address is the exchange's
 * own, as real_ip would have set it. */
static struct http_conn conn;

static const struct http_header headers[] = {
    {{"Host", 4}, {"example.com", 11}},
    {{"Cookie", 6}, {"a=1; b=two", 10}},
    {{"X-Forwarded-For", 15}, {"192.0.2.1, 198.51.100.2", 23}},
};

static const struct http_request request = {
    .method = {"POST", 4},
    .target = {"/path/to/x.png?a=1&b=&c", 23},
    .path = {"/path/to/x.png", 14},
    .host = {"example.com", 11},
    .headers = headers,
    .header_count = 3,
};

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *lines[10];
    size_t count = 0;
    for (char *p = text; count < 10; count++) {
        lines[count] = p;
        char *nl = strchr(p, '\n');
        if (nl == NULL) {
            count++;
            break;
        }
        *nl = '\0';
        p = nl + 1;
    }

    struct vars_map *map = vars_map_new("m");
    struct vars_map *map_list[] = {map};
    struct http_regex *location = NULL;
    char message[120];
    size_t offset;
    (void)regex_compile("^/(?<dir>[^/]+)/(.*)$", false, &location, message, sizeof(message),
                        &offset);
    struct vars_maps maps = {.maps = map_list, .count = map != NULL, .captures = location};
    struct vars_error error;
    if (map != NULL && count > 1 && vars_map_set_source(map, lines[1], &maps, &error) == 0) {
        for (size_t i = 2; i < count; i++) {
            char *space = strchr(lines[i], ' ');
            if (space == NULL)
                continue;
            *space = '\0';
            bool in_value;
            (void)vars_map_add(map, strcmp(lines[i], "default") == 0 ? NULL : lines[i], space + 1,
                               &maps, &error, &in_value);
        }
    }
    struct vars_template *t;
    if (vars_compile(lines[0], &maps, &t, &error) == 0) {
        struct exchange ex = {._ops = &ops, .conn = &conn};
        ex.client.in6.sin6_family = AF_INET6;
        inet_pton(AF_INET6, "2001:db8::1", &ex.client.in6.sin6_addr);
        size_t ovector[2 * HTTP_REGEX_PAIRS];
        for (int escape = VARS_RAW; escape <= VARS_JSON; escape++) {
            struct vars_ctx ctx = {.ex = &ex,
                                   .req = &request,
                                   .protocol = "HTTP/1.1",
                                   .status = 200,
                                   .escape = (enum vars_escape)escape};
            if (location != NULL)
                vars_set_captures(&ctx, location, ovector);
            char small[16];
            struct vars_buf out;
            vars_buf_init(&out, small, sizeof(small));
            vars_eval(t, &ctx, &out);
            vars_buf_free(&out);
            char fixed[8];
            (void)vars_eval_into(t, &ctx, fixed, sizeof(fixed));
        }
        vars_template_free(t);
    } else if (error.offset > strlen(lines[0])) {
        abort(); /* the offset points into the text */
    }
    regex_free(location);
    vars_map_free(map);
    free(text);
    return 0;
}
