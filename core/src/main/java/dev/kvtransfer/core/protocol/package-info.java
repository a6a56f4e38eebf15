/**
 * The control protocol between a generation rank and a context rank, as flyweights over
 * {@code (ByteBuffer, offset)} in the style of {@code io.aeron.protocol}: each message type is one class that
 * wraps a buffer and reads or writes its fields in place (little-endian, absolute accessors only, no copy, no
 * allocation per message). Neither side owns this package: the context side ({@code CacheSender}) and the
 * generation side ({@code CacheReceiver}, {@code DefaultTransferSession}) encode and decode only through it.
 * The byte layout of every message is in {@code PROTOCOL.md} beside these classes; the decoders' checks are fuzzed
 * by {@code ProtocolFuzzTest}.
 */
package dev.kvtransfer.core.protocol;
