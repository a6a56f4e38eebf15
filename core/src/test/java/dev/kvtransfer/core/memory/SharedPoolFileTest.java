package dev.kvtransfer.core.memory;

import dev.kvtransfer.api.memory.MemoryBuffer;
import dev.kvtransfer.api.memory.MemoryKind;
import dev.kvtransfer.api.memory.SharedMappings;
import org.junit.jupiter.api.Test;

import java.io.RandomAccessFile;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;

import static org.assertj.core.api.Assertions.assertThat;

/** KV pools in shared files: owner-only, really shared (a second mapping sees the bytes), gone after close. */
class SharedPoolFileTest {
    @Test
    void aSharedPoolIsAnOwnerOnlyFileASecondMappingSeesAndCloseDeletes() throws Exception {
        try (HostBufferManager m = new HostBufferManager(false, true)) {
            MemoryBuffer pool = m.allocatePool(3 << 20, MemoryKind.HOST);
            SharedMappings.Mapping where = SharedMappings.find(pool.address() + 4096, 8192);
            assertThat(where).isNotNull();
            Path file = Path.of(where.file());
            assertThat(PosixFilePermissions.toString(Files.getPosixFilePermissions(file))).isEqualTo("rw-------");
            assertThat(Files.size(file)).isEqualTo(3 << 20);
            for (int i = 0; i < (3 << 20) / 8; i++) {
                pool.asByteBuffer().order(ByteOrder.LITTLE_ENDIAN).putLong(i * 8, i * 0x9E3779B97F4A7C15L);
            }
            try (RandomAccessFile f = new RandomAccessFile(file.toFile(), "r")) {
                MappedByteBuffer other = f.getChannel().map(FileChannel.MapMode.READ_ONLY, 0, 3 << 20);
                other.order(ByteOrder.LITTLE_ENDIAN);
                for (int i = 0; i < (3 << 20) / 8; i++) {
                    assertThat(other.getLong(i * 8)).isEqualTo(i * 0x9E3779B97F4A7C15L);
                }
                MemoryAccess.unmap(other);
            }
            assertThat(m.outstandingBuffers()).isEqualTo(1);
            pool.close();
            assertThat(file).doesNotExist();
            assertThat(SharedMappings.find(where.address(), 1)).isNull();
        }
    }

    @Test
    void turnedOffAPoolIsPrivateMemory() {
        try (HostBufferManager m = new HostBufferManager(false, false)) {
            MemoryBuffer pool = m.allocatePool(1 << 20, MemoryKind.HOST);
            assertThat(m.sharesPools()).isFalse();
            assertThat(SharedMappings.find(pool.address(), pool.size())).isNull();
            pool.close();
        }
    }
}
