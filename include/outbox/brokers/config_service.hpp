// What outbox-driver does with a config: the definition-time check the module asks for
// (ConfigQuery), and the check that precedes every driver or consumer it opens. Through the
// kinds' rows (registry.hpp); outbox-driver and the unit tests only.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "outbox/broker_kind.hpp"
#include "outbox/config_query.hpp"

namespace outbox {

// The answer to a definition-time check.
ConfigAnswer AnswerConfigQuery(const ConfigQuery &query);

// The driver of a destination of `kind` with config `config_json`, checked first as it was when
// it was stored (files included): nullptr with *error "invalid config: <problem>; <problem>..."
// when it no longer passes, or the driver's own error.
std::unique_ptr<Driver> OpenDriver(std::string_view kind, std::string_view config_json,
                                   const DriverContext &context, std::string *error);

// The consumer of a subscription of `kind`, likewise: *error "the config is not valid:
// <first problem>" when its config no longer passes.
std::unique_ptr<KafkaConsumer> OpenConsumer(std::string_view kind, std::string_view config_json,
                                            const ConsumerContext &context, std::string *error);

}  // namespace outbox
