#!/bin/sh
# Entry point of the Dropbear/BusyBox testbed image: installs mounted (or `docker cp`ed)
# keys from /keys, then runs dropbear in the foreground, logging to stderr. Arguments
# are passed to dropbear (e.g. `-j -k` to forbid port forwarding).
set -eu

key=/etc/dropbear/dropbear_ed25519_host_key
# An OpenSSH-format host key keeps known_hosts stable (DockerTestbed provides one).
if [ -f /keys/ssh_host_ed25519_key ]; then
    dropbearconvert openssh dropbear /keys/ssh_host_ed25519_key "$key.new" >/dev/null 2>&1
    mv "$key.new" "$key"
fi

if [ -f /keys/authorized_keys ]; then
    cp /keys/authorized_keys /home/tester/.ssh/authorized_keys
    chown 1000:1000 /home/tester/.ssh/authorized_keys
    chmod 0600 /home/tester/.ssh/authorized_keys
fi
if [ ! -s /home/tester/.ssh/authorized_keys ]; then
    echo "testbed: no authorized key for 'tester'; provide /keys/authorized_keys" >&2
fi

echo "testbed: host key $(dropbearkey -y -f "$key" | grep '^ssh-' | cut -d' ' -f1,2)" >&2
# Dropbear logs nothing once it listens, so a background watcher reports it: the line below
# appears when the kernel lists a listening TCP socket on port 22 (hex 0016) in
# /proc/net/tcp. It is the readiness signal of the testcontainers `Image` (SshImage).
(
    i=0
    while [ "$i" -lt 600 ]; do
        if grep -Eq '^ *[0-9]+: [0-9A-F]{8}:0016 [0-9A-F]{8}:0000 0A ' /proc/net/tcp; then
            echo "testbed: listening on port 22" >&2
            exit 0
        fi
        usleep 50000
        i=$((i + 1))
    done
) &
# -F foreground, -E log to stderr, -s no password logins, -w no root logins.
exec /usr/sbin/dropbear -F -E -s -w -p 22 -r "$key" "$@"
