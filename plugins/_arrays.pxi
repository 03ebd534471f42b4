# Included by the Cython modules that take block ids and metadata from Python:
# the C-level twins of plugins/strategy.as_block_ids / as_metas, returning the
# caller's array untouched when it is already in the right layout.

cdef cnp.ndarray as_carray(object obj, int typenum, int ndim, str what):
    """``obj`` as an aligned, native, C-contiguous array of ``typenum`` with ``ndim``
    dimensions (the caller's array untouched when it is one already), or ValueError
    naming ``what``."""
    cdef cnp.ndarray a
    if cnp.PyArray_Check(obj):
        a = <cnp.ndarray>obj
        if (cnp.PyArray_TYPE(a) == typenum and cnp.PyArray_NDIM(a) == ndim
                and cnp.PyArray_ISCARRAY_RO(a) and cnp.PyArray_ISNOTSWAPPED(a)):
            return a
    a = np.ascontiguousarray(obj, dtype=cnp.PyArray_DescrFromType(typenum))
    if cnp.PyArray_NDIM(a) != ndim:
        raise ValueError(f"{what} must be a {ndim}-D {(<object>a).dtype} array, got shape "
                         f"{(<object>a).shape}")
    return a


cdef cnp.ndarray as_ids(object obj):
    """``obj`` as a 1-D aligned, native, contiguous uint64 array (no copy if it is one)."""
    return as_carray(obj, cnp.NPY_UINT64, 1, "block ids")


cdef cnp.ndarray as_metas(object obj, Py_ssize_t n, Py_ssize_t meta_size):
    """``obj`` as a contiguous uint8 array of shape (n, meta_size), or ValueError."""
    cdef cnp.ndarray a
    if not (cnp.PyArray_Check(obj) and cnp.PyArray_TYPE(<cnp.ndarray>obj) == cnp.NPY_UINT8
            and cnp.PyArray_ISCARRAY_RO(<cnp.ndarray>obj)):
        obj = np.ascontiguousarray(obj, dtype=np.uint8)
    a = <cnp.ndarray>obj
    if (cnp.PyArray_NDIM(a) != 2 or cnp.PyArray_DIM(a, 0) != n
            or cnp.PyArray_DIM(a, 1) != meta_size):
        raise ValueError(f"metas must be a uint8 array of shape ({n}, {meta_size}), "
                         f"got shape {(<object>a).shape}")
    return a
