/* The part of the Neuron runtime's public C API (libnrt) that the Neuron
 * collector wraps, declared from the public headers of aws-neuron-sdk,
 * src/libnrt/include/nrt/ (nrt.h, nrt_status.h, nrt_sys_trace.h) as
 * published for Neuron runtime 2.x (NRT_MAJOR_VERSION 2, the Neuron SDK
 * 2.2x releases that carry Neuron Profiler 2.0).  Our own declarations: no
 * libnrt header or library is needed to build ringprof.  The stand-in
 * runtime of the tests (tests/neuron/) implements the same ones. */
#ifndef RINGPROF_NRT_API_H
#define RINGPROF_NRT_API_H

#include <stddef.h>
#include <stdint.h>

/* nrt_status.h: the values are part of the ABI. */
typedef enum {
	NRT_SUCCESS = 0,
	NRT_FAILURE = 1,
	NRT_INVALID = 2,
	NRT_INVALID_HANDLE = 3,
	NRT_RESOURCE = 4,
	NRT_TIMEOUT = 5,
	NRT_HW_ERROR = 6,
	NRT_QUEUE_FULL = 7,
	NRT_LOAD_NOT_ENOUGH_NC = 9,
	NRT_UNSUPPORTED_NEFF_VERSION = 10,
} NRT_STATUS;

typedef struct nrt_model nrt_model_t;
typedef struct nrt_tensor nrt_tensor_t;
typedef void nrt_tensor_set_t;
typedef struct nrt_sys_trace_config nrt_sys_trace_config_t;
typedef struct nrt_sys_trace_fetch_options nrt_sys_trace_fetch_options_t;

typedef enum {
	NRT_TENSOR_PLACEMENT_DEVICE,
	NRT_TENSOR_PLACEMENT_HOST,
	NRT_TENSOR_PLACEMENT_VIRTUAL,
} nrt_tensor_placement_t;

typedef enum {
	NRT_FRAMEWORK_TYPE_INVALID = 0,
	NRT_FRAMEWORK_TYPE_NO_FW = 1,
	NRT_FRAMEWORK_TYPE_TENSORFLOW,
	NRT_FRAMEWORK_TYPE_PYTORCH,
	NRT_FRAMEWORK_TYPE_MXNET,
} nrt_framework_type_t;

/* nrt.h */
NRT_STATUS nrt_init(nrt_framework_type_t framework, const char *fw_version,
		    const char *fal_version);
void nrt_close(void);
NRT_STATUS nrt_load(const void *neff_bytes, size_t size, int32_t vnc, int32_t vnc_count,
		    nrt_model_t **model);
NRT_STATUS nrt_load_collectives(const void *neff_bytes, size_t size, int32_t vnc,
				int32_t vnc_count, uint32_t ctx_device_id,
				uint32_t ctx_device_count, nrt_model_t **model);
NRT_STATUS nrt_unload(nrt_model_t *model);
NRT_STATUS nrt_execute(nrt_model_t *model, const nrt_tensor_set_t *input_set,
		       nrt_tensor_set_t *output_set);
NRT_STATUS nrt_execute_repeat(nrt_model_t *model, const nrt_tensor_set_t *input_set,
			      nrt_tensor_set_t *output_set, int repeat_count);
NRT_STATUS nrt_build_global_comm(int32_t vnc, uint32_t g_device_id, uint32_t g_device_count);
NRT_STATUS nrt_tensor_allocate(nrt_tensor_placement_t tensor_placement, int vnc, size_t size,
			       const char *name, nrt_tensor_t **tensor);
void nrt_tensor_free(nrt_tensor_t **tensor);
NRT_STATUS nrt_tensor_read(const nrt_tensor_t *tensor, void *buf, size_t offset, size_t size);
NRT_STATUS nrt_tensor_write(nrt_tensor_t *tensor, const void *buf, size_t offset, size_t size);

/* nrt_sys_trace.h: the runtime's system trace (Neuron Profiler 2.0).
 * fetch hands each event out once, as a NUL-terminated JSON string the
 * caller frees with nrt_sys_trace_buffer_free. */
NRT_STATUS nrt_sys_trace_config_allocate(nrt_sys_trace_config_t **options);
void nrt_sys_trace_config_free(nrt_sys_trace_config_t *options);
NRT_STATUS nrt_sys_trace_start(nrt_sys_trace_config_t *options);
NRT_STATUS nrt_sys_trace_stop(void);
NRT_STATUS nrt_sys_trace_fetch_events(char **buffer, size_t *written_size,
				      const nrt_sys_trace_fetch_options_t *options);
void nrt_sys_trace_buffer_free(char *buffer);

#endif
