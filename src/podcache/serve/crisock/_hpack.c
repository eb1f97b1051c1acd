/* HPACK (RFC 7541) as the relay reads it: the client's header blocks decoded with the client's
 * dynamic table, and written again as literals that use no table (_h2.h says why).
 *
 * Invariants:
 * - the table's size never exceeds its max_size, nor max_size HPACK_LIMIT;
 * - a field read from the table is copied before the table changes (an insertion may evict it);
 * - every read is checked against the block's end: a block that ends inside a field, an integer
 *   past 2^28, an index outside both tables, a Huffman string with EOS or bad padding is an error.
 */
#include <stdlib.h>
#include <string.h>

#include "_h2.h"

int buf_add(buf *b, const void *data, size_t size) {
    if (b->len + size > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + size) cap *= 2;
        uint8_t *grown = realloc(b->data, cap);
        if (!grown) return -1;
        b->data = grown;
        b->cap = cap;
    }
    if (size) memcpy(b->data + b->len, data, size);
    b->len += size;
    return 0;
}

int buf_byte(buf *b, uint8_t byte) { return buf_add(b, &byte, 1); }

void buf_free(buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ---- Huffman (RFC 7541 Appendix B): a canonical code, so its lengths are all it takes ---- */

static const uint8_t huff_len[257] = {
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28,
    28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6,
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, 13, 6, 7, 7, 7, 7, 7, 7,
    7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6,
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, 6, 7, 6, 5, 5, 6, 7, 7,
    7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23,
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22, 21, 20, 22, 22, 23, 23, 21,
    23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26, 27, 24,
    21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23,
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, 30};
static uint16_t huff_sym[257];  /* the symbols by (length, symbol) */
static uint32_t huff_first[31]; /* the first code of each length */
static uint16_t huff_count[31], huff_index[31];
static uint32_t huff_code[257]; /* each symbol's code, its length in huff_len */

void hpack_init(void) {
    uint32_t code = 0;
    uint16_t at = 0;
    for (int len = 1; len <= 30; len++) {
        huff_first[len] = code;
        huff_index[len] = at;
        for (int sym = 0; sym < 257; sym++)
            if (huff_len[sym] == len) {
                huff_code[sym] = code + at - huff_index[len];
                huff_sym[at++] = (uint16_t)sym;
            }
        huff_count[len] = (uint16_t)(at - huff_index[len]);
        code = (code + huff_count[len]) << 1;
    }
}

static int huffman(const uint8_t *in, size_t size, buf *out) {
    uint32_t code = 0;
    int bits = 0;
    for (size_t i = 0; i < size; i++) {
        for (int bit = 7; bit >= 0; bit--) {
            code = code << 1 | ((in[i] >> bit) & 1u);
            if (++bits > 30) return -1;
            if (code - huff_first[bits] >= huff_count[bits]) continue;
            uint16_t sym = huff_sym[huff_index[bits] + code - huff_first[bits]];
            if (sym == 256 || buf_byte(out, (uint8_t)sym) < 0) return -1; /* EOS in a string */
            code = 0;
            bits = 0;
        }
    }
    return bits <= 7 && code == (1u << bits) - 1 ? 0 : -1; /* padding: EOS's first bits */
}

/* ---- the static table (RFC 7541 Appendix A) ---- */

static const char *const static_table[61][2] = {
    {":authority", ""}, {":method", "GET"}, {":method", "POST"},
    {":path", "/"}, {":path", "/index.html"}, {":scheme", "http"},
    {":scheme", "https"}, {":status", "200"}, {":status", "204"},
    {":status", "206"}, {":status", "304"}, {":status", "400"},
    {":status", "404"}, {":status", "500"}, {"accept-charset", ""},
    {"accept-encoding", "gzip, deflate"}, {"accept-language", ""}, {"accept-ranges", ""},
    {"accept", ""}, {"access-control-allow-origin", ""}, {"age", ""},
    {"allow", ""}, {"authorization", ""}, {"cache-control", ""},
    {"content-disposition", ""}, {"content-encoding", ""}, {"content-language", ""},
    {"content-length", ""}, {"content-location", ""}, {"content-range", ""},
    {"content-type", ""}, {"cookie", ""}, {"date", ""},
    {"etag", ""}, {"expect", ""}, {"expires", ""},
    {"from", ""}, {"host", ""}, {"if-match", ""},
    {"if-modified-since", ""}, {"if-none-match", ""}, {"if-range", ""},
    {"if-unmodified-since", ""}, {"last-modified", ""}, {"link", ""},
    {"location", ""}, {"max-forwards", ""}, {"proxy-authenticate", ""},
    {"proxy-authorization", ""}, {"range", ""}, {"referer", ""},
    {"refresh", ""}, {"retry-after", ""}, {"server", ""},
    {"set-cookie", ""}, {"strict-transport-security", ""}, {"transfer-encoding", ""},
    {"user-agent", ""}, {"vary", ""}, {"via", ""},
    {"www-authenticate", ""},
};

/* ---- reading ---- */

typedef struct {
    const uint8_t *at, *end;
} reader;

static int read_int(reader *r, int prefix, uint32_t *value) {
    if (r->at >= r->end) return -1;
    uint32_t max = (1u << prefix) - 1, v = *r->at++ & max;
    if (v < max) {
        *value = v;
        return 0;
    }
    for (int shift = 0; shift <= 21; shift += 7) {
        if (r->at >= r->end) return -1;
        uint8_t byte = *r->at++;
        v += (uint32_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *value = v;
            return 0;
        }
    }
    return -1;
}

/* A string literal, appended to `into` (Huffman-decoded when so marked); *huff: whether it was. */
static int read_string(reader *r, buf *into, int *huff) {
    if (r->at >= r->end) return -1;
    *huff = (*r->at & 0x80) != 0;
    uint32_t len;
    if (read_int(r, 7, &len) < 0 || len > (size_t)(r->end - r->at)) return -1;
    const uint8_t *data = r->at;
    r->at += len;
    return *huff ? huffman(data, len, into) : buf_add(into, data, len);
}

/* Field `index` (1-based, static then dynamic) appended to `into`: its name, and its value
 * too when `with_value`; its name's length in *name_len. */
static int indexed(hpack_table *t, uint32_t index, int with_value, buf *into, size_t *name_len) {
    if (index >= 1 && index <= 61) {
        const char *name = static_table[index - 1][0], *value = static_table[index - 1][1];
        *name_len = strlen(name);
        if (buf_add(into, name, *name_len) < 0) return -1;
        return with_value ? buf_add(into, value, strlen(value)) : 0;
    }
    if (index < 62 || index - 62 >= t->count) return -1;
    hp_field *f = &t->ring[(t->head + index - 62) % t->cap];
    *name_len = f->name_len;
    return buf_add(into, f->bytes, with_value ? f->name_len + f->value_len : f->name_len);
}

/* ---- the dynamic table ---- */

static void evict_to(hpack_table *t, size_t size) {
    while (t->count && t->size > size) {
        hp_field *f = &t->ring[(t->head + t->count - 1) % t->cap];
        t->size -= f->name_len + f->value_len + 32;
        free(f->bytes);
        f->bytes = NULL;
        t->count--;
    }
}

static int resize(hpack_table *t, uint32_t max_size) {
    if (max_size > HPACK_LIMIT) return -1;
    evict_to(t, max_size);
    t->max_size = max_size;
    size_t cap = max_size / 32 + 1;
    if (cap == t->cap) return 0;
    hp_field *ring = calloc(cap, sizeof *ring);
    if (!ring) return -1;
    for (size_t i = 0; i < t->count; i++) ring[i] = t->ring[(t->head + i) % t->cap];
    free(t->ring);
    t->ring = ring;
    t->cap = cap;
    t->head = 0;
    return 0;
}

static int insert(hpack_table *t, const uint8_t *field, size_t name_len, size_t value_len) {
    size_t size = name_len + value_len + 32;
    if (size > t->max_size) { /* RFC 7541 §4.4: an entry too large empties the table */
        evict_to(t, 0);
        return 0;
    }
    evict_to(t, t->max_size - size);
    uint8_t *bytes = malloc(name_len + value_len + 1);
    if (!bytes) return -1;
    memcpy(bytes, field, name_len + value_len);
    t->head = (t->head + t->cap - 1) % t->cap;
    t->ring[t->head] = (hp_field){bytes, (uint32_t)name_len, (uint32_t)value_len};
    t->count++;
    t->size += size;
    return 0;
}

void hpack_free(hpack_table *t) {
    evict_to(t, 0);
    free(t->ring);
    t->ring = NULL;
    t->cap = t->count = t->size = 0;
}

/* ---- writing: a literal field without indexing, new name (RFC 7541 §6.2.2) ---- */

static int write_int(buf *out, uint8_t first, int prefix, size_t value) {
    size_t max = ((size_t)1 << prefix) - 1;
    if (value < max) return buf_byte(out, (uint8_t)(first | value));
    if (buf_byte(out, (uint8_t)(first | max)) < 0) return -1;
    for (value -= max; value >= 128; value >>= 7)
        if (buf_byte(out, (uint8_t)(value % 128 + 128)) < 0) return -1;
    return buf_byte(out, (uint8_t)value);
}

/* A string literal, Huffman-coded as the client coded it (`huff` 1 or 0; -1: not known, so
 * where that is shorter): gRPC's bounds and their messages count a string's coded bytes. */
static int write_string(buf *out, const uint8_t *data, size_t size, int huff) {
    size_t bits = 0;
    for (size_t i = 0; i < size; i++) bits += huff_len[data[i]];
    if (huff == 0 || (huff < 0 && bits / 8 + 1 >= size))
        return write_int(out, 0, 7, size) < 0 ? -1 : buf_add(out, data, size);
    if (write_int(out, 0x80, 7, (bits + 7) / 8) < 0) return -1;
    uint64_t acc = 0;
    int held = 0;
    for (size_t i = 0; i < size; i++) {
        acc = acc << huff_len[data[i]] | huff_code[data[i]];
        for (held += huff_len[data[i]]; held >= 8; held -= 8)
            if (buf_byte(out, (uint8_t)(acc >> (held - 8))) < 0) return -1;
    }
    if (held) return buf_byte(out, (uint8_t)(acc << (8 - held) | ((1u << (8 - held)) - 1)));
    return 0;
}

/* A field read: name then value in `bytes`, and how each was coded (-1: from a table). */
typedef struct {
    buf bytes;
    size_t name_len;
    int name_huff, value_huff;
} field_read;

static int write_field(buf *out, const field_read *f) {
    size_t value_len = f->bytes.len - f->name_len;
    if (buf_byte(out, 0) < 0 || write_string(out, f->bytes.data, f->name_len, f->name_huff) < 0)
        return -1;
    return write_string(out, f->bytes.data + f->name_len, value_len, f->value_huff);
}

/* ---- one field ---- */

/* The representation's kinds, by their first bits (RFC 7541 §6). */
enum rep { R_INDEXED, R_INCREMENTAL, R_SIZE, R_LITERAL };

static enum rep rep_of(uint8_t first) {
    if (first & 0x80) return R_INDEXED;
    if (first & 0x40) return R_INCREMENTAL;
    if (first & 0x20) return R_SIZE;
    return R_LITERAL; /* without indexing, or never indexed */
}

/* Read one field into `f`. */
static int read_field(hpack_table *t, reader *r, enum rep rep, field_read *f) {
    uint32_t index;
    f->name_huff = f->value_huff = -1;
    if (rep == R_INDEXED)
        return read_int(r, 7, &index) < 0 ? -1 : indexed(t, index, 1, &f->bytes, &f->name_len);
    if (read_int(r, rep == R_INCREMENTAL ? 6 : 4, &index) < 0) return -1;
    if (index) {
        if (indexed(t, index, 0, &f->bytes, &f->name_len) < 0) return -1;
    } else {
        if (read_string(r, &f->bytes, &f->name_huff) < 0) return -1;
        f->name_len = f->bytes.len;
    }
    return read_string(r, &f->bytes, &f->value_huff);
}

static void note_path(block_facts *facts, const uint8_t *field, size_t name_len, size_t value_len) {
    if (name_len != 5 || memcmp(field, ":path", 5) != 0) return;
    facts->path_len = value_len <= PATH_LIMIT ? value_len : 0;
    memcpy(facts->path, field + 5, facts->path_len);
}

int hpack_recode(hpack_table *t, const uint8_t *in, size_t size, buf *out, size_t limit,
                 block_facts *facts) {
    reader r = {in, in + size};
    field_read f = {0};
    int rc = 0;
    if (!t->ring && resize(t, HPACK_DEFAULT) < 0) return -1;
    facts->path_len = 0;
    while (rc == 0 && r.at < r.end) {
        enum rep rep = rep_of(*r.at);
        if (rep == R_SIZE) {
            uint32_t max_size;
            rc = read_int(&r, 5, &max_size) < 0 ? -1 : resize(t, max_size);
            continue;
        }
        f.bytes.len = 0;
        rc = read_field(t, &r, rep, &f);
        if (rc < 0) break;
        size_t value_len = f.bytes.len - f.name_len;
        note_path(facts, f.bytes.data, f.name_len, value_len);
        rc = write_field(out, &f);
        if (rc == 0 && out->len > limit) rc = -1;
        if (rc == 0 && rep == R_INCREMENTAL) rc = insert(t, f.bytes.data, f.name_len, value_len);
    }
    buf_free(&f.bytes);
    return rc;
}
