// The inbox's consume step (docs/inbox.md): what the inbox worker of a database
// (inbox_worker.cpp: a process of its own, apart from delivery) does for its subscriptions.
//
// Each subscription has a Kafka consumer in the worker's driver process (RemoteConsumer); the
// worker assigns it every partition of its topics, from the offsets stored in
// outbox.inbox_offsets, and applies what comes back in its own transactions:
//   - one transaction per turn for up to the subscription's batch_size records, each record in
//     a subtransaction of its own: its dedup row (outbox.inbox, unique on subscription and
//     event id; a record whose event id is there is skipped and counted as a duplicate), then
//     the handler, run as the subscription's owner with search_path pg_catalog, pg_temp, in a
//     sandbox (CallHandler: a security-restricted operation whose settings and session
//     advisory locks are undone after each call, cancelled after handler_timeout). A
//     handler that raises rolls back its record alone: the record goes to
//     outbox.inbox_dead_letters with the error and SQLSTATE ("on_error": "skip"), and with
//     "block" its partition stops there until that row is gone;
//   - the partition's next offset and counters are written in the same transaction, with a
//     compare-and-set on the offset the worker read: the effects, the dedup rows and the
//     position commit or roll back together, so a worker that dies (kill -9, immediate stop)
//     loses nothing and repeats nothing — its successor starts from the stored offsets, and a
//     record applied once is a duplicate to it;
//   - dead letters marked by outbox.requeue_inbox() are applied again.
// Nothing here waits for the network: the consumer reads in the driver process, and records
// wait in memory between turns (at most the consumer's window).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "outbox/consumer.hpp"
#include "outbox/uuid7.hpp"
#include "outbox/subscription_config.hpp"

namespace outbox {
class DriverProcess;
class RemoteConsumer;
}  // namespace outbox

namespace outbox::pg {

struct CaughtError;
struct MessageArgs;

// Whether the database has subscriptions (paused ones included): it then wants an inbox
// worker. Inside a transaction with SPI connected.
bool SubscriptionsExist();

class InboxConsumer {
  public:
    // `pause` is the worker's outbox.debug_pause hook (phases "inbox_before_handler",
    // "inbox_after_handler", "inbox_before_commit").
    InboxConsumer(DriverProcess *drivers, std::string database,
                  std::function<void(const char *)> pause);
    ~InboxConsumer();
    InboxConsumer(const InboxConsumer &) = delete;
    InboxConsumer &operator=(const InboxConsumer &) = delete;

    // Whether a transaction is worth starting now: records are waiting, or `poll` (a reload
    // of the subscriptions, ownership and requeued dead letters) is due.
    bool HasWork(bool poll);
    // Inside the worker's transaction (SPI connected, snapshot pushed). Returns true when more
    // records are waiting than one transaction applies. Throws PgError; the caller then aborts
    // the transaction and calls Aborted().
    bool Consume(bool poll);
    // After the transaction of Consume committed / was rolled back.
    void Committed();
    void Aborted();

    // Any subscription consumed now (the worker then waits on its driver process).
    bool Active() const { return !subscriptions_.empty(); }

  private:
    struct Partition {
        std::string topic;
        int32_t partition = 0;
        int64_t committed = 0;  // the next offset, as stored (committed)
        int64_t applied = 0;    // the next offset after what this transaction applied
        int64_t next = 0;       // the next offset after what was taken from the consumer
        bool blocked = false;   // on_error = block holds it at a dead letter
        bool stored = false;    // its offsets row exists (committed)
        int64_t high = -1;
        int64_t consumed = 0, duplicates = 0, dead = 0;  // this transaction's counts
        std::string last_error;                          // this transaction's, "" none
        int64_t last_record_ms = 0;
        bool touched = false;  // written in this transaction
    };
    struct Subscription {
        std::string name;
        std::string config_text;
        std::string handler;  // the regprocedure text as stored
        uint32_t owner = 0;   // role oid
        SubscriptionConfig config;
        std::unique_ptr<RemoteConsumer> consumer;
        uint64_t epoch = 0;
        bool assign_due = true;
        std::map<std::pair<std::string, int32_t>, Partition> partitions;  // owned
        std::vector<ConsumedRecord> pending;  // taken from the consumer, not yet applied
        uint32_t handler_oid = 0;
        bool may_execute = false;      // the owner's EXECUTE right on it, as last read
        void *handler_fn = nullptr;    // FmgrInfo, in TopMemoryContext
        void *message_desc = nullptr;  // TupleDesc of outbox.inbox_message, a copy
        std::string shown_error;       // what outbox.inbox_subscriptions.last_error says
        // The consumer's address rule (broker_address.hpp): guarded when the owner is not a
        // superuser; a changed outbox.broker_allowed_networks reopens the consumer.
        BrokerAddressRule address_rule;
    };

    void Load();
    void Close(Subscription &s);
    void Own(Subscription &s);
    void Assign(Subscription &s);
    void ApplyRequeued(Subscription &s);
    size_t ApplyPending(Subscription &s);
    void RecordArgs(const Subscription &s, const ConsumedRecord &r, const Uuid &id,
                    MessageArgs *args);
    static void DeadLetter(MessageArgs *args, bool blocking, const CaughtError &error);
    void WriteOffsets(Subscription &s);
    void ShowError(Subscription &s, const std::string &error);

    DriverProcess *drivers_;
    std::string database_;
    std::function<void(const char *)> pause_;
    std::map<std::string, std::unique_ptr<Subscription>> subscriptions_;
    bool loaded_ = false;
    bool reset_ = false;  // a transaction rolled back: start over from the stored offsets
};

}  // namespace outbox::pg
