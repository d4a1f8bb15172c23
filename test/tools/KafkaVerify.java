// The independent verifier of the real-Kafka tests: Kafka's own Java consumer and admin client
// (kafka-clients, from the same jars as the brokers), so what the tests check is not read back
// by the library that wrote it (librdkafka). Compiled and run by test/tools/kafka_cluster.
//
//   KafkaVerify consume --bootstrap B --topic T [--topic T2]... [--format ids|tsv|json] [--values]
//                       [--property K=V]... [--timeout S]
//       Every message of every partition from the start up to the end offsets read when it
//       starts, in topic, partition, offset order. One line per message on stdout:
//         ids   the ce_id header
//         tsv   topic TAB partition TAB offset TAB ce_id TAB key (\N when null)
//         json  {"topic":T,"partition":P,"offset":O,"key":K,"headers":{...},"payload":V}
//               (payload with --values), the field names kcat -J uses
//       (--property isolation.level=read_committed: what committed transactions hold only)
//       and a summary on stderr: "summary messages=N distinct=D duplicates=X no_ce_id=Z
//       partitions=P keys=K keys_on_several_partitions=S out_of_order_partitions=0".
//   KafkaVerify health --bootstrap B [--brokers 1,2,3] [--in-sync 1,2] [--topic T] [--wait S]
//       Exits 0 once the brokers listed are registered and unfenced and every partition (of T,
//       or of every topic) has a leader and all its replicas in sync (with --in-sync: those of
//       its replicas that are among the brokers given, e.g. the running ones); 1 with the
//       reason after S seconds (default 0: check once).
//   KafkaVerify leader --bootstrap B --topic T --partition P     the leader's node id
//   KafkaVerify offsets --bootstrap B --topic T                   "p:end ..." and "sum=N"
//   KafkaVerify metadata-sync --bootstrap B --brokers 1,2,3 [--wait S]
//       Exits 0 once each broker listed has fetched the metadata log up to where the
//       controller's was when it started (an ACL or a SCRAM user applies on a broker then).
//   KafkaVerify transact --bootstrap B --topic T --transactional-id X --batch commit:ID,ID...
//                        [--batch abort:ID,ID...]... [--property K=V]...
//       A transactional producer (Kafka's own, acks=all, idempotent): each --batch in order is
//       one transaction of one record per ID (key ID, header ce_id = ID, value {"id":"ID"}),
//       flushed to the brokers (so an aborted one's records are in the log, under its abort
//       marker) and then committed or aborted. Prints "committed=N aborted=N" (records).
//   KafkaVerify committed --bootstrap B --group G --topic T --partition P
//       The offset consumer group G has committed for T-P, -1 when none (an exactly-once
//       destination's marker: its committed batches).
//   KafkaVerify storage-format --config F [--config F]... ARGS...
//       Kafka's own `kafka-storage format --config F ARGS...` for each config, in this one JVM
//       (kafka_cluster formats four nodes: one JVM start instead of four).
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class KafkaVerify {
    static Map<String, List<String>> opts = new HashMap<>();

    static String opt(String name, String dflt) {
        List<String> v = opts.get(name);
        return v == null ? dflt : v.get(v.size() - 1);
    }

    static String need(String name) {
        String v = opt(name, null);
        if (v == null) fail("--" + name + " is required");
        return v;
    }

    static void fail(String msg) {
        System.err.println("KafkaVerify: " + msg);
        System.exit(2);
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 0) fail("usage: KafkaVerify consume|health|leader|offsets --bootstrap B ...");
        if (args[0].equals("storage-format")) {
            System.exit(storageFormat(Arrays.copyOfRange(args, 1, args.length)));
        }
        for (int i = 1; i < args.length; i++) {
            if (!args[i].startsWith("--")) fail("unexpected argument " + args[i]);
            String name = args[i].substring(2);
            String value = "true";
            if (!name.equals("values") && i + 1 < args.length) value = args[++i];
            opts.computeIfAbsent(name, k -> new ArrayList<>()).add(value);
        }
        switch (args[0]) {
            case "consume": consume(); break;
            case "health": System.exit(health()); break;
            case "leader": leader(); break;
            case "offsets": offsets(); break;
            case "metadata-sync": System.exit(metadataSync()); break;
            case "transact": transact(); break;
            case "committed": committed(); break;
            default: fail("unknown command " + args[0]);
        }
    }

    static Properties clientProps() {
        Properties p = new Properties();
        p.put("bootstrap.servers", need("bootstrap"));
        p.put("client.id", "outbox-verify");
        for (String kv : opts.getOrDefault("property", List.of())) {
            int eq = kv.indexOf('=');
            if (eq < 0) fail("--property wants K=V, not " + kv);
            p.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        return p;
    }

    static Admin admin() {
        Properties p = clientProps();
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "15000");
        return Admin.create(p);
    }

    static KafkaConsumer<byte[], byte[]> consumer() {
        Properties p = clientProps();
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10000");
        p.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, String.valueOf(64 << 20));
        p.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, String.valueOf(16 << 20));
        // Everything written, unless --property isolation.level=read_committed asks for what
        // committed transactions hold only (the exactly-once tests).
        p.putIfAbsent(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted");
        return new KafkaConsumer<>(p);
    }

    // Transactions that commit and transactions that abort, in the order given, from one
    // transactional producer: what a reader with read_committed must skip and one with
    // read_uncommitted sees.
    static void transact() throws Exception {
        String topic = need("topic");
        List<String> batches = opts.getOrDefault("batch", List.of());
        if (batches.isEmpty()) fail("--batch commit:ID,... or abort:ID,... is required");
        Properties p = clientProps();
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, need("transactional-id"));
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        long committed = 0, aborted = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            for (String batch : batches) {
                int colon = batch.indexOf(':');
                String how = colon < 0 ? "" : batch.substring(0, colon);
                if (!how.equals("commit") && !how.equals("abort"))
                    fail("--batch wants commit:ID,... or abort:ID,..., not " + batch);
                String[] ids = batch.substring(colon + 1).split(",");
                producer.beginTransaction();
                for (String id : ids) {
                    ProducerRecord<byte[], byte[]> r = new ProducerRecord<>(topic,
                        id.getBytes(StandardCharsets.UTF_8),
                        ("{\"id\":\"" + id + "\"}").getBytes(StandardCharsets.UTF_8));
                    r.headers().add("ce_id", id.getBytes(StandardCharsets.UTF_8));
                    producer.send(r).get();  // in the log before the transaction ends
                }
                if (how.equals("commit")) {
                    producer.commitTransaction();
                    committed += ids.length;
                } else {
                    producer.abortTransaction();
                    aborted += ids.length;
                }
            }
        }
        System.out.println("committed=" + committed + " aborted=" + aborted);
    }

    static List<TopicPartition> partitions(KafkaConsumer<byte[], byte[]> c, String topic) {
        List<PartitionInfo> infos = c.partitionsFor(topic, Duration.ofSeconds(30));
        if (infos == null || infos.isEmpty()) fail("topic " + topic + " has no partitions (does it exist?)");
        List<TopicPartition> tps = new ArrayList<>();
        for (PartitionInfo i : infos) tps.add(new TopicPartition(topic, i.partition()));
        tps.sort(Comparator.comparingInt(TopicPartition::partition));
        return tps;
    }

    static String text(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    static void json(StringBuilder sb, String s) {
        if (s == null) {
            sb.append("null");
            return;
        }
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char ch = s.charAt(i);
            switch (ch) {
                case '"': sb.append("\\\""); break;
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                case '\t': sb.append("\\t"); break;
                default:
                    if (ch < 0x20) sb.append(String.format("\\u%04x", (int) ch));
                    else sb.append(ch);
            }
        }
        sb.append('"');
    }

    static void consume() throws Exception {
        List<String> topics = opts.getOrDefault("topic", List.of());
        if (topics.isEmpty()) fail("--topic is required");
        String topic = String.join(",", topics);
        String format = opt("format", "tsv");
        boolean values = opt("values", null) != null;
        long deadline = System.currentTimeMillis() + Long.parseLong(opt("timeout", "300")) * 1000;
        StringBuilder out = new StringBuilder(1 << 16);
        long messages = 0, noId = 0, outOfOrder = 0;
        int partitionCount;
        Map<String, Integer> seen = new HashMap<>();
        Map<String, Set<Integer>> keyPartitions = new HashMap<>();
        try (KafkaConsumer<byte[], byte[]> c = consumer()) {
            List<TopicPartition> tps = new ArrayList<>();
            for (String t : topics) tps.addAll(partitions(c, t));
            partitionCount = tps.size();
            Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(30));
            c.assign(tps);
            c.seekToBeginning(tps);
            // Records of one partition arrive in offset order; partitions are printed one
            // after the other, so each partition's lines are kept (as text, not as records:
            // 200,000 records do not fit a small heap) until the end.
            Map<TopicPartition, StringBuilder> byPartition = new TreeMap<>(
                Comparator.comparing(TopicPartition::topic).thenComparingInt(TopicPartition::partition));
            Map<TopicPartition, Long> lastOffset = new HashMap<>();
            Set<TopicPartition> open = new HashSet<>();
            for (TopicPartition tp : tps)
                if (end.get(tp) > c.position(tp)) open.add(tp);
            c.assign(new ArrayList<>(open));
            while (!open.isEmpty()) {
                if (System.currentTimeMillis() > deadline)
                    fail("timed out reading " + topic + "; still open: " + open);
                ConsumerRecords<byte[], byte[]> recs = c.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    if (r.offset() >= end.get(tp)) continue;
                    Long last = lastOffset.put(tp, r.offset());
                    if (last != null && r.offset() <= last) outOfOrder++;
                    StringBuilder line = byPartition.computeIfAbsent(tp, k -> new StringBuilder());
                    messages++;
                    Header h = r.headers().lastHeader("ce_id");
                    String id = h == null ? null : text(h.value());
                    String key = text(r.key());
                    if (id == null) noId++;
                    else seen.merge(id, 1, Integer::sum);
                    if (key != null)
                        keyPartitions.computeIfAbsent(r.topic() + "\u0000" + key, k -> new HashSet<>()).add(r.partition());
                    format(line, format, r, id, key, values);
                }
                for (Iterator<TopicPartition> it = open.iterator(); it.hasNext();) {
                    TopicPartition tp = it.next();
                    if (c.position(tp) >= end.get(tp)) it.remove();
                }
                if (open.size() != c.assignment().size()) c.assign(new ArrayList<>(open));
            }
            for (StringBuilder lines : byPartition.values()) {
                out.append(lines);
                if (out.length() > (1 << 20)) {
                    System.out.print(out);
                    out.setLength(0);
                }
            }
        }
        System.out.print(out);
        System.out.flush();
        long duplicates = 0;
        for (int n : seen.values()) duplicates += n - 1;
        long several = keyPartitions.values().stream().filter(s -> s.size() > 1).count();
        System.err.printf("summary messages=%d distinct=%d duplicates=%d no_ce_id=%d partitions=%d keys=%d "
                + "keys_on_several_partitions=%d out_of_order_partitions=%d%n",
            messages, seen.size(), duplicates, noId, partitionCount, keyPartitions.size(),
            several, outOfOrder);
    }

    static void format(StringBuilder out, String format, ConsumerRecord<byte[], byte[]> r, String id, String key,
                       boolean values) {
        switch (format) {
            case "ids":
                out.append(id == null ? "\\N" : id).append('\n');
                break;
            case "tsv":
                out.append(r.topic()).append('\t').append(r.partition()).append('\t').append(r.offset()).append('\t')
                    .append(id == null ? "\\N" : id).append('\t')
                    .append(key == null ? "\\N" : key.replace('\t', ' ').replace('\n', ' '))
                    .append('\n');
                break;
            case "json": {
                out.append("{\"topic\":");
                json(out, r.topic());
                out.append(",\"partition\":").append(r.partition()).append(",\"offset\":")
                    .append(r.offset()).append(",\"ts\":").append(r.timestamp()).append(",\"key\":");
                json(out, key);
                out.append(",\"headers\":{");
                boolean first = true;
                for (Header hh : r.headers()) {
                    if (!first) out.append(',');
                    first = false;
                    json(out, hh.key());
                    out.append(':');
                    json(out, text(hh.value()));
                }
                out.append('}');
                if (values) {
                    out.append(",\"payload\":");
                    json(out, text(r.value()));
                }
                out.append("}\n");
                break;
            }
            default:
                fail("unknown --format " + format);
        }
    }

    static int health() throws Exception {
        long wait = Long.parseLong(opt("wait", "0")) * 1000;
        long deadline = System.currentTimeMillis() + wait;
        Set<Integer> want = new TreeSet<>();
        for (String b : opt("brokers", "").split(","))
            if (!b.isBlank()) want.add(Integer.parseInt(b.trim()));
        String topic = opt("topic", null);
        Set<Integer> inSync = null;
        if (opt("in-sync", null) != null) {
            inSync = new TreeSet<>();
            for (String b : opt("in-sync", "").split(","))
                if (!b.isBlank()) inSync.add(Integer.parseInt(b.trim()));
        }
        String why = "";
        try (Admin a = admin()) {
            while (true) {
                try {
                    why = unhealthy(a, want, inSync, topic);
                } catch (Exception e) {
                    why = "admin request failed: " + e;
                }
                if (why == null) return 0;
                if (System.currentTimeMillis() >= deadline) break;
                Thread.sleep(300);
            }
        }
        System.out.println("unhealthy: " + why);
        return 1;
    }

    // null when healthy, else why not.
    static String unhealthy(Admin a, Set<Integer> want, Set<Integer> inSync, String topic) throws Exception {
        Set<Integer> live = new TreeSet<>();
        for (Node n : a.describeCluster().nodes().get(15, TimeUnit.SECONDS)) live.add(n.id());
        if (!live.containsAll(want)) return "brokers up " + live + ", want " + want;
        Collection<String> names = topic != null ? List.of(topic)
            : a.listTopics(new org.apache.kafka.clients.admin.ListTopicsOptions().listInternal(true))
                  .names().get(15, TimeUnit.SECONDS);
        if (names.isEmpty()) {
            System.out.println("healthy brokers=" + live + " topics=0 partitions=0");
            return null;
        }
        int partitions = 0;
        for (TopicDescription d : a.describeTopics(names).allTopicNames().get(15, TimeUnit.SECONDS).values()) {
            for (TopicPartitionInfo p : d.partitions()) {
                partitions++;
                if (p.leader() == null) return d.name() + "-" + p.partition() + " has no leader";
                Set<Integer> isr = new HashSet<>();
                for (Node n : p.isr()) isr.add(n.id());
                for (Node n : p.replicas())
                    if ((inSync == null || inSync.contains(n.id())) && !isr.contains(n.id()))
                        return d.name() + "-" + p.partition() + " isr " + ids(p.isr()) + " of replicas " + ids(p.replicas());
            }
        }
        System.out.println("healthy brokers=" + live + " topics=" + names.size() + " partitions=" + partitions);
        return null;
    }

    static String ids(List<Node> nodes) {
        StringBuilder sb = new StringBuilder("[");
        for (Node n : nodes) sb.append(sb.length() > 1 ? "," : "").append(n.id());
        return sb.append("]").toString();
    }

    static void leader() throws Exception {
        String topic = need("topic");
        int partition = Integer.parseInt(need("partition"));
        try (Admin a = admin()) {
            TopicDescription d = a.describeTopics(List.of(topic)).allTopicNames().get(15, TimeUnit.SECONDS).get(topic);
            for (TopicPartitionInfo p : d.partitions())
                if (p.partition() == partition) {
                    if (p.leader() == null) fail(topic + "-" + partition + " has no leader");
                    System.out.println(p.leader().id());
                    return;
                }
        }
        fail(topic + " has no partition " + partition);
    }

    static void committed() throws Exception {
        TopicPartition tp = new TopicPartition(need("topic"), Integer.parseInt(need("partition")));
        try (Admin a = admin()) {
            Map<TopicPartition, org.apache.kafka.clients.consumer.OffsetAndMetadata> m =
                a.listConsumerGroupOffsets(need("group")).partitionsToOffsetAndMetadata()
                    .get(15, TimeUnit.SECONDS);
            org.apache.kafka.clients.consumer.OffsetAndMetadata o = m.get(tp);
            System.out.println(o == null ? -1 : o.offset());
        }
    }

    static int storageFormat(String[] args) throws Exception {
        List<String> configs = new ArrayList<>(), rest = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--config") && i + 1 < args.length) configs.add(args[++i]);
            else rest.add(args[i]);
        }
        // kafka.tools.StorageTool.execute(String[], PrintStream): what its main() runs, without
        // the exit. Called by reflection: this file compiles against kafka-clients alone.
        java.lang.reflect.Method execute = Class.forName("kafka.tools.StorageTool")
            .getMethod("execute", String[].class, java.io.PrintStream.class);
        for (String config : configs) {
            List<String> a = new ArrayList<>(List.of("format", "--config", config));
            a.addAll(rest);
            int rc = (Integer) execute.invoke(null, a.toArray(new String[0]), System.out);
            if (rc != 0) {
                System.err.println("KafkaVerify: kafka-storage format --config " + config + " exited " + rc);
                return rc;
            }
        }
        return 0;
    }

    static int metadataSync() throws Exception {
        long deadline = System.currentTimeMillis() + Long.parseLong(opt("wait", "30")) * 1000;
        Set<Integer> want = new TreeSet<>();
        for (String b : need("brokers").split(","))
            if (!b.isBlank()) want.add(Integer.parseInt(b.trim()));
        try (Admin a = admin()) {
            QuorumInfo q = a.describeMetadataQuorum().quorumInfo().get(15, TimeUnit.SECONDS);
            long target = -1;
            for (QuorumInfo.ReplicaState r : q.voters())
                if (r.replicaId() == q.leaderId()) target = r.logEndOffset();
            String why = "";
            while (true) {
                Map<Integer, Long> at = new TreeMap<>();
                for (QuorumInfo.ReplicaState r : q.observers())
                    if (want.contains(r.replicaId())) at.put(r.replicaId(), r.logEndOffset());
                boolean done = at.keySet().containsAll(want);
                for (long off : at.values()) done &= off >= target;
                if (done) {
                    Thread.sleep(200);  // from fetched to applied
                    return 0;
                }
                why = "metadata log end offset " + target + ", brokers at " + at;
                if (System.currentTimeMillis() >= deadline) break;
                Thread.sleep(100);
                q = a.describeMetadataQuorum().quorumInfo().get(15, TimeUnit.SECONDS);
            }
            System.out.println("behind: " + why);
            return 1;
        }
    }

    static void offsets() throws Exception {
        String topic = need("topic");
        try (KafkaConsumer<byte[], byte[]> c = consumer()) {
            List<TopicPartition> tps = partitions(c, topic);
            Map<TopicPartition, Long> end = c.endOffsets(tps, Duration.ofSeconds(30));
            long sum = 0;
            StringBuilder sb = new StringBuilder();
            for (TopicPartition tp : tps) {
                sb.append(tp.partition()).append(':').append(end.get(tp)).append(' ');
                sum += end.get(tp);
            }
            System.out.println(sb.toString().trim());
            System.out.println("sum=" + sum);
        }
    }
}
