# Crash safety for the mqtt kind (BrokerScenarios::crash): every message still arrives after
# the worker is killed with SIGKILL twice and outbox-driver once mid-drain of 30,000, and after
# the server is stopped in immediate mode mid-drain; duplicates are allowed (at-least-once) and
# reported (fault_summary).
use strict;
use warnings;
use BrokerScenarios;
use Test::More;

BrokerScenarios::crash('mosquitto', driver_kill => 1);
done_testing();
