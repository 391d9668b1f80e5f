/* Loading libcupti and libcuda at run time into struct rp_cupti. */
#include "cupti_pm.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The soname first (ld.so.conf, LD_LIBRARY_PATH), then where the CUDA
 * toolkit and its CUPTI package put it. */
static const char *const cupti_paths[] = {
	"libcupti.so.13",
	"libcupti.so",
	"/usr/local/cuda/lib64/libcupti.so.13",
	"/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
};

static void *sym(void *handle, const char *name, const char **missing)
{
	void *p = dlsym(handle, name);
	if (!p && !*missing)
		*missing = name;
	return p;
}

static int open_cuda(struct rp_cupti *c, struct rp_err *why)
{
	c->cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!c->cuda)
		return rp_err_set(why, -ENODEV, "no NVIDIA driver/GPU (libcuda.so.1 does not load: "
				  "%s); on a GPU host install the NVIDIA driver, elsewhere set "
				  "[gpu_pm] enabled = false to silence this", dlerror());
	const char *missing = NULL;
	/* dlsym's void * into function pointers: POSIX guarantees it works */
	*(void **)&c->cu_init = sym(c->cuda, "cuInit", &missing);
	*(void **)&c->cu_device_count = sym(c->cuda, "cuDeviceGetCount", &missing);
	*(void **)&c->cu_device_get = sym(c->cuda, "cuDeviceGet", &missing);
	*(void **)&c->cu_device_attribute = sym(c->cuda, "cuDeviceGetAttribute", &missing);
	if (missing)
		return rp_err_set(why, -ENOSYS, "libcuda.so.1 has no %s: the NVIDIA driver is too "
				  "old or broken; reinstall it", missing);
	int rc = c->cu_init(0);
	if (rc != 0)
		return rp_err_set(why, -ENODEV, "no NVIDIA driver/GPU (cuInit returned %d: %s); "
				  "check nvidia-smi, or set [gpu_pm] enabled = false", rc,
				  rc == 100 ? "no CUDA-capable device" : "driver not usable");
	return 0;
}

int rp_cupti_open(struct rp_cupti *c, bool with_cuda, struct rp_err *why)
{
	memset(c, 0, sizeof(*c));
	int rc = with_cuda ? open_cuda(c, why) : 0;
	for (size_t i = 0; rc == 0 && !c->cupti && i < sizeof(cupti_paths) / sizeof(*cupti_paths); i++)
		c->cupti = dlopen(cupti_paths[i], RTLD_NOW | RTLD_LOCAL);
	if (rc == 0 && !c->cupti)
		rc = rp_err_set(why, -ENOENT, "libcupti.so.13 not found (%s); install CUDA 13's "
				"CUPTI (cuda-cupti-13-0, or pip nvidia-cuda-cupti) and put its lib "
				"directory in ld.so.conf or LD_LIBRARY_PATH", dlerror());
	const char *missing = NULL;
	if (rc == 0) {
#define LOAD(field, symbol, type) *(void **)&c->field = sym(c->cupti, #symbol, &missing);
		RP_CUPTI_CALLS(LOAD)
#undef LOAD
		*(void **)&c->result_string = sym(c->cupti, "cuptiGetResultString", &missing);
		*(void **)&c->timestamp = sym(c->cupti, "cuptiGetTimestamp", &missing);
		if (missing)
			rc = rp_err_set(why, -ENOSYS, "libcupti has no %s: PM sampling needs CUPTI "
					"from CUDA 12.6 or later", missing);
	}
	if (rc < 0)
		rp_cupti_close(c);
	return rc;
}

/* Neither library is unloaded: libcupti keeps threads and atexit
 * handlers, and pointers into libcuda. */
void rp_cupti_close(struct rp_cupti *c)
{
	memset(c, 0, sizeof(*c));
}

const char *rp_cupti_strerror(const struct rp_cupti *c, int result, char *buf, size_t len)
{
	const char *s = NULL;
	if (!c->result_string || c->result_string(result, &s) != RP_CUPTI_SUCCESS || !s)
		s = "unknown CUPTI error";
	snprintf(buf, len, "%s (%d)", s, result);
	return buf;
}
