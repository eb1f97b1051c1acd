/* The status answers the relay gives itself, and the bytes of their calls (_h2.h).
 *
 * Invariants:
 * - an answer is kept under its key (method, ID as asked, verbose), at most one per key, in a
 *   chained hash table of a fixed number of slots;
 * - `count` and `bytes` are the kept answers' and their IDs' and messages' sizes, never past
 *   ANSWERS_MAX and ANSWERS_MAX_BYTES: a put past them first drops the expired (O(slots)), then
 *   is refused;
 * - an answer is given only while `now` <= its fresh_until.
 */
#include <stdlib.h>
#include <string.h>

#include "_h2.h"

#define SLOTS 32768 /* a power of two, twice ANSWERS_MAX */

struct answer {
    answer *next;
    double fresh_until;
    uint32_t ident_len, size;
    uint8_t method, verbose;
    uint8_t bytes[]; /* the ID, then the message */
};

const double answer_bounds[ANSWER_BUCKETS - 1] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                  0.1,    0.25,  0.5,    1.0,   2.5,  5.0};

int answers_init(answers *a) {
    memset(a, 0, sizeof *a);
    a->slots = calloc(SLOTS, sizeof *a->slots);
    a->n_slots = SLOTS;
    return a->slots ? 0 : -1;
}

static size_t slot_of(int method, const uint8_t *ident, size_t len, int verbose) {
    uint64_t hash = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) hash = (hash ^ ident[i]) * 1099511628211ull;
    hash = (hash ^ (uint64_t)(method * 2 + verbose)) * 1099511628211ull;
    return (size_t)(hash & (SLOTS - 1));
}

static size_t cost(const answer *e) { return e->ident_len + e->size; }

static void unlink_at(answers *a, answer **at) {
    answer *gone = *at;
    *at = gone->next;
    a->count--;
    a->bytes -= cost(gone);
    free(gone);
}

static answer **find(answers *a, int method, const uint8_t *ident, size_t len, int verbose) {
    answer **at = &a->slots[slot_of(method, ident, len, verbose)];
    for (; *at; at = &(*at)->next) {
        answer *e = *at;
        if (e->method == method && e->verbose == verbose && e->ident_len == len &&
            memcmp(e->bytes, ident, len) == 0)
            return at;
    }
    return at;
}

static void drop_expired(answers *a, double now) {
    for (size_t i = 0; i < a->n_slots; i++) {
        answer **at = &a->slots[i];
        while (*at)
            if ((*at)->fresh_until < now) unlink_at(a, at);
            else at = &(*at)->next;
    }
}

int answers_put(answers *a, int method, const uint8_t *ident, size_t ident_len, int verbose,
                const uint8_t *message, size_t size, double fresh_until, double now) {
    answer **at = find(a, method, ident, ident_len, verbose);
    if (*at) unlink_at(a, at);
    if (size > ANSWER_MAX_BYTES || ident_len > PATH_LIMIT || fresh_until < now) return 0;
    if (a->count + 1 > ANSWERS_MAX || a->bytes + ident_len + size > ANSWERS_MAX_BYTES) {
        drop_expired(a, now);
        if (a->count + 1 > ANSWERS_MAX || a->bytes + ident_len + size > ANSWERS_MAX_BYTES) return 0;
        at = find(a, method, ident, ident_len, verbose);
    }
    answer *e = malloc(sizeof *e + ident_len + size);
    if (!e) return -1;
    e->fresh_until = fresh_until;
    e->ident_len = (uint32_t)ident_len;
    e->size = (uint32_t)size;
    e->method = (uint8_t)method;
    e->verbose = (uint8_t)(verbose != 0);
    memcpy(e->bytes, ident, ident_len);
    if (size) memcpy(e->bytes + ident_len, message, size);
    e->next = NULL;
    *at = e;
    a->count++;
    a->bytes += cost(e);
    return 1;
}

void answers_drop(answers *a, const uint8_t *ident, size_t ident_len) {
    for (int method = 0; method < ANSWER_METHODS; method++)
        for (int verbose = 0; verbose < 2; verbose++) {
            answer **at = find(a, method, ident, ident_len, verbose);
            if (*at) unlink_at(a, at);
        }
}

void answers_clear(answers *a) {
    for (size_t i = 0; i < a->n_slots && a->count; i++)
        while (a->slots[i]) unlink_at(a, &a->slots[i]);
}

void answers_free(answers *a) {
    if (!a->slots) return;
    answers_clear(a);
    free(a->slots);
    a->slots = NULL;
}

const uint8_t *answers_get(answers *a, int method, const uint8_t *ident, size_t ident_len,
                           int verbose, double now, size_t *size) {
    if (!a->count) return NULL;
    answer *e = *find(a, method, ident, ident_len, verbose != 0);
    if (!e || now > e->fresh_until) return NULL;
    *size = e->size;
    return e->bytes + e->ident_len;
}

void answers_count(answers *a, int method, double seconds) {
    int bucket = 0;
    while (bucket < ANSWER_BUCKETS - 1 && seconds > answer_bounds[bucket]) bucket++;
    a->answered[method]++;
    a->seconds[method] += seconds;
    a->buckets[method][bucket]++;
}

/* ---- the calls' bytes ---- */

int status_method(const char *path, size_t len) {
    static const char prefix[] = "/runtime.v1.RuntimeService/";
    size_t plen = sizeof prefix - 1;
    if (len <= plen || memcmp(path, prefix, plen) != 0) return -1;
    path += plen;
    len -= plen;
    if (len == 15 && memcmp(path, "ContainerStatus", 15) == 0) return 0;
    if (len == 16 && memcmp(path, "PodSandboxStatus", 16) == 0) return 1;
    return -1;
}

static int varint(const uint8_t **at, const uint8_t *end, uint64_t *value) {
    *value = 0;
    for (int shift = 0; shift < 64 && *at < end; shift += 7) {
        uint8_t byte = *(*at)++;
        *value |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) return 0;
    }
    return -1;
}

int status_request(const uint8_t *data, size_t size, const uint8_t **ident, size_t *ident_len,
                   int *verbose) {
    if (size < 5 || data[0] != 0) return -1; /* compressed, or no prefix */
    uint32_t len = (uint32_t)data[1] << 24 | (uint32_t)data[2] << 16 | (uint32_t)data[3] << 8 | data[4];
    if (len != size - 5) return -1;
    const uint8_t *at = data + 5, *end = data + size;
    *ident = at;
    *ident_len = 0;
    *verbose = 0;
    while (at < end) { /* the last of a field repeated counts, as protobuf reads it */
        uint64_t tag, value;
        if (varint(&at, end, &tag) < 0) return -1;
        if (varint(&at, end, &value) < 0) return -1;
        if (tag == 0x10) {
            *verbose = value != 0;
        } else if (tag == 0x0a && value <= (uint64_t)(end - at)) {
            *ident = at;
            *ident_len = (size_t)value;
            at += value;
        } else {
            return -1;
        }
    }
    return 0;
}

int frame_head(buf *out, size_t len, uint8_t type, uint8_t flags, uint32_t stream) {
    uint8_t head[9] = {(uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len, type, flags,
                       (uint8_t)(stream >> 24), (uint8_t)(stream >> 16), (uint8_t)(stream >> 8),
                       (uint8_t)stream};
    return buf_add(out, head, sizeof head);
}

int answer_frames(buf *out, uint32_t stream, const uint8_t *message, size_t size, size_t *flow) {
    /* :status 200 (static 8); content-type (static 31) application/grpc, not indexed */
    static const uint8_t headers[] = "\x88\x0f\x10\x10" "application/grpc";
    static const uint8_t trailers[] = "\x00\x0bgrpc-status\x01" "0";
    uint8_t prefix[5] = {0, (uint8_t)(size >> 24), (uint8_t)(size >> 16), (uint8_t)(size >> 8),
                         (uint8_t)size};
    if (frame_head(out, sizeof headers - 1, F_HEADERS, END_HEADERS, stream) < 0 ||
        buf_add(out, headers, sizeof headers - 1) < 0)
        return -1;
    size_t total = size + 5, first = total < MAX_FRAME ? total : MAX_FRAME;
    if (frame_head(out, first, F_DATA, 0, stream) < 0 || buf_add(out, prefix, 5) < 0 ||
        buf_add(out, message, first - 5) < 0)
        return -1;
    for (size_t at = first - 5; at < size;) {
        size_t part = size - at < MAX_FRAME ? size - at : MAX_FRAME;
        if (frame_head(out, part, F_DATA, 0, stream) < 0 || buf_add(out, message + at, part) < 0)
            return -1;
        at += part;
    }
    *flow = total;
    if (frame_head(out, sizeof trailers - 1, F_HEADERS, END_HEADERS | END_STREAM, stream) < 0)
        return -1;
    return buf_add(out, trailers, sizeof trailers - 1);
}
