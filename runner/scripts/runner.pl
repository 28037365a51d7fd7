# The resident runner of swiftide-ssh-executor in Perl 5: the protocol of PROTOCOL.md
# (beside this folder), as runner.py and the helper speak it; no jobs (`J` is a fault). One
# per connection, it runs the executor's commands as requests framed on its stdin and sends
# their output, process groups and ends back framed on its stdout. Uses only modules of
# Debian's Essential perl-base (strict, warnings, POSIX, Fcntl, and Config for signal names).
#
#   perl runner.pl NONCE
#
# The executor sends this file to `perl -e LOADER NONCE` on stdin; by hand it runs as above,
# reading frames on stdin.
use strict;
use warnings;
use POSIX ();
use Fcntl ();

my $nonce = defined $ARGV[0] ? $ARGV[0] : '';

$SIG{PIPE} = 'IGNORE';
# A leader's end interrupts the wait (the handler itself has nothing to do).
$SIG{CHLD} = sub { };
# Opened once (close-on-exec) and duplicated onto each command's stdin.
open(my $null, '<', '/dev/null') or die "/dev/null: $!";
my $ticks = POSIX::sysconf(POSIX::_SC_CLK_TCK()) || 100;
sub now_ms { return (POSIX::times())[0] * 1000 / $ticks }
binmode STDIN;
binmode STDOUT;

# A request's bytes sent and not yet acknowledged, past which its pipes wait: the client's
# caller reads slowly, and the other requests on this channel must not wait for it.
my $window = 4 * 1024 * 1024;
my $max_data = 64 * 1024 * 1024;
my $EINTR = POSIX::EINTR();
my $EAGAIN = POSIX::EAGAIN();

# Frames wait in $out until the end of the loop's turn (or the buffer holds 64 KiB), so
# that what one turn produces leaves in one write: one packet through sshd, not one a frame.
my $out = '';

sub put {
    my ($type, $id, $data) = @_;
    $out .= pack('aNN', $type, $id, length $data) . $data;
    flush() if length($out) >= 65536;
}

sub flush {
    my $off = 0;
    while ($off < length $out) {
        my $n = syswrite(STDOUT, $out, length($out) - $off, $off);
        if (!defined $n) {
            next if $! == $EINTR || $! == $EAGAIN;
            # The channel is gone: what runs is handled as on a closed stdin.
            disconnected();
        }
        $off += $n;
    }
    $out = '';
}

my %req;      # id -> { pid, pipes, status, unacked, term_at, killed, kod, stdin, sent }
my %by_pid;   # leader pid -> id
my %reading;  # fileno -> [id, 'O' or 'E', handle]
my %writing;  # fileno -> [id, handle]
my $inbuf = '';
my $stdin_open = 1;

sub disconnected {
    # The client is gone: as the per-exec supervisor does, SIGKILL the group of every
    # command whose leader still runs, when the executor asked for that.
    for my $id (keys %req) {
        my $r = $req{$id};
        kill('KILL', -$r->{pid}) if $r->{kod} && !defined $r->{status};
    }
    POSIX::_exit(0);
}

sub fault {
    my ($id, $why) = @_;
    put('F', $id, $why);
}

sub start {
    my ($id, $data) = @_;
    if (length($data) < 9) {
        return fault($id, 'a run request of ' . length($data) . ' bytes is too short');
    }
    my ($flags, $grace, $len) = unpack('CNN', $data);
    # Guards (limits, Landlock) need setrlimit and system calls that perl-base has no
    # portable way to make: refused whole, as PROTOCOL.md asks of a runner that cannot.
    if ($flags & 8) {
        return fault($id, 'guard: the Perl runner applies no limits or confinement');
    }
    if (9 + $len > length $data) {
        return fault($id, "a run request's text of $len bytes runs past its "
            . length($data) . ' bytes');
    }
    return fault($id, "request $id is running already") if exists $req{$id};
    my $text = substr($data, 9, $len);
    my $input = substr($data, 9 + $len);
    my ($or, $ow, $er, $ew, $ir, $iw);
    my $piped = pipe($or, $ow) && pipe($er, $ew) && (!($flags & 2) || pipe($ir, $iw));
    my $pid = $piped ? fork() : undef;
    if (!defined $pid) {
        put('E', $id, "swiftide-ssh runner: cannot start the command: $!\n");
        put('X', $id, 'c 126');
        return;
    }
    if ($pid == 0) {
        POSIX::setsid();
        $SIG{PIPE} = 'DEFAULT';
        if ($flags & 2) {
            POSIX::dup2(fileno($ir), 0);
        } else {
            POSIX::dup2(fileno($null), 0);
        }
        POSIX::dup2(fileno($ow), 1);
        POSIX::dup2(fileno($ew), 2);
        # The pipes' own descriptors are close-on-exec (perl opens them so above $^F).
        my $shell = ($flags & 4) ? '/bin/sh' : 'sh';
        { exec { $shell } 'sh', '-c', $text; }
        POSIX::write(2, "sh: $!\n", length("sh: $!\n"));
        POSIX::_exit(127);
    }
    # The group exists once the child has called setsid: a kill sent before that would find
    # no group and be lost (a kill right behind the run request, on a loaded host). It takes
    # the child microseconds; it ends the wait by dying, too.
    while (1) {
        my $group = getpgrp($pid);
        last if !defined $group || $group < 0 || $group == $pid;
        select(undef, undef, undef, 0);
    }
    close($ow);
    close($ew);
    my $r = { pid => $pid, open => 2, unacked => 0, kod => ($flags & 1), grace => $grace };
    $req{$id} = $r;
    $by_pid{$pid} = $id;
    $reading{fileno($or)} = [$id, 'O', $or];
    $reading{fileno($er)} = [$id, 'E', $er];
    if ($flags & 2) {
        close($ir);
        if (length $input) {
            fcntl($iw, Fcntl::F_SETFL(), Fcntl::O_NONBLOCK());
            $r->{stdin} = $input;
            $writing{fileno($iw)} = [$id, $iw];
        } else {
            close($iw);
        }
    }
    # The start frame waits for the command's first output or end, or 2 ms: a short
    # command's start and end then travel together.
    $r->{announce_at} = now_ms() + 2;
}

sub announce {
    my ($id) = @_;
    my $r = $req{$id} or return;
    return unless defined $r->{announce_at};
    delete $r->{announce_at};
    put('S', $id, $r->{pid});
}

sub stop {
    my ($id) = @_;
    my $r = $req{$id} or return;
    return if defined $r->{term_at};
    if ($r->{grace} == 0 || defined $r->{status}) {
        # No grace, or the leader is gone already: SIGKILL what is left of the group.
        kill('TERM', -$r->{pid}) if $r->{grace};
        kill('KILL', -$r->{pid});
        $r->{term_at} = 0;
        $r->{killed} = 1;
    } else {
        kill('TERM', -$r->{pid});
        $r->{term_at} = now_ms();
    }
}

sub reap {
    while ((my $pid = waitpid(-1, POSIX::WNOHANG())) > 0) {
        my $status = $?;
        my $id = delete $by_pid{$pid};
        next unless defined $id;
        my $r = $req{$id};
        $r->{status} = $status;
        # A kill in its grace: the leader went, SIGKILL the rest of the group at once.
        if (defined $r->{term_at} && !$r->{killed}) {
            kill('KILL', -$r->{pid});
            $r->{killed} = 1;
        }
    }
}

# The signal's name, from Config (loaded on the first death by signal: it is large, and
# a smaller runner forks faster).
my @signame;
sub signame {
    my ($number) = @_;
    if (!@signame) {
        no warnings 'once';
        require Config;
        @signame = split ' ', $Config::Config{sig_name};
    }
    return $signame[$number] // $number;
}

sub finish {
    for my $id (keys %req) {
        my $r = $req{$id};
        next if $r->{open} > 0 || !defined $r->{status};
        my $status = $r->{status};
        my $end = ($status & 127)
            ? 's ' . signame($status & 127) . ' ' . (($status & 128) ? 1 : 0)
            : 'c ' . ($status >> 8);
        announce($id);
        # Stdin the command never read (it ended, or closed it): dropped, as LocalExecutor
        # drops it.
        for my $fd (keys %writing) {
            next unless $writing{$fd}[0] == $id;
            close($writing{$fd}[1]);
            delete $writing{$fd};
        }
        delete $req{$id};
        put('X', $id, $end);
    }
}

sub request {
    my ($type, $id, $data) = @_;
    if ($type eq 'R') {
        start($id, $data);
    } elsif ($type eq 'K') {
        stop($id);
    } elsif ($type eq 'A') {
        return fault($id, 'an ack of ' . length($data) . ' bytes, not 4') if length($data) != 4;
        my $r = $req{$id} or return;
        $r->{unacked} -= unpack('N', $data);
    } elsif ($type eq 'J') {
        fault($id, 'the Perl runner starts no jobs');
    } else {
        fault($id, sprintf('unknown request kind 0x%02x', ord $type));
    }
}

put('H', 0, "$nonce perl $] $$");
flush();
while (1) {
    reap();
    finish();
    disconnected() if !$stdin_open;
    my ($rin, $win) = ('', '');
    vec($rin, 0, 1) = 1;
    for my $fd (keys %reading) {
        vec($rin, $fd, 1) = 1 if $req{$reading{$fd}[0]}{unacked} < $window;
    }
    vec($win, $_, 1) = 1 for keys %writing;
    # Wake up for kills in their grace, and for leaders whose pipes closed before they
    # were reaped (exit closes the descriptors just before the parent can reap it).
    my $timeout;
    my $now = now_ms();
    for my $r (values %req) {
        if (defined $r->{term_at} && !$r->{killed}) {
            my $left = ($r->{term_at} + $r->{grace} - $now) / 1000;
            $left = 0 if $left < 0;
            $timeout = $left if !defined $timeout || $left < $timeout;
        }
        if (defined $r->{announce_at}) {
            my $left = ($r->{announce_at} - $now) / 1000;
            $left = 0 if $left < 0;
            $timeout = $left if !defined $timeout || $left < $timeout;
        }
        if ($r->{open} == 0 && !defined $r->{status}) {
            $timeout = 0.002 if !defined $timeout || $timeout > 0.002;
        }
    }
    flush();
    my $n = select(my $rout = $rin, my $wout = $win, undef, $timeout);
    if ($n < 0) {
        next if $! == $EINTR;
        die "select: $!";
    }
    $now = now_ms();
    for my $id (keys %req) {
        announce($id) if defined $req{$id}{announce_at} && $now >= $req{$id}{announce_at};
    }
    for my $r (values %req) {
        if (defined $r->{term_at} && !$r->{killed} && $now >= $r->{term_at} + $r->{grace}) {
            kill('KILL', -$r->{pid});
            $r->{killed} = 1;
        }
    }
    next if $n <= 0;
    if (vec($rout, 0, 1)) {
        my $got = sysread(STDIN, $inbuf, 65536, length $inbuf);
        if (defined $got && $got == 0) {
            $stdin_open = 0;
        } elsif (!defined $got && $! != $EINTR && $! != $EAGAIN) {
            $stdin_open = 0;
        }
        while (length($inbuf) >= 9) {
            my ($type, $id, $len) = unpack('aNN', $inbuf);
            if ($len > $max_data) {
                # Nothing after it can be framed: end as on a disconnect.
                fault(0, "a frame of $len bytes is over the limit of $max_data");
                flush();
                disconnected();
            }
            last if length($inbuf) < 9 + $len;
            my $data = substr($inbuf, 9, $len);
            substr($inbuf, 0, 9 + $len) = '';
            request($type, $id, $data);
        }
    }
    for my $fd (keys %writing) {
        next unless vec($wout, $fd, 1);
        my ($id, $fh) = @{ $writing{$fd} };
        my $r = $req{$id};
        my $wrote = syswrite($fh, $r->{stdin});
        if (defined $wrote) {
            substr($r->{stdin}, 0, $wrote) = '';
        }
        if ((!defined $wrote && $! != $EAGAIN && $! != $EINTR) || !length $r->{stdin}) {
            # Done, or the command closed its stdin without reading it all (as under
            # LocalExecutor, that is not an error).
            delete $writing{$fd};
            delete $r->{stdin};
            close($fh);
        }
    }
    for my $fd (keys %reading) {
        next unless vec($rout, $fd, 1);
        my ($id, $type, $fh) = @{ $reading{$fd} };
        my $got = sysread($fh, my $buf, 65536);
        next if !defined $got && ($! == $EINTR || $! == $EAGAIN);
        if (!$got) {
            delete $reading{$fd};
            close($fh);
            $req{$id}{open}--;
            next;
        }
        $req{$id}{unacked} += $got;
        announce($id);
        put($type, $id, $buf);
    }
}
