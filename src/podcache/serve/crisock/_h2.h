/* Shared by the relay's C files: growable byte buffers, the client's HPACK state (_hpack.c) and
 * the status answers the relay gives itself (_answers.c). No Python here but in _relay.c. */
#ifndef PODCACHE_RELAY_H2_H
#define PODCACHE_RELAY_H2_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t *data;
    size_t len, cap;
} buf;

int buf_add(buf *b, const void *data, size_t size); /* 0, or -1 out of memory */
int buf_byte(buf *b, uint8_t byte);
void buf_free(buf *b);

/* ---- HTTP/2 frames (RFC 9113 §6) ---- */

#define F_DATA 0x0
#define F_HEADERS 0x1
#define END_STREAM 0x1
#define END_HEADERS 0x4
#define MAX_FRAME 16384 /* the frames the relay writes: every peer takes this size (§4.2) */

/* ---- HPACK (RFC 7541), the client's encoder as seen by its peer ---- */

#define HPACK_DEFAULT 4096 /* a dynamic table's size before any update (RFC 9113 §6.5.2) */
#define HPACK_LIMIT 65536  /* the largest size update a client may send (past it: an error) */
#define PATH_LIMIT 256     /* a :path longer than this is not a status call's */

typedef struct {
    uint8_t *bytes; /* the name, then the value */
    uint32_t name_len, value_len;
} hp_field;

typedef struct {
    hp_field *ring; /* entry i (0 the newest) at (head + i) % cap */
    size_t cap, head, count;
    size_t size, max_size; /* RFC 7541 §4.1: the sum of name + value + 32 per entry */
} hpack_table;

typedef struct {
    char path[PATH_LIMIT];
    size_t path_len; /* 0: no :path, or longer than PATH_LIMIT */
} block_facts;

void hpack_init(void);
/* Decode one whole header block with `t` and append each field to `out` as a literal never
 * using a dynamic table (RFC 7541 §6.2.2), so that its reader keeps no table in step with
 * `t`; `facts` gets the :path. 0, or -1 on a malformed block or `out` past `limit`. */
int hpack_recode(hpack_table *t, const uint8_t *in, size_t size, buf *out, size_t limit,
                 block_facts *facts);
void hpack_free(hpack_table *t);

/* ---- the status answers kept in C (_answers.c) ---- */

#define ANSWER_METHODS 2 /* 0 ContainerStatus, 1 PodSandboxStatus */
#define ANSWER_BUCKETS 14 /* calls.DURATION_BUCKETS and one past the last */
extern const double answer_bounds[ANSWER_BUCKETS - 1]; /* calls.DURATION_BUCKETS (a test holds
                                                        * them equal: DURATION_BOUNDS) */

typedef struct answer answer;

typedef struct {
    answer **slots;
    size_t n_slots, count, bytes;
    uint64_t answered[ANSWER_METHODS];
    double seconds[ANSWER_METHODS];
    uint64_t buckets[ANSWER_METHODS][ANSWER_BUCKETS];
} answers;

#define ANSWERS_MAX 16384               /* answers kept at most */
#define ANSWERS_MAX_BYTES (32u << 20)   /* their bytes (IDs and answers) at most */
#define ANSWER_MAX_BYTES (64u << 10)    /* one answer's message at most */

int answers_init(answers *a);
void answers_free(answers *a);
/* 1 kept, 0 not (past a bound, or too large), -1 out of memory. */
int answers_put(answers *a, int method, const uint8_t *ident, size_t ident_len, int verbose,
                const uint8_t *message, size_t size, double fresh_until, double now);
void answers_drop(answers *a, const uint8_t *ident, size_t ident_len);
void answers_clear(answers *a);
/* The message kept for the key while fresh at `now`, else NULL. */
const uint8_t *answers_get(answers *a, int method, const uint8_t *ident, size_t ident_len,
                           int verbose, double now, size_t *size);
void answers_count(answers *a, int method, double seconds);

/* The status method of a :path (0 or 1), else -1. */
int status_method(const char *path, size_t len);
/* A status request's gRPC message (its 5-byte prefix included): its ID and verbose flag; 0, or
 * -1 for anything but an uncompressed message of exactly fields 1 (ID) and 2 (verbose). */
int status_request(const uint8_t *data, size_t size, const uint8_t **ident, size_t *ident_len,
                   int *verbose);
/* Append a frame header to `out`. */
int frame_head(buf *out, size_t len, uint8_t type, uint8_t flags, uint32_t stream);
/* Append to `out` the frames of an OK answer of `message` on `stream` (HEADERS, DATA of at
 * most 16,384 bytes each, trailers ending the stream); the DATA bytes counted by flow control
 * in *flow. 0, or -1 out of memory. */
int answer_frames(buf *out, uint32_t stream, const uint8_t *message, size_t size, size_t *flow);

#endif
