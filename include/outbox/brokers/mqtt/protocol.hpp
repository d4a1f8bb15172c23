// MQTT's protocol constants (MQTT_PROP_*, reason codes, MQTT_PROTOCOL_V5) from libmosquitto:
// <mosquitto/mqtt_protocol.h> from 2.1 on (Debian forky and later, where <mqtt_protocol.h> is a
// shim that warns), <mqtt_protocol.h> before (bookworm's and trixie's 2.0).
#pragma once

#if __has_include(<mosquitto/mqtt_protocol.h>)
#include <mosquitto/mqtt_protocol.h>
#else
#include <mqtt_protocol.h>
#endif
