# Per-key ordering for the nats kind (BrokerScenarios::ordering): 50 keys from 4 sessions
# while the server is stopped and started twice; for every key first arrivals follow id order.
# outbox-tap: nats exclusive -- restarts the server twice
use strict;
use warnings;
use BrokerScenarios;
use Test::More;

BrokerScenarios::ordering('nats');
done_testing();
