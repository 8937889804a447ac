/*
 * fuzz_preread.c: libFuzzer over tls_preread_feed(): each input is what a
 * client sends first on a tls_preread listen.  It is fed whole, a byte at
 * a time, and in two pieces cut where its first byte says, and the three
 * answers must agree; a hello that parses has a host name of host name
 * bytes and a protocol list of printable names joined by ",".
 */
#include "proto/tls/tls_preread.h"

#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

static struct tls_preread whole, bytes, halves;

static int feed_bytes(struct tls_preread *p, const uint8_t *data, size_t len)
{
    int rc = 0;
    for (size_t i = 0; i < len && rc == 0; i++)
        rc = tls_preread_feed(p, data + i, 1);
    return rc;
}

static void check_result(const struct tls_preread *p)
{
    size_t name = strlen(p->server_name), alpn = strlen(p->alpn);
    assert(name <= TLS_PREREAD_NAME_MAX && alpn <= TLS_PREREAD_ALPN_MAX);
    for (size_t i = 0; i < name; i++)
        assert(strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._",
                      p->server_name[i]) != NULL);
    for (size_t i = 0; i < alpn; i++)
        assert(p->alpn[i] > 0x20 && p->alpn[i] < 0x7f);
    assert(alpn == 0 || (p->alpn[0] != ',' && p->alpn[alpn - 1] != ','));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    memset(&whole, 0, sizeof(whole));
    memset(&bytes, 0, sizeof(bytes));
    memset(&halves, 0, sizeof(halves));
    int a = tls_preread_feed(&whole, data, len);
    int b = feed_bytes(&bytes, data, len);
    size_t cut = len > 0 ? data[0] % (len + 1) : 0;
    int c = tls_preread_feed(&halves, data, cut);
    if (c == 0)
        c = tls_preread_feed(&halves, data + cut, len - cut);
    assert(a == b && b == c);
    assert(a == 0 || a == 1 || a == -EPROTO || a == -EMSGSIZE);
    if (a == 1) {
        check_result(&whole);
        assert(strcmp(whole.server_name, bytes.server_name) == 0);
        assert(strcmp(whole.alpn, bytes.alpn) == 0);
        assert(strcmp(whole.server_name, halves.server_name) == 0);
        assert(strcmp(whole.alpn, halves.alpn) == 0);
    }
    return 0;
}
