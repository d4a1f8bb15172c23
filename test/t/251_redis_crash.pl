# Crash safety for the redis kind (BrokerScenarios::crash): every message still arrives after
# the worker is killed with SIGKILL twice and its outbox-driver once mid-drain, and after the
# server is stopped in immediate mode mid-drain; duplicates are allowed (at-least-once) and
# reported. 30,000 messages per phase by default (a drain of a few seconds, long enough for
# three kills in it), 100,000 with OUTBOX_TEST_FULL=1.
# outbox-tap: redis shared
use strict;
use warnings;
use BrokerScenarios;
use Test::More;

BrokerScenarios::crash('redis', n => ($ENV{OUTBOX_TEST_FULL} // '') eq '1' ? 100000 : 30000,
    kill_driver => 1);
done_testing();
