/* rkv_module.c — rkv._rkv, the CPython extension over librkv (include/rkv.h).
 *
 * The Python package `rkv` (python/rkv/__init__.py) re-exports what this
 * module defines: rkv.Client (client.c), the Pipeline a client opens
 * (pipeline.c), rkv.Item, and one exception class per rkv_status worth
 * telling apart (errors.c); fork.c keeps the Clients safe across fork().
 * This file puts the module together at import; rkv_py.h lists what the
 * files share.
 */
#include "rkv_py.h"

PyMODINIT_FUNC PyInit__rkv(void);

PyTypeObject *item_type;

static PyStructSequence_Field item_fields[] = {
    { "value", "the value (bytes)" },
    { "flags", "the flags the writer stored" },
    { "version", "the item's version, for cas()" },
    { "ttl_left", "seconds to expiry; 0 = never expires" },
    { NULL, NULL },
};

static PyStructSequence_Desc item_desc = {
    "rkv.Item",
    "What get_item() found: value, flags, version, ttl_left.",
    item_fields,
    4,
};

static struct PyModuleDef rkv_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "rkv._rkv",
    .m_doc = "librkv's CPython binding; import it as the package rkv.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__rkv(void)
{
    PyObject *m = PyModule_Create(&rkv_module);
    if (m == NULL)
        return NULL;
    if (fork_watch() < 0 || PyType_Ready(&client_type) < 0 || PyType_Ready(&pipeline_type) < 0 ||
        add_errors(m) < 0)
        goto fail;
    item_type = PyStructSequence_NewType(&item_desc);
    if (item_type == NULL || PyModule_AddObjectRef(m, "Item", (PyObject *)item_type) < 0 ||
        PyModule_AddObjectRef(m, "Client", (PyObject *)&client_type) < 0 ||
        PyModule_AddObjectRef(m, "Pipeline", (PyObject *)&pipeline_type) < 0 ||
        PyModule_AddIntConstant(m, "TTL_NEVER", (long)RKV_TTL_NEVER) < 0 ||
        PyModule_AddIntConstant(m, "KEY_MAX", KEY_MAX) < 0 ||
        PyModule_AddStringConstant(m, "LIBRKV_VERSION", RKV_VERSION_STRING) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
