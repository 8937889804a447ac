/*
 * secret_file.h: a small file of credentials (auth_basic's htpasswd,
 * auth_jwt's key set) read whole when the config is loaded, with a bound
 * on its size, and wiped from memory once parsed.
 */
#ifndef CORRAL_PROTO_SECRET_FILE_H
#define CORRAL_PROTO_SECRET_FILE_H

#include <stddef.h>

/* Reads the file at `path` whole into a malloc'd block, its length in
 * *size (0 on failure).  Returns the block, or NULL with why in `message`
 * (`len` bytes, starting with `path`): it cannot be opened or read, it
 * is longer than `max` bytes, or memory ran out.  The block is the
 * caller's, for secret_file_free(). */
char *secret_file_read(const char *path, size_t max, size_t *size, char *message, size_t len);

/* Wipes the `size` bytes at `data` (what secret_file_read() returned;
 * NULL is ignored) and frees them. */
void secret_file_free(char *data, size_t size);

#endif
