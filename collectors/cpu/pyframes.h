/* Python frames in CPU samples (docs/python-frames.md).
 *
 * When the sampler first sees a process (and again, backing off, while it
 * runs no Python), the executable and libraries it maps are searched for
 * CPython 3.10 to 3.13: the ELF symbols _PyRuntime, _PyEval_EvalFrameDefault
 * and PyCode_Type, the version from Py_Version or the file name.  The BPF
 * program is then told (install) where the interpreter's state is and the
 * version's offsets, and walks the sampled thread's Python frames into
 * each sample as (code object, instruction offset) pairs.
 *
 * For each sample rp_pyframes_sample merges those frames into the native
 * stack, each native frame in _PyEval_EvalFrameDefault replaced by the
 * Python frames that run of the loop executes (see rp_py_merge for a
 * native walk that never reaches the loop: libpython without frame
 * pointers).  Each new (code object,
 * instruction offset) of a process is read from its memory (bounded reads
 * of untrusted memory, cached) and handed on as an RP_EV_PY_CODE event:
 * name "qualname\tfile", line from the code's line table (the first line
 * when the table says nothing).  A code object that does not read as one
 * gets no event: exports name it "[unknown python frame]".
 *
 * Single threaded. */
#ifndef RINGPROF_PYFRAMES_H
#define RINGPROF_PYFRAMES_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "event.h"

struct rp_py_proc;

/* Reads len bytes at addr of process pid into buf: 0 or a negative errno
 * (a short read is an error). */
typedef int (*rp_py_read_fn)(void *ctx, uint32_t pid, uint64_t addr, void *buf, size_t len);
/* Tells the sampler to walk pid's Python frames as py says (NULL: stop):
 * rp_sampler_set_python. */
typedef int (*rp_py_install_fn)(void *ctx, uint32_t pid, const struct rp_py_proc *py);

struct rp_pyframes_opts {
	const char *proc_root;       /* "/proc"; another directory in tests */
	rp_py_install_fn install;
	void *install_ctx;
	rp_py_read_fn read;          /* NULL: process_vm_readv */
	void *read_ctx;
};

struct rp_pyframes_stats {
	uint64_t processes;  /* found running CPython */
	uint64_t codes;      /* code locations described (events handed on) */
	uint64_t unreadable; /* code objects that did not read as one */
};

struct rp_pyframes;

RP_MUST_CHECK int rp_pyframes_new(const struct rp_pyframes_opts *opts, struct rp_pyframes **out,
		    struct rp_err *err);
void rp_pyframes_free(struct rp_pyframes *p);

/* For a CPU sample and the Python frames the sampler read with it (leaf
 * first, sampler_record.h's encoding): finds out whether its process runs
 * Python (installing it), hands fn an RP_EV_PY_CODE event for each code
 * location new to the process, and writes the sample with its Python
 * frames merged in to *out (its frames in frames, which needs
 * RP_STACK_MAX).  Returns 0 or the first error of fn. */
RP_MUST_CHECK int rp_pyframes_sample(struct rp_pyframes *p, const struct rp_event *sample, const uint64_t *py,
		       unsigned npy, rp_event_fn fn, void *ctx, struct rp_event *out,
		       uint64_t *frames);

/* Forget the processes that exited (no <proc_root>/PID any more). */
void rp_pyframes_reap(struct rp_pyframes *p);

void rp_pyframes_stats(const struct rp_pyframes *p, struct rp_pyframes_stats *st);

/* ---- the parts, for tests ---- */

/* The line of instruction lasti (code units) in a co_linetable of CPython
 * 3.minor (3.10's format or 3.11's); 0 when the table does not say. */
uint32_t rp_py_line(unsigned minor, const uint8_t *table, size_t len, uint32_t first_line,
		    uint32_t lasti);

struct rp_py_code {
	char name[RP_NAME_MAX + 1]; /* "qualname\tfile" */
	uint32_t line;
};

/* Describe the code object at code, instruction lasti, of process pid
 * running CPython 3.minor, reading its memory with read.  code_type: the
 * address of PyCode_Type in the process (0: not checked).  -EINVAL when
 * it does not read as a code object, -ENOTSUP for another version. */
RP_MUST_CHECK int rp_py_describe(unsigned minor, rp_py_read_fn read, void *ctx, uint32_t pid, uint64_t code,
		   uint64_t code_type, uint32_t lasti, struct rp_py_code *out);

/* Where a process's interpreter runs: _PyEval_EvalFrameDefault and the
 * executable mappings of the file holding it. */
struct rp_py_native {
	uint64_t eval_start, eval_end;
	uint64_t text_start, text_end;
};

/* Merge npy Python frames (sampler encoding) into the native user frames
 * user[0..nuser) (leaf first): each frame in the loop replaced by the
 * Python frames of its run, those left over after the native frames.
 * Where no native frame is in the loop, the Python frames go after the
 * first native frame in the interpreter's text, and the native frames
 * past it are left out (a walk through code without frame pointers is
 * guesswork); without such a frame, after all of them.  Writes at most
 * max frames to out, returns how many. */
unsigned rp_py_merge(const uint64_t *user, unsigned nuser, const uint64_t *py, unsigned npy,
		     const struct rp_py_native *at, uint64_t *out, unsigned max);

#endif
