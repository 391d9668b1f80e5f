/* The fuzz targets that talk to a real server over a socket. */
#ifndef RINGPROF_FUZZ_EXCHANGE_H
#define RINGPROF_FUZZ_EXCHANGE_H

#include <stddef.h>

/* Sends data on the connected socket fd, ends the writing side, and reads
 * until the server closes or is quiet for wait_ms, keeping the first cap
 * bytes in out; closes fd.  Returns how many bytes were kept.  A server
 * that answers early and closes ends the sending. */
size_t fuzz_exchange(int fd, const void *data, size_t size, void *out, size_t cap, int wait_ms);

#endif
