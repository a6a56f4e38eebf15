/*
 * kvmpi: the few MPI calls backend-mpi needs, bound through JNI (Debian's Open MPI ships no mpi.jar).
 *
 * Handles crossing into Java:
 *  - communicators: MPI_Comm_c2f integers (portable across MPI implementations);
 *  - requests (req_cell: the MPI_Request plus an eager send's private copy) and matched messages (an
 *    MPI_Message cell): malloc'd, passed as jlong, so no Fortran handle table is involved; a request cell is
 *    freed exactly once, when the request completes or is cancelled/released, a message cell when received;
 *  - payload: raw off-heap addresses (jlong); no JNI array copies on the data path.
 * Every call returns errors (MPI_ERRORS_RETURN on every communicator we hand out) and throws
 * dev.kvtransfer.mpi.MpiNative$MpiCallException(code, message) instead of aborting the job.
 */
#define _GNU_SOURCE
#include <jni.h>
#include <mpi.h>
#include <dlfcn.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dev_kvtransfer_mpi_MpiNative.h"

static jclass mpi_exception_class;
static jmethodID mpi_exception_ctor;
static jclass long_array_class;

static void throw_mpi(JNIEnv *env, int code, const char *what)
{
    char text[MPI_MAX_ERROR_STRING + 256];
    char mpi_text[MPI_MAX_ERROR_STRING];
    int len = 0;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (code != MPI_SUCCESS && !finalized && MPI_Error_string(code, mpi_text, &len) == MPI_SUCCESS) {
        mpi_text[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = '\0';
    } else {
        snprintf(mpi_text, sizeof mpi_text, "error %d", code);
    }
    snprintf(text, sizeof text, "%s: %s", what, mpi_text);
    jstring msg = (*env)->NewStringUTF(env, text);
    if (msg == NULL) {
        return; /* OutOfMemoryError pending */
    }
    jobject ex = (*env)->NewObject(env, mpi_exception_class, mpi_exception_ctor, (jint) code, msg);
    if (ex != NULL) {
        (*env)->Throw(env, (jthrowable) ex);
    }
}

static void throw_state(JNIEnv *env, const char *what)
{
    jclass c = (*env)->FindClass(env, "java/lang/IllegalStateException");
    if (c != NULL) {
        (*env)->ThrowNew(env, c, what);
    }
}

JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM *vm, void *reserved)
{
    (void) reserved;
    JNIEnv *env;
    if ((*vm)->GetEnv(vm, (void **) &env, JNI_VERSION_1_8) != JNI_OK) {
        return JNI_ERR;
    }
    /*
     * System.load opens us with RTLD_LOCAL, so libmpi (our dependency) is not in the global namespace, and
     * Open MPI's dlopen'ed MCA components, which expect libmpi/libopen-pal symbols to be global, fail to
     * load. Re-open libmpi RTLD_GLOBAL, as Open MPI's own Java bindings do.
     */
    Dl_info info;
    if (dladdr((void *) &MPI_Init_thread, &info) && info.dli_fname != NULL) {
        dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
    }
    jclass c = (*env)->FindClass(env, "dev/kvtransfer/mpi/MpiNative$MpiCallException");
    if (c == NULL) {
        return JNI_ERR;
    }
    mpi_exception_class = (*env)->NewGlobalRef(env, c);
    mpi_exception_ctor = (*env)->GetMethodID(env, c, "<init>", "(ILjava/lang/String;)V");
    jclass la = (*env)->FindClass(env, "[J");
    if (mpi_exception_ctor == NULL || la == NULL) {
        return JNI_ERR;
    }
    long_array_class = (*env)->NewGlobalRef(env, la);
    return JNI_VERSION_1_8;
}

/* A request handed to Java: the MPI request and, for an eager send, the private copy it sends from. */
typedef struct {
    MPI_Request req;
    void *bounce;
} req_cell;

static void cell_free(req_cell *cell)
{
    free(cell->bounce);
    free(cell);
}

static inline MPI_Comm comm_of(jint handle)
{
    return MPI_Comm_f2c((MPI_Fint) handle);
}

static inline int64_t now_nanos(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---------------------------------------------------------------- lifecycle */

JNIEXPORT jint JNICALL Java_dev_kvtransfer_mpi_MpiNative_initThread(JNIEnv *env, jclass cls, jint required)
{
    (void) cls;
    int initialized = 0, finalized = 0, provided = -1, rc;
    MPI_Finalized(&finalized);
    if (finalized) {
        throw_state(env, "MPI was already finalized in this process; it cannot be initialized again");
        return -1;
    }
    MPI_Initialized(&initialized);
    if (initialized) {
        rc = MPI_Query_thread(&provided);
    } else {
        rc = MPI_Init_thread(NULL, NULL, required, &provided);
    }
    if (rc != MPI_SUCCESS) {
        throw_mpi(env, rc, "MPI_Init_thread");
        return -1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    return provided;
}

JNIEXPORT jint JNICALL Java_dev_kvtransfer_mpi_MpiNative_threadMultiple(JNIEnv *env, jclass cls)
{
    (void) env; (void) cls;
    return MPI_THREAD_MULTIPLE;
}

JNIEXPORT void JNICALL Java_dev_kvtransfer_mpi_MpiNative_finalizeMpi(JNIEnv *env, jclass cls)
{
    (void) cls;
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) {
        int rc = MPI_Finalize();
        if (rc != MPI_SUCCESS) {
            throw_mpi(env, rc, "MPI_Finalize");
        }
    }
}

JNIEXPORT jboolean JNICALL Java_dev_kvtransfer_mpi_MpiNative_isFinalized(JNIEnv *env, jclass cls)
{
    (void) env; (void) cls;
    int finalized = 0;
    MPI_Finalized(&finalized);
    return finalized ? JNI_TRUE : JNI_FALSE;
}

JNIEXPORT jstring JNICALL Java_dev_kvtransfer_mpi_MpiNative_libraryVersion(JNIEnv *env, jclass cls)
{
    (void) cls;
    char text[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(text, &len) != MPI_SUCCESS) {
        return (*env)->NewStringUTF(env, "unknown");
    }
    text[len < MPI_MAX_LIBRARY_VERSION_STRING ? len : MPI_MAX_LIBRARY_VERSION_STRING - 1] = '\0';
    /* keep the first line only: Open MPI appends build details */
    char *nl = strchr(text, '\n');
    if (nl != NULL) {
        *nl = '\0';
    }
    return (*env)->NewStringUTF(env, text);
}

JNIEXPORT jint JNICALL Java_dev_kvtransfer_mpi_MpiNative_tagUpperBound(JNIEnv *env, jclass cls)
{
    (void) cls;
    void *value = NULL;
    int flag = 0;
    int rc = MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &flag);
    if (rc != MPI_SUCCESS) {
        throw_mpi(env, rc, "MPI_Comm_get_attr(MPI_TAG_UB)");
        return -1;
    }
    return flag ? (jint) *(int *) value : 32767;
}

/* ---------------------------------------------------------------- communicators */

JNIEXPORT jint JNICALL Java_dev_kvtransfer_mpi_MpiNative_commWorld(JNIEnv *env, jclass cls)
{
    (void) env; (void) cls;
    return (jint) MPI_Comm_c2f(MPI_COMM_WORLD);
}

JNIEXPORT jint JNICALL Java_dev_kvtransfer_mpi_MpiNative_commRank(JNIEnv *env, jclass cls, jint comm)
{
    (void) cls;
    int r = -1;
    int rc = MPI_Comm_rank(comm_of(comm), &r);
    if (rc != MPI_SUCCESS) {
        throw_mpi(env, rc, "MPI_Comm_rank");
    }
    return r;
}

JNIEXPORT jint JNICALL Java_dev_kvtransfer_mpi_MpiNative_commSize(JNIEnv *env, jclass cls, jint comm)
{
    (void) cls;
    int s = -1;
    int rc = MPI_Comm_size(comm_of(comm), &s);
    if (rc != MPI_SUCCESS) {
        throw_mpi(env, rc, "MPI_Comm_size");
    }
    return s;
}

JNIEXPORT jint JNICALL Java_dev_kvtransfer_mpi_MpiNative_commDup(JNIEnv *env, jclass cls, jint comm)
{
    (void) cls;
    MPI_Comm out;
    int rc = MPI_Comm_dup(comm_of(comm), &out);
    if (rc != MPI_SUCCESS) {
        throw_mpi(env, rc, "MPI_Comm_dup");
        return 0;
    }
    MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
    return (jint) MPI_Comm_c2f(out);
}

JNIEXPORT jint JNICALL Java_dev_kvtransfer_mpi_MpiNative_commSplit(JNIEnv *env, jclass cls, jint comm, jint color,
                                                                   jint key)
{
    (void) cls;
    MPI_Comm out;
    int rc = MPI_Comm_split(comm_of(comm), color < 0 ? MPI_UNDEFINED : color, key, &out);
    if (rc != MPI_SUCCESS) {
        throw_mpi(env, rc, "MPI_Comm_split");
        return 0;
    }
    if (out == MPI_COMM_NULL) {
        return (jint) MPI_Comm_c2f(MPI_COMM_NULL);
    }
    MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
    return (jint) MPI_Comm_c2f(out);
}

JNIEXPORT void JNICALL Java_dev_kvtransfer_mpi_MpiNative_commFree(JNIEnv *env, jclass cls, jint comm)
{
    (void) cls;
    MPI_Comm c = comm_of(comm);
    int rc = MPI_Comm_free(&c);
    if (rc != MPI_SUCCESS) {
        throw_mpi(env, rc, "MPI_Comm_free");
    }
}

/* ---------------------------------------------------------------- point to point */

/*
 * Starts a send. With copy != 0 the bytes are first copied into a private buffer (freed when the request
 * completes), so the caller's memory is free at once: that is how small control messages complete before the
 * peer posts its receive, whatever the BTL's own eager limit is.
 */
JNIEXPORT jlong JNICALL Java_dev_kvtransfer_mpi_MpiNative_isend(JNIEnv *env, jclass cls, jlong address, jint count,
                                                                jint dest, jint tag, jint comm, jboolean copy)
{
    (void) cls;
    req_cell *cell = calloc(1, sizeof(req_cell));
    if (cell == NULL) {
        throw_state(env, "out of native memory for an MPI request");
        return 0;
    }
    const void *from = (const void *) (intptr_t) address;
    if (copy) {
        cell->bounce = malloc(count > 0 ? (size_t) count : 1);
        if (cell->bounce == NULL) {
            free(cell);
            throw_state(env, "out of native memory for an eager send copy");
            return 0;
        }
        memcpy(cell->bounce, from, (size_t) count);
        from = cell->bounce;
    }
    int rc = MPI_Isend(from, count, MPI_BYTE, dest, tag, comm_of(comm), &cell->req);
    if (rc != MPI_SUCCESS) {
        cell_free(cell);
        throw_mpi(env, rc, "MPI_Isend");
        return 0;
    }
    return (jlong) (intptr_t) cell;
}

/*
 * Probes for a message of (source, tag) for up to spinNanos (0 = once) and, when one is there, takes it off
 * the matching queue (MPI_Improbe) so no other thread can receive it. out[0] = source rank, out[1] = byte
 * count. Returns the message cell, or 0 when nothing matched in time.
 */
JNIEXPORT jlong JNICALL Java_dev_kvtransfer_mpi_MpiNative_improbe(JNIEnv *env, jclass cls, jint source, jint tag,
                                                                  jint comm, jlongArray out, jlong spinNanos)
{
    (void) cls;
    int flag = 0;
    MPI_Message msg;
    MPI_Status status;
    MPI_Comm c = comm_of(comm);
    int src = source < 0 ? MPI_ANY_SOURCE : source;
    int64_t until = spinNanos > 0 ? now_nanos() + spinNanos : 0;
    unsigned polls = 0;
    for (;;) {
        int rc = MPI_Improbe(src, tag, c, &flag, &msg, &status);
        if (rc != MPI_SUCCESS) {
            throw_mpi(env, rc, "MPI_Improbe");
            return 0;
        }
        if (flag) {
            break;
        }
        if (spinNanos <= 0 || now_nanos() >= until) {
            return 0;
        }
        if ((++polls & 63) == 0) {
            sched_yield();
        }
    }
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    jlong values[2] = {status.MPI_SOURCE, count};
    (*env)->SetLongArrayRegion(env, out, 0, 2, values);
    MPI_Message *cell = malloc(sizeof(MPI_Message));
    if (cell == NULL) {
        throw_state(env, "out of native memory for an MPI message");
        return 0;
    }
    *cell = msg;
    return (jlong) (intptr_t) cell;
}

/* Starts receiving a matched message (always with its probed size: see MpiConnectionManager.discard). */
JNIEXPORT jlong JNICALL Java_dev_kvtransfer_mpi_MpiNative_imrecv(JNIEnv *env, jclass cls, jlong address, jint count,
                                                                 jlong message)
{
    (void) cls;
    MPI_Message *msg = (MPI_Message *) (intptr_t) message;
    req_cell *cell = calloc(1, sizeof(req_cell));
    if (cell == NULL) {
        throw_state(env, "out of native memory for an MPI request");
        return 0;
    }
    int rc = MPI_Imrecv((void *) (intptr_t) address, count, MPI_BYTE, msg, &cell->req);
    free(msg);
    if (rc != MPI_SUCCESS) {
        cell_free(cell);
        throw_mpi(env, rc, "MPI_Imrecv");
        return 0;
    }
    return (jlong) (intptr_t) cell;
}

/*
 * Polls a request for up to spinNanos (0 = one test). Returns 1 when it completed (the cell is freed), 0 when
 * still pending, 2 when it completed with MPI_ERR_TRUNCATE.
 */
JNIEXPORT jint JNICALL Java_dev_kvtransfer_mpi_MpiNative_test(JNIEnv *env, jclass cls, jlong request, jlong spinNanos)
{
    (void) cls;
    req_cell *cell = (req_cell *) (intptr_t) request;
    MPI_Request *req = &cell->req;
    int64_t until = spinNanos > 0 ? now_nanos() + spinNanos : 0;
    unsigned polls = 0;
    for (;;) {
        int flag = 0;
        MPI_Status status;
        status.MPI_ERROR = MPI_SUCCESS;
        int rc = MPI_Test(req, &flag, &status);
        if (rc != MPI_SUCCESS) {
            int err_class = rc;
            MPI_Error_class(rc, &err_class);
            /* an erroneous request completes (and is deallocated by MPI) */
            cell_free(cell);
            if (err_class == MPI_ERR_TRUNCATE) {
                return 2;
            }
            throw_mpi(env, rc, "MPI_Test");
            return -1;
        }
        if (flag) {
            cell_free(cell);
            return 1;
        }
        if (spinNanos <= 0 || now_nanos() >= until) {
            return 0;
        }
        /* give the core away now and then: ranks are often oversubscribed (more ranks than cores) */
        if ((++polls & 63) == 0) {
            sched_yield();
        }
    }
}

/*
 * Cancels a pending request and waits up to waitNanos for the cancel to complete. If it does not complete
 * (Open MPI cannot cancel a send that was already matched or is in flight), the request is released with
 * MPI_Request_free: MPI finishes it in the background. Returns 1 when completed/cancelled, 0 when released.
 */
JNIEXPORT jint JNICALL Java_dev_kvtransfer_mpi_MpiNative_cancel(JNIEnv *env, jclass cls, jlong request, jlong waitNanos)
{
    (void) env; (void) cls;
    req_cell *cell = (req_cell *) (intptr_t) request;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) {
        cell_free(cell);
        return 0;
    }
    MPI_Cancel(&cell->req);
    int64_t until = now_nanos() + waitNanos;
    for (;;) {
        int flag = 0;
        MPI_Status status;
        MPI_Test(&cell->req, &flag, &status);
        if (flag) {
            cell_free(cell);
            return 1;
        }
        if (now_nanos() >= until) {
            break;
        }
        sched_yield();
    }
    /* MPI may still read an eager copy: it is left allocated (small, and only on close or timeout) */
    MPI_Request_free(&cell->req);
    free(cell);
    return 0;
}

/*
 * Releases a request without waiting (MPI_Request_free): MPI completes it in the background. Used for eager
 * sends still pending at close: their messages were handed over, so they are not cancelled. The eager copy
 * stays allocated, since MPI may still read it.
 */
JNIEXPORT void JNICALL Java_dev_kvtransfer_mpi_MpiNative_requestFree(JNIEnv *env, jclass cls, jlong request)
{
    (void) env; (void) cls;
    req_cell *cell = (req_cell *) (intptr_t) request;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
        MPI_Request_free(&cell->req);
    }
    free(cell);
}

/* ---------------------------------------------------------------- allgather of variable-length long[] */

typedef struct {
    MPI_Comm comm;
    int size;
    int phase;          /* 1: sizes in flight, 2: values in flight, 3: done */
    int my_count;
    int *counts;
    int *displs;
    int64_t *mine;
    int64_t *all;
    MPI_Request req;
} allgather_op;

static void allgather_free(allgather_op *op)
{
    free(op->counts);
    free(op->displs);
    free(op->mine);
    free(op->all);
    free(op);
}

JNIEXPORT jlong JNICALL Java_dev_kvtransfer_mpi_MpiNative_allgatherStart(JNIEnv *env, jclass cls, jint comm,
                                                                         jlongArray values)
{
    (void) cls;
    allgather_op *op = calloc(1, sizeof(allgather_op));
    if (op == NULL) {
        throw_state(env, "out of native memory for an allgather");
        return 0;
    }
    op->comm = comm_of(comm);
    MPI_Comm_size(op->comm, &op->size);
    op->my_count = (*env)->GetArrayLength(env, values);
    op->counts = calloc((size_t) op->size, sizeof(int));
    op->displs = calloc((size_t) op->size, sizeof(int));
    op->mine = malloc(sizeof(int64_t) * (size_t) (op->my_count > 0 ? op->my_count : 1));
    if (op->counts == NULL || op->displs == NULL || op->mine == NULL) {
        allgather_free(op);
        throw_state(env, "out of native memory for an allgather");
        return 0;
    }
    /* the ids are copied once into a stable native buffer: a non-blocking collective outlives this call */
    (*env)->GetLongArrayRegion(env, values, 0, op->my_count, (jlong *) op->mine);
    int rc = MPI_Iallgather(&op->my_count, 1, MPI_INT, op->counts, 1, MPI_INT, op->comm, &op->req);
    if (rc != MPI_SUCCESS) {
        allgather_free(op);
        throw_mpi(env, rc, "MPI_Iallgather");
        return 0;
    }
    op->phase = 1;
    return (jlong) (intptr_t) op;
}

/* Advances the allgather; returns 1 when done, 0 while pending. */
JNIEXPORT jint JNICALL Java_dev_kvtransfer_mpi_MpiNative_allgatherProgress(JNIEnv *env, jclass cls, jlong handle)
{
    (void) cls;
    allgather_op *op = (allgather_op *) (intptr_t) handle;
    while (op->phase < 3) {
        int flag = 0;
        int rc = MPI_Test(&op->req, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            throw_mpi(env, rc, op->phase == 1 ? "MPI_Iallgather (sizes)" : "MPI_Iallgatherv (values)");
            return -1;
        }
        if (!flag) {
            return 0;
        }
        if (op->phase == 1) {
            long total = 0;
            for (int i = 0; i < op->size; i++) {
                op->displs[i] = (int) total;
                total += op->counts[i];
            }
            if (total > INT32_MAX) {
                throw_state(env, "allgather: more than 2^31-1 values in total");
                return -1;
            }
            op->all = malloc(sizeof(int64_t) * (size_t) (total > 0 ? total : 1));
            if (op->all == NULL) {
                throw_state(env, "out of native memory for an allgather");
                return -1;
            }
            rc = MPI_Iallgatherv(op->mine, op->my_count, MPI_INT64_T, op->all, op->counts, op->displs,
                                 MPI_INT64_T, op->comm, &op->req);
            if (rc != MPI_SUCCESS) {
                throw_mpi(env, rc, "MPI_Iallgatherv");
                return -1;
            }
            op->phase = 2;
        } else {
            op->phase = 3;
        }
    }
    return 1;
}

/* Returns the gathered arrays (one per member) and frees the operation; only after progress returned 1. */
JNIEXPORT jobjectArray JNICALL Java_dev_kvtransfer_mpi_MpiNative_allgatherResult(JNIEnv *env, jclass cls,
                                                                                 jlong handle)
{
    (void) cls;
    allgather_op *op = (allgather_op *) (intptr_t) handle;
    jobjectArray result = (*env)->NewObjectArray(env, op->size, long_array_class, NULL);
    if (result == NULL) {
        allgather_free(op);
        return NULL;
    }
    for (int i = 0; i < op->size; i++) {
        jlongArray one = (*env)->NewLongArray(env, op->counts[i]);
        if (one == NULL) {
            allgather_free(op);
            return NULL;
        }
        (*env)->SetLongArrayRegion(env, one, 0, op->counts[i], (const jlong *) (op->all + op->displs[i]));
        (*env)->SetObjectArrayElement(env, result, i, one);
        (*env)->DeleteLocalRef(env, one);
    }
    allgather_free(op);
    return result;
}

/* ---------------------------------------------------------------- host memory for tools and tests */

JNIEXPORT jlong JNICALL Java_dev_kvtransfer_mpi_MpiNative_allocate(JNIEnv *env, jclass cls, jlong bytes)
{
    (void) cls;
    void *p = NULL;
    if (posix_memalign(&p, 4096, (size_t) (bytes > 0 ? bytes : 1)) != 0) {
        throw_state(env, "posix_memalign failed");
        return 0;
    }
    return (jlong) (intptr_t) p;
}

JNIEXPORT void JNICALL Java_dev_kvtransfer_mpi_MpiNative_release(JNIEnv *env, jclass cls, jlong address)
{
    (void) env; (void) cls;
    free((void *) (intptr_t) address);
}

JNIEXPORT jobject JNICALL Java_dev_kvtransfer_mpi_MpiNative_wrap(JNIEnv *env, jclass cls, jlong address, jlong bytes)
{
    (void) cls;
    return (*env)->NewDirectByteBuffer(env, (void *) (intptr_t) address, bytes);
}
