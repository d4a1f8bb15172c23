// A Kafka destination's default in-flight window (no "max_in_flight" in its config): how many
// messages the driver takes before their delivery reports come back.
//
// The drain runs at most one window per acknowledgement round trip, so two batches in flight
// (the worker's default) left the drain waiting on acks between claims: one broker's drain ran
// at about half the rate PostgreSQL could claim, three brokers' at 0.16-0.28 of a direct
// producer's. A window ten times wider always, though, made a broker that acknowledges slowly
// (tens of milliseconds: far away, or overloaded) hold ten times more messages locked or leased
// at once: more sent again after a crash, and acknowledgements that pass the worker's fast path
// (Dispatcher, kFastPathMaxAckMs) so that every message is leased. So the window widens only
// while acknowledgements stay fast, a round at a time:
//
// - A round is a window's worth of acknowledged messages. When it ends with their mean
//   acknowledgement time (hand-over to librdkafka to delivery report) under kOpenAckMs, the
//   window doubles (up to `wide`).
// - Once a round holds `base` acknowledgements and their mean reaches kCloseAckMs, or a
//   message fails, the window is back to `base` at once and a new round starts.
//
// On the test machine a round's mean was 4-10 ms on one broker whatever the window, and 8-48 ms
// (median 17) on three brokers with acks=all at the base window. The gap between the two
// thresholds keeps a cluster whose acknowledgements hover around one of them from opening and
// closing the window with every report; a saturated cluster, whose acknowledgements lengthen as
// the window fills its queue, goes back and forth between the base and a few times it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace outbox {

class KafkaWindow {
  public:
    static constexpr int64_t kOpenAckMs = 20;
    static constexpr int64_t kCloseAckMs = 40;

    KafkaWindow(size_t base, size_t wide);

    // A message acknowledged ack_ms after it was handed to librdkafka.
    void Acked(int64_t ack_ms);
    // A message that was not delivered (an error, a retry, a purge).
    void Failed();
    size_t Width() const { return width_; }
    size_t Base() const { return base_; }

  private:
    void NewRound();

    size_t base_;
    size_t wide_;
    size_t width_;
    size_t acks_ = 0;     // acknowledgements in this round
    int64_t sum_ms_ = 0;  // their acknowledgement times
};

}  // namespace outbox
