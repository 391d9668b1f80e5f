/* Default locations, shared by the daemon, the CLI and the client library
 * so they agree without configuration.  As root: /run/ringprof/ringprofd.sock,
 * /var/lib/ringprof/rings, /var/lib/ringprof/sessions.  Otherwise:
 * $XDG_RUNTIME_DIR/ringprof/ringprofd.sock (falling back to
 * /tmp/ringprof-$UID/ringprofd.sock), ~/.local/state/ringprof/rings and
 * ~/.local/state/ringprof/sessions. */
#ifndef RINGPROF_PATHS_H
#define RINGPROF_PATHS_H

#include <stddef.h>

/* $RINGPROF_SOCKET when set, else the default above. */
const char *rp_default_socket_path(char *buf, size_t len);
const char *rp_default_state_dir(char *buf, size_t len);
const char *rp_default_logdir(char *buf, size_t len);
/* The producer socket that goes with a control socket: "<socket>.producers". */
const char *rp_producer_socket_path(const char *control_socket, char *buf, size_t len);

#endif
