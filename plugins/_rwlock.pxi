# Included by the Cython modules whose tables many request threads share.
# A readers-writer lock, writer-preferring on glibc (request threads alternate
# match and insert: never starve the writer).
#
# Two ways to take it, and no third, so it cannot deadlock with the GIL:
# * pb_rdlock / pb_wrlock inside a `with nogil:` block, released before the
#   block ends (the holder never waits for the GIL);
# * pb_rdlock_gil / pb_wrlock_gil with the GIL held: they try the lock, and
#   only if it is taken give up the GIL while they wait for it, so a holder
#   that needs the GIL back (one woken from the wait, or one running Python
#   code under the lock) gets it.
# Sub-microsecond calls use the second: releasing the GIL for them hands it to
# another request thread, and taking it back waits for that thread's next
# release - at two request threads that cost more than the call (sarp's
# routing on codeact at paper scale: 31 us per match with a release in every
# call, 7 us without).
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
    static inline void pb_rdlock_gil(pb_rwlock *x) {
        if (pthread_rwlock_tryrdlock(&x->l) == 0) return;
        Py_BEGIN_ALLOW_THREADS
        pthread_rwlock_rdlock(&x->l);
        Py_END_ALLOW_THREADS
    }
    static inline void pb_wrlock_gil(pb_rwlock *x) {
        if (pthread_rwlock_trywrlock(&x->l) == 0) return;
        Py_BEGIN_ALLOW_THREADS
        pthread_rwlock_wrlock(&x->l);
        Py_END_ALLOW_THREADS
    }
    static inline void pb_rwlock_destroy(pb_rwlock *x) { pthread_rwlock_destroy(&x->l); }
    """
    ctypedef struct pb_rwlock:
        pass
    int pb_rwlock_init(pb_rwlock *x) nogil
    void pb_rdlock(pb_rwlock *x) nogil
    void pb_wrlock(pb_rwlock *x) nogil
    void pb_unlock(pb_rwlock *x) nogil
    void pb_rdlock_gil(pb_rwlock *x)
    void pb_wrlock_gil(pb_rwlock *x)
    void pb_rwlock_destroy(pb_rwlock *x) nogil
