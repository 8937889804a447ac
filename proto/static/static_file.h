/*
 * static_file.h: opening the files a location serves: read-only,
 * non-blocking, close-on-exec, optionally refusing every symbolic link on
 * the way (disable_symlinks on), and the per-worker cache of open
 * descriptors (open_file_cache), checked against the file's identity
 * before each use.
 */
#ifndef CORRAL_PROTO_STATIC_FILE_H
#define CORRAL_PROTO_STATIC_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/* open_file_cache's settings; max 0: off. */
struct static_file_cache_conf {
    unsigned max;
    uint32_t inactive_ms; /* an entry unused this long is closed; nginx's 60 s */
    /* open_file_cache_valid: an entry checked this long ago is used
     * without checking it again (0: checked before each use). */
    uint32_t valid_ms;
};

/* A cached file this small or smaller keeps its bytes in its entry
 * (static_file_small()), at most STATIC_FILE_SMALL_TOTAL bytes of them
 * per thread. */
#define STATIC_FILE_SMALL       (16 * 1024)
#define STATIC_FILE_SMALL_TOTAL (8 * 1024 * 1024)

/* An open file: its descriptor and what fstat() said of it.  From
 * static_file_open(); given back with static_file_close(). */
struct static_file {
    int fd;
    struct stat st;
    void *_entry; /* the cache's entry it came from; NULL: its own fd */
};

/* Opens `path` (absolute) with O_RDONLY | O_NONBLOCK | O_CLOEXEC, and
 * with `no_symlinks` walks it one component at a time with O_NOFOLLOW,
 * so that a symbolic link anywhere on it fails with -ELOOP.  Through
 * `cache` (NULL or max 0: none) when the calling thread's cache holds a
 * descriptor for `path` whose file still has the identity (device,
 * inode, size, modification time) that stat() of `path` gives, or that
 * it had when checked less than `cache->valid_ms` ago.  Returns 0, or
 * -errno (-ENOENT, -ENOTDIR, -EACCES, -ELOOP...). */
int static_file_open(const char *path, bool no_symlinks, const struct static_file_cache_conf *cache,
                     uint64_t now_ms, struct static_file *out);

/* The whole of `f`'s bytes (st.st_size of them), kept in its cache
 * entry: read once, on the first call for a regular file of at most
 * STATIC_FILE_SMALL bytes that came from the cache, while the thread's
 * kept bytes stay within STATIC_FILE_SMALL_TOTAL.  NULL: none kept (not
 * cached, too large, no room, or the read failed): read the file.  Valid
 * until static_file_close(f). */
const char *static_file_small(struct static_file *f);

/* Gives `f` back: closes its descriptor, or returns it to the cache. */
void static_file_close(struct static_file *f);

/* How many descriptors the calling thread's cache holds open (for
 * tests). */
size_t static_file_cached(void);

#endif
