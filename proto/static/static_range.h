/*
 * static_range.h: the Range header of a request for a static file
 * (RFC 9110 14.2): byte ranges parsed against the file's size, bounded
 * in number and coalesced, so that a response never sends a byte twice.
 */
#ifndef CORRAL_PROTO_STATIC_RANGE_H
#define CORRAL_PROTO_STATIC_RANGE_H

#include "proto/http/http.h"

#include <stddef.h>
#include <stdint.h>

/* The ranges one request may ask for, at most: past it the Range header
 * is ignored and the whole file sent (nginx's max_ranges). */
#define STATIC_RANGES_MAX 16

/* One range of bytes, `first` to `last` inclusive, within the file. */
struct static_range {
    uint64_t first, last;
};

enum static_range_result {
    STATIC_RANGE_IGNORE,        /* no usable Range: the whole file, 200 */
    STATIC_RANGE_OK,            /* ranges in out[0..*count), sorted, disjoint: 206 */
    STATIC_RANGE_UNSATISFIABLE, /* none lies within the file: 416 */
};

/* Parses a Range value ("bytes=0-99,200-,-50") against a file of `size`
 * bytes into `out` (STATIC_RANGES_MAX entries), clamped to the file,
 * sorted and with overlapping or adjacent ranges merged.  As nginx: a
 * malformed bytes range is STATIC_RANGE_UNSATISFIABLE (416); another
 * unit, "bytes=" alone, more than STATIC_RANGES_MAX ranges, or a well
 * formed one of an empty file: STATIC_RANGE_IGNORE.  Allocates nothing. */
enum static_range_result static_range_parse(struct http_str value, uint64_t size,
                                            struct static_range *out, size_t *count);

#endif
