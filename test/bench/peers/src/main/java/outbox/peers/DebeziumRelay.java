package outbox.peers;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.source.SourceRecord;
import org.apache.kafka.connect.storage.SimpleHeaderConverter;
import org.apache.kafka.connect.storage.StringConverter;

import io.debezium.embedded.Connect;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.RecordChangeEvent;
import io.debezium.engine.format.ChangeEventFormat;

/**
 * Debezium as its documentation sets it up for the outbox pattern: the embedded engine runs the
 * PostgreSQL connector (logical decoding with pgoutput, its own replication slot and
 * publication) on one outbox table, the outbox event router SMT turns each inserted row into a
 * message (topic by aggregatetype, key = aggregateid, value = payload, header {@code id} = the
 * row's id), and every batch the engine hands over is produced to Kafka with {@code acks=all}
 * and idempotence; the batch's offsets are marked processed only once Kafka acknowledged all of
 * it (at-least-once, as Debezium Server's Kafka sink does). Offsets are kept in a file and
 * flushed every second (the engine's default is a minute), which is also when the replication
 * slot's confirmed_flush_lsn moves on.
 *
 * <p>Keys, values and headers are serialised as Kafka Connect would with its StringConverter
 * (the converter Debezium's outbox documentation uses for JSON payloads kept as text) and its
 * default header converter.
 *
 * <p>Prints on stdout: {@code task_started_ms=}, {@code first_record_ms=} (epoch ms), and on
 * SIGTERM {@code delivered=}; the engine's own log goes to stderr.
 */
final class DebeziumRelay {
    private DebeziumRelay() {}

    static Properties engineConfig(Args a) {
        Properties p = new Properties();
        p.setProperty("name", "outbox-bench-debezium");
        p.setProperty("connector.class", "io.debezium.connector.postgresql.PostgresConnector");
        p.setProperty("offset.storage", "org.apache.kafka.connect.storage.FileOffsetBackingStore");
        p.setProperty("offset.storage.file.filename", a.get("offsets"));
        p.setProperty("offset.flush.interval.ms", "1000");
        p.setProperty("database.hostname", a.get("pg-host"));
        p.setProperty("database.port", a.get("pg-port"));
        p.setProperty("database.user", a.get("user"));
        p.setProperty("database.password", a.get("password", "unused"));
        p.setProperty("database.dbname", a.get("dbname"));
        p.setProperty("topic.prefix", "dbz");
        p.setProperty("plugin.name", "pgoutput");
        p.setProperty("slot.name", a.get("slot"));
        p.setProperty("publication.name", a.get("publication"));
        p.setProperty("publication.autocreate.mode", "disabled");  // made by the bench: inserts only
        p.setProperty("table.include.list", a.get("table"));
        p.setProperty("snapshot.mode", "no_data");  // only what is inserted after the slot exists
        p.setProperty("tombstones.on.delete", "false");
        p.setProperty("transforms", "outbox");
        p.setProperty("transforms.outbox.type", "io.debezium.transforms.outbox.EventRouter");
        // Every aggregatetype to one topic (the router's default is outbox.event.<aggregatetype>).
        p.setProperty("transforms.outbox.route.topic.replacement", a.get("topic"));
        for (String kv : a.all("set")) {
            int eq = kv.indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException("--set needs key=value: " + kv);
            }
            p.setProperty(kv.substring(0, eq), kv.substring(eq + 1));
        }
        return p;
    }

    static KafkaProducer<byte[], byte[]> producer(String bootstrap) {
        Properties p = new Properties();
        p.setProperty(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.setProperty(ProducerConfig.ACKS_CONFIG, "all");
        p.setProperty(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        // The outbox relay's librdkafka producer lingers 1 ms; Kafka 4's Java default is 5 ms.
        p.setProperty(ProducerConfig.LINGER_MS_CONFIG, "1");
        p.setProperty(ProducerConfig.CLIENT_ID_CONFIG, "outbox-bench-debezium");
        return new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
    }

    /** Produces each batch, waits for every acknowledgement, then marks the batch processed. */
    static final class KafkaSink implements DebeziumEngine.ChangeConsumer<RecordChangeEvent<SourceRecord>> {
        private final KafkaProducer<byte[], byte[]> producer;
        private final String topic;
        private final StringConverter keys = new StringConverter();
        private final StringConverter values = new StringConverter();
        private final SimpleHeaderConverter headers = new SimpleHeaderConverter();
        final AtomicLong delivered = new AtomicLong();
        final AtomicLong skipped = new AtomicLong();
        private boolean first = true;

        KafkaSink(KafkaProducer<byte[], byte[]> producer, String topic) {
            this.producer = producer;
            this.topic = topic;
            keys.configure(Map.of(), true);
            values.configure(Map.of(), false);
            headers.configure(Map.of());
        }

        @Override
        public void handleBatch(List<RecordChangeEvent<SourceRecord>> batch,
                                DebeziumEngine.RecordCommitter<RecordChangeEvent<SourceRecord>> committer)
                throws InterruptedException {
            if (first && !batch.isEmpty()) {
                first = false;
                System.out.println("first_record_ms=" + System.currentTimeMillis());
                System.out.flush();
            }
            List<Future<RecordMetadata>> sent = new ArrayList<>(batch.size());
            for (RecordChangeEvent<SourceRecord> event : batch) {
                SourceRecord r = event.record();
                if (r == null || !topic.equals(r.topic())) {
                    skipped.incrementAndGet();  // not an outbox event (none are expected)
                    continue;
                }
                RecordHeaders h = new RecordHeaders();
                for (Header header : r.headers()) {
                    h.add(header.key(), headers.fromConnectHeader(r.topic(), header.key(), header.schema(), header.value()));
                }
                byte[] key = keys.fromConnectData(r.topic(), r.keySchema(), r.key());
                byte[] value = values.fromConnectData(r.topic(), r.valueSchema(), r.value());
                sent.add(producer.send(new ProducerRecord<>(r.topic(), r.kafkaPartition(), r.timestamp(), key, value, h)));
            }
            for (Future<RecordMetadata> f : sent) {
                try {
                    f.get();
                }
                catch (ExecutionException e) {
                    // The engine stops on an exception from the consumer: nothing is marked.
                    throw new IllegalStateException("produce failed: " + e.getCause(), e.getCause());
                }
            }
            for (RecordChangeEvent<SourceRecord> event : batch) {
                committer.markProcessed(event);
            }
            committer.markBatchFinished();
            delivered.addAndGet(sent.size());
        }
    }

    static void run(Args a) throws Exception {
        KafkaProducer<byte[], byte[]> producer = producer(a.get("bootstrap"));
        KafkaSink sink = new KafkaSink(producer, a.get("topic"));
        CountDownLatch done = new CountDownLatch(1);
        AtomicReference<String> failure = new AtomicReference<>();
        DebeziumEngine<RecordChangeEvent<SourceRecord>> engine = DebeziumEngine.create(ChangeEventFormat.of(Connect.class))
                .using(engineConfig(a))
                .notifying(sink)
                .using(new DebeziumEngine.ConnectorCallback() {
                    @Override
                    public void taskStarted() {
                        System.out.println("task_started_ms=" + System.currentTimeMillis());
                        System.out.flush();
                    }
                })
                .using((success, message, error) -> {
                    if (!success) {
                        failure.set(message + (error != null ? ": " + error : ""));
                    }
                    done.countDown();
                })
                .build();
        ExecutorService executor = Executors.newSingleThreadExecutor();
        Thread hook = new Thread(() -> {
            try {
                engine.close();
                done.await(60, TimeUnit.SECONDS);
            }
            catch (Exception e) {
                System.err.println("peers: closing the engine: " + e);
            }
            producer.close();
            System.out.println("delivered=" + sink.delivered.get() + " skipped=" + sink.skipped.get());
            System.out.flush();
        });
        Runtime.getRuntime().addShutdownHook(hook);
        executor.execute(engine);
        done.await();
        if (failure.get() != null) {
            System.err.println("peers: the Debezium engine stopped: " + failure.get());
            Runtime.getRuntime().halt(1);
        }
        executor.shutdown();
    }
}
