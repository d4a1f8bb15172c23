# Runs TAP test files and prints "TAP: N passed, N failed" (assertions; a file that dies or
# plans wrong counts as one more failure). Before it, one "TAP time: S s FILE" line per file,
# slowest first (.ci/run collects them into its timing table).
use strict;
use warnings;
use TAP::Harness;

my @files = @ARGV;
my $lib = "$ENV{OUTBOX_ROOT}/test/lib";
my $pgxs_perl = `pg_config --pgxs`;
$pgxs_perl =~ s{/src/makefiles/pgxs.mk\s*$}{/src/test/perl};
my $harness = TAP::Harness->new({
    verbosity => 0,
    lib => [ $pgxs_perl, $lib ],
    timer => 1,
    failures => 1,
    show_count => 0,
});
my $agg = $harness->runtests(@files);
my %seconds;
for my $file (@files) {
    my ($p) = $agg->parsers($file);
    $seconds{$file} = $p && $p->start_time && $p->end_time ? $p->end_time - $p->start_time : 0;
}
for my $file (sort { $seconds{$b} <=> $seconds{$a} } @files) {
    (my $short = $file) =~ s{^.*/(test/(?:t|upgrade)/)}{$1};
    printf "TAP time: %7.1f s %s\n", $seconds{$file}, $short;
}
my $failed = scalar($agg->failed);
my $bad_files = grep { my ($p) = $agg->parsers($_); $p->has_problems } @files;
printf "TAP: %d passed, %d failed\n", scalar($agg->passed), $failed + ($failed ? 0 : $bad_files);
