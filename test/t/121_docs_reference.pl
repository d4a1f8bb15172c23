# The manual's generated pages are current: docs/reference/settings.md and docs/reference/sql.md
# are what test/gen_reference writes from a server running this build (so a setting, function,
# table or description added without regenerating them fails here), every public function,
# table and type has a description, and the "Latest results" section of docs/benchmarks.md is
# the latest file of test/bench/results/ (test/bench/publish_results --check).
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;

my $root = $ENV{OUTBOX_ROOT};
my $dir = PostgreSQL::Test::Utils::tempdir();

my ($out, $err) = ('', '');
ok(IPC::Run::run(['python3', "$root/test/gen_reference", $dir], '>', \$out, '2>', \$err,
        IPC::Run::timeout(180)), 'test/gen_reference runs') or diag("$out$err");

for my $page ('settings.md', 'sql.md') {
    my ($diff, $derr) = ('', '');
    IPC::Run::run(['diff', '-u', "$root/docs/reference/$page", "$dir/$page"], '>', \$diff, '2>', \$derr);
    is($diff . $derr, '', "docs/reference/$page is current")
      or diag("regenerate it: test/gen_reference (with the build installed)\n$diff$derr");
}

my $sql_page = -e "$dir/sql.md" ? slurp_file("$dir/sql.md") : '';
unlike($sql_page, qr/\(no description\)/, 'every public function, table and type has a COMMENT')
  or diag(join("\n", grep { /^### |no description/ } split /\n/, $sql_page));
like($sql_page, qr/### outbox\.publish/, 'the SQL reference lists the functions');

($out, $err) = ('', '');
ok(IPC::Run::run(['python3', "$root/test/bench/publish_results", '--check'], '>', \$out, '2>', \$err),
    'docs/benchmarks.md shows the latest results file') or diag("$out$err");

done_testing();
