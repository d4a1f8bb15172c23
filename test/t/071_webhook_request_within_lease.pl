# A webhook request never outlives its lease (issue 16). With outbox.lease_timeout 5 s, a
# timeout_ms of 20 s and an endpoint that answered in 8 s, the lease lapsed while the request
# was in flight: the message was claimed and POSTed again (3 messages got 12-30 POSTs with 2
# workers, every one answered 200, then were dead-lettered as poison) and an ordered key had two
# requests in flight at once. Now a timeout_ms above half the lease is refused when it is set,
# lowered by the driver (with a log line) when the lease is lowered later, and a row claimed
# again while its request is in flight is never sent twice.
#
# The scenario: the destination is defined while the lease is 60 s (timeout_ms 20 s is fine
# then), the lease is lowered to 5 s by a reload, two workers; the endpoint takes 8 s for the
# first request of each message (the sink's delay_first) and answers at once after. Every
# message must get exactly one POST whose answer reached the relay, be delivered once, and the
# requests of one key (the sink records when each was taken and when it ended or its client
# gave up) never overlap.
use strict;
use warnings;
use OutboxTest;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);

my $sink = webhook_sink();
my $node = outbox_node('lease', conf => join("\n", 'outbox.workers = 2',
    "outbox.lease_timeout = '60s'", "outbox.retry_base = '100ms'", "outbox.retry_max = '200ms'"));
my $path = '/slow;delay_ms=8000;delay_first=1';
my $url = $sink->url($path);
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('hook', 'webhook',
        '{"url": "$url", "timeout_ms": "20s", "ordering": "key", "max_attempts": 10}')});

# The lease is lowered: the driver is rebuilt with the timeout lowered to fit, and says so.
my $offset = -s $node->logfile;
$node->append_conf('postgresql.conf', "outbox.lease_timeout = '5s'\n");
$node->reload;
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, key, payload)
    SELECT 'hook', k, jsonb_build_object('key', k, 'n', n)
      FROM unnest(ARRAY['a', 'b']) AS k, generate_series(1, 3) AS n ORDER BY n, k});
ok(wait_until(sub { slurp_file($node->logfile, $offset) =~
        /hook: timeout_ms lowered from 20000 to 2500 ms to stay within half of outbox.lease_timeout \(5000 ms\)/ }, 30),
    'the driver lowers timeout_ms to half the lowered lease, and logs it');
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 90),
    'all 6 messages are done');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'none dead-lettered');
is($node->safe_psql('postgres', q{SELECT delivered_total FROM outbox.stats() WHERE destination = 'hook'}), '6',
    'all 6 delivered');

my %by_id;
push @{ $by_id{ $_->{headers}{'webhook-id'} } }, $_ for grep { $_->{path} eq $path } @{ $sink->requests };
is(scalar(keys %by_id), 6, 'the sink saw the 6 messages');
my @not_once = grep {
    my @ok = grep { $_->{status} >= 200 && $_->{status} < 300 && !$_->{client_gone} } @{ $by_id{$_} };
    @ok != 1 } keys %by_id;
is(scalar(@not_once), 0, 'each message got exactly one POST whose answer reached the relay')
  or diag(explain({ map { $_ => $by_id{$_} } @not_once }));
my $posts = 0;
$posts += @{ $by_id{$_} } for keys %by_id;
diag("$posts POSTs for 6 messages");
cmp_ok($posts, '<=', 12, 'at most two POSTs per message: the one that timed out, and the retry');

# Per key, the requests' [taken, ended or given up] intervals do not overlap (5 ms polling in
# the sink; 20 ms of slack).
my %by_key;
for my $r (map { @$_ } values %by_id) {
    my $key = JSON::PP::decode_json($r->{body})->{key};
    push @{ $by_key{$key} }, $r;
}
my @overlaps;
for my $key (sort keys %by_key) {
    my @rs = sort { $a->{t} <=> $b->{t} } @{ $by_key{$key} };
    for my $i (1 .. $#rs) {
        push @overlaps, sprintf('key %s: a request at %.3f while the one of %.3f ran until %.3f',
            $key, $rs[$i]{t}, $rs[$i - 1]{t}, $rs[$i - 1]{t_end})
          if $rs[$i]{t} < $rs[$i - 1]{t_end} - 0.02;
    }
}
is(scalar(@overlaps), 0, 'an ordered key never had two requests in flight') or diag(join("\n", @overlaps));

# Set now, a timeout_ms above half the lease is refused, with what to do.
my ($ret, $out, $err) = $node->psql('postgres', q{
\set VERBOSITY verbose
SELECT outbox.create_destination('hook2', 'webhook', '{"url": "http://127.0.0.1:1/", "timeout_ms": "20s"}')});
like($err, qr/ERROR:  22023: invalid configuration for webhook destination "hook2"/, 'refused at create_destination (22023)');
like($err, qr/DETAIL:  "timeout_ms" \(20000 ms\) must be at most half of outbox.lease_timeout \(5000 ms\)/, 'saying why');
like($err, qr/HINT:  .*Lower "timeout_ms" to at most 2500, or raise outbox.lease_timeout to at least 40000 ms\./, 'and naming outbox.lease_timeout');
($ret, $out, $err) = $node->psql('postgres', q{SELECT outbox.alter_destination('hook', '{"timeout_ms": 3000}')});
like($err, qr/"timeout_ms" \(3000 ms\) must be at most half of outbox.lease_timeout/, 'refused at alter_destination');
is($node->safe_psql('postgres', q{SELECT config->>'timeout_ms' FROM outbox.destinations WHERE name = 'hook'}), '20s',
    'and the config is unchanged');
is($node->safe_psql('postgres', q{SELECT count(*) FROM outbox.destinations WHERE name = 'hook2'}), '0',
    'nothing created');

$node->stop;
check_server_log($node);
$sink->stop;
done_testing();
