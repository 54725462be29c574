# Pre-started Perl: `perl -e LOADER`. Reads a request line on descriptor 3:
# {"path": ..., "session": ..., "run": N, "stream": ...} (other fields are ignored).
# One-shot (session false): runs the program as `perl PATH` would ($0, __FILE__, @ARGV,
# DATA after __END__, END blocks, exit codes, a die's message and status, a compile
# error's message followed by "Execution of PATH aborted due to compilation errors."),
# then exits as it would.
# Session: runs each requested program with `do PATH` in the one interpreter, so that
# subs, package variables (`our`, and undeclared globals without `use strict`) and loaded
# modules persist from run to run; a file's `my` variables do not (each run is a file of
# its own). `exit` and an uncaught die end the run, not the interpreter; then the
# standard streams are flushed and {"exit": CODE, "run": N} written on descriptor 4.
# END blocks of a session's programs run when the interpreter ends.
# The loader's names are lexicals, which a `do` file cannot see.
use strict;
use warnings;

open(my $go, '<&=', 3) or exit 70;
open(my $done, '>&=', 4) or exit 70;

my $request = sub {
    my $line = <$go>;
    return undef unless defined $line;
    my ($path) = $line =~ /"path"\s*:\s*"((?:[^"\\]|\\.)*)"/;
    $path = '' unless defined $path;
    my %escapes = (n => "\n", t => "\t", r => "\r", b => "\b", f => "\f");
    $path =~ s/\\(u[0-9a-fA-F]{4}|.)/length($1) == 5 ? chr(hex(substr($1, 1))) : ($escapes{$1} \/\/ $1)/ge;
    my ($run) = $line =~ /"run"\s*:\s*(\d+)/;
    return {
        path    => $path,
        session => scalar($line =~ /"session"\s*:\s*true/),
        stream  => scalar($line =~ /"stream"\s*:\s*true/),
        run     => $run // 0,
    };
};

# What the program's file holds after its __END__ line, as `perl PATH` gives it (a
# `do` file has DATA only after __DATA__, which perl opens itself).
my $data = sub {
    my ($path) = @_;
    open(my $file, '<', $path) or return;
    while (my $line = <$file>) {
        if ($line =~ /^__END__\r?$/) {
            no strict 'refs';
            *{"main::DATA"} = $file;
            return;
        }
    }
    close($file);
};

my $streamed = sub {
    my ($on) = @_;
    my $old = select(STDOUT);
    $| = 1;    # flushes what is buffered
    $| = $on ? 1 : 0;
    select(STDERR);
    $| = 1;
    select($old);
};

# Runs the program; what perl would say and exit with when it dies ('' and undef when
# it does not).
my $run = sub {
    my ($job) = @_;
    my ($died, $errno, $child) = (0, 0, 0);
    $0 = $job->{path};
    @ARGV = ();
    $streamed->($job->{stream});
    $data->($job->{path});
    # Called for a die at run time, not for a compile error (unless the program put
    # a handler of its own in its place).
    my $handler = sub { ($died, $errno, $child) = (1, $! + 0, $? >> 8) };
    local $SIG{__DIE__} = $handler;
    local $@;
    do $job->{path};
    my $error = $@;
    return ('', undef) if $error eq '';
    my $ours = ref($SIG{__DIE__}) eq 'CODE' && $SIG{__DIE__} == $handler;
    if (!$died && $ours) {
        $error .= "Execution of $job->{path} aborted due to compilation errors.\n";
    } elsif (!$died) {
        ($errno, $child) = ($! + 0, $? >> 8);
    }
    return ($error, $errno || $child || 255);
};

my $first = $request->() or exit 0;
unless ($first->{session}) {
    close($go);
    close($done);
    my ($error, $status) = $run->($first);
    if (defined $status) {
        print STDERR ref($error) ? "$error" : $error;
        exit($status & 0xFF);
    }
    exit 0;
}

# In a session, `exit` ends the run: what it dies with only the loader catches.
my $exiting = bless {}, 'SandboxLoader::Exit';
my $code = 0;
{
    no warnings qw(once redefine);
    *CORE::GLOBAL::exit = sub { $code = @_ ? int($_[0] // 0) : 0; die $exiting };
}
my $job = $first;
while ($job) {
    $code = 0;
    my ($error, $status) = $run->($job);
    if (defined $status && ref($error) eq 'SandboxLoader::Exit') {
        $status = $code;
    } elsif (defined $status) {
        print STDERR "$error";
    } else {
        $status = 0;
    }
    $streamed->($job->{stream});
    syswrite($done, '{"exit":' . ($status & 0xFF) . ',"run":' . $job->{run} . "}\n");
    $job = $request->();
}
exit 0;
