/*
 * Produces with Kafka's own Java KafkaProducer at a steady rate until its standard input
 * ends, then flushes and prints "sent <n> acked <n> errors <n>" and the first errors, for the
 * tests that restart proxies under a running producer. The producer keeps Kafka's defaults
 * (acks=all, retries until delivery.timeout.ms, idempotence on): an error here is one the
 * application would see. Record i goes to partition i % partitions with the value "i".
 *
 * Run as a single-file source program against the embedded Kafka jars:
 *   java -cp '.kafka/<version>/libs/*' tests/java/SteadyProducer.java \
 *       <bootstrap> <topic> <partitions> <records per second>
 */

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class SteadyProducer {
    private SteadyProducer() {}

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        long perSecond = Long.parseLong(args[3]);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("linger.ms", "5");
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        AtomicLong acked = new AtomicLong();
        List<String> errors = Collections.synchronizedList(new ArrayList<>());
        Thread stdin = new Thread(() -> {
            try {
                while (System.in.read() >= 0) {
                    // the test closes our stdin to stop us
                }
            } catch (Exception e) {
                // treated as the end
            }
        });
        stdin.setDaemon(true);
        stdin.start();
        long sent = 0;
        long started = System.nanoTime();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            while (stdin.isAlive()) {
                long due = started + sent * 1_000_000_000L / perSecond;
                long wait = due - System.nanoTime();
                if (wait > 0) {
                    Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                }
                byte[] value = Long.toString(sent).getBytes(StandardCharsets.UTF_8);
                int partition = (int) (sent % partitions);
                producer.send(new ProducerRecord<>(topic, partition, null, value), (meta, err) -> {
                    if (err == null) {
                        acked.incrementAndGet();
                    } else {
                        errors.add(err.getClass().getSimpleName() + ": " + err.getMessage());
                    }
                });
                sent++;
            }
            producer.flush();
        }
        System.out.println("sent " + sent + " acked " + acked.get() + " errors " + errors.size());
        for (String error : errors.subList(0, Math.min(5, errors.size()))) {
            System.out.println("error " + error);
        }
    }
}
