#!/bin/bash
# Slurm Prolog for ringprof (slurm.conf: Prolog=/etc/ringprof/slurm/prolog.sh,
# PrologFlags=Alloc so that it runs when the job starts on each node).
#
# In the default mode, "session", it starts a session named job<JOBID> on
# this node's ringprofd; epilog.sh stops it.  With a shared log directory
# every node of the job writes its part into one session directory.  In
# mode "failure" nothing is recorded here: epilog.sh, as EpilogSlurmctld,
# takes a snapshot of every node when the job fails.
#
# Settings: /etc/default/ringprof-slurm (see docs/cluster.md).  A prolog
# that fails drains the node, so problems are logged and the job runs on.
[[ -r /etc/default/ringprof-slurm ]] && . /etc/default/ringprof-slurm
RINGPROF=${RINGPROF:-/usr/bin/ringprof}
RINGPROF_SLURM_MODE=${RINGPROF_SLURM_MODE:-session}
RINGPROF_SLURM_RUN=${RINGPROF_SLURM_RUN:-slurm}
export RINGPROF_SOCKET=${RINGPROF_SOCKET:-/run/ringprof/ringprofd.sock}

[[ $RINGPROF_SLURM_MODE == session && -n ${SLURM_JOB_ID:-} ]] || exit 0
if ! out=$("$RINGPROF" start --name "job$SLURM_JOB_ID" --run "$RINGPROF_SLURM_RUN" \
           --reason "slurm job $SLURM_JOB_ID (${SLURM_JOB_USER:-?})" 2>&1); then
  logger -t ringprof-prolog "job $SLURM_JOB_ID: no session: $out" 2>/dev/null || echo "$out" >&2
fi
exit 0
