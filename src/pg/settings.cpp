// The outbox.* settings (GUCs) of design §1.
#include <climits>
#include <string>
#include <vector>

#include "outbox/network_policy.hpp"

extern "C" {
#include "postgres.h"
#include "utils/guc.h"
#include "utils/varlena.h"
}

#include "outbox/pg/debug.hpp"
#include "outbox/pg/settings.hpp"

namespace outbox::pg {

char *setting_databases = nullptr;
int setting_workers = 1;
int setting_batch_size = 500;
int setting_poll_interval_ms = 1000;
int setting_lease_timeout_ms = 30000;
int setting_max_attempts = 10;
int setting_retry_base_ms = 1000;
int setting_retry_max_ms = 300000;
int setting_max_payload_bytes = 1024 * 1024;
int setting_retention_s = 0;
int setting_inbox_retention_s = 7 * 24 * 3600;  // the inbox (issue 23)
int setting_poison_after = 3;
int setting_driver_memory_limit_mb = 1024;
int setting_max_pending = 0;
char *setting_webhook_allowed_networks = nullptr;
char *setting_broker_allowed_networks = nullptr;
int setting_inbox_handler_timeout_ms = 5000;
char *setting_traceparent = nullptr;
char *setting_tracestate = nullptr;
bool setting_drop_nonempty = false;
bool setting_internal_call = false;

// outbox.databases must be a list of database names PostgreSQL could have.
static bool CheckDatabases(char **newval, void **, GucSource) {
    char *copy = pstrdup(*newval);
    List *names = NIL;
    bool ok = SplitIdentifierString(copy, ',', &names);
    if (!ok) {
        GUC_check_errdetail("outbox.databases must be a comma-separated list of database names.");
    } else if (list_length(names) > 64) {
        GUC_check_errdetail("outbox.databases lists %d databases; at most 64 are served.",
                            list_length(names));
        ok = false;
    }
    list_free(names);
    pfree(copy);
    return ok;
}

// outbox.driver_memory_limit: 0, or enough for the helper to start its libraries.
static bool CheckDriverMemoryLimit(int *newval, void **, GucSource) {
    if (*newval != 0 && *newval < 64) {
        GUC_check_errdetail("outbox.driver_memory_limit must be at least 64MB, or 0 for no limit.");
        return false;
    }
    return true;
}

// outbox.webhook_allowed_networks must be a list of networks (network_policy.hpp).
static bool CheckAllowedNetworks(char **newval, void **, GucSource) {
    std::vector<outbox::Network> networks;
    std::string error;
    bool ok = false;
    try {
        ok = outbox::ParseNetworkList(*newval, &networks, &error);
    } catch (...) {
        error = "out of memory";
    }
    if (!ok)
        GUC_check_errdetail("%s.", error.c_str());
    return ok;
}

// The workers and their driver processes.
static void DefineServingSettings() {
    DefineCustomStringVariable(
        "outbox.databases", "Databases whose outbox the background workers serve.",
        "A comma-separated list. A database without the outbox extension is skipped and checked "
        "again later. Changes take effect on reload.",
        &setting_databases, "postgres", PGC_SIGHUP, GUC_LIST_INPUT, CheckDatabases, nullptr,
        nullptr);
    DefineCustomIntVariable("outbox.workers", "Delivery workers per served database.", nullptr,
                            &setting_workers, 1, 1, 32, PGC_POSTMASTER, 0, nullptr, nullptr,
                            nullptr);
    DefineCustomIntVariable("outbox.batch_size", "Messages a worker claims per cycle.", nullptr,
                            &setting_batch_size, 500, 1, 100000, PGC_SIGHUP, 0, nullptr, nullptr,
                            nullptr);
    DefineCustomIntVariable(
        "outbox.poll_interval", "How often workers look for due work without being woken.",
        "Commits wake the workers at once; the poll finds due retries, expired leases and lost "
        "wake-ups.",
        &setting_poll_interval_ms, 1000, 10, 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS, nullptr, nullptr,
        nullptr);
    DefineCustomIntVariable(
        "outbox.lease_timeout", "How long a claim is held before another worker may take it over.",
        "A worker that has not recorded an outcome within this time loses its claim.",
        &setting_lease_timeout_ms, 30000, 1000, 24 * 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS, nullptr,
        nullptr, nullptr);
    DefineCustomIntVariable(
        "outbox.poison_after",
        "Driver process crashes a message may be in flight for before it is dead-lettered.",
        "A message in flight when the driver process (outbox-driver) died this many times goes "
        "to the dead letters with reason poison. Independent of max_attempts: such a crash "
        "spends no attempt.",
        &setting_poison_after, 3, 1, 1000, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "outbox.driver_memory_limit", "Address-space limit of each worker's driver process.",
        "A driver process (librdkafka, libcurl) that reaches it exits and is restarted; nothing "
        "in flight is lost. 0 means no limit. A reload applies it to the running processes.",
        &setting_driver_memory_limit_mb, 1024, 0, INT_MAX / 2, PGC_SIGHUP, GUC_UNIT_MB,
        CheckDriverMemoryLimit, nullptr, nullptr);
}

// The defaults of destinations, and the queue's limits.
static void DefineDeliverySettings() {
    DefineCustomIntVariable(
        "outbox.max_attempts", "Delivery attempts before a message goes to the dead letters.",
        "The default for destinations that do not set max_attempts.", &setting_max_attempts, 10, 1,
        1000, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable("outbox.retry_base", "First retry delay; it doubles with each attempt.",
                            "The default for destinations that do not set retry_base.",
                            &setting_retry_base_ms, 1000, 1, 24 * 3600 * 1000, PGC_SIGHUP,
                            GUC_UNIT_MS, nullptr, nullptr, nullptr);
    DefineCustomIntVariable("outbox.retry_max", "Longest retry delay.",
                            "The default for destinations that do not set retry_max.",
                            &setting_retry_max_ms, 300000, 1, 7 * 24 * 3600 * 1000, PGC_SIGHUP,
                            GUC_UNIT_MS, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "outbox.max_payload_bytes", "Largest message payload accepted at INSERT.",
        "Counted on the bytes delivered: the JSON text of payload, or payload_bytes.",
        &setting_max_payload_bytes, 1024 * 1024, 1, 1024 * 1024 * 1024, PGC_SUSET, GUC_UNIT_BYTE,
        nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "outbox.max_pending", "Most messages the queue of a database may hold.",
        "All destinations together: an INSERT beyond it is refused (SQLSTATE 53400). 0: no cap. "
        "Set it per database with ALTER DATABASE ... SET outbox.max_pending.",
        &setting_max_pending, 0, 0, INT_MAX, PGC_SUSET, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable(
        "outbox.retention", "How long delivered messages are kept in outbox.archive.",
        "0 deletes them when delivered. Older archived rows are swept by the workers in "
        "bounded batches; dead letters are never swept.",
        &setting_retention_s, 0, 0, INT_MAX, PGC_SIGHUP, GUC_UNIT_S, nullptr, nullptr, nullptr);
}

// Where webhooks and brokers may be.
static void DefineNetworkSettings() {
    DefineCustomStringVariable(
        "outbox.webhook_allowed_networks",
        "Networks of loopback, private, link-local and other internal addresses webhooks may "
        "connect to.",
        "A comma-separated list of CIDR networks, e.g. '127.0.0.0/8, ::1'. Public addresses are "
        "always allowed; internal ones only when listed. Checked for every address a connection "
        "uses.",
        &setting_webhook_allowed_networks, "", PGC_SIGHUP, GUC_SUPERUSER_ONLY | GUC_LIST_INPUT,
        CheckAllowedNetworks, nullptr, nullptr);
    DefineCustomStringVariable(
        "outbox.broker_allowed_networks",
        "Networks of loopback, private, link-local and other internal addresses that brokers "
        "configured by roles other than superusers may be at.",
        "A comma-separated list of CIDR networks, e.g. '10.0.0.0/8'. Applies to the Kafka, "
        "RabbitMQ and NATS addresses of destinations whose config a non-superuser wrote and "
        "of subscriptions whose owner is not a superuser; public addresses are always "
        "allowed, and a superuser's brokers may be anywhere. Checked when the address is set "
        "and for every address a client library connects to.",
        &setting_broker_allowed_networks, "", PGC_SIGHUP, GUC_SUPERUSER_ONLY | GUC_LIST_INPUT,
        CheckAllowedNetworks, nullptr, nullptr);
}

// The inbox (issue 23).
static void DefineInboxSettings() {
    DefineCustomIntVariable(
        "outbox.inbox_retention", "How long inbox dedup rows (outbox.inbox) are kept.",
        "An event redelivered after its row was swept is applied again: keep it longer than "
        "any redelivery can come late. 0 keeps them for ever. Older rows are swept by the "
        "workers in bounded batches.",
        &setting_inbox_retention_s, 7 * 24 * 3600, 0, INT_MAX, PGC_SIGHUP, GUC_UNIT_S, nullptr,
        nullptr, nullptr);
    DefineCustomIntVariable(
        "outbox.inbox_handler_timeout", "Longest run of one call of a subscription's handler.",
        "A call that runs longer is cancelled: its record is rolled back and treated as a "
        "handler error (dead letter, or a blocked partition with on_error = block). A "
        "subscription's handler_timeout overrides it. 0: no limit.",
        &setting_inbox_handler_timeout_ms, 5000, 0, INT_MAX, PGC_SIGHUP, GUC_UNIT_MS, nullptr,
        nullptr, nullptr);
}

// What a session sets for itself.
static void DefineSessionSettings() {
    DefineCustomBoolVariable(
        "outbox.drop_nonempty",
        "Lets DROP EXTENSION outbox delete queued messages and dead letters.",
        "Off: DROP EXTENSION outbox (and DROP SCHEMA outbox CASCADE) is refused while either "
        "table has rows.",
        &setting_drop_nonempty, false, PGC_USERSET, 0, nullptr, nullptr, nullptr);
    // Set by the SET clause of outbox's own functions (publish, requeue); harmless elsewhere.
    DefineCustomBoolVariable(
        "outbox.internal_call", "Set by outbox's own SQL functions while they run.",
        "The insert check's errors then carry no CONTEXT (it would show the function's internal "
        "statement).",
        &setting_internal_call, false, PGC_USERSET,
        GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE | GUC_NO_RESET_ALL, nullptr, nullptr, nullptr);
    // Not checked here: a bad value must not fail the application's SET LOCAL (or its
    // transaction); the INSERT that would use it warns and goes on without it.
    DefineCustomStringVariable(
        "outbox.traceparent",
        "W3C traceparent stored with the messages this session inserts without one.",
        "Typically SET LOCAL once per transaction from the application's current span.",
        &setting_traceparent, "", PGC_USERSET, GUC_NOT_IN_SAMPLE, nullptr, nullptr, nullptr);
    DefineCustomStringVariable(
        "outbox.tracestate", "W3C tracestate stored with outbox.traceparent.", nullptr,
        &setting_tracestate, "", PGC_USERSET, GUC_NOT_IN_SAMPLE, nullptr, nullptr, nullptr);
}

void DefineSettings() {
    DefineServingSettings();
    DefineDeliverySettings();
    DefineNetworkSettings();
    DefineInboxSettings();
    DefineSessionSettings();
    DefineTestSwitches();  // debug.cpp: every test switch, behind outbox.test_switches
    MarkGUCPrefixReserved("outbox");
}

}  // namespace outbox::pg
