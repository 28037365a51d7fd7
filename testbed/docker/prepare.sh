#!/bin/bash
# Prepares this machine for the Docker testbed (swiftide-ssh-testbed's DockerTestbed
# and compose.yaml). Idempotent; safe to run before every CI job.
#
#   bash testbed/docker/prepare.sh            # everything below
#   bash testbed/docker/prepare.sh build openssh dropbear
#                                             # only (re)build missing images
#   bash testbed/docker/prepare.sh base       # only make sure the base image exists
#   bash testbed/docker/prepare.sh tag openssh  # print the image tag, nothing else
#
# Full run:
#   1. installs docker.io and debootstrap with apt-get if missing (root only),
#   2. starts dockerd in the background if the daemon is not reachable (no systemd
#      needed; log in /var/log/dockerd.log; override flags with DOCKERD_FLAGS),
#   3. makes sure the base image $BASE_IMAGE (the FROM of the Dockerfiles) exists: an
#      image of that name is used as it is; otherwise, as BASE_IMAGE_SOURCE says, it is
#      pulled from its registry (`docker pull`, bounded by PULL_TIMEOUT) or built with
#      debootstrap from this machine's Debian mirror (no registry needed),
#   4. builds the testbed images, each tagged swiftide-ssh-testbed-<name>:<hash>, where
#      <hash> covers every file of its build context: an image is rebuilt only when its
#      files change. Each also gets the moving tag swiftide-ssh-testbed-<name>:latest.
#
# Environment: DOCKER (the docker CLI, default `docker`), BASE_IMAGE (default
# debian:bookworm-slim; e.g. 127.0.0.1:5000/debian:bookworm-slim for a local registry),
# BASE_IMAGE_SOURCE (how a missing base image is made: `auto`, the default, pulls and falls
# back to debootstrap when the pull fails; `pull` only pulls; `debootstrap` never contacts a
# registry), PULL_TIMEOUT (seconds, default 300), DEBIAN_MIRROR (default: the first bookworm
# URI in the apt sources), DOCKERD_FLAGS (extra dockerd arguments).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DOCKER=${DOCKER:-docker}
BASE_IMAGE=${BASE_IMAGE:-debian:bookworm-slim}
BASE_IMAGE_SOURCE=${BASE_IMAGE_SOURCE:-auto}
PULL_TIMEOUT=${PULL_TIMEOUT:-300}
SUITE=bookworm
IMAGES="openssh dropbear"

log() { printf '[prepare] %s\n' "$*" >&2; }
die() { printf '[prepare] error: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

# The build context of an image, and the files in it that docker receives (the
# OpenSSH context's .dockerignore lets exactly these through).
context_dir() {
    case "$1" in
        openssh) echo "$HERE" ;;
        dropbear) echo "$HERE/dropbear" ;;
        *) die "unknown image '$1' (known: $IMAGES)" ;;
    esac
}
context_files() {
    case "$1" in
        openssh) printf '%s\n' .dockerignore Dockerfile entrypoint.sh sshd_config ;;
        dropbear) (cd "$HERE/dropbear" && find . -type f | sed 's#^\./##' | LC_ALL=C sort) ;;
    esac
}

# swiftide-ssh-testbed-<name>:<first 16 hex digits of a sha256 over "path\0sha256\n"
# of each context file, sorted by path>. DockerTestbed asks this script for the tag.
image_tag() {
    local dir hash
    dir=$(context_dir "$1")
    hash=$(cd "$dir" && context_files "$1" | LC_ALL=C sort | while IFS= read -r f; do
               printf '%s\0%s\n' "$f" "$(sha256sum < "$f" | cut -d' ' -f1)"
           done | sha256sum | cut -c1-16)
    echo "swiftide-ssh-testbed-$1:$hash"
}

have_image() { "$DOCKER" image inspect "$1" >/dev/null 2>&1; }

install_packages() {
    local missing=()
    # A reachable daemon (e.g. DOCKER_HOST) needs no local dockerd.
    if ! command -v dockerd >/dev/null 2>&1 && ! "$DOCKER" version >/dev/null 2>&1; then
        missing+=(docker.io)
    fi
    command -v "$DOCKER" >/dev/null 2>&1 || missing+=(docker.io)
    # debootstrap is only needed when the base image may be built here.
    if [ "$BASE_IMAGE_SOURCE" != pull ] && ! have_image "$BASE_IMAGE"; then
        command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
    fi
    command -v flock >/dev/null 2>&1 || missing+=(util-linux)
    [ ${#missing[@]} -eq 0 ] && return 0
    [ "$(id -u)" -eq 0 ] || die "missing ${missing[*]}; install them (apt-get install -y ${missing[*]})"
    log "installing ${missing[*]}"
    local t0; t0=$(now)
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    # shellcheck disable=SC2046
    apt-get install -y -q --no-install-recommends $(printf '%s\n' "${missing[@]}" | sort -u) >/dev/null
    log "installed in $(since "$t0")"
}

start_dockerd() {
    if "$DOCKER" version >/dev/null 2>&1; then return 0; fi
    [ -n "${DOCKER_HOST:-}" ] && die "the daemon at DOCKER_HOST=$DOCKER_HOST is not reachable"
    [ "$(id -u)" -eq 0 ] || die "the Docker daemon is not running; start it as root (dockerd &)"
    command -v dockerd >/dev/null 2>&1 || die "dockerd not found (apt-get install -y docker.io)"
    log "starting dockerd (log: /var/log/dockerd.log)"
    local t0; t0=$(now)
    # setsid: the daemon outlives this script and its terminal.
    # shellcheck disable=SC2086
    setsid dockerd ${DOCKERD_FLAGS:-} >>/var/log/dockerd.log 2>&1 < /dev/null &
    for _ in $(seq 1 120); do
        if "$DOCKER" version >/dev/null 2>&1; then
            log "dockerd ready in $(since "$t0")"
            return 0
        fi
        sleep 0.5
    done
    tail -n 20 /var/log/dockerd.log >&2 || true
    die "dockerd did not come up within 60 s (see /var/log/dockerd.log)"
}

# The Debian mirror apt uses on this machine (deb822 .sources or one-line .list).
debian_mirror() {
    if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
    local f uri
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        uri=$(awk -v suite="$SUITE" '
            /^[[:space:]]*$/ { if (u != "" && s ~ ("(^| )" suite "( |$)")) { print u; exit } u = ""; s = ""; next }
            /^URIs:/ { u = $2 }
            /^Suites:/ { s = ""; for (i = 2; i <= NF; i++) s = s " " $i; s = s " " }
            END { if (u != "" && s ~ ("(^| )" suite "( |$)")) print u }' "$f" | head -n 1)
        [ -n "$uri" ] && { echo "$uri"; return; }
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        uri=$(awk -v suite="$SUITE" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i + 1) == suite) { print $i; exit } }' "$f")
        [ -n "$uri" ] && { echo "$uri"; return; }
    done
    echo "http://deb.debian.org/debian"
}

# The host's Debian apt sources (files whose URIs all look like Debian mirrors), so that
# apt inside image builds uses the same mirror.
copy_apt_sources() {
    local root=$1 f copied=0
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [ -s "$f" ] || continue
        if grep -Eo '(URIs:[[:space:]]*|^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?)[^[:space:]]+' "$f" | grep -vq debian; then
            continue
        fi
        grep -Eq '(URIs:|^deb[[:space:]])' "$f" || continue
        mkdir -p "$root/etc/apt/sources.list.d"
        cp "$f" "$root${f}"
        copied=1
    done
    if [ "$copied" -eq 1 ] && [ -f "$root/etc/apt/sources.list" ] && [ ! -f /etc/apt/sources.list ]; then
        rm -f "$root/etc/apt/sources.list"   # debootstrap's own line, now duplicated
    fi
}

check_base_source() {
    case "$BASE_IMAGE_SOURCE" in
        auto | pull | debootstrap) ;;
        *) die "BASE_IMAGE_SOURCE must be auto, pull or debootstrap (not '$BASE_IMAGE_SOURCE')" ;;
    esac
    case "$PULL_TIMEOUT" in
        '' | *[!0-9]*) die "PULL_TIMEOUT must be a whole number of seconds (not '$PULL_TIMEOUT')" ;;
    esac
}

# `docker pull $BASE_IMAGE` within PULL_TIMEOUT seconds (then SIGTERM, SIGKILL 5 s later:
# a registry that accepts the connection but never answers must not hang CI).
pull_base() {
    local t0 status=0
    log "pulling $BASE_IMAGE (at most $PULL_TIMEOUT s)"
    t0=$(now)
    timeout -k 5 "$PULL_TIMEOUT" "$DOCKER" pull -q "$BASE_IMAGE" >/dev/null 2>"${TMPDIR:-/tmp}/swiftide-ssh-testbed-pull.log" \
        || status=$?
    if [ "$status" -eq 0 ] && have_image "$BASE_IMAGE"; then
        rm -f "${TMPDIR:-/tmp}/swiftide-ssh-testbed-pull.log"
        log "pulled $BASE_IMAGE in $(since "$t0")"
        return 0
    fi
    if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
        log "pulling $BASE_IMAGE timed out after $PULL_TIMEOUT s"
    else
        log "pulling $BASE_IMAGE failed: $(tr '\n' ' ' < "${TMPDIR:-/tmp}/swiftide-ssh-testbed-pull.log")"
    fi
    rm -f "${TMPDIR:-/tmp}/swiftide-ssh-testbed-pull.log"
    return 1
}

build_base() {
    if have_image "$BASE_IMAGE"; then
        log "base image $BASE_IMAGE exists"
        return 0
    fi
    case "$BASE_IMAGE_SOURCE" in
        pull)
            pull_base || die "base image $BASE_IMAGE missing and not pullable (BASE_IMAGE_SOURCE=pull); set BASE_IMAGE_SOURCE=debootstrap to build it here"
            return 0
            ;;
        auto)
            if pull_base; then return 0; fi
            log "falling back to debootstrap"
            ;;
    esac
    debootstrap_base
}

debootstrap_base() {
    command -v debootstrap >/dev/null 2>&1 || die "base image $BASE_IMAGE missing and debootstrap not installed (apt-get install -y debootstrap)"
    [ "$(id -u)" -eq 0 ] || die "building the base image $BASE_IMAGE with debootstrap needs root"
    local mirror root t0
    mirror=$(debian_mirror)
    root=$(mktemp -d /var/tmp/swiftide-ssh-testbed-rootfs.XXXXXX)
    trap 'rm -rf "$root"' EXIT
    log "building $BASE_IMAGE: debootstrap --variant=minbase $SUITE from $mirror"
    t0=$(now)
    debootstrap --variant=minbase "$SUITE" "$root" "$mirror" >"$root.log" 2>&1 \
        || { tail -n 30 "$root.log" >&2; die "debootstrap failed (log: $root.log)"; }
    rm -f "$root.log"
    copy_apt_sources "$root"
    # Like the official slim images: no package lists or caches.
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
    tar -C "$root" -c . | "$DOCKER" import - "$BASE_IMAGE" >/dev/null
    rm -rf "$root"
    trap - EXIT
    log "base image $BASE_IMAGE built in $(since "$t0")"
}

build_image() {
    local name=$1 tag dir t0
    tag=$(image_tag "$name")
    dir=$(context_dir "$name")
    if have_image "$tag"; then
        log "$tag is up to date"
        return 0
    fi
    have_image "$BASE_IMAGE" || build_base
    log "building $tag"
    t0=$(now)
    # DOCKER_BUILDKIT=0: the classic builder needs no buildx plugin, and the
    # `# syntax=` line would make BuildKit fetch a frontend image.
    DOCKER_BUILDKIT=0 "$DOCKER" build -q --label swiftide-ssh-testbed.image="$name" \
        --build-arg BASE_IMAGE="$BASE_IMAGE" \
        -t "$tag" -t "swiftide-ssh-testbed-$name:latest" "$dir" >/dev/null \
        || die "building $tag failed (run: DOCKER_BUILDKIT=0 docker build $dir)"
    log "built $tag in $(since "$t0")"
}

# Serialise builds across processes (DockerTestbed calls `build` from tests).
with_lock() {
    exec 9>"${TMPDIR:-/tmp}/swiftide-ssh-testbed-prepare.lock"
    flock 9
}

case "${1:-all}" in
    tag)
        [ $# -eq 2 ] || die "usage: $0 tag <image>"
        image_tag "$2"
        ;;
    base)
        check_base_source
        with_lock
        build_base
        ;;
    build)
        shift
        # shellcheck disable=SC2086 # IMAGES is a space-separated list, split on purpose
        [ $# -gt 0 ] || set -- $IMAGES
        check_base_source
        with_lock
        for name in "$@"; do context_dir "$name" >/dev/null; build_image "$name"; done
        ;;
    all)
        T0=$(now)
        check_base_source
        install_packages
        start_dockerd
        with_lock
        build_base
        for name in $IMAGES; do build_image "$name"; done
        log "done in $(since "$T0")"
        for name in $IMAGES; do image_tag "$name"; done
        ;;
    *)
        die "usage: $0 [all | base | build [image...] | tag <image>]"
        ;;
esac
