/*
 * hpack_table.h: HPACK's static table and the dynamic table's entries
 * (RFC 7541 2.3, 4), shared by the decoder and the encoder.  The table
 * struct is in hpack.h.
 */
#ifndef CORRAL_PROTO_HTTP2_HPACK_TABLE_H
#define CORRAL_PROTO_HTTP2_HPACK_TABLE_H

#include "proto/http2/hpack.h"

/* The static table's entries, 1-based: index 1..61. */
#define HPACK_TABLE_STATIC 61

/* The table size that SETTINGS_HEADER_TABLE_SIZE starts at (RFC 9113 6.5.2). */
#define HPACK_TABLE_DEFAULT_SIZE 4096

/* The largest maximum size: an entry's lengths fit 24 bits. */
#define HPACK_TABLE_SIZE_MAX 0xffffffu

/* An empty table whose maximum size is `max_size` (at most
 * HPACK_TABLE_SIZE_MAX); it holds no memory. */
void hpack_table_init(struct hpack_table *t, uint32_t max_size);
void hpack_table_free(struct hpack_table *t);

/* Sets the maximum size (at most HPACK_TABLE_SIZE_MAX): entries are
 * evicted to fit, and the block is shrunk (or freed when the table is
 * empty).  False when a smaller block could not be made: the table is
 * still correct, in the larger one. */
bool hpack_table_resize(struct hpack_table *t, uint32_t max_size);

/* Adds an entry (4.4): evicts the oldest ones to make room; one larger
 * than the maximum empties the table.  `name` and `value` must not point
 * into the table.  False, the table unchanged, when memory for it could
 * not be had. */
bool hpack_table_add(struct hpack_table *t, const uint8_t *name, size_t name_len,
                     const uint8_t *value, size_t value_len);

/* The entry at `index` of the whole address space (2.3.3): 1..61 static,
 * then the dynamic entries, newest first.  False when there is none. */
bool hpack_table_get(const struct hpack_table *t, uint64_t index, struct hpack_field *f);

/* The index of the entry with this name and value (*both set) or, failing
 * that, with this name (*both clear); 0 when neither is in a table. */
uint32_t hpack_table_find(const struct hpack_table *t, const uint8_t *name, size_t name_len,
                          const uint8_t *value, size_t value_len, bool *both);

/* An entry's id, which stays its own while it is in the table (its index
 * changes as entries are added): for `index`, an entry's index now, not
 * 0.  Ids are reused after 2^31 entries: an id names an entry to try, the
 * caller compares its name and value. */
uint32_t hpack_table_id(const struct hpack_table *t, uint32_t index);

/* The index now of the entry with this id, or 0 when it was evicted (or
 * the id is 0). */
uint32_t hpack_table_index_of(const struct hpack_table *t, uint32_t id);

/* Whether the entry at `index` (an entry's, not 0) has this name and
 * value. */
bool hpack_table_holds(const struct hpack_table *t, uint32_t index, const uint8_t *name,
                       size_t name_len, const uint8_t *value, size_t value_len);

/* A mark on the entry at `index` (an entry's, not 0), which stays with
 * it until it is evicted (a static entry's until the table is emptied);
 * what it means is the caller's. */
void hpack_table_mark(struct hpack_table *t, uint32_t index);
bool hpack_table_marked(const struct hpack_table *t, uint32_t index);

#endif
