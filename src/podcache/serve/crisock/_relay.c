/* podcache.serve.crisock._relay: the CRI socket's relay (relay.py states its rules), one epoll
 * loop on a thread of its own that never holds the GIL (docs/architecture.md §10 rule 1).
 *
 * Invariants:
 * - every piece of relay state is read and written under `lock`; the relay's thread holds it
 *   except while it waits in epoll_wait; Python's calls take it with the GIL released;
 * - a connection is in the `conns` list (arrival order) from its accept until it is closed;
 *   a closed connection's memory is freed only after the epoll batch that may still name it;
 * - the connections not yet judged for rule 2 are a suffix of `conns` (their deadlines grow
 *   with their arrival), starting at `unjudged`;
 * - a side's `out` holds what its peer read and this side's socket did not take yet; past
 *   CHUNK the peer is not read, and it is read again once `out` is at most CHUNK / 4;
 * - a connection's open calls are its streams opened and not ended, an ascending array (a
 *   stream opens only above the last one opened), ended ones marked and compacted in bulk.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "_h2.h"

#define CHUNK (32 * 1024)
#define PREFACE 24 /* the client's connection preface (RFC 9113 §3.4) */
#define HEAD 9     /* a frame's header */
#define F_PRIORITY 0x2
#define F_RST_STREAM 0x3
#define F_SETTINGS 0x4
#define F_PING 0x6
#define F_WINDOW_UPDATE 0x8
#define F_CONTINUATION 0x9
#define ACK 0x1
#define PADDED 0x8
#define PRIORITY 0x20
#define BLOCK_LIMIT (256 * 1024) /* a client's frame read whole (not DATA), a header block as sent
                                  * and as written again, at most: past it, the connection is
                                  * closed (gRPC refuses metadata past 64 KiB: a call's error) */
#define HELD_LIMIT 4096    /* a held call's request bytes at most: past them, it goes to gRPC */
#define PENDING_LIMIT (2 * (CHUNK + ANSWER_MAX_BYTES)) /* the relay's own bytes for a client */
#define ENDED 0x80000000u /* a stream's mark in `streams`: ended (stream IDs are 31 bits) */
#define MAX_LISTENERS 64
#define ACCEPT_RETRY 1.0 /* seconds a listener rests after running out of descriptors */
#define BATCH 128        /* epoll events handled per wake */

enum kind { K_WAKE, K_LISTENER, K_SIDE };

struct conn;

typedef struct side {
    enum kind kind; /* K_SIDE: first, so an epoll pointer names its kind */
    int fd;
    int is_client;
    struct side *peer;
    struct conn *conn;
    uint32_t skip; /* the client's preface bytes still to pass */
    uint8_t head[HEAD];
    int head_len;
    uint32_t remaining; /* the current frame's payload bytes still to come */
    int gathering;      /* its payload is read whole (else passed on as it comes, or dropped) */
    int dropping;
    buf gather;
    uint8_t *out; /* bytes the peer read, not yet taken by this side's socket */
    size_t out_len, out_cap;
    uint32_t events; /* what epoll watches on fd now */
    int paused;      /* not read: the peer's `out` is past CHUNK, or gRPC's side not connected */
} side;

/* What the relay knows of a connection's HTTP/2 to answer status calls itself (rule 8). */
typedef struct {
    hpack_table table;  /* the client's encoder's (gRPC gets literals: _hpack.c) */
    buf block;          /* a header block's fragments till END_HEADERS */
    uint32_t block_stream, block_frame; /* its stream; its largest frame (gRPC took it) */
    uint8_t block_flags;
    int in_block;
    uint32_t held; /* a status call's stream, read till its END_STREAM before gRPC sees it */
    int held_method;
    buf held_frames; /* its frames as they would go to gRPC */
    buf held_body;   /* its DATA payloads, padding removed */
    size_t held_flow;
    uint32_t sent_last;     /* the highest stream gRPC was sent */
    uint32_t answered_last; /* the highest stream answered here (0: none yet) */
    int64_t window;         /* the client's connection window: its credit less what it was sent */
    uint32_t stream_window; /* the client's SETTINGS_INITIAL_WINDOW_SIZE */
    uint64_t owed;          /* answers' DATA bytes the client's credit has not given back yet */
    int server_in_block;    /* gRPC is between a HEADERS and its last CONTINUATION */
    buf pending;            /* bytes for the client, waiting for a frame boundary of gRPC's */
    buf backlog; /* gRPC's bytes from a DATA frame past the client's window on: not yet read */
} h2state;

typedef struct conn {
    side client, server;
    h2state h2;
    uint32_t *streams; /* open calls, ascending; ENDED marks one that ended */
    size_t n_streams, cap_streams, open;
    uint32_t last_stream;
    uint64_t completed;
    double accepted, idle_since;
    int closed, connecting;
    struct conn *prev, *next;  /* `conns`, in arrival order */
    struct conn *next_dead;    /* closed, freed after the batch */
} conn;

typedef struct {
    enum kind kind; /* K_LISTENER */
    int fd;
    int watched;
    double rest_until;
} listener;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t lock;
    pthread_t thread;
    int started, stopping, joined;
    int epfd, wakefd;
    enum kind wake_kind; /* the eventfd's epoll pointer */
    struct sockaddr_un target;
    socklen_t target_len;
    long max_conns, fair_calls;
    double handshake;
    conn *head, *tail, *unjudged, *dead;
    long n_conns, calls;
    long evicted, refused, unused, busiest;
    listener listeners[MAX_LISTENERS];
    int n_listeners;
    uint8_t buffer[CHUNK]; /* every read lands here and is written or copied out at once */
    buf to_peer;           /* what one read gives the peer, built then written or kept */
    buf recoded;           /* a header block written again */
    answers answers;       /* the status answers the relay gives itself (rule 8) */
} Core;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* ---- epoll interest ---- */

static void watch(Core *r, side *s) {
    uint32_t want = 0;
    if (!s->paused) want |= EPOLLIN;
    if (s->out_len) want |= EPOLLOUT;
    if (want == s->events) return;
    struct epoll_event ev = {.events = want, .data.ptr = s};
    epoll_ctl(r->epfd, EPOLL_CTL_MOD, s->fd, &ev);
    s->events = want;
}

/* ---- calls (rules 1 and 3 count them) ---- */

static void count_calls(Core *r, conn *c, long change);

static void stream_opened(Core *r, conn *c, uint32_t stream) {
    if (c->n_streams == c->cap_streams) {
        size_t cap = c->cap_streams ? c->cap_streams * 2 : 8;
        uint32_t *grown = realloc(c->streams, cap * sizeof *grown);
        if (!grown) return; /* out of memory: the call is not counted */
        c->streams = grown;
        c->cap_streams = cap;
    }
    c->streams[c->n_streams++] = stream;
    c->open++;
    count_calls(r, c, 1);
}

static void compact_streams(conn *c) {
    size_t kept = 0;
    for (size_t i = 0; i < c->n_streams; i++)
        if (!(c->streams[i] & ENDED)) c->streams[kept++] = c->streams[i];
    c->n_streams = kept;
}

static void stream_ended(Core *r, conn *c, uint32_t stream, int completed) {
    size_t lo = 0, hi = c->n_streams;
    while (lo < hi) { /* binary search: the array ascends, marks aside */
        size_t mid = (lo + hi) / 2;
        if ((c->streams[mid] & ~ENDED) < stream) lo = mid + 1;
        else hi = mid;
    }
    if (lo == c->n_streams || c->streams[lo] != stream) return; /* not open */
    c->streams[lo] |= ENDED;
    c->open--;
    c->completed += (uint64_t)completed;
    if (c->open == 0) c->idle_since = now();
    if (c->n_streams > 2 * c->open + 16) compact_streams(c);
    count_calls(r, c, -1);
}

/* ---- a frame header read (rule 5) ---- */

static void parse_head(const uint8_t *h, uint32_t *len, uint8_t *type, uint8_t *flags,
                       uint32_t *stream) {
    *len = (uint32_t)h[0] << 16 | (uint32_t)h[1] << 8 | h[2];
    *type = h[3];
    *flags = h[4];
    *stream = ((uint32_t)h[5] << 24 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 8 | h[8]) &
              0x7FFFFFFFu;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The calls a frame opens or ends (rules 1 and 3). */
static void frame(Core *r, side *s, const uint8_t *h) {
    conn *c = s->conn;
    uint32_t len, stream;
    uint8_t type, flags;
    parse_head(h, &len, &type, &flags, &stream);
    if (c->closed) return;
    if (s->is_client) {
        if (type == F_HEADERS && stream > c->last_stream) {
            c->last_stream = stream;
            stream_opened(r, c, stream);
        } else if (type == F_RST_STREAM) {
            stream_ended(r, c, stream, 0);
        }
    } else if ((type == F_HEADERS || type == F_DATA) && (flags & END_STREAM)) {
        stream_ended(r, c, stream, 1);
    } else if (type == F_RST_STREAM) {
        stream_ended(r, c, stream, 0);
    }
}

/* ---- the client's frames as gRPC gets them (rule 8) ---- */

static int window_frame(buf *out, uint32_t stream, size_t increment) {
    uint8_t payload[4] = {(uint8_t)(increment >> 24), (uint8_t)(increment >> 16),
                          (uint8_t)(increment >> 8), (uint8_t)increment};
    if (frame_head(out, 4, F_WINDOW_UPDATE, 0, stream) < 0) return -1;
    return buf_add(out, payload, 4);
}

/* A header block as HEADERS and CONTINUATION frames of at most `most` bytes. */
static int header_frames(buf *out, uint32_t stream, uint8_t flags, const uint8_t *block,
                         size_t size, size_t most) {
    size_t part = size < most ? size : most;
    uint8_t first = (uint8_t)((flags & END_STREAM) | (part == size ? END_HEADERS : 0));
    if (frame_head(out, part, F_HEADERS, first, stream) < 0 || buf_add(out, block, part) < 0)
        return -1;
    for (size_t at = part; at < size; at += part) {
        part = size - at < most ? size - at : most;
        uint8_t last = at + part == size ? END_HEADERS : 0;
        if (frame_head(out, part, F_CONTINUATION, last, stream) < 0 ||
            buf_add(out, block + at, part) < 0)
            return -1;
    }
    return 0;
}

/* Whether `stream` may be one gRPC never saw because it was held or answered here: its frames
 * are not gRPC's (any other stream's are, whatever gRPC makes of them). */
static int not_grpcs(const h2state *h, uint32_t stream) {
    return stream && (stream == h->held || (stream > h->sent_last && stream <= h->answered_last));
}

static void forget_held(h2state *h) {
    h->held = 0;
    h->held_frames.len = h->held_body.len = h->held_flow = 0;
}

/* The held call goes to gRPC as it came. */
static int flush_held(h2state *h, buf *out) {
    if (!h->held) return 0;
    if (buf_add(out, h->held_frames.data, h->held_frames.len) < 0) return -1;
    h->sent_last = h->held;
    forget_held(h);
    return 0;
}

/* Whether an answer of `flow` DATA bytes may go to the client now: its windows take it, it
 * reads what it was sent (at most CHUNK waits for it, then this answer), and no gRPC bytes
 * wait for its credit. */
static int room_for(conn *c, size_t flow) {
    h2state *h = &c->h2;
    return h->window >= (int64_t)flow && h->stream_window >= flow && !h->backlog.len &&
           c->client.out_len + h->pending.len <= CHUNK;
}

/* The held call's request is whole: answered here when kept and fresh, else sent to gRPC. */
static int resolve_held(Core *r, conn *c, buf *out) {
    h2state *h = &c->h2;
    double began = now();
    const uint8_t *ident, *message = NULL;
    size_t ident_len, size = 0, flow;
    int verbose;
    if (status_request(h->held_body.data, h->held_body.len, &ident, &ident_len, &verbose) == 0)
        message = answers_get(&r->answers, h->held_method, ident, ident_len, verbose, began, &size);
    if (!message || !room_for(c, size + 5)) return flush_held(h, out);
    if (h->held_flow && window_frame(&h->pending, 0, h->held_flow) < 0) return -1;
    if (answer_frames(&h->pending, h->held, message, size, &flow) < 0) return -1;
    h->window -= (int64_t)flow;
    h->owed += flow;
    stream_ended(r, c, h->held, 1);
    h->answered_last = h->held;
    answers_count(&r->answers, h->held_method, now() - began);
    forget_held(h);
    return 0;
}

/* A whole header block: written again for gRPC, or held when it opens a status call. */
static int block_done(Core *r, conn *c, buf *out) {
    h2state *h = &c->h2;
    block_facts facts;
    r->recoded.len = 0;
    if (hpack_recode(&h->table, h->block.data, h->block.len, &r->recoded, BLOCK_LIMIT, &facts) < 0)
        return -1; /* the client's COMPRESSION_ERROR: the connection ends */
    h->block.len = 0;
    uint32_t stream = h->block_stream;
    if (stream != h->held && not_grpcs(h, stream)) return -1; /* a stream that ended here */
    if (flush_held(h, out) < 0) return -1; /* gRPC sees the streams in their order */
    int method = status_method(facts.path, facts.path_len);
    size_t most = h->block_frame > MAX_FRAME ? h->block_frame : MAX_FRAME; /* one frame when
                                                                             * it came in one */
    if (method >= 0 && stream > h->sent_last && r->answers.count && !(h->block_flags & END_STREAM)) {
        h->held = stream;
        h->held_method = method;
        return header_frames(&h->held_frames, stream, h->block_flags, r->recoded.data,
                             r->recoded.len, most);
    }
    if (stream > h->sent_last) h->sent_last = stream;
    return header_frames(out, stream, h->block_flags, r->recoded.data, r->recoded.len, most);
}

/* A payload less its padding (and a HEADERS frame's priority); -1 when malformed. */
static int unpad(uint8_t flags, int priority, const uint8_t **p, size_t *n) {
    size_t pad = 0;
    if (flags & PADDED) {
        if (!*n) return -1;
        pad = (*p)[0];
        (*p)++;
        (*n)--;
    }
    if (priority && (flags & PRIORITY)) {
        if (*n < 5) return -1;
        *p += 5;
        *n -= 5;
    }
    if (pad > *n) return -1;
    *n -= pad;
    return 0;
}

static int headers_frame(Core *r, conn *c, buf *out, const uint8_t *p, size_t n) {
    h2state *h = &c->h2;
    uint32_t len, stream;
    uint8_t type, flags;
    parse_head(c->client.head, &len, &type, &flags, &stream);
    if (unpad(flags, 1, &p, &n) < 0) return -1;
    h->block.len = 0;
    h->block_stream = stream;
    h->block_frame = len;
    h->block_flags = flags;
    if (buf_add(&h->block, p, n) < 0) return -1;
    if (!(flags & END_HEADERS)) {
        h->in_block = 1;
        return 0;
    }
    return block_done(r, c, out);
}

static int continuation_frame(Core *r, conn *c, buf *out, const uint8_t *p, size_t n) {
    h2state *h = &c->h2;
    if (buf_add(&h->block, p, n) < 0 || h->block.len > BLOCK_LIMIT) return -1;
    if (n > h->block_frame) h->block_frame = (uint32_t)n;
    if (!(c->client.head[4] & END_HEADERS)) return 0;
    h->in_block = 0;
    return block_done(r, c, out);
}

static int held_data(Core *r, conn *c, buf *out, const uint8_t *p, size_t n) {
    h2state *h = &c->h2;
    uint8_t flags = c->client.head[4];
    size_t flow = n;
    if (buf_add(&h->held_frames, c->client.head, HEAD) < 0 ||
        buf_add(&h->held_frames, p, n) < 0 || unpad(flags, 0, &p, &n) < 0 ||
        buf_add(&h->held_body, p, n) < 0)
        return -1;
    h->held_flow += flow;
    return flags & END_STREAM ? resolve_held(r, c, out) : 0;
}

/* The client's credit: its connection window grows; what gave back answers' bytes is not
 * gRPC's (gRPC's view of the window stays at most `owed` above the client's). */
static int window_update(conn *c, buf *out, uint32_t stream, const uint8_t *p, size_t n) {
    h2state *h = &c->h2;
    if (n == 4 && stream == 0) {
        uint32_t increment = be32(p) & 0x7FFFFFFFu;
        uint32_t given_back = h->owed < increment ? (uint32_t)h->owed : increment;
        h->window += increment;
        h->owed -= given_back;
        if (given_back) return increment > given_back ? window_frame(out, 0, increment - given_back) : 0;
    } else if (not_grpcs(h, stream)) {
        return 0;
    }
    return buf_add(out, c->client.head, HEAD) < 0 ? -1 : buf_add(out, p, n);
}

static void settings(h2state *h, uint8_t flags, const uint8_t *p, size_t n) {
    if (flags & ACK) return;
    for (size_t i = 0; i + 6 <= n; i += 6)
        if (((uint32_t)p[i] << 8 | p[i + 1]) == 0x4) h->stream_window = be32(p + i + 2);
}

/* A client's frame read whole: what gRPC gets of it. */
static int client_frame_done(Core *r, conn *c, buf *out) {
    h2state *h = &c->h2;
    const uint8_t *p = c->client.gather.data;
    size_t n = c->client.gather.len;
    uint32_t len, stream;
    uint8_t type, flags;
    parse_head(c->client.head, &len, &type, &flags, &stream);
    switch (type) {
    case F_DATA: return held_data(r, c, out, p, n);
    case F_HEADERS: return headers_frame(r, c, out, p, n);
    case F_CONTINUATION: return continuation_frame(r, c, out, p, n);
    case F_WINDOW_UPDATE: return window_update(c, out, stream, p, n);
    case F_SETTINGS: settings(h, flags, p, n); break;
    case F_PING: /* answered here once calls were: gRPC would count the client's pings after
                  * answers it did not send (BDP probes) as abuse, and end the connection */
        if (n == 8 && !(flags & ACK) && h->answered_last)
            return frame_head(&h->pending, 8, F_PING, ACK, 0) < 0 ? -1 : buf_add(&h->pending, p, 8);
        break;
    case F_RST_STREAM:
        if (stream && stream == h->held) { /* cancelled before gRPC saw it: its credit back */
            int rc = h->held_flow ? window_frame(&h->pending, 0, h->held_flow) : 0;
            forget_held(h);
            return rc;
        }
        /* fall through */
    case F_PRIORITY:
        if (not_grpcs(h, stream)) return 0;
        break;
    }
    return buf_add(out, c->client.head, HEAD) < 0 ? -1 : buf_add(out, p, n);
}

/* A client's frame header: its payload passed on, read whole, or dropped. */
static int client_frame_begin(Core *r, conn *c, buf *out) {
    side *s = &c->client;
    h2state *h = &c->h2;
    uint32_t len, stream;
    uint8_t type, flags;
    parse_head(s->head, &len, &type, &flags, &stream);
    frame(r, s, s->head);
    if (c->closed) return 0;
    if (h->in_block != (type == F_CONTINUATION) || (h->in_block && stream != h->block_stream))
        return -1; /* a header block is its frames in a row (RFC 9113 §6.10) */
    s->remaining = len;
    s->gathering = s->dropping = 0;
    s->gather.len = 0;
    switch (type) {
    case F_DATA:
        if (stream && stream == h->held) {
            if (h->held_flow + len <= HELD_LIMIT) return s->gathering = 1, 0;
            if (flush_held(h, out) < 0) return -1;
        } else if (not_grpcs(h, stream)) { /* gRPC never saw the stream: the credit is ours */
            s->dropping = 1;
            return len ? window_frame(&h->pending, 0, len) : 0;
        }
        break;
    case F_HEADERS: case F_CONTINUATION: case F_PRIORITY: case F_RST_STREAM: case F_SETTINGS:
    case F_PING: case F_WINDOW_UPDATE:
        if (len > BLOCK_LIMIT) return -1;
        return s->gathering = 1, 0;
    }
    return buf_add(out, s->head, HEAD);
}

/* Whether the frame header in `s->head` is whole after taking what it needs of `data`. */
static size_t take_head(side *s, const uint8_t *data, size_t size, int *whole) {
    size_t need = HEAD - (size_t)s->head_len, step = size < need ? size : need;
    memcpy(s->head + s->head_len, data, step);
    s->head_len += (int)step;
    *whole = s->head_len == HEAD;
    if (*whole) s->head_len = 0;
    return step;
}

static int from_client(Core *r, conn *c, const uint8_t *data, size_t size, buf *out) {
    side *s = &c->client;
    size_t at = 0;
    while (at < size && !c->closed) {
        size_t step;
        int whole;
        if (s->skip || s->remaining) {
            uint32_t left = s->skip ? s->skip : s->remaining;
            step = size - at < left ? size - at : left;
            buf *into = s->gathering && !s->skip ? &s->gather : out;
            if ((s->skip || !s->dropping) && buf_add(into, data + at, step) < 0) return -1;
            at += step;
            if (s->skip) s->skip -= (uint32_t)step;
            else if (!(s->remaining -= (uint32_t)step) && s->gathering &&
                     client_frame_done(r, c, out) < 0)
                return -1;
            continue;
        }
        at += take_head(s, data + at, size - at, &whole);
        if (!whole) continue;
        if (client_frame_begin(r, c, out) < 0) return -1;
        if (!s->remaining && s->gathering && !c->closed && client_frame_done(r, c, out) < 0)
            return -1;
    }
    /* What the relay owes the client itself (answers, credits, ping answers) waits for a
     * frame boundary of gRPC's: a client that makes it grow past PENDING_LIMIT (what answers
     * reach at most, twice) while it does not read ends. */
    return c->h2.pending.len > PENDING_LIMIT ? -1 : 0;
}

/* ---- gRPC's frames as the client gets them (rule 8) ---- */

static int give_pending(h2state *h, buf *out) {
    if (!h->pending.len) return 0;
    int rc = buf_add(out, h->pending.data, h->pending.len);
    h->pending.len = 0;
    return rc;
}

/* gRPC's bytes for the client: its frames pass as they come, the relay's own (`pending`) go
 * between two of them, and a DATA frame past the client's window while answers' bytes are
 * owed (gRPC's view of the window is then that much larger) waits for the client's credit with
 * everything after it (`backlog`; gRPC is not read meanwhile). */
static int from_server(Core *r, conn *c, const uint8_t *data, size_t size, buf *out) {
    side *s = &c->server;
    h2state *h = &c->h2;
    size_t at = 0;
    while (at < size && !c->closed) {
        int whole;
        if (s->remaining) {
            size_t step = size - at < s->remaining ? size - at : s->remaining;
            if (buf_add(out, data + at, step) < 0) return -1;
            at += step;
            s->remaining -= (uint32_t)step;
            continue;
        }
        at += take_head(s, data + at, size - at, &whole);
        if (!whole) continue;
        uint32_t len, stream;
        uint8_t type, flags;
        parse_head(s->head, &len, &type, &flags, &stream);
        if (type == F_DATA && (int64_t)len > h->window && h->owed) { /* the excess is ours */
            s->paused = 1;
            if (buf_add(&h->backlog, s->head, HEAD) < 0) return -1;
            return buf_add(&h->backlog, data + at, size - at);
        }
        if (type == F_DATA) h->window -= len;
        if (!h->server_in_block && give_pending(h, out) < 0) return -1;
        if (type == F_HEADERS) h->server_in_block = !(flags & END_HEADERS);
        else if (type == F_CONTINUATION && (flags & END_HEADERS)) h->server_in_block = 0;
        frame(r, s, s->head);
        if (buf_add(out, s->head, HEAD) < 0) return -1;
        s->remaining = len;
    }
    return 0;
}

/* ---- ending connections ---- */

static void close_conn(Core *r, conn *c) {
    if (c->closed) return;
    c->closed = 1;
    count_calls(r, c, -(long)c->open);
    c->open = 0;
    if (c->client.fd >= 0) close(c->client.fd);
    if (c->server.fd >= 0) close(c->server.fd);
    c->client.fd = c->server.fd = -1;
    if (r->unjudged == c) r->unjudged = c->next;
    if (c->prev) c->prev->next = c->next;
    else r->head = c->next;
    if (c->next) c->next->prev = c->prev;
    else r->tail = c->prev;
    r->n_conns--;
    c->next_dead = r->dead;
    r->dead = c;
}

static void free_dead(Core *r) {
    while (r->dead) {
        conn *c = r->dead;
        r->dead = c->next_dead;
        free(c->client.out);
        free(c->server.out);
        free(c->streams);
        buf_free(&c->client.gather);
        buf_free(&c->server.gather);
        hpack_free(&c->h2.table);
        buf *bufs[] = {&c->h2.block, &c->h2.held_frames, &c->h2.held_body, &c->h2.pending,
                       &c->h2.backlog};
        for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) buf_free(bufs[i]);
        free(c);
    }
}

static void count_calls(Core *r, conn *opening, long change) {
    r->calls += change;
    if (change <= 0 || r->calls <= r->fair_calls) return;
    conn *most = NULL; /* rule 3: O(connections), only past the fair share */
    for (conn *c = r->head; c; c = c->next)
        if (!most || c->open > most->open) most = c;
    if (most && most != opening && most->open > opening->open) {
        r->busiest++;
        close_conn(r, most);
    }
}

/* ---- bytes (rule 4) ---- */

static int append_out(side *s, const uint8_t *data, size_t size) {
    if (s->out_len + size > s->out_cap) { /* past CHUNK the peer is not read: one read more */
        size_t cap = s->out_cap ? s->out_cap : 2 * CHUNK;
        while (cap < s->out_len + size) cap *= 2;
        uint8_t *grown = realloc(s->out, cap);
        if (!grown) return -1;
        s->out = grown;
        s->out_cap = cap;
    }
    memcpy(s->out + s->out_len, data, size);
    s->out_len += size;
    return 0;
}

static int send_some(side *s, const uint8_t *data, size_t size, size_t *sent) {
    *sent = 0;
    while (*sent < size) {
        ssize_t n = send(s->fd, data + *sent, size - *sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) *sent += (size_t)n;
        else if (n < 0 && errno == EINTR) continue;
        else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
        else return -1;
    }
    return 0;
}

/* Write what `from` read to its peer at once; keep the rest in the peer's `out`. */
static void relay_bytes(Core *r, side *from, const uint8_t *data, size_t size) {
    side *to = from->peer;
    size_t sent = 0;
    if (!to->out_len && send_some(to, data, size, &sent) < 0) {
        close_conn(r, from->conn);
        return;
    }
    if (sent < size && append_out(to, data + sent, size - sent) < 0) {
        close_conn(r, from->conn);
        return;
    }
    if (to->out_len > CHUNK) from->paused = 1;
    watch(r, to);
    watch(r, from);
}

/* The client-bound bytes that wait: gRPC's, once the client's credit covers them, then the
 * relay's own at a frame boundary of gRPC's. */
static void to_client_now(Core *r, conn *c) {
    h2state *h = &c->h2;
    buf *out = &r->to_peer;
    out->len = 0;
    if (h->backlog.len && h->window > 0) {
        buf waiting = h->backlog;
        h->backlog = (buf){0};
        int rc = from_server(r, c, waiting.data, waiting.len, out);
        buf_free(&waiting);
        if (rc < 0) {
            close_conn(r, c);
            return;
        }
        if (!h->backlog.len && c->client.out_len + out->len <= CHUNK) c->server.paused = 0;
    }
    if (!c->server.remaining && !h->server_in_block && !h->backlog.len &&
        give_pending(h, out) < 0) {
        close_conn(r, c);
        return;
    }
    relay_bytes(r, &c->server, out->data, out->len);
}

static void readable(Core *r, side *s) {
    ssize_t n;
    conn *c = s->conn;
    do n = recv(s->fd, r->buffer, CHUNK, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) { /* its end, or an error: both sides end (relay.py's _Link) */
        close_conn(r, c);
        return;
    }
    buf *out = &r->to_peer;
    out->len = 0;
    int rc = s->is_client ? from_client(r, c, r->buffer, (size_t)n, out)
                          : from_server(r, c, r->buffer, (size_t)n, out);
    if (rc < 0) close_conn(r, c);
    if (c->closed) return;
    relay_bytes(r, s, out->data, out->len);
    if (!c->closed && (c->h2.pending.len || c->h2.backlog.len)) to_client_now(r, c);
}

static void writable(Core *r, side *s) {
    size_t sent = 0;
    if (!s->out_len) return;
    if (send_some(s, s->out, s->out_len, &sent) < 0) {
        close_conn(r, s->conn);
        return;
    }
    s->out_len -= sent;
    if (s->out_len) {
        memmove(s->out, s->out + sent, s->out_len);
    } else { /* drained: an idle connection holds no buffer */
        free(s->out);
        s->out = NULL;
        s->out_cap = 0;
    }
    if (s->peer->paused && s->out_len <= CHUNK / 4 && !s->conn->connecting &&
        !(s->is_client && s->conn->h2.backlog.len)) { /* gRPC's side waits for credit */
        s->peer->paused = 0;
        watch(r, s->peer);
    }
    watch(r, s);
}

/* ---- connections (rules 1 and 2) ---- */

static int admit(Core *r) {
    if (r->n_conns < r->max_conns) return 1;
    conn *oldest = NULL;
    for (conn *c = r->head; c; c = c->next)
        if (!c->open && (!oldest || c->idle_since < oldest->idle_since)) oldest = c;
    if (!oldest) {
        r->refused++;
        return 0;
    }
    r->evicted++;
    close_conn(r, oldest);
    return 1;
}

static int add_side(Core *r, side *s, uint32_t events) {
    struct epoll_event ev = {.events = events, .data.ptr = s};
    s->events = events;
    return epoll_ctl(r->epfd, EPOLL_CTL_ADD, s->fd, &ev);
}

static void connected(Core *r, conn *c) {
    c->connecting = 0;
    c->client.paused = 0;
    c->server.paused = 0;
    watch(r, &c->client);
    watch(r, &c->server);
}

/* gRPC's side of a new connection; a connection that cannot reach gRPC ends. */
static void open_server_side(Core *r, conn *c) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    c->server.fd = fd;
    if (fd < 0) {
        close_conn(r, c);
        return;
    }
    int rc;
    do rc = connect(fd, (struct sockaddr *)&r->target, r->target_len);
    while (rc < 0 && errno == EINTR);
    if (rc < 0 && errno != EINPROGRESS) {
        close_conn(r, c);
        return;
    }
    c->connecting = rc < 0;
    if (add_side(r, &c->server, c->connecting ? EPOLLOUT : 0) < 0) {
        close_conn(r, c);
        return;
    }
    if (!c->connecting) connected(r, c);
}

static void server_connect_done(Core *r, conn *c) {
    int error = 0;
    socklen_t len = sizeof error;
    if (getsockopt(c->server.fd, SOL_SOCKET, SO_ERROR, &error, &len) < 0 || error) {
        close_conn(r, c);
        return;
    }
    c->server.events = EPOLLOUT;
    connected(r, c);
}

static void init_side(side *s, conn *c, int fd, int is_client) {
    s->kind = K_SIDE;
    s->fd = fd;
    s->is_client = is_client;
    s->conn = c;
    s->skip = is_client ? PREFACE : 0;
    s->paused = 1; /* not read till gRPC's side is connected */
}

static void accepted(Core *r, int fd) {
    if (!admit(r)) {
        close(fd);
        return;
    }
    conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return;
    }
    init_side(&c->client, c, fd, 1);
    init_side(&c->server, c, -1, 0);
    c->client.peer = &c->server;
    c->server.peer = &c->client;
    c->accepted = c->idle_since = now();
    c->h2.window = c->h2.stream_window = 65535; /* RFC 9113 §6.9.2 */
    c->prev = r->tail;
    if (r->tail) r->tail->next = c;
    else r->head = c;
    r->tail = c;
    if (!r->unjudged) r->unjudged = c;
    r->n_conns++;
    if (add_side(r, &c->client, 0) < 0) {
        close_conn(r, c);
        return;
    }
    open_server_side(r, c);
}

static void set_listener_watched(Core *r, listener *l, int watched) {
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
    if (l->watched != watched)
        epoll_ctl(r->epfd, watched ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, l->fd, &ev);
    l->watched = watched;
}

static void acceptable(Core *r, listener *l) {
    for (int i = 0; i < 64; i++) { /* then the other sockets get their turn */
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            accepted(r, fd);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            set_listener_watched(r, l, 0); /* out of descriptors: rest, then accept again */
            l->rest_until = now() + ACCEPT_RETRY;
        }
        return;
    }
}

/* Rule 2, and listeners back from their rest; the wait till the next deadline (ms, or -1). */
static int due(Core *r) {
    double t = now(), next = -1;
    while (r->unjudged && r->unjudged->accepted + r->handshake <= t) {
        conn *c = r->unjudged;
        r->unjudged = c->next;
        if (!c->completed && !c->open) {
            r->unused++;
            close_conn(r, c);
        }
    }
    if (r->unjudged) next = r->unjudged->accepted + r->handshake;
    for (int i = 0; i < r->n_listeners; i++) {
        listener *l = &r->listeners[i];
        if (l->fd < 0 || l->watched) continue;
        if (l->rest_until <= t) set_listener_watched(r, l, 1);
        else if (next < 0 || l->rest_until < next) next = l->rest_until;
    }
    if (next < 0) return -1;
    return (int)((next - t) * 1000) + 1;
}

static void handle(Core *r, struct epoll_event *ev) {
    enum kind k = *(enum kind *)ev->data.ptr;
    if (k == K_WAKE) {
        uint64_t ignored;
        if (read(r->wakefd, &ignored, sizeof ignored) < 0) { /* nothing to do */
        }
    } else if (k == K_LISTENER) {
        acceptable(r, ev->data.ptr);
    } else {
        side *s = ev->data.ptr;
        conn *c = s->conn;
        if (c->closed) return;
        if (!s->is_client && c->connecting) {
            server_connect_done(r, c);
            return;
        }
        if (ev->events & EPOLLOUT) writable(r, s);
        if (!c->closed && (ev->events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
            if (s->paused && !(ev->events & EPOLLIN)) close_conn(r, c); /* hung up */
            else if (!s->paused) readable(r, s);
        }
    }
}

static void *run(void *arg) {
    Core *r = arg;
    struct epoll_event events[BATCH];
    pthread_mutex_lock(&r->lock);
    while (!r->stopping) {
        int timeout = due(r);
        pthread_mutex_unlock(&r->lock);
        int n = epoll_wait(r->epfd, events, BATCH, timeout);
        pthread_mutex_lock(&r->lock);
        for (int i = 0; i < n && !r->stopping; i++) handle(r, &events[i]);
        free_dead(r);
    }
    while (r->head) close_conn(r, r->head);
    for (int i = 0; i < r->n_listeners; i++)
        if (r->listeners[i].fd >= 0) close(r->listeners[i].fd);
    r->n_listeners = 0;
    free_dead(r);
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

/* ---- Python ---- */

static void wake(Core *r) {
    uint64_t one = 1;
    if (write(r->wakefd, &one, sizeof one) < 0) { /* the counter is full: a wake is pending */
    }
}

static void lock(Core *r) {
    Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&r->lock);
    Py_END_ALLOW_THREADS
}

static int Core_init(Core *r, PyObject *args, PyObject *kwds) {
    static char *names[] = {"target", "max_connections", "handshake_seconds", "fair_calls", NULL};
    const char *target;
    Py_ssize_t target_size;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "s#ldl", names, &target, &target_size,
                                     &r->max_conns, &r->handshake, &r->fair_calls))
        return -1;
    if (r->started) {
        PyErr_SetString(PyExc_RuntimeError, "the relay is already running");
        return -1;
    }
    if ((size_t)target_size >= sizeof r->target.sun_path) {
        PyErr_Format(PyExc_ValueError, "relay target %s: path too long for a unix socket", target);
        return -1;
    }
    if (r->max_conns < 1) {
        PyErr_SetString(PyExc_ValueError, "max_connections must be at least 1");
        return -1;
    }
    r->target.sun_family = AF_UNIX;
    memcpy(r->target.sun_path, target, (size_t)target_size + 1);
    r->target_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)target_size + 1);
    r->wake_kind = K_WAKE;
    r->epfd = epoll_create1(EPOLL_CLOEXEC);
    r->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &r->wake_kind};
    if (r->epfd < 0 || r->wakefd < 0 || epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->wakefd, &ev) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    if (answers_init(&r->answers) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    pthread_mutex_init(&r->lock, NULL);
    if (pthread_create(&r->thread, NULL, run, r) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "the relay's thread could not start");
        return -1;
    }
    r->started = 1;
    return 0;
}

static PyObject *Core_listen(Core *r, PyObject *arg) {
    int fd = PyObject_AsFileDescriptor(arg);
    if (fd < 0) return NULL;
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) return PyErr_SetFromErrno(PyExc_OSError);
    fcntl(own, F_SETFL, fcntl(own, F_GETFL) | O_NONBLOCK);
    lock(r);
    if (r->stopping || r->n_listeners == MAX_LISTENERS) {
        pthread_mutex_unlock(&r->lock);
        close(own);
        PyErr_SetString(PyExc_RuntimeError, "the relay takes no more listening sockets");
        return NULL;
    }
    listener *l = &r->listeners[r->n_listeners++];
    l->kind = K_LISTENER;
    l->fd = own;
    l->watched = 0;
    set_listener_watched(r, l, 1);
    pthread_mutex_unlock(&r->lock);
    wake(r);
    Py_RETURN_NONE;
}

static PyObject *Core_stop_accepting(Core *r, PyObject *unused) {
    lock(r);
    for (int i = 0; i < r->n_listeners; i++) {
        listener *l = &r->listeners[i];
        if (l->fd < 0) continue;
        set_listener_watched(r, l, 0);
        close(l->fd);
        l->fd = -1;
    }
    pthread_mutex_unlock(&r->lock);
    Py_RETURN_NONE;
}

static void stop(Core *r) {
    if (!r->started || r->joined) return;
    pthread_mutex_lock(&r->lock);
    r->stopping = 1;
    pthread_mutex_unlock(&r->lock);
    wake(r);
    pthread_join(r->thread, NULL);
    r->joined = 1;
}

static PyObject *Core_close(Core *r, PyObject *unused) {
    Py_BEGIN_ALLOW_THREADS stop(r);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *Core_counts(Core *r, PyObject *unused) {
    lock(r);
    long values[] = {r->n_conns, r->calls, r->evicted, r->refused, r->unused, r->busiest};
    pthread_mutex_unlock(&r->lock);
    return Py_BuildValue("{sl,sl,sl,sl,sl,sl}", "connections", values[0], "calls", values[1],
                         "evicted", values[2], "refused", values[3], "unused", values[4],
                         "busiest", values[5]);
}

/* ---- the status answers (rule 8) ---- */

static PyObject *Core_put_status(Core *r, PyObject *args) {
    int method, verbose;
    const char *ident, *message;
    Py_ssize_t ident_len, size;
    double fresh_until;
    if (!PyArg_ParseTuple(args, "iy#py#d", &method, &ident, &ident_len, &verbose, &message, &size,
                          &fresh_until))
        return NULL;
    if (method < 0 || method >= ANSWER_METHODS) {
        PyErr_Format(PyExc_ValueError, "status method %d: expected 0 or 1", method);
        return NULL;
    }
    lock(r);
    int kept = answers_put(&r->answers, method, (const uint8_t *)ident, (size_t)ident_len,
                           verbose, (const uint8_t *)message, (size_t)size, fresh_until, now());
    pthread_mutex_unlock(&r->lock);
    if (kept < 0) return PyErr_NoMemory();
    return PyBool_FromLong(kept);
}

static PyObject *Core_drop_status(Core *r, PyObject *arg) {
    char *ident;
    Py_ssize_t len;
    if (PyBytes_AsStringAndSize(arg, &ident, &len) < 0) return NULL;
    lock(r);
    answers_drop(&r->answers, (const uint8_t *)ident, (size_t)len);
    pthread_mutex_unlock(&r->lock);
    Py_RETURN_NONE;
}

static PyObject *Core_clear_statuses(Core *r, PyObject *unused) {
    lock(r);
    answers_clear(&r->answers);
    pthread_mutex_unlock(&r->lock);
    Py_RETURN_NONE;
}

static PyObject *method_counts(answers *a, int method) {
    PyObject *buckets = PyList_New(ANSWER_BUCKETS);
    if (!buckets) return NULL;
    for (int i = 0; i < ANSWER_BUCKETS; i++)
        PyList_SET_ITEM(buckets, i, PyLong_FromUnsignedLongLong(a->buckets[method][i]));
    return Py_BuildValue("{sK,sd,sN}", "answered", (unsigned long long)a->answered[method],
                         "seconds", a->seconds[method], "buckets", buckets);
}

static PyObject *Core_status_counts(Core *r, PyObject *unused) {
    lock(r);
    answers copy = r->answers; /* the counters, read under the lock */
    pthread_mutex_unlock(&r->lock);
    return Py_BuildValue("{sN,sN,sn,sn}", "ContainerStatus", method_counts(&copy, 0),
                         "PodSandboxStatus", method_counts(&copy, 1), "kept",
                         (Py_ssize_t)copy.count, "bytes", (Py_ssize_t)copy.bytes);
}

static void Core_dealloc(Core *r) {
    stop(r);
    if (r->started) pthread_mutex_destroy(&r->lock);
    answers_free(&r->answers);
    buf_free(&r->to_peer);
    buf_free(&r->recoded);
    if (r->epfd > 0) close(r->epfd);
    if (r->wakefd > 0) close(r->wakefd);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyMethodDef Core_methods[] = {
    {"listen", (PyCFunction)Core_listen, METH_O,
     "Accept on this listening socket (its descriptor is duplicated) from now on."},
    {"stop_accepting", (PyCFunction)Core_stop_accepting, METH_NOARGS,
     "Accept no more connections; those open go on."},
    {"close", (PyCFunction)Core_close, METH_NOARGS,
     "Close every connection and end the relay's thread (waits for it)."},
    {"counts", (PyCFunction)Core_counts, METH_NOARGS,
     "The relay's counters now: connections, calls, evicted, refused, unused, busiest."},
    {"put_status", (PyCFunction)Core_put_status, METH_VARARGS,
     "put_status(method, ident, verbose, answer, fresh_until): answer calls for this key while "
     "time.monotonic() <= fresh_until (method 0 ContainerStatus, 1 PodSandboxStatus); whether "
     "it is kept."},
    {"drop_status", (PyCFunction)Core_drop_status, METH_O,
     "Answer no call about this ID (either method, either verbosity) any more."},
    {"clear_statuses", (PyCFunction)Core_clear_statuses, METH_NOARGS,
     "Answer no status call any more."},
    {"status_counts", (PyCFunction)Core_status_counts, METH_NOARGS,
     "Status calls answered here, by method (answered, seconds, buckets), and what is kept."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "podcache.serve.crisock._relay.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The relay's rules on a thread of its own (relay.py).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Core_init,
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_methods = Core_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "podcache.serve.crisock._relay",
    "The CRI socket's relay in C, on a thread of its own.", -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__relay(void) {
    if (PyType_Ready(&CoreType) < 0) return NULL;
    hpack_init();
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&CoreType);
    if (PyModule_AddObject(m, "Core", (PyObject *)&CoreType) < 0) {
        Py_DECREF(&CoreType);
        Py_DECREF(m);
        return NULL;
    }
    PyObject *bounds = PyTuple_New(ANSWER_BUCKETS - 1);
    for (int i = 0; bounds && i < ANSWER_BUCKETS - 1; i++)
        PyTuple_SET_ITEM(bounds, i, PyFloat_FromDouble(answer_bounds[i]));
    if (!bounds || PyModule_AddObject(m, "DURATION_BOUNDS", bounds) < 0) {
        Py_XDECREF(bounds);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
