package dev.kvtransfer.registry;

import com.code_intelligence.jazzer.junit.FuzzTest;
import dev.kvtransfer.fuzz.Contract;
import org.junit.jupiter.api.AfterAll;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.time.Duration;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The registry's decoders of what other processes wrote: an etcd entry ({@code EtcdRegistry.decode}: the JSON
 * record and its seal, as any process that can write to etcd may have left it) and the signature header of every
 * signed HTTP call ({@code RegistryAuth.verify}). Neither ever throws: an entry that does not decode or is not
 * sealed with the secret is dropped (null, counted), a header that does not verify is a refusal with its reason.
 * Nothing the fuzzer writes is believed: it does not hold the secret.
 */
class RegistryRecordFuzzTest {
    private static final RegistryAuth AUTH = RegistryAuth.of(
            "fuzzing secret of thirty-two b..".getBytes(StandardCharsets.US_ASCII));
    private static EtcdRegistry etcd;
    private static Method decode;

    private static synchronized Method decode() throws ReflectiveOperationException {
        if (decode == null) {
            // No etcd is contacted: the client connects lazily, decode reads bytes only.
            etcd = EtcdRegistry.open("etcd://127.0.0.1:1", AUTH, Duration.ofSeconds(30));
            decode = EtcdRegistry.class.getDeclaredMethod("decode", byte[].class);
            decode.setAccessible(true);
        }
        return decode;
    }

    @AfterAll
    static void close() {
        if (etcd != null) {
            etcd.close();
            etcd = null;
        }
    }

    @FuzzTest(maxDuration = "10m")
    void etcdEntry(byte[] data) throws ReflectiveOperationException {
        Method m = decode();
        Object[] out = new Object[1];
        Throwable t = Contract.only(data.length, () -> {
            try {
                out[0] = m.invoke(etcd, (Object) data);
            } catch (InvocationTargetException e) {
                throw e.getCause();
            }
        });
        assertThat(t).as("decode never throws").isNull();
        assertThat(out[0]).as("nothing unsealed is believed").isNull();
    }

    @FuzzTest(maxDuration = "10m")
    void signatureHeader(byte[] data) {
        String header = new String(data, StandardCharsets.UTF_8);
        String[] why = new String[1];
        assertThat(Contract.only(data.length, () -> why[0] = AUTH.verify("POST", "/v1/registry/instances",
                new byte[] {1, 2, 3}, header))).isNull();
        assertThat(why[0]).as("refused, with a reason").isNotEmpty();
    }
}
