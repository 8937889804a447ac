/*
 * test_metrics.c: the admin listener as a monitoring system sees it: the
 * /metrics page after proxied traffic, checked by a strict parser of the
 * Prometheus text exposition format, its histograms and counters against
 * the requests sent, /status's upstreams, and /healthz and /readyz
 * through a SIGTERM drain.
 */
#include "../daemon.h"
#include "../helpers.h"

#include <ctype.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PAGE_MAX (1024 * 1024)

/* ---------------------------------------------------- the format checker */

struct sample {
    char name[128];
    char labels[1024]; /* sorted "k=v" pairs joined by '\x01', le left out */
    char le[32];       /* empty unless a _bucket sample */
    double value;
};

struct family {
    char name[128], type[16];
    bool help, typed, closed;
};

struct checker {
    struct family families[256];
    size_t family_count;
    struct family *current;
    struct sample *samples;
    size_t sample_count;
    char error[512];
};

static bool reject(struct checker *c, int line, const char *what)
{
    if (c->error[0] == '\0')
        snprintf(c->error, sizeof(c->error), "line %d: %s", line, what);
    return false;
}

static bool metric_name_ok(const char *s, size_t len)
{
    if (len == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_' || s[0] == ':'))
        return false;
    for (size_t i = 1; i < len; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == ':'))
            return false;
    return true;
}

static bool label_name_ok(const char *s, size_t len)
{
    if (len == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
        return false;
    if (len >= 2 && s[0] == '_' && s[1] == '_') /* reserved */
        return false;
    for (size_t i = 1; i < len; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_'))
            return false;
    return true;
}

static struct family *family_find(struct checker *c, const char *name)
{
    for (size_t i = 0; i < c->family_count; i++)
        if (strcmp(c->families[i].name, name) == 0)
            return &c->families[i];
    return NULL;
}

/* The family a sample name belongs to: itself, or for histograms the name
 * less _bucket, _sum or _count. */
static struct family *family_of(struct checker *c, const char *name)
{
    struct family *f = family_find(c, name);
    if (f != NULL)
        return f;
    static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(name), s = strlen(suffixes[i]);
        if (n > s && strcmp(name + n - s, suffixes[i]) == 0) {
            char base[128];
            snprintf(base, sizeof(base), "%.*s", (int)(n - s), name);
            f = family_find(c, base);
            if (f != NULL && strcmp(f->type, "histogram") == 0)
                return f;
        }
    }
    return NULL;
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Parses {k="v",...} at *p into s (sorted pairs, le apart). */
static bool parse_labels(struct checker *c, int line, const char **p, struct sample *s)
{
    char pairs[32][256];
    char *sorted[32];
    size_t count = 0;
    const char *q = *p + 1;
    while (*q != '}') {
        const char *name = q;
        while (*q != '\0' && *q != '=')
            q++;
        if (*q != '=' || !label_name_ok(name, (size_t)(q - name)))
            return reject(c, line, "bad label name");
        size_t name_len = (size_t)(q - name);
        if (q[1] != '"')
            return reject(c, line, "label value not quoted");
        q += 2;
        char value[200];
        size_t len = 0;
        for (; *q != '"'; q++) {
            if (*q == '\0' || *q == '\n')
                return reject(c, line, "unterminated label value");
            if (*q == '\\') {
                q++;
                if (*q != '\\' && *q != '"' && *q != 'n')
                    return reject(c, line, "bad escape in a label value");
            }
            if (len + 1 < sizeof(value))
                value[len++] = *q;
        }
        value[len] = '\0';
        q++;
        if (name_len == 2 && strncmp(name, "le", 2) == 0) {
            if (len >= sizeof(s->le))
                return reject(c, line, "le too long");
            memcpy(s->le, value, len + 1);
        } else {
            if (count == 32)
                return reject(c, line, "too many labels");
            snprintf(pairs[count], sizeof(pairs[count]), "%.*s=%s", (int)name_len, name, value);
            for (size_t i = 0; i < count; i++)
                if (strncmp(pairs[i], pairs[count], name_len + 1) == 0)
                    return reject(c, line, "label repeated");
            sorted[count] = pairs[count];
            count++;
        }
        if (*q == ',')
            q++;
        else if (*q != '}')
            return reject(c, line, "expected , or }");
    }
    qsort(sorted, count, sizeof(sorted[0]), compare_strings);
    s->labels[0] = '\0';
    for (size_t i = 0; i < count; i++) {
        size_t used = strlen(s->labels);
        snprintf(s->labels + used, sizeof(s->labels) - used, "%s%s", i ? "\x01" : "", sorted[i]);
    }
    *p = q + 1;
    return true;
}

static bool parse_value(const char *text, double *out)
{
    if (strcmp(text, "+Inf") == 0 || strcmp(text, "-Inf") == 0 || strcmp(text, "NaN") == 0) {
        *out = strcmp(text, "NaN") == 0 ? NAN : text[0] == '+' ? INFINITY : -INFINITY;
        return true;
    }
    char *end;
    *out = strtod(text, &end);
    return end != text && *end == '\0' && isfinite(*out);
}

static bool check_line(struct checker *c, int line, const char *text)
{
    if (text[0] == '#') {
        char kind[8], name[128];
        int used = 0;
        if (sscanf(text, "# %7s %127s %n", kind, name, &used) < 2 ||
            (strcmp(kind, "HELP") != 0 && strcmp(kind, "TYPE") != 0))
            return reject(c, line, "a comment that is neither HELP nor TYPE");
        if (!metric_name_ok(name, strlen(name)))
            return reject(c, line, "bad metric name in a comment");
        struct family *f = family_find(c, name);
        if (f == NULL) {
            if (c->family_count == 256)
                return reject(c, line, "too many families");
            f = &c->families[c->family_count++];
            snprintf(f->name, sizeof(f->name), "%s", name);
        }
        if (f->closed)
            return reject(c, line, "HELP or TYPE after the family's samples");
        if (c->current != NULL && c->current != f)
            c->current->closed = true;
        c->current = f;
        if (strcmp(kind, "HELP") == 0) {
            if (f->help)
                return reject(c, line, "HELP twice");
            f->help = true;
            return true;
        }
        if (f->typed)
            return reject(c, line, "TYPE twice");
        const char *type = text + used;
        if (strcmp(type, "counter") != 0 && strcmp(type, "gauge") != 0 &&
            strcmp(type, "histogram") != 0 && strcmp(type, "summary") != 0 &&
            strcmp(type, "untyped") != 0)
            return reject(c, line, "unknown TYPE");
        if (strcmp(type, "counter") == 0 &&
            (strlen(name) < 6 || strcmp(name + strlen(name) - 6, "_total") != 0))
            return reject(c, line, "a counter whose name does not end in _total");
        snprintf(f->type, sizeof(f->type), "%s", type);
        f->typed = true;
        return true;
    }
    struct sample s = {0};
    const char *p = text;
    while (*p != '\0' && *p != '{' && *p != ' ')
        p++;
    if (!metric_name_ok(text, (size_t)(p - text)))
        return reject(c, line, "bad metric name");
    snprintf(s.name, sizeof(s.name), "%.*s", (int)(p - text), text);
    if (*p == '{' && !parse_labels(c, line, &p, &s))
        return false;
    if (*p != ' ')
        return reject(c, line, "no space before the value");
    char value[64];
    if (sscanf(p + 1, "%63s", value) != 1 || !parse_value(value, &s.value))
        return reject(c, line, "bad value");
    if (strchr(p + 1, ' ') != NULL)
        return reject(c, line, "a timestamp or trailing text");
    struct family *f = family_of(c, s.name);
    if (f == NULL || !f->typed || !f->help)
        return reject(c, line, "a sample before its family's HELP and TYPE");
    if (f != c->current)
        return reject(c, line, "a family's samples not together");
    bool histogram = strcmp(f->type, "histogram") == 0;
    if (histogram && strcmp(s.name, f->name) == 0)
        return reject(c, line, "a histogram sample without _bucket, _sum or _count");
    if (!histogram && s.le[0] != '\0')
        return reject(c, line, "le outside a histogram");
    size_t n = strlen(s.name);
    if (histogram && n > 7 && strcmp(s.name + n - 7, "_bucket") == 0 && s.le[0] == '\0')
        return reject(c, line, "a bucket without le");
    if (s.value < 0)
        return reject(c, line, "a negative count");
    for (size_t i = 0; i < c->sample_count; i++)
        if (strcmp(c->samples[i].name, s.name) == 0 &&
            strcmp(c->samples[i].labels, s.labels) == 0 && strcmp(c->samples[i].le, s.le) == 0)
            return reject(c, line, "a duplicate series");
    c->samples[c->sample_count++] = s;
    return true;
}

/* Every histogram series: buckets in increasing le, counts that never go
 * down, +Inf last and equal to _count, and a _sum. */
static bool check_histograms(struct checker *c)
{
    for (size_t fi = 0; fi < c->family_count; fi++) {
        const struct family *f = &c->families[fi];
        if (strcmp(f->type, "histogram") != 0)
            continue;
        char bucket[160], sum[160], count[160];
        snprintf(bucket, sizeof(bucket), "%s_bucket", f->name);
        snprintf(sum, sizeof(sum), "%s_sum", f->name);
        snprintf(count, sizeof(count), "%s_count", f->name);
        for (size_t i = 0; i < c->sample_count; i++) {
            const struct sample *first = &c->samples[i];
            if (strcmp(first->name, count) != 0)
                continue;
            double last_le = -INFINITY, last_value = 0;
            bool inf = false, has_sum = false;
            for (size_t j = 0; j < c->sample_count; j++) {
                const struct sample *s = &c->samples[j];
                if (strcmp(s->labels, first->labels) != 0)
                    continue;
                has_sum |= strcmp(s->name, sum) == 0;
                if (strcmp(s->name, bucket) != 0)
                    continue;
                double le;
                if (inf || !parse_value(s->le, &le) || le <= last_le || s->value < last_value)
                    return reject(c, 0, "histogram buckets out of order");
                last_le = le;
                last_value = s->value;
                inf = isinf(le);
            }
            if (!inf || last_value != first->value || !has_sum)
                return reject(c, 0, "a histogram without +Inf equal to _count, or without _sum");
        }
    }
    return true;
}

/* Checks a whole page; on failure c->error says where. */
static bool check_exposition(struct checker *c, char *page)
{
    memset(c, 0, sizeof(*c));
    c->samples = calloc(8192, sizeof(*c->samples));
    ck_assert_ptr_nonnull(c->samples);
    int line = 0;
    for (char *save = NULL, *l = strtok_r(page, "\n", &save); l != NULL;
         l = strtok_r(NULL, "\n", &save)) {
        line++;
        if (c->sample_count == 8192 || !check_line(c, line, l))
            return reject(c, line, "(see above)");
    }
    return check_histograms(c);
}

/* The value of the sample NAME{LABELS} (labels as written, sorted pairs
 * apart: "a=x\x01b=y"), or -1. */
static double sample_value(const struct checker *c, const char *name, const char *labels)
{
    for (size_t i = 0; i < c->sample_count; i++)
        if (strcmp(c->samples[i].name, name) == 0 && strcmp(c->samples[i].labels, labels) == 0)
            return c->samples[i].value;
    return -1;
}

/* The sum of NAME over every series. */
static double sample_sum(const struct checker *c, const char *name)
{
    double sum = 0;
    for (size_t i = 0; i < c->sample_count; i++)
        if (strcmp(c->samples[i].name, name) == 0)
            sum += c->samples[i].value;
    return sum;
}

START_TEST(checker_refuses_what_the_format_forbids)
{
    static const char *const bad[] = {
        "x 1\n",                                                    /* no HELP/TYPE */
        "# HELP x a\n# TYPE x gauge\n# TYPE x gauge\nx 1\n",        /* TYPE twice */
        "# HELP x a\n# TYPE x counter\nx 1\n",                      /* counter without _total */
        "# HELP x a\n# TYPE x gauge\nx{a=\"1\"} 1\nx{a=\"1\"} 2\n", /* duplicate series */
        "# HELP x a\n# TYPE x gauge\nx{a=\"\\q\"} 1\n",             /* bad escape */
        "# HELP x a\n# TYPE x gauge\nx{1a=\"b\"} 1\n",              /* bad label name */
        /* le out of order */
        ("# HELP h a\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"0.5\"} 2\n"
         "h_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n"),
        "# HELP h a\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_sum 1\nh_count 2\n", /* no +Inf */
        "# HELP h a\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 3\nh_sum 1\nh_count 2\n",
        /* a family's samples apart */
        "# HELP x a\n# TYPE x gauge\nx 1\n# HELP y a\n# TYPE y gauge\ny 1\nx{a=\"b\"} 1\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct checker c;
        char *page = strdup(bad[i]);
        ck_assert_msg(!check_exposition(&c, page), "accepted:\n%s", bad[i]);
        free(page);
        free(c.samples);
    }
    struct checker c;
    char good[] = "# HELP h a\n# TYPE h histogram\nh_bucket{x=\"q\\\"\\\\\\n\",le=\"0.5\"} 1\n"
                  "h_bucket{x=\"q\\\"\\\\\\n\",le=\"+Inf\"} 2\nh_sum{x=\"q\\\"\\\\\\n\"} 1.5\n"
                  "h_count{x=\"q\\\"\\\\\\n\"} 2\n";
    ck_assert_msg(check_exposition(&c, good), "%s", c.error);
    free(c.samples);
}
END_TEST

/* ------------------------------------------------------------- the daemon */

/* The lines of `page` that hold `needle`, for a failure's message, which
 * Check limits in length. */
static const char *lines_with(const char *page, const char *needle)
{
    static char out[3000];
    size_t used = 0;
    out[0] = '\0';
    for (const char *l = page; *l != '\0';) {
        const char *end = strchr(l, '\n');
        size_t len = end != NULL ? (size_t)(end - l) : strlen(l);
        const char *hit = memmem(l, len, needle, strlen(needle));
        if (hit != NULL && len + 2 < sizeof(out) - used) {
            int n = snprintf(out + used, sizeof(out) - used, "%.*s\n", (int)len, l);
            used += n > 0 ? (size_t)n : 0;
        }
        l += len + (end != NULL);
    }
    return out;
}

static char *get_page(const struct test_daemon *d, const char *path, int *status)
{
    char *page = malloc(PAGE_MAX);
    ck_assert_ptr_nonnull(page);
    *status = test_daemon_admin_get(d, path, page, PAGE_MAX);
    return page;
}

/* A backend daemon answering 200 on / and 404 on /missing, and a front
 * daemon whose server "front.example" proxies to it as upstream "app".
 * After 7 + 3 requests the front's histograms count them by class, its
 * upstream server's too, its pooled connection shows as idle and not as a
 * client connection, and the page parses strictly, also after a reload. */
START_TEST(metrics_page_parses_strictly_and_counts_the_traffic)
{
    struct test_daemon backend, front;
    test_daemon_init(&backend, "backend");
    test_daemon_write_config(&backend, "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
                                       "server {\n    listen 127.0.0.1:0;\n"
                                       "    location / { return 200 \"hello\"; }\n"
                                       "    location = /missing { return 404; }\n}\n");
    test_daemon_start(&backend);

    test_daemon_init(&front, "front");
    char conf[1024];
    snprintf(conf, sizeof(conf),
             "workers 2;\nadmin { listen 127.0.0.2:0; }\n"
             "upstream app { server 127.0.0.1:%d; }\n"
             "server {\n    listen 127.0.0.1:0;\n    server_name front.example;\n"
             "    location / { proxy_pass http://app; }\n}\n",
             backend.port);
    test_daemon_write_config(&front, conf);
    test_daemon_start(&front);

    char body[256];
    for (int i = 0; i < 7; i++)
        ck_assert_int_eq(test_daemon_http_get("127.0.0.1", front.port, "/", body, sizeof(body)),
                         200);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(
            test_daemon_http_get("127.0.0.1", front.port, "/missing", body, sizeof(body)), 404);

    int status;
    /* The clients' connections close with their responses, but the
     * daemon may read their FIN a moment later: scrape until only the
     * scrape's own connection is open, for 5 s at most. */
    char *page = NULL, *copy = NULL;
    struct checker c = {0};
    for (int i = 0; i < 250; i++) {
        if (page != NULL) {
            test_sleep_ms(20); /* between scrapes */
            free(c.samples);
            free(page);
            free(copy);
        }
        page = get_page(&front, "/metrics", &status);
        ck_assert_int_eq(status, 200);
        copy = strdup(page);
        ck_assert_msg(check_exposition(&c, page), "%s", c.error);
        if (sample_sum(&c, "corral_connections_active") == 1)
            break;
    }

    const char *name = "corral_request_duration_seconds_count";
    ck_assert_msg(sample_value(&c, name, "code=2xx\x01server=front.example") == 7, "%s",
                  lines_with(copy, "corral_request_duration_seconds_count"));
    ck_assert_msg(sample_value(&c, name, "code=4xx\x01server=front.example") == 3, "%s",
                  lines_with(copy, name));
    char labels[256];
    snprintf(labels, sizeof(labels), "code=2xx\x01server=127.0.0.1:%d\x01upstream=app",
             backend.port);
    ck_assert_msg(sample_value(&c, "corral_upstream_requests_total", labels) == 7, "%s",
                  lines_with(copy, "corral_upstream_requests_total"));
    ck_assert_msg(sample_value(&c, "corral_upstream_response_seconds_count", labels) == 7, "%s",
                  lines_with(copy, "corral_upstream_response_seconds_count"));
    snprintf(labels, sizeof(labels), "code=4xx\x01server=127.0.0.1:%d\x01upstream=app",
             backend.port);
    ck_assert_msg(sample_value(&c, "corral_upstream_requests_total", labels) == 3, "%s",
                  lines_with(copy, "corral_upstream_requests_total"));
    /* The 7 + 3 went out on pooled connections, now idle; the only client
     * connection is this scrape. */
    ck_assert_msg(sample_value(&c, "corral_upstream_connections", "state=idle\x01upstream=app") >=
                      1,
                  "%s", lines_with(copy, "corral_upstream_connections"));
    ck_assert_msg(sample_value(&c, "corral_upstream_connections", "state=active\x01upstream=app") ==
                      0,
                  "%s", lines_with(copy, "corral_upstream_connections"));
    ck_assert_msg(sample_sum(&c, "corral_connections_active") == 1, "%s",
                  lines_with(copy, "corral_connections_active"));
    ck_assert_msg(sample_value(&c, "corral_client_sent_bytes_total", "") > 10 * 5, "%s",
                  lines_with(copy, "corral_client_sent_bytes_total"));
    ck_assert_msg(sample_value(&c, "corral_upstream_received_bytes_total", "") > 10 * 5, "%s",
                  lines_with(copy, "corral_upstream_received_bytes_total"));
    ck_assert_msg(sample_value(&c, "process_open_fds", "") > 3, "%s",
                  lines_with(copy, "process_open_fds"));
    ck_assert_msg(sample_value(&c, "process_max_fds", "") >=
                      sample_value(&c, "process_open_fds", ""),
                  "%s", lines_with(copy, "process_max_fds"));
    ck_assert_msg(sample_value(&c, "process_resident_memory_bytes", "") > 0, "%s",
                  lines_with(copy, "process_resident_memory_bytes"));
    double start = sample_value(&c, "process_start_time_seconds", "");
    double now = (double)time(NULL);
    ck_assert_msg(start > now - 120 && start <= now + 1, "%s",
                  lines_with(copy, "process_start_time_seconds"));
    free(c.samples);
    free(page);
    free(copy);

    /* The scrape's connection, like the clients' above, may still be
     * counted a moment after it closed: ask until only this one is. */
    page = get_page(&front, "/status", &status);
    for (int i = 0; i < 250 && strstr(page, "\"connections_active\": 1}") == NULL; i++) {
        test_sleep_ms(20);
        free(page);
        page = get_page(&front, "/status", &status);
    }
    ck_assert_int_eq(status, 200);
    snprintf(labels, sizeof(labels),
             "\"ready\": true, \"upstreams\": [{\"name\": \"app\", \"servers\": "
             "[{\"address\": \"127.0.0.1:%d\", \"state\": \"up\", \"down_workers\": 0, "
             "\"active\": 0, \"idle\": ",
             backend.port);
    ck_assert_msg(strstr(page, labels) != NULL, "%s", page);
    ck_assert_msg(strstr(page, "\"connections_active\": 1}") != NULL, "%s", page);
    free(page);

    /* A reload: once the old generation has exited, its counts stay. */
    ck_assert_int_eq(kill(front.pid, SIGHUP), 0);
    bool one_left = false;
    for (int i = 0; i < 250 && !one_left; i++) {
        page = get_page(&front, "/status", &status);
        one_left = strstr(page, "\"config_generation\": 2, \"generations_running\": 1,") != NULL;
        free(page);
        if (!one_left)
            test_sleep_ms(20); /* between scrapes */
    }
    ck_assert_msg(one_left, "the old generation is still running after 5 s");
    ck_assert_int_eq(test_daemon_http_get("127.0.0.1", front.port, "/", body, sizeof(body)), 200);
    page = get_page(&front, "/metrics", &status);
    copy = strdup(page);
    ck_assert_msg(check_exposition(&c, page), "%s", c.error);
    ck_assert_msg(sample_value(&c, name, "code=2xx\x01server=front.example") == 8, "%s",
                  lines_with(copy, name));
    snprintf(labels, sizeof(labels), "code=2xx\x01server=127.0.0.1:%d\x01upstream=app",
             backend.port);
    ck_assert_msg(sample_value(&c, "corral_upstream_requests_total", labels) == 8, "%s",
                  lines_with(copy, "corral_upstream_requests_total"));
    free(c.samples);
    free(page);
    free(copy);
    test_daemon_stop(&front);
    test_daemon_stop(&backend);
}
END_TEST

/* A reload that fails is counted beside those that worked, and /status
 * shows the last one's result. */
START_TEST(failed_reloads_are_counted_and_shown)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    static const char good[] = "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
                               "server {\n    listen 127.0.0.1:0;\n"
                               "    location / { return 200 \"hello\"; }\n}\n";
    test_daemon_write_config(&d, good);
    test_daemon_start(&d);
    int status;
    char *page = get_page(&d, "/status", &status);
    ck_assert_msg(strstr(page, "\"reloads\": {\"ok\": 0, \"failed\": 0, \"last\": null}") != NULL,
                  "%s", page);
    free(page);

    test_daemon_write_config(&d, "workers 1;\nnonsense;\n");
    ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
    free(test_daemon_wait_log(&d, "reload failed"));
    page = get_page(&d, "/metrics", &status);
    ck_assert_int_eq(status, 200);
    char *copy = strdup(page);
    struct checker c = {0};
    ck_assert_msg(check_exposition(&c, page), "%s", c.error);
    ck_assert_msg(sample_value(&c, "corral_reloads_total", "result=failed") == 1 &&
                      sample_value(&c, "corral_reloads_total", "result=ok") == 0,
                  "%s", lines_with(copy, "corral_reloads_total"));
    free(c.samples);
    free(page);
    free(copy);
    page = get_page(&d, "/status", &status);
    ck_assert_msg(strstr(page, "\"reloads\": {\"ok\": 0, \"failed\": 1, \"last\": \"failed\"}") !=
                      NULL,
                  "%s", page);
    free(page);

    test_daemon_write_config(&d, good);
    ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
    free(test_daemon_wait_log(&d, "generation 1: draining"));
    page = get_page(&d, "/status", &status);
    ck_assert_msg(strstr(page, "\"reloads\": {\"ok\": 1, \"failed\": 1, \"last\": \"ok\"}") != NULL,
                  "%s", page);
    free(page);
    test_daemon_stop(&d);
}
END_TEST

/* A server that passive health marks down shows so on /status. */
START_TEST(status_shows_a_server_marked_down)
{
    int port;
    int reserved = test_reserve_port(&port); /* refuses connections */
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    char conf[1024];
    snprintf(conf, sizeof(conf),
             "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
             "upstream dead { server 127.0.0.1:%d max_fails=1 fail_timeout=60s; }\n"
             "server {\n    listen 127.0.0.1:0;\n    location / { proxy_pass http://dead; }\n}\n",
             port);
    test_daemon_write_config(&d, conf);
    test_daemon_start(&d);
    char body[256];
    ck_assert_int_eq(test_daemon_http_get("127.0.0.1", d.port, "/", body, sizeof(body)), 502);
    int status;
    char *page = get_page(&d, "/status", &status);
    ck_assert_int_eq(status, 200);
    char expected[256];
    snprintf(expected, sizeof(expected),
             "{\"address\": \"127.0.0.1:%d\", \"state\": \"down\", \"down_workers\": 1, "
             "\"active\": 0, \"idle\": 0}",
             port);
    ck_assert_msg(strstr(page, expected) != NULL, "no %s in %s", expected, page);
    free(page);
    test_daemon_stop(&d);
    close(reserved);
}
END_TEST

/* A server marked `down` in the config is down on /status too, as in
 * corral_upstream_server_up, though no worker has seen it fail. */
START_TEST(status_shows_a_server_down_in_the_config)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    test_daemon_write_config(&d, "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
                                 "upstream app { server 127.0.0.1:1 down; server 127.0.0.1:2; }\n"
                                 "server {\n    listen 127.0.0.1:0;\n"
                                 "    location / { proxy_pass http://app; }\n}\n");
    test_daemon_start(&d);
    int status;
    char *page = get_page(&d, "/status", &status);
    ck_assert_int_eq(status, 200);
    const char *expected = "{\"address\": \"127.0.0.1:1\", \"state\": \"down\", "
                           "\"down_workers\": 0";
    ck_assert_msg(strstr(page, expected) != NULL, "no %s in %s", expected, page);
    ck_assert_msg(strstr(page, "{\"address\": \"127.0.0.1:2\", \"state\": \"up\"") != NULL, "%s",
                  page);
    free(page);
    test_daemon_stop(&d);
}
END_TEST

/* /status is JSON whatever the bytes of the strings in it: the config's
 * path may be any bytes, and invalid UTF-8 becomes U+FFFD. */
START_TEST(status_is_json_for_any_config_path)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral\xff\x01");
    test_daemon_write_config(&d, "workers 1;\nadmin { listen 127.0.0.2:0; }\n"
                                 "server {\n    listen 127.0.0.1:0;\n"
                                 "    location / { return 200; }\n}\n");
    test_daemon_start(&d);
    int status;
    char *page = get_page(&d, "/status", &status);
    ck_assert_int_eq(status, 200);
    ck_assert_msg(strstr(page, "corral\\ufffd\\u0001.conf\"") != NULL, "%s", page);
    free(page);
    test_daemon_stop(&d);
}
END_TEST

/* With shutdown_delay, SIGTERM turns /readyz to 503 at once while
 * everything else still answers; the daemon then drains and exits. */
START_TEST(readyz_fails_through_a_sigterm_drain)
{
    struct test_daemon d;
    test_daemon_init(&d, "corral");
    test_daemon_write_config(&d, "workers 2;\nshutdown_delay 1500ms;\n"
                                 "admin { listen 127.0.0.2:0; }\n"
                                 "server {\n    listen 127.0.0.1:0;\n"
                                 "    location / { return 200 \"ok\"; }\n}\n");
    test_daemon_start(&d);
    char body[256];
    ck_assert_int_eq(test_daemon_admin_get(&d, "/healthz", body, sizeof(body)), 200);
    ck_assert_int_eq(test_daemon_admin_get(&d, "/readyz", body, sizeof(body)), 200);
    uint64_t signalled = test_now_ms();
    ck_assert_int_eq(kill(d.pid, SIGTERM), 0);
    int ready = 200;
    for (int i = 0; i < 100 && ready == 200; i++) {
        ready = test_daemon_admin_get(&d, "/readyz", body, sizeof(body));
        if (ready == 200)
            test_sleep_ms(10); /* between probes */
    }
    ck_assert_int_eq(ready, 503);
    /* Still alive and serving while load balancers take note. */
    ck_assert_int_eq(test_daemon_admin_get(&d, "/healthz", body, sizeof(body)), 200);
    ck_assert_int_eq(test_daemon_http_get("127.0.0.1", d.port, "/", body, sizeof(body)), 200);
    ck_assert_int_eq(test_wait_exit(d.pid, 15000), 0);
    ck_assert_uint_ge(test_now_ms() - signalled, 1400);
    d.pid = 0;
    char *log = test_daemon_log(&d);
    ck_assert_msg(strstr(log, "not ready; stopping in 1500 ms") != NULL, "%s", log);
    free(log);
}
END_TEST

Suite *test_suite(void)
{
    Suite *suite = suite_create("cmd/metrics");
    TCase *tc = tcase_create("metrics");
    test_daemon_fixture(tc);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, checker_refuses_what_the_format_forbids);
    tcase_add_test(tc, metrics_page_parses_strictly_and_counts_the_traffic);
    tcase_add_test(tc, status_shows_a_server_marked_down);
    tcase_add_test(tc, status_is_json_for_any_config_path);
    tcase_add_test(tc, failed_reloads_are_counted_and_shown);
    tcase_add_test(tc, status_shows_a_server_down_in_the_config);
    tcase_add_test(tc, readyz_fails_through_a_sigterm_drain);
    suite_add_tcase(suite, tc);
    return suite;
}
