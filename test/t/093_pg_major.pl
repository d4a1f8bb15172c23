# What differs between PostgreSQL majors, as a user sees it (README "Supported PostgreSQL
# majors"): the same suite runs on 15, 17, 18 and 19 (test/run_tests --pg N), and these are the
# few things it checks per major.
# - pg_stat_activity: from 17 on, outbox's waits are custom wait events (OutboxWorkerMain,
#   OutboxLauncherMain); on 15 they show as the generic Extension. The backend types are the
#   same everywhere.
# - event_id is a UUIDv7 on every major: version 7, RFC 9562 variant, its timestamp the commit's
#   millisecond (read with 17+'s uuid_extract_version/uuid_extract_timestamp, and by hand on 15).
#   On 18+, the built-in uuidv7() has the same layout (outbox keeps its own generator on every
#   major, see README).
use strict;
use warnings;
use OutboxTest;
use Test::More;

my $node = outbox_node('major');
my $major = int($node->safe_psql('postgres', 'SHOW server_version_num') / 10000);
diag("PostgreSQL $major");

my %want = $major >= 17
  ? ('outbox worker' => 'OutboxWorkerMain', 'outbox launcher' => 'OutboxLauncherMain')
  : ('outbox worker' => 'Extension', 'outbox launcher' => 'Extension');
for my $type (sort keys %want) {
    my $seen = '';
    ok(wait_until(sub {
        $seen = $node->safe_psql('postgres', qq{
            SELECT wait_event_type || '/' || coalesce(wait_event, '') FROM pg_stat_activity
             WHERE backend_type = '$type'});
        $seen eq "Extension/$want{$type}" }, 30),
        "$type: pg_stat_activity shows wait event Extension/$want{$type} while it waits")
      or diag("seen: '$seen'");
}

# event_id's layout, on an id the extension made at INSERT.
$node->safe_psql('postgres', q{
    SELECT outbox.create_destination('layout', 'kafka', '{"bootstrap.servers": "127.0.0.1:9", "topic": "t"}');
    SELECT outbox.pause('layout');
    INSERT INTO outbox.messages (destination, payload) VALUES ('layout', '{}')});
is($node->safe_psql('postgres', q{
    SELECT substr(event_id::text, 15, 1) || '|' || (get_byte(uuid_send(event_id), 8) >> 6)
      FROM outbox.messages}), '7|2', 'event_id: version 7, variant 10 (read from its bytes)');
is($node->safe_psql('postgres', q{
    SELECT abs(extract(epoch FROM created_at) * 1000
               - ('x' || replace(substr(event_id::text, 1, 13), '-', ''))::bit(48)::bigint) < 1000
      FROM outbox.messages}), 't', "event_id: its 48-bit timestamp is the message's created_at");
if ($major >= 17) {
    is($node->safe_psql('postgres', q{SELECT uuid_extract_version(event_id) FROM outbox.messages}),
        '7', 'PostgreSQL 17+: uuid_extract_version reads event_id');
}
# uuid_extract_timestamp reads version 7 from 18 on; 17's reads version 1 only (NULL otherwise).
if ($major >= 18) {
    is($node->safe_psql('postgres', q{
        SELECT abs(extract(epoch FROM uuid_extract_timestamp(event_id) - created_at)) < 1
          FROM outbox.messages}), 't', 'PostgreSQL 18+: uuid_extract_timestamp reads event_id');
} elsif ($major == 17) {
    is($node->safe_psql('postgres', q{
        SELECT uuid_extract_timestamp(event_id) IS NULL FROM outbox.messages}), 't',
        'PostgreSQL 17: uuid_extract_timestamp gives NULL for a version 7 id, as 17 documents');
}
if ($major >= 18) {
    is($node->safe_psql('postgres', q{
        SELECT uuid_extract_version(u) || '|' || (get_byte(uuid_send(u), 8) >> 6) || '|' ||
               (abs(extract(epoch FROM uuid_extract_timestamp(u) - now())) < 5)
          FROM (SELECT uuidv7() AS u) s}), '7|2|true',
        'PostgreSQL 18+: the built-in uuidv7() has the same layout as event_id');
}

$node->stop;
check_server_log($node);
done_testing();
