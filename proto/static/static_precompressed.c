/*
 * static_precompressed.c: serving FILE.gz, FILE.br or FILE.zst for FILE
 * (static_precompressed.h).  The client's Accept-Encoding is read with
 * the compress module's parser, so that a sibling is chosen as the
 * compression filter would choose a coding.
 */
#include "proto/static/static_precompressed.h"

#include <assert.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

const char *static_precompressed_suffix(enum compress_coding coding)
{
    switch (coding) {
    case COMPRESS_GZIP: return ".gz";
    case COMPRESS_BR: return ".br";
    case COMPRESS_ZSTD: return ".zst";
    case COMPRESS_CODINGS: break;
    }
    return "";
}

/* Not older than the file: the same time, or a later one. */
static bool not_older(const struct stat *sibling, const struct stat *file)
{
    if (sibling->st_mtim.tv_sec != file->st_mtim.tv_sec)
        return sibling->st_mtim.tv_sec > file->st_mtim.tv_sec;
    return sibling->st_mtim.tv_nsec >= file->st_mtim.tv_nsec;
}

static bool try_sibling(enum compress_coding coding, const char *path,
                        const struct static_file *file, bool no_symlinks,
                        const struct static_file_cache_conf *cache, uint64_t now_ms,
                        struct static_file *out)
{
    char name[PATH_MAX];
    size_t len = strlen(path);
    const char *suffix = static_precompressed_suffix(coding);
    size_t n = strlen(suffix);
    if (len + n + 1 > sizeof(name))
        return false;
    memcpy(name, path, len);
    memcpy(name + len, suffix, n + 1);
    if (static_file_open(name, no_symlinks, cache, now_ms, out) != 0)
        return false;
    if (S_ISREG(out->st.st_mode) && not_older(&out->st, &file->st))
        return true;
    static_file_close(out);
    return false;
}

int static_precompressed_open(const struct http_request *req, const uint8_t modes[COMPRESS_CODINGS],
                              const char *path, const struct static_file *file, bool no_symlinks,
                              const struct static_file_cache_conf *cache, uint64_t now_ms,
                              struct static_file *out)
{
    struct compress_accept accept;
    compress_accept_init(&accept);
    for (size_t i = 0; i < req->header_count; i++)
        if (http_str_equal_nocase(req->headers[i].name, "accept-encoding"))
            compress_accept_parse(&accept, req->headers[i].value.data, req->headers[i].value.len);
    enum compress_coding order[COMPRESS_CODINGS];
    size_t count = compress_accept_order(&accept, order);
    assert(count <= COMPRESS_CODINGS); /* each coding once at most */
    unsigned tried = 0;
    for (size_t i = 0; i < count; i++) {
        enum compress_coding c = order[i];
        if (modes[c] == STATIC_PRECOMPRESSED_OFF)
            continue;
        tried |= 1u << c;
        if (try_sibling(c, path, file, no_symlinks, cache, now_ms, out))
            return (int)c;
    }
    for (int c = 0; c < COMPRESS_CODINGS; c++)
        if (modes[c] == STATIC_PRECOMPRESSED_ALWAYS && !(tried & (1u << c)) &&
            try_sibling((enum compress_coding)c, path, file, no_symlinks, cache, now_ms, out))
            return c;
    return -1;
}
