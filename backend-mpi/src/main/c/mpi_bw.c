/*
 * Plain MPI_Send/MPI_Recv bandwidth between ranks 0 and 1: the baseline backend-mpi's Connection is
 * compared with. Usage: mpirun -np 2 mpi_bw [messageBytes] [iterations] [warmup]
 * Prints one line: "C_MPI_BW bytes=<n> iters=<n> seconds=<s> GBps=<x>" (GB = 1e9 bytes), from rank 0.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long bytes = argc > 1 ? atol(argv[1]) : 16L << 20;
    int iters = argc > 2 ? atoi(argv[2]) : 200;
    int warmup = argc > 3 ? atoi(argv[3]) : 20;
    if (size < 2) {
        fprintf(stderr, "mpi_bw needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char *buf = aligned_alloc(4096, (size_t) ((bytes + 4095) / 4096 * 4096));
    memset(buf, rank + 1, (size_t) bytes);
    char ack = 0;
    double start = 0;
    for (int i = 0; i < warmup + iters; i++) {
        if (i == warmup) {
            MPI_Barrier(MPI_COMM_WORLD);
            start = MPI_Wtime();
        }
        if (rank == 0) {
            MPI_Send(buf, (int) bytes, MPI_BYTE, 1, 7, MPI_COMM_WORLD);
        } else if (rank == 1) {
            MPI_Recv(buf, (int) bytes, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
    }
    /* one ack so rank 0's clock covers the delivery of the last message */
    if (rank == 1) {
        MPI_Send(&ack, 1, MPI_BYTE, 0, 8, MPI_COMM_WORLD);
    } else if (rank == 0) {
        MPI_Recv(&ack, 1, MPI_BYTE, 1, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        double secs = MPI_Wtime() - start;
        printf("C_MPI_BW bytes=%ld iters=%d seconds=%.6f GBps=%.3f\n", bytes, iters, secs,
               (double) bytes * iters / secs / 1e9);
        fflush(stdout);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
