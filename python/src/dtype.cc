// SPDX-License-Identifier: Apache-2.0
// Element types: hurray's names, NumPy dtype objects, buffer-protocol formats.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "binding.h"

namespace hurray_py {
namespace {

struct NamedCode {
  uint8_t code;
  const char *prefix;  // name is prefix + bits unless fixed_bits != 0
  uint8_t fixed_bits;  // names that only exist at one width
};

const NamedCode kNamedCodes[] = {
    {0, "int", 0},
    {1, "uint", 0},
    {2, "float", 0},
    {3, "handle", 0},
    {4, "bfloat", 0},
    {5, "complex", 0},
    {6, "bool", 8},
    {7, "float8_e3m4", 8},
    {8, "float8_e4m3", 8},
    {9, "float8_e4m3b11fnuz", 8},
    {10, "float8_e4m3fn", 8},
    {11, "float8_e4m3fnuz", 8},
    {12, "float8_e5m2", 8},
    {13, "float8_e5m2fnuz", 8},
    {14, "float8_e8m0fnu", 8},
    {15, "float6_e2m3fn", 6},
    {16, "float6_e3m2fn", 6},
    {17, "float4_e2m1fn", 4},
};

// Matches a scalar dtype name ("float32", "float8_e4m3fn", "bool") exactly.
// Longest prefix wins, so "float8_e4m3fn" does not match "float8_e4m3".
bool parse_scalar_name(const char *name, hurray_dtype *out) {
  const NamedCode *best = nullptr;
  size_t best_len = 0;
  unsigned long bits = 0;
  for (const NamedCode &n : kNamedCodes) {
    size_t len = std::strlen(n.prefix);
    if (std::strncmp(name, n.prefix, len) != 0 || len < best_len) continue;
    const char *rest = name + len;
    if (n.fixed_bits != 0) {
      if (*rest != '\0') continue;
      best = &n, best_len = len, bits = n.fixed_bits;
    } else {
      char *end = nullptr;
      unsigned long v = std::strtoul(rest, &end, 10);
      if (*rest < '0' || *rest > '9' || *end != '\0' || v == 0 || v > 255) continue;
      best = &n, best_len = len, bits = v;
    }
  }
  if (best == nullptr) return false;
  *out = hurray_dtype{best->code, static_cast<uint8_t>(bits), 1};
  return true;
}

// hurray's own names, vector types "float32x4" included. No exception.
bool parse_hurray_name(const char *s, hurray_dtype *out) {
  char name[64];
  if (std::strlen(s) >= sizeof name) return false;
  std::snprintf(name, sizeof name, "%s", s);
  if (parse_scalar_name(name, out)) return true;
  char *x = std::strrchr(name, 'x');
  if (x != nullptr && x[1] >= '0' && x[1] <= '9') {
    char *end = nullptr;
    unsigned long lanes = std::strtoul(x + 1, &end, 10);
    *x = '\0';
    if (*end == '\0' && lanes >= 1 && lanes <= 65535 && parse_scalar_name(name, out)) {
      out->lanes = static_cast<uint16_t>(lanes);
      return true;
    }
  }
  return false;
}

// Reads a str attribute of a NumPy dtype into buf. False with an exception.
bool str_attr(PyObject *dt, const char *attr, char *buf, size_t n) {
  PyObject *v = PyObject_GetAttrString(dt, attr);
  if (v == nullptr) return false;
  const char *s = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : nullptr;
  if (s == nullptr) {
    if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "dtype.%s is not a str", attr);
    Py_DECREF(v);
    return false;
  }
  std::snprintf(buf, n, "%s", s);
  Py_DECREF(v);
  return true;
}

// True (and *none set) when dt.<attr> is None.
bool attr_is_none(PyObject *dt, const char *attr, bool *none) {
  PyObject *v = PyObject_GetAttrString(dt, attr);
  if (v == nullptr) return false;
  *none = v == Py_None;
  Py_DECREF(v);
  return true;
}

// True when dt's scalar type is one of ml_dtypes' (dt.type.__module__ is
// "ml_dtypes"). False, with no exception, when it cannot be read.
bool is_ml_dtypes(PyObject *dt) {
  PyObject *type = PyObject_GetAttrString(dt, "type");
  if (type == nullptr) {
    PyErr_Clear();
    return false;
  }
  PyObject *module = PyObject_GetAttrString(type, "__module__");
  Py_DECREF(type);
  if (module == nullptr) {
    PyErr_Clear();
    return false;
  }
  const bool yes =
      PyUnicode_Check(module) && PyUnicode_CompareWithASCIIString(module, "ml_dtypes") == 0;
  Py_DECREF(module);
  return yes;
}

// A NumPy dtype object -> hurray_dtype, as np.from_dlpack would map it back.
// *padded is set when the NumPy dtype keeps a sub-byte element in a byte of
// its own (ml_dtypes' int4, float4_e2m1fn, ...): DLPack's SUBBYTE_PADDED.
bool from_numpy_dtype(PyObject *dt, hurray_dtype *out, bool *padded) {
  *padded = false;
  char kind[8], byteorder[8], name[64];
  if (!str_attr(dt, "kind", kind, sizeof kind) ||
      !str_attr(dt, "byteorder", byteorder, sizeof byteorder) ||
      !str_attr(dt, "name", name, sizeof name)) {
    return false;
  }
  bool no_fields = true, no_sub = true;
  if (!attr_is_none(dt, "fields", &no_fields) || !attr_is_none(dt, "subdtype", &no_sub)) {
    return false;
  }
  PyObject *size_obj = PyObject_GetAttrString(dt, "itemsize");
  if (size_obj == nullptr) return false;
  long itemsize = PyLong_AsLong(size_obj);
  Py_DECREF(size_obj);
  if (itemsize == -1 && PyErr_Occurred()) return false;
  if (!no_fields || !no_sub) {
    PyErr_Format(PyExc_ValueError,
                 "NumPy dtype %R is structured or a subarray: DLPack has no "
                 "equivalent",
                 dt);
    return false;
  }
  if (byteorder[0] != '=' && byteorder[0] != '|') {
    PyErr_Format(PyExc_ValueError,
                 "NumPy dtype %R is not in native byte order: DLPack "
                 "describes native-order elements only",
                 dt);
    return false;
  }
  const long bits = itemsize * 8;
  bool ok = false;
  if (is_ml_dtypes(dt)) {
    // ml_dtypes types are known by name, whatever kind and itemsize they
    // report (float8_e5m2 says kind 'f' and itemsize 1, the others 'V';
    // complex32 is 'c' with 4 bytes): bfloat16, float8_*, float6_*,
    // float4_e2m1fn, int1/2/4, uint1/2/4, complex32 (two float16s, DLPack's
    // complex of 32 bits). Sub-byte types take one byte per element there.
    // Types without a DLPack code (bcomplex32, float8_e5m3fnu) are refused.
    if (parse_scalar_name(name, out)) {
      if (out->bits == bits) {
        ok = true;
      } else if (out->bits < 8 && itemsize == 1) {
        ok = true;
        *padded = true;
      }
    }
    if (!ok) {
      PyErr_Format(PyExc_ValueError,
                   "ml_dtypes dtype %R has no DLPack equivalent (DLPack 1.3's type codes: "
                   "include/hurray/dlpack.h, DLDataTypeCode)",
                   dt);
      return false;
    }
    return true;
  }
  switch (kind[0]) {
    case 'b': ok = itemsize == 1, *out = hurray_dtype{6, 8, 1}; break;
    case 'i':
      ok = bits >= 8 && bits <= 64, *out = hurray_dtype{0, static_cast<uint8_t>(bits), 1};
      break;
    case 'u':
      ok = bits >= 8 && bits <= 64, *out = hurray_dtype{1, static_cast<uint8_t>(bits), 1};
      break;
    case 'f':
      ok = bits == 16 || bits == 32 || bits == 64,
      *out = hurray_dtype{2, static_cast<uint8_t>(bits), 1};
      break;
    case 'c':
      ok = bits == 64 || bits == 128, *out = hurray_dtype{5, static_cast<uint8_t>(bits), 1};
      break;
    default:
      // Extension types (ml_dtypes: bfloat16, float8_e4m3fn, ...) by name,
      // when one element takes exactly the bits hurray's type has.
      ok = parse_scalar_name(name, out) && out->bits == bits && out->code >= 4 && out->code != 5 &&
           out->code != 6;
  }
  if (!ok) {
    PyErr_Format(PyExc_ValueError, "NumPy dtype %R has no DLPack equivalent", dt);
    return false;
  }
  return true;
}

PyObject *numpy_dtype_of(PyObject *obj) {
  PyObject *np = PyImport_ImportModule("numpy");
  if (np == nullptr) return nullptr;
  PyObject *dtype_type = PyObject_GetAttrString(np, "dtype");
  Py_DECREF(np);
  if (dtype_type == nullptr) return nullptr;
  PyObject *dt = PyObject_CallOneArg(dtype_type, obj);
  Py_DECREF(dtype_type);
  return dt;
}

}  // namespace

PyObject *dtype_name(hurray_dtype d) {
  char base[64];
  const NamedCode *named = nullptr;
  for (const NamedCode &n : kNamedCodes) {
    if (n.code == d.code) named = &n;
  }
  if (named == nullptr) {
    std::snprintf(base, sizeof base, "dtype(code=%u,bits=%u)", d.code, d.bits);
  } else if (named->fixed_bits != 0 && named->fixed_bits == d.bits) {
    std::snprintf(base, sizeof base, "%s", named->prefix);
  } else if (named->fixed_bits != 0) {
    std::snprintf(base, sizeof base, "%s(bits=%u)", named->prefix, d.bits);
  } else {
    std::snprintf(base, sizeof base, "%s%u", named->prefix, d.bits);
  }
  if (d.lanes != 1) return PyUnicode_FromFormat("%sx%u", base, static_cast<unsigned>(d.lanes));
  return PyUnicode_FromString(base);
}

bool parse_dtype(PyObject *obj, hurray_dtype *out) {
  uint64_t flags = 0;
  return parse_dtype(obj, out, &flags);
}

bool parse_dtype(PyObject *obj, hurray_dtype *out, uint64_t *flags) {
  *flags = 0;
  if (PyUnicode_Check(obj)) {
    const char *s = PyUnicode_AsUTF8(obj);
    if (s == nullptr) return false;
    if (parse_hurray_name(s, out)) return true;
  }
  // Anything else NumPy takes for a dtype: np.float32, np.dtype('<i8'), 'f4'.
  PyObject *dt = numpy_dtype_of(obj);
  if (dt != nullptr) {
    bool padded = false;
    bool ok = from_numpy_dtype(dt, out, &padded);
    Py_DECREF(dt);
    if (ok && padded) *flags = HURRAY_FLAG_SUBBYTE_PADDED;
    return ok;
  }
  if (PyUnicode_Check(obj)) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError,
                 "unknown dtype name %R (expected names like 'float32', 'bfloat16', "
                 "'float8_e4m3fn', 'bool', 'complex64', 'float32x4', or what numpy.dtype "
                 "accepts)",
                 obj);
  } else if (PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_ImportError)) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError,
                 "dtype must be a str such as 'float32' or a NumPy dtype, not %.100s",
                 Py_TYPE(obj)->tp_name);
  }
  return false;
}

PyObject *ml_dtypes_numpy_dtype(hurray_dtype d) {
  if (d.lanes != 1) return nullptr;
  switch (d.code) {  // what NumPy's own DLPack import takes
    case 0:
    case 1:
      if (d.bits == 8 || d.bits == 16 || d.bits == 32 || d.bits == 64) return nullptr;
      break;
    case 2:
      if (d.bits == 16 || d.bits == 32 || d.bits == 64) return nullptr;
      break;
    case 3: return nullptr;  // handles: nothing NumPy could hold
    case 5:
      if (d.bits == 64 || d.bits == 128) return nullptr;
      break;
    case 6:
      if (d.bits == 8) return nullptr;
      break;
    default: break;
  }
  PyObject *name = dtype_name(d);
  if (name == nullptr) return nullptr;
  PyObject *ml = PyImport_ImportModule("ml_dtypes");
  if (ml == nullptr) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError,
                 "NumPy has no dtype %U of its own; ml_dtypes provides it (pip install "
                 "ml_dtypes), and it could not be imported",
                 name);
    Py_DECREF(name);
    return nullptr;
  }
  PyObject *type = PyObject_GetAttr(ml, name);
  Py_DECREF(ml);
  if (type == nullptr) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "NumPy has no dtype %U, and ml_dtypes has none of that name",
                 name);
    Py_DECREF(name);
    return nullptr;
  }
  Py_DECREF(name);
  PyObject *dt = numpy_dtype_of(type);
  Py_DECREF(type);
  return dt;
}

const char *buffer_format(hurray_dtype d) {
  if (d.lanes != 1) return nullptr;
  switch (d.code) {
    case 0:  // int
      return d.bits == 8    ? "b"
             : d.bits == 16 ? "h"
             : d.bits == 32 ? "i"
             : d.bits == 64 ? "q"
                            : nullptr;
    case 1:  // uint
      return d.bits == 8    ? "B"
             : d.bits == 16 ? "H"
             : d.bits == 32 ? "I"
             : d.bits == 64 ? "Q"
                            : nullptr;
    case 2:  // float
      return d.bits == 16 ? "e" : d.bits == 32 ? "f" : d.bits == 64 ? "d" : nullptr;
    case 5:  // complex
      return d.bits == 64 ? "Zf" : d.bits == 128 ? "Zd" : nullptr;
    case 6:  // bool
      return d.bits == 8 ? "?" : nullptr;
    default: return nullptr;
  }
}

const char *device_name(int32_t type) {
  switch (type) {
    case HURRAY_DEVICE_CPU: return "cpu";
    case HURRAY_DEVICE_CUDA: return "cuda";
    case HURRAY_DEVICE_CUDA_HOST: return "cuda_host";
    case HURRAY_DEVICE_ROCM: return "rocm";
    case HURRAY_DEVICE_ROCM_HOST: return "rocm_host";
    case HURRAY_DEVICE_CUDA_MANAGED: return "cuda_managed";
    default: return "device";
  }
}

}  // namespace hurray_py
