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
#include <unistd.h>
#include <pthread.h>
#include <sys/types.h>

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

/* ---------------------------------------------------------------- a rank's child process */

extern char **environ;
static int detached_from_rank;

/* Reads /proc/<pid>/<what> whole (at most 64 MiB). Returns a malloc'd buffer and its length, or NULL. */
static char *read_proc(pid_t pid, const char *what, size_t *len)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/%s", (long) pid, what);
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf != NULL) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) {
            break;
        }
        if (cap >= (size_t) 64 << 20) {
            break;
        }
        char *bigger = realloc(buf, cap * 2 + 1);
        if (bigger == NULL) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    fclose(f);
    if (buf != NULL) {
        buf[n] = '\0';
        *len = n;
    }
    return buf;
}

/*
 * Whether this process merely inherited an MPI rank's environment from its parent (e.g. a child JVM that a
 * rank started with ProcessBuilder) instead of being launched as that rank: the parent's initial environment
 * carries the same PMIX_ID and the parent has libmpi mapped (a shell between mpirun and java has not).
 * MPI_Init with that environment would try to join the parent's job as the parent's rank.
 */
static int inherited_rank_environment(void)
{
    const char *id = getenv("PMIX_ID");
    if (id == NULL) {
        return 0;
    }
    pid_t ppid = getppid();
    size_t n = 0;
    char *envs = read_proc(ppid, "environ", &n);
    if (envs == NULL) {
        return 0;
    }
    char want[256];
    snprintf(want, sizeof want, "PMIX_ID=%s", id);
    int same = 0;
    for (size_t i = 0; i < n; i += strlen(envs + i) + 1) {
        if (strcmp(envs + i, want) == 0) {
            same = 1;
            break;
        }
    }
    free(envs);
    if (!same) {
        return 0;
    }
    char *maps = read_proc(ppid, "maps", &n);
    if (maps == NULL) {
        return 0;
    }
    int has_mpi = memmem(maps, n, "libmpi.so", 9) != NULL;
    free(maps);
    return has_mpi;
}

static int keep_variable(const char *entry)
{
    static const char *keep[] = {"OMPI_ALLOW_RUN_AS_ROOT=", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=",
                                 "OMPI_MCA_pmix_server_uri=", "OMPI_MCA_btl", "OMPI_MCA_pml", "OMPI_MCA_osc",
                                 "OMPI_MCA_oob_tcp_if_include=", NULL};
    for (int i = 0; keep[i] != NULL; i++) {
        if (strncmp(entry, keep[i], strlen(keep[i])) == 0) {
            return 1;
        }
    }
    return 0;
}

/* Removes the launcher's per-rank variables (OMPI_*, PMIX_*), keeping tunables, so MPI_Init runs as a singleton. */
static void detach_from_parent_rank(void)
{
    size_t count = 0;
    for (char **e = environ; *e != NULL; e++) {
        count++;
    }
    char **names = calloc(count + 1, sizeof(char *));
    size_t n = 0;
    for (char **e = environ; names != NULL && *e != NULL; e++) {
        if ((strncmp(*e, "OMPI_", 5) == 0 || strncmp(*e, "PMIX_", 5) == 0) && !keep_variable(*e)) {
            const char *eq = strchr(*e, '=');
            names[n++] = eq == NULL ? strdup(*e) : strndup(*e, (size_t) (eq - *e));
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (names[i] != NULL) {
            unsetenv(names[i]);
            free(names[i]);
        }
    }
    free(names);
    detached_from_rank = 1;
}

JNIEXPORT jboolean JNICALL Java_dev_kvtransfer_mpi_MpiNative_inheritedRankEnvironment(JNIEnv *env, jclass cls)
{
    (void) env; (void) cls;
    return inherited_rank_environment() ? JNI_TRUE : JNI_FALSE;
}

JNIEXPORT jboolean JNICALL Java_dev_kvtransfer_mpi_MpiNative_detachedFromParentRank(JNIEnv *env, jclass cls)
{
    (void) env; (void) cls;
    return detached_from_rank ? JNI_TRUE : JNI_FALSE;
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
        if (inherited_rank_environment()) {
            detach_from_parent_rank();
        }
        rc = MPI_Init_thread(NULL, NULL, required, &provided);
    }
    if (rc != MPI_SUCCESS) {
        throw_mpi(env, rc, "MPI_Init_thread");
        return -1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN); /* connect / accept report on SELF */
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
 * count, out[2] = MPI tag (source and tag may be MPI_ANY_*). Returns the message cell, or 0 when nothing
 * matched in time.
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
    int mtag = tag < 0 ? MPI_ANY_TAG : tag;
    int64_t until = spinNanos > 0 ? now_nanos() + spinNanos : 0;
    unsigned polls = 0;
    for (;;) {
        int rc = MPI_Improbe(src, mtag, c, &flag, &msg, &status);
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
    jlong values[3] = {status.MPI_SOURCE, count, status.MPI_TAG};
    (*env)->SetLongArrayRegion(env, out, 0, 3, values);
    MPI_Message *cell = malloc(sizeof(MPI_Message));
    if (cell == NULL) {
        throw_state(env, "out of native memory for an MPI message");
        return 0;
    }
    *cell = msg;
    return (jlong) (intptr_t) cell;
}

/*
 * Starts an envelope send: header and (inline) payload are copied into one private buffer, so the caller's
 * memory is free on return and the message is one MPI message (header first).
 */
JNIEXPORT jlong JNICALL Java_dev_kvtransfer_mpi_MpiNative_isendEnvelope(JNIEnv *env, jclass cls, jlong header,
                                                                        jint headerBytes, jlong payload,
                                                                        jint payloadBytes, jint dest, jint tag,
                                                                        jint comm)
{
    (void) cls;
    if (headerBytes < 0 || payloadBytes < 0 || (int64_t) headerBytes + payloadBytes > INT32_MAX) {
        throw_state(env, "envelope size out of range");
        return 0;
    }
    req_cell *cell = calloc(1, sizeof(req_cell));
    size_t total = (size_t) headerBytes + (size_t) payloadBytes;
    if (cell == NULL || (cell->bounce = malloc(total > 0 ? total : 1)) == NULL) {
        free(cell);
        throw_state(env, "out of native memory for an envelope");
        return 0;
    }
    memcpy(cell->bounce, (const void *) (intptr_t) header, (size_t) headerBytes);
    if (payloadBytes > 0) {
        memcpy((char *) cell->bounce + headerBytes, (const void *) (intptr_t) payload, (size_t) payloadBytes);
    }
    int rc = MPI_Isend(cell->bounce, (int) total, MPI_BYTE, dest, tag, comm_of(comm), &cell->req);
    if (rc != MPI_SUCCESS) {
        cell_free(cell);
        throw_mpi(env, rc, "MPI_Isend (envelope)");
        return 0;
    }
    return (jlong) (intptr_t) cell;
}

/*
 * Receives a matched message into address (exactly its probed count) and waits up to waitNanos for it.
 * Returns 1 when received; 0 when it did not complete in time: the request is then released to MPI, which
 * still owns the buffer (the caller must never reuse it).
 */
JNIEXPORT jint JNICALL Java_dev_kvtransfer_mpi_MpiNative_recvMatched(JNIEnv *env, jclass cls, jlong address,
                                                                    jint count, jlong message, jlong waitNanos)
{
    (void) cls;
    MPI_Message *msg = (MPI_Message *) (intptr_t) message;
    MPI_Request req;
    int rc = MPI_Imrecv((void *) (intptr_t) address, count, MPI_BYTE, msg, &req);
    free(msg);
    if (rc != MPI_SUCCESS) {
        throw_mpi(env, rc, "MPI_Imrecv");
        return -1;
    }
    int64_t until = now_nanos() + waitNanos;
    unsigned polls = 0;
    for (;;) {
        int flag = 0;
        rc = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            throw_mpi(env, rc, "MPI_Test (matched receive)");
            return -1;
        }
        if (flag) {
            return 1;
        }
        if (now_nanos() >= until) {
            MPI_Request_free(&req);
            return 0;
        }
        if ((++polls & 63) == 0) {
            sched_yield();
        }
    }
}

JNIEXPORT void JNICALL Java_dev_kvtransfer_mpi_MpiNative_copy(JNIEnv *env, jclass cls, jlong from, jlong to,
                                                             jlong bytes)
{
    (void) env; (void) cls;
    if (bytes > 0) {
        memcpy((void *) (intptr_t) to, (const void *) (intptr_t) from, (size_t) bytes);
    }
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

JNIEXPORT jlong JNICALL Java_dev_kvtransfer_mpi_MpiNative_addressOf(JNIEnv *env, jclass cls, jobject direct)
{
    (void) cls;
    return (jlong) (intptr_t) (*env)->GetDirectBufferAddress(env, direct);
}

/* ---------------------------------------------------------------- dynamic process management (links) */

/*
 * A link is an intercommunicator to one process of another MPI world (MPI_Comm_connect / MPI_Comm_accept over a
 * port, both sides on MPI_COMM_SELF), duplicated twice like the world (envelopes, data). Right after it forms,
 * both sides swap a 16-byte hello: their world id (8 ASCII hex digits) and their world rank.
 * out[0..5] = envelope comm, data comm, intercomm (c2f), remote world id, remote world rank, 1.
 */
typedef struct {
    jlong fields[6];
} link_info;

static int link_setup(MPI_Comm inter, const char *world, int rank, link_info *li)
{
    MPI_Comm env_comm, data_comm;
    MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
    if (MPI_Comm_dup(inter, &env_comm) != MPI_SUCCESS || MPI_Comm_dup(inter, &data_comm) != MPI_SUCCESS) {
        return -1;
    }
    MPI_Comm_set_errhandler(env_comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(data_comm, MPI_ERRORS_RETURN);
    char mine[16], theirs[16];
    memset(mine, 0, sizeof mine);
    memcpy(mine, world, strnlen(world, 8));
    memcpy(mine + 8, &rank, sizeof rank);
    if (MPI_Sendrecv(mine, 16, MPI_BYTE, 0, 1, theirs, 16, MPI_BYTE, 0, 1, inter, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        return -1;
    }
    char hex[9];
    memcpy(hex, theirs, 8);
    hex[8] = '\0';
    int remote_rank;
    memcpy(&remote_rank, theirs + 8, sizeof remote_rank);
    li->fields[0] = MPI_Comm_c2f(env_comm);
    li->fields[1] = MPI_Comm_c2f(data_comm);
    li->fields[2] = MPI_Comm_c2f(inter);
    li->fields[3] = (jlong) strtoul(hex, NULL, 16);
    li->fields[4] = remote_rank;
    li->fields[5] = 1;
    return 0;
}

static pthread_mutex_t accept_lock = PTHREAD_MUTEX_INITIALIZER;
static char accept_port[MPI_MAX_PORT_NAME];
static char accept_world[16];
static int accept_rank;
static int accept_running;
static link_info accepted[64];
static int accepted_count;
static int accept_errors;

static void *acceptor_main(void *arg)
{
    (void) arg;
    for (;;) {
        MPI_Comm inter;
        if (MPI_Comm_accept(accept_port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter) != MPI_SUCCESS) {
            pthread_mutex_lock(&accept_lock);
            accept_errors++;
            pthread_mutex_unlock(&accept_lock);
            continue;
        }
        link_info li;
        int ok = link_setup(inter, accept_world, accept_rank, &li) == 0;
        pthread_mutex_lock(&accept_lock);
        if (ok && accepted_count < 64) {
            accepted[accepted_count++] = li;
        } else {
            accept_errors++;
        }
        pthread_mutex_unlock(&accept_lock);
    }
    return NULL;
}

/*
 * Opens a port and starts the native acceptor thread (a pthread: MPI_Comm_accept cannot be cancelled, so it
 * blocks there for the life of the process, invisible to the JVM's thread list). Returns the port name.
 */
JNIEXPORT jstring JNICALL Java_dev_kvtransfer_mpi_MpiNative_dpmListen(JNIEnv *env, jclass cls, jstring world,
                                                                    jint rank)
{
    (void) cls;
    pthread_mutex_lock(&accept_lock);
    if (!accept_running) {
        int rc = MPI_Open_port(MPI_INFO_NULL, accept_port);
        if (rc != MPI_SUCCESS) {
            pthread_mutex_unlock(&accept_lock);
            throw_mpi(env, rc, "MPI_Open_port");
            return NULL;
        }
        const char *w = (*env)->GetStringUTFChars(env, world, NULL);
        snprintf(accept_world, sizeof accept_world, "%s", w);
        (*env)->ReleaseStringUTFChars(env, world, w);
        accept_rank = rank;
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, acceptor_main, NULL) != 0) {
            pthread_attr_destroy(&attr);
            pthread_mutex_unlock(&accept_lock);
            throw_state(env, "cannot start the MPI acceptor thread");
            return NULL;
        }
        pthread_attr_destroy(&attr);
        accept_running = 1;
    }
    pthread_mutex_unlock(&accept_lock);
    return (*env)->NewStringUTF(env, accept_port);
}

/* Takes one link the acceptor formed: returns 1 and fills out[6], or 0 when none is waiting. */
JNIEXPORT jint JNICALL Java_dev_kvtransfer_mpi_MpiNative_dpmAccepted(JNIEnv *env, jclass cls, jlongArray out)
{
    (void) cls;
    int got = 0;
    link_info li;
    pthread_mutex_lock(&accept_lock);
    if (accepted_count > 0) {
        li = accepted[0];
        memmove(accepted, accepted + 1, sizeof(link_info) * (size_t) (accepted_count - 1));
        accepted_count--;
        got = 1;
    }
    pthread_mutex_unlock(&accept_lock);
    if (got) {
        (*env)->SetLongArrayRegion(env, out, 0, 6, li.fields);
    }
    return got;
}

JNIEXPORT jboolean JNICALL Java_dev_kvtransfer_mpi_MpiNative_dpmListening(JNIEnv *env, jclass cls)
{
    (void) env; (void) cls;
    pthread_mutex_lock(&accept_lock);
    int r = accept_running;
    pthread_mutex_unlock(&accept_lock);
    return r ? JNI_TRUE : JNI_FALSE;
}

/* Connects to a port (blocks: MPI_Comm_connect has no timeout; the caller runs it on a helper thread). */
JNIEXPORT void JNICALL Java_dev_kvtransfer_mpi_MpiNative_dpmConnect(JNIEnv *env, jclass cls, jstring port,
                                                                   jstring world, jint rank, jlongArray out)
{
    (void) cls;
    const char *p = (*env)->GetStringUTFChars(env, port, NULL);
    const char *w = (*env)->GetStringUTFChars(env, world, NULL);
    char port_copy[MPI_MAX_PORT_NAME];
    char world_copy[16];
    snprintf(port_copy, sizeof port_copy, "%s", p);
    snprintf(world_copy, sizeof world_copy, "%s", w);
    (*env)->ReleaseStringUTFChars(env, port, p);
    (*env)->ReleaseStringUTFChars(env, world, w);
    MPI_Comm inter;
    int rc = MPI_Comm_connect(port_copy, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
    if (rc != MPI_SUCCESS) {
        throw_mpi(env, rc, "MPI_Comm_connect");
        return;
    }
    link_info li;
    if (link_setup(inter, world_copy, rank, &li) != 0) {
        throw_state(env, "MPI link set-up (dup / hello) failed");
        return;
    }
    (*env)->SetLongArrayRegion(env, out, 0, 6, li.fields);
}

/* ---------------------------------------------------------------- one-sided writes (MPI-3 RMA) */

/*
 * One dynamic window per process over MPI_COMM_WORLD, created right after init (collective) and kept in a
 * passive-target epoch for the process's life (MPI_Win_lock_all with MPI_MODE_NOCHECK). Registered memory is
 * attached to it (MPI_Win_attach, local); writers put at the region's absolute address and flush.
 */
static MPI_Win rma_window = MPI_WIN_NULL;

JNIEXPORT jint JNICALL Java_dev_kvtransfer_mpi_MpiNative_rmaCreate(JNIEnv *env, jclass cls)
{
    (void) cls;
    int rc = MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &rma_window);
    if (rc != MPI_SUCCESS) {
        rma_window = MPI_WIN_NULL;
        throw_mpi(env, rc, "MPI_Win_create_dynamic");
        return -1;
    }
    MPI_Win_set_errhandler(rma_window, MPI_ERRORS_RETURN);
    rc = MPI_Win_lock_all(MPI_MODE_NOCHECK, rma_window);
    if (rc != MPI_SUCCESS) {
        MPI_Win_free(&rma_window);
        rma_window = MPI_WIN_NULL;
        throw_mpi(env, rc, "MPI_Win_lock_all");
        return -1;
    }
    return 1;
}

JNIEXPORT void JNICALL Java_dev_kvtransfer_mpi_MpiNative_rmaFree(JNIEnv *env, jclass cls)
{
    (void) env; (void) cls;
    if (rma_window != MPI_WIN_NULL) {
        MPI_Win_unlock_all(rma_window);
        MPI_Win_free(&rma_window);
        rma_window = MPI_WIN_NULL;
    }
}

JNIEXPORT void JNICALL Java_dev_kvtransfer_mpi_MpiNative_rmaAttach(JNIEnv *env, jclass cls, jlong address, jlong bytes)
{
    (void) cls;
    int rc = MPI_Win_attach(rma_window, (void *) (intptr_t) address, (MPI_Aint) bytes);
    if (rc != MPI_SUCCESS) {
        throw_mpi(env, rc, "MPI_Win_attach");
    }
}

JNIEXPORT void JNICALL Java_dev_kvtransfer_mpi_MpiNative_rmaDetach(JNIEnv *env, jclass cls, jlong address)
{
    (void) cls;
    int rc = MPI_Win_detach(rma_window, (void *) (intptr_t) address);
    if (rc != MPI_SUCCESS) {
        throw_mpi(env, rc, "MPI_Win_detach");
    }
}

/* Starts puts of bytes from a local address to the target's absolute address, in pieces of at most 1 GiB. */
JNIEXPORT void JNICALL Java_dev_kvtransfer_mpi_MpiNative_rmaPut(JNIEnv *env, jclass cls, jlong from, jlong bytes,
                                                               jint rank, jlong target)
{
    (void) cls;
    const int64_t piece = (int64_t) 1 << 30;
    for (int64_t pos = 0; pos < bytes; pos += piece) {
        int count = (int) (bytes - pos < piece ? bytes - pos : piece);
        int rc = MPI_Put((const void *) (intptr_t) (from + pos), count, MPI_BYTE, rank, (MPI_Aint) (target + pos),
                         count, MPI_BYTE, rma_window);
        if (rc != MPI_SUCCESS) {
            throw_mpi(env, rc, "MPI_Put");
            return;
        }
    }
}

/* Completes every put of this process to rank, at the target too (remote completion). */
JNIEXPORT void JNICALL Java_dev_kvtransfer_mpi_MpiNative_rmaFlush(JNIEnv *env, jclass cls, jint rank)
{
    (void) cls;
    int rc = MPI_Win_flush(rank, rma_window);
    if (rc != MPI_SUCCESS) {
        throw_mpi(env, rc, "MPI_Win_flush");
    }
}
