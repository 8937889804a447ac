/*
 * fuzz_conf.c: libFuzzer target for the config language.  The input is the
 * main file up to its first NUL byte; what follows is served as "part.conf".
 * Two fixed files can be included too, one of which includes the main file,
 * so include, include loops and errors inside included files are reached.
 */
#include "conf/config.h"
#include "proto/http/module.h"
#include "proto/modules.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct files {
    const char *main;
    size_t main_len;
    const char *part;
    size_t part_len;
};

static const char server_conf[] = "server {\n"
                                  "    listen 127.0.0.1:8080;\n"
                                  "    include part.conf;\n"
                                  "    location / { return 200 \"ok\\n\"; }\n"
                                  "}\n";
static const char upstream_conf[] = "upstream app { server 127.0.0.1:9001 weight=2; }\n"
                                    "include fuzz.conf;\n";

static char *serve(const char *text, size_t len, size_t *out_len)
{
    char *copy = malloc(len + 1);
    if (copy == NULL)
        return NULL;
    memcpy(copy, text, len);
    *out_len = len;
    return copy;
}

static char *read_file(const char *path, size_t *len, void *arg)
{
    const struct files *files = arg;
    if (strcmp(path, "fuzz.conf") == 0)
        return serve(files->main, files->main_len, len);
    if (strcmp(path, "part.conf") == 0)
        return serve(files->part, files->part_len, len);
    if (strcmp(path, "server.conf") == 0)
        return serve(server_conf, strlen(server_conf), len);
    if (strcmp(path, "upstream.conf") == 0)
        return serve(upstream_conf, strlen(upstream_conf), len);
    errno = ENOENT;
    return NULL;
}

/* Counts the errors reported: every failure reports at least one, and
 * never more than the cap. */
static void count_error(void *arg, const char *message)
{
    if (memchr(message, '\0', sizeof(((struct conf_error *)0)->text)) == NULL)
        abort();
    ++*(unsigned *)arg;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

/* The modules that bring their directives (return...), registered once
 * as the daemon does before its first parse. */
static void register_modules(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    for (size_t m = 0; m < modules_count; m++)
        if (conf_module_register(&modules_list[m]->conf) != 0)
            abort();
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    register_modules();
    const char *text = (const char *)data;
    const char *nul = memchr(text, '\0', size);
    struct files files = {
        .main = text,
        .main_len = nul != NULL ? (size_t)(nul - text) : size,
        .part = nul != NULL ? nul + 1 : "",
        .part_len = nul != NULL ? size - (size_t)(nul - text) - 1 : 0,
    };
    struct conf_config *config;
    struct conf_error error;
    unsigned reported = 0;
    if (conf_parse_each("fuzz.conf", files.main, files.main_len, read_file, &files, count_error,
                        &reported, &config, &error) == 0)
        conf_free(config);
    else if (memchr(error.text, '\0', sizeof(error.text)) == NULL || reported == 0 ||
             reported > CONF_ERRORS_MAX)
        abort(); /* a failure is reported, and its message is a terminated string */
    /* --from-nginx reads the same text; its output goes nowhere */
    FILE *sink = fopen("/dev/null", "w");
    if (sink != NULL) {
        if (conf_from_nginx("fuzz.conf", files.main, files.main_len, sink, NULL, NULL, &error) <
                0 &&
            memchr(error.text, '\0', sizeof(error.text)) == NULL)
            abort();
        fclose(sink);
    }
    return 0;
}
