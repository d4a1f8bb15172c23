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

// Test switch (superuser, not shown, not in the sample config): outbox.debug_driver_fault makes
// the driver process fail on purpose (see src/ipc/helper_main.cpp: "segv:KEY", "abort:KEY",
// "oom:KEY", "hang:KEY", "leak:BYTES").
extern char *setting_debug_driver_fault;
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

// Fault injection for the crash tests only (not shown, not in the sample config): the worker
// stops for outbox.debug_pause_ms in the named phase ("claim": claimed, before the commit;
// "publish": messages handed to the driver; "write-back": written back, before the commit), so
// a test can stop the server at exactly that point. Off (empty) costs one string test per phase.
extern char *setting_debug_pause;
extern int setting_debug_pause_ms;
// Fault injection for the boundary tests only (superuser, not shown): "bad_alloc_in_pg_try"
// makes the next PgTry of each process that takes the setting throw std::bad_alloc inside its
// PG_TRY body (include/outbox/pg/guard.hpp). Set again (or reloaded) to fire again.
extern char *setting_debug_fault;

// Defines every setting and reserves the "outbox." prefix. Called once from _PG_init.
void DefineSettings();

}  // namespace outbox::pg
