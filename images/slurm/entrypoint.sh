#!/bin/bash
# Container entrypoint of the slurm image: `entrypoint.sh ROLE [ARGS...]`.
#
# ROLE is one of slurmctld, slurmd, slurmrestd, sackd, slurmdbd, stunnel, or a login
# pod's sssd, sshd, sleep. The daemon runs in the foreground (-D: logs go to
# stdout/stderr, the container's lifetime is the daemon's) with ARGS appended,
# as the user Slurm expects:
#
#   role        user         why
#   slurmctld   slurm        SlurmUser (slurm.conf(5)); state and logs are slurm's
#   sackd       slurm        sackd(8): runs as SlurmUser, warns otherwise
#   slurmdbd    slurm        slurmdbd.conf(5): SlurmUser owns slurmdbd.conf
#   slurmrestd  slurmrestd   slurmrestd(8) refuses root and SlurmUser
#   stunnel     slurmrestd   TLS in front of slurmrestd's UNIX socket, which it owns
#   slurmd      root         becomes each job's user, manages cgroups and devices
#   sssd        root         sssd(8) reads sssd.conf only if root owns it, mode 0600
#   sshd        root         becomes each user who logs in
#   sleep       any uid but root and SlurmUser: the login pod's container that
#               `kubectl exec` lands in, which only waits. Named after the
#               program, as every role is, so the same container args also run
#               where there is no entrypoint (the e2e runtime's host build)
#
# Started as root (e.g. no runAsUser in the pod), it drops to that user with
# setpriv; started as a non-root uid (the image's default USER, or the pod's
# runAsUser), it checks that the uid is one the role can run as.
#
# Environment:
#   SLURMKUBE_CONF_SERVER    host[:port] of slurmctld for configless slurmd/sackd,
#                            used when ARGS carry no --conf-server
#   SLURMKUBE_OPERATOR_URL   the operator's power-saving endpoint (slurmctld);
#   SLURMKUBE_POWER_TOKEN_FILE  and its bearer token file: both are handed to
#                            slurmkube-resume/-suspend through /run/slurm/slurmkube-power.env,
#                            since slurmctld starts those programs with an
#                            empty environment (slurmctld/slurmscriptd.c)
#   SLURMKUBE_SSSD_CONF      sssd: the rendered sssd.conf (a ConfigMap file), copied
#                            to /etc/sssd/sssd.conf as root, mode 0600
#   SLURMKUBE_LDAP_BIND_PASSWORD_FILE  sssd: the LDAP bind password (a Secret
#                            file), appended as ldap_default_authtok; refused if
#                            it holds a control character (a second line)
set -euo pipefail

# On the run directory slurmctld needs writable anyway (SlurmctldPidFile).
POWER_ENV=${SLURMKUBE_POWER_ENV:-/run/slurm/slurmkube-power.env}

die() {
  printf 'entrypoint: %s\n' "$*" >&2
  exit 64
}

usage="usage: entrypoint.sh slurmctld|slurmd|slurmrestd|sackd|slurmdbd|stunnel|sssd|sshd|sleep [ARGS...]"
(($# >= 1)) || die "$usage"
role=$1
shift

case "$role" in
  slurmctld | sackd | slurmdbd) user=slurm ;;
  slurmrestd | stunnel) user=slurmrestd ;;
  slurmd) user=root ;;
  sssd | sshd) user=root ;;
  sleep)
    uid=$(id -u)
    ((uid != 0 && uid != $(id -u slurm))) \
      || die "sleep must run as an unprivileged uid, not uid $uid: set the pod's runAsUser"
    exec sleep "$@"
    ;;
  *) die "unknown role '$role'; $usage" ;;
esac

if [[ $role == sssd || $role == sshd ]]; then
  (($(id -u) == 0)) || die "$role must run as root (uid 0), not uid $(id -u)"
fi
if [[ $role == sssd ]]; then
  conf=/etc/sssd/sssd.conf
  install -m 0600 -o root -g root "${SLURMKUBE_SSSD_CONF:-/etc/slurmkube/sssd/sssd.conf}" "$conf"
  if [[ -n ${SLURMKUBE_LDAP_BIND_PASSWORD_FILE:-} ]]; then
    password=$(<"$SLURMKUBE_LDAP_BIND_PASSWORD_FILE") || die "cannot read the LDAP bind password"
    [[ -n $password && $password != *[[:cntrl:]]* ]] \
      || die "the LDAP bind password is empty or holds a control character (a second line)"
    # The rendered file ends in the LDAP domain's section (slurmkube.build.sssd).
    printf 'ldap_default_authtok = %s\n' "$password" >>"$conf"
    unset password
  fi
  # Volumes (emptyDirs, shared with the pod's other containers) hide the image's
  # folders. sssd refuses sockets of a group other than its own (check_file),
  # and a pod's fsGroup makes new files take that group: root's group, no
  # setgid. A restarted container finds its last run's sockets: removed.
  for dir in /var/lib/sss/pipes /var/lib/sss/mc; do
    install -d -o root -g root -m 0755 "$dir"
    chmod g-s "$dir"
  done
  rm -rf /var/lib/sss/pipes/private /var/lib/sss/pipes/nss /var/lib/sss/pipes/pam
  install -d -o root -g root -m 0700 /var/lib/sss/pipes/private
  exec /usr/sbin/sssd -i --logger=stderr "$@"
fi
if [[ $role == sshd ]]; then
  ssh-keygen -A >/dev/null
  install -d -m 0755 /run/sshd
  exec /usr/sbin/sshd -D -e "$@"
fi

has_conf_server() {
  local arg
  for arg in "$@"; do
    [[ $arg == --conf-server || $arg == --conf-server=* ]] && return 0
  done
  return 1
}

# A slurmrestd listen address: unix:/PATH or HOST:PORT (never an option's value,
# which are plugin names here).
has_listen_address() {
  local arg
  for arg in "$@"; do
    [[ $arg == unix:/* || $arg =~ ^[^-][^[:space:]]*:[0-9]+$ ]] && return 0
  done
  return 1
}

args=()
case "$role" in
  slurmctld)
    args=(-D)
    # An address and a file path, no secret: readable by slurm however this
    # script was started. Parsed, never sourced, by slurmkube-power.
    if [[ -n ${SLURMKUBE_OPERATOR_URL:-} ]]; then
      {
        printf 'SLURMKUBE_OPERATOR_URL=%s\n' "$SLURMKUBE_OPERATOR_URL"
        printf 'SLURMKUBE_POWER_TOKEN_FILE=%s\n' "${SLURMKUBE_POWER_TOKEN_FILE:-}"
      } >"$POWER_ENV.tmp" || die "cannot write $POWER_ENV: /run/slurm must be writable"
      chmod 0644 "$POWER_ENV.tmp"
      mv "$POWER_ENV.tmp" "$POWER_ENV"
    fi
    ;;
  slurmd | sackd)
    args=(-D)
    if [[ -n ${SLURMKUBE_CONF_SERVER:-} ]] && ! has_conf_server "$@"; then
      args+=(--conf-server "$SLURMKUBE_CONF_SERVER")
    fi
    ;;
  slurmdbd)
    args=(-D)
    ;;
  slurmrestd)
    # With no listen address in ARGS, 0.0.0.0:6820. slurmrestd listens on the
    # environment's address as well as on ARGS' (slurmrestd(8)), so the default
    # must not be set beside ARGS' UNIX socket, which stunnel serves as TLS.
    if ! has_listen_address "$@"; then
      export SLURMRESTD_LISTEN="${SLURMRESTD_LISTEN:-0.0.0.0:6820}"
    fi
    # JWT only: rest_auth/local needs a UNIX socket, which pods do not share.
    export SLURMRESTD_AUTH_TYPES="${SLURMRESTD_AUTH_TYPES:-rest_auth/jwt}"
    ;;
esac

uid=$(id -u)
want_uid=$(id -u "$user")

# The image's /run/slurm belongs to slurm (sackd's and slurmctld's files).
# slurmd, as root, refuses a run directory root does not own (26.05:
# `_prepare_run_dir: /run/slurm exists but is owned by 401`) and links its
# fetched config to /run/slurm/conf itself. Only the image's own directory is
# taken over: a volume that root owns (an emptyDir) is left as it is.
if [[ $role == slurmd ]] && ((uid == 0)); then
  run_dir=${SLURMKUBE_SLURMD_RUN_DIR:-/run/slurm}
  if [[ -d $run_dir ]] && owner=$(stat -c %u "$run_dir") && ((owner != 0)) && ((owner == $(id -u slurm))); then
    rmdir "$run_dir/conf" 2>/dev/null || true
    chown root:root "$run_dir"
  fi
fi
# By its full path: sackd re-executes argv[0] when slurmctld asks it to
# reconfigure, and execv() does not search PATH (a bare name fails, the
# container exits).
daemon=$(command -v "$role") || die "$role is not installed in this image"
if ((uid == want_uid)); then
  exec "$daemon" "${args[@]}" "$@"
elif ((uid == 0)); then
  # --init-groups: the account's groups only, none inherited from root.
  exec setpriv --reuid="$user" --regid="$user" --init-groups -- "$daemon" "${args[@]}" "$@"
elif [[ $role == slurmrestd ]] && ((uid != $(id -u slurm))); then
  # Any unprivileged uid other than SlurmUser is acceptable to slurmrestd.
  exec "$daemon" "${args[@]}" "$@"
else
  die "$role must run as $user (uid $want_uid), not uid $uid: set the pod's runAsUser to $want_uid"
fi
