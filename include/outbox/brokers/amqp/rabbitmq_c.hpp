// librabbitmq's headers. 0.12 moved them under rabbitmq-c/ (trixie and later ship 0.15) and
// made the old names warn; bookworm's 0.11 has only the old names. This is a difference between
// releases of the client library, not of PostgreSQL, so it lives here rather than in
// outbox/pg/compat.hpp.
#pragma once

#if __has_include(<rabbitmq-c/amqp.h>)
#include <rabbitmq-c/amqp.h>
#include <rabbitmq-c/framing.h>
#include <rabbitmq-c/ssl_socket.h>
#include <rabbitmq-c/tcp_socket.h>
#else
#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#endif
