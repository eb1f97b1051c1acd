/* podcache.serve.crisock._relay: the CRI socket's relay (relay.py states its rules 1-5) on a
 * thread of its own that never holds the GIL.
 *
 * Why: relayed on the socket's event loop, each call crosses two Python callbacks each way and
 * waits for the loop's thread, which also runs gRPC's handlers; a status answered from the
 * cache spent about a fifth of its latency in the relay (docs/performance.md). Here the relay
 * is one epoll loop in C: Python hands it listening sockets and reads its counters.
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

#define CHUNK (32 * 1024)
#define PREFACE 24 /* the client's connection preface (RFC 9113 §3.4) */
#define HEAD 9     /* a frame's header */
#define F_DATA 0x0
#define F_HEADERS 0x1
#define F_RST_STREAM 0x3
#define END_STREAM 0x1
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
    uint32_t skip; /* payload bytes of the current frame (or the preface) still to pass */
    uint8_t head[HEAD];
    int head_len;
    uint8_t *out; /* bytes the peer read, not yet taken by this side's socket */
    size_t out_len;
    uint32_t events; /* what epoll watches on fd now */
    int paused;      /* not read: the peer's `out` is past CHUNK, or gRPC's side not connected */
} side;

typedef struct conn {
    side client, server;
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

static void frame(Core *r, side *s, const uint8_t *h) {
    conn *c = s->conn;
    uint8_t type = h[3], flags = h[4];
    uint32_t stream = ((uint32_t)h[5] << 24 | (uint32_t)h[6] << 16 | (uint32_t)h[7] << 8 | h[8]) &
                      0x7FFFFFFFu;
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

static void feed(Core *r, side *s, const uint8_t *data, size_t size) {
    size_t at = 0;
    while (at < size && !s->conn->closed) {
        if (s->skip) {
            size_t step = size - at < s->skip ? size - at : s->skip;
            s->skip -= (uint32_t)step;
            at += step;
            continue;
        }
        size_t need = HEAD - (size_t)s->head_len;
        size_t step = size - at < need ? size - at : need;
        memcpy(s->head + s->head_len, data + at, step);
        s->head_len += (int)step;
        at += step;
        if (s->head_len == HEAD) {
            s->head_len = 0;
            s->skip = (uint32_t)s->head[0] << 16 | (uint32_t)s->head[1] << 8 | s->head[2];
            frame(r, s, s->head);
        }
    }
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
    if (!s->out) {
        s->out = malloc(2 * CHUNK); /* at most CHUNK held, then one read more */
        if (!s->out) return -1;
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

static void readable(Core *r, side *s) {
    ssize_t n;
    do n = recv(s->fd, r->buffer, CHUNK, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) { /* its end, or an error: both sides end (relay.py's _Link) */
        close_conn(r, s->conn);
        return;
    }
    feed(r, s, r->buffer, (size_t)n);
    if (!s->conn->closed) relay_bytes(r, s, r->buffer, (size_t)n);
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
    }
    if (s->peer->paused && s->out_len <= CHUNK / 4 && !s->conn->connecting) {
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

static void Core_dealloc(Core *r) {
    stop(r);
    if (r->started) pthread_mutex_destroy(&r->lock);
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
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&CoreType);
    if (PyModule_AddObject(m, "Core", (PyObject *)&CoreType) < 0) {
        Py_DECREF(&CoreType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
