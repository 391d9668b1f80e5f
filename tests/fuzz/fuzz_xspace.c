/* Fuzz what an XLA profiler server's bytes go through.  The first input
 * byte picks the path: even, the rest is an XSpace for the decoder; odd,
 * the rest is a gRPC response body fed to the deframer in pieces of 1-16
 * bytes (the second byte picks the size), whose message, if one comes
 * out, goes to the decoder.  Whatever the bytes: no crash, no read out of
 * bounds (every string and stat of every event is read), and errors are
 * negative errnos with a message. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grpc.h"
#include "xspace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MESSAGE_MAX (1u << 20)

static int touch(const struct rp_xla_event *ev, void *arg)
{
	size_t *sum = arg;
	*sum += strlen(ev->plane) + strlen(ev->line_name) + strlen(ev->name);
	for (size_t i = 0; i < ev->hlo_op_len; i++)
		*sum += (unsigned char)ev->hlo_op[i];
	for (size_t i = 0; i < ev->hlo_module_len; i++)
		*sum += (unsigned char)ev->hlo_module[i];
	for (size_t i = 0; i < ev->nstats; i++) {
		const struct rp_xla_stat *s = &ev->stats[i];
		*sum += strlen(s->name);
		if (s->type == RP_XLA_STAT_STR)
			for (size_t j = 0; j < s->value.str.len; j++)
				*sum += (unsigned char)s->value.str.ptr[j];
	}
	if (ev->nstats > 1u << 24)
		abort();
	return 0;
}

static void decode(const uint8_t *buf, size_t len)
{
	size_t sum = 0;
	struct rp_err err = {0};
	struct rp_xspace_counts counts;
	int64_t n = rp_xspace_decode(buf, len, 0, touch, &sum, &counts, &err);
	if (n < 0 && (n != err.code || !err.msg[0]))
		abort();
	if (n >= 0 && (uint64_t)n != counts.events)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	if (!(data[0] & 1)) {
		decode(data + 1, size - 1);
		return 0;
	}
	size_t piece = (size_t)(data[1] % 16) + 1;
	struct rp_grpc_deframer d;
	rp_grpc_deframer_init(&d, MESSAGE_MAX);
	struct rp_err err = {0};
	int r = 0;
	for (size_t o = 2; !r && o < size; o += piece)
		r = rp_grpc_deframe(&d, data + o, size - o < piece ? size - o : piece, &err);
	if (!r)
		r = rp_grpc_deframe_end(&d, &err);
	if (r && (r != err.code || !err.msg[0]))
		abort();
	if (!r)
		decode(d.msg, d.have);
	rp_grpc_deframer_free(&d);
	return 0;
}
