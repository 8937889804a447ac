/*
 * proxy_pair.c: the server of proxy_pair.h.
 */
#include "proxy_pair.h"

#include "proto/serve/serve.h"
#include "proto/modules.h"
#include "proto/policy/return.h"
#include "proto/http1/http1.h"
#include "proto/upstream/proxy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

static char front_path[108], back_path[108];

static struct http_return ok = {.status = 200, .text = "ok\n", .text_len = 3};
static struct http_return created = {.status = 201, .text = "created\n", .text_len = 8};
static struct http_location back_locations[] = {{.path = "/",
                                                 .path_len = 1,
                                                 .exact = false,
                                                 .handler = &http_return_handler,
                                                 .handler_data = &ok}};
static struct http_vhost back_vhost = {.locations = back_locations, .location_count = 1};
static struct http_site back_site = {.vhosts = &back_vhost, .vhost_count = 1};

static struct http_header set_headers[] = {{{"X-Set", 5}, {"1", 1}}, {{"Accept", 6}, {"", 0}}};
static struct http_str hide_headers[] = {{"X-Hidden", 8}};
static struct proxy_location proxy = {
    .conf = {.connect_timeout_ms = 2000, .read_timeout_ms = 2000, .send_timeout_ms = 2000},
    .set_headers = set_headers,
    .set_header_count = 2,
    .hide_headers = hide_headers,
    .hide_header_count = 1};
static struct http_location front_locations[] = {
    {.path = "/p",
     .path_len = 2,
     .exact = false,
     .handler = &proxy_handler,
     .handler_data = &proxy},
    {.path = "/",
     .path_len = 1,
     .exact = false,
     .handler = &http_return_handler,
     .handler_data = &created},
};
static const char *const names[] = {"example.com", "*.example.org"};
static struct http_vhost front_vhost = {
    .names = names, .name_count = 2, .locations = front_locations, .location_count = 2};
static struct http2_conf front_http2;
static struct http_site front_site = {.vhosts = &front_vhost, .vhost_count = 1};

static void remove_sockets(void)
{
    unlink(front_path);
    unlink(back_path);
}

void proxy_pair_start(const char *name, const struct http2_conf *http2)
{
    static int started;
    if (started)
        return;
    started = 1;
    snprintf(front_path, sizeof(front_path), "/tmp/corral-%s-%d-front.sock", name, (int)getpid());
    snprintf(back_path, sizeof(back_path), "/tmp/corral-%s-%d-back.sock", name, (int)getpid());
    remove_sockets();
    atexit(remove_sockets); /* the server itself runs until the process ends */
    corral_set_log_level(CORRAL_LOG_ERROR);
    struct http_limits limits = HTTP_LIMITS_DEFAULT;
    limits.header_timeout_ms = limits.body_timeout_ms = 2000;
    front_vhost.limits = back_vhost.limits = limits;
    if (http2 != NULL) {
        front_http2 = *http2;
        front_site.http2 = &front_http2;
    }

    corral_server *srv = proxy_pair_server(front_path, back_path, &front_site, &proxy.upstream);
    char address[128];
    snprintf(address, sizeof(address), "unix:%s", back_path);
    if (corral_server_listen(srv, address, NULL, &serve_handler, &back_site, NULL) != 0 ||
        corral_server_start(srv) != 0)
        abort();
}

corral_server *proxy_pair_server(const char *front, const char *back, struct http_site *site,
                                 struct proxy_upstream **upstream)
{
    char address[128];
    snprintf(address, sizeof(address), "unix:%s", back);
    struct proxy_server_conf server = {.address = address, .weight = 1};
    struct proxy_upstream_conf conf = {.name = "back",
                                       .servers = &server,
                                       .server_count = 1,
                                       .keepalive = 4,
                                       .idle_timeout_ms = 2000};
    struct corral_server_config config;
    modules_init();
    corral_server_config_init(&config);
    config.workers = 1;
    corral_server *srv;
    if (corral_server_new(&config, &srv) != 0 || upstream_new(&conf, 1, upstream) != 0)
        abort();
    snprintf(address, sizeof(address), "unix:%s", front);
    if (corral_server_listen(srv, address, NULL, &serve_handler, site, NULL) != 0)
        abort();
    return srv;
}

void proxy_pair_exchange(const void *prefix, size_t prefix_len, const uint8_t *data, size_t size)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    memcpy(addr.sun_path, front_path, strlen(front_path) + 1);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0)
        abort();
    if (prefix_len > 0 && send(fd, prefix, prefix_len, MSG_NOSIGNAL) != (ssize_t)prefix_len)
        abort();
    size_t sent = 0;
    while (sent < size) {
        ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
        if (n <= 0)
            break;
        sent += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    char buf[4096];
    while (recv(fd, buf, sizeof(buf), 0) > 0)
        ;
    close(fd);
}
