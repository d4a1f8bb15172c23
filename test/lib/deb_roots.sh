# shellcheck shell=bash
# Roots of Debian releases for the package build (test/build_debs) and the package smoke test
# (test/package_smoke), sourced by both. Each root is made once by mmdebstrap from the host's
# Debian mirror, kept as a pristine tarball under /var/cache/outbox-debs (OUTBOX_DEBS_CACHE
# overrides), and unpacked afresh for every run: a build or a smoke test never sees what an
# earlier one left, and the host's own system (its PostgreSQL above all) is never touched.
#
# A tarball records a key, the hash of its recipe (suites, pins, packages, setup): one whose key
# differs from the recipe's is made again, under an exclusive lock (<name>.lock), so a changed
# package list never runs on a stale root. test/pg_root makes the test suite's roots the same
# way; these are separate because they hold other packages (a package build root holds only
# the build dependencies; a smoke root holds no compiler and no -dev package at all).
#
# Functions: deb_release MAJOR (sets release, base, extra, pins), deb_root_tarball NAME VARIANT
# [mmdebstrap option]..., deb_workdir NEED_GB WHAT, deb_unpack TARBALL DIR,
# deb_chroot ROOT COMMAND...

DEBS_CACHE=${OUTBOX_DEBS_CACHE:-/var/cache/outbox-debs}

# The Debian release that ships PostgreSQL major $1, as test/pg_root has it: release (its
# name), base (the suite mmdebstrap installs), extra (more suites in its sources; a -security
# suite comes from the security archive), pins (apt preferences, "selector priority
# package...").
deb_release() {
    case "$1" in
        15) release=bookworm; base=bookworm; extra=(bookworm-updates bookworm-security); pins=() ;;
        17) release=trixie; base=trixie; extra=(trixie-updates trixie-security); pins=() ;;
        18) release=forky; base=forky; extra=(); pins=() ;;
        # experimental has priority 1 (never chosen alone) unless pinned.
        19) release=experimental; base=sid; extra=(experimental)
            pins=("a=experimental 990 postgresql-19 postgresql-client-19 postgresql-server-dev-19 libpq5 libpq-dev") ;;
        16) echo "Debian ships no PostgreSQL 16 in any suite (bookworm has 15, trixie 17)" >&2; return 2 ;;
        *) echo "unsupported PostgreSQL major: $1 (15, 17, 18 or 19)" >&2; return 2 ;;
    esac
}

# The URI the host's apt uses for its own release's suite `$1` (its main archive, or with
# -security its security archive), else `$2` (test/pg_root's rule).
deb_host_uri() {
    local suite=$1 fallback=$2 uri
    uri=$(
        {
            cat /etc/apt/sources.list.d/*.sources 2>/dev/null
            echo
        } | awk -v c="$suite" '
            /^[[:space:]]*$/ { if (u != "" && s) { print u; exit } u = ""; s = 0; next }
            /^URIs:/ { u = $2 }
            /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == c) s = 1 }'
    )
    if [ -z "$uri" ]; then
        uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
            sed -n "s/^deb \(\[[^]]*\] \)\?\([^ ]*\) $suite .*/\2/p" | head -1)
    fi
    echo "${uri:-$fallback}"
}

# The sources lines of the current release (deb_release first).
deb_sources() {
    local codename url security_url s
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
    url=${OUTBOX_DEBIAN_MIRROR:-$(deb_host_uri "$codename" http://deb.debian.org/debian)}
    security_url=${OUTBOX_DEBIAN_SECURITY_MIRROR:-$(deb_host_uri "$codename-security" http://deb.debian.org/debian-security)}
    echo "deb $url $base main"
    for s in "${extra[@]}"; do
        case "$s" in
            *-security) echo "deb $security_url $s main" ;;
            *) echo "deb $url $s main" ;;
        esac
    done
}

# Makes (if missing or out of date) the tarball $DEBS_CACHE/NAME.tar of a root of the current
# release (deb_release first), of mmdebstrap variant VARIANT with the further mmdebstrap
# options given (--include=..., hooks), and prints its path. The recipe key covers the options,
# the sources, the pins and DEB_ROOT_KEY_EXTRA (what a caller's hooks depend on, e.g. the
# build dependencies they install).
deb_root_tarball() {
    local name=$1 variant=$2
    shift 2
    local tarball=$DEBS_CACHE/$name.tar key sources setup tmp start
    mapfile -t sources < <(deb_sources)
    # Bump when the common setup below changes in a way the options do not show.
    local format=1
    key=$(printf '%s\n' "format $format" "variant $variant" "$@" "${sources[@]}" "${pins[@]}" \
        "${DEB_ROOT_KEY_EXTRA:-}" | sha256sum | cut -c1-16)
    mkdir -p "$DEBS_CACHE"
    (
        exec 9>"$DEBS_CACHE/$name.lock"
        flock 9
        if [ -f "$tarball" ] && [ "$(cat "$tarball.key" 2>/dev/null)" = "$key" ]; then
            exit 0
        fi
        command -v mmdebstrap >/dev/null || {
            echo "deb_roots: installing mmdebstrap" >&2
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >&2
        }
        setup=$(mktemp -d "$DEBS_CACHE/.$name.setup.XXXXXX")
        tmp=$DEBS_CACHE/.$name.new.$$.tar
        trap 'rm -rf "$setup" "$tmp"' EXIT
        # apt preferences (pins); no "main" cluster when postgresql-NN is installed (the tests
        # make their own); no service started by a package's maintainer scripts in a chroot.
        local p selector priority names
        for p in "${pins[@]}"; do
            read -r selector priority names <<<"$p"
            printf 'Package: %s\nPin: release %s\nPin-Priority: %s\n\n' "$names" "$selector" "$priority"
        done > "$setup/outbox-pin"
        echo 'create_main_cluster = false' > "$setup/createcluster.conf"
        printf '#!/bin/sh\nexit 101\n' > "$setup/policy-rc.d"
        echo "deb_roots: making $tarball ($release, $variant)" >&2
        start=$(date +%s)
        # Check-Valid-Until off: a mirror serving a fixed snapshot passes the Release files'
        # expiry date (signatures are still checked). No documentation or translations are
        # unpacked (nobody reads them there; the package's own file list is checked from the
        # .deb). The apt lists are kept, so that a run installs from the cached root without
        # an apt-get update (and without a download, given its archive cache).
        mmdebstrap --mode=root --variant="$variant" --format=tar \
            --aptopt='Acquire::Check-Valid-Until "false"' \
            --aptopt='APT::Install-Recommends "false"' \
            --aptopt='Acquire::Languages "none"' \
            --dpkgopt='path-exclude=/usr/share/man/*' \
            --dpkgopt='path-exclude=/usr/share/doc/*' \
            --dpkgopt='path-include=/usr/share/doc/*/copyright' \
            --dpkgopt='path-exclude=/usr/share/locale/*' \
            --skip=cleanup/apt/lists \
            --setup-hook="mkdir -p \"\$1/etc/postgresql-common/createcluster.d\" \"\$1/etc/apt/preferences.d\"
                cp '$setup/createcluster.conf' \"\$1/etc/postgresql-common/createcluster.d/outbox.conf\"
                if [ -s '$setup/outbox-pin' ]; then cp '$setup/outbox-pin' \"\$1/etc/apt/preferences.d/\"; fi" \
            --customize-hook='printf "127.0.0.1 localhost\n::1 localhost ip6-localhost\n" > "$1/etc/hosts"' \
            --customize-hook="install -m 755 '$setup/policy-rc.d' \"\$1/usr/sbin/policy-rc.d\"" \
            "$@" --quiet \
            "$base" "$tmp" "${sources[@]}" >&2
        mv "$tmp" "$tarball"
        echo "$key" > "$tarball.key"
        echo "deb_roots: $tarball ready in $(($(date +%s) - start)) s ($(du -h "$tarball" | cut -f1))" >&2
    ) || return 1
    echo "$tarball"
}

# Prints a new directory for an unpacked root (WHAT names it): in /dev/shm when that tmpfs has
# NEED_GB free and allows executables (unpacking, dpkg and deleting the tree then cost no disk
# I/O: deleting a root that dpkg just filled took 12 s of a 45 s smoke test on disk), else in
# /var/tmp. OUTBOX_DEBS_WORK names another parent directory.
deb_workdir() {
    local need_gb=$1 what=$2 base=${OUTBOX_DEBS_WORK:-}
    if [ -z "$base" ]; then
        base=/var/tmp
        if findmnt -n -o OPTIONS /dev/shm 2>/dev/null | grep -qv noexec &&
            [ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -ge $((need_gb * 1024 * 1024)) ]; then
            base=/dev/shm
        fi
    fi
    mktemp -d "$base/outbox-$what.XXXXXX"
}

# Unpacks TARBALL into DIR (made, must not exist).
deb_unpack() {
    mkdir "$2"
    tar -xf "$1" -C "$2"
}

# Runs COMMAND as root inside ROOT with /proc, /dev (a private /dev/shm for PostgreSQL's shared
# memory), /dev/pts and a read-only /sys mounted in a mount namespace of its own (unshare):
# they vanish when it ends, however it ends. The environment inside is clean but for
# DEB_CHROOT_ENV (NAME=VALUE words). DEB_CHROOT_BIND (HOSTDIR:DIR words) binds host directories
# into the root (e.g. a persistent apt archive cache). The root shares the host's network: a
# server on the host's 127.0.0.1 is reachable from inside, and the other way round.
deb_chroot() {
    local root=$1
    shift
    # shellcheck disable=SC2086  # DEB_CHROOT_ENV and DEB_CHROOT_BIND are lists of words
    unshare --mount --propagation private -- bash -euo pipefail -c '
        root=$1 binds=$2; shift 2
        mount -t proc proc "$root/proc"
        mount --bind /dev "$root/dev"
        mount -t tmpfs -o mode=1777,nosuid,nodev shm "$root/dev/shm"
        mount --bind /dev/pts "$root/dev/pts"
        mount -t sysfs -o ro sysfs "$root/sys"
        for b in $binds; do
            mkdir -p "$root/${b#*:}"
            mount --bind "${b%%:*}" "$root/${b#*:}"
        done
        exec chroot "$root" "$@"' deb_chroot "$root" "${DEB_CHROOT_BIND:-}" /usr/bin/env -i \
        HOME=/root LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        ${DEB_CHROOT_ENV:-} "$@"
}
