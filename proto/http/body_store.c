/*
 * body_store.c: a request body in memory, then in an unlinked temporary
 * file (body_store.h).
 */
#include "proto/http/body_store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Bytes in the temporary files of every store, over all threads. */
static _Atomic uint64_t store_disk_bytes;

uint64_t body_store_disk_bytes(void)
{
    return atomic_load_explicit(&store_disk_bytes, memory_order_relaxed);
}

/* Counts `len` more bytes on disk, unless that passes s->disk_max. */
static int store_disk_take(const struct body_store *s, uint64_t len)
{
    uint64_t before = atomic_fetch_add_explicit(&store_disk_bytes, len, memory_order_relaxed);
    if (s->disk_max != 0 && before + len > s->disk_max) {
        atomic_fetch_sub_explicit(&store_disk_bytes, len, memory_order_relaxed);
        return -EDQUOT;
    }
    return 0;
}

/* A file nobody can open by name: O_TMPFILE where the file system has
 * it, else a unique name unlinked at once. */
static int store_open_temp(const char *dir)
{
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
        return fd >= 0 ? fd : -errno;
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/corral-body.XXXXXX", dir);
    if (n < 0 || (size_t)n >= sizeof(path))
        return -ENAMETOOLONG;
    fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0)
        return -errno;
    unlink(path);
    return fd;
}

static int store_write(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            return -ENOSPC;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* What memory holds goes to a new temporary file, and memory is freed. */
static int store_spill(struct body_store *s)
{
    int err = store_disk_take(s, s->mem_len);
    if (err != 0)
        return err;
    int fd = store_open_temp(s->temp_path);
    if (fd >= 0)
        err = store_write(fd, s->mem, s->mem_len);
    if (fd < 0 || err != 0) {
        atomic_fetch_sub_explicit(&store_disk_bytes, s->mem_len, memory_order_relaxed);
        if (fd >= 0)
            close(fd);
        return fd < 0 ? fd : err;
    }
    s->disk_len = s->mem_len;
    free(s->mem);
    s->mem = NULL;
    s->mem_len = s->mem_cap = 0;
    s->fd = fd;
    s->in_file = true;
    return 0;
}

int body_store_append(struct body_store *s, const char *data, size_t len)
{
    if (len == 0)
        return 0;
    if (!s->in_file && len > s->mem_max - s->mem_len) {
        if (s->temp_path == NULL)
            return -EFBIG;
        int err = store_spill(s);
        if (err != 0)
            return err;
    }
    if (s->in_file) {
        int err = store_disk_take(s, len);
        if (err != 0)
            return err;
        s->disk_len += len; /* even what a failed write left: until the file closes */
        err = store_write(s->fd, data, len);
        if (err != 0)
            return err;
        s->len += len;
        return 0;
    }
    if (s->mem_len + len > s->mem_cap) {
        size_t cap = s->mem_cap > 0 ? s->mem_cap : 4096;
        while (cap < s->mem_len + len)
            cap *= 2;
        if (cap > s->mem_max)
            cap = s->mem_max; /* it fits: checked above */
        char *grown = realloc(s->mem, cap);
        if (grown == NULL)
            return -ENOMEM;
        s->mem = grown;
        s->mem_cap = cap;
    }
    memcpy(s->mem + s->mem_len, data, len);
    s->mem_len += len;
    s->len += len;
    return 0;
}

ssize_t body_store_read(const struct body_store *s, uint64_t offset, char *scratch, size_t cap,
                        const char **data)
{
    if (offset >= s->len)
        return 0;
    if (!s->in_file) {
        *data = s->mem + offset;
        return (ssize_t)(s->len - offset);
    }
    uint64_t rest = s->len - offset;
    size_t n = rest < cap ? (size_t)rest : cap;
    ssize_t got;
    do
        got = pread(s->fd, scratch, n, (off_t)offset);
    while (got < 0 && errno == EINTR);
    if (got < 0)
        return -errno;
    if (got == 0)
        return -EIO; /* shorter than written: someone truncated it */
    *data = scratch;
    return got;
}

void body_store_free(struct body_store *s)
{
    free(s->mem);
    s->mem = NULL;
    s->mem_len = s->mem_cap = 0;
    if (s->in_file) {
        close(s->fd);
        atomic_fetch_sub_explicit(&store_disk_bytes, s->disk_len, memory_order_relaxed);
        s->disk_len = 0;
    }
    s->fd = -1;
    s->in_file = false;
    s->len = 0;
}
