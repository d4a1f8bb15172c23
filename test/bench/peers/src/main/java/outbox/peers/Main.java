package outbox.peers;

/**
 * The Java side of {@code test/bench/run --only peers} (see test/bench/README.md).
 *
 * <pre>
 *   peers debezium --pg-host H --pg-port P --dbname D --user U --table SCHEMA.TABLE
 *                  --slot S --publication P --topic T --bootstrap B --offsets FILE
 *                  [--set connector.property=value]...
 *       Debezium's embedded engine: the PostgreSQL connector (pgoutput) and the outbox event
 *       router, producing to Kafka with acks=all and idempotence; runs until SIGTERM.
 *   peers latency --system outbox|debezium --jdbc URL --bootstrap B --topic T
 *                 [--destination D] [--table SCHEMA.TABLE] [--rate R] [--connections N]
 *                 [--duration S] [--warmup S] [--drain-timeout S] [--dump FILE]
 *       Commit to consumer latency: paced single-row producer transactions, one consumer.
 *   peers offsets --bootstrap B --topic T [--interval-ms N] [--until N] [--timeout S]
 *       The sum of a topic's end offsets, once, every N ms (for at most S seconds), or until it
 *       reaches N.
 *   peers listen --jdbc URL --channel C [--timeout S]
 *       LISTEN on a channel and read every notification until SIGTERM, as a relay would.
 * </pre>
 */
public final class Main {
    private Main() {}

    public static void main(String[] argv) throws Exception {
        if (argv.length == 0) {
            System.err.println("usage: peers debezium|latency|offsets|listen --option value ...");
            System.exit(2);
        }
        Args a = Args.parse(argv, 1);
        switch (argv[0]) {
            case "debezium" -> DebeziumRelay.run(a);
            case "latency" -> LatencyProbe.run(a);
            case "offsets" -> OffsetWatch.run(a);
            case "listen" -> NotifyListener.run(a);
            default -> {
                System.err.println("peers: unknown command " + argv[0]);
                System.exit(2);
            }
        }
    }
}
