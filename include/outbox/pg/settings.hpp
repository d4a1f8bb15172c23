// The outbox.* settings (GUCs) of design §1. Defined in _PG_init; read anywhere.
#pragma once

namespace outbox::pg {

extern char *setting_databases;        // outbox.databases (sighup): comma list of databases
extern int setting_workers;            // outbox.workers (postmaster): workers per database
extern int setting_batch_size;         // outbox.batch_size (sighup): rows claimed per cycle
extern int setting_poll_interval_ms;   // outbox.poll_interval (sighup)
extern int setting_lease_timeout_ms;   // outbox.lease_timeout (sighup)
extern int setting_max_attempts;       // outbox.max_attempts (sighup)
extern int setting_retry_base_ms;      // outbox.retry_base (sighup)
extern int setting_retry_max_ms;       // outbox.retry_max (sighup)
extern int setting_max_payload_bytes;  // outbox.max_payload_bytes (superuser)
extern int setting_max_pending;        // outbox.max_pending (superuser): database queue cap
extern int setting_retention_s;        // outbox.retention (sighup): keep delivered rows
extern int setting_inbox_retention_s;  // outbox.inbox_retention (sighup): keep dedup rows; 0: ever
extern bool
    setting_drop_nonempty;        // outbox.drop_nonempty (user): DROP EXTENSION may lose the queue
extern int setting_poison_after;  // outbox.poison_after (sighup): driver crashes -> poison
extern int setting_driver_memory_limit_mb;  // outbox.driver_memory_limit (sighup); 0: none

// outbox.webhook_allowed_networks (sighup, superuser only): CIDR list, network_policy.hpp
extern char *setting_webhook_allowed_networks;
// outbox.broker_allowed_networks (sighup, superuser only): the internal networks a broker of a
// destination or subscription that a non-superuser configured may be at (network_policy.hpp)
extern char *setting_broker_allowed_networks;
// outbox.inbox_handler_timeout (sighup): longest run of one handler call, ms; 0: no limit
extern int setting_inbox_handler_timeout_ms;

// outbox.internal_call (user, not shown): on for the duration of outbox's own SQL functions that
// insert into outbox.messages (their SET clause), so that the insert check's errors carry no
// CONTEXT showing their internal statement (message_check.cpp).
extern bool setting_internal_call;

// The producer's trace context (user): stored with every message the session inserts without
// a traceparent header, until reset (SET LOCAL: the transaction). Checked at INSERT, where a
// malformed value is ignored with a WARNING.
extern char *setting_traceparent;  // outbox.traceparent
extern char *setting_tracestate;   // outbox.tracestate

// The test switches (outbox.test_switches, outbox.debug_*) are in debug.hpp.

// Defines every setting and reserves the "outbox." prefix. Called once from _PG_init.
void DefineSettings();

}  // namespace outbox::pg
