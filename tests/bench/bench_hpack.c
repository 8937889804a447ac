/*
 * bench_hpack.c: nanoseconds per header block decoded, the HPACK decoder
 * (proto/http2/hpack.h) against libnghttp2's, over RFC 7541 appendix C's
 * request and response sequences (C.3 to C.6), each sequence on a fresh
 * decoder so that the dynamic tables fill as they do on a connection.
 * A benchmark, not a test: it prints figures and checks only that both
 * decoders accept every block.  Built as build/hpack-bench, outside
 * build/tests/, so that the suite does not run it.
 * Usage: hpack-bench [rounds]
 */
#include "proto/http2/hpack.h"

#include <nghttp2/nghttp2.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

static const char *const blocks[4][3] = {
    {"828684410f7777772e6578616d706c652e636f6d", "828684be58086e6f2d6361636865",
     "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565"},
    {"828684418cf1e3c2e5f23a6ba0ab90f4ff", "828684be5886a8eb10649cbf",
     "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf"},
    {"4803333032580770726976617465611d4d6f6e2c203231204f637420323031332032303a31333a323120474d"
     "546e1768747470733a2f2f7777772e6578616d706c652e636f6d",
     "4803333037c1c0bf",
     "88c1611d4d6f6e2c203231204f637420323031332032303a31333a323220474d54c05a04677a69707738666f"
     "6f3d4153444a4b48514b425a584f5157454f50495541585157454f49553b206d61782d6167653d333630303b"
     "2076657273696f6e3d31"},
    {"488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863c7"
     "8f0b97c8e9ae82ae43d3",
     "4883640effc1c0bf",
     "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7b335"
     "dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007"},
};

static uint8_t bytes[4][3][256];
static size_t lens[4][3];

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static size_t total;

static int count(void *arg, const struct hpack_field *f)
{
    (void)arg;
    total += f->name_len + f->value_len;
    return 0;
}

static double ours(int rounds)
{
    static uint8_t scratch[4096];
    double t0 = now();
    for (int r = 0; r < rounds; r++) {
        for (int s = 0; s < 4; s++) {
            struct hpack_decoder d;
            hpack_decoder_init(&d, s < 2 ? 4096 : 256);
            for (int b = 0; b < 3; b++)
                if (hpack_decode(&d, bytes[s][b], lens[s][b], UINT64_MAX, scratch, sizeof(scratch),
                                 count, NULL) != HPACK_OK)
                    exit(1);
            hpack_decoder_free(&d);
        }
    }
    return (now() - t0) / rounds / 12;
}

static double theirs(int rounds)
{
    double t0 = now();
    for (int r = 0; r < rounds; r++) {
        for (int s = 0; s < 4; s++) {
            nghttp2_hd_inflater *inf;
            if (nghttp2_hd_inflate_new(&inf) != 0)
                exit(1);
            for (int b = 0; b < 3; b++) {
                uint8_t *p = bytes[s][b];
                size_t n = lens[s][b];
                for (;;) {
                    nghttp2_nv nv;
                    int flags = 0;
                    ssize_t k = nghttp2_hd_inflate_hd2(inf, &nv, &flags, p, n, 1);
                    if (k < 0)
                        exit(1);
                    p += k;
                    n -= (size_t)k;
                    if (flags & NGHTTP2_HD_INFLATE_EMIT)
                        total += nv.namelen + nv.valuelen;
                    if (flags & NGHTTP2_HD_INFLATE_FINAL)
                        break;
                }
                nghttp2_hd_inflate_end_headers(inf);
            }
            nghttp2_hd_inflate_del(inf);
        }
    }
    return (now() - t0) / rounds / 12;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 200000;
    for (int s = 0; s < 4; s++)
        for (int b = 0; b < 3; b++) {
            const char *h = blocks[s][b];
            lens[s][b] = strlen(h) / 2;
            for (size_t i = 0; i < lens[s][b]; i++)
                sscanf(h + 2 * i, "%2hhx", &bytes[s][b][i]);
        }
    ours(rounds / 10 + 1); /* warm up, and the Huffman table made */
    theirs(rounds / 10 + 1);
    double a = ours(rounds), b = theirs(rounds);
    printf("hpack decode, RFC 7541 C.3-C.6, ns per header block (table setup included):\n"
           "  corral   %.1f\n  nghttp2  %.1f\n  (checksum %zu)\n",
           a, b, total);
    return 0;
}
