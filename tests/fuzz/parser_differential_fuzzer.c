/* libFuzzer harness that holds the strict parser (flows/sources/_case_columns.c) to the record rules
 * and json.loads: Python is embedded, each block goes through the module's own `parse`, and
 * tests/fuzz/parser_oracle.py judges what it returns. A block the parser takes that the
 * rules refuse for its form, or a value read otherwise than json.loads reads it, aborts, and
 * libFuzzer saves the block. Built, like parser_memory_fuzzer.c, with ASan and UBSan over
 * the parser's source compiled in here (tests/fuzz/run.sh).
 *
 * FUZZ_PYTHON names the Python whose packages are used (the project's venv, where the
 * package is installed); PYTHONPATH holds tests/fuzz, the oracle's folder.
 */
#include "_case_columns.c"

#include <stdio.h>

#define MAX_LINE ((Py_ssize_t)64 << 20) /* MAX_RECORD_BYTES, transforms/records.py */

static PyObject *check; /* parser_oracle.check(block, parsed) */

static void fail(const char *what) {
    if (Py_IsInitialized() && PyErr_Occurred()) PyErr_Print();
    fprintf(stderr, "parser_differential_fuzzer: %s\n", what);
    abort();
}

/* Python started as FUZZ_PYTHON would start, so a venv's site-packages is on its path. */
static void start_python(void) {
    const char *python = getenv("FUZZ_PYTHON");
    if (!python) fail("FUZZ_PYTHON must be set (tests/fuzz/run.sh sets it)");
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    PyStatus status = PyConfig_SetBytesString(&config, &config.program_name, python);
    if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status)) fail(status.err_msg ? status.err_msg : "Python does not start");
    PyObject *oracle = PyImport_ImportModule("parser_oracle");
    if (!oracle) fail("parser_oracle does not import (is tests/fuzz on PYTHONPATH?)");
    check = PyObject_GetAttrString(oracle, "check");
    Py_DECREF(oracle);
    if (!check) fail("parser_oracle has no check");
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    start_python();
    PyObject *module = PyInit__case_columns(); /* sets the parser's C locale */
    if (!module) fail("the parser's module does not start");
    Py_DECREF(module);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    PyObject *args = Py_BuildValue("(y#n)", (const char *)data, (Py_ssize_t)size, MAX_LINE);
    if (!args) fail("no memory for the block");
    PyObject *parsed = parse(NULL, args);
    if (!parsed) fail("parse raised");
    PyObject *verdict = PyObject_CallFunctionObjArgs(check, PyTuple_GET_ITEM(args, 0), parsed, NULL);
    if (!verdict) fail("the parser and the rules disagree (the block is saved by libFuzzer)");
    Py_DECREF(verdict);
    Py_DECREF(parsed);
    Py_DECREF(args);
    return 0;
}
