// The definition-time config check (include/outbox/pg/config_errors.hpp).
#include "outbox/brokers/config_service.hpp"
#include "outbox/pg/config_errors.hpp"

namespace outbox::pg {

ConfigAnswer CheckConfig(const ConfigQuery &query) {
    return AnswerConfigQuery(query);
}

}  // namespace outbox::pg
