/*
 * Reads a topic with Kafka's own Java KafkaConsumer and prints one line per record:
 * "<partition> <offset> <sha-256 of key, value and headers>", for the tests to compare what a
 * Java client reads through tierproxy with what it reads directly from the broker.
 *
 * Run as a single-file source program against the embedded Kafka jars:
 *   java -cp '.kafka/<version>/libs/*' tests/java/RecordDigest.java \
 *       <bootstrap> <topic> <records> <read_committed|read_uncommitted> \
 *       <assign|classic|consumer|share> [<share group> [pause]]
 *   or, for "assign": ... assign [max.partition.fetch.bytes [pause ms after each poll]]
 *
 * "assign" reads every partition from the beginning to its end offset without a group
 * (<records> is not used). "classic" and "consumer"
 * (KIP-848) read in a consumer group with a commit after every poll, and change the group in
 * the middle: a first member reads a third of the records, commits and leaves (a member
 * restart), then two members share the rest (a rebalance). A record delivered again after a
 * failed commit is printed again; the line "commit-failed" says that one happened.
 *
 * "share" reads in the share group given as a sixth argument (KIP-932, KafkaShareConsumer)
 * until it has seen <records> records; the group starts at the earliest offset (the group
 * configs share.auto.offset.reset and share.isolation.level are set through the Admin client
 * first) and every record is accepted (implicit acknowledgement, committed after every poll).
 * With a seventh argument "pause", after a third and after two thirds of the records it prints
 * "paused <seen>" and waits for a line on its standard input, for a test to change the cluster
 * (move a partition's leader) at a known point. A record whose acquisition lock ran out
 * meanwhile is delivered again and printed again, as share groups do.
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class RecordDigest {
    private static final Duration POLL = Duration.ofMillis(200);
    private static final long DEADLINE_MS = 120_000;

    private RecordDigest() {}

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        long records = Long.parseLong(args[2]);
        String isolation = args[3];
        String mode = args[4];
        // Optional: max.partition.fetch.bytes (small, for many Fetches in one fetch session).
        String fetchBytes = args.length > 5 ? args[5] : null;
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        Set<String> seen = new HashSet<>();
        if (mode.equals("assign")) {
            // Optional: milliseconds to pause after each poll (a slow reader, so that a test
            // can break its proxy mid-read).
            long pauseMs = args.length > 6 ? Long.parseLong(args[6]) : 0;
            readAssigned(bootstrap, topic, isolation, fetchBytes, pauseMs, deadline, seen);
        } else if (mode.equals("share")) {
            boolean pause = args.length > 6 && args[6].equals("pause");
            readInShareGroup(bootstrap, topic, records, isolation, args[5], pause, seen);
        } else {
            readInGroup(bootstrap, topic, records, isolation, mode, deadline, seen);
        }
        System.out.println("done " + seen.size());
    }

    private static Properties config(String bootstrap, String isolation) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("isolation.level", isolation);
        props.put("auto.offset.reset", "earliest");
        props.put("enable.auto.commit", "false");
        props.put("max.poll.records", "50");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        return props;
    }

    private static void readAssigned(
            String bootstrap, String topic, String isolation, String fetchBytes, long pauseMs,
            long deadline, Set<String> seen) throws Exception {
        Properties props = config(bootstrap, isolation);
        if (fetchBytes != null) {
            props.put("max.partition.fetch.bytes", fetchBytes);
        }
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> partitions = consumer.partitionsFor(topic).stream()
                    .map(info -> new TopicPartition(topic, info.partition()))
                    .collect(Collectors.toList());
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> ends = consumer.endOffsets(partitions);
            while (System.currentTimeMillis() < deadline) {
                print(consumer.poll(POLL), seen);
                Thread.sleep(pauseMs);
                boolean done = true;
                for (TopicPartition partition : partitions) {
                    done &= consumer.position(partition) >= ends.get(partition);
                }
                if (done) {
                    return;
                }
            }
        }
    }

    private static void readInGroup(
            String bootstrap, String topic, long records, String isolation, String protocol,
            long deadline, Set<String> seen) throws Exception {
        Properties props = config(bootstrap, isolation);
        props.put("group.id", "record-digest-" + UUID.randomUUID());
        props.put("group.protocol", protocol);
        if (protocol.equals("classic")) {
            props.put("session.timeout.ms", "6000");
            props.put("heartbeat.interval.ms", "500");
        }
        try (KafkaConsumer<byte[], byte[]> first = new KafkaConsumer<>(props)) {
            first.subscribe(List.of(topic));
            while (seen.size() < records / 3 && System.currentTimeMillis() < deadline) {
                pollAndCommit(first, seen);
            }
        }
        List<KafkaConsumer<byte[], byte[]>> members = new ArrayList<>();
        try {
            for (int i = 0; i < 2; i++) {
                KafkaConsumer<byte[], byte[]> member = new KafkaConsumer<>(props);
                member.subscribe(List.of(topic));
                members.add(member);
            }
            while (seen.size() < records && System.currentTimeMillis() < deadline) {
                for (KafkaConsumer<byte[], byte[]> member : members) {
                    pollAndCommit(member, seen);
                }
            }
        } finally {
            for (KafkaConsumer<byte[], byte[]> member : members) {
                member.close();
            }
        }
    }

    private static void readInShareGroup(
            String bootstrap, String topic, long records, String isolation, String group,
            boolean pause, Set<String> seen) throws Exception {
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            // By name: Kafka 3.9's clients, which compile this file too, have no GROUP type.
            ConfigResource resource =
                    new ConfigResource(ConfigResource.Type.valueOf("GROUP"), group);
            List<AlterConfigOp> configs = List.of(
                    new AlterConfigOp(
                            new ConfigEntry("share.auto.offset.reset", "earliest"),
                            AlterConfigOp.OpType.SET),
                    new AlterConfigOp(
                            new ConfigEntry("share.isolation.level", isolation),
                            AlterConfigOp.OpType.SET));
            admin.incrementalAlterConfigs(Map.of(resource, configs)).all().get();
        }
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        // At most 50 records per ShareFetch: many fetches, before and after each pause.
        props.put("share.acquire.mode", "record_limit");
        props.put("max.poll.records", "50");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        BufferedReader input = new BufferedReader(new InputStreamReader(System.in));
        List<Long> pauses = new ArrayList<>();
        if (pause) {
            pauses.addAll(List.of(records / 3, 2 * records / 3));
        }
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            while (seen.size() < records && System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(POLL);
                print(batch, seen);
                if (!batch.isEmpty()) {
                    consumer.commitSync();
                }
                if (!pauses.isEmpty() && seen.size() >= pauses.get(0)) {
                    pauses.remove(0);
                    System.out.println("paused " + seen.size());
                    System.out.flush();
                    input.readLine();
                    deadline = System.currentTimeMillis() + DEADLINE_MS;
                }
            }
            consumer.commitSync();
        }
    }

    private static void pollAndCommit(KafkaConsumer<byte[], byte[]> consumer, Set<String> seen)
            throws Exception {
        ConsumerRecords<byte[], byte[]> batch = consumer.poll(POLL);
        print(batch, seen);
        if (!batch.isEmpty()) {
            try {
                consumer.commitSync();
            } catch (KafkaException e) { // CommitFailedException, a rebalance in between
                System.out.println("commit-failed " + e.getClass().getSimpleName());
            }
        }
    }

    /** Prints every record of ``batch``; ``seen`` collects their partitions and offsets. */
    private static void print(ConsumerRecords<byte[], byte[]> batch, Set<String> seen)
            throws Exception {
        for (ConsumerRecord<byte[], byte[]> record : batch) {
            System.out.println(record.partition() + " " + record.offset() + " " + digest(record));
            seen.add(record.partition() + " " + record.offset());
        }
        System.out.flush();
    }

    private static String digest(ConsumerRecord<byte[], byte[]> record) throws Exception {
        MessageDigest sha = MessageDigest.getInstance("SHA-256");
        field(sha, record.key());
        field(sha, record.value());
        for (Header header : record.headers()) {
            field(sha, header.key().getBytes(StandardCharsets.UTF_8));
            field(sha, header.value());
        }
        return HexFormat.of().formatHex(sha.digest());
    }

    /** A length prefix (-1 for null) keeps null, empty and adjacent fields apart. */
    private static void field(MessageDigest sha, byte[] bytes) {
        sha.update(ByteBuffer.allocate(4).putInt(bytes == null ? -1 : bytes.length).array());
        if (bytes != null) {
            sha.update(bytes);
        }
    }
}
