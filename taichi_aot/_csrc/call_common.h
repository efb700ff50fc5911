/* What the C call's files (setup.py's CALL_FILES: call_module.c and the files it #includes, one translation unit)
   share: Python's headers first, the system's, taichi_aot.h, and pyhelp.c's helpers. A private header: never
   handed to cffi. */
#ifndef TAICHI_AOT_CALL_COMMON_H
#define TAICHI_AOT_CALL_COMMON_H

#include <Python.h>

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "taichi_aot.h"

/* taichi_aot._native's functions (zero until _bind). */
static TaichiAotCallTable taichi_aot_api;

/* pyhelp.c's helpers (see there). */
static PyObject *dict_get(PyObject *dict, PyObject *key);
static PyObject *strong(PyObject *o);
static PyObject *call_keyword(PyObject *kwargs, PyObject *name);
static int weak_is(PyObject *ref, PyObject *value);
static void launcher_hand_over(void);

#endif
