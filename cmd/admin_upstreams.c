/*
 * admin_upstreams.c: the runtime upstream API (admin_upstreams.h).  The
 * JSON is jansson's both ways; a request names an upstream of the newest
 * generation, which the daemon's lock keeps alive while it is read or
 * changed.
 */
#include "cmd/admin_upstreams.h"

#include "cmd/daemon.h"
#include "proto/upstream/health.h"

#include <assert.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A POST or a PATCH while its body comes. */
struct api_patch {
    char name[128];
    bool post; /* else a PATCH of server `id` */
    size_t id;
    char body[ADMIN_UPSTREAMS_BODY_MAX];
    size_t len;
    bool too_long;
};

static void api_respond_json(struct exchange *ex, unsigned status, json_t *doc)
{
    char *text = doc != NULL ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (text == NULL) {
        exchange_respond_error(ex, 500);
        return;
    }
    size_t len = strlen(text);
    exchange_respond(ex, status, "Content-Type: application/json\r\n", text, len);
    free(text);
}

static void api_error(struct exchange *ex, unsigned status, const char *text)
{
    api_respond_json(ex, status,
                     json_pack("{s:{s:i,s:s}}", "error", "status", (int)status, "text", text));
}

/* "NAME/servers" or "NAME/servers/ID" after the prefix: false when the
 * path is neither. */
static bool api_parse_path(struct http_str path, char *name, size_t size, bool *has_id, size_t *id)
{
    size_t prefix = strlen(ADMIN_UPSTREAMS_PATH);
    if (path.len <= prefix)
        return false;
    const char *p = path.data + prefix, *end = path.data + path.len;
    const char *slash = memchr(p, '/', (size_t)(end - p));
    if (slash == NULL || slash == p || (size_t)(slash - p) >= size)
        return false;
    memcpy(name, p, (size_t)(slash - p));
    name[slash - p] = '\0';
    p = slash + 1;
    if ((size_t)(end - p) < 7 || memcmp(p, "servers", 7) != 0)
        return false;
    p += 7;
    *has_id = p < end;
    if (p == end)
        return true;
    if (*p != '/' || p + 1 == end || end - p > 8)
        return false;
    *id = 0;
    for (p++; p < end; p++) {
        if (*p < '0' || *p > '9')
            return false;
        *id = *id * 10 + (size_t)(*p - '0');
    }
    return true;
}

/* The upstream called `name` in the newest generation; under the lock. */
static struct proxy_upstream *api_find(const char *name)
{
    const struct generation *gen = daemon_state.generations;
    for (size_t u = 0; gen != NULL && u < gen->upstream_count; u++)
        if (strcmp(upstream_name(gen->upstreams[u].upstream), name) == 0)
            return gen->upstreams[u].upstream;
    return NULL;
}

static const char *api_state_name(const struct proxy_upstream *up, size_t i, uint64_t now)
{
    const struct upstream_server *s = &up->servers[i];
    int slot = atomic_load(&s->state);
    unsigned char api = atomic_load(&s->api_state);
    if (slot == UPSTREAM_SLOT_EMPTY)
        return "unused"; /* a resolve slot without an address */
    if (api == UPSTREAM_API_DRAIN || slot == UPSTREAM_SLOT_DRAINING)
        return "draining";
    if (api == UPSTREAM_API_DOWN || s->disabled)
        return "down";
    return health_server_up(up, i, now) ? "up" : "unhealthy";
}

static json_t *api_server(const struct proxy_upstream *up, size_t i, uint64_t now)
{
    const struct upstream_server *s = &up->servers[i];
    unsigned char api = atomic_load(&s->api_state);
    return json_pack("{s:I,s:s,s:i,s:b,s:b,s:b,s:s,s:i}", "id", (json_int_t)i, "server", s->address,
                     "weight", (int)atomic_load(&s->weight), "backup", (int)atomic_load(&s->backup),
                     "drain", api == UPSTREAM_API_DRAIN, "down",
                     api == UPSTREAM_API_DOWN || s->disabled, "state", api_state_name(up, i, now),
                     "active", (int)upstream_server_conns(up, i));
}

/* Every server of `up` but the free api_servers slots. */
static json_t *api_list(const struct proxy_upstream *up, uint64_t now)
{
    json_t *doc = json_array();
    for (size_t i = 0; doc != NULL && i < up->server_count; i++)
        if (!upstream_server_api_unused(up, i))
            json_array_append_new(doc, api_server(up, i, now));
    return doc;
}

/* Adds the server a POST document names to `up`: its slot, or -(the
 * status of its refusal) with *why. */
static int api_add(struct proxy_upstream *up, json_t *doc, const char **why)
{
    const char *key;
    json_t *value;
    bool valid = json_is_object(doc);
    json_object_foreach(doc, key, value)
    {
        valid =
            valid &&
            ((strcmp(key, "server") == 0 && json_is_string(value)) ||
             (strcmp(key, "weight") == 0 && json_is_integer(value)) ||
             ((strcmp(key, "drain") == 0 || strcmp(key, "down") == 0) && json_is_boolean(value)));
    }
    json_t *server = json_object_get(doc, "server"), *weight = json_object_get(doc, "weight");
    if (!valid || server == NULL) {
        *why = "a JSON object: \"server\" (IP:PORT), and \"weight\" (1 to 1000), \"drain\" "
               "and \"down\" (true or false) if need be";
        return -400;
    }
    json_int_t w = weight != NULL ? json_integer_value(weight) : 1;
    bool drain = json_is_true(json_object_get(doc, "drain")),
         down = json_is_true(json_object_get(doc, "down"));
    if (w < 1 || w > 1000 || (drain && down)) {
        *why = "\"weight\" is from 1 to 1000, and a server is drained or down, not both";
        return -400;
    }
    unsigned char state = down ? UPSTREAM_API_DOWN : drain ? UPSTREAM_API_DRAIN : UPSTREAM_API_NONE;
    const char *address = json_string_value(server);
    int slot = upstream_api_add(up, address, (unsigned)w, state);
    switch (slot) {
    case -EINVAL: *why = "\"server\" is an IP address and a port"; return -400;
    case -EEXIST: *why = "the upstream has a server at that address"; return -409;
    case -ENOSPC: *why = "the upstream's api_servers slots are all in use"; return -409;
    case -ENOTSUP: *why = "a consistent hash upstream has the config's servers only"; return -409;
    default: break;
    }
    assert(slot >= 0);
    corral_log(CORRAL_LOG_INFO, "admin API: upstream \"%s\" server %d (%s) added: weight %u, %s",
               upstream_name(up), slot, address, (unsigned)w,
               down    ? "down"
               : drain ? "draining"
                       : "up");
    return slot;
}

/* Applies a PATCH document to server `id` of `up`: 0, or the status of
 * its refusal with *why. */
static unsigned api_apply(struct proxy_upstream *up, size_t id, json_t *doc, const char **why)
{
    if (!json_is_object(doc)) {
        *why = "the body is a JSON object";
        return 400;
    }
    const char *key;
    json_t *value;
    json_object_foreach(doc, key, value)
    {
        bool known =
            (strcmp(key, "weight") == 0 && json_is_integer(value)) ||
            ((strcmp(key, "drain") == 0 || strcmp(key, "down") == 0) && json_is_boolean(value));
        if (!known) {
            *why = "the fields are \"weight\" (1 to 1000), \"drain\" and \"down\" (true or false)";
            return 400;
        }
    }
    json_t *weight = json_object_get(doc, "weight");
    if (weight != NULL && (json_integer_value(weight) < 1 || json_integer_value(weight) > 1000)) {
        *why = "\"weight\" is from 1 to 1000";
        return 400;
    }
    json_t *drain = json_object_get(doc, "drain"), *down = json_object_get(doc, "down");
    if (drain != NULL && down != NULL && json_is_true(drain) && json_is_true(down)) {
        *why = "a server is drained or down, not both";
        return 400;
    }
    struct upstream_server *s = &up->servers[id];
    unsigned old_weight = atomic_load(&s->weight);
    unsigned char old_state = atomic_load(&s->api_state), state = old_state;
    if (down != NULL)
        state = json_is_true(down)           ? UPSTREAM_API_DOWN
                : state == UPSTREAM_API_DOWN ? UPSTREAM_API_NONE
                                             : state;
    if (drain != NULL)
        state = json_is_true(drain)           ? UPSTREAM_API_DRAIN
                : state == UPSTREAM_API_DRAIN ? UPSTREAM_API_NONE
                                              : state;
    if (weight != NULL)
        atomic_store(&s->weight, (unsigned)json_integer_value(weight));
    atomic_store(&s->api_state, state);
    static const char *const names[] = {"up", "draining", "down"};
    corral_log(CORRAL_LOG_INFO,
               "admin API: upstream \"%s\" server %zu (%s): weight %u -> %u, %s -> %s",
               upstream_name(up), id, s->address, old_weight, atomic_load(&s->weight),
               names[old_state], names[state]);
    return 0;
}

/* DELETE of server `id` of upstream `name`: an API-added server drains
 * and leaves; the answer lists the servers left, as NGINX Plus's does. */
static void api_delete(struct exchange *ex, const char *name, size_t id)
{
    pthread_mutex_lock(&daemon_state.lock);
    struct proxy_upstream *up = api_find(name);
    unsigned status = 404;
    const char *why = "no such upstream";
    json_t *doc = NULL;
    if (up != NULL && (id >= up->server_count || upstream_server_api_unused(up, id))) {
        why = "no such server";
    } else if (up != NULL && !up->servers[id].api_slot) {
        status = 409;
        why = "a server of the config: PATCH it down or drained, or change the config";
    } else if (up != NULL) {
        char address[UPSTREAM_API_ADDRESS_MAX];
        snprintf(address, sizeof(address), "%s", up->servers[id].address);
        if (upstream_api_remove(up, id) != 0) {
            why = "no such server"; /* removed already */
        } else {
            status = 200;
            corral_log(CORRAL_LOG_INFO, "admin API: upstream \"%s\" server %zu (%s) removed",
                       upstream_name(up), id, address);
            doc = api_list(up, corral_loop_now(exchange_loop(ex)));
        }
    }
    pthread_mutex_unlock(&daemon_state.lock);
    if (status == 200)
        api_respond_json(ex, 200, doc);
    else
        api_error(ex, status, why);
}

static void api_on_request(struct exchange *ex, const struct http_request *req, void *data)
{
    (void)data;
    char name[128];
    bool has_id = false;
    size_t id = 0;
    if (!api_parse_path(req->path, name, sizeof(name), &has_id, &id)) {
        api_error(ex, 404, "expected /api/upstreams/NAME/servers[/ID]");
        return;
    }
    bool patch = http_str_equal_nocase(req->method, "PATCH") && has_id;
    bool post = http_str_equal_nocase(req->method, "POST") && !has_id;
    bool delete = http_str_equal_nocase(req->method, "DELETE") && has_id;
    if (!http_str_equal_nocase(req->method, "GET") && !patch && !post && !delete) {
        exchange_respond(ex, 405,
                         has_id ? "Allow: GET, PATCH, DELETE\r\nContent-Type: text/plain\r\n"
                                : "Allow: GET, POST\r\nContent-Type: text/plain\r\n",
                         "405 Method Not Allowed\n", 23);
        return;
    }
    if (delete) {
        api_delete(ex, name, id);
        return;
    }
    if (patch || post) {
        struct api_patch *p = calloc(1, sizeof(*p));
        if (p == NULL) {
            exchange_respond_error(ex, 500);
            return;
        }
        if (!req->has_body) {
            free(p);
            api_error(ex, 400, "a PATCH or a POST carries a JSON object");
            return;
        }
        memcpy(p->name, name, sizeof(p->name));
        p->post = post;
        p->id = id;
        exchange_set_data(ex, p);
        return; /* api_on_body_end() answers */
    }
    pthread_mutex_lock(&daemon_state.lock);
    const struct proxy_upstream *up = api_find(name);
    json_t *doc = NULL;
    unsigned status = 200;
    uint64_t now = corral_loop_now(exchange_loop(ex));
    if (up == NULL) {
        status = 404;
    } else if (has_id && (id >= up->server_count || upstream_server_api_unused(up, id))) {
        status = 404;
    } else if (has_id) {
        doc = api_server(up, id, now);
    } else {
        doc = api_list(up, now);
    }
    pthread_mutex_unlock(&daemon_state.lock);
    if (status == 404)
        api_error(ex, 404, up == NULL ? "no such upstream" : "no such server");
    else
        api_respond_json(ex, status, doc);
}

static void api_on_body(struct exchange *ex, const char *data, size_t len)
{
    struct api_patch *p = exchange_data(ex);
    if (p == NULL)
        return;
    if (len > sizeof(p->body) - p->len) {
        p->too_long = true;
        return;
    }
    memcpy(p->body + p->len, data, len);
    p->len += len;
}

static void api_on_body_end(struct exchange *ex)
{
    struct api_patch *p = exchange_data(ex);
    if (p == NULL)
        return;
    exchange_set_data(ex, NULL);
    if (p->too_long) {
        free(p);
        api_error(ex, 413, "the body is at most 4096 bytes");
        return;
    }
    json_error_t error;
    json_t *doc = json_loadb(p->body, p->len, JSON_REJECT_DUPLICATES, &error);
    pthread_mutex_lock(&daemon_state.lock);
    struct proxy_upstream *up = api_find(p->name);
    const char *why = "no such upstream";
    unsigned status = 404;
    json_t *answer = NULL;
    if (up != NULL && !p->post &&
        (p->id >= up->server_count || upstream_server_api_unused(up, p->id))) {
        why = "no such server";
    } else if (up != NULL && doc == NULL) {
        status = 400;
        why = "the body is not JSON";
    } else if (up != NULL && p->post) {
        int slot = api_add(up, doc, &why);
        status = slot < 0 ? (unsigned)-slot : 201;
        if (slot >= 0)
            answer = api_server(up, (size_t)slot, corral_loop_now(exchange_loop(ex)));
    } else if (up != NULL) {
        status = api_apply(up, p->id, doc, &why);
        if (status == 0) {
            status = 200;
            answer = api_server(up, p->id, corral_loop_now(exchange_loop(ex)));
        }
    }
    pthread_mutex_unlock(&daemon_state.lock);
    json_decref(doc);
    free(p);
    if (status == 200 || status == 201)
        api_respond_json(ex, status, answer);
    else
        api_error(ex, status, why);
}

static void api_on_abort(struct exchange *ex)
{
    free(exchange_data(ex));
    exchange_set_data(ex, NULL);
}

const struct http_handler admin_upstreams_handler = {
    .name = "upstreams API",
    .on_request = api_on_request,
    .on_body = api_on_body,
    .on_body_end = api_on_body_end,
    .on_abort = api_on_abort,
};
