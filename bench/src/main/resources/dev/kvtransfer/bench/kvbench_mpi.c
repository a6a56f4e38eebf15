/*
 * kvtransfer bench's raw MPI baseline: plain MPI_Send / MPI_Recv between ranks 0 and 1 of one mpirun job.
 * Usage: mpirun -np 2 kvbench_mpi <messageBytes> <warmupMessages> <messages> <warmupSamples> <samples>
 * Rank 0 prints, after a barrier:
 *   BW <messageBytes> <messages> <nanos>         streaming: rank 0 sends, rank 1 receives, one ack at the end
 *   LAT <samples> <rtt ns> <rtt ns> ...           round trips: rank 0 sends, rank 1 answers with the same size
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long) ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 6 || size < 2) {
        fprintf(stderr, "usage: mpirun -np 2 kvbench_mpi bytes warmup messages warmupSamples samples\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long bytes = atol(argv[1]);
    long warmup = atol(argv[2]);
    long messages = atol(argv[3]);
    long warmupSamples = atol(argv[4]);
    long samples = atol(argv[5]);
    if (bytes < 1 || bytes > 2147483647L || messages < 1 || samples < 1 || warmup < 0 || warmupSamples < 0) {
        fprintf(stderr, "kvbench_mpi: bad arguments\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char *buf = aligned_alloc(4096, (size_t) ((bytes + 4095) / 4096 * 4096));
    long long *rtt = malloc(sizeof(long long) * (size_t) samples);
    if (buf == NULL || rtt == NULL) {
        fprintf(stderr, "kvbench_mpi: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    memset(buf, rank + 1, (size_t) bytes);
    char ack = 0;
    if (rank < 2) {
        long long start = 0;
        MPI_Comm pair = MPI_COMM_WORLD;
        for (long i = 0; i < warmup + messages; i++) {
            if (i == warmup && rank == 0) {
                start = now_ns();
            }
            if (rank == 0) {
                MPI_Send(buf, (int) bytes, MPI_BYTE, 1, 7, pair);
            } else {
                MPI_Recv(buf, (int) bytes, MPI_BYTE, 0, 7, pair, MPI_STATUS_IGNORE);
            }
        }
        /* one ack so rank 0's clock covers the delivery of the last message */
        if (rank == 1) {
            MPI_Send(&ack, 1, MPI_BYTE, 0, 8, pair);
        } else {
            MPI_Recv(&ack, 1, MPI_BYTE, 1, 8, pair, MPI_STATUS_IGNORE);
            printf("BW %ld %ld %lld\n", bytes, messages, now_ns() - start);
            fflush(stdout);
        }
        for (long i = 0; i < warmupSamples + samples; i++) {
            if (rank == 0) {
                long long t0 = now_ns();
                MPI_Send(buf, (int) bytes, MPI_BYTE, 1, 9, pair);
                MPI_Recv(buf, (int) bytes, MPI_BYTE, 1, 10, pair, MPI_STATUS_IGNORE);
                if (i >= warmupSamples) {
                    rtt[i - warmupSamples] = now_ns() - t0;
                }
            } else {
                MPI_Recv(buf, (int) bytes, MPI_BYTE, 0, 9, pair, MPI_STATUS_IGNORE);
                MPI_Send(buf, (int) bytes, MPI_BYTE, 0, 10, pair);
            }
        }
        if (rank == 0) {
            printf("LAT %ld", samples);
            for (long i = 0; i < samples; i++) {
                printf(" %lld", rtt[i]);
            }
            printf("\n");
            fflush(stdout);
        }
    }
    free(rtt);
    free(buf);
    MPI_Finalize();
    return 0;
}
