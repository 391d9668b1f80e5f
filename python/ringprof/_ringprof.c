/* ringprof._ringprof: the annotation hot path of the Python package, on
 * libringprof's annotations compiled into this module (python/setup.py).
 *
 * annotate is a C type, so that `with annotate(...)` runs C only (its
 * construction, __enter__, __exit__), and a decorated function is an
 * object whose vectorcall brackets the call with a range: no Python frame
 * of ours on either path.  Annotations never raise for want of a daemon;
 * only a name that is not a str does. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>

#include "ringprof/ringprof.h"

/* An annotation name: the str, and its UTF-8 for libringprof. */
struct name {
	PyObject *str;      /* NULL: none given */
	PyObject *replaced; /* bytes, when str has lone surrogates; else NULL */
	const char *utf8;   /* str's own UTF-8 cache, or replaced's bytes */
};

static int name_set(struct name *n, PyObject *str)
{
	if (!PyUnicode_Check(str)) {
		PyErr_Format(PyExc_TypeError, "an annotation name is a str, not %s",
			     Py_TYPE(str)->tp_name);
		return -1;
	}
	/* Kept by str until it dies, and we hold str. */
	n->utf8 = PyUnicode_AsUTF8(str);
	if (!n->utf8) {
		PyErr_Clear();
		n->replaced = PyUnicode_AsEncodedString(str, "utf-8", "replace");
		if (!n->replaced)
			return -1;
		n->utf8 = PyBytes_AS_STRING(n->replaced);
	}
	Py_INCREF(str);
	n->str = str;
	return 0;
}

static void name_clear(struct name *n)
{
	Py_CLEAR(n->str);
	Py_CLEAR(n->replaced);
	n->utf8 = NULL;
}

/* The str of a name argument for instant/counter: str's own UTF-8, or
 * *tmp (a new bytes object the caller releases). */
static const char *name_utf8(PyObject *str, PyObject **tmp)
{
	struct name n = { 0 };
	if (name_set(&n, str) < 0)
		return NULL;
	Py_DECREF(n.str);
	*tmp = n.replaced;
	return n.utf8;
}

/* ---- a decorated function ---- */

typedef struct {
	PyObject_HEAD
	PyObject *func;
	struct name name;
	PyObject *dict; /* __name__, __wrapped__, ... (functools.update_wrapper) */
	PyObject *weakrefs; /* as functions have: caches may key on them */
	vectorcallfunc vectorcall;
} Annotated;

static PyTypeObject AnnotatedType;
static PyObject *update_wrapper; /* functools.update_wrapper */

static PyObject *annotated_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
				      PyObject *kwnames)
{
	Annotated *a = (Annotated *)self;
	ringprof_range_begin(a->name.utf8);
	PyObject *result = PyObject_Vectorcall(a->func, args, nargsf, kwnames);
	ringprof_range_end();
	return result;
}

/* func wrapped in a range called name (a str), with func's metadata. */
static PyObject *annotated_new(PyObject *func, PyObject *name)
{
	Annotated *a = PyObject_GC_New(Annotated, &AnnotatedType);
	if (!a)
		return NULL;
	a->name = (struct name){ 0 };
	a->dict = NULL;
	a->weakrefs = NULL;
	a->vectorcall = annotated_vectorcall;
	Py_INCREF(func);
	a->func = func;
	PyObject_GC_Track(a);
	if (name_set(&a->name, name) < 0) {
		Py_DECREF(a);
		return NULL;
	}
	PyObject *r = PyObject_CallFunctionObjArgs(update_wrapper, (PyObject *)a, func, NULL);
	if (!r) {
		Py_DECREF(a);
		return NULL;
	}
	Py_DECREF(r);
	return (PyObject *)a;
}

/* func named after its __qualname__. */
static PyObject *annotated_new_named(PyObject *func)
{
	PyObject *name = PyObject_GetAttrString(func, "__qualname__");
	if (!name)
		return NULL;
	PyObject *a = annotated_new(func, name);
	Py_DECREF(name);
	return a;
}

static int annotated_traverse(PyObject *self, visitproc visit, void *arg)
{
	Annotated *a = (Annotated *)self;
	Py_VISIT(a->func);
	Py_VISIT(a->dict);
	return 0;
}

static int annotated_clear(PyObject *self)
{
	Annotated *a = (Annotated *)self;
	Py_CLEAR(a->func);
	Py_CLEAR(a->dict);
	return 0;
}

static void annotated_dealloc(PyObject *self)
{
	PyObject_GC_UnTrack(self);
	if (((Annotated *)self)->weakrefs)
		PyObject_ClearWeakRefs(self);
	(void)annotated_clear(self);
	name_clear(&((Annotated *)self)->name);
	PyObject_GC_Del(self);
}

/* A method: bound like a function (Py_TPFLAGS_METHOD_DESCRIPTOR lets
 * obj.method() skip the bound method altogether). */
static PyObject *annotated_get(PyObject *self, PyObject *obj, PyObject *type)
{
	(void)type;
	if (obj == NULL || obj == Py_None) {
		Py_INCREF(self);
		return self;
	}
	return PyMethod_New(self, obj);
}

static PyObject *annotated_repr(PyObject *self)
{
	Annotated *a = (Annotated *)self;
	return PyUnicode_FromFormat("<ringprof.annotate(%R) of %R>", a->name.str, a->func);
}

/* Pickled by reference, as functions are (multiprocessing's spawn, ...):
 * its qualified name in its module finds this very object. */
static PyObject *annotated_reduce(PyObject *self, PyObject *unused)
{
	(void)unused;
	return PyObject_GetAttrString(self, "__qualname__");
}

static PyMethodDef annotated_methods[] = {
	{ "__reduce__", annotated_reduce, METH_NOARGS, NULL },
	{ 0 },
};

static PyGetSetDef annotated_getset[] = {
	{ "__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL },
	{ 0 },
};

static PyTypeObject AnnotatedType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "ringprof.annotated",
	.tp_doc = "A function whose calls are ranges on the calling thread's timeline.",
	.tp_basicsize = sizeof(Annotated),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
		    Py_TPFLAGS_METHOD_DESCRIPTOR,
	.tp_vectorcall_offset = offsetof(Annotated, vectorcall),
	.tp_call = PyVectorcall_Call,
	.tp_dictoffset = offsetof(Annotated, dict),
	.tp_weaklistoffset = offsetof(Annotated, weakrefs),
	.tp_descr_get = annotated_get,
	.tp_traverse = annotated_traverse,
	.tp_clear = annotated_clear,
	.tp_dealloc = annotated_dealloc,
	.tp_repr = annotated_repr,
	.tp_methods = annotated_methods,
	.tp_getset = annotated_getset,
};

/* ---- annotate ---- */

typedef struct {
	PyObject_HEAD
	struct name name;
} Annotate;

static PyTypeObject AnnotateType;

/* annotate(), annotate(name), annotate(name=...); annotate(func) is the
 * decorator without parentheses and returns the decorated function. */
static PyObject *annotate_make(PyObject *arg)
{
	if (arg && arg != Py_None && !PyUnicode_Check(arg) && PyCallable_Check(arg))
		return annotated_new_named(arg);
	Annotate *self = PyObject_New(Annotate, &AnnotateType);
	if (!self)
		return NULL;
	self->name = (struct name){ 0 };
	if (arg && arg != Py_None && name_set(&self->name, arg) < 0) {
		Py_DECREF(self);
		return NULL;
	}
	return (PyObject *)self;
}

static const char *const annotate_kwlist[] = { "name", NULL };

/* The type's own vectorcall: `annotate("x")` without an argument tuple. */
static PyObject *annotate_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf,
				     PyObject *kwnames)
{
	(void)type;
	Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
	Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
	if (nargs + nkw > 1 ||
	    (nkw == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0),
							  "name") != 0)) {
		PyErr_SetString(PyExc_TypeError, "ringprof.annotate() takes one argument, name");
		return NULL;
	}
	return annotate_make(nargs + nkw ? args[0] : NULL);
}

static PyObject *annotate_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
	(void)type;
	PyObject *arg = NULL;
	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:annotate",
					 (char **)annotate_kwlist, &arg))
		return NULL;
	return annotate_make(arg);
}

static void annotate_dealloc(PyObject *self)
{
	name_clear(&((Annotate *)self)->name);
	PyObject_Free(self);
}

static PyObject *annotate_enter(PyObject *self, PyObject *unused)
{
	(void)unused;
	Annotate *a = (Annotate *)self;
	if (!a->name.str) {
		PyErr_SetString(PyExc_TypeError,
				"ringprof.annotate() needs a name when used as a context "
				"manager: with ringprof.annotate(\"name\"): ...");
		return NULL;
	}
	ringprof_range_begin(a->name.utf8);
	Py_INCREF(self);
	return self;
}

static PyObject *annotate_exit(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	(void)self, (void)args, (void)nargs;
	ringprof_range_end();
	Py_RETURN_FALSE;
}

/* @annotate("name") and @annotate(): the decorator. */
static PyObject *annotate_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
	PyObject *func;
	if (kwargs && PyDict_GET_SIZE(kwargs)) {
		PyErr_SetString(PyExc_TypeError, "a ringprof.annotate decorator takes the "
				"function alone");
		return NULL;
	}
	if (!PyArg_ParseTuple(args, "O:annotate", &func))
		return NULL;
	Annotate *a = (Annotate *)self;
	return a->name.str ? annotated_new(func, a->name.str) : annotated_new_named(func);
}

static PyObject *annotate_repr(PyObject *self)
{
	Annotate *a = (Annotate *)self;
	return PyUnicode_FromFormat("ringprof.annotate(%R)", a->name.str ? a->name.str : Py_None);
}

static PyObject *annotate_name(PyObject *self, void *closure)
{
	(void)closure;
	PyObject *name = ((Annotate *)self)->name.str;
	name = name ? name : Py_None;
	Py_INCREF(name);
	return name;
}

static PyMethodDef annotate_methods[] = {
	{ "__enter__", annotate_enter, METH_NOARGS, "Begins the range." },
	{ 0 },
};

/* __exit__ needs no self (a range end closes the thread's innermost
 * range): a plain builtin in the type's dict, which the with statement
 * finds and calls without making a bound method first. */
static PyMethodDef annotate_exit_def = {
	"__exit__", (PyCFunction)(void (*)(void))annotate_exit, METH_FASTCALL, "Ends the range."
};

static PyGetSetDef annotate_getset[] = {
	{ "name", annotate_name, NULL, "The range's name, or None.", NULL },
	{ 0 },
};

static PyTypeObject AnnotateType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "ringprof.annotate",
	.tp_doc = "A named range on the calling thread's timeline.\n\n"
		  "    with ringprof.annotate(\"data\"):     # context manager\n"
		  "        ...\n"
		  "    @ringprof.annotate(\"step\")          # decorator\n"
		  "    @ringprof.annotate()                # named after func.__qualname__\n"
		  "    @ringprof.annotate                  # the same, without parentheses\n\n"
		  "Ranges nest per thread; an instance may be entered again and again.",
	.tp_basicsize = sizeof(Annotate),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_new = annotate_new,
	.tp_vectorcall = annotate_vectorcall,
	.tp_call = annotate_call,
	.tp_dealloc = annotate_dealloc,
	.tp_repr = annotate_repr,
	.tp_methods = annotate_methods,
	.tp_getset = annotate_getset,
};

/* ---- module functions ---- */

static PyObject *instant(PyObject *module, PyObject *name)
{
	(void)module;
	PyObject *tmp = NULL;
	const char *s = name_utf8(name, &tmp);
	if (!s)
		return NULL;
	ringprof_instant(s);
	Py_XDECREF(tmp);
	Py_RETURN_NONE;
}

static PyObject *counter(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
	(void)module;
	if (nargs != 2) {
		PyErr_Format(PyExc_TypeError, "counter() takes 2 arguments (name, value), "
			     "%zd given", nargs);
		return NULL;
	}
	double value = PyFloat_AsDouble(args[1]);
	if (value == -1.0 && PyErr_Occurred())
		return NULL;
	PyObject *tmp = NULL;
	const char *s = name_utf8(args[0], &tmp);
	if (!s)
		return NULL;
	ringprof_counter(s, value);
	Py_XDECREF(tmp);
	Py_RETURN_NONE;
}

static PyObject *connected(PyObject *module, PyObject *unused)
{
	(void)module, (void)unused;
	return PyBool_FromLong(ringprof_connected());
}

static PyObject *dropped(PyObject *module, PyObject *unused)
{
	(void)module, (void)unused;
	return PyLong_FromUnsignedLongLong(ringprof_dropped());
}

static PyMethodDef module_methods[] = {
	{ "instant", instant, METH_O, "A point event on the calling thread's timeline." },
	{ "counter", (PyCFunction)(void (*)(void))counter, METH_FASTCALL,
	  "A sample of a numeric series (loss, queue depth, ...)." },
	{ "connected", connected, METH_NOARGS,
	  "Whether the calling thread's annotations currently reach a daemon." },
	{ "dropped", dropped, METH_NOARGS,
	  "Annotations of the calling thread dropped because its ring was full." },
	{ 0 },
};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT,
	.m_name = "ringprof._ringprof",
	.m_doc = "The annotation hot path of ringprof, on libringprof's annotations.",
	.m_size = -1,
	.m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__ringprof(void)
{
	if (PyType_Ready(&AnnotateType) < 0 || PyType_Ready(&AnnotatedType) < 0)
		return NULL;
	PyObject *exit_fn = PyCFunction_New(&annotate_exit_def, NULL);
	int rc = exit_fn ? PyDict_SetItemString(AnnotateType.tp_dict, "__exit__", exit_fn) : -1;
	Py_XDECREF(exit_fn);
	if (rc < 0)
		return NULL;
	PyType_Modified(&AnnotateType);
	if (!update_wrapper) {
		PyObject *functools = PyImport_ImportModule("functools");
		if (!functools)
			return NULL;
		update_wrapper = PyObject_GetAttrString(functools, "update_wrapper");
		Py_DECREF(functools);
		if (!update_wrapper)
			return NULL;
	}
	PyObject *m = PyModule_Create(&module_def);
	if (!m)
		return NULL;
	if (PyModule_AddStringConstant(m, "__version__", RINGPROF_VERSION) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	Py_INCREF(&AnnotateType);
	if (PyModule_AddObject(m, "annotate", (PyObject *)&AnnotateType) < 0) {
		Py_DECREF(&AnnotateType);
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
