/*
 * rma_probe: what Open MPI's RMA does here, for backend-mpi's README (run with mpirun -np 2; -np 1 shows that a
 * one-process world gets no dynamic window). Rank 1 attaches 16 MiB to a dynamic window and then sleeps outside
 * MPI for 4 s; rank 0 meanwhile puts 10 x 16 MiB (+ flush each) and does 10 MPI_Fetch_and_op (+ flush each), and
 * prints how long each took: puts complete without the target's progress (single copy by the origin), the
 * atomics wait until the target calls MPI again.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Win win;
    int rc = MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    if (rc != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING];
        int len;
        MPI_Error_string(rc, text, &len);
        printf("RMA_PROBE rank %d of %d: MPI_Win_create_dynamic failed: %s\n", rank, size, text);
        MPI_Finalize();
        return 0;
    }
    if (size < 2) {
        printf("RMA_PROBE window created; run with -np 2 for the timings\n");
        MPI_Win_free(&win);
        MPI_Finalize();
        return 0;
    }
    size_t n = 16 << 20;
    char *buf = aligned_alloc(4096, n);
    int64_t *word = aligned_alloc(4096, 4096);
    memset(buf, 0, n);
    memset(word, 0, 4096);
    MPI_Win_attach(win, word, 4096);
    if (rank == 1) {
        MPI_Win_attach(win, buf, n);
    }
    MPI_Aint bufs[2], words[2], mine;
    MPI_Get_address(buf, &mine);
    MPI_Allgather(&mine, 1, MPI_AINT, bufs, 1, MPI_AINT, MPI_COMM_WORLD);
    MPI_Get_address(word, &mine);
    MPI_Allgather(&mine, 1, MPI_AINT, words, 1, MPI_AINT, MPI_COMM_WORLD);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
    int64_t one = 1, old;
    char *src = malloc(n);
    memset(src, 7, n);
    if (rank == 0) { /* warm both paths while the target is in MPI */
        MPI_Put(src, 64, MPI_BYTE, 1, bufs[1], 64, MPI_BYTE, win);
        MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 1, words[1], MPI_SUM, win);
        MPI_Win_flush(1, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        double t0 = MPI_Wtime();
        for (int k = 0; k < 10; k++) {
            MPI_Put(src, (int) n, MPI_BYTE, 1, bufs[1], (int) n, MPI_BYTE, win);
            MPI_Win_flush(1, win);
        }
        double puts = MPI_Wtime() - t0;
        t0 = MPI_Wtime();
        for (int k = 0; k < 10; k++) {
            MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 1, words[1], MPI_SUM, win);
            MPI_Win_flush(1, win);
        }
        double atomics = MPI_Wtime() - t0;
        printf("RMA_PROBE target asleep outside MPI for 4 s: 10 x 16 MiB MPI_Put+flush %.3f s (%.2f GB/s), "
               "10 MPI_Fetch_and_op+flush %.3f s\n", puts, 10.0 * n / puts / 1e9, atomics);
    } else {
        sleep(4);
    }
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);
    MPI_Finalize();
    return 0;
}
