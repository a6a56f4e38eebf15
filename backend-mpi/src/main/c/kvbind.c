/*
 * An LD_PRELOAD shim for mpirun and the ranks it starts: a bind() to the wildcard address goes to the address the
 * launcher names instead (KVTRANSFER_BIND_IPV4, KVTRANSFER_BIND_IPV6). Open MPI 4.1's out-of-band listener and its
 * TCP BTL bind the wildcard address whatever oob_tcp_if_include / btl_tcp_if_include say; this keeps a launch that
 * is told to stay on one interface on it. A bind to a named address, and every other call, is left alone.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_fn next;
    if (next == NULL) {
        next = (bind_fn) dlsym(RTLD_NEXT, "bind");
        if (next == NULL) {
            errno = ENOSYS;
            return -1;
        }
    }
    if (addr != NULL && addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *) addr;
        const char *to = getenv("KVTRANSFER_BIND_IPV4");
        if (in->sin_addr.s_addr == htonl(INADDR_ANY) && to != NULL && *to) {
            struct sockaddr_in copy = *in;
            if (inet_pton(AF_INET, to, &copy.sin_addr) != 1) {
                errno = EINVAL;
                return -1;
            }
            return next(fd, (const struct sockaddr *) &copy, sizeof copy);
        }
    } else if (addr != NULL && addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *) addr;
        const char *to = getenv("KVTRANSFER_BIND_IPV6");
        if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr) && to != NULL && *to) {
            struct sockaddr_in6 copy = *in6;
            if (inet_pton(AF_INET6, to, &copy.sin6_addr) != 1) {
                errno = EINVAL;
                return -1;
            }
            return next(fd, (const struct sockaddr *) &copy, sizeof copy);
        }
    }
    return next(fd, addr, len);
}
