// Keeping PostgreSQL's signal handlers on the worker's own thread while transport libraries
// (librdkafka, libcurl's threaded resolver) start threads of their own.
#pragma once

#include <pthread.h>
#include <signal.h>

namespace outbox {

// Blocks every signal for the lifetime of the object, so threads started meanwhile inherit a
// full mask; the previous mask is restored (and pending signals delivered) on destruction.
class SignalsBlocked {
  public:
    SignalsBlocked() {
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &saved_);
    }
    ~SignalsBlocked() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }
    SignalsBlocked(const SignalsBlocked &) = delete;
    SignalsBlocked &operator=(const SignalsBlocked &) = delete;

  private:
    sigset_t saved_;
};

}  // namespace outbox
