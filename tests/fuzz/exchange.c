#include "exchange.h"

#include <poll.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

size_t fuzz_exchange(int fd, const void *data, size_t size, void *out, size_t cap, int wait_ms)
{
	for (size_t off = 0; off < size;) {
		ssize_t n = send(fd, (const uint8_t *)data + off, size - off, MSG_NOSIGNAL);
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	(void)shutdown(fd, SHUT_WR);
	size_t got = 0;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	while (poll(&p, 1, wait_ms) == 1) {
		uint8_t sink[4096];
		ssize_t n = recv(fd, got < cap ? (uint8_t *)out + got : sink,
				 got < cap ? cap - got : sizeof(sink), 0);
		if (n <= 0)
			break;
		got += got < cap ? (size_t)n : 0;
	}
	close(fd);
	return got;
}
