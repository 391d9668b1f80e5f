/* A stand-in libnrt (libnrt.so.1) for tests without Neuron hardware: the
 * public API as collectors/neuron/nrt_api.h declares it, each call taking
 * a known time (spun, not slept: no oversleeping), and a system trace
 * that hands out, as JSON, one event per execution and per tensor copy
 * with the fields Neuron Profiler 2.0 names.
 *
 * Built twice: with FAKE_NRT_SYS_TRACE, and without (a runtime whose
 * trace functions are missing).  FAKE_NRT_TRACE_JSON=malformed makes the
 * trace hand out JSON cut short; FAKE_NRT_NO_WAIT makes every call return at
 * once. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fake_nrt.h"
#include "nrt_api.h"

struct nrt_model { int32_t vnc; };
struct nrt_tensor { int32_t vnc; size_t size; char name[64]; unsigned char *data; };

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* FAKE_NRT_NO_WAIT (read at nrt_init): calls return at once, for the
 * benchmark's bare call. */
static bool no_wait;

static void spin(uint64_t ns)
{
	if (no_wait)
		return;
	uint64_t until = clock_ns(CLOCK_MONOTONIC) + ns;
	while (clock_ns(CLOCK_MONOTONIC) < until)
		;
}

/* ---- the system trace ---------------------------------------------------- */

static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool tracing;
static char *trace_buf;
static size_t trace_len, trace_cap;

/* Appends one event (a JSON object) to those the next fetch hands out. */
static void trace_event(const char *name, int32_t vnc, uint64_t start_epoch, uint64_t dur,
			const struct nrt_tensor *t)
{
	if (!atomic_load_explicit(&tracing, memory_order_relaxed))
		return;
	char ev[512];
	int n = snprintf(ev, sizeof(ev),
			 "{\"name\":\"%s\",\"timestamp\":%llu,\"duration\":%llu,"
			 "\"group\":\"nrt-nc-%03d\",\"lnc_idx\":%d,\"instance_id\":7,"
			 "\"process_id\":%d,\"thread_id\":%ld",
			 name, (unsigned long long)start_epoch, (unsigned long long)dur, vnc, vnc,
			 (int)getpid(), (long)syscall(SYS_gettid));
	if (t)
		n += snprintf(ev + n, sizeof(ev) - (size_t)n, ",\"tensor_name\":\"%s\",\"size\":%zu",
			      t->name, t->size);
	n += snprintf(ev + n, sizeof(ev) - (size_t)n, "}");
	(void)pthread_mutex_lock(&trace_lock);
	if (tracing && trace_len + (size_t)n + 2 <= trace_cap) {
		if (trace_len)
			trace_buf[trace_len++] = ',';
		memcpy(trace_buf + trace_len, ev, (size_t)n);
		trace_len += (size_t)n;
	}
	(void)pthread_mutex_unlock(&trace_lock);
}

#ifdef FAKE_NRT_SYS_TRACE
struct nrt_sys_trace_config { int unused; };

NRT_STATUS nrt_sys_trace_config_allocate(nrt_sys_trace_config_t **options)
{
	*options = calloc(1, sizeof(**options));
	return *options ? NRT_SUCCESS : NRT_RESOURCE;
}

void nrt_sys_trace_config_free(nrt_sys_trace_config_t *options)
{
	free(options);
}

NRT_STATUS nrt_sys_trace_start(nrt_sys_trace_config_t *options)
{
	(void)options;
	(void)pthread_mutex_lock(&trace_lock);
	trace_cap = 1 << 22;
	trace_buf = trace_buf ? trace_buf : malloc(trace_cap);
	tracing = trace_buf != NULL;
	(void)pthread_mutex_unlock(&trace_lock);
	return tracing ? NRT_SUCCESS : NRT_RESOURCE;
}

NRT_STATUS nrt_sys_trace_stop(void)
{
	(void)pthread_mutex_lock(&trace_lock);
	tracing = false;
	(void)pthread_mutex_unlock(&trace_lock);
	return NRT_SUCCESS;
}

/* Each event once: the buffer empties with every fetch. */
NRT_STATUS nrt_sys_trace_fetch_events(char **buffer, size_t *written_size,
				      const nrt_sys_trace_fetch_options_t *options)
{
	(void)options;
	const char *mode = getenv("FAKE_NRT_TRACE_JSON");
	(void)pthread_mutex_lock(&trace_lock);
	char *out = malloc(trace_len + 3);
	if (out) {
		out[0] = '[';
		memcpy(out + 1, trace_buf, trace_len);
		out[trace_len + 1] = ']';
		out[trace_len + 2] = 0;
		*written_size = trace_len + 2;
		if (mode && !strcmp(mode, "malformed") && trace_len) {
			/* Cut in the middle: never JSON. */
			out[trace_len / 2] = 0;
			*written_size = trace_len / 2;
		}
		trace_len = 0;
	}
	(void)pthread_mutex_unlock(&trace_lock);
	*buffer = out;
	return out ? NRT_SUCCESS : NRT_RESOURCE;
}

void nrt_sys_trace_buffer_free(char *buffer)
{
	free(buffer);
}
#endif

/* ---- the API ------------------------------------------------------------- */

/* The stand-in's NeuronCores. */
#define FAKE_NC_COUNT 4

static bool inited;

NRT_STATUS nrt_init(nrt_framework_type_t framework, const char *fw_version,
		    const char *fal_version)
{
	(void)fw_version;
	(void)fal_version;
	if (framework == NRT_FRAMEWORK_TYPE_INVALID)
		return NRT_INVALID;
	no_wait = getenv("FAKE_NRT_NO_WAIT") != NULL;
	spin(FAKE_NRT_INIT_NS);
	inited = true;
	return NRT_SUCCESS;
}

void nrt_close(void)
{
	spin(FAKE_NRT_CLOSE_NS);
	inited = false;
}

NRT_STATUS nrt_load(const void *neff_bytes, size_t size, int32_t vnc, int32_t vnc_count,
		    nrt_model_t **model)
{
	(void)vnc_count;
	if (!inited)
		return NRT_FAILURE;
	if (!neff_bytes || !size || !model)
		return NRT_INVALID;
	if (vnc < 0 || vnc >= FAKE_NC_COUNT)
		return NRT_LOAD_NOT_ENOUGH_NC;
	spin(FAKE_NRT_LOAD_NS);
	*model = malloc(sizeof(**model));
	if (!*model)
		return NRT_RESOURCE;
	(*model)->vnc = vnc;
	return NRT_SUCCESS;
}

NRT_STATUS nrt_load_collectives(const void *neff_bytes, size_t size, int32_t vnc,
				int32_t vnc_count, uint32_t ctx_device_id,
				uint32_t ctx_device_count, nrt_model_t **model)
{
	if (ctx_device_id >= ctx_device_count)
		return NRT_INVALID;
	return nrt_load(neff_bytes, size, vnc, vnc_count, model);
}

NRT_STATUS nrt_unload(nrt_model_t *model)
{
	if (!model)
		return NRT_INVALID_HANDLE;
	spin(FAKE_NRT_UNLOAD_NS);
	free(model);
	return NRT_SUCCESS;
}

static NRT_STATUS execute(nrt_model_t *model, int times)
{
	if (!model)
		return NRT_INVALID_HANDLE;
	for (int i = 0; i < times; i++) {
		uint64_t epoch = clock_ns(CLOCK_REALTIME);
		spin(FAKE_NRT_EXECUTE_NS);
		trace_event("nc_exec", model->vnc, epoch, FAKE_NRT_EXECUTE_NS, NULL);
	}
	return NRT_SUCCESS;
}

NRT_STATUS nrt_execute(nrt_model_t *model, const nrt_tensor_set_t *input_set,
		       nrt_tensor_set_t *output_set)
{
	(void)input_set;
	(void)output_set;
	return execute(model, 1);
}

NRT_STATUS nrt_execute_repeat(nrt_model_t *model, const nrt_tensor_set_t *input_set,
			      nrt_tensor_set_t *output_set, int repeat_count)
{
	(void)input_set;
	(void)output_set;
	return repeat_count < 1 ? NRT_INVALID : execute(model, repeat_count);
}

NRT_STATUS nrt_build_global_comm(int32_t vnc, uint32_t g_device_id, uint32_t g_device_count)
{
	if (vnc < 0 || vnc >= FAKE_NC_COUNT || g_device_id >= g_device_count)
		return NRT_INVALID;
	spin(FAKE_NRT_COMM_NS);
	return NRT_SUCCESS;
}

NRT_STATUS nrt_tensor_allocate(nrt_tensor_placement_t tensor_placement, int vnc, size_t size,
			       const char *name, nrt_tensor_t **tensor)
{
	if (!tensor || !size || (tensor_placement == NRT_TENSOR_PLACEMENT_DEVICE &&
				 (vnc < 0 || vnc >= FAKE_NC_COUNT)))
		return NRT_INVALID;
	nrt_tensor_t *t = calloc(1, sizeof(*t));
	unsigned char *data = calloc(1, size);
	if (!t || !data) {
		free(t);
		free(data);
		return NRT_RESOURCE;
	}
	t->vnc = vnc;
	t->size = size;
	t->data = data;
	(void)snprintf(t->name, sizeof(t->name), "%s", name ? name : "");
	*tensor = t;
	return NRT_SUCCESS;
}

void nrt_tensor_free(nrt_tensor_t **tensor)
{
	if (!tensor || !*tensor)
		return;
	free((*tensor)->data);
	free(*tensor);
	*tensor = NULL;
}

static NRT_STATUS copy(const nrt_tensor_t *t, size_t offset, size_t size, const char *what)
{
	if (!t || offset > t->size || size > t->size - offset)
		return NRT_INVALID;
	uint64_t epoch = clock_ns(CLOCK_REALTIME);
	spin(FAKE_NRT_COPY_NS);
	trace_event(what, t->vnc, epoch, FAKE_NRT_COPY_NS, t);
	return NRT_SUCCESS;
}

NRT_STATUS nrt_tensor_read(const nrt_tensor_t *tensor, void *buf, size_t offset, size_t size)
{
	NRT_STATUS rc = copy(tensor, offset, size, "dma_d2h");
	if (rc == NRT_SUCCESS)
		memcpy(buf, tensor->data + offset, size);
	return rc;
}

NRT_STATUS nrt_tensor_write(nrt_tensor_t *tensor, const void *buf, size_t offset, size_t size)
{
	NRT_STATUS rc = copy(tensor, offset, size, "dma_h2d");
	if (rc == NRT_SUCCESS)
		memcpy(tensor->data + offset, buf, size);
	return rc;
}
