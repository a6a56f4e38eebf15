package dev.kvtransfer.fuzz;

import dev.kvtransfer.api.model.CacheState;
import dev.kvtransfer.api.model.CommState;
import dev.kvtransfer.api.model.ContextPhaseParams;
import dev.kvtransfer.api.model.RequestInfo;
import dev.kvtransfer.api.model.TransceiverState;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/**
 * Writes the valid messages the targets start from (their first seeds) under {@code src/test/resources}:
 * {@code java <jvm flags> -cp <test class path> dev.kvtransfer.fuzz.SeedWriter fuzz/src/test/resources}.
 * Inputs of crashes found stay beside them, named after what they broke ({@code crash-<what>}).
 */
public final class SeedWriter {
    private SeedWriter() {
    }

    /** @return a small valid cache state */
    public static CacheState cacheState() {
        return CacheState.builder().uniformKvHeads(4, 8).sizePerHead(64).tokensPerBlock(16).tensorParallelism(2)
                .build();
    }

    /** @return a valid transceiver state of two ranks */
    public static TransceiverState transceiverState() {
        return new TransceiverState(cacheState(), new CommState("aeron", List.of("aeron:127.0.0.1:40123#1a2b",
                "aeron:127.0.0.1:40124#3c4d"), 1));
    }

    /** @return a valid request info echoing the checksum of its params' tokens */
    public static RequestInfo tokensChecksumInfo() {
        return new RequestInfo(42, 2, new long[] {7, 8}, transceiverState(), 2048, 0, 0, new long[0],
                new int[] {3, 4, 5}, new byte[16], new byte[16], 1234L, RequestInfo.FLAG_TOKENS_CHECKSUM, 1,
                List.of(), 0x40d7eae7);
    }

    /** @return a valid MLA cache state with an FP4 indexer-K cache */
    public static CacheState fp4IndexerState() {
        return CacheState.builder().uniformKvHeads(4, 1).sizePerHead(576).tokensPerBlock(64)
                .attentionType(dev.kvtransfer.api.model.AttentionType.MLA).indexerKCache(132, 128, true).build();
    }

    /** @return a valid request info */
    public static RequestInfo requestInfo() {
        return new RequestInfo(42, 2, new long[] {7, 8}, transceiverState(), 2048, 65536, 1, new long[] {99},
                new int[] {3, 4, 5}, new byte[16], new byte[16], 1234L, RequestInfo.FLAG_PART_CHECKSUMS, 2,
                List.of());
    }

    /**
     * @param args the resources directory
     * @throws IOException when a seed cannot be written
     */
    public static void main(String[] args) throws IOException {
        Path root = Path.of(args[0]);
        String api = "dev/kvtransfer/api/model/ApiWireFuzzTestInputs/";
        write(root.resolve(api + "requestInfo/valid"), requestInfo().toBytes());
        write(root.resolve(api + "requestInfoInPlace/valid"), requestInfo().toBytes());
        write(root.resolve(api + "cacheState/valid"), cacheState().toBytes());
        write(root.resolve(api + "commState/valid"), transceiverState().commState().toBytes());
        write(root.resolve(api + "transceiverState/valid"), transceiverState().toBytes());
        write(root.resolve(api + "contextPhaseParams/valid"), new ContextPhaseParams(42, new long[] {1, 2, 3},
                transceiverState(), new byte[ContextPhaseParams.TOKEN_BYTES]).toBytes());
        // Format version 4: partial reuse, a last block key and draft tokens (the seeds above stay as written).
        CacheState partial = cacheState().toBuilder().blockReuse(true).partialReuse(true).build();
        TransceiverState partialState = new TransceiverState(partial, transceiverState().commState());
        write(root.resolve(api + "cacheState/valid-v4"), partial.toBytes());
        write(root.resolve(api + "requestInfo/valid-v4"), new RequestInfo(42, 2, new long[] {1, 7, 4242},
                partialState, 2048, 0, 1, new long[] {99}, new int[] {3, 4, 5}, new byte[0], new byte[0], 1234L,
                RequestInfo.FLAG_PARTIAL_REUSE, 1, List.of()).toBytes());
        write(root.resolve(api + "contextPhaseParams/valid-v4"), new ContextPhaseParams(42, new long[] {1},
                partialState, new byte[0], new long[] {5, 6, 7}).toBytes());
        // Version 4 additions without a new version: an echoed tokens checksum, an FP4 indexer-K cache.
        write(root.resolve(api + "requestInfo/valid-tokens-checksum"), tokensChecksumInfo().toBytes());
        write(root.resolve(api + "cacheState/valid-fp4"), fp4IndexerState().toBytes());
        for (var e : journalRecords().entrySet()) {
            write(root.resolve("dev/kvtransfer/core/journal/JournalDecodeFuzzTestInputs/record/" + e.getKey()),
                    e.getValue());
        }
        String jf = "dev/kvtransfer/core/journal/JournalFileFuzzTestInputs/journalFile/";
        write(root.resolve(jf + "pristine"), new byte[4]);
        write(root.resolve(jf + "flipped-bytes"), new byte[] {0, 0, 0, 0, 0x2c, 0x01, 0x10, 0x40, 0x02, (byte) 0x80});
        write(root.resolve(jf + "cut-short"), new byte[] {(byte) 0xe8, 0x03, 0, 0});
        dev.kvtransfer.ucx.UcxSeeds.write(root);
        String http = "dev/kvtransfer/cli/HttpEndpointsFuzzTestInputs/";
        byte[] rec = ("{\"id\":\"ctx-a0\",\"role\":\"context\",\"incarnation\":5,\"backend\":\"aeron\","
                + "\"mode\":\"pull\",\"parallelism\":\"TP2\",\"cacheState\":\""
                + java.util.Base64.getEncoder().encodeToString(cacheState().toBytes())
                + "\",\"transportAddresses\":[\"a\"],\"controlUrl\":\"http://127.0.0.1:1\",\"load\":0}")
                .getBytes(java.nio.charset.StandardCharsets.UTF_8);
        write(root.resolve(http + "routerEndpoint/register"), concat(new byte[] {1, 1, 0}, rec));
        String reg = "dev/kvtransfer/registry/RegistryRecordFuzzTestInputs/";
        write(root.resolve(reg + "etcdEntry/sealed-with-another-secret"), concat(concat(
                "{\"record\":".getBytes(java.nio.charset.StandardCharsets.UTF_8), rec),
                (",\"mac\":\"" + "ab".repeat(32) + "\"}").getBytes(java.nio.charset.StandardCharsets.UTF_8)));
        write(root.resolve(reg + "signatureHeader/kvt1"), dev.kvtransfer.registry.RegistryAuth.of(new byte[32])
                .sign("POST", "/v1/registry/instances", new byte[] {1, 2, 3})
                .getBytes(java.nio.charset.StandardCharsets.UTF_8));
        write(root.resolve(http + "routerEndpoint/heartbeat"), concat(new byte[] {1, 1, 1},
                "{\"incarnation\":5,\"load\":1}".getBytes(java.nio.charset.StandardCharsets.UTF_8)));
        write(root.resolve(http + "routerEndpoint/list"), new byte[] {1, 0, 0});
        write(root.resolve(http + "routerEndpoint/raw"), concat(new byte[] {0},
                "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n".getBytes(java.nio.charset.StandardCharsets.UTF_8)));
        write(root.resolve(http + "metricsEndpoint/scrape"), concat(new byte[] {0},
                "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".getBytes(java.nio.charset.StandardCharsets.UTF_8)));
        write(root.resolve(http + "metricsEndpoint/head"), new byte[] {1, 4, 5});
        dev.kvtransfer.aeron.AeronSeeds.write(root);
    }

    /** @return journal records as {@code ChronicleTransferJournal} writes them (fields after the header) */
    static java.util.Map<String, byte[]> journalRecords() {
        java.util.Map<String, byte[]> out = new java.util.LinkedHashMap<>();
        byte[] state = cacheState().toBytes();
        net.openhft.chronicle.bytes.Bytes<?> b = net.openhft.chronicle.bytes.Bytes.allocateElasticOnHeap(256);
        b.writeUnsignedByte(1).writeUnsignedByte(2).writeLong(5).writeLong(6).writeInt(2);
        b.writeUtf8("ctx-a0").writeInt(0).writeLong(123).writeUtf8("host-a").writeBoolean(true);
        b.writeInt(state.length).write(state);
        out.put("opened", b.toByteArray());
        b = net.openhft.chronicle.bytes.Bytes.allocateElasticOnHeap(256);
        b.writeUnsignedByte(2).writeUnsignedByte(2).writeLong(5).writeLong(6).writeUnsignedByte(0).writeLong(42)
                .writeInt(1).writeInt(state.length).write(state).writeInt(state.length).write(state)
                .writeUtf8("aeron").writeInt(2).writeUtf8("aeron:127.0.0.1:1#1").writeUtf8("aeron:127.0.0.1:2#2");
        out.put("peer-contact", b.toByteArray());
        b = net.openhft.chronicle.bytes.Bytes.allocateElasticOnHeap(64);
        b.writeUnsignedByte(9).writeUnsignedByte(2).writeLong(5).writeLong(6).writeLong(42).writeInt(1)
                .writeLong(0).writeLong(4096).writeLong(77);
        out.put("part-received", b.toByteArray());
        b = net.openhft.chronicle.bytes.Bytes.allocateElasticOnHeap(64);
        b.writeUnsignedByte(11).writeUnsignedByte(2).writeLong(5).writeLong(6).writeUnsignedByte(1).writeLong(42)
                .writeUtf8("TIMEOUT").writeUtf8("no answer");
        out.put("failed", b.toByteArray());
        return out;
    }

    static byte[] concat(byte[] a, byte[] b) {
        byte[] c = java.util.Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, c, a.length, b.length);
        return c;
    }

    static void write(Path file, byte[] bytes) throws IOException {
        Files.createDirectories(file.getParent());
        Files.write(file, bytes);
    }
}
