package outbox.peers;

import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Commit-to-consumer latency of one relay, measured the same way for both systems.
 *
 * <p>N producer connections (JDBC, autocommit) run single-row INSERT transactions into the
 * system's outbox table, paced to R messages/s on one global schedule, and note the time just
 * after each statement (its transaction) returned, per event id: {@code outbox.messages}'
 * {@code event_id} (sent by outbox as the {@code ce_id} header), or the Debezium table's
 * {@code id} (sent by the event router as the {@code id} header). One Kafka Java consumer,
 * assigned to every partition of the topic at its end offsets before the first insert, notes
 * when each event id arrives. Producers and consumer share this JVM's monotonic clock.
 * Messages committed in the first --warmup seconds are delivered but not counted.
 *
 * <p>{@code --system direct} is the floor: the same senders produce straight to the topic with
 * the Kafka producer Debezium's side uses ({@code acks=all}, idempotence, {@code linger.ms=1}),
 * the time noted just before {@code send()}, id in the {@code id} header: what the brokers and
 * this consumer take by themselves on this machine.
 *
 * <p>Prints one line: {@code sent= received= missing= duplicates= seconds= rate= p50_ms=
 * p90_ms= p99_ms= p999_ms= max_ms= catch_up_s=}, the keys of test/bench/latency.cpp.
 */
final class LatencyProbe {
    private LatencyProbe() {}

    /** One committed insert: its event id, when its commit returned, whether it counts. */
    record Commit(String id, long atNanos, boolean counted) {}

    static String payload(long i) {
        return String.format(Locale.ROOT,
                "{\"order_id\": %d, \"customer\": \"customer-%d\", \"status\": \"created\", \"amount\": %.2f, "
                        + "\"currency\": \"EUR\", \"items\": %d, \"placed_at\": \"2024-05-01T12:00:00Z\", \"channel\": \"web\"}",
                i, i % 1000, (i % 10000) * 1.37, i % 7 + 1);
    }

    /** Arrivals by event id, read by one thread from every partition of the topic. */
    static final class Receiver implements Runnable {
        private final KafkaConsumer<byte[], byte[]> consumer;
        private final String header;
        private final AtomicBoolean stop = new AtomicBoolean();
        private final List<Map.Entry<String, Long>> arrivals = Collections.synchronizedList(new ArrayList<>());
        final AtomicLong count = new AtomicLong();
        final AtomicLong lastNanos = new AtomicLong();
        private final Thread thread;

        Receiver(String bootstrap, String topic, String header) {
            this.header = header;
            Properties p = new Properties();
            p.setProperty(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            p.setProperty(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            p.setProperty(ConsumerConfig.CLIENT_ID_CONFIG, "outbox-bench-peers-consumer");
            // A fetch is answered as soon as one byte is there; the wait only bounds an idle fetch.
            p.setProperty(ConsumerConfig.FETCH_MIN_BYTES_CONFIG, "1");
            p.setProperty(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
            consumer = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
            List<TopicPartition> parts = new ArrayList<>();
            for (PartitionInfo info : consumer.partitionsFor(topic, Duration.ofSeconds(30))) {
                parts.add(new TopicPartition(topic, info.partition()));
            }
            consumer.assign(parts);
            consumer.seekToEnd(parts);
            for (TopicPartition tp : parts) {
                consumer.position(tp, Duration.ofSeconds(30));  // fixes the start before anything is sent
            }
            thread = new Thread(this, "receiver");
        }

        void start() {
            thread.start();
        }

        @Override
        public void run() {
            while (!stop.get()) {
                var records = consumer.poll(Duration.ofMillis(20));
                long at = System.nanoTime();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    Header h = r.headers().lastHeader(header);
                    if (h != null) {
                        arrivals.add(Map.entry(new String(h.value(), StandardCharsets.UTF_8), at));
                    }
                    count.incrementAndGet();
                    lastNanos.set(at);
                }
            }
            consumer.close();
        }

        List<Map.Entry<String, Long>> stopAndTake() throws InterruptedException {
            stop.set(true);
            thread.join();
            return arrivals;
        }
    }

    /** One sender thread's way to send message i; returns its event id. */
    interface Sender extends AutoCloseable {
        String send(long i) throws Exception;
    }

    /** A single-row INSERT, its own transaction (autocommit); the id comes back from RETURNING. */
    static Sender jdbcSender(String jdbc, String sql, String first) throws Exception {
        Connection c = DriverManager.getConnection(jdbc);
        c.setAutoCommit(true);
        PreparedStatement ps = c.prepareStatement(sql);
        return new Sender() {
            @Override
            public String send(long i) throws Exception {
                ps.setString(1, first);
                ps.setString(2, "customer-" + (i % 1000));
                ps.setString(3, payload(i));
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    return rs.getString(1);
                }
            }

            @Override
            public void close() throws Exception {
                ps.close();
                c.close();
            }
        };
    }

    static void run(Args a) throws Exception {
        String system = a.get("system");
        String sql = null;
        String header;
        String first = null;
        if (system.equals("outbox")) {
            sql = "INSERT INTO outbox.messages (destination, key, payload) VALUES (?, ?, ?::jsonb) RETURNING event_id";
            header = "ce_id";
            first = a.get("destination");
        }
        else if (system.equals("debezium")) {
            sql = "INSERT INTO " + a.get("table") + " (id, aggregatetype, aggregateid, type, payload) "
                    + "VALUES (gen_random_uuid(), ?, ?, 'OrderCreated', ?::jsonb) RETURNING id";
            header = "id";
            first = a.get("aggregatetype", "orders");
        }
        else if (system.equals("direct")) {
            header = "id";  // the floor: straight to Kafka, the time noted just before send()
        }
        else {
            throw new IllegalArgumentException("--system is outbox, debezium or direct");
        }
        double rate = a.getDouble("rate", 1000);
        int connections = (int) a.getLong("connections", 8);
        long durationNs = (long) (a.getDouble("duration", 10) * 1e9);
        long warmupNs = (long) (a.getDouble("warmup", 1) * 1e9);
        double drainTimeout = a.getDouble("drain-timeout", 120);
        String topic = a.get("topic");

        Receiver receiver = new Receiver(a.get("bootstrap"), topic, header);
        receiver.start();
        Thread.sleep(500);  // the consumer's first fetches are out before anything is sent

        List<Sender> senders = new ArrayList<>();
        KafkaProducer<byte[], byte[]> direct = null;
        if (system.equals("direct")) {
            // Debezium's producer settings (DebeziumRelay.producer): acks=all, idempotence, linger 1 ms
            KafkaProducer<byte[], byte[]> producer = DebeziumRelay.producer(a.get("bootstrap"));
            direct = producer;
            for (int t = 0; t < connections; t++) {
                int thread = t;
                senders.add(new Sender() {
                    @Override
                    public String send(long i) {
                        String id = "direct-" + thread + "-" + i;
                        RecordHeaders h = new RecordHeaders();
                        h.add("id", id.getBytes(StandardCharsets.UTF_8));
                        producer.send(new ProducerRecord<>(topic, null, ("customer-" + (i % 1000)).getBytes(StandardCharsets.UTF_8),
                                payload(i).getBytes(StandardCharsets.UTF_8), h));
                        return id;
                    }

                    @Override
                    public void close() {}
                });
            }
        }
        else {
            for (int t = 0; t < connections; t++) {
                senders.add(jdbcSender(a.get("jdbc"), sql, first));
            }
        }
        AtomicLong next = new AtomicLong();
        long start = System.nanoTime();
        List<List<Commit>> perThread = new ArrayList<>();
        List<Thread> threads = new ArrayList<>();
        AtomicReference<Exception> failed = new AtomicReference<>();
        boolean before = system.equals("direct");  // direct: the time just before send()
        for (int t = 0; t < connections; t++) {
            List<Commit> out = new ArrayList<>();
            perThread.add(out);
            Sender sender = senders.get(t);
            Thread th = new Thread(() -> {
                try {
                    for (;;) {
                        long i = next.getAndIncrement();
                        long due = start + (long) (i * 1e9 / rate);
                        if (due - start >= durationNs) {
                            break;
                        }
                        long wait = due - System.nanoTime();
                        if (wait > 0) {
                            LockSupport.parkNanos(wait);
                        }
                        long t0 = System.nanoTime();
                        String id = sender.send(i);
                        long at = before ? t0 : System.nanoTime();
                        out.add(new Commit(id, at, at - start >= warmupNs));
                    }
                }
                catch (Exception e) {
                    failed.compareAndSet(null, e);
                }
            }, "producer-" + t);
            threads.add(th);
            th.start();
        }
        for (Thread th : threads) {
            th.join();
        }
        long sentEnd = System.nanoTime();
        for (Sender sender : senders) {
            sender.close();
        }
        if (direct != null) {
            direct.close();
        }
        if (failed.get() != null) {
            throw failed.get();
        }

        Map<String, Commit> byId = new HashMap<>();
        long sent = 0;
        long countedSent = 0;
        long firstCounted = Long.MAX_VALUE;
        long lastCounted = 0;
        for (List<Commit> l : perThread) {
            for (Commit c : l) {
                sent++;
                byId.put(c.id(), c);
                if (c.counted()) {
                    countedSent++;
                    firstCounted = Math.min(firstCounted, c.atNanos());
                    lastCounted = Math.max(lastCounted, c.atNanos());
                }
            }
        }
        long deadline = System.nanoTime() + (long) (drainTimeout * 1e9);
        while (receiver.count.get() < sent && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        Thread.sleep(200);  // late duplicates
        long lastArrival = receiver.lastNanos.get();
        List<Map.Entry<String, Long>> arrivals = receiver.stopAndTake();

        long received = 0;
        long duplicates = 0;
        List<long[]> timeline = new ArrayList<>();  // {committed at, latency in us}
        Map<String, Boolean> seen = new HashMap<>();
        List<Long> latUs = new ArrayList<>();
        for (Map.Entry<String, Long> e : arrivals) {
            Commit c = byId.get(e.getKey());
            if (c == null) {
                continue;  // not one of ours
            }
            if (seen.putIfAbsent(e.getKey(), Boolean.TRUE) != null) {
                duplicates++;
                continue;
            }
            received++;
            if (c.counted()) {
                long us = (e.getValue() - c.atNanos()) / 1000;
                latUs.add(us);
                timeline.add(new long[] {c.atNanos() - start, us});
            }
        }
        String dump = a.get("dump", null);
        if (dump != null) {
            timeline.sort((x, y) -> Long.compare(x[0], y[0]));
            try (PrintWriter w = new PrintWriter(dump, StandardCharsets.UTF_8)) {
                for (long[] t : timeline) {
                    w.printf(Locale.ROOT, "%.3f %.3f%n", t[0] / 1e6, t[1] / 1e3);
                }
            }
        }
        Collections.sort(latUs);
        double window = countedSent > 1 ? (lastCounted - firstCounted) / 1e9 : 0;
        System.out.printf(Locale.ROOT,
                "sent=%d received=%d missing=%d duplicates=%d seconds=%.2f rate=%.0f p50_ms=%.2f p90_ms=%.2f "
                        + "p99_ms=%.2f p999_ms=%.2f max_ms=%.2f catch_up_s=%.2f%n",
                sent, received, sent - received, duplicates, window, window > 0 ? (countedSent - 1) / window : 0,
                percentile(latUs, 0.5), percentile(latUs, 0.9), percentile(latUs, 0.99), percentile(latUs, 0.999),
                latUs.isEmpty() ? 0.0 : latUs.get(latUs.size() - 1) / 1000.0,
                lastArrival > sentEnd ? (lastArrival - sentEnd) / 1e9 : 0.0);
    }

    static double percentile(List<Long> sortedUs, double q) {
        if (sortedUs.isEmpty()) {
            return 0;
        }
        int i = (int) Math.round(q * (sortedUs.size() - 1));
        return sortedUs.get(Math.min(i, sortedUs.size() - 1)) / 1000.0;
    }
}
