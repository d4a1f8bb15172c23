# What Redis refuses, for the redis kind: a stream the ACL user may not write (NOPERM), a key
# that is not a stream (WRONGTYPE), a missing stream with "create_stream": false (XADD
# NOMKSTREAM answers nil) and an entry over the server's proto-max-bulk-len (a protocol error,
# after which the server closes the connection) each dead-letter at once with the server's
# reason, while the messages around them are delivered; wrong credentials are an outage (no
# attempt spent, last_error says why without the password); outbox.requeue delivers them all
# once the causes are fixed.
# outbox-tap: redis shared
use strict;
use warnings;
use OutboxTest;
use Test::More;

# A server of its own: proto-max-bulk-len is at its minimum (1 MB).
my $redis = redis_node(args => ['--proto-max-bulk-len', '1mb']);
my $node = outbox_node('redis_failures', conf => "outbox.max_payload_bytes = 4194304\n");
my $server = $redis->url;
$redis->redis_client('exec', 'SET', 'allowed.string', 'x');
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('r', 'redis',
        '{"server": "$server", "stream": "allowed.good", "user": "outbox",
          "password": "outbox-secret", "max_attempts": 2, "retry_base": "100ms"}');
    SELECT outbox.create_destination('strict', 'redis',
        '{"server": "$server", "stream": "allowed.missing", "create_stream": false}');
});
$node->safe_psql('postgres', q{INSERT INTO outbox.messages (destination, key, payload) VALUES ('r', 'warm-up', '{}')});
ok(wait_until(sub { stats_row($node, 'r')->{delivered_total} == 1 }, 30), 'warm-up delivered');

$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, topic, key, payload) VALUES ('r', 'denied.x', 'denied', '{}')});
ok(wait_until(sub { dead_letter($node, 'denied') ne '' }, 30), 'NOPERM: dead-lettered');
is(dead_letter($node, 'denied'),
    'rejected|1|XADD to stream denied.x: NOPERM this user has no permissions to access one of the keys used as arguments',
    "NOPERM: at once (1 attempt), with the server's reason");

$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, topic, key, payload) VALUES ('r', 'allowed.string', 'wrongtype', '{}')});
ok(wait_until(sub { dead_letter($node, 'wrongtype') ne '' }, 30), 'WRONGTYPE: dead-lettered');
is(dead_letter($node, 'wrongtype'),
    'rejected|1|XADD to stream allowed.string: WRONGTYPE Operation against a key holding the wrong kind of value',
    "WRONGTYPE: at once, with the server's reason");

$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('strict', 'missing', '{}')});
ok(wait_until(sub { dead_letter($node, 'missing') ne '' }, 30), 'missing stream: dead-lettered');
is(dead_letter($node, 'missing'),
    'rejected|1|stream allowed.missing does not exist ("create_stream" is false: XADD NOMKSTREAM)',
    'missing stream with create_stream false: at once, saying why');

# 2 MB: over proto-max-bulk-len; the messages before and after it arrive.
$node->safe_psql('postgres', q{
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('r', 'before', '{}');
    INSERT INTO outbox.messages (destination, key, payload_bytes)
    VALUES ('r', 'big', convert_to(repeat('x', 2 * 1024 * 1024), 'UTF8'));
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('r', 'after', '{}')});
ok(wait_until(sub { dead_letter($node, 'big') ne '' }, 60), 'too large: dead-lettered');
like(dead_letter($node, 'big'),
    qr/^rejected\|1\|XADD to stream allowed\.good: ERR Protocol error: invalid bulk length \(the entry is larger than the server's proto-max-bulk-len\)$/,
    "too large: at once, with the server's reason");
ok(wait_until(sub { stats_row($node, 'r')->{delivered_total} == 3 }, 30),
    'the messages before and after the large one are delivered (the connection is remade)');
is(stats_row($node, 'r')->{failed_total}, 3, 'failed_total counts 3 (NOPERM, WRONGTYPE, too large)');

# Wrong credentials: an outage, no attempt spent, the password never shown.
$node->safe_psql('postgres', qq{
    SELECT outbox.create_destination('badauth', 'redis',
        '{"server": "$server", "stream": "allowed.auth", "user": "outbox", "password": "not-the-secret",
          "max_attempts": 1}');
    INSERT INTO outbox.messages (destination, key, payload) VALUES ('badauth', 'auth', '{}')});
ok(wait_until(sub { (stats_row($node, 'badauth')->{last_error} // '') =~ /WRONGPASS/ }, 30),
    'wrong password: last_error shows the server\'s WRONGPASS')
  or diag(explain(stats_row($node, 'badauth')));
my $s = stats_row($node, 'badauth');
like($s->{last_error}, qr/deferred.*Redis refused AUTH at 127\.0\.0\.1:\d+: WRONGPASS/, 'deferred: an outage');
unlike($s->{last_error}, qr/not-the-secret/, 'the password is not shown');
is($node->safe_psql('postgres', q{SELECT attempts FROM outbox.messages WHERE key = 'auth'}), '0',
    'no attempt spent (max_attempts is 1, still queued)');

# Fix the causes, requeue: all are delivered.
$redis->redis_client('exec', 'DEL', 'allowed.string');
$redis->redis_client('exec', 'XADD', 'allowed.missing', '*', 'created', 'by-test');
$redis->redis_client('exec', 'ACL', 'SETUSER', 'outbox', '~denied.*');
$redis->redis_client('exec', 'CONFIG', 'SET', 'proto-max-bulk-len', '16mb');
$node->safe_psql('postgres', q{DELETE FROM outbox.messages WHERE destination = 'badauth'});
is($node->safe_psql('postgres', q{SELECT outbox.requeue('r') + outbox.requeue('strict')}), '4', 'requeue moves 4');
ok(wait_until(sub { $node->safe_psql('postgres', 'SELECT count(*) FROM outbox.messages') eq '0' }, 60),
    'all four are delivered after requeue');
is($node->safe_psql('postgres', 'SELECT count(*) FROM outbox.dead_letters'), '0', 'no dead letters left');
is(join(',', map { $redis->count($_) } qw(denied.x allowed.string allowed.missing)), '1,1,2',
    'each stream holds its message');

$node->stop;
check_server_log($node);
$redis->stop;
done_testing();
