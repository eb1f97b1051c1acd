/* podcache.cri._wire: the two CRI list answers read straight from their protobuf wire bytes
 * (and, at the end of this file, eventwire's reader of events: see "event_fields").
 *
 * It reads only the fields the kubelet's GetPods uses (docs/architecture.md §4, "Speed
 * without other rules"), in one pass over the bytes, and hands Python one row per item: a
 * SandboxRow or a ContainerRow, objects with named, read-only fields (declared once, in the
 * *_ROW_FIELDS tables below; _wire.pyi repeats them and a test holds the two to each other).
 * The kubelet's rules stay in Python (convert.py); this file knows the wire format and
 * podcache's api.proto subset, nothing else.
 *
 * It accepts and rejects exactly what upb (protobuf's decoder) does with the same .proto:
 * - wire types as declared, or else the field is unknown and skipped; unknown fields are
 *   skipped, groups too, and inside an unknown group any field number (0 too) is allowed;
 * - a tag is a varint of at most 5 bytes and at most 2^32-1, field number 0 is an error
 *   outside unknown groups; a length is a varint of at most 5 bytes; any other varint is at
 *   most 10 bytes, the bits past the 64th dropped;
 * - messages and groups nest at most MAX_DEPTH deep, the list answer itself at depth 0;
 * - a submessage listed twice is merged (the last value of each field wins);
 * - a map entry with a missing key or value means ""; an entry holding any other field (or
 *   its key or value with another wire type) is not a map entry but an unknown field of the
 *   enclosing message, so it is left out of the map; of entries with the same key the last
 *   one wins;
 * - every string field that api.proto declares must be valid UTF-8, read or not, map entries
 *   left out included; truncated or overlong data is an error.
 * Bounds: none on any count (items, labels, string lengths): every cost is linear in the
 * bytes but the sort of each sandbox's labels, O(n log n) in its labels.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifndef Py_T_OBJECT_EX /* Python < 3.12 */
#include <structmember.h>
#define Py_T_OBJECT_EX T_OBJECT_EX
#define Py_READONLY READONLY
#endif

/* upb's default nesting limit, which protobuf's Python module keeps. */
#define MAX_DEPTH 100
#define MAX_TAG_BYTES 5
#define MAX_LENGTH_BYTES 5
#define MAX_VARINT_BYTES 10

typedef struct {
    const uint8_t *p;
    size_t n;
} span;

typedef struct {
    const uint8_t *start; /* for error offsets */
    const char *what;     /* which message is being read, for errors */
} ctx;

static PyObject *MalformedError; /* ValueError subclass, set at module init */

static int fail(const ctx *c, const uint8_t *at, const char *problem) {
    PyErr_Format(MalformedError, "malformed %s: %s at byte %zd", c->what, problem,
                 (Py_ssize_t)(at - c->start));
    return -1;
}

/* ---- varints, tags, lengths ---- */

/* A varint of at most `max_bytes` bytes; the value keeps its low 64 bits (as upb does with
 * the 10th byte's high bits). */
static int read_long_varint(const ctx *c, const uint8_t **pp, const uint8_t *end,
                            int max_bytes, uint64_t *out) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (p >= end) return fail(c, p, "truncated varint");
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << (7 * i); /* i = 9: only the lowest bit stays */
        if (!(b & 0x80)) {
            *pp = p;
            *out = v;
            return 0;
        }
    }
    return fail(c, *pp, max_bytes == MAX_VARINT_BYTES ? "varint longer than 10 bytes"
                                                      : "tag or length longer than 5 bytes");
}

/* Most varints (tags, lengths, states) are one byte: that case inline, the rest out of line. */
static inline int read_varint_of(const ctx *c, const uint8_t **pp, const uint8_t *end,
                                 int max_bytes, uint64_t *out) {
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) {
        *out = *p;
        *pp = p + 1;
        return 0;
    }
    return read_long_varint(c, pp, end, max_bytes, out);
}

static inline int read_varint(const ctx *c, const uint8_t **pp, const uint8_t *end,
                              uint64_t *out) {
    return read_varint_of(c, pp, end, MAX_VARINT_BYTES, out);
}

/* A tag: field number and wire type (any field number, 0 too: callers decide). */
static inline int read_tag(const ctx *c, const uint8_t **pp, const uint8_t *end,
                           uint32_t *field, int *wt) {
    uint64_t tag;
    const uint8_t *at = *pp;
    if (read_varint_of(c, pp, end, MAX_TAG_BYTES, &tag) < 0) return -1;
    if (tag > UINT32_MAX) return fail(c, at, "tag above 2^32-1");
    *field = (uint32_t)(tag >> 3);
    *wt = (int)(tag & 7);
    return 0;
}

/* A length-delimited payload: *pp moves past it. */
static int read_bytes(const ctx *c, const uint8_t **pp, const uint8_t *end, span *out) {
    uint64_t len;
    const uint8_t *at = *pp;
    if (read_varint_of(c, pp, end, MAX_LENGTH_BYTES, &len) < 0) return -1;
    if (len > (uint64_t)(end - *pp)) return fail(c, at, "length runs past the end");
    out->p = *pp;
    out->n = (size_t)len;
    *pp += len;
    return 0;
}

/* ---- unknown fields ---- */

static int skip_field(const ctx *c, uint32_t field, int wt, const uint8_t **pp,
                      const uint8_t *end, int depth);

/* Skip a group's fields up to its end tag (same field number); `depth`: the group's own. */
static int skip_group(const ctx *c, uint32_t field, const uint8_t **pp, const uint8_t *end,
                      int depth) {
    if (depth > MAX_DEPTH) return fail(c, *pp, "nested too deeply");
    while (*pp < end) {
        uint32_t f;
        int wt;
        const uint8_t *at = *pp;
        if (read_tag(c, pp, end, &f, &wt) < 0) return -1;
        if (wt == 4) {
            if (f != field) return fail(c, at, "mismatched end of group");
            return 0;
        }
        if (skip_field(c, f, wt, pp, end, depth) < 0) return -1;
    }
    return fail(c, *pp, "group without an end");
}

/* Skip one unknown field of a message (or group) at `depth`. */
static int skip_field(const ctx *c, uint32_t field, int wt, const uint8_t **pp,
                      const uint8_t *end, int depth) {
    uint64_t ignored;
    span s;
    switch (wt) {
    case 0:
        return read_varint(c, pp, end, &ignored);
    case 1:
        if (end - *pp < 8) return fail(c, *pp, "truncated fixed64");
        *pp += 8;
        return 0;
    case 2:
        return read_bytes(c, pp, end, &s);
    case 3:
        return skip_group(c, field, pp, end, depth + 1);
    case 5:
        if (end - *pp < 4) return fail(c, *pp, "truncated fixed32");
        *pp += 4;
        return 0;
    case 4:
        return fail(c, *pp, "end of group without a start");
    default:
        return fail(c, *pp, "invalid wire type");
    }
}

/* The next tag of a message; 1 when one was read, 0 at the end. */
static int next_tag(const ctx *c, const uint8_t **pp, const uint8_t *end, uint32_t *field,
                    int *wt) {
    if (*pp >= end) return 0;
    const uint8_t *at = *pp;
    if (read_tag(c, pp, end, field, wt) < 0) return -1;
    if (*field == 0) return fail(c, at, "field number 0");
    return 1;
}

/* ---- strings ---- */

/* Strict UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF), as protobuf requires. */
static int utf8_ok(const uint8_t *p, size_t n) {
    const uint8_t *end = p + n;
    while (p < end) {
        while (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            if (w & 0x8080808080808080ULL) break;
            p += 8;
        }
        if (p >= end) break;
        uint8_t b = *p;
        if (b < 0x80) {
            p++;
            continue;
        }
        size_t need;
        uint32_t cp;
        if (b >= 0xc2 && b <= 0xdf) {
            need = 1;
            cp = b & 0x1f;
        } else if (b >= 0xe0 && b <= 0xef) {
            need = 2;
            cp = b & 0x0f;
        } else if (b >= 0xf0 && b <= 0xf4) {
            need = 3;
            cp = b & 0x07;
        } else {
            return 0;
        }
        if ((size_t)(end - p) <= need) return 0;
        for (size_t i = 1; i <= need; i++) {
            if ((p[i] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (p[i] & 0x3f);
        }
        if ((need == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
            (need == 3 && (cp < 0x10000 || cp > 0x10ffff)))
            return 0;
        p += need + 1;
    }
    return 1;
}

/* A length-delimited string field: its span, checked for UTF-8 like upb does. */
static int read_string(const ctx *c, const uint8_t **pp, const uint8_t *end, span *out) {
    const uint8_t *at = *pp;
    if (read_bytes(c, pp, end, out) < 0) return -1;
    if (!utf8_ok(out->p, out->n)) return fail(c, at, "string field is not valid UTF-8");
    return 0;
}

/* One map<string, string> entry (a message at `depth`): key 1, value 2, both "" when missing.
 * 1: a map entry; 0: it holds another field, so it is an unknown field of the enclosing
 * message (validated all the same) and not in the map. */
static int read_entry(const ctx *c, span entry, int depth, span *key, span *value) {
    const uint8_t *p = entry.p, *end = entry.p + entry.n;
    uint32_t f;
    int wt, r, plain = 1;
    key->n = value->n = 0;
    key->p = value->p = entry.p;
    while ((r = next_tag(c, &p, end, &f, &wt)) > 0) {
        if (f == 1 && wt == 2) {
            if (read_string(c, &p, end, key) < 0) return -1;
        } else if (f == 2 && wt == 2) {
            if (read_string(c, &p, end, value) < 0) return -1;
        } else {
            plain = 0;
            if (skip_field(c, f, wt, &p, end, depth) < 0) return -1;
        }
    }
    return r < 0 ? -1 : plain;
}

/* A map field's next entry (at `depth`): as read_entry. */
static int read_map_field(const ctx *c, const uint8_t **pp, const uint8_t *end, int depth,
                          span *key, span *value) {
    span entry;
    if (read_bytes(c, pp, end, &entry) < 0) return -1;
    return read_entry(c, entry, depth, key, value);
}

static int span_is(span s, const char *text, size_t n) {
    return s.n == n && memcmp(s.p, text, n) == 0;
}

/* Strings repeat across a node's items (images, names, namespaces, label keys): each distinct
 * byte string becomes one str object. An open-addressing table keyed by the raw bytes, one per
 * list answer, answers repeats without building or hashing a str. Its hash is seeded per
 * process (from Python's own hash secret), so nobody can choose strings that collide. */
typedef struct {
    uint64_t hash;
    const uint8_t *p;
    size_t n;
    PyObject *text; /* strong reference; NULL: free slot */
} intern_slot;

/* Call sites that tend to repeat the previous item's value (a pod's containers are often
 * listed together) check it first: one memcmp instead of a table probe. */
enum {
    LAST_NAME,
    LAST_IMAGE,
    LAST_REF,
    LAST_IMAGE_ID,
    LAST_UID,
    LAST_POD,
    LAST_NAMESPACE,
    LAST_SANDBOX,
    LAST_SITES
};

typedef struct {
    intern_slot *slots;
    size_t cap, used;
    intern_slot last[LAST_SITES]; /* borrowed: the table holds the references */
} interner;

static uint64_t hash_seed;

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = (0xcbf29ce484222325ULL ^ hash_seed ^ n) * 0x100000001b3ULL;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x100000001b3ULL;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    while (n--) h = (h ^ *p++) * 0x100000001b3ULL;
    return h ^ (h >> 32);
}

static void interner_free(interner *t) {
    for (size_t i = 0; i < t->cap; i++) Py_XDECREF(t->slots[i].text);
    PyMem_Free(t->slots);
    t->slots = NULL;
}

static int interner_grow(interner *t) {
    size_t cap = t->cap ? t->cap * 2 : 1024;
    intern_slot *slots = PyMem_Calloc(cap, sizeof(intern_slot));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < t->cap; i++) {
        intern_slot *old = &t->slots[i];
        if (old->text == NULL) continue;
        size_t j = (size_t)old->hash & (cap - 1);
        while (slots[j].text != NULL) j = (j + 1) & (cap - 1);
        slots[j] = *old;
    }
    PyMem_Free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

/* A new reference to the str of a validated UTF-8 span. */
static PyObject *shared_str(interner *t, span s) {
    if (s.n == 0) return PyUnicode_New(0, 0); /* the empty str singleton */
    if (t->used * 2 >= t->cap && interner_grow(t) < 0) return NULL;
    uint64_t h = hash_bytes(s.p, s.n);
    size_t j = (size_t)h & (t->cap - 1);
    for (;; j = (j + 1) & (t->cap - 1)) {
        intern_slot *slot = &t->slots[j];
        if (slot->text == NULL) break;
        if (slot->hash == h && slot->n == s.n && memcmp(slot->p, s.p, s.n) == 0) {
            Py_INCREF(slot->text);
            return slot->text;
        }
    }
    PyObject *text = PyUnicode_DecodeUTF8((const char *)s.p, (Py_ssize_t)s.n, "strict");
    if (text == NULL) return NULL;
    intern_slot *slot = &t->slots[j];
    slot->hash = h;
    slot->p = s.p;
    slot->n = s.n;
    slot->text = text;
    Py_INCREF(text);
    t->used++;
    return text;
}

/* shared_str, trying call site `site`'s previous value first. */
static PyObject *repeated_str(interner *t, int site, span s) {
    intern_slot *last = &t->last[site];
    if (last->text != NULL && last->n == s.n && memcmp(last->p, s.p, s.n) == 0) {
        Py_INCREF(last->text);
        return last->text;
    }
    PyObject *text = shared_str(t, s);
    if (text != NULL && s.n > 0) {
        last->p = s.p;
        last->n = s.n;
        last->text = text;
    }
    return text;
}

/* A new reference to the str of a validated UTF-8 span, not shared (IDs, UIDs). */
static PyObject *own_str(span s) {
    return PyUnicode_DecodeUTF8((const char *)s.p, (Py_ssize_t)s.n, "strict");
}

/* A tuple of n new references (NULL items allowed: then the tuple is dropped and NULL
 * returned). Its items are strs and such tuples only, which the cycle collector never needs
 * to see: it is untracked, like CPython untracks such tuples itself. */
static PyObject *flat_tuple(Py_ssize_t n, PyObject **items) {
    PyObject *tuple = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (items[i] == NULL) goto error;
    }
    tuple = PyTuple_New(n);
    if (tuple == NULL) goto error;
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(tuple, i, items[i]);
    PyObject_GC_UnTrack(tuple);
    return tuple;
error:
    for (Py_ssize_t i = 0; i < n; i++) Py_XDECREF(items[i]);
    return NULL;
}

static PyObject *new_bool(int value) {
    PyObject *b = value ? Py_True : Py_False;
    Py_INCREF(b);
    return b;
}

/* ---- rows: objects with named read-only fields, one type per kind of item ----
 * A row holds strs, ints, bools and untracked tuples of strs only: it cannot be part of a
 * cycle, so its type is not a GC type. Its fields are an array behind the header; the
 * *_ROW_FIELDS tables give each its name (the index, the member and the pyi entry) once. */

typedef struct {
    PyObject_HEAD PyObject *fields[1]; /* really as many as the type has members */
} row_object;

#define ROW_SIZE(n) (offsetof(row_object, fields) + (n) * sizeof(PyObject *))
#define ROW_INDEX(kind, name, doc) kind##_##name,
#define ROW_MEMBER(kind, name, doc)                                                            \
    {#name, Py_T_OBJECT_EX, (Py_ssize_t)ROW_SIZE(kind##_##name), Py_READONLY, doc},

static Py_ssize_t row_length(PyTypeObject *type) {
    return (Py_ssize_t)((type->tp_basicsize - offsetof(row_object, fields)) / sizeof(PyObject *));
}

static void row_dealloc(PyObject *self) {
    row_object *row = (row_object *)self;
    for (Py_ssize_t i = 0, n = row_length(Py_TYPE(self)); i < n; i++) Py_XDECREF(row->fields[i]);
    PyObject_Free(self);
}

/* TypeName(field=value, ...) from the type's members. */
static PyObject *row_repr(PyObject *self) {
    PyTypeObject *type = Py_TYPE(self);
    row_object *row = (row_object *)self;
    PyObject *parts = PyList_New(0);
    if (parts == NULL) return NULL;
    for (Py_ssize_t i = 0; type->tp_members[i].name != NULL; i++) {
        PyObject *part =
            PyUnicode_FromFormat("%s=%R", type->tp_members[i].name, row->fields[i]);
        if (part == NULL || PyList_Append(parts, part) < 0) {
            Py_XDECREF(part);
            Py_DECREF(parts);
            return NULL;
        }
        Py_DECREF(part);
    }
    PyObject *sep = PyUnicode_FromString(", ");
    PyObject *inside = sep == NULL ? NULL : PyUnicode_Join(sep, parts);
    Py_XDECREF(sep);
    Py_DECREF(parts);
    if (inside == NULL) return NULL;
    const char *name = strrchr(type->tp_name, '.');
    PyObject *text = PyUnicode_FromFormat("%s(%U)", name ? name + 1 : type->tp_name, inside);
    Py_DECREF(inside);
    return text;
}

/* A row of `type` taking over n new references (NULL items allowed: then they are dropped
 * and NULL returned). */
static PyObject *new_row(PyTypeObject *type, Py_ssize_t n, PyObject **values) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (values[i] == NULL) goto error;
    }
    row_object *row = PyObject_New(row_object, type);
    if (row == NULL) goto error;
    memcpy(row->fields, values, (size_t)n * sizeof(PyObject *));
    return (PyObject *)row;
error:
    for (Py_ssize_t i = 0; i < n; i++) Py_XDECREF(values[i]);
    return NULL;
}

#define ROW_TYPE(kind, type_name, doc)                                                         \
    static PyMemberDef kind##_members[] = {kind##_ROW_FIELDS(ROW_MEMBER){NULL}};               \
    static PyTypeObject kind##_type = {                                                        \
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "podcache.cri._wire." type_name,              \
        .tp_basicsize = (Py_ssize_t)ROW_SIZE(kind##_FIELD_COUNT),                              \
        .tp_dealloc = row_dealloc,                                                             \
        .tp_repr = row_repr,                                                                   \
        .tp_flags = Py_TPFLAGS_DEFAULT,                                                        \
        .tp_doc = doc,                                                                         \
        .tp_members = kind##_members,                                                          \
    };

/* PodSandbox: the fields convert.py reads, absent strings "". */
#define SANDBOX_ROW_FIELDS(X)                                                                  \
    X(SANDBOX, id, "PodSandbox.id (str)")                                                      \
    X(SANDBOX, created_at, "PodSandbox.created_at (int, ns)")                                  \
    X(SANDBOX, state, "PodSandbox.state (int)")                                                \
    X(SANDBOX, has_metadata, "whether PodSandbox.metadata was listed (bool)")                  \
    X(SANDBOX, name, "PodSandboxMetadata.name (str)")                                          \
    X(SANDBOX, uid, "PodSandboxMetadata.uid (str)")                                            \
    X(SANDBOX, namespace, "PodSandboxMetadata.namespace (str)")                                \
    X(SANDBOX, attempt, "PodSandboxMetadata.attempt (int, uint32)")                            \
    X(SANDBOX, labels,                                                                         \
      "the pod's own labels: (key, value) pairs sorted by key, each key with its last value, " \
      "no io.kubernetes.pod.* keys nor io.kubernetes.container.name")

enum { SANDBOX_ROW_FIELDS(ROW_INDEX) SANDBOX_FIELD_COUNT };
ROW_TYPE(SANDBOX, "SandboxRow", "One PodSandbox of a ListPodSandboxResponse, as read.")

/* Container: the fields convert.py reads, absent strings "". */
#define CONTAINER_ROW_FIELDS(X)                                                                \
    X(CONTAINER, id, "Container.id (str)")                                                     \
    X(CONTAINER, pod_sandbox_id, "Container.pod_sandbox_id (str)")                             \
    X(CONTAINER, created_at, "Container.created_at (int, ns)")                                 \
    X(CONTAINER, state, "Container.state (int)")                                               \
    X(CONTAINER, has_metadata, "whether Container.metadata was listed (bool)")                 \
    X(CONTAINER, name, "ContainerMetadata.name (str)")                                         \
    X(CONTAINER, attempt, "ContainerMetadata.attempt (int, uint32)")                           \
    X(CONTAINER, has_image, "whether Container.image was listed (bool)")                       \
    X(CONTAINER, image, "ImageSpec.image (str)")                                               \
    X(CONTAINER, runtime_handler, "ImageSpec.runtime_handler (str)")                           \
    X(CONTAINER, image_ref, "Container.image_ref (str)")                                       \
    X(CONTAINER, image_id, "Container.image_id (str)")                                         \
    X(CONTAINER, pod_uid, "the label io.kubernetes.pod.uid (str)")                             \
    X(CONTAINER, pod_name, "the label io.kubernetes.pod.name (str)")                           \
    X(CONTAINER, pod_namespace, "the label io.kubernetes.pod.namespace (str)")                 \
    X(CONTAINER, hash, "the annotation io.kubernetes.container.hash (str)")

enum { CONTAINER_ROW_FIELDS(ROW_INDEX) CONTAINER_FIELD_COUNT };
ROW_TYPE(CONTAINER, "ContainerRow", "One Container of a ListContainersResponse, as read.")

/* ---- Container (api.proto: id 1, pod_sandbox_id 2, metadata 3, image 4, image_ref 5,
 *      state 6, created_at 7, labels 8, annotations 9, image_id 10) ---- */

#define UID_LABEL "io.kubernetes.pod.uid"
#define NAME_LABEL "io.kubernetes.pod.name"
#define NAMESPACE_LABEL "io.kubernetes.pod.namespace"
#define HASH_ANNOTATION "io.kubernetes.container.hash"
#define POD_LABELS "io.kubernetes.pod."
#define INFRA_CONTAINER_LABEL "io.kubernetes.container.name"
#define LIT(s) s, sizeof(s) - 1
#define TAG(field, wire_type) (((field) << 3) | (wire_type))

/* Depths: the list answer 0, its items 1, their submessages and map entries 2, and so on. */
#define ITEM_DEPTH 1

typedef struct {
    span id, sandbox, name, image, handler, image_ref, image_id, uid, pod_name, pod_namespace, hash;
    uint64_t state, created_at, attempt;
    int has_metadata, has_image;
} container_fields;

static int read_container_metadata(const ctx *c, span m, container_fields *out) {
    const uint8_t *p = m.p, *end = m.p + m.n;
    uint32_t f;
    int wt, r;
    while ((r = next_tag(c, &p, end, &f, &wt)) > 0) {
        if (f == 1 && wt == 2) {
            if (read_string(c, &p, end, &out->name) < 0) return -1;
        } else if (f == 2 && wt == 0) {
            if (read_varint(c, &p, end, &out->attempt) < 0) return -1;
        } else if (skip_field(c, f, wt, &p, end, ITEM_DEPTH + 1) < 0) {
            return -1;
        }
    }
    return r;
}

/* ImageSpec: image 1, annotations 2 (map), user_specified_image 18, runtime_handler 19,
 * image_ref 20. */
static int read_image_spec(const ctx *c, span m, container_fields *out) {
    const uint8_t *p = m.p, *end = m.p + m.n;
    uint32_t f;
    int wt, r;
    span s, key, value;
    while ((r = next_tag(c, &p, end, &f, &wt)) > 0) {
        if (f == 1 && wt == 2) {
            if (read_string(c, &p, end, &out->image) < 0) return -1;
        } else if (f == 19 && wt == 2) {
            if (read_string(c, &p, end, &out->handler) < 0) return -1;
        } else if ((f == 18 || f == 20) && wt == 2) {
            if (read_string(c, &p, end, &s) < 0) return -1;
        } else if (f == 2 && wt == 2) {
            if (read_map_field(c, &p, end, ITEM_DEPTH + 2, &key, &value) < 0) return -1;
        } else if (skip_field(c, f, wt, &p, end, ITEM_DEPTH + 1) < 0) {
            return -1;
        }
    }
    return r;
}

/* Container.labels: the three pod labels are kept. */
static int read_container_label(const ctx *c, const uint8_t **pp, const uint8_t *end,
                                container_fields *out) {
    span key, value;
    int r = read_map_field(c, pp, end, ITEM_DEPTH + 1, &key, &value);
    if (r <= 0) return r;
    if (span_is(key, LIT(UID_LABEL)))
        out->uid = value;
    else if (span_is(key, LIT(NAME_LABEL)))
        out->pod_name = value;
    else if (span_is(key, LIT(NAMESPACE_LABEL)))
        out->pod_namespace = value;
    return 0;
}

static int read_container(const ctx *c, span m, container_fields *out) {
    const uint8_t *p = m.p, *end = m.p + m.n;
    uint32_t f;
    int wt, r;
    span s, key, value;
    memset(out, 0, sizeof(*out));
    while ((r = next_tag(c, &p, end, &f, &wt)) > 0) {
        switch (f > 15 ? 0 : (f << 3) | (uint32_t)wt) { /* the tag: field and wire type */
        case TAG(1, 2):
            if (read_string(c, &p, end, &out->id) < 0) return -1;
            continue;
        case TAG(2, 2):
            if (read_string(c, &p, end, &out->sandbox) < 0) return -1;
            continue;
        case TAG(3, 2):
            if (read_bytes(c, &p, end, &s) < 0) return -1;
            out->has_metadata = 1;
            if (read_container_metadata(c, s, out) < 0) return -1;
            continue;
        case TAG(4, 2):
            if (read_bytes(c, &p, end, &s) < 0) return -1;
            out->has_image = 1;
            if (read_image_spec(c, s, out) < 0) return -1;
            continue;
        case TAG(5, 2):
            if (read_string(c, &p, end, &out->image_ref) < 0) return -1;
            continue;
        case TAG(8, 2):
            if (read_container_label(c, &p, end, out) < 0) return -1;
            continue;
        case TAG(9, 2):
            r = read_map_field(c, &p, end, ITEM_DEPTH + 1, &key, &value);
            if (r < 0) return -1;
            if (r > 0 && span_is(key, LIT(HASH_ANNOTATION))) out->hash = value;
            continue;
        case TAG(10, 2):
            if (read_string(c, &p, end, &out->image_id) < 0) return -1;
            continue;
        case TAG(6, 0):
            if (read_varint(c, &p, end, &out->state) < 0) return -1;
            continue;
        case TAG(7, 0):
            if (read_varint(c, &p, end, &out->created_at) < 0) return -1;
            continue;
        default:
            if (skip_field(c, f, wt, &p, end, ITEM_DEPTH) < 0) return -1;
        }
    }
    return r;
}

static PyObject *container_row(const container_fields *f, interner *t) {
    PyObject *values[CONTAINER_FIELD_COUNT] = {
        [CONTAINER_id] = own_str(f->id),
        [CONTAINER_pod_sandbox_id] = repeated_str(t, LAST_SANDBOX, f->sandbox),
        [CONTAINER_created_at] = PyLong_FromLongLong((long long)(int64_t)f->created_at),
        [CONTAINER_state] = PyLong_FromLong((long)(int32_t)(uint32_t)f->state),
        [CONTAINER_has_metadata] = new_bool(f->has_metadata),
        [CONTAINER_name] = repeated_str(t, LAST_NAME, f->name),
        [CONTAINER_attempt] = PyLong_FromUnsignedLong((unsigned long)(uint32_t)f->attempt),
        [CONTAINER_has_image] = new_bool(f->has_image),
        [CONTAINER_image] = repeated_str(t, LAST_IMAGE, f->image),
        [CONTAINER_runtime_handler] = shared_str(t, f->handler),
        [CONTAINER_image_ref] = repeated_str(t, LAST_REF, f->image_ref),
        [CONTAINER_image_id] = repeated_str(t, LAST_IMAGE_ID, f->image_id),
        [CONTAINER_pod_uid] = repeated_str(t, LAST_UID, f->uid),
        [CONTAINER_pod_name] = repeated_str(t, LAST_POD, f->pod_name),
        [CONTAINER_pod_namespace] = repeated_str(t, LAST_NAMESPACE, f->pod_namespace),
        [CONTAINER_hash] = own_str(f->hash),
    };
    return new_row(&CONTAINER_type, CONTAINER_FIELD_COUNT, values);
}

/* ---- labels: a sandbox's map, as Python's sorted(dict) of it ---- */

typedef struct {
    span key, value;
    size_t order; /* position in the listing: of equal keys the last one wins */
} label;

/* The labels of one sandbox; its buffer is reused from sandbox to sandbox of a listing. */
typedef struct {
    label *items;
    size_t n, cap;
} label_list;

static int label_list_add(label_list *labels, span key, span value) {
    if (labels->n == labels->cap) {
        size_t cap = labels->cap ? labels->cap * 2 : 64;
        if (cap > PY_SSIZE_T_MAX / sizeof(label)) {
            PyErr_NoMemory();
            return -1;
        }
        label *more = PyMem_Realloc(labels->items, cap * sizeof(label));
        if (more == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        labels->items = more;
        labels->cap = cap;
    }
    labels->items[labels->n] = (label){key, value, labels->n};
    labels->n++;
    return 0;
}

/* By key (UTF-8 bytes compare as their code points do, i.e. as Python's str), then by
 * position: a total order, so any sort gives the same result. */
static int label_order(const void *a, const void *b) {
    const label *x = a, *y = b;
    size_t n = x->key.n < y->key.n ? x->key.n : y->key.n;
    int order = memcmp(x->key.p, y->key.p, n);
    if (order != 0) return order;
    if (x->key.n != y->key.n) return x->key.n < y->key.n ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Sorted by key, each key once with its last value: O(n log n). */
static void sort_labels(label_list *labels) {
    if (labels->n < 2) return;
    qsort(labels->items, labels->n, sizeof(label), label_order);
    size_t kept = 0;
    for (size_t i = 0; i < labels->n; i++) {
        label *l = &labels->items[i];
        if (kept > 0 && span_is(labels->items[kept - 1].key, (const char *)l->key.p, l->key.n))
            kept--; /* a later entry of the same key replaces the earlier one */
        labels->items[kept++] = *l;
    }
    labels->n = kept;
}

static PyObject *labels_tuple(const label_list *labels, interner *t) {
    PyObject *pairs = PyTuple_New((Py_ssize_t)labels->n);
    if (pairs == NULL) return NULL;
    for (size_t i = 0; i < labels->n; i++) {
        PyObject *pair[2] = {shared_str(t, labels->items[i].key),
                             shared_str(t, labels->items[i].value)};
        PyObject *item = flat_tuple(2, pair);
        if (item == NULL) {
            Py_DECREF(pairs);
            return NULL;
        }
        PyTuple_SET_ITEM(pairs, (Py_ssize_t)i, item);
    }
    PyObject_GC_UnTrack(pairs);
    return pairs;
}

/* ---- PodSandbox (id 1, metadata 2, state 3, created_at 4, labels 5, annotations 6,
 *      runtime_handler 7); PodSandboxMetadata (name 1, uid 2, namespace 3, attempt 4) ---- */

typedef struct {
    span id, name, uid, namespace_;
    uint64_t state, created_at, attempt;
    int has_metadata;
} sandbox_fields;

static int read_sandbox_metadata(const ctx *c, span m, sandbox_fields *out) {
    const uint8_t *p = m.p, *end = m.p + m.n;
    uint32_t f;
    int wt, r;
    while ((r = next_tag(c, &p, end, &f, &wt)) > 0) {
        span *target = NULL;
        if (wt == 2 && f == 1) target = &out->name;
        if (wt == 2 && f == 2) target = &out->uid;
        if (wt == 2 && f == 3) target = &out->namespace_;
        if (target != NULL) {
            if (read_string(c, &p, end, target) < 0) return -1;
        } else if (wt == 0 && f == 4) {
            if (read_varint(c, &p, end, &out->attempt) < 0) return -1;
        } else if (skip_field(c, f, wt, &p, end, ITEM_DEPTH + 1) < 0) {
            return -1;
        }
    }
    return r;
}

/* PodSandbox.labels: the pod's own ones are kept, the kubelet's io.kubernetes.pod.* keys
 * left out, and so is CRI-O's io.kubernetes.container.name (=POD, its infra container's). */
static int read_sandbox_label(const ctx *c, const uint8_t **pp, const uint8_t *end,
                              label_list *labels) {
    span key, value;
    int r = read_map_field(c, pp, end, ITEM_DEPTH + 1, &key, &value);
    if (r <= 0) return r;
    if (key.n >= sizeof(POD_LABELS) - 1 && memcmp(key.p, LIT(POD_LABELS)) == 0) return 0;
    if (key.n == sizeof(INFRA_CONTAINER_LABEL) - 1 &&
        memcmp(key.p, LIT(INFRA_CONTAINER_LABEL)) == 0)
        return 0;
    return label_list_add(labels, key, value);
}

static int read_sandbox(const ctx *c, span m, sandbox_fields *out, label_list *labels) {
    const uint8_t *p = m.p, *end = m.p + m.n;
    uint32_t f;
    int wt, r;
    span s, key, value;
    memset(out, 0, sizeof(*out));
    labels->n = 0;
    while ((r = next_tag(c, &p, end, &f, &wt)) > 0) {
        switch (f > 15 ? 0 : (f << 3) | (uint32_t)wt) { /* the tag: field and wire type */
        case TAG(1, 2):
            if (read_string(c, &p, end, &out->id) < 0) return -1;
            continue;
        case TAG(2, 2):
            if (read_bytes(c, &p, end, &s) < 0) return -1;
            out->has_metadata = 1;
            if (read_sandbox_metadata(c, s, out) < 0) return -1;
            continue;
        case TAG(3, 0):
            if (read_varint(c, &p, end, &out->state) < 0) return -1;
            continue;
        case TAG(4, 0):
            if (read_varint(c, &p, end, &out->created_at) < 0) return -1;
            continue;
        case TAG(5, 2):
            if (read_sandbox_label(c, &p, end, labels) < 0) return -1;
            continue;
        case TAG(6, 2):
            if (read_map_field(c, &p, end, ITEM_DEPTH + 1, &key, &value) < 0) return -1;
            continue;
        case TAG(7, 2):
            if (read_string(c, &p, end, &s) < 0) return -1;
            continue;
        default:
            if (skip_field(c, f, wt, &p, end, ITEM_DEPTH) < 0) return -1;
        }
    }
    return r;
}

static PyObject *sandbox_row(const sandbox_fields *f, label_list *labels, interner *t) {
    sort_labels(labels);
    PyObject *values[SANDBOX_FIELD_COUNT] = {
        [SANDBOX_id] = own_str(f->id),
        [SANDBOX_created_at] = PyLong_FromLongLong((long long)(int64_t)f->created_at),
        [SANDBOX_state] = PyLong_FromLong((long)(int32_t)(uint32_t)f->state),
        [SANDBOX_has_metadata] = new_bool(f->has_metadata),
        [SANDBOX_name] = shared_str(t, f->name),
        [SANDBOX_uid] = own_str(f->uid),
        [SANDBOX_namespace] = shared_str(t, f->namespace_),
        [SANDBOX_attempt] = PyLong_FromUnsignedLong((unsigned long)(uint32_t)f->attempt),
        [SANDBOX_labels] = labels_tuple(labels, t),
    };
    return new_row(&SANDBOX_type, SANDBOX_FIELD_COUNT, values);
}

/* ---- the two responses: repeated items in field 1 ---- */

/* What one list answer's read needs besides the bytes. */
typedef struct {
    ctx c;
    interner strings;
    label_list labels;
    int containers; /* which answer: ListContainersResponse or ListPodSandboxResponse */
} listing;

static PyObject *read_item(listing *l, span item) {
    if (l->containers) {
        container_fields fields;
        if (read_container(&l->c, item, &fields) < 0) return NULL;
        return container_row(&fields, &l->strings);
    }
    sandbox_fields fields;
    if (read_sandbox(&l->c, item, &fields, &l->labels) < 0) return NULL;
    return sandbox_row(&fields, &l->labels, &l->strings);
}

/* One response's items (field 1 of either list response) appended to `rows`. */
static int scan(listing *l, const uint8_t *p, const uint8_t *end, PyObject *rows) {
    uint32_t f;
    int wt, r;
    span item;
    while ((r = next_tag(&l->c, &p, end, &f, &wt)) > 0) {
        if (f != 1 || wt != 2) {
            if (skip_field(&l->c, f, wt, &p, end, 0) < 0) return -1;
            continue;
        }
        if (read_bytes(&l->c, &p, end, &item) < 0) return -1;
        PyObject *row = read_item(l, item);
        if (row == NULL) return -1;
        int failed = PyList_Append(rows, row) < 0;
        Py_DECREF(row);
        if (failed) return -1;
    }
    return r;
}

static PyObject *read_list(PyObject *args, const char *what, int containers) {
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    listing l;
    memset(&l, 0, sizeof(l));
    l.c.start = data.buf;
    l.c.what = what;
    l.containers = containers;
    /* Everything built here is acyclic and the GIL is held throughout: no collection is
     * needed while the rows pile up (each one would walk them all again). */
    int collecting = PyGC_Disable();
    PyObject *rows = PyList_New(0);
    const uint8_t *start = data.buf;
    if (rows != NULL && scan(&l, start, start + data.len, rows) < 0) Py_CLEAR(rows);
    if (collecting) PyGC_Enable();
    interner_free(&l.strings);
    PyMem_Free(l.labels.items);
    PyBuffer_Release(&data);
    return rows;
}

static PyObject *sandboxes(PyObject *self, PyObject *args) {
    return read_list(args, "ListPodSandboxResponse", 0);
}

static PyObject *containers(PyObject *self, PyObject *args) {
    return read_list(args, "ListContainersResponse", 1);
}

/* -- item_cuts: where a list answer is cut between its items ----------------------------- */

#define LIST_ITEM_TAG 0x0A /* field 1, length-delimited: the items of both list answers */

/* The end of the item at `position` (its tag, length and bytes), or -1 when it is not a
 * field-1 length-delimited item wholly inside `size` bytes with a length of at most 5 bytes. */
static Py_ssize_t item_end(const uint8_t *data, Py_ssize_t size, Py_ssize_t position) {
    if (data[position] != LIST_ITEM_TAG) return -1;
    position++;
    uint64_t length = 0;
    for (int shift = 0;; shift += 7) {
        if (position >= size || shift > 7 * (MAX_LENGTH_BYTES - 1)) return -1;
        uint8_t byte = data[position++];
        length |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) break;
    }
    if (length > (uint64_t)(size - position)) return -1;
    return position + (Py_ssize_t)length;
}

/* The cuts of `size` bytes into pieces of at least `piece` bytes between whole items, into
 * `*cuts` (PyMem_RawMalloc'd, `*count` of them); 1 when found, 0 when the bytes are not plain
 * items, -1 when out of memory. Touches no Python object: runs with the GIL released. */
static int find_cuts(const uint8_t *data, Py_ssize_t size, Py_ssize_t piece, Py_ssize_t **cuts,
                     Py_ssize_t *count) {
    Py_ssize_t start = 0, position = 0, cap = 0;
    *cuts = NULL;
    *count = 0;
    while (position < size || start < size) {
        if (position < size) {
            position = item_end(data, size, position);
            if (position < 0) return 0;
            if (position - start < piece && position < size) continue;
        }
        if (*count == cap) {
            cap = cap ? 2 * cap : 64;
            Py_ssize_t *grown = PyMem_RawRealloc(*cuts, (size_t)cap * sizeof(Py_ssize_t));
            if (grown == NULL) return -1;
            *cuts = grown;
        }
        (*cuts)[(*count)++] = position;
        start = position;
    }
    return 1;
}

/* item_cuts(data, piece) -> list of int, or None: where convert.split_items cuts `data`
 * (the end of each piece). One pass over the items' tags and lengths with the GIL released
 * (the buffer is held meanwhile); nothing is copied. */
static PyObject *item_cuts(PyObject *self, PyObject *args) {
    Py_buffer data;
    Py_ssize_t piece;
    if (!PyArg_ParseTuple(args, "y*n", &data, &piece)) return NULL;
    if (data.len <= piece) {
        PyBuffer_Release(&data);
        Py_RETURN_NONE;
    }
    Py_ssize_t *cuts, count;
    int found;
    Py_BEGIN_ALLOW_THREADS
    found = find_cuts(data.buf, data.len, piece, &cuts, &count);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyObject *result = NULL;
    if (found < 0) PyErr_NoMemory();
    else if (found == 0) result = Py_NewRef(Py_None);
    else result = PyList_New(count);
    for (Py_ssize_t i = 0; found > 0 && result != NULL && i < count; i++) {
        PyObject *cut = PyLong_FromSsize_t(cuts[i]);
        if (cut == NULL) Py_CLEAR(result);
        else PyList_SET_ITEM(result, i, cut);
    }
    PyMem_RawFree(cuts);
    return result;
}

/* -- newest_first: an order computed without the GIL ------------------------------------ */

/* One item to order: its creation time, its ID's UTF-8 bytes, its position in the input. */
typedef struct {
    int64_t created;
    const char *id;
    Py_ssize_t id_len;
    Py_ssize_t position;
} dated;

/* Newest first, then by ID (UTF-8 bytes compare as code points do, i.e. as Python's str),
 * then by position: a total order, so qsort gives what a stable sort would. */
static int newest_order(const void *a, const void *b) {
    const dated *x = a, *y = b;
    if (x->created != y->created) return x->created > y->created ? -1 : 1;
    size_t n = (size_t)(x->id_len < y->id_len ? x->id_len : y->id_len);
    int order = memcmp(x->id, y->id, n);
    if (order != 0) return order;
    if (x->id_len != y->id_len) return x->id_len < y->id_len ? -1 : 1;
    return x->position < y->position ? -1 : x->position > y->position;
}

/* The items' keys read into `items` (the GIL held); -1 with an exception when one is not an
 * int of 64 bits or a str that has UTF-8. */
static int read_dated(PyObject *created, PyObject *ids, dated *items, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *when = PyTuple_GET_ITEM(created, i), *id = PyTuple_GET_ITEM(ids, i);
        if (!PyLong_Check(when) || !PyUnicode_Check(id)) {
            PyErr_SetString(PyExc_TypeError, "newest_first: created must be ints, ids strs");
            return -1;
        }
        long long value = PyLong_AsLongLong(when);
        if (value == -1 && PyErr_Occurred()) return -1;
        const char *text = PyUnicode_AsUTF8AndSize(id, &items[i].id_len);
        if (text == NULL) return -1;
        items[i].created = (int64_t)value;
        items[i].id = text;
        items[i].position = i;
    }
    return 0;
}

static PyObject *positions_of(const dated *items, Py_ssize_t n) {
    PyObject *order = PyList_New(n);
    for (Py_ssize_t i = 0; order != NULL && i < n; i++) {
        PyObject *position = PyLong_FromSsize_t(items[i].position);
        if (position == NULL) Py_CLEAR(order);
        else PyList_SET_ITEM(order, i, position);
    }
    return order;
}

/* newest_first(created, ids) -> the positions 0..n-1 in newest_order. The keys are copied
 * with the GIL held; the sort, the O(n log n) part, runs with it released, so a refresh's
 * ordering never keeps other threads (the server's event loop) waiting. The two tuples hold
 * the ID strings, whose UTF-8 the copies point into, until the sort is over. */
static PyObject *newest_first(PyObject *self, PyObject *args) {
    PyObject *created_arg, *ids_arg;
    if (!PyArg_ParseTuple(args, "OO", &created_arg, &ids_arg)) return NULL;
    PyObject *created = PySequence_Tuple(created_arg);
    PyObject *ids = created == NULL ? NULL : PySequence_Tuple(ids_arg);
    PyObject *order = NULL;
    dated *items = NULL;
    if (ids == NULL) goto done;
    Py_ssize_t n = PyTuple_GET_SIZE(created);
    if (PyTuple_GET_SIZE(ids) != n) {
        PyErr_SetString(PyExc_ValueError, "newest_first: as many ids as created times needed");
        goto done;
    }
    items = PyMem_Malloc(n > 0 ? (size_t)n * sizeof(dated) : 1);
    if (items == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (read_dated(created, ids, items, n) < 0) goto done;
    Py_BEGIN_ALLOW_THREADS
    qsort(items, (size_t)n, sizeof(dated), newest_order);
    Py_END_ALLOW_THREADS
    order = positions_of(items, n);
done:
    PyMem_Free(items);
    Py_XDECREF(ids);
    Py_XDECREF(created);
    return order;
}

/* -- event_fields, status_fields: the fields podcache uses of one event ------------------
 *
 * eventwire.py's reader of a ContainerEventResponse (or a PodSandboxStatusResponse) in C,
 * rule for rule: eventwire's docstring is the specification and its Python reader
 * (event_fields_python) the reference a test holds this one to, result for result and error
 * message for error message. It is not the list reader above: tags and lengths are varints of
 * up to 10 bytes, a field number is checked only as eventwire does, and only the strings it
 * reads are checked for UTF-8 (the labels and container statuses are skipped unread).
 *
 * Two phases. The scan (ev_*) touches no Python object: it records numbers and the offsets of
 * the strings read in an ev_reading. It runs with the GIL released when the input is at least
 * EV_RELEASE_BYTES of an immutable object (bytes, or a memoryview of bytes; its buffer is held
 * meanwhile); below that, or for a mutable buffer, the GIL stays held (releasing and retaking
 * it would cost more than the scan, and a mutable buffer must not change under the scan). The
 * strs are then built with the GIL held. Every cost is linear in the bytes; recursion only
 * into groups, at most MAX_DEPTH deep. */

#define EV_MAX_ADDITIONAL_IPS 8     /* eventwire.MAX_ADDITIONAL_IPS */
#define EV_MAX_CONTAINERS 16        /* eventwire.MAX_EVENT_CONTAINERS */
#define EV_RELEASE_BYTES (64 * 1024) /* smaller scans keep the GIL (above) */

enum { EV_VARINT = 0, EV_FIXED64 = 1, EV_LENGTH = 2, EV_START_GROUP = 3, EV_END_GROUP = 4 };

/* What is wrong with the bytes; the messages are eventwire's own. */
typedef enum {
    EV_VARINT_PAST_END,
    EV_VARINT_TOO_LONG,
    EV_BAD_FIELD_NUMBER,
    EV_BAD_WIRE_TYPE,
    EV_LENGTH_PAST_END,
    EV_FIXED_PAST_END,
    EV_END_WITHOUT_GROUP,
    EV_TOO_DEEP,
    EV_WRONG_GROUP_END,
    EV_GROUP_NOT_ENDED,
    EV_NOT_UTF8,
} ev_problem;

/* Each takes two unsigned long long arguments (unused ones are ignored). */
static const char *const EV_MESSAGES[] = {
    [EV_VARINT_PAST_END] = "a varint runs past the end of its message",
    [EV_VARINT_TOO_LONG] = "a varint is longer than 10 bytes",
    [EV_BAD_FIELD_NUMBER] = "a field number of %llu is not valid",
    [EV_BAD_WIRE_TYPE] = "wire type %llu does not exist",
    [EV_LENGTH_PAST_END] = "a length-delimited field runs past the end of its message",
    [EV_FIXED_PAST_END] = "a fixed-size field runs past the end of its message",
    [EV_END_WITHOUT_GROUP] = "a group end (field %llu) with no group open",
    [EV_TOO_DEEP] = "groups nested deeper than %llu",
    [EV_WRONG_GROUP_END] = "group %llu ended by the end of group %llu",
    [EV_GROUP_NOT_ENDED] = "group %llu is not ended",
};

/* One ContainerStatus of containers_statuses (eventwire.ContainerFields). */
typedef struct {
    int64_t created_at;
    int32_t state;
    uint32_t attempt;
    span id, name, image, image_ref;
} ev_container;

/* The fields read so far (the last of each wins; messages merge), or the first problem. */
typedef struct {
    int64_t created_at, sandbox_created_at;
    int32_t event_type, state, network_mode;
    span container_id, sandbox_id, uid, ip, name, namespace;
    span additional_ips[EV_MAX_ADDITIONAL_IPS];
    size_t additional_count, additional_dropped;
    ev_container containers[EV_MAX_CONTAINERS];
    size_t container_count, containers_dropped;
    ev_problem problem;
    uint64_t first, second; /* the numbers the problem's message names */
    const char *field_name; /* EV_NOT_UTF8: which field */
} ev_reading;

static int ev_fail(ev_reading *r, ev_problem problem, uint64_t first, uint64_t second) {
    r->problem = problem;
    r->first = first;
    r->second = second;
    return -1;
}

/* A varint of at most 10 bytes, its value the low 64 bits. */
static int ev_long_varint(ev_reading *r, const uint8_t **pp, const uint8_t *end,
                          uint64_t *out) {
    const uint8_t *p = *pp;
    uint64_t value = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end) return ev_fail(r, EV_VARINT_PAST_END, 0, 0);
        uint8_t byte = *p++;
        value |= (uint64_t)(byte & 0x7f) << shift; /* shift 63: only the lowest bit stays */
        if (byte < 0x80) {
            *pp = p;
            *out = value;
            return 0;
        }
    }
    return ev_fail(r, EV_VARINT_TOO_LONG, 0, 0);
}

static inline int ev_varint(ev_reading *r, const uint8_t **pp, const uint8_t *end,
                            uint64_t *out) {
    if (*pp < end && **pp < 0x80) {
        *out = *(*pp)++;
        return 0;
    }
    return ev_long_varint(r, pp, end, out);
}

/* A tag: field number 0 is an error but inside an unknown group; a key past 2^32-1 and wire
 * types 6 and 7 are errors. */
static int ev_tag(ev_reading *r, const uint8_t **pp, const uint8_t *end, int in_group,
                  uint32_t *field, int *wire) {
    uint64_t key;
    if (ev_varint(r, pp, end, &key) < 0) return -1;
    if ((key >> 3 == 0 && !in_group) || key > UINT32_MAX)
        return ev_fail(r, EV_BAD_FIELD_NUMBER, key >> 3, 0);
    if ((key & 7) >= 6) return ev_fail(r, EV_BAD_WIRE_TYPE, key & 7, 0);
    *field = (uint32_t)(key >> 3);
    *wire = (int)(key & 7);
    return 0;
}

/* A length-delimited value: *pp moves past it. */
static int ev_length(ev_reading *r, const uint8_t **pp, const uint8_t *end, span *out) {
    uint64_t size;
    if (ev_varint(r, pp, end, &size) < 0) return -1;
    if (size > (uint64_t)(end - *pp)) return ev_fail(r, EV_LENGTH_PAST_END, 0, 0);
    out->p = *pp;
    out->n = (size_t)size;
    *pp += size;
    return 0;
}

static int ev_skip_group(ev_reading *r, uint32_t group, const uint8_t **pp, const uint8_t *end,
                         int depth);

/* Past the value of a field not read; `depth`: the groups open around it. */
static int ev_skip(ev_reading *r, uint32_t field, int wire, const uint8_t **pp,
                   const uint8_t *end, int depth) {
    uint64_t ignored;
    span value;
    switch (wire) {
    case EV_VARINT:
        return ev_varint(r, pp, end, &ignored);
    case EV_LENGTH:
        return ev_length(r, pp, end, &value);
    case EV_FIXED64:
    case 5: {
        ptrdiff_t size = wire == EV_FIXED64 ? 8 : 4;
        if (end - *pp < size) return ev_fail(r, EV_FIXED_PAST_END, 0, 0);
        *pp += size;
        return 0;
    }
    case EV_END_GROUP:
        return ev_fail(r, EV_END_WITHOUT_GROUP, field, 0);
    default: /* EV_START_GROUP: ev_tag lets no other wire type through */
        return ev_skip_group(r, field, pp, end, depth + 1);
    }
}

static int ev_skip_group(ev_reading *r, uint32_t group, const uint8_t **pp, const uint8_t *end,
                         int depth) {
    if (depth > MAX_DEPTH) return ev_fail(r, EV_TOO_DEEP, MAX_DEPTH, 0);
    while (*pp < end) {
        uint32_t field;
        int wire;
        if (ev_tag(r, pp, end, 1, &field, &wire) < 0) return -1;
        if (wire == EV_END_GROUP) {
            if (field != group) return ev_fail(r, EV_WRONG_GROUP_END, group, field);
            return 0;
        }
        if (ev_skip(r, field, wire, pp, end, depth) < 0) return -1;
    }
    return ev_fail(r, EV_GROUP_NOT_ENDED, group, 0);
}

/* A string field read: it must be UTF-8. */
static int ev_text(ev_reading *r, span value, const char *field_name, span *out) {
    if (!utf8_ok(value.p, value.n)) {
        r->field_name = field_name;
        return ev_fail(r, EV_NOT_UTF8, 0, 0);
    }
    *out = value;
    return 0;
}

/* The last `wanted` field of wire type `wire_type` in message `m`: its value (a varint) or
 * span; 1 when found, 0 when absent. */
static int ev_one_field(ev_reading *r, span m, uint32_t wanted, int wire_type, uint64_t *value,
                        span *found) {
    const uint8_t *p = m.p, *end = m.p + m.n;
    int present = 0;
    while (p < end) {
        uint32_t field;
        int wire;
        if (ev_tag(r, &p, end, 0, &field, &wire) < 0) return -1;
        if (field != wanted || wire != wire_type) {
            if (ev_skip(r, field, wire, &p, end, 0) < 0) return -1;
            continue;
        }
        int failed = wire == EV_VARINT ? ev_varint(r, &p, end, value)
                                       : ev_length(r, &p, end, found);
        if (failed < 0) return -1;
        present = 1;
    }
    return present;
}

/* One PodIP of additional_ips: the first EV_MAX_ADDITIONAL_IPS kept, the rest counted (each
 * still read, as protobuf checks it). An entry without its ip (1) is "". */
static int ev_additional_ip(ev_reading *r, span m) {
    span ip = {m.p, 0};
    if (ev_one_field(r, m, 1, EV_LENGTH, NULL, &ip) < 0) return -1;
    if (r->additional_count < EV_MAX_ADDITIONAL_IPS)
        r->additional_ips[r->additional_count++] = ip;
    else
        r->additional_dropped++;
    return 0;
}

/* PodSandboxNetworkStatus: ip (1), additional_ips (2). */
static int ev_network(ev_reading *r, span m) {
    const uint8_t *p = m.p, *end = m.p + m.n;
    while (p < end) {
        uint32_t field;
        int wire;
        span value;
        if (ev_tag(r, &p, end, 0, &field, &wire) < 0) return -1;
        if ((field != 1 && field != 2) || wire != EV_LENGTH) {
            if (ev_skip(r, field, wire, &p, end, 0) < 0) return -1;
            continue;
        }
        if (ev_length(r, &p, end, &value) < 0) return -1;
        if (field == 1) r->ip = value; /* read loosely: not checked here */
        else if (ev_additional_ip(r, value) < 0) return -1;
    }
    return 0;
}

/* NamespaceOption (the `options` (2) of Namespace): network (1). */
static int ev_namespace_options(ev_reading *r, span m) {
    uint64_t mode;
    int found = ev_one_field(r, m, 1, EV_VARINT, &mode, NULL);
    if (found > 0) r->network_mode = (int32_t)(uint32_t)mode;
    return found < 0 ? -1 : 0;
}

/* The message fields `field` (length-delimited) of `m` handed to `read` in turn, the others
 * skipped: LinuxPodSandboxStatus -> namespaces (1), Namespace -> options (2),
 * PodSandboxMetadata's uid (2) through ev_uid. */
static int ev_each(ev_reading *r, span m, uint32_t wanted, int (*read)(ev_reading *, span)) {
    const uint8_t *p = m.p, *end = m.p + m.n;
    while (p < end) {
        uint32_t field;
        int wire;
        span value;
        if (ev_tag(r, &p, end, 0, &field, &wire) < 0) return -1;
        if (field != wanted || wire != EV_LENGTH) {
            if (ev_skip(r, field, wire, &p, end, 0) < 0) return -1;
        } else if (ev_length(r, &p, end, &value) < 0 || read(r, value) < 0) {
            return -1;
        }
    }
    return 0;
}

static int ev_namespaces(ev_reading *r, span m) {
    return ev_each(r, m, 2, ev_namespace_options);
}

static int ev_linux(ev_reading *r, span m) { return ev_each(r, m, 1, ev_namespaces); }

/* PodSandboxMetadata: name (1), uid (2), namespace (3). */
static int ev_metadata(ev_reading *r, span m) {
    const uint8_t *p = m.p, *end = m.p + m.n;
    while (p < end) {
        uint32_t field;
        int wire, failed;
        span value;
        if (ev_tag(r, &p, end, 0, &field, &wire) < 0) return -1;
        if (field < 1 || field > 3 || wire != EV_LENGTH) {
            if (ev_skip(r, field, wire, &p, end, 0) < 0) return -1;
            continue;
        }
        if (ev_length(r, &p, end, &value) < 0) return -1;
        if (field == 1) failed = ev_text(r, value, "pod_sandbox_status.metadata.name", &r->name);
        else if (field == 2) failed = ev_text(r, value, "pod_sandbox_status.metadata.uid", &r->uid);
        else failed = ev_text(r, value, "pod_sandbox_status.metadata.namespace", &r->namespace);
        if (failed < 0) return -1;
    }
    return 0;
}

/* ContainerMetadata (`message` 2): name (1), attempt (2, uint32); or ImageSpec (8): image (1). */
static int ev_named(ev_reading *r, span m, uint32_t message, ev_container *c) {
    const uint8_t *p = m.p, *end = m.p + m.n;
    while (p < end) {
        uint32_t field;
        int wire;
        uint64_t number;
        span value;
        if (ev_tag(r, &p, end, 0, &field, &wire) < 0) return -1;
        if (field == 1 && wire == EV_LENGTH) {
            if (ev_length(r, &p, end, &value) < 0) return -1;
            if (message == 2 ? ev_text(r, value, "containers_statuses.metadata.name", &c->name)
                             : ev_text(r, value, "containers_statuses.image.image", &c->image))
                return -1;
        } else if (field == 2 && wire == EV_VARINT && message == 2) {
            if (ev_varint(r, &p, end, &number) < 0) return -1;
            c->attempt = (uint32_t)number;
        } else if (ev_skip(r, field, wire, &p, end, 0) < 0) {
            return -1;
        }
    }
    return 0;
}

/* Reads one length-delimited field of a status message into `into`. */
typedef int (*ev_part_reader)(ev_reading *r, uint32_t field, span value, void *into);

/* A status message (a container's or a sandbox's): state (3) and created_at (4) are varints
 * stored in `state` and `created`; the length-delimited fields whose bit is set in `parts`
 * (bit n: field n) are read by `read_part`; every other field is skipped by its length. */
static inline int ev_status_fields(ev_reading *r, span m, int32_t *state, int64_t *created,
                                   uint32_t parts, ev_part_reader read_part, void *into) {
    const uint8_t *p = m.p, *end = m.p + m.n;
    while (p < end) {
        uint32_t field;
        int wire;
        uint64_t number;
        span value;
        if (ev_tag(r, &p, end, 0, &field, &wire) < 0) return -1;
        if ((field == 3 || field == 4) && wire == EV_VARINT) {
            if (ev_varint(r, &p, end, &number) < 0) return -1;
            if (field == 3) *state = (int32_t)(uint32_t)number;
            else *created = (int64_t)number;
            continue;
        }
        if (wire != EV_LENGTH || field >= 32 || !(parts & (UINT32_C(1) << field))) {
            if (ev_skip(r, field, wire, &p, end, 0) < 0) return -1;
            continue;
        }
        if (ev_length(r, &p, end, &value) < 0) return -1;
        if (read_part(r, field, value, into) < 0) return -1;
    }
    return 0;
}

#define EV_FIELDS4(a, b, c, d) \
    ((UINT32_C(1) << (a)) | (UINT32_C(1) << (b)) | (UINT32_C(1) << (c)) | (UINT32_C(1) << (d)))

/* ContainerStatus' id (1), metadata (2), image (8), image_ref (9). */
static int ev_container_part(ev_reading *r, uint32_t field, span value, void *into) {
    ev_container *c = into;
    if (field == 1) return ev_text(r, value, "containers_statuses.id", &c->id);
    if (field == 9) return ev_text(r, value, "containers_statuses.image_ref", &c->image_ref);
    return ev_named(r, value, field, c);
}

/* ContainerStatus: id (1), metadata (2), state (3), created_at (4), image (8), image_ref (9). */
static int ev_container_status(ev_reading *r, span m, ev_container *c) {
    return ev_status_fields(r, m, &c->state, &c->created_at, EV_FIELDS4(1, 2, 8, 9),
                            ev_container_part, c);
}

/* One of containers_statuses: kept while fewer than EV_MAX_CONTAINERS are, else read (and so
 * checked) and counted. */
static int ev_container_item(ev_reading *r, span m) {
    ev_container scratch;
    int kept = r->container_count < EV_MAX_CONTAINERS;
    ev_container *c = kept ? &r->containers[r->container_count] : &scratch;
    memset(c, 0, sizeof(*c));
    if (ev_container_status(r, m, c) < 0) return -1;
    if (kept) r->container_count++;
    else r->containers_dropped++;
    return 0;
}

/* PodSandboxStatus' id (1), metadata (2), network (5), linux (6). */
static int ev_sandbox_part(ev_reading *r, uint32_t field, span value, void *into) {
    (void)into;
    if (field == 1) return ev_text(r, value, "pod_sandbox_status.id", &r->sandbox_id);
    if (field == 2) return ev_metadata(r, value);
    if (field == 5) return ev_network(r, value);
    return ev_linux(r, value);
}

/* PodSandboxStatus: id (1), metadata (2), state (3), network (5), linux (6); its labels and
 * annotations (7, 8: most of its bytes) skipped by their lengths. */
static int ev_sandbox(ev_reading *r, span m) {
    return ev_status_fields(r, m, &r->state, &r->sandbox_created_at, EV_FIELDS4(1, 2, 5, 6),
                            ev_sandbox_part, NULL);
}

/* ContainerEventResponse: container_id (1), container_event_type (2), created_at (3),
 * pod_sandbox_status (4), containers_statuses (5). */
static int ev_event(ev_reading *r, span m) {
    const uint8_t *p = m.p, *end = m.p + m.n;
    while (p < end) {
        uint32_t field;
        int wire;
        uint64_t number;
        span value;
        if (ev_tag(r, &p, end, 0, &field, &wire) < 0) return -1;
        if ((field == 2 || field == 3) && wire == EV_VARINT) {
            if (ev_varint(r, &p, end, &number) < 0) return -1;
            if (field == 2) r->event_type = (int32_t)(uint32_t)number;
            else r->created_at = (int64_t)number;
        } else if ((field == 1 || field == 4 || field == 5) && wire == EV_LENGTH) {
            if (ev_length(r, &p, end, &value) < 0) return -1;
            if (field == 1 ? ev_text(r, value, "container_id", &r->container_id)
                : field == 4 ? ev_sandbox(r, value)
                             : ev_container_item(r, value))
                return -1;
        } else if (ev_skip(r, field, wire, &p, end, 0) < 0) {
            return -1;
        }
    }
    return 0;
}

/* PodSandboxStatusResponse: status (1), read as an event's sandbox status. */
static int ev_status(ev_reading *r, span m) { return ev_each(r, m, 1, ev_sandbox); }

/* A str of a span; `errors` NULL: checked UTF-8 already; "replace": read loosely. */
static PyObject *ev_str(span s, const char *errors) {
    if (s.n == 0) return PyUnicode_New(0, 0);
    return PyUnicode_DecodeUTF8((const char *)s.p, (Py_ssize_t)s.n, errors);
}

#define EV_FIELD_COUNT 15 /* eventwire.EventFields' */
#define EV_CONTAINER_FIELDS 7 /* eventwire.ContainerFields' */

/* One kept container status as the plain tuple eventwire.ContainerFields names. */
static PyObject *ev_container_tuple(const ev_container *c) {
    PyObject *values[EV_CONTAINER_FIELDS] = {
        ev_str(c->id, NULL),
        ev_str(c->name, NULL),
        PyLong_FromUnsignedLong(c->attempt),
        PyLong_FromLong(c->state),
        PyLong_FromLongLong(c->created_at),
        ev_str(c->image, NULL),
        ev_str(c->image_ref, NULL),
    };
    return flat_tuple(EV_CONTAINER_FIELDS, values); /* it drops them all if one is NULL */
}

/* The kept container statuses, a tuple of ev_container_tuple's. */
static PyObject *ev_containers(const ev_reading *r) {
    PyObject *items[EV_MAX_CONTAINERS];
    for (size_t i = 0; i < r->container_count; i++) {
        items[i] = ev_container_tuple(&r->containers[i]);
        if (items[i] == NULL) {
            for (size_t j = 0; j < i; j++) Py_DECREF(items[j]);
            return NULL;
        }
    }
    return flat_tuple((Py_ssize_t)r->container_count, items);
}

/* An instance of `type` (eventwire.EventFields, a tuple subclass) holding the fields read,
 * made as tuple.__new__ makes one: allocated, then filled. */
static PyObject *ev_fields(const ev_reading *r, PyTypeObject *type) {
    PyObject *ips[EV_MAX_ADDITIONAL_IPS];
    for (size_t i = 0; i < r->additional_count; i++)
        ips[i] = ev_str(r->additional_ips[i], "replace");
    PyObject *values[EV_FIELD_COUNT] = {
        PyLong_FromLong(r->event_type),
        ev_str(r->container_id, NULL),
        PyLong_FromLongLong(r->created_at),
        ev_str(r->sandbox_id, NULL),
        ev_str(r->uid, NULL),
        PyLong_FromLong(r->state),
        ev_str(r->ip, "replace"),
        flat_tuple((Py_ssize_t)r->additional_count, ips),
        PyLong_FromSize_t(r->additional_dropped),
        PyLong_FromLong(r->network_mode),
        ev_str(r->name, NULL),
        ev_str(r->namespace, NULL),
        PyLong_FromLongLong(r->sandbox_created_at),
        ev_containers(r),
        PyLong_FromSize_t(r->containers_dropped),
    };
    PyObject *fields = NULL;
    for (int i = 0; i < EV_FIELD_COUNT; i++) {
        if (values[i] == NULL) goto done;
    }
    fields = type->tp_alloc(type, EV_FIELD_COUNT);
    if (fields == NULL) goto done;
    for (int i = 0; i < EV_FIELD_COUNT; i++) PyTuple_SET_ITEM(fields, i, values[i]);
    return fields;
done:
    for (int i = 0; i < EV_FIELD_COUNT; i++) Py_XDECREF(values[i]);
    return NULL;
}

static PyObject *ev_raise(const ev_reading *r) {
    if (r->problem == EV_NOT_UTF8)
        return PyErr_Format(MalformedError, "%s is not UTF-8", r->field_name);
    return PyErr_Format(MalformedError, EV_MESSAGES[r->problem], (unsigned long long)r->first,
                        (unsigned long long)r->second);
}

/* Whether nothing can change the bytes of `data` while the GIL is released. */
static int ev_immutable(PyObject *data) {
    if (PyBytes_Check(data)) return 1;
    return PyMemoryView_Check(data) && PyMemoryView_GET_BASE(data) != NULL &&
           PyBytes_Check(PyMemoryView_GET_BASE(data));
}

/* The fields of the message in args[0] read by `read` (ev_event or ev_status), as an
 * instance of args[1], a tuple subclass. */
static PyObject *ev_read(PyObject *const *args, Py_ssize_t nargs, const char *name,
                         int (*read)(ev_reading *, span)) {
    if (nargs != 2) {
        return PyErr_Format(PyExc_TypeError, "%s takes 2 arguments (%zd given)", name, nargs);
    }
    PyObject *data = args[0], *type = args[1];
    if (!PyType_Check(type) || !PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type)) {
        return PyErr_Format(PyExc_TypeError, "%s: its fields type must be a tuple subclass",
                            name);
    }
    Py_buffer buffer;
    if (PyObject_GetBuffer(data, &buffer, PyBUF_SIMPLE) < 0) return NULL;
    ev_reading r;
    memset(&r, 0, sizeof(r));
    span whole = {buffer.buf, (size_t)buffer.len};
    int failed;
    if (buffer.len >= EV_RELEASE_BYTES && ev_immutable(data)) {
        Py_BEGIN_ALLOW_THREADS
        failed = read(&r, whole);
        Py_END_ALLOW_THREADS
    } else {
        failed = read(&r, whole);
    }
    PyObject *fields = failed < 0 ? ev_raise(&r) : ev_fields(&r, (PyTypeObject *)type);
    PyBuffer_Release(&buffer);
    return fields;
}

static PyObject *event_fields(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return ev_read(args, nargs, "event_fields", ev_event);
}

static PyObject *status_fields(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return ev_read(args, nargs, "status_fields", ev_status);
}

static PyMethodDef methods[] = {
    {"sandboxes", sandboxes, METH_VARARGS,
     "sandboxes(data) -> the items of a ListPodSandboxResponse (wire bytes) as SandboxRows."},
    {"containers", containers, METH_VARARGS,
     "containers(data) -> the items of a ListContainersResponse (wire bytes) as ContainerRows."},
    {"item_cuts", item_cuts, METH_VARARGS,
     "item_cuts(data, piece) -> the end of each piece of at least piece bytes the answer is "
     "cut into between its items, or None (see convert.split_items)."},
    {"newest_first", newest_first, METH_VARARGS,
     "newest_first(created, ids) -> positions ordered newest first, then by id, then by "
     "position (sorted with the GIL released)."},
    {"event_fields", (PyCFunction)(void (*)(void))event_fields, METH_FASTCALL,
     "event_fields(data, fields_type) -> the eventwire.EventFields (fields_type) of the "
     "ContainerEventResponse in data (see eventwire.py)."},
    {"status_fields", (PyCFunction)(void (*)(void))status_fields, METH_FASTCALL,
     "status_fields(data, fields_type) -> the eventwire.EventFields (fields_type) of the "
     "PodSandboxStatusResponse in data (see eventwire.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "podcache.cri._wire",
    "The CRI list answers and events read from their wire bytes (see convert.py, eventwire.py).",
    -1, methods,
    NULL, NULL, NULL, NULL,
};

/* The interner's seed: Python's hash of a constant, which its per-process secret keys. */
static int seed_hash(void) {
    PyObject *text = PyBytes_FromString("podcache.cri._wire");
    if (text == NULL) return -1;
    Py_hash_t h = PyObject_Hash(text);
    Py_DECREF(text);
    if (h == -1) return -1;
    hash_seed = (uint64_t)h;
    return 0;
}

static int add_type(PyObject *m, PyTypeObject *type, const char *name) {
    if (PyType_Ready(type) < 0) return -1;
    return PyModule_AddObjectRef(m, name, (PyObject *)type);
}

PyMODINIT_FUNC PyInit__wire(void) {
    if (seed_hash() < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    MalformedError = PyErr_NewExceptionWithDoc(
        "podcache.cri._wire.MalformedError",
        "The bytes are not a valid message of podcache's api.proto.", PyExc_ValueError, NULL);
    if (MalformedError == NULL || PyModule_AddObjectRef(m, "MalformedError", MalformedError) < 0 ||
        add_type(m, &SANDBOX_type, "SandboxRow") < 0 ||
        add_type(m, &CONTAINER_type, "ContainerRow") < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
