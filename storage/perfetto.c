/* Perfetto's native trace (<host>.pftrace, for ui.perfetto.dev): a
 * sequence of TracePackets, each packed with protobuf-c and written as
 * field 1 of a Trace as soon as it is made, so memory grows with the
 * number of tracks, names, frames and stacks, never with the session.
 *
 * Clock: event times are the host's CLOCK_MONOTONIC, and packets say so
 * (timestamp_clock_id 3; from the first packet that clears the
 * sequence's state on, through its trace_packet_defaults).  A
 * ClockSnapshot comes first and ties REALTIME (monotonic + the session's
 * wall offset) to it, so the UI shows wall time.  It also gives BOOTTIME,
 * the trace's own time base, as equal to MONOTONIC: an approximation that
 * only ignores time the host spent suspended before the session (nothing
 * within it moves), and keeps trace times equal to the session's host
 * times to the ns.
 *
 * All packets are on one sequence.  Event names, categories, annotation
 * names, function names, modules, frames and callstacks are interned on
 * it, iids from 1, each in the packet that first uses it.  The first
 * packet that uses interned ids clears the sequence's state (flags
 * CLEARED | NEEDS); later ones that use them say they need it.
 *
 * Tracks, grouped as asked (enum rp_perfetto_grouping).  process, the
 * default:
 *
 *   process (pid)              ProcessDescriptor, and its counters
 *     thread (pid, tid)        ThreadDescriptor; annotation ranges and
 *                              instants from the host ring, drops
 *       "<device>"             the thread's ranges recorded on a device
 *                              ring (ranges match per ring, so the rings
 *                              do not nest into each other)
 *       "<thread> runtime API" its API calls: they come from a device
 *                              ring too, so nothing makes them nest with
 *                              its ranges (a range cut at the window's
 *                              end may end inside one)
 *   "<host>", "GPU 0", ...     a track per ring: its counters and pid 0
 *     "Stream 7"               GPU activity, per device and stream
 *   cpu_util, ...              host counters of pid 0: global
 *
 * device: the ring that recorded the events first, so that the API calls
 * and ranges a device recorded sit next to its streams:
 *
 *   "<host>", "GPU 0", ...     a track per ring: its counters and pid 0
 *     "trainer 4242"           a process the ring holds events of, and
 *                              its counters
 *       "main 4242/4242"       its thread's ranges, instants and drops
 *                              recorded on the ring
 *         "<thread> runtime API"  the thread's API calls the ring holds
 *     "Stream 7"               GPU activity, per device and stream
 *
 * thread: no process tracks:
 *
 *   "main 4242/4242"           a thread track as in process, with its
 *     "<device>", "<thread> runtime API" children
 *   "<host>", "GPU 0", ...     a track per ring, as in process
 *     "Stream 7"
 *   cpu_util, ...              counters of pid 0, and a process's as
 *                              "<counter> <pid>": global
 *
 * Perfetto keeps a track that describes a process or a thread in that
 * process's group whatever its parent, so device and thread name those
 * tracks instead: trace processor then ties their slices to no thread
 * (CPU samples keep their pid and tid).
 *
 * Work that overlaps on one stream or one thread's API track (which a
 * track cannot show: slices must nest) goes to a further lane of it,
 * "Stream 7 (2)".  Each track is described in a packet before the first
 * that uses it. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perfetto.pb-c.h"
#include "table.h"
#include "writers.h"

typedef Perfetto__Protos__TracePacket Packet;
typedef Perfetto__Protos__TrackEvent TrackEvent;
typedef Perfetto__Protos__TrackDescriptor TrackDescriptor;
typedef Perfetto__Protos__DebugAnnotation Annotation;
typedef Perfetto__Protos__InternedData InternedData;
typedef Perfetto__Protos__InternedString InternedString;

/* 1 is the tracing service's own sequence in recorded traces. */
#define SEQUENCE_ID 2
#define CLOCK_REALTIME_ID 1
#define CLOCK_MONOTONIC_ID 3
#define CLOCK_BOOTTIME_ID 6
#define SEQ_CLEARED PERFETTO__PROTOS__TRACE_PACKET__SEQUENCE_FLAGS__SEQ_INCREMENTAL_STATE_CLEARED
#define SEQ_NEEDS PERFETTO__PROTOS__TRACE_PACKET__SEQUENCE_FLAGS__SEQ_NEEDS_INCREMENTAL_STATE
#define SLICE_BEGIN PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN
#define SLICE_END PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_END
#define INSTANT PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_INSTANT
#define COUNTER PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_COUNTER
#define DATA_CLOCKS PERFETTO__PROTOS__TRACE_PACKET__DATA_CLOCK_SNAPSHOT
#define DATA_EVENT PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_EVENT
#define DATA_TRACK PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_DESCRIPTOR
#define DATA_SAMPLE PERFETTO__PROTOS__TRACE_PACKET__DATA_PERF_SAMPLE

#define OUT_CHUNK (256 * 1024)
#define NAME_MAX_LEN 512
/* Frames, function names or modules one packet can define: a sample's. */
#define PENDING_MAX RP_STACK_MAX

enum category { CAT_ANNOTATION, CAT_KERNEL, CAT_MEMCPY, CAT_MEMSET, CAT_API, CAT_RINGPROF,
	       CAT_XLA, NCATS };
static const char *const category_names[NCATS] = {
	"annotation", "gpu_kernel", "gpu_memcpy", "gpu_memset", "runtime_api", "ringprof", "xla",
};

enum annotation { AN_CORRELATION, AN_BYTES, AN_STREAM, AN_DEVICE, AN_COUNT, AN_TRUNCATED,
		  AN_HLO_OP, AN_HLO_MODULE, AN_PROGRAM_ID, AN_FLOPS, AN_BYTES_ACCESSED, AN_LINE,
		  AN_GRID, AN_BLOCK, AN_REGISTERS, AN_STATIC_SHARED, AN_DYNAMIC_SHARED, NANNOTS };
static const char *const annotation_names[NANNOTS] = {
	"correlation", "bytes", "stream", "device", "count", "truncated",
	"hlo_op", "hlo_module", "program_id", "flops", "bytes_accessed", "line",
	"grid", "block", "registers_per_thread", "static_shared_memory", "dynamic_shared_memory",
};
/* GPU work's: device, stream, correlation, bytes and a launch
 * configuration (5), which only kernels have but a producer may claim. */
#define ANNOTS_MAX 9

/* A string interned on the sequence (or, for counter names, only used
 * as a key): iid from 1, in the order first seen. */
struct str_entry {
	char *s; /* NULL: empty slot */
	uint64_t hash, iid;
};

struct str_table {
	struct str_entry *e;
	size_t mask, n;
};

enum track_kind { TK_PROCESS = 1, TK_THREAD, TK_SCOPE, TK_API, TK_DEVICE, TK_STREAM, TK_COUNTER,
		  TK_XLA };

/* What a track is for; the fields a kind does not use stay 0.  ring: the
 * ring's index; gpu, index: the device and stream of GPU activity;
 * index: a counter's name (its counter_names iid). */
struct track_key {
	uint32_t kind, ring, gpu, pid, tid, index, lane;
};

struct track {
	struct track_key k;
	uint64_t uuid;       /* 0: empty slot */
	uint64_t busy_until; /* lanes: the latest end of work on it */
};

/* A frame by the address looked up (pid 0 for kernel frames, which are
 * the same in every process). */
struct frame_entry {
	uint64_t addr, iid; /* iid 0: empty slot */
	uint32_t pid;
	bool kernel;
};

struct stack_entry {
	uint64_t hash, iid; /* iid 0: empty slot */
	uint64_t *frames;   /* frame iids, root first */
	size_t n;
};

/* The interned data a packet defines, wired once into data. */
struct pending {
	InternedData data;
	Perfetto__Protos__EventName names[1], *name_p[1];
	Perfetto__Protos__EventCategory cats[1], *cat_p[1];
	Perfetto__Protos__DebugAnnotationName annots[ANNOTS_MAX], *annot_p[ANNOTS_MAX];
	InternedString funcs[PENDING_MAX], *func_p[PENDING_MAX];
	InternedString paths[PENDING_MAX], *path_p[PENDING_MAX];
	Perfetto__Protos__Mapping maps[PENDING_MAX], *map_p[PENDING_MAX];
	uint64_t map_paths[PENDING_MAX];
	Perfetto__Protos__Frame frames[PENDING_MAX], *frame_p[PENDING_MAX];
	Perfetto__Protos__Callstack stacks[1], *stack_p[1];
};

struct device_info {
	char label[192];  /* "synthhost", "GPU 0 (GPU-8f6e...)", "NeuronCore 2", "dev7" */
	const char *kind; /* "GPU", "TPU", "NeuronCore", "device": names other devices' streams */
	long number;      /* N of GPU, TPU, Neuron core N, else -1 */
	bool host;
};

struct pf {
	struct rp_reader *r;
	struct rp_symbolizer *sym;
	FILE *out;
	struct rp_err *err;
	enum rp_perfetto_grouping grouping;
	uint64_t start;
	struct device_info *devices;
	bool cleared;     /* the sequence's state was cleared */
	Perfetto__Protos__TracePacketDefaults defaults;
	uint64_t next_uuid;

	struct str_table names, functions, modules, counter_names;
	uint64_t cat_iid[NCATS], annot_iid[NANNOTS]; /* 0: not interned yet */
	uint64_t ncat_iids, nannot_iids;
	struct track *tracks;
	size_t tracks_mask, ntracks;
	struct frame_entry *frames;
	size_t frames_mask, nframes;
	struct stack_entry *stacks;
	size_t stacks_mask, nstacks;
	uint64_t stack_ids[RP_STACK_MAX];

	struct pending pend;
	uint8_t *buf;
	size_t len, cap;
};

/* A free slot for a new entry of hash h in the open-addressing table
 * *pp (mask + 1 entries of elem bytes, n of them used), grown first to
 * stay at most half full.  NULL when out of memory. */
static void *insert_slot(void *pp, size_t *mask, size_t n, size_t elem, bool (*used)(const void *),
			 uint64_t (*slot_of)(const void *), uint64_t h)
{
	if (rp_table_reserve(pp, mask, n, elem, used, slot_of, RP_TABLE_FIRST) < 0)
		return NULL;
	char *t;
	memcpy(&t, pp, sizeof(t));
	size_t i = h & *mask;
	while (used(t + i * elem))
		i = (i + 1) & *mask;
	return t + i * elem;
}

static bool str_used(const void *e) { return ((const struct str_entry *)e)->s != NULL; }
static uint64_t str_slot(const void *e) { return ((const struct str_entry *)e)->hash; }
static bool track_used(const void *e) { return ((const struct track *)e)->uuid != 0; }
static uint64_t track_hash(const struct track_key *k)
{
	return rp_hash_u64(((uint64_t)k->kind << 32 | k->ring) * 0x9e3779b97f4a7c15ull ^
			   ((uint64_t)k->gpu << 32 | k->pid) * 0xc2b2ae3d27d4eb4full ^
			   ((uint64_t)k->tid << 32 | k->index) * 0x165667b19e3779f9ull ^ k->lane);
}
static uint64_t track_slot(const void *e) { return track_hash(&((const struct track *)e)->k); }
static bool frame_used(const void *e) { return ((const struct frame_entry *)e)->iid != 0; }
static uint64_t frame_hash(uint32_t pid, uint64_t addr, bool kernel)
{
	return rp_hash_u64(addr * 31 + ((uint64_t)pid << 1 | kernel));
}
static uint64_t frame_slot(const void *e)
{
	const struct frame_entry *f = e;
	return frame_hash(f->pid, f->addr, f->kernel);
}
static bool stack_used(const void *e) { return ((const struct stack_entry *)e)->iid != 0; }
static uint64_t stack_slot(const void *e) { return ((const struct stack_entry *)e)->hash; }

static int nomem(struct pf *w)
{
	return rp_err_set(w->err, -ENOMEM, "out of memory writing the Perfetto trace");
}

/* s's entry in t, added (with the next iid) when new: *fresh tells. */
static const struct str_entry *intern(struct str_table *t, const char *s, bool *fresh)
{
	uint64_t h = rp_hash_str(s);
	for (size_t i = h & t->mask; t->e && t->e[i].s; i = (i + 1) & t->mask)
		if (t->e[i].hash == h && strcmp(t->e[i].s, s) == 0) {
			*fresh = false;
			return &t->e[i];
		}
	struct str_entry *e = insert_slot(&t->e, &t->mask, t->n, sizeof(*e), str_used, str_slot,
					  h);
	if (!e || !(e->s = strdup(s)))
		return NULL;
	e->hash = h;
	e->iid = ++t->n;
	*fresh = true;
	return e;
}

static void free_strings(struct str_table *t)
{
	for (size_t i = 0; t->e && i <= t->mask; i++)
		free(t->e[i].s);
	free(t->e);
}

/* Writes the packets made so far out; last: out's own buffer too. */
static int flush_out(struct pf *w, bool last)
{
	if ((w->len && fwrite(w->buf, 1, w->len, w->out) != w->len) || (last && fflush(w->out)))
		return rp_err_set(w->err, -EIO, "writing the Perfetto trace failed: %s "
				  "(is the disk full?)", strerror(errno));
	w->len = 0;
	return 0;
}

/* Room for a packet without strings or bytes (an event or a sample
 * whose names are interned already): varints, a double and a few
 * annotations, under 256 bytes. */
#define SMALL_PACKET_MAX 1024

/* Packs p into the output as one Trace.packet: tag, length, bytes.
 * Puts it on the sequence, with the interned data pending for it and,
 * when it uses interned ids (iids: it or its data does), the flags that
 * say so.  The first such packet clears the sequence's state and sets
 * its default clock, so that packets from then on omit theirs. */
static int emit(struct pf *w, Packet *p, bool iids)
{
	p->optional_trusted_packet_sequence_id_case =
		PERFETTO__PROTOS__TRACE_PACKET__OPTIONAL_TRUSTED_PACKET_SEQUENCE_ID_TRUSTED_PACKET_SEQUENCE_ID;
	p->trusted_packet_sequence_id = SEQUENCE_ID;
	InternedData *d = &w->pend.data;
	if (d->n_event_names || d->n_event_categories || d->n_debug_annotation_names ||
	    d->n_function_names || d->n_frames || d->n_callstacks || d->n_mappings)
		p->interned_data = d;
	if (iids || p->interned_data) {
		p->has_sequence_flags = true;
		p->sequence_flags = SEQ_NEEDS;
		if (!w->cleared) {
			p->sequence_flags |= SEQ_CLEARED;
			p->trace_packet_defaults = &w->defaults;
			w->cleared = true;
		}
	}
	if (p->has_timestamp && !w->cleared) {
		p->has_timestamp_clock_id = true;
		p->timestamp_clock_id = CLOCK_MONOTONIC_ID;
	}
	uint8_t *o;
	size_t size;
	if (!p->interned_data && (p->data_case == DATA_EVENT || p->data_case == DATA_SAMPLE)) {
		/* Most packets: packed in place without sizing them first,
		 * which would cost as much as packing.  The length takes one
		 * byte, or two past 127. */
		int rc = w->cap - w->len < SMALL_PACKET_MAX + 3 ? flush_out(w, false) : 0;
		if (rc < 0)
			return rc;
		o = w->buf + w->len;
		size = protobuf_c_message_pack(&p->base, o + 2);
		if (size >= 0x80) {
			memmove(o + 3, o + 2, size);
			o[1] = (uint8_t)(size | 0x80);
			o[2] = (uint8_t)(size >> 7);
		} else {
			o[1] = (uint8_t)size;
		}
		o[0] = 1 << 3 | 2; /* Trace.packet, length-delimited */
		w->len += size + (size >= 0x80 ? 3 : 2);
		return 0;
	}
	size = protobuf_c_message_get_packed_size(&p->base);
	size_t need = size + 11; /* tag and a varint length */
	if (w->len + need > w->cap) {
		int rc = flush_out(w, false);
		if (rc < 0)
			return rc;
		if (need > w->cap) {
			uint8_t *grown = realloc(w->buf, need);
			if (!grown)
				return nomem(w);
			w->buf = grown;
			w->cap = need;
		}
	}
	o = w->buf + w->len;
	*o++ = 1 << 3 | 2;
	for (uint64_t v = size; ; v >>= 7) {
		*o++ = (uint8_t)(v & 0x7f) | (v >= 0x80 ? 0x80 : 0);
		if (v < 0x80)
			break;
	}
	o += protobuf_c_message_pack(&p->base, o);
	w->len = (size_t)(o - w->buf);
	d->n_event_names = d->n_event_categories = d->n_debug_annotation_names = 0;
	d->n_function_names = d->n_frames = d->n_callstacks = 0;
	d->n_mapping_paths = d->n_mappings = 0;
	return 0;
}

static void wire_pending(struct pending *p)
{
	p->data = (InternedData)PERFETTO__PROTOS__INTERNED_DATA__INIT;
	p->data.event_names = p->name_p;
	p->data.event_categories = p->cat_p;
	p->data.debug_annotation_names = p->annot_p;
	p->data.function_names = p->func_p;
	p->data.mapping_paths = p->path_p;
	p->data.mappings = p->map_p;
	p->data.frames = p->frame_p;
	p->data.callstacks = p->stack_p;
	p->name_p[0] = &p->names[0];
	p->cat_p[0] = &p->cats[0];
	p->stack_p[0] = &p->stacks[0];
	for (size_t i = 0; i < ANNOTS_MAX; i++)
		p->annot_p[i] = &p->annots[i];
	for (size_t i = 0; i < PENDING_MAX; i++) {
		p->func_p[i] = &p->funcs[i];
		p->path_p[i] = &p->paths[i];
		p->map_p[i] = &p->maps[i];
		p->frame_p[i] = &p->frames[i];
	}
}

static void pending_string(InternedString *s, uint64_t iid, const char *str)
{
	*s = (InternedString)PERFETTO__PROTOS__INTERNED_STRING__INIT;
	s->has_iid = s->has_str = true;
	s->iid = iid;
	s->str.data = (uint8_t *)str;
	s->str.len = strlen(str);
}

static Packet timed_packet(uint64_t ts)
{
	Packet p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
	p.has_timestamp = true;
	p.timestamp = ts;
	return p;
}

static int clock_snapshot(struct pf *w)
{
	typedef Perfetto__Protos__ClockSnapshot__Clock Clock;
	Clock clocks[3], *ptrs[3];
	const uint32_t ids[3] = { CLOCK_BOOTTIME_ID, CLOCK_MONOTONIC_ID, CLOCK_REALTIME_ID };
	const uint64_t at[3] = {
		w->start, w->start, w->start + (uint64_t)rp_reader_wall_offset_ns(w->r),
	};
	for (int i = 0; i < 3; i++) {
		clocks[i] = (Clock)PERFETTO__PROTOS__CLOCK_SNAPSHOT__CLOCK__INIT;
		clocks[i].has_clock_id = clocks[i].has_timestamp = true;
		clocks[i].clock_id = ids[i];
		clocks[i].timestamp = at[i];
		ptrs[i] = &clocks[i];
	}
	Perfetto__Protos__ClockSnapshot snap = PERFETTO__PROTOS__CLOCK_SNAPSHOT__INIT;
	snap.n_clocks = 3;
	snap.clocks = ptrs;
	Packet p = PERFETTO__PROTOS__TRACE_PACKET__INIT;
	p.data_case = DATA_CLOCKS;
	p.clock_snapshot = &snap;
	p.has_first_packet_on_sequence = p.first_packet_on_sequence = true;
	return emit(w, &p, false);
}

static int find_track(struct pf *w, const struct track_key *k, const char *counter,
		      struct track **out);

/* The uuid of k's track, described first when new. */
static int track_uuid(struct pf *w, struct track_key k, uint64_t *uuid)
{
	struct track *t;
	int rc = find_track(w, &k, NULL, &t);
	*uuid = rc < 0 ? 0 : t->uuid;
	return rc;
}

static const char *thread_label(struct pf *w, uint32_t pid, uint32_t tid, char *buf, size_t len)
{
	const char *name = rp_reader_thread_name(w->r, pid, tid);
	if (name)
		return name;
	snprintf(buf, len, "thread %u", tid);
	return buf;
}

/* The ring that process and thread tracks of events recorded on ring
 * are keyed by: grouped by device, each ring has its own. */
static uint32_t owner_ring(const struct pf *w, uint32_t ring)
{
	return w->grouping == RP_PERFETTO_BY_DEVICE ? ring : 0;
}

/* The track k hangs under, if any: see the trees at the top. */
static bool parent_of(const struct pf *w, const struct track_key *k, struct track_key *parent)
{
	const bool by_device = w->grouping == RP_PERFETTO_BY_DEVICE;
	const bool processes = w->grouping != RP_PERFETTO_BY_THREAD;
	const uint32_t owner = owner_ring(w, k->ring);
	const struct track_key process = { .kind = TK_PROCESS, .ring = owner, .pid = k->pid };
	const struct track_key thread = { .kind = TK_THREAD, .ring = owner, .pid = k->pid,
					  .tid = k->tid };
	const struct track_key device = { .kind = TK_DEVICE, .ring = k->ring };
	switch (k->kind) {
	case TK_PROCESS:
		*parent = device;
		return by_device;
	case TK_THREAD:
		*parent = process;
		return processes;
	case TK_SCOPE:
	case TK_API:
	case TK_XLA:
		*parent = k->pid ? thread : device;
		return true;
	case TK_STREAM:
		*parent = device;
		return true;
	case TK_COUNTER:
		*parent = k->pid ? process : device;
		return k->pid ? processes : by_device || !w->devices[k->ring].host;
	default:
		return false;
	}
}

/* The track's descriptor: its name, parent and what it stands for.
 * counter: a counter track's name. */
static int describe(struct pf *w, const struct track_key *k, const char *counter, uint64_t uuid)
{
	char name[NAME_MAX_LEN] = "", thread[64], lane[16] = "";
	const struct device_info *dev = &w->devices[k->ring];
	const char *cmdline;
	struct track_key parent;
	TrackDescriptor td = PERFETTO__PROTOS__TRACK_DESCRIPTOR__INIT;
	Perfetto__Protos__ProcessDescriptor proc = PERFETTO__PROTOS__PROCESS_DESCRIPTOR__INIT;
	Perfetto__Protos__ThreadDescriptor thr = PERFETTO__PROTOS__THREAD_DESCRIPTOR__INIT;
	Perfetto__Protos__CounterDescriptor count = PERFETTO__PROTOS__COUNTER_DESCRIPTOR__INIT;
	if (parent_of(w, k, &parent)) {
		int rc = track_uuid(w, parent, &td.parent_uuid);
		if (rc < 0)
			return rc;
		td.has_parent_uuid = true;
	}
	if (k->lane)
		snprintf(lane, sizeof(lane), " (%u)", k->lane + 1);
	/* Perfetto would keep a described process or thread out of the
	 * other groupings' trees (see the top): they name its track. */
	bool named = w->grouping != RP_PERFETTO_BY_PROCESS;
	switch (k->kind) {
	case TK_PROCESS:
		proc.process_name = (char *)rp_reader_process_name(w->r, k->pid);
		if (named) {
			snprintf(name, sizeof(name), "%s %u",
				 proc.process_name ? proc.process_name : "process", k->pid);
			break;
		}
		proc.has_pid = true;
		proc.pid = (int32_t)k->pid;
		/* One element: the recorded command line has its arguments
		 * joined already, and Perfetto joins them the same way. */
		if ((cmdline = rp_reader_process_cmdline(w->r, k->pid))) {
			proc.n_cmdline = 1;
			proc.cmdline = (char **)&cmdline;
		}
		td.process = &proc;
		break;
	case TK_THREAD:
		thr.thread_name = (char *)rp_reader_thread_name(w->r, k->pid, k->tid);
		if (named) {
			snprintf(name, sizeof(name), "%s %u/%u",
				 thr.thread_name ? thr.thread_name : "thread", k->pid, k->tid);
			break;
		}
		thr.has_pid = thr.has_tid = true;
		thr.pid = (int32_t)k->pid;
		thr.tid = k->tid;
		td.thread = &thr;
		break;
	case TK_SCOPE:
		if (k->pid)
			snprintf(name, sizeof(name), "%s", dev->label);
		else
			snprintf(name, sizeof(name), "thread %u", k->tid);
		break;
	case TK_API:
		snprintf(name, sizeof(name), "%s runtime API%s",
			 thread_label(w, k->pid, k->tid, thread, sizeof(thread)), lane);
		break;
	case TK_DEVICE:
		snprintf(name, sizeof(name), "%s", dev->label);
		break;
	case TK_XLA:
		if (k->pid)
			snprintf(name, sizeof(name), "%s XLA%s",
				 thread_label(w, k->pid, k->tid, thread, sizeof(thread)), lane);
		else
			snprintf(name, sizeof(name), "XLA line %u%s", k->tid, lane);
		break;
	case TK_STREAM:
		if (k->gpu == (dev->number < 0 ? 0 : dev->number))
			snprintf(name, sizeof(name), "Stream %u%s", k->index, lane);
		else
			snprintf(name, sizeof(name), "%s %u stream %u%s", dev->kind, k->gpu,
				 k->index, lane);
		break;
	case TK_COUNTER:
		/* Without process tracks, a process's counter says whose it is. */
		if (k->pid && w->grouping == RP_PERFETTO_BY_THREAD)
			snprintf(name, sizeof(name), "%s %u", counter, k->pid);
		else
			snprintf(name, sizeof(name), "%s", counter);
		td.counter = &count;
		break;
	}
	td.has_uuid = true;
	td.uuid = uuid;
	if (name[0]) {
		td.static_or_dynamic_name_case =
			PERFETTO__PROTOS__TRACK_DESCRIPTOR__STATIC_OR_DYNAMIC_NAME_NAME;
		td.name = name;
	}
	/* Timed at the window's start: Perfetto takes a thread track's
	 * time as the earliest its thread is known to exist. */
	Packet p = timed_packet(w->start);
	p.data_case = DATA_TRACK;
	p.track_descriptor = &td;
	return emit(w, &p, false);
}

/* k's track, described first when new (and its parents before it).
 * *out stays valid until the next track is added. */
static int find_track(struct pf *w, const struct track_key *k, const char *counter,
		      struct track **out)
{
	uint64_t h = track_hash(k);
	for (size_t i = h & w->tracks_mask; w->tracks && w->tracks[i].uuid;
	     i = (i + 1) & w->tracks_mask)
		if (memcmp(&w->tracks[i].k, k, sizeof(*k)) == 0) {
			*out = &w->tracks[i];
			return 0;
		}
	uint64_t uuid = ++w->next_uuid;
	int rc = describe(w, k, counter, uuid); /* may add its parents */
	if (rc < 0)
		return rc;
	struct track *t = insert_slot(&w->tracks, &w->tracks_mask, w->ntracks, sizeof(*t),
				      track_used, track_slot, h);
	if (!t)
		return nomem(w);
	*t = (struct track){ .k = *k, .uuid = uuid };
	w->ntracks++;
	*out = t;
	return 0;
}

/* The first lane of k's tracks free at begin; it is then busy until end. */
static int lane_uuid(struct pf *w, struct track_key k, uint64_t begin, uint64_t end, uint64_t *uuid)
{
	for (k.lane = 0; ; k.lane++) {
		struct track *t;
		int rc = find_track(w, &k, NULL, &t);
		if (rc < 0)
			return rc;
		if (t->busy_until <= begin) {
			t->busy_until = end;
			*uuid = t->uuid;
			return 0;
		}
	}
}

/* Where a thread's ranges, instants and drops recorded on ring go: its
 * own track when it is the ring's (grouped by device, every ring's is). */
static int scope_uuid(struct pf *w, size_t ring, uint32_t pid, uint32_t tid, uint64_t *uuid)
{
	struct track_key k = { .kind = TK_SCOPE, .ring = (uint32_t)ring, .pid = pid, .tid = tid };
	if (pid && (w->devices[ring].host || w->grouping == RP_PERFETTO_BY_DEVICE))
		k = (struct track_key){ .kind = TK_THREAD, .ring = owner_ring(w, (uint32_t)ring),
					.pid = pid, .tid = tid };
	else if (!pid && !tid)
		k = (struct track_key){ .kind = TK_DEVICE, .ring = (uint32_t)ring };
	return track_uuid(w, k, uuid);
}

static uint64_t category_iid(struct pf *w, enum category c)
{
	if (!w->cat_iid[c]) {
		w->cat_iid[c] = ++w->ncat_iids;
		Perfetto__Protos__EventCategory *e = &w->pend.cats[0];
		*e = (Perfetto__Protos__EventCategory)PERFETTO__PROTOS__EVENT_CATEGORY__INIT;
		e->has_iid = true;
		e->iid = w->cat_iid[c];
		e->name = (char *)category_names[c];
		w->pend.data.n_event_categories = 1;
	}
	return w->cat_iid[c];
}

static uint64_t annotation_iid(struct pf *w, enum annotation a)
{
	if (!w->annot_iid[a]) {
		w->annot_iid[a] = ++w->nannot_iids;
		Perfetto__Protos__DebugAnnotationName *e =
			&w->pend.annots[w->pend.data.n_debug_annotation_names++];
		*e = (Perfetto__Protos__DebugAnnotationName)
			PERFETTO__PROTOS__DEBUG_ANNOTATION_NAME__INIT;
		e->has_iid = true;
		e->iid = w->annot_iid[a];
		e->name = (char *)annotation_names[a];
	}
	return w->annot_iid[a];
}

struct arg {
	enum annotation name;
	uint64_t value;
	bool is_bool;
	const char *str; /* a string value instead */
};

/* A TrackEvent of type on track at ts: named (slice begins, instants)
 * or not (ends, counters: value); a slice begin may start a flow
 * (flow_out) or end one (flow_in), 0: none. */
static int flow_event(struct pf *w, uint64_t ts, int type, uint64_t track, const char *name,
		      enum category cat, const struct arg *args, size_t nargs, double value,
		      uint64_t flow_out, uint64_t flow_in)
{
	TrackEvent te = PERFETTO__PROTOS__TRACK_EVENT__INIT;
	te.n_flow_ids = flow_out != 0;
	te.flow_ids = &flow_out;
	te.n_terminating_flow_ids = flow_in != 0;
	te.terminating_flow_ids = &flow_in;
	Annotation annots[ANNOTS_MAX], *annot_p[ANNOTS_MAX];
	uint64_t cat_iid;
	te.has_type = te.has_track_uuid = true;
	te.type = type;
	te.track_uuid = track;
	if (name) {
		bool fresh;
		const struct str_entry *e = intern(&w->names, name, &fresh);
		if (!e)
			return nomem(w);
		if (fresh) {
			Perfetto__Protos__EventName *n = &w->pend.names[0];
			*n = (Perfetto__Protos__EventName)PERFETTO__PROTOS__EVENT_NAME__INIT;
			n->has_iid = true;
			n->iid = e->iid;
			n->name = e->s;
			w->pend.data.n_event_names = 1;
		}
		te.name_field_case = PERFETTO__PROTOS__TRACK_EVENT__NAME_FIELD_NAME_IID;
		te.name_iid = e->iid;
		cat_iid = category_iid(w, cat);
		te.n_category_iids = 1;
		te.category_iids = &cat_iid;
	}
	if (type == COUNTER) {
		te.counter_value_field_case =
			PERFETTO__PROTOS__TRACK_EVENT__COUNTER_VALUE_FIELD_DOUBLE_COUNTER_VALUE;
		te.double_counter_value = value;
	}
	for (size_t i = 0; i < nargs; i++) {
		Annotation *a = &annots[i];
		*a = (Annotation)PERFETTO__PROTOS__DEBUG_ANNOTATION__INIT;
		a->name_field_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__NAME_FIELD_NAME_IID;
		a->name_iid = annotation_iid(w, args[i].name);
		if (args[i].str) {
			a->value_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_STRING_VALUE;
			a->string_value = (char *)args[i].str;
		} else if (args[i].is_bool) {
			a->value_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_BOOL_VALUE;
			a->bool_value = args[i].value != 0;
		} else {
			a->value_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_UINT_VALUE;
			a->uint_value = args[i].value;
		}
		annot_p[i] = a;
	}
	te.n_debug_annotations = nargs;
	te.debug_annotations = annot_p;
	Packet p = timed_packet(ts);
	p.data_case = DATA_EVENT;
	p.track_event = &te;
	return emit(w, &p, name || nargs);
}

static int track_event(struct pf *w, uint64_t ts, int type, uint64_t track, const char *name,
		       enum category cat, const struct arg *args, size_t nargs, double value)
{
	return flow_event(w, ts, type, track, name, cat, args, nargs, value, 0, 0);
}

/* The flow from a runtime API call to the GPU work it launched (CUPTI's
 * correlation ids are per process); 0 without one. */
static uint64_t launch_flow(uint32_t pid, uint64_t corr)
{
	return corr ? (uint64_t)pid << 32 | (corr & UINT32_MAX) : 0;
}

static const char *name_of(const struct rp_event *ev)
{
	return ev->name ? ev->name : "";
}

static int gpu_activity(struct pf *w, size_t ring, const struct rp_event *ev)
{
	uint64_t end = ev->u.gpu.end > ev->ts ? ev->u.gpu.end : ev->ts, uuid;
	struct track_key k = { .kind = TK_STREAM, .ring = (uint32_t)ring, .gpu = ev->u.gpu.device,
			       .index = ev->u.gpu.stream };
	int rc = lane_uuid(w, k, ev->ts, end, &uuid);
	if (rc < 0)
		return rc;
	enum category cat = ev->u.gpu.kind == RP_GPU_MEMCPY ? CAT_MEMCPY :
			    ev->u.gpu.kind == RP_GPU_MEMSET ? CAT_MEMSET : CAT_KERNEL;
	struct arg args[ANNOTS_MAX];
	size_t n = 0;
	args[n++] = (struct arg){ AN_DEVICE, ev->u.gpu.device, false, NULL };
	args[n++] = (struct arg){ AN_STREAM, ev->u.gpu.stream, false, NULL };
	if (ev->u.gpu.correlation)
		args[n++] = (struct arg){ AN_CORRELATION, ev->u.gpu.correlation, false, NULL };
	if (cat != CAT_KERNEL)
		args[n++] = (struct arg){ AN_BYTES, ev->u.gpu.bytes, false, NULL };
	const struct rp_gpu_launch *l = &ev->u.gpu.launch;
	char grid[40], block[40];
	if (l->block[0]) {
		snprintf(grid, sizeof(grid), "%u,%u,%u", l->grid[0], l->grid[1], l->grid[2]);
		snprintf(block, sizeof(block), "%u,%u,%u", l->block[0], l->block[1], l->block[2]);
		args[n++] = (struct arg){ AN_GRID, 0, false, grid };
		args[n++] = (struct arg){ AN_BLOCK, 0, false, block };
		args[n++] = (struct arg){ AN_REGISTERS, l->registers, false, NULL };
		args[n++] = (struct arg){ AN_STATIC_SHARED, l->static_shared, false, NULL };
		args[n++] = (struct arg){ AN_DYNAMIC_SHARED, l->dynamic_shared, false, NULL };
	}
	if ((rc = flow_event(w, ev->ts, SLICE_BEGIN, uuid,
			     rp_symbolizer_demangle(w->sym, name_of(ev)), cat, args, n, 0, 0,
			     launch_flow(ev->pid, ev->u.gpu.correlation))) < 0)
		return rc;
	return track_event(w, end, SLICE_END, uuid, NULL, cat, NULL, 0, 0);
}

static int api_call(struct pf *w, size_t ring, const struct rp_event *ev)
{
	uint64_t end = ev->ts + ev->u.api.duration, uuid;
	struct track_key k = { .kind = TK_API, .ring = (uint32_t)ring, .pid = ev->pid,
			       .tid = ev->tid };
	int rc = lane_uuid(w, k, ev->ts, end, &uuid);
	if (rc < 0)
		return rc;
	struct arg args[2] = { { AN_DEVICE, ev->u.api.device, false, NULL },
			       { AN_CORRELATION, ev->u.api.correlation, false, NULL } };
	if ((rc = flow_event(w, ev->ts, SLICE_BEGIN, uuid, name_of(ev), CAT_API, args,
			     ev->u.api.correlation ? 2 : 1, 0,
			     launch_flow(ev->pid, ev->u.api.correlation), 0)) < 0)
		return rc;
	return track_event(w, end, SLICE_END, uuid, NULL, CAT_API, NULL, 0, 0);
}

/* An XLA op, module or step: a slice on its thread's XLA track (host) or
 * its line's track (device), XLA's stats as args. */
static int device_op(struct pf *w, size_t ring, const struct rp_event *ev)
{
	uint64_t uuid;
	struct track_key k = { .kind = TK_XLA, .ring = (uint32_t)ring, .pid = ev->pid,
			       .tid = ev->tid };
	if (ev->u.op.device != RP_OP_HOST)
		k = (struct track_key){ .kind = TK_XLA, .ring = (uint32_t)ring, .tid = ev->u.op.line };
	int rc = lane_uuid(w, k, ev->ts, ev->u.op.end, &uuid);
	if (rc < 0)
		return rc;
	struct arg args[ANNOTS_MAX];
	size_t n = 0;
	args[n++] = (struct arg){ AN_LINE, ev->u.op.line, false, NULL };
	if (ev->u.op.hlo_op)
		args[n++] = (struct arg){ AN_HLO_OP, 0, false, ev->u.op.hlo_op };
	if (ev->u.op.hlo_module)
		args[n++] = (struct arg){ AN_HLO_MODULE, 0, false, ev->u.op.hlo_module };
	if (ev->u.op.program_id)
		args[n++] = (struct arg){ AN_PROGRAM_ID, ev->u.op.program_id, false, NULL };
	if (ev->u.op.flops)
		args[n++] = (struct arg){ AN_FLOPS, ev->u.op.flops, false, NULL };
	if (ev->u.op.bytes_accessed)
		args[n++] = (struct arg){ AN_BYTES_ACCESSED, ev->u.op.bytes_accessed, false, NULL };
	if ((rc = track_event(w, ev->ts, SLICE_BEGIN, uuid, name_of(ev), CAT_XLA, args, n, 0)) < 0)
		return rc;
	return track_event(w, ev->u.op.end, SLICE_END, uuid, NULL, CAT_XLA, NULL, 0, 0);
}

static int counter(struct pf *w, size_t ring, const struct rp_event *ev)
{
	bool fresh;
	const struct str_entry *e = intern(&w->counter_names, name_of(ev), &fresh);
	if (!e)
		return nomem(w);
	struct track_key k = { .kind = TK_COUNTER, .ring = (uint32_t)ring, .pid = ev->pid,
			       .index = (uint32_t)e->iid };
	struct track *t;
	int rc = find_track(w, &k, e->s, &t);
	if (rc < 0)
		return rc;
	return track_event(w, ev->ts, COUNTER, t->uuid, NULL, CAT_ANNOTATION, NULL, 0,
			   ev->u.counter.value);
}

/* The iid of the frame at addr (a return address already moved into
 * its call), symbolized the first time it is seen. */
static int frame_iid(struct pf *w, uint32_t pid, uint64_t addr, bool kernel, uint64_t *iid)
{
	uint32_t key_pid = kernel ? 0 : pid;
	uint64_t h = frame_hash(key_pid, addr, kernel);
	for (size_t i = h & w->frames_mask; w->frames && w->frames[i].iid;
	     i = (i + 1) & w->frames_mask) {
		const struct frame_entry *f = &w->frames[i];
		if (f->addr == addr && f->pid == key_pid && f->kernel == kernel) {
			*iid = f->iid;
			return 0;
		}
	}
	struct rp_symbol sym;
	char buf[NAME_MAX_LEN];
	rp_symbolize(w->sym, pid, addr, kernel, &sym);
	bool fresh_func, fresh_module;
	const struct str_entry *func = intern(&w->functions, rp_symbol_name(&sym, buf, sizeof(buf)),
					      &fresh_func);
	const struct str_entry *module = func ? intern(&w->modules,
						       sym.module ? sym.module : "[unknown]",
						       &fresh_module) : NULL;
	struct frame_entry *slot = NULL;
	if (module)
		slot = insert_slot(&w->frames, &w->frames_mask, w->nframes, sizeof(*slot),
				   frame_used, frame_slot, h);
	if (!slot)
		return nomem(w);
	struct pending *p = &w->pend;
	if (fresh_func)
		pending_string(&p->funcs[p->data.n_function_names++], func->iid, func->s);
	if (fresh_module) {
		/* One mapping per module, its iid the path's: Perfetto's flame
		 * graphs show the module, and ringprof names the frames. */
		pending_string(&p->paths[p->data.n_mapping_paths++], module->iid, module->s);
		size_t m = p->data.n_mappings++;
		p->maps[m] = (Perfetto__Protos__Mapping)PERFETTO__PROTOS__MAPPING__INIT;
		p->maps[m].has_iid = true;
		p->maps[m].iid = module->iid;
		p->map_paths[m] = module->iid;
		p->maps[m].n_path_string_ids = 1;
		p->maps[m].path_string_ids = &p->map_paths[m];
	}
	*slot = (struct frame_entry){ .addr = addr, .iid = ++w->nframes, .pid = key_pid,
				      .kernel = kernel };
	Perfetto__Protos__Frame *f = &p->frames[p->data.n_frames++];
	*f = (Perfetto__Protos__Frame)PERFETTO__PROTOS__FRAME__INIT;
	f->has_iid = f->has_function_name_id = f->has_mapping_id = f->has_rel_pc = true;
	f->iid = w->nframes;
	f->function_name_id = func->iid;
	f->mapping_id = module->iid;
	/* The address stands in for the module-relative pc: Perfetto tells
	 * frames apart by mapping, rel_pc and name, and the names are ours. */
	f->rel_pc = addr;
	*iid = w->nframes;
	return 0;
}

/* The iid of the callstack of n frame iids (root first). */
static int stack_iid(struct pf *w, const uint64_t *ids, size_t n, uint64_t *iid)
{
	uint64_t h = n;
	for (size_t i = 0; i < n; i++)
		h = rp_hash_u64(h * 0x9e3779b97f4a7c15ull + ids[i]);
	for (size_t i = h & w->stacks_mask; w->stacks && w->stacks[i].iid;
	     i = (i + 1) & w->stacks_mask) {
		const struct stack_entry *s = &w->stacks[i];
		if (s->hash == h && s->n == n && memcmp(s->frames, ids, n * sizeof(*ids)) == 0) {
			*iid = s->iid;
			return 0;
		}
	}
	struct stack_entry *slot = insert_slot(&w->stacks, &w->stacks_mask, w->nstacks,
					       sizeof(*slot), stack_used, stack_slot, h);
	uint64_t *copy = slot ? malloc(n * sizeof(*copy)) : NULL;
	if (!copy)
		return nomem(w);
	memcpy(copy, ids, n * sizeof(*ids));
	*slot = (struct stack_entry){ .hash = h, .iid = ++w->nstacks, .frames = copy, .n = n };
	Perfetto__Protos__Callstack *c = &w->pend.stacks[0];
	*c = (Perfetto__Protos__Callstack)PERFETTO__PROTOS__CALLSTACK__INIT;
	c->has_iid = true;
	c->iid = w->nstacks;
	c->n_frame_ids = n;
	c->frame_ids = copy;
	w->pend.data.n_callstacks = 1;
	*iid = w->nstacks;
	return 0;
}

/* A CPU sample: frames come leaf first, kernel frames before user ones;
 * all but the leaf of each are return addresses, looked up a byte
 * earlier, inside the call. */
static int cpu_sample(struct pf *w, const struct rp_event *ev)
{
	size_t n = ev->u.sample.nframes < RP_STACK_MAX ? ev->u.sample.nframes : RP_STACK_MAX;
	Perfetto__Protos__PerfSample s = PERFETTO__PROTOS__PERF_SAMPLE__INIT;
	s.has_cpu = s.has_pid = s.has_tid = s.has_cpu_mode = true;
	s.cpu = ev->u.sample.cpu;
	s.pid = ev->pid;
	s.tid = ev->tid;
	s.cpu_mode = ev->u.sample.nkernel ? PERFETTO__PROTOS__PROFILING__CPU_MODE__MODE_KERNEL :
					    PERFETTO__PROTOS__PROFILING__CPU_MODE__MODE_USER;
	for (size_t i = 0; i < n; i++) {
		int rc = frame_iid(w, ev->pid, rp_frame_address(ev->u.sample.frames,
					ev->u.sample.nkernel, (unsigned)i), i < ev->u.sample.nkernel,
				   &w->stack_ids[n - 1 - i]);
		if (rc < 0)
			return rc;
	}
	if (n) {
		int rc = stack_iid(w, w->stack_ids, n, &s.callstack_iid);
		if (rc < 0)
			return rc;
		s.has_callstack_iid = true;
	}
	Packet p = timed_packet(ev->ts);
	p.data_case = DATA_SAMPLE;
	p.perf_sample = &s;
	return emit(w, &p, n > 0);
}

/* Ranges, instants and drops: on their thread's track (scope_uuid). */
static int thread_event(struct pf *w, const struct rp_reader_event *e)
{
	const struct rp_event *ev = e->ev;
	uint64_t uuid;
	int rc = scope_uuid(w, e->device, ev->pid, ev->tid, &uuid);
	if (rc < 0)
		return rc;
	switch (ev->kind) {
	case RP_EV_RANGE_BEGIN:
		return track_event(w, ev->ts, SLICE_BEGIN, uuid, name_of(ev), CAT_ANNOTATION, NULL,
				   0, 0);
	case RP_EV_RANGE_END: {
		/* Marked when the window's end cut it. */
		struct arg cut = { AN_TRUNCATED, 1, true, NULL };
		return track_event(w, ev->ts, SLICE_END, uuid, NULL, CAT_ANNOTATION, &cut,
				   e->truncated ? 1 : 0, 0);
	}
	case RP_EV_INSTANT:
		return track_event(w, ev->ts, INSTANT, uuid, name_of(ev), CAT_ANNOTATION, NULL,
				   0, 0);
	default: {
		/* Drops: what the producer lost, where it noticed. */
		struct arg count = { AN_COUNT, ev->u.drops.count, false, NULL };
		return track_event(w, ev->ts, INSTANT, uuid, "dropped events", CAT_RINGPROF,
				   &count, 1, 0);
	}
	}
}

static int on_event(void *ctx, const struct rp_reader_event *e)
{
	struct pf *w = ctx;
	switch (e->ev->kind) {
	case RP_EV_RANGE_BEGIN:
	case RP_EV_RANGE_END:
	case RP_EV_INSTANT:
	case RP_EV_DROPS:
		return thread_event(w, e);
	case RP_EV_COUNTER:
		return counter(w, e->device, e->ev);
	case RP_EV_GPU_ACTIVITY:
		return gpu_activity(w, e->device, e->ev);
	case RP_EV_API_CALL:
		return api_call(w, e->device, e->ev);
	case RP_EV_CPU_SAMPLE:
		return cpu_sample(w, e->ev);
	case RP_EV_DEVICE_OP:
		return device_op(w, e->device, e->ev);
	default:
		return 0;
	}
}

/* A ring's track name from its recorded identity: the host ring, the
 * host's name; GPU, TPU and Neuron core N "GPU N", "TPU N",
 * "NeuronCore N"; any other its ring name; then the stable id, when it
 * has one, in parentheses: "GPU 1 (GPU-8f6e...)". */
static void describe_device(struct device_info *d, const char *ring,
			    const struct rp_device_identity *id, const char *host)
{
	static const char *const kinds[] = {
		[RP_DEVICE_GPU] = "GPU", [RP_DEVICE_TPU] = "TPU", [RP_DEVICE_NEURON_CORE] = "NeuronCore",
	};
	d->host = id->kind == RP_DEVICE_HOST;
	d->kind = id->kind < sizeof(kinds) / sizeof(kinds[0]) && kinds[id->kind] ? kinds[id->kind]
										  : NULL;
	d->number = d->kind ? (long)id->index : -1;
	int n = d->kind ? snprintf(d->label, sizeof(d->label), "%s %ld", d->kind, d->number)
			: snprintf(d->label, sizeof(d->label), "%s", d->host ? host : ring);
	if (id->uid[0] && n > 0 && (size_t)n < sizeof(d->label))
		snprintf(d->label + n, sizeof(d->label) - (size_t)n, " (%s)", id->uid);
	if (!d->kind)
		d->kind = "device";
}

int rp_write_perfetto(struct rp_reader *r, FILE *out, enum rp_perfetto_grouping grouping,
		      struct rp_err *err)
{
	struct pf *w = calloc(1, sizeof(*w));
	size_t ndev = rp_reader_device_count(r);
	if (!w)
		return rp_err_set(err, -ENOMEM, "out of memory writing the Perfetto trace");
	w->r = r;
	w->sym = rp_reader_symbolizer(r);
	w->out = out;
	w->err = err;
	w->grouping = grouping;
	w->start = rp_reader_start_ns(r);
	w->cap = OUT_CHUNK;
	wire_pending(&w->pend);
	w->defaults = (Perfetto__Protos__TracePacketDefaults)
		PERFETTO__PROTOS__TRACE_PACKET_DEFAULTS__INIT;
	w->defaults.has_timestamp_clock_id = true;
	w->defaults.timestamp_clock_id = CLOCK_MONOTONIC_ID;
	w->devices = calloc(ndev ? ndev : 1, sizeof(*w->devices));
	w->buf = malloc(w->cap);
	int rc = 0;
	if (!w->devices || !w->buf)
		rc = nomem(w);
	for (size_t d = 0; rc == 0 && d < ndev; d++)
		describe_device(&w->devices[d], rp_reader_device_name(r, d),
				rp_reader_device_identity(r, d), rp_reader_host(r));
	if (rc == 0)
		rc = clock_snapshot(w);
	if (rc == 0)
		rc = rp_reader_each(r, on_event, w, err);
	if (rc == 0)
		rc = flush_out(w, true);
	free_strings(&w->names);
	free_strings(&w->functions);
	free_strings(&w->modules);
	free_strings(&w->counter_names);
	for (size_t i = 0; w->stacks && i <= w->stacks_mask; i++)
		free(w->stacks[i].frames);
	free(w->stacks);
	free(w->frames);
	free(w->tracks);
	free(w->devices);
	free(w->buf);
	free(w);
	return rc;
}
