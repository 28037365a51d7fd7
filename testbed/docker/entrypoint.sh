#!/bin/sh
# Entry point of the swiftide-ssh-executor Docker testbed: installs mounted keys,
# then runs sshd in the foreground (logging to stderr). Arguments are passed to
# sshd, e.g. `-o MaxSessions=1`.
set -eu

# Privilege separation directory (/run may be a fresh tmpfs).
mkdir -p /run/sshd
chmod 0755 /run/sshd

# A mounted host key keeps known_hosts stable across image rebuilds.
if [ -f /keys/ssh_host_ed25519_key ]; then
    install -m 0600 -o root -g root /keys/ssh_host_ed25519_key /etc/ssh/ssh_host_ed25519_key
    ssh-keygen -y -f /etc/ssh/ssh_host_ed25519_key > /etc/ssh/ssh_host_ed25519_key.pub
fi

# A mounted authorized_keys replaces the one from the build argument, for tester and the
# escalation accounts alike (every account with a file in /etc/ssh/authorized_keys).
if [ -f /keys/authorized_keys ]; then
    for file in /etc/ssh/authorized_keys/*; do
        install -m 0644 -o root -g root /keys/authorized_keys "$file"
    done
fi
if [ ! -s /etc/ssh/authorized_keys/tester ]; then
    echo "testbed: no authorized key for 'tester'; mount keys/authorized_keys at" \
         "/keys/authorized_keys or build with --build-arg AUTHORIZED_KEY=\"\$(cat key.pub)\"" >&2
fi

echo "testbed: host key $(cut -d' ' -f1,2 /etc/ssh/ssh_host_ed25519_key.pub)" >&2
exec /usr/sbin/sshd -D -e "$@"
