# Per-key ordering for the amqp kind (BrokerScenarios::ordering): 50 keys from 4 sessions
# while the server is stopped and started twice; for every key first arrivals follow id order.
# outbox-tap: rabbitmq exclusive -- restarts the server twice
use strict;
use warnings;
use BrokerScenarios;
use Test::More;

BrokerScenarios::ordering('rabbitmq');
done_testing();
