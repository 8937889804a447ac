/*
 * body_store.h: a request body kept whole: in memory up to a bound, then,
 * when a directory is given, in a temporary file there (unlinked as it is
 * made, so that no path ever leads to it and it goes with its
 * descriptor).  A held request keeps its body here (hold.h), and so does
 * the proxy when it buffers a request before choosing a backend
 * (proxy_request_buffering).
 */
#ifndef CORRAL_PROTO_BODY_STORE_H
#define CORRAL_PROTO_BODY_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct body_store {
    /* Set by the owner before the first append: the most bytes kept in
     * memory, and the directory for what does not fit (NULL: more is
     * refused). */
    size_t mem_max;
    const char *temp_path;
    /* The most bytes the temporary files of every store of the process
     * may hold at once, this one's included (0: no bound). */
    uint64_t disk_max;
    /* The bytes, all in memory (`fd` < 0) or all in the file. */
    char *mem;
    size_t mem_len, mem_cap;
    int fd;            /* meaningful once `in_file` */
    bool in_file;      /* the body outgrew mem_max */
    uint64_t len;      /* every byte stored */
    uint64_t disk_len; /* the bytes counted against disk_max for the file */
};

/* A store with nothing in it (its mem_max and temp_path to be set). */
#define BODY_STORE_INIT ((struct body_store){.fd = -1})

/* Appends `len` bytes.  Returns 0; -EFBIG when they would outgrow
 * mem_max and there is no temp_path; -EDQUOT when the process's
 * temporary files would outgrow disk_max; -ENOMEM; or the -errno of the
 * temporary file's creation or write (-ENOSPC). */
int body_store_append(struct body_store *s, const char *data, size_t len);

/* The bytes in the temporary files of every store of the process now;
 * any thread. */
uint64_t body_store_disk_bytes(void);

/* Bytes from `offset` on: sets *data to them and returns how many: in
 * memory, all the rest, the store's own; in a file, up to `cap`, read
 * into `scratch`.  0 at the end, or -errno when the file cannot be read. */
ssize_t body_store_read(const struct body_store *s, uint64_t offset, char *scratch, size_t cap,
                        const char **data);

/* Frees the memory and closes the file (which leaves the disk with it);
 * the store is empty again, its mem_max and temp_path kept. */
void body_store_free(struct body_store *s);

#endif
