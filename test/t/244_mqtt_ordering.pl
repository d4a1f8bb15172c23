# Per-key ordering for the mqtt kind (BrokerScenarios::ordering): with "ordering": "key", while
# mosquitto is restarted twice under production, the first arrival of each message at the
# subscriber is in id order for every key, and nothing is lost.
use strict;
use warnings;
use BrokerScenarios;
use Test::More;

BrokerScenarios::ordering('mosquitto');
done_testing();
