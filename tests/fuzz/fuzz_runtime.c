/*
 * fuzz_runtime.c: libFuzzer target for the config-to-runtime path.  The
 * input is read as fuzz_conf reads it (the main file up to its first NUL,
 * the rest served as "part.conf"); a configuration that parses is built as
 * a start builds it: every check -t makes, the sites with their virtual
 * hosts, locations, upstreams and TLS contexts, the access log (written to
 * /dev/null), and then all of it is freed, so a leak is a finding.
 *
 * A directory made at start holds a certificate, its key and a CA file
 * under the names the seed corpus uses (ecdsa.pem, ecdsa.key, rsa.pem,
 * rsa.key, ca.pem), so TLS contexts are built and not only refused.
 */
#include "cmd/runtime.h"
#include "cmd/runtime_vars.h"
#include "proto/http/module.h"
#include "proto/upstream/proxy_module.h"

#include <errno.h>
#include <netdb.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* admin.c's, linked for the admin handlers' addresses; no handler runs. */
struct daemon_state daemon_state = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Linked with -Wl,--wrap=getaddrinfo: host names resolve only when they are
 * numbers, so no fuzzed name turns into a DNS query. */
int __real_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                       struct addrinfo **res);
int __wrap_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                       struct addrinfo **res);

int __wrap_getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                       struct addrinfo **res)
{
    struct addrinfo numeric = hints != NULL ? *hints : (struct addrinfo){0};
    numeric.ai_flags |= AI_NUMERICHOST;
    return __real_getaddrinfo(node, service, &numeric, res);
}

static char dir[64];

static const char server_conf[] = "server {\n"
                                  "    listen 127.0.0.1:8080;\n"
                                  "    include part.conf;\n"
                                  "    location / { return 200 \"ok\\n\"; }\n"
                                  "}\n";
static const char upstream_conf[] = "upstream app { server 127.0.0.1:9001 weight=2; }\n"
                                    "include fuzz.conf;\n";

struct files {
    const char *main;
    size_t main_len;
    const char *part;
    size_t part_len;
};

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
    size_t dir_len = strlen(dir);
    const char *name =
        strncmp(path, dir, dir_len) == 0 && path[dir_len] == '/' ? path + dir_len + 1 : "";
    if (strcmp(name, "fuzz.conf") == 0)
        return serve(files->main, files->main_len, len);
    if (strcmp(name, "part.conf") == 0)
        return serve(files->part, files->part_len, len);
    if (strcmp(name, "server.conf") == 0)
        return serve(server_conf, strlen(server_conf), len);
    if (strcmp(name, "upstream.conf") == 0)
        return serve(upstream_conf, strlen(upstream_conf), len);
    errno = ENOENT;
    return NULL;
}

/* Messages are formatted (from fuzzed text) and dropped. */
static void quiet(enum corral_log_level level, const char *message, void *arg)
{
    (void)level;
    (void)arg;
    if (memchr(message, '\0', 1024) == NULL)
        abort(); /* a message is always a terminated string */
}

static int write_pem(const char *name, EVP_PKEY *key, X509 *cert)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    int ok = cert != NULL ? PEM_write_X509(f, cert)
                          : PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL);
    fclose(f);
    return ok ? 0 : -1;
}

/* A self-signed certificate for "a.test" and its key, as NAME.pem and
 * NAME.key. */
static int make_certificate(const char *name, EVP_PKEY *key)
{
    X509 *cert = X509_new();
    if (cert == NULL || key == NULL)
        return -1;
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert), 0);
    X509_gmtime_adj(X509_getm_notAfter(cert), 3600L * 24 * 365);
    X509_NAME *subject = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC, (const unsigned char *)"a.test", -1, -1,
                               0);
    X509_set_issuer_name(cert, subject);
    X509_set_pubkey(cert, key);
    char pem[64], key_name[64];
    snprintf(pem, sizeof(pem), "%s.pem", name);
    snprintf(key_name, sizeof(key_name), "%s.key", name);
    int err = X509_sign(cert, key, EVP_sha256()) > 0 && write_pem(pem, NULL, cert) == 0 &&
                      write_pem(key_name, key, NULL) == 0
                  ? 0
                  : -1;
    if (err == 0 && strcmp(name, "ecdsa") == 0)
        err = write_pem("ca.pem", NULL, cert);
    X509_free(cert);
    EVP_PKEY_free(key);
    return err;
}

static const char *const tls_files[] = {"ecdsa.pem", "ecdsa.key", "rsa.pem", "rsa.key", "ca.pem"};

static void remove_dir(void)
{
    for (size_t i = 0; i < sizeof(tls_files) / sizeof(tls_files[0]); i++) {
        char path[128];
        snprintf(path, sizeof(path), "%s/%s", dir, tls_files[i]);
        unlink(path);
    }
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    snprintf(dir, sizeof(dir), "/tmp/corral-fuzz-runtime-XXXXXX");
    if (mkdtemp(dir) == NULL)
        abort();
    atexit(remove_dir);
    if (make_certificate("ecdsa", EVP_EC_gen("P-256")) != 0 ||
        make_certificate("rsa", EVP_RSA_gen(2048)) != 0) {
        fprintf(stderr, "fuzz_runtime: cannot make the TLS files in %s\n", dir);
        abort();
    }
    corral_set_logger(quiet, NULL);
    corral_set_log_level(CORRAL_LOG_DEBUG);
    return 0;
}

/* Whether `path` (NULL: none) is missing or a regular file: a fuzzed
 * config may name /dev/zero or a FIFO, which nothing would finish reading. */
static bool harmless_file(const char *path)
{
    struct stat st;
    return path == NULL || stat(path, &st) != 0 || S_ISREG(st.st_mode);
}

static bool harmless_files(const struct conf_config *config)
{
    for (size_t s = 0; s < config->server_count; s++) {
        const struct conf_server *server = &config->servers[s];
        const struct conf_tls *tls = &server->tls;
        if (!harmless_file(tls->settings.client_ca))
            return false;
        for (size_t i = 0; i < tls->certificate_count; i++)
            if (!harmless_file(tls->certificates[i].certificate) ||
                !harmless_file(tls->certificates[i].key))
                return false;
        for (size_t l = 0; l < server->location_count; l++) {
            const struct proxy_module_conf *proxy =
                conf_module_conf(server->locations[l].modules, &proxy_module.conf);
            if (proxy != NULL && !harmless_file(proxy->tls.ca_file))
                return false;
        }
    }
    return true;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    const char *text = (const char *)data;
    const char *nul = memchr(text, '\0', size);
    struct files files = {
        .main = text,
        .main_len = nul != NULL ? (size_t)(nul - text) : size,
        .part = nul != NULL ? nul + 1 : "",
        .part_len = nul != NULL ? size - (size_t)(nul - text) - 1 : 0,
    };
    char main_path[96];
    snprintf(main_path, sizeof(main_path), "%s/fuzz.conf", dir);
    struct conf_config *config;
    struct conf_error error;
    runtime_modules_init();
    if (conf_parse(main_path, files.main, files.main_len, read_file, &files, &config, &error) != 0)
        return 0;
    if (!harmless_files(config) || check_servable(config) != 0) {
        conf_free(config);
        return 0;
    }
    /* What a start builds, for up to 4 workers (per-worker state is sized
     * by the count); the generation owns the config from here. */
    struct generation *gen = calloc(1, sizeof(*gen));
    if (gen == NULL) {
        conf_free(config);
        return 0;
    }
    gen->config = config;
    unsigned workers = config->workers == 0 ? 1 : config->workers > 4 ? 4 : config->workers;
    if (sites_build(gen, config, workers) == 0 && config->access_log != NULL) {
        access_log_open_compiled("/dev/null", runtime_vars_log_format(gen->vars), &gen->access_log);
    }
    generation_free(gen);
    return 0;
}
