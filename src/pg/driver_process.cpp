// The worker's drivers in its driver process (see include/outbox/pg/driver_process.hpp).
#include <algorithm>
#include <memory>
#include <string>

#include "outbox/ipc/protocol.hpp"
#include "outbox/brokers/amqp/driver.hpp"
#include "outbox/brokers/kafka/driver.hpp"
#include "outbox/brokers/nats/driver.hpp"
#include "outbox/brokers/webhook/driver.hpp"
#include "outbox/pg/driver_process.hpp"

extern "C" {
#include "postgres.h"
#include "miscadmin.h"
}

#include "outbox/pg/settings.hpp"

namespace outbox::pg {

namespace {

// A helper that says nothing for this long while an answer is due is killed and restarted.
constexpr int64_t kAnswerTimeoutMs = 10000;

}  // namespace

DriverProcessOptions CurrentDriverProcessOptions() {
    DriverProcessOptions o;
    // Installed by `make install` next to outbox.so (PGXS's pkglibdir, the server's $libdir).
    o.program = std::string(pkglib_path) + "/outbox-driver";
    o.memory_limit_bytes = uint64_t(setting_driver_memory_limit_mb) * 1024 * 1024;
    o.poison_after = setting_poison_after;
    // A suspect waits for its turn at most half a lease: its row stays leased to this worker.
    o.hold_limit_ms = std::max<int64_t>(500, setting_lease_timeout_ms / 2);
    o.fault = setting_debug_driver_fault ? setting_debug_driver_fault : "";
    o.answer_timeout_ms = kAnswerTimeoutMs;
    return o;
}

std::unique_ptr<Driver> BuildDriver(DriverProcess *process, const DestinationSpec &spec,
                                    const std::string &database, const DispatchSettings &settings,
                                    std::string *error) {
    bool in_process = setting_debug_drivers_in_process || process == nullptr;
    if (spec.config.kind == DestinationKind::Webhook) {
        WebhookDriverOptions options;
        options.config = spec.config.webhook;
        options.destination = spec.name;
        options.source = "/outbox/" + database;
        options.lease_timeout_ms = settings.lease_timeout_ms;
        options.allowed_networks = settings.webhook_allowed_networks;
        options.show_response_body = spec.config_by_superuser;
        if (in_process)
            return MakeWebhookDriver(options, error);
        return process->Open("webhook", spec.name, protocol::EncodeOptions(options), error);
    }
    // Twice a batch in flight by default, and an answer due well within the lease.
    size_t in_flight = size_t(settings.batch_size) * 2;
    int64_t answer_ms = std::max<int64_t>(1000, settings.lease_timeout_ms / 2);
    if (spec.config.kind == DestinationKind::Amqp) {
        AmqpDriverOptions options;
        options.config = spec.config.amqp;
        options.destination = spec.name;
        options.source = "/outbox/" + database;
        options.client_name = "outbox-" + database + "-" + spec.name;
        options.address_rule = {!spec.config_by_superuser, settings.broker_allowed_networks};
        options.confirm_timeout_ms = answer_ms;
        options.max_in_flight =
            options.config.max_in_flight > 0 ? size_t(options.config.max_in_flight) : in_flight;
        if (in_process)
            return MakeAmqpDriver(options, error);
        return process->Open("amqp", spec.name, protocol::EncodeOptions(options), error);
    }
    if (spec.config.kind == DestinationKind::Nats) {
        NatsDriverOptions options;
        options.config = spec.config.nats;
        options.destination = spec.name;
        options.source = "/outbox/" + database;
        options.client_name = "outbox-" + database + "-" + spec.name;
        options.address_rule = {!spec.config_by_superuser, settings.broker_allowed_networks};
        options.ack_timeout_ms = options.config.ack_timeout_ms > 0
                                     ? std::min(options.config.ack_timeout_ms, answer_ms)
                                     : std::min<int64_t>(5000, answer_ms);
        options.max_in_flight =
            options.config.max_in_flight > 0 ? size_t(options.config.max_in_flight) : in_flight;
        if (in_process)
            return MakeNatsDriver(options, error);
        return process->Open("nats", spec.name, protocol::EncodeOptions(options), error);
    }
    KafkaDriverOptions options;
    options.config = spec.config.kafka;
    options.client_id = "outbox-" + database + "-" + spec.name;
    options.source = "/outbox/" + database;
    options.lease_timeout_ms = settings.lease_timeout_ms;
    options.address_rule = {!spec.config_by_superuser, settings.broker_allowed_networks};
    // "max_in_flight" widens it for a cluster whose acks=all round trip is long: the drain runs
    // at most one window per round trip. The dispatcher uses the width only while claims come
    // back full (Dispatcher::Room): caught up, two batches stay in flight, so claims stay large
    // when the producers commit a row at a time.
    options.max_in_flight =
        options.config.max_in_flight > 0 ? size_t(options.config.max_in_flight) : in_flight;
    if (in_process)
        return MakeKafkaDriver(options, error);
    return process->Open("kafka", spec.name, protocol::EncodeOptions(options), error);
}

}  // namespace outbox::pg
