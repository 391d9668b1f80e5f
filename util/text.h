/* Text from outside (reasons, alert labels, session, range and process
 * names, paths) made safe to print: a terminal must not take it for
 * commands.  Control characters (C0, DEL, C1 as bytes or as UTF-8
 * U+0080..U+009F), Unicode's bidirectional overrides and bytes that are
 * not UTF-8 become "\xNN" per byte; UTF-8 text stays as it is. */
#ifndef RINGPROF_TEXT_H
#define RINGPROF_TEXT_H

#include <stddef.h>

/* s (NULL reads as "") escaped into buf, cut at a whole character or
 * escape to fit cap - 1 bytes and a NUL.  Returns buf. */
const char *rp_text_escape(const char *s, char *buf, size_t cap);
/* The same, whole, malloc'ed; NULL when out of memory. */
char *rp_text_escape_dup(const char *s);

#endif
