/*
 * secret_file.c: credential files read whole and bounded, wiped when
 * their parser is done with them (secret_file.h).
 */
#include "proto/policy/secret_file.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *secret_file_read(const char *path, size_t max, size_t *size, char *message, size_t len)
{
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(message, len, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    /* One byte more than allowed: reading it tells a file too long. */
    char *data = malloc(max + 1);
    size_t n = data != NULL ? fread(data, 1, max + 1, f) : 0;
    bool ok = false;
    if (data == NULL)
        snprintf(message, len, "%s: out of memory", path);
    else if (ferror(f))
        snprintf(message, len, "%s: cannot read: %s", path, strerror(errno));
    else if (n > max)
        snprintf(message, len, "%s: larger than %zu bytes", path, max);
    else
        ok = true;
    fclose(f);
    if (!ok) {
        secret_file_free(data, n);
        return NULL;
    }
    *size = n;
    return data;
}

void secret_file_free(char *data, size_t size)
{
    if (data == NULL)
        return;
    OPENSSL_cleanse(data, size); /* it may hold secrets */
    free(data);
}
