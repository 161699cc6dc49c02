// Consumer-group probe for the leader-epoch experiments of `segmirror promote`: the Java client's side of what
// tests/python/epoch_probe.py does for librdkafka. Run with Java's single-file source launcher against the Kafka
// jars of the harness (no build step):
//
//   java -cp '<kafka libs>/*' EpochProbe.java <bootstrap> <topic> <partition> <group> <max records> <timeout ms>
//        <isolation>
//
// One run is one consumer session of a group on one partition (classic group protocol, manual assignment): start
// at the group's committed offset (or the earliest offset), read up to <max records> records or to the end of the
// partition, commit the position after the last record read together with that record's leader epoch (what
// commitSync() does after poll()), and print one JSON line:
//
//   {"committed_before": {"offset": o, "leader_epoch": e|null}|null, "records": [[offset, epoch|null], ...],
//    "reached_end": bool, "timed_out": bool, "errors": ["..."], "committed_after": {...}|null}
//
// With `org.apache.kafka.clients.Metadata` logging at DEBUG (the harness's log4j2 file for this probe), stderr
// shows "Got metadata for an older epoch" when the client refuses the broker's metadata because it has seen a
// newer leader epoch in a committed offset: the refresh loop KIP-1279 describes.

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class EpochProbe {
    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
    }

    static String offsetJson(OffsetAndMetadata om) {
        if (om == null) {
            return "null";
        }
        Optional<Integer> epoch = om.leaderEpoch();
        return "{\"offset\":" + om.offset() + ",\"leader_epoch\":" + (epoch.isPresent() ? epoch.get() : "null") + "}";
    }

    public static void main(String[] args) {
        String bootstrap = args[0];
        TopicPartition tp = new TopicPartition(args[1], Integer.parseInt(args[2]));
        String group = args[3];
        int maxRecords = Integer.parseInt(args[4]);
        long timeoutMs = Long.parseLong(args[5]);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "earliest");
        props.put("isolation.level", args[6]);
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        List<String> errors = new ArrayList<>();
        List<String> records = new ArrayList<>();
        boolean reachedEnd = false;
        boolean timedOut = false;
        String before = "null";
        String after = "null";
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            before = offsetJson(consumer.committed(Set.of(tp), Duration.ofSeconds(10)).get(tp));
            consumer.assign(List.of(tp));
            long deadline = System.currentTimeMillis() + timeoutMs;
            Long end = null;
            ConsumerRecord<byte[], byte[]> last = null;
            while (records.size() < maxRecords) {
                if (System.currentTimeMillis() > deadline) {
                    timedOut = true;
                    break;
                }
                if (end == null) {
                    try {
                        end = consumer.endOffsets(Set.of(tp), Duration.ofSeconds(2)).get(tp);
                    } catch (RuntimeException e) {
                        // Leader unknown: retried on the next round.
                    }
                }
                try {
                    if (end != null && consumer.position(tp, Duration.ofSeconds(2)) >= end) {
                        reachedEnd = true;
                        break;
                    }
                } catch (RuntimeException e) {
                    // No position yet (the committed offset is still being validated): poll on.
                }
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    if (records.size() >= maxRecords) {
                        break;
                    }
                    Optional<Integer> epoch = r.leaderEpoch();
                    records.add("[" + r.offset() + "," + (epoch.isPresent() ? epoch.get() : "null") + "]");
                    last = r;
                }
            }
            if (last != null) {
                OffsetAndMetadata next = new OffsetAndMetadata(last.offset() + 1, last.leaderEpoch(), "");
                consumer.commitSync(Map.of(tp, next), Duration.ofSeconds(10));
            }
            after = offsetJson(consumer.committed(Set.of(tp), Duration.ofSeconds(10)).get(tp));
        } catch (RuntimeException e) {
            errors.add(e.toString());
        }
        List<String> quoted = new ArrayList<>();
        for (String e : errors) {
            quoted.add(quote(e));
        }
        System.out.println("{\"committed_before\":" + before + ",\"records\":[" + String.join(",", records)
                + "],\"reached_end\":" + reachedEnd + ",\"timed_out\":" + timedOut + ",\"errors\":["
                + String.join(",", quoted) + "],\"committed_after\":" + after + "}");
    }
}
