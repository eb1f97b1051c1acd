/* podcache.cri._wire: the two CRI list answers read straight from their protobuf wire bytes.
 *
 * Why: a refresh at node scale spends most of its time reading fields out of decoded upb
 * messages (every read allocates a wrapper or a string). This reads only the fields the
 * kubelet's GetPods uses, in one pass over the bytes, and hands Python one flat tuple per item.
 * The kubelet's rules themselves stay in Python (convert.py); this file knows the wire format
 * and podcache's api.proto subset, nothing else.
 *
 * It accepts and rejects what upb does with the same .proto: wire types as declared or else
 * the field is unknown and skipped; unknown fields skipped (groups too); a submessage listed
 * twice is merged (the last value of each field wins); map entries with a missing key or
 * value mean ""; a repeated map key keeps the last value; every string field that api.proto
 * declares must be valid UTF-8, read or not; truncated or overlong data is an error.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 100

typedef struct {
    const uint8_t *p;
    size_t n;
    int set;
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

static int read_long_varint(const ctx *c, const uint8_t **pp, const uint8_t *end,
                            uint64_t *out);

/* Most varints (tags, lengths, states) are one byte: that case inline, the rest out of line. */
static inline int read_varint(const ctx *c, const uint8_t **pp, const uint8_t *end,
                              uint64_t *out) {
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) {
        *out = *p;
        *pp = p + 1;
        return 0;
    }
    return read_long_varint(c, pp, end, out);
}

static int read_long_varint(const ctx *c, const uint8_t **pp, const uint8_t *end,
                            uint64_t *out) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end) return fail(c, p, "truncated varint");
        uint8_t b = *p++;
        if (i == 9 && b > 1) return fail(c, p - 1, "varint overflows 64 bits");
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *pp = p;
            *out = v;
            return 0;
        }
    }
    return fail(c, p, "varint longer than 10 bytes");
}

/* A length-delimited payload: *pp moves past it. */
static int read_bytes(const ctx *c, const uint8_t **pp, const uint8_t *end, span *out) {
    uint64_t len;
    const uint8_t *at = *pp;
    if (read_varint(c, pp, end, &len) < 0) return -1;
    if (len > (uint64_t)(end - *pp)) return fail(c, at, "length runs past the end");
    out->p = *pp;
    out->n = (size_t)len;
    out->set = 1;
    *pp += len;
    return 0;
}

static int skip_field(const ctx *c, uint32_t field, int wt, const uint8_t **pp,
                      const uint8_t *end, int depth);

/* Skip a group's fields up to its end tag (same field number). */
static int skip_group(const ctx *c, uint32_t field, const uint8_t **pp, const uint8_t *end,
                      int depth) {
    if (depth > MAX_DEPTH) return fail(c, *pp, "nested too deeply");
    while (*pp < end) {
        uint64_t tag;
        const uint8_t *at = *pp;
        if (read_varint(c, pp, end, &tag) < 0) return -1;
        uint32_t f = (uint32_t)(tag >> 3);
        int wt = (int)(tag & 7);
        if (tag >> 32 || f == 0) return fail(c, at, "bad field number");
        if (wt == 4) {
            if (f != field) return fail(c, at, "mismatched end of group");
            return 0;
        }
        if (skip_field(c, f, wt, pp, end, depth + 1) < 0) return -1;
    }
    return fail(c, *pp, "group without an end");
}

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
        return skip_group(c, field, pp, end, depth);
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

/* The next tag; 1 when one was read, 0 at the end. */
static int next_tag(const ctx *c, const uint8_t **pp, const uint8_t *end, uint32_t *field,
                    int *wt) {
    if (*pp >= end) return 0;
    uint64_t tag;
    const uint8_t *at = *pp;
    if (read_varint(c, pp, end, &tag) < 0) return -1;
    if (tag >> 32 || (tag >> 3) == 0) return fail(c, at, "bad field number");
    *field = (uint32_t)(tag >> 3);
    *wt = (int)(tag & 7);
    return 1;
}

/* One map<string, string> entry: key 1, value 2 (both "" when missing). */
static int read_entry(const ctx *c, span entry, span *key, span *value) {
    const uint8_t *p = entry.p, *end = entry.p + entry.n;
    uint32_t f;
    int wt, r;
    key->set = value->set = 0;
    key->n = value->n = 0;
    key->p = value->p = entry.p;
    while ((r = next_tag(c, &p, end, &f, &wt)) > 0) {
        if (f == 1 && wt == 2) {
            if (read_string(c, &p, end, key) < 0) return -1;
        } else if (f == 2 && wt == 2) {
            if (read_string(c, &p, end, value) < 0) return -1;
        } else if (skip_field(c, f, wt, &p, end, 0) < 0) {
            return -1;
        }
    }
    return r;
}

static int span_less(span a, span b) {
    int order = memcmp(a.p, b.p, a.n < b.n ? a.n : b.n);
    return order < 0 || (order == 0 && a.n < b.n);
}

static int span_is(span s, const char *text, size_t n) {
    return s.n == n && memcmp(s.p, text, n) == 0;
}

/* Strings repeat across a node's items (images, names, namespaces, label keys): each distinct
 * byte string becomes one str object. An open-addressing table keyed by the raw bytes, one per
 * list answer, answers repeats without building or hashing a str. */
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
    LAST_SITES
};

typedef struct {
    intern_slot *slots;
    size_t cap, used;
    intern_slot last[LAST_SITES]; /* borrowed: the table holds the references */
} interner;

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL ^ n;
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
 * returned). Its items are strs, ints, bools and such tuples only, which the cycle collector
 * never needs to see: it is untracked, like CPython untracks such tuples itself. */
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

/* ---- Container (api.proto: id 1, pod_sandbox_id 2, metadata 3, image 4, image_ref 5,
 *      state 6, created_at 7, labels 8, annotations 9, image_id 10) ---- */

#define UID_LABEL "io.kubernetes.pod.uid"
#define NAME_LABEL "io.kubernetes.pod.name"
#define NAMESPACE_LABEL "io.kubernetes.pod.namespace"
#define HASH_ANNOTATION "io.kubernetes.container.hash"
#define POD_LABELS "io.kubernetes.pod."
#define LIT(s) s, sizeof(s) - 1
#define TAG(field, wire_type) (((field) << 3) | (wire_type))

typedef struct {
    span id, name, image, handler, image_ref, image_id, uid, pod_name, pod_namespace, hash;
    uint64_t state, created_at;
    int has_metadata, has_image;
} container_fields;

static int read_container_metadata(const ctx *c, span m, container_fields *out) {
    const uint8_t *p = m.p, *end = m.p + m.n;
    uint32_t f;
    int wt, r;
    while ((r = next_tag(c, &p, end, &f, &wt)) > 0) {
        if (f == 1 && wt == 2) {
            if (read_string(c, &p, end, &out->name) < 0) return -1;
        } else if (skip_field(c, f, wt, &p, end, 0) < 0) {
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
            if (read_bytes(c, &p, end, &s) < 0 || read_entry(c, s, &key, &value) < 0) return -1;
        } else if (skip_field(c, f, wt, &p, end, 0) < 0) {
            return -1;
        }
    }
    return r;
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
            if (read_string(c, &p, end, &s) < 0) return -1;
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
            if (read_bytes(c, &p, end, &s) < 0 || read_entry(c, s, &key, &value) < 0) return -1;
            if (span_is(key, LIT(UID_LABEL)))
                out->uid = value;
            else if (span_is(key, LIT(NAME_LABEL)))
                out->pod_name = value;
            else if (span_is(key, LIT(NAMESPACE_LABEL)))
                out->pod_namespace = value;
            continue;
        case TAG(9, 2):
            if (read_bytes(c, &p, end, &s) < 0 || read_entry(c, s, &key, &value) < 0) return -1;
            if (span_is(key, LIT(HASH_ANNOTATION))) out->hash = value;
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
            if (skip_field(c, f, wt, &p, end, 0) < 0) return -1;
        }
    }
    return r;
}

/* The item as convert.py reads it: (id, created_at, state, has_metadata, name, has_image,
 * image, runtime_handler, image_ref, image_id, pod uid label, pod name label, pod namespace
 * label, hash annotation); absent strings are "". */
static PyObject *container_row(const container_fields *f, interner *t) {
    PyObject *items[14] = {
        own_str(f->id),
        PyLong_FromLongLong((long long)(int64_t)f->created_at),
        PyLong_FromLong((long)(int32_t)(uint32_t)f->state),
        new_bool(f->has_metadata),
        repeated_str(t, LAST_NAME, f->name),
        new_bool(f->has_image),
        repeated_str(t, LAST_IMAGE, f->image),
        shared_str(t, f->handler),
        repeated_str(t, LAST_REF, f->image_ref),
        repeated_str(t, LAST_IMAGE_ID, f->image_id),
        repeated_str(t, LAST_UID, f->uid),
        repeated_str(t, LAST_POD, f->pod_name),
        repeated_str(t, LAST_NAMESPACE, f->pod_namespace),
        own_str(f->hash),
    };
    return flat_tuple(14, items);
}

/* ---- PodSandbox (id 1, metadata 2, state 3, created_at 4, labels 5, annotations 6,
 *      runtime_handler 7); PodSandboxMetadata (name 1, uid 2, namespace 3, attempt 4) ---- */

typedef struct {
    span id, name, uid, namespace_;
    uint64_t state, created_at;
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
        } else if (skip_field(c, f, wt, &p, end, 0) < 0) {
            return -1;
        }
    }
    return r;
}

#define MAX_LABELS 4096

/* (id, created_at, state, has_metadata, name, uid, namespace, labels): labels are the pod's
 * own (key, value) pairs, sorted by key, each key with its last value as a map keeps them. */
static PyObject *read_sandbox_row(const ctx *c, span m, interner *t) {
    const uint8_t *p = m.p, *end = m.p + m.n;
    uint32_t f;
    int wt, r;
    span s, key, value;
    sandbox_fields out;
    span keys[64], values[64];
    span *label_keys = keys, *label_values = values;
    size_t n_labels = 0, cap_labels = 64;
    PyObject *row = NULL;
    memset(&out, 0, sizeof(out));
    while ((r = next_tag(c, &p, end, &f, &wt)) > 0) {
        if (wt == 2 && f == 1) {
            if (read_string(c, &p, end, &out.id) < 0) goto done;
        } else if (wt == 2 && f == 2) {
            if (read_bytes(c, &p, end, &s) < 0) goto done;
            out.has_metadata = 1;
            if (read_sandbox_metadata(c, s, &out) < 0) goto done;
        } else if (wt == 0 && f == 3) {
            if (read_varint(c, &p, end, &out.state) < 0) goto done;
        } else if (wt == 0 && f == 4) {
            if (read_varint(c, &p, end, &out.created_at) < 0) goto done;
        } else if (wt == 2 && f == 5) {
            if (read_bytes(c, &p, end, &s) < 0 || read_entry(c, s, &key, &value) < 0) goto done;
            size_t i = 0;
            while (i < n_labels && !(label_keys[i].n == key.n &&
                                     memcmp(label_keys[i].p, key.p, key.n) == 0))
                i++;
            if (i == n_labels) {
                if (n_labels == MAX_LABELS) {
                    fail(c, s.p, "more than 4096 labels on one sandbox");
                    goto done;
                }
                if (n_labels == cap_labels) {
                    size_t cap = cap_labels * 4;
                    span *more_keys = PyMem_Malloc(cap * sizeof(span));
                    span *more_values = PyMem_Malloc(cap * sizeof(span));
                    if (more_keys == NULL || more_values == NULL) {
                        PyMem_Free(more_keys);
                        PyMem_Free(more_values);
                        PyErr_NoMemory();
                        goto done;
                    }
                    memcpy(more_keys, label_keys, n_labels * sizeof(span));
                    memcpy(more_values, label_values, n_labels * sizeof(span));
                    if (label_keys != keys) {
                        PyMem_Free(label_keys);
                        PyMem_Free(label_values);
                    }
                    label_keys = more_keys;
                    label_values = more_values;
                    cap_labels = cap;
                }
                label_keys[n_labels++] = key;
            }
            label_values[i] = value;
        } else if (wt == 2 && f == 6) {
            if (read_bytes(c, &p, end, &s) < 0 || read_entry(c, s, &key, &value) < 0) goto done;
        } else if (wt == 2 && f == 7) {
            if (read_string(c, &p, end, &s) < 0) goto done;
        } else if (skip_field(c, f, wt, &p, end, 0) < 0) {
            goto done;
        }
    }
    if (r < 0) goto done;
    /* Sorted by key: UTF-8 bytes compare as their code points do, i.e. as Python's str. */
    for (size_t i = 1; i < n_labels; i++) {
        span k = label_keys[i], v = label_values[i];
        size_t j = i;
        while (j > 0 && span_less(k, label_keys[j - 1])) {
            label_keys[j] = label_keys[j - 1];
            label_values[j] = label_values[j - 1];
            j--;
        }
        label_keys[j] = k;
        label_values[j] = v;
    }
    /* The pod's own labels: the kubelet's io.kubernetes.pod.* keys (contiguous once sorted)
     * are left out. */
    size_t kept = 0;
    for (size_t i = 0; i < n_labels; i++) {
        span k = label_keys[i];
        if (k.n >= sizeof(POD_LABELS) - 1 && memcmp(k.p, LIT(POD_LABELS)) == 0) continue;
        label_keys[kept] = k;
        label_values[kept++] = label_values[i];
    }
    PyObject *labels = PyTuple_New((Py_ssize_t)kept);
    if (labels == NULL) goto done;
    for (size_t i = 0; i < kept; i++) {
        PyObject *pair[2] = {shared_str(t, label_keys[i]), shared_str(t, label_values[i])};
        PyObject *item = flat_tuple(2, pair);
        if (item == NULL) {
            Py_DECREF(labels);
            goto done;
        }
        PyTuple_SET_ITEM(labels, (Py_ssize_t)i, item);
    }
    PyObject_GC_UnTrack(labels);
    PyObject *items[8] = {
        own_str(out.id),
        PyLong_FromLongLong((long long)(int64_t)out.created_at),
        PyLong_FromLong((long)(int32_t)(uint32_t)out.state),
        new_bool(out.has_metadata),
        shared_str(t, out.name),
        own_str(out.uid),
        shared_str(t, out.namespace_),
        labels,
    };
    row = flat_tuple(8, items);
done:
    if (label_keys != keys) {
        PyMem_Free(label_keys);
        PyMem_Free(label_values);
    }
    return row;
}

/* ---- the two responses: repeated items in field 1 ---- */

/* One response's items (field 1 of either list response) appended to `rows`. */
static int scan(const char *what, const uint8_t *p, size_t n, interner *table, int containers,
                PyObject *rows) {
    const uint8_t *end = p + n;
    ctx c = {p, what};
    uint32_t f;
    int wt, r;
    span item;
    container_fields fields;
    while ((r = next_tag(&c, &p, end, &f, &wt)) > 0) {
        if (f != 1 || wt != 2) {
            if (skip_field(&c, f, wt, &p, end, 0) < 0) return -1;
            continue;
        }
        if (read_bytes(&c, &p, end, &item) < 0) return -1;
        PyObject *row;
        if (containers) {
            if (read_container(&c, item, &fields) < 0) return -1;
            row = container_row(&fields, table);
        } else {
            row = read_sandbox_row(&c, item, table);
        }
        if (row == NULL) return -1;
        int failed = PyList_Append(rows, row) < 0;
        Py_DECREF(row);
        if (failed) return -1;
    }
    return r;
}

static PyObject *read_list(PyObject *args, const char *what, int containers) {
    Py_buffer data;
    interner table;
    memset(&table, 0, sizeof(table));
    if (!PyArg_ParseTuple(args, "y*", &data)) return NULL;
    /* Everything built here is acyclic and the GIL is held throughout: no collection is
     * needed while the rows pile up (each one would walk them all again). */
    int collecting = PyGC_Disable();
    PyObject *rows = PyList_New(0);
    if (rows != NULL && scan(what, data.buf, (size_t)data.len, &table, containers, rows) < 0)
        Py_CLEAR(rows);
    if (collecting) PyGC_Enable();
    interner_free(&table);
    PyBuffer_Release(&data);
    return rows;
}

static PyObject *sandboxes(PyObject *self, PyObject *args) {
    return read_list(args, "ListPodSandboxResponse", 0);
}

static PyObject *containers(PyObject *self, PyObject *args) {
    return read_list(args, "ListContainersResponse", 1);
}

static PyMethodDef methods[] = {
    {"sandboxes", sandboxes, METH_VARARGS,
     "sandboxes(data) -> the items of a ListPodSandboxResponse (wire bytes) as flat tuples."},
    {"containers", containers, METH_VARARGS,
     "containers(data) -> the items of a ListContainersResponse (wire bytes) as flat tuples."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "podcache.cri._wire",
    "The CRI list answers read from their wire bytes (see convert.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__wire(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    MalformedError = PyErr_NewExceptionWithDoc(
        "podcache.cri._wire.MalformedError",
        "The bytes are not a valid message of podcache's api.proto.", PyExc_ValueError, NULL);
    if (MalformedError == NULL || PyModule_AddObjectRef(m, "MalformedError", MalformedError) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
