/*
 * hpack.h: an HPACK decoder and encoder (RFC 7541) with their dynamic
 * tables, the HTTP/2 server's (through h2_session.h); libnghttp2 is the
 * oracle this codec is tested against.
 *
 * Memory: a table holds no heap memory until its first entry; then one
 * block for the entries' bytes and 12 bytes per entry, grown by doubling
 * (from 256 bytes and 8 entries) as entries come, never past what the
 * table's current maximum needs (4096 + 128 * 12 bytes for 4096), shrunk
 * or freed when a size update lowers that maximum.  The decoder writes Huffman-decoded strings only
 * into the caller's scratch buffer, bounded by its size and by the
 * header-list limit; nothing is allocated per header.
 *
 * Ownership: the caller owns the decoder and encoder structs; *_free()
 * releases the table's block.  One connection's codec is used by one
 * thread.
 */
#ifndef CORRAL_PROTO_HTTP2_HPACK_H
#define CORRAL_PROTO_HTTP2_HPACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A dynamic table (RFC 7541 2.3.2, 4): entries' bytes, oldest first, in
 * buf[head..tail); their places in a ring of `slots`. */
struct hpack_entry {
    uint32_t off;            /* of the name in buf; the value follows it */
    uint32_t name_len : 24;  /* below the table's size, below 2^24 */
    uint32_t hash : 8;       /* of its name and value: hpack_table.c's hash() */
    uint32_t value_len : 24; /* as name_len */
    uint32_t marked : 1;     /* hpack_table_mark()'s */
};

struct hpack_table {
    uint8_t *buf;                /* NULL until the first entry */
    struct hpack_entry *entries; /* in the same block as buf */
    uint32_t cap;                /* the size buf was made for */
    uint32_t max_size;           /* the table's maximum size now */
    uint32_t size;               /* RFC 7541 4.1: lengths + 32 per entry */
    uint32_t head, tail;         /* the entries' bytes in buf */
    uint32_t count, first;       /* entries, and the oldest's slot */
    uint32_t slots;              /* of `entries` */
    uint32_t added;              /* entries ever added, modulo 2^32: the
                                  * newest is number added - 1 */
    uint64_t static_marks;       /* bit i - 1: static entry i marked */
};

/* A header field: spans valid only during the callback that receives it. */
struct hpack_field {
    const uint8_t *name;
    size_t name_len;
    const uint8_t *value;
    size_t value_len;
    bool never_indexed; /* 6.2.3: must stay unindexed when passed on */
};

enum hpack_result {
    HPACK_OK = 0,
    HPACK_ERROR = -1,     /* malformed: COMPRESSION_ERROR for the connection */
    HPACK_TOO_LARGE = -2, /* the header list passes the limit, or a field the scratch */
    HPACK_STOPPED = -3,   /* the callback asked to stop */
};

/* Receives each field of a block in order; nonzero stops the decoding. */
typedef int (*hpack_field_fn)(void *arg, const struct hpack_field *f);

struct hpack_decoder {
    struct hpack_table table;
    uint32_t max_setting; /* our SETTINGS_HEADER_TABLE_SIZE: the most the
                           * peer's size updates may ask for */
    uint32_t update_min;  /* the smallest setting since the last update */
    bool update_required; /* the setting went below the table's size: the
                           * next block must start with a size update */
    bool broken;          /* a block failed: the table may not match the
                           * peer's, every later block fails */
    uint32_t passing;     /* the field being passed came whole from the
                           * entry at this index; 0: a literal */
    bool mark_added;      /* the field being passed, a literal, marked */
};

/* A decoder whose table may grow to `max_setting` bytes (4096 unless the
 * server announces otherwise; at most 2^24 - 1, as for
 * hpack_decoder_set_max()). */
void hpack_decoder_init(struct hpack_decoder *d, uint32_t max_setting);
void hpack_decoder_free(struct hpack_decoder *d);

/* Our SETTINGS_HEADER_TABLE_SIZE changed (once the peer acknowledged it).
 * Below the table's size now, the table shrinks at once and the peer must
 * start its next block with a size update no larger than the smallest
 * setting since (RFC 7541 4.2); above it, the peer may use more with a
 * size update.  False when memory failed: the decoder is then broken. */
bool hpack_decoder_set_max(struct hpack_decoder *d, uint32_t max_setting);

/* From the field callback: marks the entry the field being passed came
 * from whole (an indexed field), or the one it makes (a literal with
 * incremental indexing), so that hpack_decoder_marked() is true for the
 * fields decoded from it whole later: the caller checks a field's bytes
 * once, not for every block that repeats it.  The mark lasts as long as
 * the entry. */
void hpack_decoder_mark(struct hpack_decoder *d);

/* From the field callback: whether the field being passed came whole
 * from a marked entry (an indexed field). */
bool hpack_decoder_marked(const struct hpack_decoder *d);

/* Decodes one whole header block (HEADERS plus CONTINUATION payloads,
 * joined) of `len` bytes, passing each field to `fn`.  Huffman strings are
 * decoded into `scratch` (`scratch_size` bytes, not NULL, reused for each
 * field: its size bounds a field's decoded name plus value, and a name
 * taken from the dynamic table for a field to be indexed); plain strings
 * are passed as spans of `block`.  The header list's size (RFC 9113 6.5.2: names,
 * values, 32 per field) may not pass `max_list_size`: the decoding stops
 * at the first string that would take it over, before decoding it.  Any
 * result but HPACK_OK leaves the decoder broken. */
enum hpack_result hpack_decode(struct hpack_decoder *d, const uint8_t *block, size_t len,
                               uint64_t max_list_size, uint8_t *scratch, size_t scratch_size,
                               hpack_field_fn fn, void *arg);

/* How the encoder writes a field. */
enum hpack_index {
    HPACK_NO_INDEX = 0, /* a literal the peer does not index (unless static) */
    HPACK_INDEX = 1,    /* added to the tables for later blocks */
    HPACK_NEVER = 2,    /* never indexed, here or by intermediaries */
};

/* The fields of a block that have a hint in the encoder: a response's
 * head from the proxy has five or six. */
#define HPACK_ENCODER_HINTS 8

struct hpack_encoder {
    struct hpack_table table;
    uint32_t limit;      /* the most this encoder uses, whatever the peer allows */
    uint32_t update_min; /* the smallest size since the last block */
    bool update_pending; /* a size update starts the next block */
    /* Per place in a block, the entry (hpack_table_id()) the field there
     * was last written as or added to, tried before the tables are
     * searched: a connection's responses repeat their fields in order. */
    uint32_t hint[HPACK_ENCODER_HINTS];
};

/* An encoder that uses a table of at most `limit` bytes (and 2^24 - 1);
 * until the peer's SETTINGS say otherwise the table may be 4096 bytes. */
void hpack_encoder_init(struct hpack_encoder *e, uint32_t limit);
void hpack_encoder_free(struct hpack_encoder *e);

/* The peer's SETTINGS_HEADER_TABLE_SIZE: the table shrinks at once (its
 * memory too) and the next block tells the peer so. */
void hpack_encoder_set_peer_size(struct hpack_encoder *e, uint32_t size);

/* The most bytes hpack_encode() writes for these fields. */
size_t hpack_encode_bound(const struct hpack_field *fields, size_t n);

/* Encodes a header block of `n` fields into `out`, which has room for
 * hpack_encode_bound() bytes; `how[i]` says how to write fields[i] (NULL:
 * HPACK_NO_INDEX for all; a field's never_indexed flag means HPACK_NEVER).
 * Returns the block's length. */
size_t hpack_encode(struct hpack_encoder *e, const struct hpack_field *fields, const uint8_t *how,
                    size_t n, uint8_t *out);

#endif
