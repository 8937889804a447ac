/*
 * static_file.c: opening served files (static_file.h), walking the path
 * without following symbolic links when asked, and each thread's cache of
 * open descriptors: a hash of paths with a least-recently-used list,
 * bounded by open_file_cache's max, an entry reused only while stat() of
 * its path still names the same, unchanged file.  Workers are threads and
 * a connection stays on one, so the cache is the thread's own: no lock.
 */
#include "proto/static/static_file.h"

#include "proto/thread_exit.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OPEN_FLAGS (O_RDONLY | O_NONBLOCK | O_CLOEXEC)

static int open_plain(const char *path)
{
    int fd;
    do
        fd = open(path, OPEN_FLAGS);
    while (fd == -1 && errno == EINTR);
    return fd == -1 ? -errno : fd;
}

/* One component at a time from "/", each with O_NOFOLLOW: a symbolic
 * link anywhere fails with -ELOOP, as nginx's disable_symlinks on. */
static int open_no_symlinks(const char *path)
{
    if (path[0] != '/')
        return -EINVAL;
    int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir == -1)
        return -errno;
    const char *p = path;
    while (*p == '/')
        p++;
    if (*p == '\0') {
        int fd = openat(dir, ".", OPEN_FLAGS);
        int err = fd == -1 ? -errno : fd;
        close(dir);
        return err;
    }
    for (;;) {
        size_t n = strcspn(p, "/");
        const char *next = p + n;
        bool trailing_slash = *next == '/';
        while (*next == '/')
            next++;
        bool last = *next == '\0';
        char name[256];
        if (n >= sizeof(name)) {
            close(dir);
            return -ENAMETOOLONG;
        }
        memcpy(name, p, n);
        name[n] = '\0';
        int flags = last ? OPEN_FLAGS | O_NOFOLLOW | (trailing_slash ? O_DIRECTORY : 0)
                         : O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
        int fd;
        do
            fd = openat(dir, name, flags);
        while (fd == -1 && errno == EINTR);
        int err = fd == -1 ? -errno : 0;
        struct stat st;
        /* A link where a directory should be gives ENOTDIR: say why. */
        if (err == -ENOTDIR && fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISLNK(st.st_mode))
            err = -ELOOP;
        close(dir);
        if (err != 0)
            return err;
        assert(fd >= 0);
        if (last)
            return fd;
        dir = fd;
        p = next;
    }
}

/* ----------------------------------------------------------- the cache */

struct entry {
    char *path;
    bool no_symlinks;
    int fd;
    struct stat st;
    uint64_t used_ms;
    uint64_t checked_ms;       /* when stat() last vouched for it */
    char *small;               /* its bytes (static_file_small()); NULL: none kept */
    unsigned refs;             /* static_files handed out and not closed */
    bool detached;             /* out of the cache: closed when the last ref goes */
    struct entry *prev, *next; /* most recently used first */
    struct entry *hnext;
    uint32_t hash;
};

#define BUCKETS 4096

struct cache {
    struct entry *buckets[BUCKETS];
    struct entry lru; /* sentinel */
    size_t count;
    size_t small_bytes; /* the entries' kept bytes */
};

static void entry_free(struct entry *e)
{
    close(e->fd);
    free(e->small);
    free(e->path);
    free(e);
}

static _Thread_local struct cache *mine;

static void cache_destroy(void *arg)
{
    struct cache *c = arg;
    mine = NULL;
    for (struct entry *e = c->lru.next; e != &c->lru;) {
        struct entry *next = e->next;
        if (e->refs == 0)
            entry_free(e);
        else
            e->detached = true; /* its last static_file_close() frees it */
        e = next;
    }
    free(c);
}

/* The thread's cache (`mine`, found without a call), freed when the
 * thread ends. */
static struct cache *cache_get(void)
{
    if (mine != NULL)
        return mine;
    struct cache *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->lru.prev = c->lru.next = &c->lru;
    if (thread_exit_call(cache_destroy, c) != 0) {
        free(c);
        return NULL;
    }
    mine = c;
    return c;
}

static uint32_t hash_path(const char *s, bool no_symlinks)
{
    uint32_t h = 2166136261u ^ (no_symlinks ? 1u : 0u); /* FNV-1a */
    for (; *s != '\0'; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static void lru_unlink(struct entry *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
}

static void lru_push(struct cache *c, struct entry *e)
{
    e->next = c->lru.next;
    e->prev = &c->lru;
    c->lru.next->prev = e;
    c->lru.next = e;
}

static void detach(struct cache *c, struct entry *e)
{
    struct entry **pp = &c->buckets[e->hash % BUCKETS];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    lru_unlink(e);
    c->count--;
    if (e->small != NULL)
        c->small_bytes -= (size_t)e->st.st_size;
    e->detached = true;
    if (e->refs == 0)
        entry_free(e);
}

static bool same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

static int open_fresh(const char *path, bool no_symlinks, struct static_file *out)
{
    int fd = no_symlinks ? open_no_symlinks(path) : open_plain(path);
    if (fd < 0)
        return fd;
    if (fstat(fd, &out->st) == -1) {
        int err = -errno;
        close(fd);
        return err;
    }
    out->fd = fd;
    out->_entry = NULL;
    return 0;
}

int static_file_open(const char *path, bool no_symlinks, const struct static_file_cache_conf *conf,
                     uint64_t now_ms, struct static_file *out)
{
    struct cache *c = conf != NULL && conf->max > 0 ? cache_get() : NULL;
    if (c == NULL)
        return open_fresh(path, no_symlinks, out);
    uint32_t h = hash_path(path, no_symlinks);
    for (struct entry *e = c->buckets[h % BUCKETS]; e != NULL; e = e->hnext) {
        if (e->hash != h || e->no_symlinks != no_symlinks || strcmp(e->path, path) != 0)
            continue;
        struct stat now;
        bool fresh = now_ms - e->used_ms < conf->inactive_ms;
        /* Checked a moment ago: taken on trust (open_file_cache_valid). */
        if (fresh && now_ms - e->checked_ms >= conf->valid_ms) {
            fresh = (no_symlinks ? lstat(path, &now) : stat(path, &now)) == 0 &&
                    same_file(&now, &e->st);
            e->checked_ms = now_ms;
        }
        if (!fresh) {
            detach(c, e);
            break;
        }
        e->used_ms = now_ms;
        e->refs++;
        lru_unlink(e);
        lru_push(c, e);
        *out = (struct static_file){.fd = e->fd, .st = e->st, ._entry = e};
        return 0;
    }
    int err = open_fresh(path, no_symlinks, out);
    if (err != 0 || !S_ISREG(out->st.st_mode))
        return err;
    struct entry *e = calloc(1, sizeof(*e));
    if (e == NULL || (e->path = strdup(path)) == NULL) {
        free(e);
        return 0; /* served uncached */
    }
    e->no_symlinks = no_symlinks;
    e->fd = out->fd;
    e->st = out->st;
    e->used_ms = now_ms;
    e->checked_ms = now_ms;
    e->refs = 1;
    e->hash = h;
    e->hnext = c->buckets[h % BUCKETS];
    c->buckets[h % BUCKETS] = e;
    lru_push(c, e);
    c->count++;
    out->_entry = e;
    /* One in, one out: the cache holds at most the largest max that a
     * location using it asked for. */
    if (c->count > conf->max)
        detach(c, c->lru.prev);
    return 0;
}

const char *static_file_small(struct static_file *f)
{
    struct entry *e = f->_entry;
    if (e == NULL)
        return NULL;
    if (e->small != NULL || e->detached)
        return e->small;
    size_t size = (size_t)e->st.st_size;
    struct cache *c = cache_get();
    if (!S_ISREG(e->st.st_mode) || e->st.st_size > STATIC_FILE_SMALL || size == 0 || c == NULL ||
        c->small_bytes + size > STATIC_FILE_SMALL_TOTAL)
        return NULL;
    char *data = malloc(size);
    if (data == NULL)
        return NULL;
    ssize_t n;
    do
        n = pread(e->fd, data, size, 0);
    while (n == -1 && errno == EINTR);
    /* Short: the file changed since fstat(); the next check finds it. */
    if (n != (ssize_t)size) {
        free(data);
        return NULL;
    }
    e->small = data;
    c->small_bytes += size;
    return data;
}

void static_file_close(struct static_file *f)
{
    struct entry *e = f->_entry;
    if (e == NULL) {
        if (f->fd >= 0)
            close(f->fd);
    } else if (--e->refs == 0 && e->detached) {
        entry_free(e);
    }
    f->fd = -1;
    f->_entry = NULL;
}

size_t static_file_cached(void)
{
    struct cache *c = cache_get();
    return c != NULL ? c->count : 0;
}
