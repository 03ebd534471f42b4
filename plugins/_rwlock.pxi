# Included by the Cython modules whose tables many request threads share.
# A readers-writer lock, writer-preferring on glibc (request threads alternate
# match and insert: never starve the writer).  Take it only with the GIL
# released and touch no Python object while holding it, so it cannot
# deadlock with the GIL.
cdef extern from *:
    """
    #include <pthread.h>
    typedef struct { pthread_rwlock_t l; } pb_rwlock;
    static int pb_rwlock_init(pb_rwlock *x) {
        pthread_rwlockattr_t a;
        int r;
        pthread_rwlockattr_init(&a);
    #if defined(__GLIBC__)
        /* request threads alternate match/insert: never starve the writer */
        pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    #endif
        r = pthread_rwlock_init(&x->l, &a);
        pthread_rwlockattr_destroy(&a);
        return r;
    }
    static inline void pb_rdlock(pb_rwlock *x) { pthread_rwlock_rdlock(&x->l); }
    static inline void pb_wrlock(pb_rwlock *x) { pthread_rwlock_wrlock(&x->l); }
    static inline void pb_unlock(pb_rwlock *x) { pthread_rwlock_unlock(&x->l); }
    static inline void pb_rwlock_destroy(pb_rwlock *x) { pthread_rwlock_destroy(&x->l); }
    """
    ctypedef struct pb_rwlock:
        pass
    int pb_rwlock_init(pb_rwlock *x) nogil
    void pb_rdlock(pb_rwlock *x) nogil
    void pb_wrlock(pb_rwlock *x) nogil
    void pb_unlock(pb_rwlock *x) nogil
    void pb_rwlock_destroy(pb_rwlock *x) nogil
