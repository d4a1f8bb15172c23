// A Kafka destination's default in-flight window (no "max_in_flight" in its config): how many
// messages the driver takes before their delivery reports come back.
//
// The drain runs at most one window per acknowledgement round trip, so two batches in flight
// (the worker's default) left one broker's drain waiting on acks between claims. A window ten
// times wider filled the pipeline on a broker that acknowledges within milliseconds, but on a
// replicated acks=all cluster (acks around 10 ms on the test machine) it only queued messages
// inside librdkafka, whose broker thread then spins while a partition waits on its five
// requests in flight (see KafkaDriver::Submit), and pushed acknowledgements past the worker's
// fast path. So the window widens only while acknowledgements stay fast, a round at a time:
//
// - A round is a window's worth of acknowledged messages. When it ends with their mean
//   acknowledgement time under kOpenAckMs, the window doubles (up to `wide`).
// - Once a round holds `base` acknowledgements and their mean reaches kCloseAckMs, or a
//   message fails, the window is back to `base` at once and a new round starts.
//
// The gap between the two thresholds keeps a cluster whose acknowledgements hover around one
// of them from opening and closing the window with every report.
#pragma once

#include <cstddef>
#include <cstdint>

namespace outbox {

class KafkaWindow {
  public:
    static constexpr int64_t kOpenAckMs = 5;
    static constexpr int64_t kCloseAckMs = 10;

    KafkaWindow(size_t base, size_t wide);

    // A message acknowledged ack_ms after it was handed to librdkafka.
    void Acked(int64_t ack_ms);
    // A message that was not delivered (an error, a retry, a purge).
    void Failed();
    size_t Width() const { return width_; }

  private:
    void NewRound();

    size_t base_;
    size_t wide_;
    size_t width_;
    size_t acks_ = 0;     // acknowledgements in this round
    int64_t sum_ms_ = 0;  // their acknowledgement times
};

}  // namespace outbox
