package outbox.peers;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * How many messages a topic holds: the sum of its partitions' end offsets (each message of an
 * idempotent, non-transactional producer takes one offset). The same count for both relays, by
 * a client neither of them wrote.
 *
 * <ul>
 *   <li>no --interval-ms: prints {@code sum=N} once;</li>
 *   <li>--interval-ms N: prints {@code ms=<epoch ms> sum=N} every N ms until killed, or, with
 *       --until M, until the sum reaches M: then {@code reached ms=<epoch ms> sum=N} and exit 0
 *       (exit 1 after --timeout seconds).</li>
 * </ul>
 */
final class OffsetWatch {
    private OffsetWatch() {}

    static void run(Args a) throws Exception {
        String topic = a.get("topic");
        Properties p = new Properties();
        p.setProperty(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, a.get("bootstrap"));
        p.setProperty(ConsumerConfig.CLIENT_ID_CONFIG, "outbox-bench-peers-offsets");
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> parts = new ArrayList<>();
            for (PartitionInfo info : c.partitionsFor(topic, Duration.ofSeconds(30))) {
                parts.add(new TopicPartition(topic, info.partition()));
            }
            c.assign(parts);  // endOffsets of unassigned partitions logs a warning each time
            long interval = a.getLong("interval-ms", 0);
            if (interval <= 0) {
                System.out.println("sum=" + sum(c.endOffsets(parts, Duration.ofSeconds(30))));
                return;
            }
            long until = a.getLong("until", -1);
            long deadline = System.currentTimeMillis() + (long) (a.getDouble("timeout", 3600) * 1000);
            for (;;) {
                long s = sum(c.endOffsets(parts, Duration.ofSeconds(30)));
                long now = System.currentTimeMillis();
                if (until >= 0 && s >= until) {
                    System.out.println("reached ms=" + now + " sum=" + s);
                    return;
                }
                if (until < 0) {
                    System.out.println("ms=" + now + " sum=" + s);
                    System.out.flush();
                }
                if (now > deadline) {
                    System.out.println("timeout ms=" + now + " sum=" + s);
                    System.exit(1);
                }
                Thread.sleep(interval);
            }
        }
    }

    static long sum(Map<TopicPartition, Long> offsets) {
        long s = 0;
        for (long v : offsets.values()) {
            s += v;
        }
        return s;
    }
}
