// A Kafka destination's default in-flight window: see window.hpp.
#include "outbox/brokers/kafka/window.hpp"

#include <algorithm>

namespace outbox {

KafkaWindow::KafkaWindow(size_t base, size_t wide)
    : base_(std::max<size_t>(1, base)), wide_(std::max(base_, wide)), width_(base_) {}

void KafkaWindow::NewRound() {
    acks_ = 0;
    sum_ms_ = 0;
}

void KafkaWindow::Acked(int64_t ack_ms) {
    ++acks_;
    sum_ms_ += std::max<int64_t>(0, ack_ms);
    if (acks_ >= base_ && sum_ms_ >= kCloseAckMs * int64_t(acks_)) {
        width_ = base_;
        NewRound();
    } else if (acks_ >= width_) {
        if (sum_ms_ < kOpenAckMs * int64_t(acks_))
            width_ = std::min(wide_, width_ * 2);
        NewRound();
    }
}

void KafkaWindow::Failed() {
    width_ = base_;
    NewRound();
}

}  // namespace outbox
