#!/bin/bash
# Slurm epilog for ringprof, for two places in slurm.conf:
#   Epilog=/etc/ringprof/slurm/epilog.sh           (each node, at job end)
#     mode "session": stops the session job<JOBID> prolog.sh started.
#   EpilogSlurmctld=/etc/ringprof/slurm/epilog.sh  (the controller)
#     mode "failure": when the job failed, the same window of the last
#     RINGPROF_SLURM_LAST on every node of the job, at once, named
#     job<JOBID> (ringprof snapshot --hosts over the daemons' TCP API).
# Slurm gives the job's exit status to EpilogSlurmctld only; it says
# which epilog runs in SLURM_SCRIPT_CONTEXT.
#
# Settings: /etc/default/ringprof-slurm (see docs/cluster.md).  An epilog
# that fails drains the node, so problems are logged and it exits 0.
[[ -r /etc/default/ringprof-slurm ]] && . /etc/default/ringprof-slurm
RINGPROF=${RINGPROF:-/usr/bin/ringprof}
RINGPROF_SLURM_MODE=${RINGPROF_SLURM_MODE:-session}
RINGPROF_SLURM_RUN=${RINGPROF_SLURM_RUN:-slurm}
RINGPROF_SLURM_LAST=${RINGPROF_SLURM_LAST:-5m}
RINGPROF_PORT=${RINGPROF_PORT:-7070}
RINGPROF_TOKEN_FILE=${RINGPROF_TOKEN_FILE:-/etc/ringprof/token}
export RINGPROF_SOCKET=${RINGPROF_SOCKET:-/run/ringprof/ringprofd.sock}

log() { logger -t ringprof-epilog "job ${SLURM_JOB_ID:-?}: $*" 2>/dev/null || echo "$*" >&2; }

[[ -n ${SLURM_JOB_ID:-} ]] || exit 0
case ${SLURM_SCRIPT_CONTEXT:-epilog_slurmd} in
epilog_slurmd)
  if [[ $RINGPROF_SLURM_MODE == session ]] &&
     ! out=$("$RINGPROF" stop "job$SLURM_JOB_ID" 2>&1 >/dev/null); then
    log "stopping session job$SLURM_JOB_ID: $out"
  fi
  ;;
epilog_slurmctld)
  # The wait(2) status of the batch script, and the highest of its steps.
  if [[ $RINGPROF_SLURM_MODE == failure &&
        ( ${SLURM_JOB_EXIT_CODE:-0} != 0 || ${SLURM_JOB_DERIVED_EC:-0} != 0 ) ]]; then
    hosts=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed "s/\$/:$RINGPROF_PORT/" | paste -sd, -)
    if ! out=$("$RINGPROF" snapshot --hosts "$hosts" --token-file "$RINGPROF_TOKEN_FILE" \
               --last "$RINGPROF_SLURM_LAST" --name "job$SLURM_JOB_ID" --run "$RINGPROF_SLURM_RUN" \
               --reason "slurm job $SLURM_JOB_ID failed (exit status ${SLURM_JOB_EXIT_CODE:-?})" 2>&1); then
      log "snapshot of the failed job: $out"
    fi
  fi
  ;;
esac
exit 0
