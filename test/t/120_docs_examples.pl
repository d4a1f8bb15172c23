# The manual's examples run as written: every ```sql block of README.md and docs/*.md, in file
# order, against a throwaway cluster with delivery workers, the test Kafka broker and the
# webhook sink. Each page runs in a fresh database of its own (the extension created for it,
# unless one of its blocks does that); each block in a psql session of its own, with the psql
# variables the pages use for addresses:
#   :'kafka'        the test broker's bootstrap list
#   :'webhook_url'  the webhook sink's base URL (a path such as /audit;status=422 answers 422)
#   :'amqp_url', :'nats_url'  a RabbitMQ URL and a NATS server where nothing listens
#   :'redis_server'           a Redis server where nothing listens
#   :'mqtt_host'    an MQTT broker's host (mqtt kind: 127.0.0.1; port 1883, where nothing
#                   listens in the tests)
#   :'sqs_queue_url'  an SQS queue URL where nothing listens (sqs kind, issue 42)
# Markers, as a block's first line:
#   -- a moment later     wait until the database's queues are settled (nothing pending or in
#                         flight, every subscription caught up) before running the block
#   -- fails: SQLSTATE    the block must stop with an error of that SQLSTATE
# Roles a page creates are dropped after it. OUTBOX_DOCS_PAGES="README.md docs/x.md" runs some
# pages only.
use strict;
use warnings;
use File::Basename;
use IPC::Run;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $root = $ENV{OUTBOX_ROOT};
my @pages = $ENV{OUTBOX_DOCS_PAGES} ? map { "$root/$_" } split ' ', $ENV{OUTBOX_DOCS_PAGES}
  : ("$root/README.md", sort glob("$root/docs/*.md"));

# The ```sql blocks of a page: [line, text], indentation (a block in a list item) removed.
sub sql_blocks {
    my ($path) = @_;
    my @lines = split /\n/, slurp_file($path), -1;
    my (@blocks, $indent, $start, @body);
    for my $n (0 .. $#lines) {
        my $line = $lines[$n];
        if (!defined $indent) {
            if ($line =~ /^(\s*)```sql\s*$/) {
                ($indent, $start, @body) = ($1, $n + 2);
            }
        } elsif ($line =~ /^\Q$indent\E```\s*$/) {
            push @blocks, [$start, join("\n", @body) . "\n"];
            undef $indent;
        } else {
            (my $l = $line) =~ s/^\Q$indent\E//;
            push @body, $l;
        }
    }
    die "$path: a ```sql block is not closed" if defined $indent;
    return @blocks;
}

sub db_of {
    my ($path) = @_;
    (my $name = lc basename($path, '.md')) =~ s/[^a-z0-9]+/_/g;
    return "docs_$name";
}

my %blocks = map { $_ => [ sql_blocks($_) ] } @pages;
my @dbs = map { db_of($_) } @pages;

my $broker = kafka_broker();
my $sink = webhook_sink();
# RabbitMQ and NATS are not run: their examples define destinations, which connect to a port
# where nothing listens (an outage, which is all the examples need).
my %vars = (kafka => $broker->bootstrap, webhook_url => 'http://127.0.0.1:' . $sink->port,
    amqp_url => 'amqp://outbox:change-me@127.0.0.1:1/shop', nats_url => 'nats://127.0.0.1:1',
    redis_server => '127.0.0.1:1',    # redis (issue 42): nothing listens, like the two above
    sqs_queue_url => 'http://127.0.0.1:1/000000000000/orders',    # sqs kind (issue 42)
);
$vars{mqtt_host} = '127.0.0.1';  # mqtt kind
my $node = outbox_node('docs', extension => 0,
    conf => "outbox.databases = '" . join(', ', @dbs) . "'\nlog_statement = none");

# Runs a block with psql as the node's superuser; returns (exit code, stderr).
sub run_block {
    my ($db, $sql) = @_;
    my ($out, $err) = ('', '');
    my @cmd = ('psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-v', 'VERBOSITY=verbose',
        (map { ('-v', "$_=$vars{$_}") } sort keys %vars),
        '-h', $node->host, '-p', $node->port, '-d', $db, '-f', '-');
    IPC::Run::run(\@cmd, '<', \"\\set VERBOSITY verbose\n$sql", '>', \$out, '2>', \$err,
        IPC::Run::timeout(120));
    return ($? >> 8, $err);
}

# Whether everything queued in $db was tried and every subscription has caught up.
sub settled {
    my ($db) = @_;
    return $node->safe_psql($db, q{
        SELECT (SELECT coalesce(sum(pending + in_flight), 0) = 0 FROM outbox.stats())
           AND (SELECT coalesce(bool_and(paused OR ("partition" IS NOT NULL AND (lag = 0 OR blocked))), true)
                  FROM outbox.subscriptions())
           AND NOT EXISTS (SELECT FROM outbox.inbox_dead_letters WHERE requeued_at IS NOT NULL)
    }) eq 't';
}

my $roles_before = $node->safe_psql('postgres', 'SELECT string_agg(quote_ident(rolname), \',\') FROM pg_roles');
my %existing = map { $_ => 1 } split /,/, $roles_before;

for my $path (@pages) {
    my $page = $path =~ s{^\Q$root\E/}{}r;
    my $db = db_of($path);
    my @page_blocks = @{ $blocks{$path} };
    $node->safe_psql('postgres', "CREATE DATABASE $db");
    $node->safe_psql($db, 'CREATE EXTENSION outbox')
      unless grep { $_->[1] =~ /CREATE EXTENSION\s+(?:IF NOT EXISTS\s+)?outbox\b/i } @page_blocks;
    for my $block (@page_blocks) {
        my ($line, $sql) = @$block;
        my ($first) = $sql =~ /\A\s*(.*)/;
        if ($first =~ /^--\s*a moment later\b/) {
            wait_until(sub { settled($db) }, 60, "$page:$line: the queues of $db to settle")
              or fail("$page:$line: the queues settled before the block");
        }
        my ($rc, $err) = run_block($db, $sql);
        if ($first =~ /^--\s*fails:\s*([0-9A-Z]{5})\b/) {
            my $want = $1;
            my ($got) = $err =~ /^(?:psql:[^\n]*?)?ERROR:\s+([0-9A-Z]{5}):/m;
            ok($rc != 0 && defined $got && $got eq $want, "$page:$line fails with SQLSTATE $want")
              or diag("exit $rc, SQLSTATE " . ($got // 'none') . ":\n$err");
        } else {
            is($rc, 0, "$page:$line runs") or diag($err);
        }
    }
    # The page's database and roles go, so that the next page starts from nothing.
    $node->safe_psql('postgres', "DROP DATABASE $db WITH (FORCE)");
    my @new_roles = grep { !$existing{$_} } split /,/,
      $node->safe_psql('postgres', 'SELECT string_agg(quote_ident(rolname), \',\') FROM pg_roles');
    $node->safe_psql('postgres', 'DROP ROLE ' . join(', ', @new_roles)) if @new_roles;
    note("$page: " . scalar(@page_blocks) . ' sql blocks');
}

check_server_log($node);
$node->stop;
done_testing();
