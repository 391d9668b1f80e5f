/* libringprof: annotate a program for ringprof and drive its sessions.
 *
 * Annotations go into a per-thread shared-memory ring handed out by the
 * ringprofd daemon on first use: no syscall per event.  Without a daemon
 * they cost a few ns, never block and never fail the program; when the
 * daemon comes (back), threads reconnect by themselves (checked at most
 * once a second), handing a restarted daemon what their rings kept
 * meanwhile.  The daemon's socket is $RINGPROF_SOCKET or the default
 * (/run/ringprof/ringprofd.sock as root, else
 * $XDG_RUNTIME_DIR/ringprof/ringprofd.sock).  A daemon that refuses the
 * process (the socket's group, its limits) gets one line on stderr, once
 * per process, with the fix; RINGPROF_QUIET=1 silences it.
 * $RINGPROF_DEVICE_UID, when set, is the device's stable id the daemon
 * records for the ring (printable ASCII without spaces, at most 63 bytes;
 * longer is left out).
 *
 * Session functions talk to the daemon's control API and return 0 or a
 * negative errno; ringprof_last_error() then says what went wrong. */
#ifndef RINGPROF_RINGPROF_H
#define RINGPROF_RINGPROF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Ranges nest per thread: each end closes the innermost open begin. */
void ringprof_range_begin(const char *name);
void ringprof_range_end(void);
void ringprof_instant(const char *name);
void ringprof_counter(const char *name, double value);
/* Name the calling thread in profiles (defaults to its comm). */
void ringprof_thread_name(const char *name);

/* Start a session now; its id is written to id_out (len bytes). */
int ringprof_session_start(const char *name, char *id_out, size_t len);
int ringprof_session_stop(const char *id);
/* Freeze the last last_ns nanoseconds (0: the daemon's default) into a
 * session; its id is written to session_out. */
int ringprof_snapshot(uint64_t last_ns, char *session_out, size_t len);

/* Events this thread dropped because its ring was full. */
uint64_t ringprof_dropped(void);
/* 1 when this thread's annotations currently reach a daemon. */
int ringprof_connected(void);
/* The message for the calling thread's last failed session call. */
const char *ringprof_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
