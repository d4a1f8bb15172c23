# Crash safety for the mqtt kind (BrokerScenarios::crash): every message still arrives after
# the worker is killed with SIGKILL twice and outbox-driver once between them, mid-drain of 12,000 (30,000
# with OUTBOX_TEST_FULL=1; the paho subscriber that verifies is the slow part), and after the
# server is stopped in immediate mode mid-drain; duplicates are allowed (at-least-once) and
# reported (fault_summary).
use strict;
use warnings;
use BrokerScenarios;
use Test::More;

BrokerScenarios::crash('mosquitto', kill_driver => 1,
    n => ($ENV{OUTBOX_TEST_FULL} // '') eq '1' ? 30000 : 12000);
done_testing();
