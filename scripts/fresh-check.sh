#!/usr/bin/env bash
# Proves the README's commands work on a bare Debian 12 (or 13): debootstraps a fresh minbase root, copies the committed checkout in, runs them there.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/fresh-check.sh [--reduced] [--suite bookworm|trixie]

Builds a bare Debian 12 (bookworm, the default) or Debian 13 (trixie: g++ 14,
--suite trixie) root with `debootstrap --variant=minbase` in
${KILN_FRESH_DIR:-/var/tmp/kiln-fresh}/root (recreated on every run; the downloaded
base packages are cached there as a debootstrap tarball), copies the checkout's
committed files (`git archive HEAD`) to /root/kiln in it and, chrooted there as root,
runs the README's two commands:

  scripts/setup.sh && build/tools/kiln/kiln train --epochs 1
  KILN_SKIP_SANITIZE=1 scripts/test.sh

--reduced runs instead: scripts/install-deps.sh; cmake --preset release
-DCMAKE_CXX_FLAGS_RELEASE=-O0 (unoptimised: it proves that everything compiles
and links, in half the time); cmake --build --preset release --target kiln_cli
(the kiln command only); kiln --help; kiln info.

Needs root. Prints each stage's wall time at the end; exits non-zero naming the
stage that failed. The root is left in place for inspection and removed by the next run.
EOF
}

reduced=0 suite=bookworm
while (($#)); do
  case $1 in
    --reduced) reduced=1 ;;
    --suite)
      (($# >= 2)) || { echo "fresh-check: --suite needs a value (bookworm or trixie)" >&2; exit 2; }
      suite=$2; shift
      [[ $suite == bookworm || $suite == trixie ]] \
        || { echo "fresh-check: unknown suite '$suite' (bookworm or trixie)" >&2; exit 2; } ;;
    -h|--help) usage; exit 0 ;;
    *) echo "fresh-check: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

die() { echo "fresh-check: $*" >&2; exit 1; }
log() { printf '\n==> [%(%H:%M:%S)T] %s\n' -1 "$*"; }

((EUID == 0)) || die "must run as root (debootstrap, chroot and mount need it)"

repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
work=${KILN_FRESH_DIR:-/var/tmp/kiln-fresh}
[[ $work != *[[:space:]]* ]] || die "work folder '$work' must not contain whitespace"
mkdir -p "$work"
work=$(realpath "$work")
case "$work/" in
  "$repo/"*|/) die "work folder '$work' must be outside the checkout ($repo)" ;;
esac
root=$work/root
mirror=http://deb.debian.org/debian
arch=$(dpkg --print-architecture)
tarball=$work/debootstrap-$suite-minbase-$arch.tgz
chroot_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# ---------------------------------------------------------------- stage bookkeeping
stage_names=() stage_secs=() stage_status=()
current_stage="" stage_t0=0 run_t0=$SECONDS child=""

fmt_secs() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# run_stage NAME CMD...: runs CMD (a command or function) in the background and waits for it, so
# that a signal to this script is handled at once; CMD's descendants are killed by cleanup.
run_stage() {
  local name=$1; shift
  current_stage=$name stage_t0=$SECONDS
  log "stage '$name' starts"
  "$@" </dev/null &
  child=$!
  wait "$child"
  child=""
  stage_names+=("$name") stage_secs+=($((SECONDS - stage_t0))) stage_status+=(ok)
  log "stage '$name' done in $(fmt_secs $((SECONDS - stage_t0)))"
  current_stage=""
}

# ---------------------------------------------------------------- processes and mounts
# Prints the descendants of pid $1 (not $1 itself), read from /proc.
descendants() {
  local -A kids=()
  local stat pid ppid rest
  for stat in /proc/[0-9]*/stat; do
    read -r rest <"$stat" 2>/dev/null || continue
    pid=${rest%% *}
    rest=${rest##*) }            # fields after "pid (comm) "
    read -r _ ppid _ <<<"$rest"
    kids[$ppid]+=" $pid"
  done
  local queue=("$1") p c
  while ((${#queue[@]})); do
    p=${queue[0]} queue=("${queue[@]:1}")
    for c in ${kids[$p]:-}; do echo "$c"; queue+=("$c"); done
  done
}

# Prints the pids of processes whose root directory is the fresh root (they were started in it by us).
chrooted_pids() {
  local d r
  for d in /proc/[0-9]*; do
    r=$(readlink "$d/root" 2>/dev/null) || continue
    [[ $r == "$root" || $r == "$root/"* ]] && echo "${d#/proc/}"
  done
  return 0
}

# Stops the running stage: its process tree and anything still running inside the root.
stop_processes() {
  local pids sig
  for sig in TERM KILL; do
    pids=$( { [[ -n $child ]] && { echo "$child"; descendants "$child"; }; chrooted_pids; } | sort -un)
    [[ -n $pids ]] || return 0
    echo "fresh-check: sending SIG$sig to ${pids//$'\n'/ }" >&2
    # shellcheck disable=SC2086  # one pid a word
    kill -"$sig" $pids 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      sleep 0.5
      local alive=""
      for p in $pids; do [[ -d /proc/$p ]] && alive+=" $p"; done
      [[ -n $alive ]] || return 0
    done
  done
}

# Mount points at or under the root, deepest first.
mounts_under_root() {
  findmnt -rn -o TARGET | awk -v r="$root" '$0 == r || index($0, r "/") == 1' | sort -r
}

unmount_all() {
  local m try
  for try in 1 2 3; do
    while read -r m; do
      [[ -n $m ]] || continue
      umount "$m" 2>/dev/null || true
    done < <(mounts_under_root)
    [[ -z $(mounts_under_root) ]] && return 0
    ((try == 1)) && stop_processes
    sleep 1
  done
  # Last resort: detach what is still busy so that nothing stays mounted.
  while read -r m; do
    [[ -n $m ]] && { echo "fresh-check: $m still busy, detaching it (umount -l)" >&2; umount -l "$m" || true; }
  done < <(mounts_under_root)
  if [[ -n $(mounts_under_root) ]]; then
    echo "fresh-check: could not unmount:" >&2; mounts_under_root >&2
    return 1
  fi
}

# Removes the root, only when nothing is mounted at or under it.
remove_root() {
  [[ -e $root ]] || return 0
  unmount_all || die "refusing to remove $root: something is still mounted under it"
  [[ -z $(mounts_under_root) ]] || die "refusing to remove $root: something is still mounted under it"
  rm -rf --one-file-system "$root"
}

mount_root() {
  # A fresh /dev of our own (not the host's), so that nothing in the root can write to the host's /dev.
  mount -t tmpfs -o mode=755,nosuid,size=16m kiln-fresh-dev "$root/dev"
  local spec name type maj min mode
  for spec in "null c 1 3 666" "zero c 1 5 666" "full c 1 7 666" "random c 1 8 666" \
              "urandom c 1 9 666" "tty c 5 0 666"; do
    read -r name type maj min mode <<<"$spec"
    mknod -m "$mode" "$root/dev/$name" "$type" "$maj" "$min"
  done
  mkdir -m 755 "$root/dev/pts"
  mkdir -m 1777 "$root/dev/shm"
  ln -s pts/ptmx "$root/dev/ptmx"
  ln -s /proc/self/fd "$root/dev/fd"
  ln -s /proc/self/fd/0 "$root/dev/stdin"
  ln -s /proc/self/fd/1 "$root/dev/stdout"
  ln -s /proc/self/fd/2 "$root/dev/stderr"
  mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 kiln-fresh-devpts "$root/dev/pts"
  mount -t tmpfs -o mode=1777,nosuid,nodev kiln-fresh-shm "$root/dev/shm"
  mount -t proc -o nosuid,nodev,noexec kiln-fresh-proc "$root/proc"
  mount -t sysfs -o ro,nosuid,nodev,noexec kiln-fresh-sys "$root/sys"
  rm -f "$root/etc/resolv.conf"
  cp -L /etc/resolv.conf "$root/etc/resolv.conf"
}

# ---------------------------------------------------------------- exit handling
summary() {
  local rc=$1 i
  echo
  echo "==================== fresh-check summary ($([[ $reduced == 1 ]] && echo reduced || echo full) form, Debian $suite) ===================="
  for i in "${!stage_names[@]}"; do
    printf '  %-46s %-11s %s\n' "${stage_names[$i]}" "${stage_status[$i]}" "$(fmt_secs "${stage_secs[$i]}")"
  done
  printf '  %-46s %-11s %s\n' "total" "" "$(fmt_secs $((SECONDS - run_t0)))"
  [[ -e $tarball ]] && echo "  debootstrap tarball: $tarball ($(du -h "$tarball" | cut -f1))"
  echo "  root: $root (left for inspection; the next run recreates it)"
  if ((rc == 0)); then
    echo "  result: PASS"
  else
    echo "  result: FAIL in stage '${failed_stage:-setup}' (exit status $rc)"
  fi
  echo "=========================================================================================="
}

failed_stage=""
on_exit() {
  local rc=$?
  trap - EXIT INT TERM HUP
  set +e
  if [[ -n $current_stage ]]; then
    failed_stage=$current_stage
    ((rc == 0)) && rc=1
    local status=FAILED
    ((rc == 129 || rc == 130 || rc == 143)) && status=INTERRUPTED
    stage_names+=("$current_stage") stage_secs+=($((SECONDS - stage_t0))) stage_status+=("$status")
  fi
  [[ -n $child ]] && stop_processes
  if [[ -d $root ]] && ! unmount_all; then
    echo "fresh-check: WARNING: mounts left under $root" >&2
    ((rc == 0)) && rc=1
  fi
  summary "$rc"
  exit "$rc"
}
trap on_exit EXIT
trap 'echo "fresh-check: interrupted" >&2; exit 130' INT
trap 'echo "fresh-check: terminated" >&2; exit 143' TERM
trap 'echo "fresh-check: hangup" >&2; exit 129' HUP

# ---------------------------------------------------------------- stages
ensure_debootstrap() {
  command -v debootstrap >/dev/null && return 0
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends debootstrap
}

make_tarball() {
  local tmp=$work/tarball-build
  [[ -z $(findmnt -rn -o TARGET | awk -v r="$tmp" '$0 == r || index($0, r "/") == 1') ]] \
    || die "something is mounted under $tmp"
  rm -rf --one-file-system "$tmp" "$tarball.partial.tgz"
  debootstrap --variant=minbase --arch="$arch" --make-tarball="$tarball.partial.tgz" "$suite" "$tmp" "$mirror"
  mv "$tarball.partial.tgz" "$tarball"
  [[ -z $(findmnt -rn -o TARGET | awk -v r="$tmp" '$0 == r || index($0, r "/") == 1') ]] \
    || die "something is mounted under $tmp"
  rm -rf --one-file-system "$tmp"
}

build_root() {
  mkdir -p "$root"
  debootstrap --variant=minbase --arch="$arch" --unpack-tarball="$tarball" "$suite" "$root" "$mirror"
  echo "--- $root/etc/apt/sources.list (written by debootstrap):"
  cat "$root/etc/apt/sources.list"
  grep -q "^deb $mirror $suite main" "$root/etc/apt/sources.list" \
    || { echo "fresh-check: unexpected sources.list in the root" >&2; return 1; }
}

copy_checkout() {
  if [[ -n $(git -C "$repo" status --porcelain --untracked-files=no) ]]; then
    echo "fresh-check: note: the checkout has uncommitted changes; only HEAD ($(git -C "$repo" rev-parse --short HEAD)) is copied"
  fi
  git -C "$repo" archive --format=tar --prefix=kiln/ HEAD | tar -x -C "$root/root"
  echo "copied $(git -C "$repo" rev-parse --short HEAD) to /root/kiln: $(find "$root/root/kiln" -type f | wc -l) files"
}

# in_root COMMAND: runs a bash command line in /root/kiln inside the root, as root, with a clean environment.
in_root() {
  echo "+ (in root, /root/kiln) $1"
  chroot "$root" /usr/bin/env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/bash \
    TERM="${TERM:-dumb}" LANG=C.UTF-8 PATH="$chroot_path" \
    /bin/bash -c "set -euo pipefail; cd /root/kiln; $1"
}

# ---------------------------------------------------------------- main
log "fresh-check ($([[ $reduced == 1 ]] && echo reduced || echo full) form, Debian $suite): work folder $work, checkout $repo"

current_stage="host: debootstrap present" stage_t0=$SECONDS
ensure_debootstrap
current_stage=""

# A root left by an earlier run (possibly interrupted) goes first; nothing may stay mounted under it.
current_stage="remove the previous root" stage_t0=$SECONDS
remove_root
current_stage=""

if [[ ! -s $tarball ]]; then
  run_stage "debootstrap: download (tarball)" make_tarball
fi
run_stage "debootstrap: unpack" build_root
run_stage "copy (git archive HEAD)" copy_checkout

current_stage="mount" stage_t0=$SECONDS
mount_root
current_stage=""
echo "mounted under $root:"; mounts_under_root | sort | sed 's/^/  /'

if ((reduced)); then
  run_stage "install-deps" in_root "scripts/install-deps.sh"
  run_stage "build (kiln command)" in_root \
    "cmake --preset release -DCMAKE_CXX_FLAGS_RELEASE=-O0 && cmake --build --preset release -j\$(nproc) --target kiln_cli"
  run_stage "run (kiln --help, kiln info)" in_root "build/tools/kiln/kiln --help && build/tools/kiln/kiln info"
else
  # The README's first command, `scripts/setup.sh && build/tools/kiln/kiln train --epochs 1`, as two
  # stages so that each has its own time (the second runs only if the first succeeded, as with &&).
  run_stage "setup+build (scripts/setup.sh)" in_root "scripts/setup.sh"
  run_stage "train (kiln train --epochs 1)" in_root "build/tools/kiln/kiln train --epochs 1"
  run_stage "test (KILN_SKIP_SANITIZE=1 scripts/test.sh)" in_root "KILN_SKIP_SANITIZE=1 scripts/test.sh"
fi
