/* One unary gRPC call over cleartext HTTP/2 (h2c), with nghttp2 doing the
 * HTTP/2 and this module the gRPC part: the 5-byte message framing, the
 * headers, grpc-status and grpc-message in the trailers.
 *
 * Everything the peer sends is untrusted: the call has a deadline for
 * connect, request and response together; the response message has a size
 * cap checked against its length prefix before anything is buffered; and
 * each way it can go wrong has its own errno and a message:
 *   -EINVAL        address not HOST:PORT
 *   -EHOSTUNREACH  the host name does not resolve
 *   -ECONNREFUSED  nothing listens there
 *   -ETIMEDOUT     the deadline passed (or the server's DEADLINE_EXCEEDED)
 *   -ENOSYS        grpc-status UNIMPLEMENTED: the server lacks the method
 *   -EREMOTEIO     any other non-OK grpc-status (grpc-message quoted)
 *   -EMSGSIZE      the response announces more bytes than the cap
 *   -EBADMSG       not gRPC: bad framing, HTTP status, content type
 *   -EPROTO        not HTTP/2
 *   -ECONNRESET    the peer closed or reset the stream mid-response */
#ifndef RINGPROF_XLA_GRPC_H
#define RINGPROF_XLA_GRPC_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Call `path` ("/package.Service/Method") on addr ("host:port",
 * "[v6]:port") with the serialized request.  On success returns 0 and
 * *resp (malloc'ed, the caller frees) holds the response message. */
RP_MUST_CHECK int rp_grpc_unary(const char *addr, const char *path, const uint8_t *req, size_t req_len,
		  unsigned timeout_ms, size_t max_response, uint8_t **resp, size_t *resp_len,
		  struct rp_err *err);

/* "host:port" or "[v6]:port" into host (brackets dropped) and *port
 * (pointing into addr): 0, or -EINVAL naming addr. */
RP_MUST_CHECK int rp_grpc_split_addr(const char *addr, char *host, size_t host_size, const char **port,
		       struct rp_err *err);

/* The gRPC message framing of a body (a response, or a request on the
 * serving side), fed as it arrives: one
 * message (unary), uncompressed, of at most `max` bytes. */
struct rp_grpc_deframer {
	size_t max;
	const char *what;   /* in messages: "response" (the default), "request" */
	uint8_t prefix[5];
	size_t prefix_have;
	uint32_t want;      /* the prefix's length, once read */
	uint8_t *msg;
	size_t have, cap;
	int messages;       /* complete messages seen */
};

void rp_grpc_deframer_init(struct rp_grpc_deframer *d, size_t max);
/* Consume len more body bytes: 0, or -EMSGSIZE / -EBADMSG / -ENOMEM. */
RP_MUST_CHECK int rp_grpc_deframe(struct rp_grpc_deframer *d, const uint8_t *data, size_t len,
		    struct rp_err *err);
/* At the end of the body: 0 when exactly one whole message arrived. */
RP_MUST_CHECK int rp_grpc_deframe_end(const struct rp_grpc_deframer *d, struct rp_err *err);
void rp_grpc_deframer_free(struct rp_grpc_deframer *d);

#endif
