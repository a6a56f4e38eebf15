package dev.kvtransfer.cli;

import dev.kvtransfer.core.TransceiverConfig;
import dev.kvtransfer.registry.RegistryAuth;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermission;
import java.util.Map;
import java.util.Set;

/**
 * The deployment secret of {@code serve} and {@code route}: one file every process of the deployment reads (the
 * transports' HMAC and the HTTP control plane's, derived separately). A file that others can read is refused,
 * since whoever reads it can join the deployment: create it with {@code umask 077; head -c 32 /dev/urandom >
 * FILE} and copy it with its mode ({@code scp -p}, {@code install -m 600}).
 */
final class DeploymentSecret {
    private DeploymentSecret() {
    }

    /**
     * Resolves the secret for a command: {@code --secret-file}, else {@code kvtransfer.authSecretFile}; authentication
     * off ({@code --set kvtransfer.auth=off}) needs none and signs nothing.
     *
     * @param command    the command, for messages
     * @param file       {@code --secret-file}, or null
     * @param properties the transceiver properties ({@code --set}); the file is recorded there for the transports
     * @return the HTTP control plane's authenticator
     */
    static RegistryAuth resolve(String command, Path file, Map<String, String> properties) {
        if ("off".equalsIgnoreCase(properties.get(TransceiverConfig.P_AUTH))) {
            if (file != null) {
                throw new IllegalArgumentException(command + ": --secret-file with " + TransceiverConfig.P_AUTH
                        + "=off: pick one");
            }
            return RegistryAuth.OFF;
        }
        Path f = file;
        if (f == null && properties.get(TransceiverConfig.P_AUTH_SECRET_FILE) != null) {
            f = Path.of(properties.get(TransceiverConfig.P_AUTH_SECRET_FILE));
        }
        if (f == null) {
            throw new IllegalArgumentException(command + " needs the deployment secret: --secret-file FILE (create it "
                    + "once with 'umask 077; head -c 32 /dev/urandom > FILE' and copy it to every machine with mode "
                    + "600), or --set " + TransceiverConfig.P_AUTH + "=off on a trusted network");
        }
        f = f.toAbsolutePath();
        try {
            Set<PosixFilePermission> perms = Files.getPosixFilePermissions(f);
            if (perms.contains(PosixFilePermission.GROUP_READ) || perms.contains(PosixFilePermission.OTHERS_READ)
                    || perms.contains(PosixFilePermission.GROUP_WRITE)
                    || perms.contains(PosixFilePermission.OTHERS_WRITE)) {
                throw new IllegalArgumentException("--secret-file " + f + " is readable or writable by others (mode "
                        + java.nio.file.attribute.PosixFilePermissions.toString(perms) + "): chmod 600 " + f);
            }
            byte[] secret = Files.readAllBytes(f);
            if (secret.length < 16) {
                throw new IllegalArgumentException("--secret-file " + f + " holds " + secret.length
                        + " bytes, a secret needs at least 16");
            }
            properties.put(TransceiverConfig.P_AUTH_SECRET_FILE, f.toString());
            return RegistryAuth.of(secret);
        } catch (java.nio.file.NoSuchFileException e) {
            throw new IllegalArgumentException("--secret-file " + f + " does not exist");
        } catch (UnsupportedOperationException e) {
            throw new IllegalArgumentException("--secret-file " + f + ": its file system has no POSIX modes");
        } catch (IOException e) {
            throw new UncheckedIOException("--secret-file " + f + ": cannot read it", e);
        }
    }
}
